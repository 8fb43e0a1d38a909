"""Throughput of the campaign's correct stage: serial (in this process) against
the executors (local processes, Dask workers), and the check that every
executor's merged result equals the serial one (all fields but ``seconds``).

    PYTHONPATH=$PWD python scripts/executor_bench.py --backend interpreter --ops swiglu,rms_norm --cases 12 \
        --runs serial,local:2,dask:1,dask:2 --out executor_bench.json
    # one H200, Dask wheels unpacked on PYTHONPATH (scripts/dask_wheels.sh):
    PYTHONPATH=$PWD:$PWD/.whl/dask/site python scripts/executor_bench.py --backend gpu \
        --ops rms_norm,softmax,swiglu,layer_norm --cases 200 --runs serial,local:1,dask:1 \
        --out $OUT/executor_bench.json

For Dask the cluster's start (worker processes importing torch and numoracle)
is timed apart from the stage, and a warm-up unit per worker runs before the
clock starts ("warm"), so units/s compares work, not start-up; "cold" adds
them back.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time


def serial(names, n, backend):
    from numoracle import backends, operators
    from numoracle.studies.campaign import correct as C
    dev = backend.device
    out = {}
    for name in names:
        op = operators.get(name)
        cl = C.cases(op, n)
        for k in op.kernel_specs:
            try:
                kern = op.kernels[k]
            except Exception as exc:
                out[f"{name}/{k}"] = {"skipped": repr(exc)[:300]}
                continue
            out[f"{name}/{k}"] = C.sweep_kernel(op, k, kern, cl, backend, dev)
    return out


def _device(backend):
    if backend == "gpu":
        import torch
        return f"{torch.cuda.device_count()} x {torch.cuda.get_device_name()}"
    return f"cpu ({os.cpu_count()} cores)"


def strip(d, exact=True):
    """Everything but ``seconds``; without exact medians (sweep_kernel lacking
    ``raw``), the medians of kernels run as several units are left out."""
    def one(v):
        v = {kk: vv for kk, vv in v.items() if kk != "seconds"}
        if not exact:
            def nomed(s):
                return None if s is None else {a: b for a, b in s.items() if a != "median"}
            for key in ("width_ulps", "accepted_width_ulps"):
                if key in v:
                    v[key] = {m: nomed(s) for m, s in v[key].items()}
            if "assert_close_width_ulps" in v:
                v["assert_close_width_ulps"] = nomed(v["assert_close_width_ulps"])
        return v
    return {k: one(v) for k, v in d.items()}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--backend", default="interpreter", choices=("interpreter", "gpu"))
    p.add_argument("--ops", default="swiglu,rms_norm")
    p.add_argument("--cases", type=int, default=12)
    p.add_argument("--chunk", type=int, default=None, help="cases per unit (default: one unit per group)")
    p.add_argument("--runs", default="serial,local:2,dask:1,dask:2",
                   help="comma-separated: serial, local:N (N processes; 0 = inline), dask:N (N workers)")
    p.add_argument("--out", default=None)
    args = p.parse_args(argv)
    from numoracle import backends
    from numoracle.studies.executors.campaign import correct_units, run_correct_stage, unit_cases
    backend = backends.select(args.backend)
    names = [o for o in args.ops.split(",") if o]
    units = correct_units(names, args.cases, backend, chunk=args.chunk)
    n_cases_total = sum(len(unit_cases(u)) for u in units)
    rows, ref = [], None
    # warm this process first (kernel modules, interpreter), so 'serial' is warm like the others
    serial(names, 1, backend)
    for run in args.runs.split(","):
        kind, _, n = run.partition(":")
        n = int(n) if n else None
        row = {"run": run, "units": len(units), "cases": n_cases_total}
        if kind == "serial":
            t = time.time()
            res = serial(names, args.cases, backend)
            row["seconds"] = round(time.time() - t, 2)
            ref = res
        elif kind == "local":
            t = time.time()
            data = {}
            res = run_correct_stage(names, args.cases, backend, "local", None, None, data=data, workers=n,
                                    chunk=args.chunk, log=lambda s: None)
            row["seconds"] = round(time.time() - t, 2)
            row["note"] = "includes spawning the processes" if n else "inline"
        elif kind == "dask":
            import distributed

            from numoracle.studies.executors.core import call_unit, start_cluster, wait_for_workers
            t = time.time()
            cluster = start_cluster(backend, n)
            client = distributed.Client(cluster)
            wait_for_workers(client, len(cluster.workers))
            row["start_seconds"] = round(time.time() - t, 2)
            t = time.time()
            # one unit of every kernel on every worker: each kernel's first interpretation is the slow one
            first = {}
            for u in correct_units(names, 1, backend):
                first.setdefault(u.key, u)
            from numoracle.studies.executors.campaign import run_correct_unit
            ws = list(client.scheduler_info()["workers"])
            client.gather([client.submit(call_unit, run_correct_unit, u, workers=[w], pure=False)
                           for u in first.values() for w in ws])
            row["warmup_seconds"] = round(time.time() - t, 2)
            t = time.time()
            data = {}
            res = run_correct_stage(names, args.cases, backend, "dask", None, None, data=data, client=client,
                                    chunk=args.chunk, log=lambda s: None)
            row["seconds"] = round(time.time() - t, 2)
            row["workers"] = len(ws)
            row["dashboard"] = data["executor"]["correct"]["dashboard"]
            client.close()
            cluster.close()
        else:
            raise SystemExit(f"--runs {run!r}: expected serial, local:N or dask:N")
        row["units_per_s"] = round(len(units) / row["seconds"], 3)
        row["cases_per_s"] = round(n_cases_total / row["seconds"], 3)
        if "start_seconds" in row:
            cold = row["seconds"] + row["start_seconds"] + row["warmup_seconds"]
            row["cold_cases_per_s"] = round(n_cases_total / cold, 3)
        if ref is not None and kind != "serial":
            exact = data["executor"]["correct"]["exact_medians"]
            row["exact_medians"] = exact
            a, b = strip(ref, exact), strip(res, exact)
            row["equals_serial"] = a == b
            if a != b:
                row["differences"] = {k: {f: {"serial": a[k].get(f), "run": (b.get(k) or {}).get(f)}
                                          for f in a[k] if a[k].get(f) != (b.get(k) or {}).get(f)}
                                      for k in a if a[k] != b.get(k)}
        print(json.dumps(row), flush=True)
        rows.append(row)
        out = {"backend": backend, "ops": names, "cases_per_kernel": args.cases, "chunk": args.chunk,
               "cpu_count": os.cpu_count(), "loadavg": os.getloadavg(), "device": _device(backend), "rows": rows}
        if args.out:                      # after every run: a run cut short keeps the rows it finished
            os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
            tmp = args.out + ".tmp"
            with open(tmp, "w") as fh:
                json.dump(out, fh, indent=1)
            os.replace(tmp, args.out)
    bad = [r["run"] for r in rows if r.get("equals_serial") is False]
    if bad:
        print(f"results differ from serial: {bad}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
