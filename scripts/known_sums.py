"""Sums of known values settle (docs/design.md §4, "Settling"): a user's fused residual add and
RMSNorm (tests/fixtures/user_add_norm.py) on Triton's interpreter, the correct kernel and its two
faulty ones over drawn cases, in both modes.

    python scripts/known_sums.py N OUT.json     # N seeds x 2 formats x 4 input families

Run with the numoracle to measure first on the path (a worktree of the commit before the change,
``PYTHONPATH=<worktree>`` from outside this checkout, with this fixture copied into it, gives the
before figures)."""

import json
import sys
import time
from pathlib import Path

import torch

sys.path.append(str(Path(__file__).resolve().parents[1]))

import numoracle as no  # noqa: E402
from numoracle import backends  # noqa: E402

FAMILIES = ("normal", "laplace", "uniform", "lognormal")


def main(n: int, out: str) -> None:
    backends.select("interpreter")
    from tests.fixtures import user_add_norm_op as U
    counts = {k: {"fixed": 0, "statistical": 0} for k in ("correct", *U.op.faulty)}
    cases, t0 = 0, time.time()
    for seed in range(n):
        for dtype in (torch.bfloat16, torch.float16):
            for family in FAMILIES:
                inputs, params = U.example(seed, dtype, family, 4, 96)
                cases += 1
                for name in counts:
                    kern = U.op.kernels["correct"] if name == "correct" else U.op.faulty_kernel(name)
                    outs = kern(*[t.clone() for t in inputs], **params)
                    for mode in ("fixed", "statistical"):
                        counts[name][mode] += no.check(U.reference, outs, inputs, params, mode=mode).status == "reject"
    res = {"numoracle": str(Path(no.__file__).parent), "cases": cases, "rejected": counts,
           "seconds": round(time.time() - t0, 1)}
    Path(out).write_text(json.dumps(res, indent=1) + "\n")
    print(json.dumps(res))


if __name__ == "__main__":
    main(int(sys.argv[1]), sys.argv[2])
