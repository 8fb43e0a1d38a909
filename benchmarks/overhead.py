"""Where a compiled verdict's fixed cost goes, per (operator, size): the whole
``check`` call, the compiled function alone (with and without waiting for the
device), the time the device is busy, the number of kernels launched, and the
float64 reference beside them.  At 10^6 elements on a GPU the verdict is
mostly this fixed cost; the table says which part of it to attack.

    python benchmarks/overhead.py --device cuda --ops rms_norm,softmax --sizes 1e6,1e7 --out o.json
"""
from __future__ import annotations

import argparse
import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import run as B  # noqa: E402


def measure(op_name: str, n: int, device: str, reps: int, profile_to: str = "") -> dict:
    from numoracle import settings
    from numoracle.check import check
    from numoracle.verdict import compiled
    from numoracle.verdict.compiled.plan import struct
    settings.register_profile("bench", compile="always")
    settings.load_profile("bench")
    compiled.clear()
    op, inputs, params, outs = B.setup(op_name, n, device)

    def verdict():
        return check(op.reference, outs, inputs, params, mode="statistical")
    for _ in range(3):
        verdict()
    plans = compiled.plans()
    row = {"op": op_name, "n": n, "elements": inputs[0].numel(),
           "compiled": all(p.fn is not None and p.failed is None for p in plans)}
    row["ref64_s"] = B._time(lambda: B._ref64(op_name, inputs, params), device, reps)
    row["check_s"] = B._time(verdict, device, reps)
    row["check_status"] = verdict().status
    if plans and plans[0].fn is not None:
        plan = plans[0]
        tensors = []
        for x in list(inputs) + list(outs if isinstance(outs, (tuple, list)) else [outs]):
            tensors += struct(x)[1]
        row["fn_s"] = B._time(lambda: plan.fn(*tensors), device, reps)
        row["fn_launch_s"] = B._time(lambda: plan.fn(*tensors), device, reps, wait=False)
        row["fn_and_flags_s"] = B._time(lambda: plan.fn(*tensors)[1].tolist(), device, reps)
        row["cuda_graphs"] = plan.graphs
        row["copies_s"] = B._time(lambda: [t.clone() for t in tensors], device, reps)
        if hasattr(torch, "_foreach_copy_"):
            def foreach():
                kept = [torch.empty_like(t) for t in tensors]
                torch._foreach_copy_(kept, tensors)
            row["copies_foreach_s"] = B._time(foreach, device, reps)
        got = plan.fn(*tensors)
        real, plan.fn = plan.fn, (lambda *a: got)
        try:        # numoracle's own host time around the compiled function
            row["check_without_fn_s"] = B._time(verdict, device, reps)
            if profile_to:
                import cProfile
                import pstats
                pr = cProfile.Profile()
                pr.enable()
                for _ in range(50):
                    verdict()
                pr.disable()
                plan.fn = real
                pr2 = cProfile.Profile()
                pr2.enable()
                for _ in range(50):
                    verdict()
                pr2.disable()
                with open(profile_to, "a") as fh:
                    fh.write(f"==== {op_name} {n}: 50 verdicts without the compiled function\n")
                    pstats.Stats(pr, stream=fh).sort_stats("tottime").print_stats(25)
                    fh.write(f"==== {op_name} {n}: 50 verdicts\n")
                    pstats.Stats(pr2, stream=fh).sort_stats("tottime").print_stats(40)
        finally:
            plan.fn = real
    if device == "cuda":
        from torch.profiler import ProfilerActivity, profile
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            verdict()
            torch.cuda.synchronize()
        ev = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
        row["kernels"] = len(ev)
        row["device_busy_s"] = sum(e.device_time for e in ev) / 1e6
        per = {}
        for e in ev:
            per[e.name[:80]] = per.get(e.name[:80], 0.0) + e.device_time
        row["kernel_times_us"] = sorted(per.items(), key=lambda kv: -kv[1])
        B._ref64(op_name, inputs, params)
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            B._ref64(op_name, inputs, params)
            torch.cuda.synchronize()
        ev = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
        row["ref64_kernels"] = len(ev)
        row["ref64_device_busy_s"] = sum(e.device_time for e in ev) / 1e6
    for k in ("check_s", "fn_s", "fn_launch_s", "fn_and_flags_s", "check_without_fn_s"):
        if k in row:
            row[k.replace("_s", "_over_ref64")] = row[k] / row["ref64_s"]
    return row


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    ap.add_argument("--ops", default="rms_norm,softmax")
    ap.add_argument("--sizes", default="1e5,1e6")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--out")
    ap.add_argument("--profile", default="", help="append cProfile tables of 50 verdicts to this file")
    a = ap.parse_args(argv)
    rows = []
    for op in a.ops.split(","):
        for s in a.sizes.split(","):
            try:
                row = measure(op, int(float(s)), a.device, a.reps, a.profile)
            except Exception as exc:        # keep what was measured
                row = {"op": op, "n": int(float(s)), "error": f"{type(exc).__name__}: {exc}"}
            rows.append(row)
            brief = {k: (round(v * 1e6, 1) if k.endswith("_s") else round(v, 2) if isinstance(v, float) else v)
                     for k, v in row.items() if k != "kernel_names"}
            print(json.dumps(brief), flush=True)
            if a.out:
                with open(a.out, "w") as fh:
                    json.dump({"device": a.device, "rows": rows}, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
