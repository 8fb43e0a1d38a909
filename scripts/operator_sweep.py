"""Every registered operator's kernels (correct + behaviour-preserving variants)
over generated cases, judged in both modes on one backend (the "correct
kernels" stage of ``numoracle campaign``, on its own).

    python scripts/operator_sweep.py --backend interpreter --cases 200 --out sweep.json
    python scripts/operator_sweep.py --backend gpu --cases 200 --out $OUT/sweep-h200.json
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time

import torch

from numoracle import backends, operators
from numoracle.studies.campaign import correct


def _unit(args):
    """One kernel's sweep in a worker process (spawned: CUDA does not survive fork)."""
    name, kname, n, backend_name = args
    from numoracle import backends as B, operators as O
    backend = B.select(backend_name)
    dev = B.device(backend)
    op = O.get(name)
    try:
        kernel = op.kernels[kname]
    except Exception as exc:
        return f"{name}/{kname}", {"skipped": repr(exc)[:300]}
    return f"{name}/{kname}", correct.sweep_kernel(op, kname, kernel, correct.cases(op, n), backend, dev)


def _parallel(names, n, backend, jobs, log, save=None):
    import multiprocessing as mp
    units = [(name, k, n, backend) for name in names for k in operators.get(name).kernel_specs]
    results = {}
    with mp.get_context("spawn").Pool(jobs) as pool:
        for key, res in pool.imap_unordered(_unit, units):
            results[key] = res
            if save:
                save(results)
            if "counts" in res:
                log(f"{key}: stat {res['counts']['statistical']} fixed {res['counts']['fixed']} "
                    f"errors {res['errors']} ({res['seconds']}s)")
            else:
                log(f"{key}: skipped {res['skipped']}")
    return dict(sorted(results.items()))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--backend", default="interpreter")
    ap.add_argument("--cases", type=int, default=20)
    ap.add_argument("--ops", default="", help="comma-separated operator names (default: all)")
    ap.add_argument("--out", default="")
    ap.add_argument("--jobs", type=int, default=1, help="worker processes (kernels are spread over them)")
    a = ap.parse_args(argv)
    backend = backends.select(a.backend)
    dev = backend.device
    names = a.ops.split(",") if a.ops else operators.names()
    t0 = time.time()
    report = {"backend": backend, "device": torch.cuda.get_device_name() if dev == "cuda" else "cpu",
              "torch": torch.__version__, "python": platform.python_version(), "cases_per_kernel": a.cases,
              "date": time.strftime("%Y-%m-%d"),
              "jobs": a.jobs}
    log = (lambda s: print(s, flush=True))

    def save(results):          # after every kernel: a run cut short keeps what it finished
        if a.out:
            report["results"] = dict(sorted(results.items()))
            report["seconds"] = round(time.time() - t0, 1)
            with open(a.out + ".tmp", "w") as fh:
                json.dump(report, fh, indent=1)
            os.replace(a.out + ".tmp", a.out)

    report["results"] = (_parallel(names, a.cases, backend, a.jobs, log, save) if a.jobs > 1
                         else correct.run(names, a.cases, backend, dev, log=log))
    report["seconds"] = round(time.time() - t0, 1)
    if a.out:
        with open(a.out, "w") as fh:
            json.dump(report, fh, indent=1)
    bad = sum(r.get("counts", {}).get(m, {}).get("reject", 0) for r in report["results"].values()
              for m in correct.MODES)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
