"""Every registered operator's kernels (correct + behaviour-preserving variants)
over generated cases, judged in both modes on one backend (the "correct
kernels" stage of ``numoracle campaign``, on its own).

    python scripts/operator_sweep.py --backend interpreter --cases 200 --out sweep.json
    python scripts/operator_sweep.py --backend gpu --cases 200 --out $OUT/sweep-h200.json
"""
from __future__ import annotations

import argparse
import json
import platform
import sys
import time

import torch

from numoracle import backends, operators
from numoracle.campaign import correct


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--backend", default="interpreter")
    ap.add_argument("--cases", type=int, default=20)
    ap.add_argument("--ops", default="", help="comma-separated operator names (default: all)")
    ap.add_argument("--out", default="")
    a = ap.parse_args(argv)
    backend = backends.select(a.backend)
    dev = backends.device(backend)
    names = a.ops.split(",") if a.ops else operators.names()
    t0 = time.time()
    report = {"backend": backend, "device": torch.cuda.get_device_name() if dev == "cuda" else "cpu",
              "torch": torch.__version__, "python": platform.python_version(), "cases_per_kernel": a.cases,
              "date": time.strftime("%Y-%m-%d"),
              "results": correct.run(names, a.cases, backend, dev, log=lambda s: print(s, flush=True))}
    report["seconds"] = round(time.time() - t0, 1)
    if a.out:
        with open(a.out, "w") as fh:
            json.dump(report, fh, indent=1)
    bad = sum(r.get("counts", {}).get(m, {}).get("reject", 0) for r in report["results"].values()
              for m in correct.MODES)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
