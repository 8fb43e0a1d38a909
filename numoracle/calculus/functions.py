"""The exact real functions the calculus propagates through.

For each function the calculus needs, in float64 on torch tensors:
- its value and first derivative at the centre (first-order propagation),
- a bound on |f''| over an enclosure [lo, hi] (the rigorous second-order
  remainder |f(c+e) - f(c) - f'(c) e| <= 1/2 sup|f''| e^2, docs/design.md §4.1),
- its domain, as a predicate on the enclosure, so a certificate can name a
  site whose argument may leave it (docs/design.md §4.6).

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


FUNCTIONS: dict[str, Function] = {}


def _register(f: Function) -> None:
    FUNCTIONS[f.name] = f


_register(Function(
    "exp", torch.exp, torch.exp,
    curvature=lambda lo, hi: torch.exp(hi),
    in_domain=lambda lo, hi: hi <= FP32_EXP_LIMIT,
    domain_text=f"argument <= {FP32_EXP_LIMIT} (fp32 exp overflows above)",
    magnitude=lambda lo, hi: torch.exp(hi),
    deriv_value=lambda x, v: v,
))
_register(Function(
    "exp2", torch.exp2, lambda x: _LN2 * torch.exp2(x),
    curvature=lambda lo, hi: _LN2 * _LN2 * torch.exp2(hi),
    in_domain=lambda lo, hi: hi <= FP32_EXP2_LIMIT,
    domain_text=f"argument <= {FP32_EXP2_LIMIT} (fp32 exp2 overflows above)",
    magnitude=lambda lo, hi: torch.exp2(hi),
    deriv_value=lambda x, v: _LN2 * v,
))
_register(Function(
    "log", torch.log, torch.reciprocal,
    curvature=lambda lo, hi: lo.pow(-2),
    in_domain=lambda lo, hi: lo > 0,
    domain_text="argument > 0",
    magnitude=_mono_mag(torch.log),
))
_register(Function(
    "log2", torch.log2, lambda x: 1.0 / (_LN2 * x),
    curvature=lambda lo, hi: lo.pow(-2) / _LN2,
    in_domain=lambda lo, hi: lo > 0,
    domain_text="argument > 0",
    magnitude=_mono_mag(torch.log2),
))
_register(Function(
    "rsqrt", torch.rsqrt, lambda x: -0.5 * x.pow(-1.5),
    curvature=lambda lo, hi: 0.75 * lo.pow(-2.5),
    in_domain=lambda lo, hi: lo > 0,
    domain_text="argument > 0",
    magnitude=lambda lo, hi: torch.rsqrt(lo),
))
_register(Function(
    "sqrt", torch.sqrt, lambda x: 0.5 * torch.rsqrt(x),
    curvature=lambda lo, hi: 0.25 * lo.pow(-1.5),
    in_domain=lambda lo, hi: lo > 0,
    domain_text="argument > 0",
    magnitude=lambda lo, hi: torch.sqrt(hi),
))
_register(Function(
    "reciprocal", torch.reciprocal, lambda x: -x.pow(-2),
    curvature=lambda lo, hi: 2.0 * _min_abs(lo, hi).pow(-3),
    in_domain=lambda lo, hi: (lo > 0) | (hi < 0),
    domain_text="argument bounded away from 0",
    magnitude=lambda lo, hi: _min_abs(lo, hi).reciprocal(),
))
_register(Function(
    "sigmoid", _sigmoid, lambda x: _sigmoid(x) * _sigmoid(-x),
    curvature=_const(0.0962251),
    # tl.sigmoid is 1/(1+exp(-x)): exp(-x) overflows fp32 when -x > 88.72, and
    # then sigmoid returns 0 where the true value is tiny but positive.
    in_domain=lambda lo, hi: lo >= -FP32_EXP_LIMIT,
    domain_text=f"argument >= -{FP32_EXP_LIMIT} (exp(-x) overflows fp32 below)",
    magnitude=_mono_mag(_sigmoid),
))
_register(Function(
    "tanh", torch.tanh, lambda x: 1.0 - torch.tanh(x).pow(2),
    curvature=_const(0.7698004),
    in_domain=_everywhere, domain_text="all reals",
    magnitude=_mono_mag(torch.tanh),
    deriv_value=lambda x, v: 1.0 - v.pow(2),
))
_register(Function(
    "erf", torch.erf, _erf_deriv,
    curvature=_const(0.96789),
    in_domain=_everywhere, domain_text="all reals",
    magnitude=_mono_mag(torch.erf),
))
_register(Function(
    "sin", torch.sin, torch.cos, curvature=_const(1.0),
    in_domain=lambda lo, hi: torch.maximum(lo.abs(), hi.abs()) <= 1e5,
    domain_text="|argument| <= 1e5 (range reduction calibrated there)",
    magnitude=_const(1.0),
))
_register(Function(
    "cos", torch.cos, lambda x: -torch.sin(x), curvature=_const(1.0),
    in_domain=lambda lo, hi: torch.maximum(lo.abs(), hi.abs()) <= 1e5,
    domain_text="|argument| <= 1e5 (range reduction calibrated there)",
    magnitude=_const(1.0),
))
