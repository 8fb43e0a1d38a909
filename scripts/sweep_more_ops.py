"""Sweep of the Liger rows 5, 7, 8 and Unsloth rows 9-11 operators (and their backward
operators): every kernel and variant over generated cases, each kernel run once per case and its
outputs judged in both modes. Prints accept / reject / uncertified counts per kernel and mode,
and the explanation of the first reject of each kernel; ``--faulty`` also sweeps the faulty
kernels (where rejects are the expected outcome).

    PYTHONPATH=$PWD python scripts/sweep_more_ops.py --cases 200 --out sweep_more_ops.json
    PYTHONPATH=$PWD python scripts/sweep_more_ops.py --backend gpu --cases 200 --out $OUT/more-h200.json

Cases cycle through the input-shift groups, the operator's formats and CI-sized shapes; the
example makers cycle the keyword parameters by seed.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
import traceback

import torch

from numoracle import backends, operators
from numoracle.check import check
from numoracle.strategies import GROUPS

OPS = ("rope", "jsd", "fused_linear_cross_entropy", "rms_layernorm", "cross_entropy_loss",
       "geglu_exact", "geglu_approx", "rms_layernorm_backward", "cross_entropy_loss_backward",
       "geglu_exact_backward", "geglu_approx_backward")
DT = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
SHAPES = ((1, 16), (3, 96), (8, 130), (4, 256), (2, 37))


def cases(op, n):
    groups = list(GROUPS)
    fmts = [f for f in op.domain.formats if f in DT]
    out = []
    for i in range(n):
        rows, cols = SHAPES[i % len(SHAPES)]
        m = max(op.domain.cols_multiple_of, 1)
        cols = min(max((cols // m) * m, op.domain.cols[0]), op.domain.cols[1])
        rows = min(max(rows, op.domain.rows[0]), op.domain.rows[1])
        out.append((2000 + i, groups[i % len(groups)], fmts[(i // len(groups)) % len(fmts)],
                    rows, cols))
    return out


def sweep_kernel(op, kernel, case_list, dev, backend):
    counts = {"statistical": {}, "fixed": {}, "error": 0, "uncertified_sites": {},
              "rejects_by_group": {}}
    first = None
    for seed, group, fmt, rows, cols in case_list:
        try:
            inputs, params = op.example(seed, dtype=DT[fmt], family=group, rows=rows, cols=cols)
            inputs = tuple(t.to(dev) for t in inputs)
            outs = kernel(*[t.clone() for t in inputs], **params)
            if dev == "cuda":
                torch.cuda.synchronize()
            for mode in ("statistical", "fixed"):
                v = check(op.reference, outs, inputs, params, mode=mode, backend=backend)
                counts[mode][v.status] = counts[mode].get(v.status, 0) + 1
                if v.status == "uncertified":
                    for s in v.certificate.failing or [None]:
                        key = f"{mode}: {s.label} ({s.kind})" if s is not None else f"{mode}: non-finite"
                        counts["uncertified_sites"][key] = counts["uncertified_sites"].get(key, 0) + 1
                if v.status == "reject" and mode == "statistical":
                    counts["rejects_by_group"][group] = counts["rejects_by_group"].get(group, 0) + 1
                if v.status == "reject" and first is None:
                    first = {"seed": seed, "group": group, "format": fmt, "shape": [rows, cols],
                             "params": {k: str(p) for k, p in params.items()}, "mode": mode,
                             "explain": v.explain()[:3000]}
        except Exception:
            counts["error"] += 1
            if first is None:
                first = {"seed": seed, "group": group, "format": fmt, "shape": [rows, cols],
                         "error": traceback.format_exc()[-2000:]}
    return counts, first


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--backend", default="interpreter")
    ap.add_argument("--cases", type=int, default=20)
    ap.add_argument("--ops", default=",".join(OPS))
    ap.add_argument("--kernels", default="", help="comma-separated kernel names (default: all)")
    ap.add_argument("--faulty", action="store_true", help="sweep the faulty kernels too")
    ap.add_argument("--out", default="")
    a = ap.parse_args(argv)
    backend = backends.select(a.backend)
    dev = backend.device
    report = {"backend": backend, "cases_per_kernel": a.cases, "torch": torch.__version__,
              "results": {}}
    bad = 0
    for name in a.ops.split(","):
        op = operators.get(name)
        cl = cases(op, a.cases)
        specs = dict(op.kernel_specs)
        if a.faulty:
            specs.update({f"faulty:{k}": v for k, v in op.faulty.items()})
        for kname in specs:
            if a.kernels and kname not in a.kernels.split(","):
                continue
            kernel = op.faulty_kernel(kname[7:]) if kname.startswith("faulty:") else op.kernels[kname]
            t0 = time.time()
            counts, first = sweep_kernel(op, kernel, cl, dev, backend)
            report["results"][f"{name}/{kname}"] = {"counts": counts, "first_reject": first,
                                                    "seconds": round(time.time() - t0, 1)}
            if not kname.startswith("faulty:"):
                bad += sum(counts[m].get("reject", 0) for m in ("statistical", "fixed")) + counts["error"]
            print(f"{name}/{kname}: statistical {counts['statistical']} fixed {counts['fixed']} "
                  f"errors {counts['error']} ({time.time() - t0:.1f}s)"
                  + (f" uncertified at {counts['uncertified_sites']}" if counts["uncertified_sites"] else ""),
                  flush=True)
            if kname.startswith("faulty:"):
                print(f"  rejected (statistical) by group: {counts['rejects_by_group']}", flush=True)
            if first is not None and not kname.startswith("faulty:"):
                print(json.dumps(first, indent=1)[:3000], flush=True)
    if a.out:
        with open(a.out, "w") as fh:
            json.dump(report, fh, indent=1)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
