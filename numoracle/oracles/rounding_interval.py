"""The rounding-interval check (DESIGN §4.3).

With [lo, hi] the pre-store acceptance interval of an element, a stored value
y in format F is accepted iff RN_F(lo) <= y <= RN_F(hi).  Rounding is monotone,
so these are exactly the storage values that are the rounding of some value of
the interval: equivalently, those whose rounding cell meets [lo, hi], which is
how the check is computed off the CPU (``cell``, ``accepted_interval``).  The
comparison is exact (float64 holds every value of every supported format),
with +0 == -0.  A truncating store, an off-by-one-ulp store or a wrong tie
rule lands outside whenever the interval is narrower than an output ulp —
which symmetric |y - ref| <= atol + rtol|ref| rules cannot see.
"""

from __future__ import annotations

import torch

from .. import formats as F


def store_overflow(fmt: F.Format) -> str:
    """How a correct kernel's store overflows: Triton saturates fp8 stores
    (cvt.rn.satfinite) and follows IEEE for the others."""
    return "saturate" if not fmt.has_inf and fmt.bits == 8 else "inf"


def bounds(lo: torch.Tensor, hi: torch.Tensor, fmt: F.Format, mode: str = "rne"):
    """[RN_F(lo), RN_F(hi)]: the storage values a correct kernel may produce."""
    ov = store_overflow(fmt)
    return F.round(lo, fmt, mode=mode, overflow=ov), F.round(hi, fmt, mode=mode, overflow=ov)


def accepted(y: torch.Tensor, qlo: torch.Tensor, qhi: torch.Tensor) -> torch.Tensor:
    """Elementwise acceptance of stored values y (float64, exact)."""
    return (y >= qlo) & (y <= qhi)


def cell(y: torch.Tensor, fmt: F.Format):
    """The rounding cell of each stored value y (``formats.nearest_cell``), for
    the formats whose store is round-to-nearest-even with IEEE overflow, where
    cells are the cheaper test (``formats.cells_preferred``); None otherwise
    (the check rounds the interval's ends)."""
    if fmt.name in F.NEAREST_CELL_FORMATS and store_overflow(fmt) == "inf" and F.cells_preferred(y):
        return F.nearest_cell(y, fmt)
    return None


def accepted_interval(lo: torch.Tensor, hi: torch.Tensor, y: torch.Tensor, fmt: F.Format, cell_=None):
    """``accepted(y, *bounds(lo, hi, fmt))``: whether y is the rounding of some
    value of [lo, hi].  Where y's cell is known (``cell``) that is whether
    [lo, hi] meets it, which needs no rounding of lo and hi."""
    if cell_ is None:
        cell_ = cell(y, fmt)
    if cell_ is None:
        return accepted(y, *bounds(lo, hi, fmt))
    return F.meets_cell(lo, hi, cell_)
