"""The statistical mode (docs/design.md §4.2): zero-mean, independent rounding errors.

Each symbol is a mean-zero variable in [-1, 1], sub-Gaussian with a variance proxy
(1 for one rounding, less for a symbol aggregating many), and dependent terms (those
whose provenance overlaps) add standard deviations, independent ones variances
(``calculus.form.stat_sigma2``).  With σ² that proxy and d the deterministic terms,
an element's radius is

    R = min(R_fixed, λ·σ + |d|),   λ = sqrt(2 ln(2N/p)),

a sub-Gaussian tail bound with a union bound over the N judged elements: p is the
false-alarm budget of the whole verdict.  Known non-random patterns (constant rows,
power-of-two grids) can break the model; its rejects are therefore re-judged in the
fixed-input mode before they count (``numoracle.fixed_input.confirmation``).
"""

from __future__ import annotations

import math

import torch

from ..calculus import form as FM
from ..errors import InvalidArgument

NAME = "statistical"


def lam(n_elements: int, p: float) -> float:
    """λ = sqrt(2 ln(2N/p)) for N judged elements and a false-alarm budget p."""
    if not 0 < p < 1:
        raise InvalidArgument(f"p={p!r}: the false-alarm budget must lie strictly between 0 and 1 "
                              f"(default 1e-6).")
    return math.sqrt(2.0 * math.log(2.0 * max(n_elements, 1) / p))


def radius(pre, n_elements: int, p: float, fixed=None):
    """The statistical radius of ``pre`` (a tracked tensor) before its store, never above
    its fixed-input radius ``fixed`` (computed when not given)."""
    if fixed is None:
        fixed = pre.radius()
    sigma2 = FM.stat_sigma2(pre.form, pre.ctx.symbols, pre.c)
    det = FM.det_total(pre.form, pre.c)
    if pre.ctx.symbolic:
        # traced with symbolic sizes: λ from the size's symbol, on the device
        n = torch.ones((), dtype=torch.float64, device=fixed.device) * n_elements
        lm = torch.sqrt(2.0 * torch.log(n.clamp(min=1.0) * (2.0 / p)))
    else:
        lm = lam(n_elements, p)
    # fmin: where the proxy's arithmetic gives no number (a term masked to 0 whose variance had
    # overflowed: 0 * inf), λσ + d is no bound at all and the fixed radius is the element's radius;
    # where the fixed radius is not a number either, the element is uncertified (regions.region_of)
    return torch.fmin(fixed, lm * sigma2.sqrt() + det)
