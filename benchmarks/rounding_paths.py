"""Each exact rounding path of ``numoracle.formats``, compiled for the CPU as a verdict compiles
it (``COMPILE_OPTIONS``, static sizes, one thread), on the same 2^20 float64 values, side by
side in one run: best of ``--reps`` milliseconds, and whether the path equals the grid path.

    OMP_NUM_THREADS=1 python benchmarks/rounding_paths.py [--reps 30]

Rows: RNE to bf16 (float32 rounded to odd, ``_magic``); RNE to e4m3fn and e5m2 with saturation,
as the quantizer rounds (the grid, torch's casts through float32 rounded to odd, ``_magic``);
float32 up and down (the grid, a cast and a bit-view step).  Which path a compiled CPU verdict
takes: ``formats._how`` (docs/performance.md, "Rounding")."""
from __future__ import annotations

import argparse
import functools
import time

import torch

from numoracle import formats as F
from numoracle.verdict.compiled import inductor


def _values(n: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(8)
    spread = torch.exp2(torch.randint(-30, 20, (n,), generator=g).to(torch.float64))
    return torch.randn(n, generator=g, dtype=torch.float64) * spread


def _paths():
    bf16 = [("bf16 rne", "odd", lambda x: F._rne_by_odd(x, F.bf16)),
            ("bf16 rne", "magic", lambda x: F._rne_by_magic(x, F.bf16))]
    fp8 = [(f"{fmt} rne saturate", how, functools.partial(F._round_rest, fmt=fmt, mode="rne", overflow="saturate",
                                                           how=how))
           for fmt in (F.e4m3fn, F.e5m2) for how in ("grid", "casts", "magic")]
    directed = [(f"fp32 {mode}", how, functools.partial(F._round_by, fmt=F.fp32, mode=mode, overflow="inf", how=how))
                for mode in ("up", "down") for how in ("grid", "casts")]
    return bf16 + fp8 + directed


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    return bool((((a == b) & (torch.signbit(a) == torch.signbit(b))) | (a.isnan() & b.isnan())).all())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--n", type=int, default=1 << 20)
    args = ap.parse_args()
    torch.set_num_threads(1)
    x = _values(args.n)
    print(f"{'rounding':<22} {'path':<6} {'ms':>8}  equals the grid path")
    for what, how, fn in _paths():
        torch._dynamo.reset()            # each path compiled by itself, never over a cache limit
        f = torch.compile(fn, dynamic=False, options=inductor.COMPILE_OPTIONS)
        got = f(x)
        fmt, mode, ov = _rule(what)
        same = _same(got, F._round_rest(x, fmt, mode, ov, "grid"))
        times = []
        for _ in range(args.reps):
            t = time.perf_counter()
            f(x)
            times.append(time.perf_counter() - t)
        print(f"{what:<22} {how:<6} {min(times) * 1e3:8.2f}  {same}")


def _rule(what: str):
    name, mode, *ov = what.split()
    return F.by_name(name), mode, (ov[0] if ov else "inf")


if __name__ == "__main__":
    main()
