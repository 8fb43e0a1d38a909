"""Input families and input-shift groups (docs/design.md §8): reproducible bulk data from
a few drawn parameters, so Hypothesis shrinks parameters, not megabytes.  Deterministic
fillers, not strategies: the operators' example builders use them, and
``numoracle.strategies`` draws their parameters."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from . import formats as F
from .errors import InvalidArgument

FAMILIES = ("normal", "shifted_mean", "heavy_tailed", "scaled", "constant_rows", "pow2_grid",
            "uniform", "laplace", "lognormal", "outliers")


@dataclass(frozen=True)
class Group:
    """A named, reproducible input distribution: a family and a power-of-ten
    scale.  ``calibration`` is the group a maintainer would tune a tolerance
    on; every other group is a shift of it (docs/design.md §8)."""
    name: str
    family: str
    scale_exp: int
    description: str


GROUPS: dict[str, Group] = {g.name: g for g in (
    Group("calibration", "normal", 0, "standard normal: what tolerances are usually tuned on"),
    Group("uniform", "uniform", 0, "uniform on [-1, 1]"),
    Group("laplace", "laplace", 0, "Laplace, unit scale"),
    Group("heavy_tailed", "heavy_tailed", 0, "Student-t with 2 degrees of freedom"),
    Group("lognormal", "lognormal", 0, "log-normal magnitudes (sigma 2), random signs"),
    Group("outliers", "outliers", 0, "normal with 1% outliers at 1000x"),
    Group("shifted_mean", "shifted_mean", 0, "mean 8, sd 0.5: cancellation in mean subtraction"),
    Group("scaled_up", "normal", 3, "normal x 1e3"),
    Group("scaled_down", "normal", -3, "normal x 1e-3"),
    Group("constant_rows", "constant_rows", 0, "every row one repeated value: non-random rounding"),
    Group("pow2_grid", "pow2_grid", 0, "signed powers of two 2^-3..2^3: exact values, ties"),
)}


def group(name: str) -> Group:
    try:
        return GROUPS[name]
    except KeyError:
        raise InvalidArgument(f"input group {name!r}: expected one of {sorted(GROUPS)}.") from None


def fill(shape, family: str, seed: int, *, scale_exp: int = 0, dtype=torch.float32) -> torch.Tensor:
    """A tensor of ``shape`` in ``dtype`` drawn from ``family``; ``scale_exp``
    multiplies by 10**scale_exp (the "scaled" shift).  Values are clamped into
    the format's finite range so every input is a finite value of its format.
    ``family`` may also name an input group (``GROUPS``): its family and scale
    are used, the scale added to ``scale_exp``."""
    if family not in FAMILIES and family in GROUPS:
        scale_exp += GROUPS[family].scale_exp
        family = GROUPS[family].family
    if family not in FAMILIES:
        raise InvalidArgument(f"family={family!r}: expected one of {FAMILIES} or a group of {sorted(GROUPS)}.")
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
