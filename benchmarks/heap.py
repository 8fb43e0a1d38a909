"""Eager verdicts with and without ``settings.keep_cpu_memory`` (numoracle.heap), side by
side: each setting in its own fresh process (the malloc change lasts a process), the two
interleaved, best of ``--reps`` passes over the same cases; ms per verdict and minor page
faults per verdict.

    python benchmarks/heap.py --ops rms_norm,layer_norm --shapes 32x2048,64x4096,4x500
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def child(op_name: str, rows: int, cols: int, cases: int, reps: int) -> dict:
    import resource
    import time
    import torch
    sys.path.insert(0, HERE)
    import throughput as T
    import numoracle as no
    from numoracle.check import check
    T.shapes = lambda o, n, s: [(rows, cols)] * n
    op, cs = T.make_cases(op_name, cases, 1)
    with no.settings(compile="never"):
        for inputs, params, outs in cs[:3]:
            check(op.reference, outs, inputs, params)
        best, faults = float("inf"), None
        for _ in range(reps):
            f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
            t = time.perf_counter()
            for inputs, params, outs in cs:
                check(op.reference, outs, inputs, params)
            dt = (time.perf_counter() - t) / cases
            if dt < best:
                best = dt
                faults = (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0) / cases
    return {"op": op_name, "shape": [rows, cols], "ms": best * 1e3, "faults": faults,
            "keep_cpu_memory": no.settings.default.keep_cpu_memory, "threads": torch.get_num_threads()}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ops", default="rms_norm,layer_norm,softmax,cross_entropy")
    ap.add_argument("--shapes", default="4x500,32x2048,64x4096")
    ap.add_argument("--cases", type=int, default=20)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--out", default="")
    a = ap.parse_args(argv)
    rows = []
    print(f"{'operator':14s} {'shape':>9s} {'kept ms':>8s} {'faults':>7s} {'malloc ms':>9s} {'faults':>7s} {'ratio':>6s}")
    for op in a.ops.split(","):
        for shape in a.shapes.split(","):
            r, c = map(int, shape.split("x"))
            got = {}
            for keep in ("1", "0"):
                env = dict(os.environ, NUMORACLE_KEEP_CPU_MEMORY=keep)
                code = ("import json, sys; sys.path.insert(0, %r); import heap; "
                        "print('@@' + json.dumps(heap.child(%r, %d, %d, %d, %d)))" % (HERE, op, r, c, a.cases, a.reps))
                p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
                line = [x for x in p.stdout.splitlines() if x.startswith("@@")]
                got[keep] = json.loads(line[0][2:]) if line else {"error": p.stderr[-500:]}
            k, m = got["1"], got["0"]
            rows.append({"kept": k, "malloc": m})
            if "error" in k or "error" in m:
                print(op, shape, "error", k.get("error"), m.get("error"))
                continue
            print(f"{op:14s} {shape:>9s} {k['ms']:8.2f} {k['faults']:7.0f} {m['ms']:9.2f} {m['faults']:7.0f} "
                  f"{m['ms'] / k['ms']:6.2f}", flush=True)
    if a.out:
        with open(a.out, "w") as fh:
            json.dump({"command": " ".join(sys.argv), "rows": rows}, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
