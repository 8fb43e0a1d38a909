"""Where each exp call of a backend overflows to +inf (calculus.functions.FP32_EXP_INF,
FP32_EXP2_INF): every fp32 argument of [88.70, 89.0] (exp's calls) and of [127.9, 128.5]
(tl.exp2), and samples up to fp32's largest; the largest argument with a finite result, the
smallest with +inf, and whether every argument from the calculus's threshold on gave +inf.

    PYTHONPATH=$PWD python scripts/exp_overflow_probe.py interpreter|gpu > OUT.json

Exit 1 if any argument at or past the threshold returned anything but +inf."""
import json
import sys
import time

import numpy as np

from numoracle.calculus.functions import FP32_EXP2_INF, FP32_EXP_INF, FP32_EXP2_LIMIT, FP32_EXP_LIMIT
from numoracle.mathlib.calibrate import Runner


def every_fp32(lo: float, hi: float) -> np.ndarray:
    a, b = np.array([lo, hi], np.float32).view(np.int32)
    return np.arange(a, b + 1, dtype=np.int32).view(np.float32)


def main(backend: str) -> int:
    t0 = time.time()
    run = Runner(backend)
    far = np.geomspace(90.0, 3.0e38, 4096).astype(np.float32)
    probes = {"tl.exp": (every_fp32(88.70, 89.0), FP32_EXP_LIMIT, FP32_EXP_INF, far),
              "tl.exp2(x * log2e)": (every_fp32(88.70, 89.0), FP32_EXP_LIMIT, FP32_EXP_INF, far),
              "tl.exp2": (every_fp32(127.9, 128.5), FP32_EXP2_LIMIT, FP32_EXP2_INF,
                          np.geomspace(129.0, 3.0e38, 4096).astype(np.float32))}
    out = {"backend": backend, "device": run.device_name(), "calls": {}}
    bad = 0
    for call, (dense, limit, inf_from, sparse) in probes.items():
        x = np.concatenate([dense, sparse])
        y = run(call, x)
        finite = np.isfinite(y)
        past = x >= inf_from
        wrong = past & ~(y == np.inf)
        bad += int(wrong.sum())
        out["calls"][call] = {
            "arguments": int(x.size), "dense_range": [float(dense[0]), float(dense[-1])],
            "largest_finite_at": float(x[finite].max()) if finite.any() else None,
            "smallest_inf_at": float(x[y == np.inf].min()) if (y == np.inf).any() else None,
            "domain_limit": limit, "inf_from": inf_from,
            "at_or_past_inf_from": int(past.sum()), "not_inf_there": int(wrong.sum()),
            "between_limit_and_inf_from": {"arguments": int(((x > limit) & ~past).sum()),
                                           "finite": int(((x > limit) & ~past & finite).sum())},
        }
    out["seconds"] = round(time.time() - t0, 1)
    import torch
    import triton
    out["versions"] = {"torch": torch.__version__, "triton": triton.__version__}
    print(json.dumps(out, indent=1))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "interpreter"))
