"""Acceptance regions (docs/design.md §4.2): for every output element, the pre-store
interval a correct kernel's value may lie in, in each mode.  One interface for both
modes: ``Region.radius(mode)`` / ``Region.interval(mode)``, the radii coming from
``numoracle.fixed_input`` and ``numoracle.statistical``."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .. import fixed_input, statistical
from .. import formats as F
from ..calculus.tracked import Tracked

MODES = (statistical.NAME, fixed_input.NAME)


@dataclass(kw_only=True)
class Region:
    """The acceptance region of one output, all tensors of the output's shape.  (Not
    frozen: the compiled verdict builds regions inside traced code.)"""
    fmt: F.Format            # the store format
    centre: torch.Tensor     # float64, the exact-input value before the store
    fixed: torch.Tensor      # fixed-input radius
    stat: torch.Tensor       # statistical radius (<= fixed)
    taint: torch.Tensor      # elements without a complete certificate (uncertified)
    pre: Tracked | None = None   # the tracked value before the store (for attribution)

    def radius(self, mode: str) -> torch.Tensor:
        return self.fixed if mode == fixed_input.NAME else self.stat

    def interval(self, mode: str):
        r = self.radius(mode)
        return self.centre - r, self.centre + r


def region_of(out: Tracked, n_elements: int, p: float) -> Region:
    """The region of a program output: the final rounding to the output format is left
    to the rounding-interval check, so the interval is the one of the value before that
    rounding.  A store takes a product rounded: one certainly past the range is stored as
    that infinity (``Tracked.rounded``)."""
    out = out.rounded()
    pre = out.pre if out.pre is not None else out
    c = pre.c
    fixed = fixed_input.radius(pre, n_elements, p)
    stat = statistical.radius(pre, n_elements, p, fixed=fixed)
    taint = out.taint
    if taint is None:
        taint = torch.zeros_like(c, dtype=torch.bool)
    else:
        taint = taint.expand(c.shape)
    # a radius that is not a number is a reference the calculus cannot bound; an infinite
    # centre is one too, unless it is an exact infinity (no error: a mask's -inf stored as it
    # is, design §4), which only a program that made one can hold (Context.infinities): the
    # kernel must store that infinity, and nothing else is in the region
    bad_c = ~F.finite(c)
    if out.ctx.infinities:
        exact_inf = torch.isinf(c) & (fixed == 0)
        bad_c = bad_c & ~exact_inf
        stat = torch.where(exact_inf, 0.0, stat)
    taint = taint | ~F.finite(fixed) | bad_c
    shape = out.c.shape
    return Region(fmt=out.fmt, centre=c.expand(shape), fixed=fixed.expand(shape), stat=stat.expand(shape),
                  taint=taint.expand(shape), pre=pre)
