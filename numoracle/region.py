"""Acceptance regions: for every output element, the pre-store interval a
correct kernel's value may lie in, in each mode (docs/design.md §4.2).

- fixed-input: R = sum|a_s| W_s + P_abs + |d| (sound with no probabilistic model);
- statistical: R = min(R_fixed, lambda * sqrt(sum a_s^2 V_s + P_var) + |d|) with
  lambda = sqrt(2 ln(2N/p)), a sub-Gaussian tail bound with a union bound over
  the N judged elements, so p is the false-alarm budget of the whole verdict.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from . import formats as F
from .calculus import form as FM
from .calculus.tracked import Tracked
from .errors import InvalidArgument

MODES = ("statistical", "fixed")


def lam(n_elements: int, p: float) -> float:
    if not 0 < p < 1:
        raise InvalidArgument(f"p={p!r}: the false-alarm budget must lie strictly between 0 and 1 "
                              f"(default 1e-6).")
    return math.sqrt(2.0 * math.log(2.0 * max(n_elements, 1) / p))


@dataclass
class Region:
    """The acceptance region of one output."""
    fmt: F.Format            # the store format
    centre: torch.Tensor     # float64, the exact-input value before the store
    fixed: torch.Tensor      # fixed-input radius
    stat: torch.Tensor       # statistical radius (<= fixed)
    taint: torch.Tensor      # elements without a complete certificate
    pre: Tracked             # the tracked value before the store (for attribution)

    def radius(self, mode: str) -> torch.Tensor:
        return self.fixed if mode == "fixed" else self.stat

    def interval(self, mode: str):
        r = self.radius(mode)
        return self.centre - r, self.centre + r


def region_of(out: Tracked, n_elements: int, p: float) -> Region:
    """The region of a program output: the final rounding to the output format
    is left to the rounding-interval check, so the interval is the one of the
    value before that rounding."""
    pre = out.pre if out.pre is not None else out
    c = pre.c
    fixed = pre.radius()
    sigma2 = FM.stat_sigma2(pre.form, pre.ctx.symbols, c)
    det = FM.det_total(pre.form, c)
    stat = torch.minimum(fixed, lam(n_elements, p) * sigma2.sqrt() + det)
    taint = out.taint
    if taint is None:
        taint = torch.zeros_like(c, dtype=torch.bool)
    else:
        taint = taint.expand(c.shape)
    # a radius that is not a number is a reference the calculus cannot bound
    taint = taint | ~torch.isfinite(fixed) | ~torch.isfinite(c)
    return Region(out.fmt, c.expand(out.c.shape), fixed.expand(out.c.shape),
                  stat.expand(out.c.shape), taint.expand(out.c.shape), pre)
