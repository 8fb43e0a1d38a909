"""The rounding-interval check (docs/design.md §4.3).

With [lo, hi] the pre-store acceptance interval of an element, a stored value
y in format F is accepted iff RN_F(lo) <= y <= RN_F(hi).  Rounding is monotone,
so these are exactly the storage values that are the rounding of some value of
the interval (``accepted_interval``).  The comparison is exact (float64 holds every value of every supported format),
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


def accepted_interval(lo: torch.Tensor, hi: torch.Tensor, y: torch.Tensor, fmt: F.Format):
    """``accepted(y, *bounds(lo, hi, fmt))``: whether y is the rounding of some
    value of [lo, hi] (the bounds as ``formats.rne_bound``, which compares as they do)."""
    ov = store_overflow(fmt)
    return (y >= F.rne_bound(lo, fmt, "lo", ov)) & (y <= F.rne_bound(hi, fmt, "hi", ov))
