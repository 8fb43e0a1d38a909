#!/usr/bin/env python3
"""RNE to bf16/fp16/fp32 on a CUDA device (or the CPU), eagerly and compiled
(with the compiled verdict's Inductor options),
against the grid path, on every value of the 16-bit formats, every midpoint,
and the float64 and float32 neighbours of both (the inputs of
tests/test_formats.py): the cast path (``formats._rne_fast``), ``round()``,
``representable``, and the cast paths ``formats.round`` takes on the CPU
(fp8, float32 up and down).  Exit status 1 on any difference.
With torch 2.11's Inductor pattern matcher on, a compiled float64 -> float32
-> float64 round trip was folded away on the H200 (1.57 million of 2.35
million fp32 inputs differed: docs/results/2026-11-29-h200-rounding-check-cells.txt);
the verdict compiles with it off.

    PYTHONPATH=$PWD python scripts/cuda_rounding_check.py
"""
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from numoracle.verdict.compiled.inductor import COMPILE_OPTIONS  # noqa: E402
from numoracle import formats as F  # noqa: E402
from test_formats import _double_rounding_hazards, _general_rne  # noqa: E402


def main() -> int:
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    bad = 0
    for fmt in (F.bf16, F.fp16, F.fp32):
        x = _double_rounding_hazards(F.bf16 if fmt is F.fp32 else fmt)
        want = _general_rne(x, fmt)
        xd = x.to(dev)
        eager = F._rne_fast(xd, fmt).cpu()
        comp = torch.compile(lambda t: F._rne_fast(t, fmt), dynamic=False,
                             options=COMPILE_OPTIONS)(xd).cpu()
        grid = torch.compile(lambda t: F.round(t, fmt), dynamic=False,
                             options=COMPILE_OPTIONS)(xd).cpu()
        rep = torch.compile(lambda t: F.representable(t, fmt), dynamic=False,
                            options=COMPILE_OPTIONS)(xd).cpu()
        rdiff = int((rep != (want == x)).sum())
        bad += rdiff
        print(f"{dev} {fmt} representable compiled: {rdiff} differ")
        for name, got in (("casts eager", eager), ("casts compiled", comp), ("round() compiled", grid)):
            diff = ~((got == want) | (got.isnan() & want.isnan()))
            bad += int(diff.sum())
            print(f"{dev} {fmt} {name}: {x.numel()} inputs, {int(diff.sum())} differ"
                  + (f" (first {x[diff][:3].tolist()})" if diff.any() else ""))
    bad += _extra_casts(dev)
    return 1 if bad else 0


def _extra_casts(dev: str) -> int:
    """The cast paths of ``formats.round`` (RNE to e4m3fn/e5m2 in every overflow rule, float32
    up and down; the CPU's, taken here on the device), eager and compiled, against the grid
    path on the CPU: every fp8 value, midpoint and neighbour, and values across float32's range."""
    bad = 0
    g = torch.Generator().manual_seed(3)
    spread = torch.exp2(torch.randint(-160, 140, (200_000,), generator=g).to(torch.float64))
    wide = torch.randn(200_000, generator=g, dtype=torch.float64) * spread
    cases = [(fmt, "rne", ov) for fmt in (F.e4m3fn, F.e5m2) for ov in ("inf", "saturate", "nan")]
    cases += [(F.fp32, mode, "inf") for mode in ("up", "down")]
    for fmt, mode, ov in cases:
        x = torch.cat([_double_rounding_hazards(fmt if fmt is not F.fp32 else F.e4m3fn), wide,
                       _double_rounding_hazards(F.bf16)])
        want = F._round_rest(x, fmt, mode, ov, "grid")
        paths = {"eager": lambda: F._round_by(x.to(dev), fmt, mode, ov, "casts").cpu(),
                 "compiled": lambda: torch.compile(lambda t: F._round_by(t, fmt, mode, ov, "casts"),
                                                   dynamic=False, options=COMPILE_OPTIONS)(x.to(dev)).cpu()}
        for name, run in paths.items():
            try:
                got = run()
            except Exception as e:                      # a compiler's failure: report it, go on
                bad += 1
                print(f"{dev} {fmt} {mode}/{ov} casts {name}: failed: {type(e).__name__}: "
                      f"{str(e).strip().splitlines()[-1][:300]}")
                continue
            diff = ~(((got == want) & (torch.signbit(got) == torch.signbit(want))) | (got.isnan() & want.isnan()))
            bad += int(diff.sum())
            print(f"{dev} {fmt} {mode}/{ov} casts {name}: {x.numel()} inputs, {int(diff.sum())} differ"
                  + (f" (first {x[diff][:3].tolist()})" if diff.any() else ""))
    return bad


if __name__ == "__main__":
    sys.exit(main())
