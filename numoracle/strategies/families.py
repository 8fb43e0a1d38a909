"""Input families and shifts (DESIGN §8): reproducible bulk data from a few
drawn parameters, so Hypothesis shrinks parameters, not megabytes."""

from __future__ import annotations

import torch

from .. import formats as F
from ..errors import InvalidArgument

FAMILIES = ("normal", "shifted_mean", "heavy_tailed", "scaled", "constant_rows", "pow2_grid",
            "uniform", "laplace", "lognormal", "outliers")


def fill(shape, family: str, seed: int, *, scale_exp: int = 0, dtype=torch.float32) -> torch.Tensor:
    """A tensor of ``shape`` in ``dtype`` drawn from ``family``; ``scale_exp``
    multiplies by 10**scale_exp (the "scaled" shift).  Values are clamped into
    the format's finite range so every input is a finite value of its format."""
    if family not in FAMILIES:
        raise InvalidArgument(f"family={family!r}: expected one of {FAMILIES}.")
    g = torch.Generator().manual_seed(int(seed))
    shape = tuple(shape)
    n = torch.randn(shape, generator=g, dtype=torch.float64)
    if family in ("normal", "scaled"):
        v = n
    elif family == "shifted_mean":
        v = 8.0 + 0.5 * n          # mu >> sigma: cancellation in mean subtraction
    elif family == "heavy_tailed":
        chi = torch.randn((2,) + shape, generator=g, dtype=torch.float64).square().sum(0) / 2
        v = n / chi.sqrt().clamp(min=1e-3)        # Student t, 2 degrees of freedom
    elif family == "constant_rows":
        v = n[..., :1].expand(shape).clone() if len(shape) else n
    elif family == "pow2_grid":
        k = torch.randint(-3, 4, shape, generator=g).to(torch.float64)
        sign = torch.where(torch.rand(shape, generator=g) < 0.5, -1.0, 1.0).to(torch.float64)
        v = sign * torch.exp2(k)
    elif family == "uniform":
        v = 2 * torch.rand(shape, generator=g, dtype=torch.float64) - 1
    elif family == "laplace":
        u = torch.rand(shape, generator=g, dtype=torch.float64) - 0.5
        v = -torch.sign(u) * torch.log1p(-2 * u.abs())
    elif family == "lognormal":
        sign = torch.where(torch.rand(shape, generator=g) < 0.5, -1.0, 1.0).to(torch.float64)
        v = sign * torch.exp(2 * n)
    else:  # outliers: mostly normal, a few huge
        mask = torch.rand(shape, generator=g) < 0.01
        v = torch.where(mask, 1000 * n, n)
    v = v * (10.0 ** scale_exp)
    fmt = F.from_dtype(dtype)
    lim = fmt.max_finite / 4
    v = v.clamp(-lim, lim)
    return v.to(dtype)
