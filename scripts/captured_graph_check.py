#!/usr/bin/env python3
"""Compiled verdicts replayed as a CUDA graph (``numoracle.verdict.compiled.graphs.Captured``) on changing outputs:
per operator, one signature judges its correct kernel's outputs and each faulty kernel's,
interleaved and twice over, eagerly and compiled (``always``, the plan never cleared, so
every call after the first two replays the graph captured on the first outputs).  Every
status and rejected mask must equal the eager one.

    PYTHONPATH=$PWD python scripts/captured_graph_check.py --out $OUT/captured.json   # CUDA

Exit status 1 when any differs."""
import argparse
import json
import sys
import time

import torch

from numoracle import backends, operators, settings
from numoracle.verdict import compiled
from numoracle.check import check

OPS = ("rms_norm", "layer_norm", "softmax", "cross_entropy", "per_token_group_quant_fp8")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ops", default=",".join(OPS))
    ap.add_argument("--rows", type=int, default=64)
    ap.add_argument("--cols", type=int, default=4096)
    ap.add_argument("--out", default="")
    a = ap.parse_args(argv)
    backends.select("gpu")
    report, bad = {}, 0
    for name in a.ops.split(","):
        op = operators.get(name)
        inputs, params = op.example(5, dtype=torch.bfloat16, family="calibration", rows=a.rows, cols=a.cols)
        inputs = tuple(t.cuda() if isinstance(t, torch.Tensor) else t for t in inputs)
        kernels = [("correct", op.kernels["correct"])] + [(f, op.faulty_kernel(f)) for f in sorted(op.faulty)]
        outs = [(k, f(*[t.clone() for t in inputs], **params)) for k, f in kernels]
        order = [outs[0]] + [o for pair in zip(outs[1:], [outs[0]] * len(outs)) for o in pair]
        order = order * 2
        got = {}
        for policy in ("never", "always"):
            compiled.clear()
            t = time.perf_counter()
            got[policy] = []
            for k, y in order:
                v = check(op.reference, y, inputs, params, backend="gpu", settings=settings(compile=policy, cpu_verdict_max_elements=0))
                got[policy].append((k, v.status, [o.rejected.cpu().clone() for o in v.outputs]))
            torch.cuda.synchronize()
            got[policy + "_s"] = time.perf_counter() - t
        plans = compiled.plans()
        same = [a_[1] == b_[1] and all(torch.equal(x, y) for x, y in zip(a_[2], b_[2]))
                for a_, b_ in zip(got["never"], got["always"])]
        bad += not all(same)
        report[name] = {"cases": [(k, s) for k, s, _ in got["never"]], "same": all(same),
                        "differing": [i for i, s in enumerate(same) if not s],
                        "captured": [type(p.fn).__name__ == "Captured" for p in plans],
                        "failed": [p.failed for p in plans], "eager_s": got["never_s"],
                        "compiled_s": got["always_s"]}
        print(name, "same" if all(same) else "DIFFERENT", report[name]["captured"], report[name]["failed"],
              flush=True)
    text = json.dumps(report, indent=1)
    if a.out:
        with open(a.out, "w") as f:
            f.write(text)
    else:
        print(text)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
