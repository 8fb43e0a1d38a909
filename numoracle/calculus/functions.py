"""The exact real functions the calculus propagates through.

For each function the calculus needs, in float64 on torch tensors:
- its value and first derivative at the centre (first-order propagation),
- a bound on |f''| over an enclosure [lo, hi] (the rigorous second-order
  remainder |f(c+e) - f(c) - f'(c) e| <= 1/2 sup|f''| e^2, docs/design.md §4.1),
- its domain, as a predicate on the enclosure, so a certificate can name a
  site whose argument may leave it (docs/design.md §4.6);
- an *image* bound: sup |f(x) - f(c)| over the enclosure [lo, hi] of c, from f's
  values at the endpoints (f is monotone, or 1-Lipschitz and bounded), which caps
  the first- and second-order terms where the linearisation says more than f can
  reach (a saturated tanh: docs/design.md §4.1);
- for functions whose values lie strictly inside (-1, 1), that bound, so the
  library error is counted in ulps of values below 1 (2^-24, not 2^-23).

Global constants below are the suprema of |f''| over the whole real line:
sigmoid'' peaks at 1/(6*sqrt(3)), tanh'' at 4/(3*sqrt(3)), erf'' at
2*sqrt(2/(pi*e)); a slightly larger decimal is used so rounding of the
constant itself cannot make the bound unsound.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import torch

Tensor = torch.Tensor

_LN2 = math.log(2.0)
# exp(x) overflows fp32 above log(max fp32) = 88.7228...; we take a hair less.
FP32_EXP_LIMIT = 88.72
FP32_EXP2_LIMIT = 127.99
# From these arguments on, exp and exp2 return +inf in fp32: e^88.75 and 2^128.0625 exceed
# fp32's largest value by 2.8% and 4.4%, where calibrated errors stay below 100 ulp (2^-16
# relative), and exp as ex2.approx(RN(x log2 e)) takes 2^128.04, past its overflow at 128.
FP32_EXP_INF = 88.75
FP32_EXP2_INF = 128.0625


@dataclass(frozen=True)
class Function:
    name: str
    value: Callable[[Tensor], Tensor]
    deriv: Callable[[Tensor], Tensor]
    # sup |f''| over [lo, hi]; called only where the enclosure is in the domain
    curvature: Callable[[Tensor, Tensor], Tensor]
    # True where [lo, hi] lies inside the domain the kernel's fp32 call is certified on
    in_domain: Callable[[Tensor, Tensor], Tensor]
    domain_text: str
    # max |f| over [lo, hi] (monotone functions: the larger endpoint image)
    magnitude: Callable[[Tensor, Tensor], Tensor]
    # the derivative from (x, f(x)), by deriv's own formula, where that formula evaluates f:
    # f is then computed once (each evaluation is a full-size pass, and compiled, a buffer of
    # its own: softmax's kernel stored exp(x - m) twice)
    deriv_value: Callable[[Tensor, Tensor], Tensor] | None = None
    # sup |f(x) - f(c)| for x in [lo, hi] (lo <= c <= hi, the endpoints already widened
    # outward past their float64 rounding), fc = f(c): see ``_image_*``; NaN where the
    # enclosure leaves the domain (never used there: comparisons with NaN are false)
    image: Callable[[Tensor, Tensor, Tensor, Tensor], Tensor] | None = None
    # |f(x)| < strict_bound for every real x (None: unbounded), so the exact value's fp32
    # ulp is at most the ulp of the binade below it
    strict_bound: float | None = None
    # below this argument the kernel's fp32 call may return 0 for a value under fp32's smallest
    # normal (tl.sigmoid's exp(-x) overflows to inf, 1/(1 + inf) = 0): an absolute error of that
    # normal there (None: no such argument)
    zero_below: float | None = None
    # above this argument every fp32 call returns +inf, whatever its bounded error: the exact
    # value is past fp32's range by far more than any calibrated error (None: never)
    overflow_above: float | None = None


def _everywhere(lo: Tensor, hi: Tensor) -> Tensor:
    return torch.ones_like(lo, dtype=torch.bool)


def _const(k: float):
    return lambda lo, hi: torch.full_like(lo, k)


def _mono_mag(f):
    return lambda lo, hi: torch.maximum(f(lo).abs(), f(hi).abs())


def _min_abs(lo: Tensor, hi: Tensor) -> Tensor:
    # smallest |x| over [lo, hi]; 0 if the interval straddles zero
    straddles = (lo <= 0) & (hi >= 0)
    return torch.where(straddles, torch.zeros_like(lo), torch.minimum(lo.abs(), hi.abs()))


def _sigmoid(x):
    return torch.sigmoid(x)


def _erf_deriv(x):
    return (2.0 / math.sqrt(math.pi)) * torch.exp(-x * x)


# Float64 evaluation of f at an endpoint and at the centre is within a few float64 ulps
# each (libm / torch): 2^-50 of their magnitudes covers both and the subtraction.
_EVAL_SLACK = 2.0 ** -50


def _slack(*vals: Tensor) -> Tensor:
    s = vals[0].abs()
    for v in vals[1:]:
        s = s + v.abs()
    return _EVAL_SLACK * s


def _image_hi(f):
    """f convex increasing (exp, exp2): the upper side is the far one, f(hi) - f(c)
    >= f(c) - f(lo) for the symmetric enclosure (slopes increase)."""
    def image(lo, hi, c, fc):
        v = f(hi)
        return (v - fc) + _slack(v, fc)
    return image


def _image_lo(f):
    """f concave increasing (log, sqrt) or convex decreasing (rsqrt): the lower
    endpoint is the far side."""
    def image(lo, hi, c, fc):
        v = f(lo)
        return (v - fc).abs() + _slack(v, fc)
    return image


def _image_both(f):
    """f monotone with an inflection (sigmoid, tanh, erf): the larger of the two sides."""
    def image(lo, hi, c, fc):
        a, b = f(lo), f(hi)
        return torch.maximum((a - fc).abs(), (b - fc).abs()) + _slack(a, b, fc)
    return image


def _image_reciprocal(lo, hi, c, fc):
    # convex on each side of 0 (the domain excludes it): the endpoint nearer 0 is the far side
    near = torch.where(lo > 0, lo, hi)
    v = near.reciprocal()
    return (v - fc).abs() + _slack(v, fc)


def _image_trig(lo, hi, c, fc):
    # 1-Lipschitz with values in [-1, 1]
    r = torch.maximum(hi - c, c - lo)
    return torch.minimum(r, 1.0 + fc.abs())


FUNCTIONS: dict[str, Function] = {}


def _register(f: Function) -> None:
    FUNCTIONS[f.name] = f


_register(Function(
    "exp", torch.exp, torch.exp,
    curvature=lambda lo, hi: torch.exp(hi),
    in_domain=lambda lo, hi: hi <= FP32_EXP_LIMIT,
    domain_text=f"argument <= {FP32_EXP_LIMIT} (fp32 exp overflows above; +inf from {FP32_EXP_INF})",
    magnitude=lambda lo, hi: torch.exp(hi),
    deriv_value=lambda x, v: v,
    image=_image_hi(torch.exp),
    overflow_above=FP32_EXP_INF,
))
_register(Function(
    "exp2", torch.exp2, lambda x: _LN2 * torch.exp2(x),
    curvature=lambda lo, hi: _LN2 * _LN2 * torch.exp2(hi),
    in_domain=lambda lo, hi: hi <= FP32_EXP2_LIMIT,
    domain_text=f"argument <= {FP32_EXP2_LIMIT} (fp32 exp2 overflows above; +inf from {FP32_EXP2_INF})",
    magnitude=lambda lo, hi: torch.exp2(hi),
    deriv_value=lambda x, v: _LN2 * v,
    image=_image_hi(torch.exp2),
    overflow_above=FP32_EXP2_INF,
))
_register(Function(
    "log", torch.log, torch.reciprocal,
    curvature=lambda lo, hi: lo.pow(-2),
    in_domain=lambda lo, hi: lo > 0,
    domain_text="argument > 0",
    magnitude=_mono_mag(torch.log),
    image=_image_lo(torch.log),
))
_register(Function(
    "log2", torch.log2, lambda x: 1.0 / (_LN2 * x),
    curvature=lambda lo, hi: lo.pow(-2) / _LN2,
    in_domain=lambda lo, hi: lo > 0,
    domain_text="argument > 0",
    magnitude=_mono_mag(torch.log2),
    image=_image_lo(torch.log2),
))
_register(Function(
    "rsqrt", torch.rsqrt, lambda x: -0.5 * x.pow(-1.5),
    curvature=lambda lo, hi: 0.75 * lo.pow(-2.5),
    in_domain=lambda lo, hi: lo > 0,
    domain_text="argument > 0",
    magnitude=lambda lo, hi: torch.rsqrt(lo),
    image=_image_lo(torch.rsqrt),
))
_register(Function(
    "sqrt", torch.sqrt, lambda x: 0.5 * torch.rsqrt(x),
    curvature=lambda lo, hi: 0.25 * lo.pow(-1.5),
    in_domain=lambda lo, hi: lo > 0,
    domain_text="argument > 0",
    magnitude=lambda lo, hi: torch.sqrt(hi),
    image=_image_lo(torch.sqrt),
))
_register(Function(
    "reciprocal", torch.reciprocal, lambda x: -x.pow(-2),
    curvature=lambda lo, hi: 2.0 * _min_abs(lo, hi).pow(-3),
    in_domain=lambda lo, hi: (lo > 0) | (hi < 0),
    domain_text="argument bounded away from 0",
    magnitude=lambda lo, hi: _min_abs(lo, hi).reciprocal(),
    image=_image_reciprocal,
))
_register(Function(
    "sigmoid", _sigmoid, lambda x: _sigmoid(x) * _sigmoid(-x),
    curvature=_const(0.0962251),
    # tl.sigmoid is 1/(1+exp(-x)): exp(-x) overflows fp32 when -x > 88.72, and then sigmoid
    # returns 0 where the true value is positive but below sigmoid(-88.72) < 2^-127
    in_domain=_everywhere, domain_text="all reals",
    zero_below=-FP32_EXP_LIMIT,
    magnitude=_mono_mag(_sigmoid),
    image=_image_both(_sigmoid),
    strict_bound=1.0,
))
_register(Function(
    "tanh", torch.tanh, lambda x: 1.0 - torch.tanh(x).pow(2),
    curvature=_const(0.7698004),
    in_domain=_everywhere, domain_text="all reals",
    magnitude=_mono_mag(torch.tanh),
    deriv_value=lambda x, v: 1.0 - v.pow(2),
    image=_image_both(torch.tanh),
    strict_bound=1.0,
))
_register(Function(
    "erf", torch.erf, _erf_deriv,
    curvature=_const(0.96789),
    in_domain=_everywhere, domain_text="all reals",
    magnitude=_mono_mag(torch.erf),
    image=_image_both(torch.erf),
    strict_bound=1.0,
))
_register(Function(
    "sin", torch.sin, torch.cos, curvature=_const(1.0),
    in_domain=lambda lo, hi: torch.maximum(lo.abs(), hi.abs()) <= 1e5,
    domain_text="|argument| <= 1e5 (range reduction calibrated there)",
    magnitude=_const(1.0),
    image=_image_trig,
))
_register(Function(
    "cos", torch.cos, lambda x: -torch.sin(x), curvature=_const(1.0),
    in_domain=lambda lo, hi: torch.maximum(lo.abs(), hi.abs()) <= 1e5,
    domain_text="|argument| <= 1e5 (range reduction calibrated there)",
    magnitude=_const(1.0),
    image=_image_trig,
))
