"""Where a compiled verdict's time goes: the torch profiler's table for one
verdict (after the eager call and the compile), and the number of kernels it
launches.

    python benchmarks/profile_verdict.py rms_norm 1e6 [--device cuda] [--policy always|never]
"""
from __future__ import annotations

import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import run as B  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("op")
    ap.add_argument("n", type=float)
    ap.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    ap.add_argument("--policy", default="always", choices=("always", "never"))
    ap.add_argument("--rows", type=int, default=25)
    a = ap.parse_args(argv)
    from numoracle import settings
    settings.register_profile("bench", compile=a.policy)
    settings.load_profile("bench")
    from numoracle.check import check
    op, inputs, params, outs = B.setup(a.op, int(a.n), a.device)
    for _ in range(3):
        check(op.reference, outs, inputs, params)
    from torch.profiler import ProfilerActivity, profile
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if a.device == "cuda" else [])
    with profile(activities=acts) as prof:
        check(op.reference, outs, inputs, params)
        if a.device == "cuda":
            torch.cuda.synchronize()
    key = "self_cuda_time_total" if a.device == "cuda" else "self_cpu_time_total"
    print(prof.key_averages().table(sort_by=key, row_limit=a.rows, max_name_column_width=70))
    if a.device == "cuda":
        ev = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
        print(f"{len(ev)} GPU kernels, {sum(e.device_time for e in ev) / 1e3:.3f} ms of GPU time")
    return 0


if __name__ == "__main__":
    sys.exit(main())
