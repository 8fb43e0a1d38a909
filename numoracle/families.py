"""Input families and input-shift groups (docs/design.md §8): reproducible bulk data from
a few drawn parameters, so Hypothesis shrinks parameters, not megabytes.  Deterministic
fillers, not strategies: the operators' example builders use them, and
``numoracle.strategies`` draws their parameters."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from . import formats as F
from .errors import InvalidArgument

FAMILIES = ("normal", "shifted_mean", "heavy_tailed", "scaled", "constant_rows", "pow2_grid",
            "uniform", "laplace", "lognormal", "outliers",
            # adversarial families: where error bounds and certificates are easiest to get wrong
            "subnormal", "format_boundary", "cancellation", "one_huge", "all_equal", "alternating")


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


# Groups for soundness searches, not for campaigns (whose default is GROUPS): inputs built
# to bring a calculus's bounds and certificates to their edges.  ``strategies.cases`` draws
# them when asked (groups=...); 2^+-24 scalings come from its scale_exps.
ADVERSARIAL_GROUPS: dict[str, Group] = {g.name: g for g in (
    Group("subnormal", "subnormal", 0, "magnitudes from the smallest normal down through the subnormals"),
    Group("format_boundary", "format_boundary", 0,
          "values at binade edges (2^e(1 +- 2^-p)) and near the format's largest finite value"),
    Group("cancellation", "cancellation", 0, "rows of large values whose halves cancel, leaving small residues"),
    Group("one_huge", "one_huge", 0, "normal rows with one value 2^20 times the others"),
    Group("all_equal", "all_equal", 0, "the whole tensor one repeated value"),
    Group("alternating", "alternating", 0, "near-equal magnitudes of alternating sign along each row"),
)}
ALL_GROUPS: dict[str, Group] = {**GROUPS, **ADVERSARIAL_GROUPS}


def group(name: str) -> Group:
    try:
        return ALL_GROUPS[name]
    except KeyError:
        raise InvalidArgument(f"input group {name!r}: expected one of {sorted(ALL_GROUPS)}.") from None


def fill(shape, family: str, seed: int, *, scale_exp: int = 0, dtype=torch.float32) -> torch.Tensor:
    """A tensor of ``shape`` in ``dtype`` drawn from ``family``; ``scale_exp``
    multiplies by 10**scale_exp (the "scaled" shift).  Values are clamped into
    the format's finite range so every input is a finite value of its format.
    ``family`` may also name an input group (``GROUPS``): its family and scale
    are used, the scale added to ``scale_exp``."""
    if family not in FAMILIES and family in ALL_GROUPS:
        scale_exp += ALL_GROUPS[family].scale_exp
        family = ALL_GROUPS[family].family
    if family not in FAMILIES:
        raise InvalidArgument(f"family={family!r}: expected one of {FAMILIES} or a group of {sorted(ALL_GROUPS)}.")
    g = torch.Generator().manual_seed(int(seed))
    shape = tuple(shape)
    n = torch.randn(shape, generator=g, dtype=torch.float64)
    fmt = F.from_dtype(dtype)
    lim = fmt.max_finite / 4
    if family in _ADVERSARIAL_FILL:
        v, lim = _ADVERSARIAL_FILL[family](n, g, shape, fmt)
    elif family in ("normal", "scaled"):
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
    v = v.clamp(-lim, lim)
    return v.to(dtype)


def _last_axis(shape) -> int:
    return shape[-1] if len(shape) else 1


def _fill_subnormal(n, g, shape, fmt):
    # |n| min_normal 2^-k, k in [0, precision]: normal just above the threshold down to
    # below the smallest subnormal (some round to zero)
    k = torch.randint(0, fmt.precision + 1, shape, generator=g).to(torch.float64)
    return n * fmt.min_normal * torch.exp2(-k), fmt.max_finite / 4


def _fill_format_boundary(n, g, shape, fmt):
    # a binade edge 2^e (1 + j 2^(1-p)), j in {-1, 0, 1}, e over the whole range, a quarter of
    # the values within a few ulps of the largest finite value
    e = torch.randint(fmt.emin, int(math.log2(fmt.max_finite)) + 1, shape, generator=g).to(torch.float64)
    j = torch.randint(-1, 2, shape, generator=g).to(torch.float64)
    v = torch.exp2(e) * (1 + j * 2.0 ** (1 - fmt.precision))
    top = fmt.max_finite * (1 - torch.randint(0, 4, shape, generator=g).to(torch.float64) * 2.0 ** -fmt.precision)
    v = torch.where(torch.rand(shape, generator=g) < 0.25, top, v)
    sign = torch.where(n < 0, -1.0, 1.0).to(torch.float64)
    return sign * v, fmt.max_finite


def _fill_cancellation(n, g, shape, fmt):
    # the second half of each row is minus the first plus a small residue
    v = 1000 * n
    c = _last_axis(shape)
    h = c // 2
    if h and len(shape):
        v[..., h:2 * h] = -v[..., :h] + 1e-3 * n[..., h:2 * h]
    return v, fmt.max_finite / 4


def _fill_one_huge(n, g, shape, fmt):
    v = n.clone()
    if len(shape) and shape[-1]:
        idx = torch.randint(0, shape[-1], shape[:-1] + (1,), generator=g)
        v.scatter_(-1, idx, v.gather(-1, idx) * 2.0 ** 20)
    return v, fmt.max_finite / 4


def _fill_all_equal(n, g, shape, fmt):
    return torch.full(shape, float(n.reshape(-1)[0]) if n.numel() else 1.0, dtype=torch.float64), fmt.max_finite / 4


def _fill_alternating(n, g, shape, fmt):
    c = _last_axis(shape)
    sign = torch.where(torch.arange(c) % 2 == 0, 1.0, -1.0).to(torch.float64)
    return (1 + 0.01 * n) * (sign if len(shape) else 1.0), fmt.max_finite / 4


_ADVERSARIAL_FILL = {"subnormal": _fill_subnormal, "format_boundary": _fill_format_boundary,
                     "cancellation": _fill_cancellation, "one_huge": _fill_one_huge,
                     "all_equal": _fill_all_equal, "alternating": _fill_alternating}
