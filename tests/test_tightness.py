"""Tightness: where the plan decides the result, the region must say so.  Each bound below
is the width the plan allows, in storage values of the output format (steps between the
smallest and the largest accepted value): a region made sound by being wide fails here.
``benchmarks/tightness.py`` measures the same figures over every operator and group."""
import math

import pytest
import torch

import numoracle as no
from numoracle import backends
from numoracle import formats as F
from numoracle.check import check_modes
from numoracle.mathlib import load as load_profile
from numoracle.operators.references import rms_norm_llama


@pytest.fixture(scope="module", autouse=True)
def _interp():
    backends.select("interpreter")


def _steps(qlo, qhi, fmt):
    """Storage values strictly above qlo up to qhi (0: the interval is one value)."""
    return (F.to_bits(qhi, fmt) - F.to_bits(qlo, fmt)).abs()


def _widths(program, y, inputs, mode="fixed"):
    v = check_modes(program, y, inputs)[mode]
    assert v.status == "accept", v.explain()
    o = v.outputs[0]
    return _steps(o.qlo, o.qhi, o.fmt)


def _positive_f32(n, seed, lo=0.5, hi=2.0):
    g = torch.Generator().manual_seed(seed)
    return (lo + (hi - lo) * torch.rand(n, generator=g)).to(torch.float32)


@no.reference
def product(x, w):
    return x * w


@no.reference
def triple_product(x, w, v):
    return (x * w) * v


@no.reference
def pair_sum(x):
    return no.sum(x, axis=-1)


@no.reference
def exp_of(x):
    return no.exp(x)


def test_one_rounding_of_exact_inputs_accepts_exactly_one_value():
    x, w = _positive_f32(4096, 1), _positive_f32(4096, 2)
    y = (x.double() * w.double()).float()
    assert int(_widths(product, y, (x, w)).max()) == 0


def test_a_rounded_product_times_an_exact_value_accepts_at_most_three_values():
    # one inner rounding (|error| <= u|c|) then the store: RN of [c - u|c|, c + u|c|]
    x, w, v = _positive_f32(4096, 1), _positive_f32(4096, 2), _positive_f32(4096, 3)
    y = ((x * w) * v)
    s = _widths(triple_product, y, (x, w, v))
    assert int(s.max()) <= 2
    assert float((s <= 1).float().mean()) >= 0.5


def test_a_sum_of_two_positive_values_accepts_at_most_three_values():
    x = torch.stack([_positive_f32(4096, 4), _positive_f32(4096, 5)], dim=-1)
    s = _widths(pair_sum, x.sum(-1), (x,))
    assert int(s.max()) <= 2


def test_a_math_call_accepts_at_most_its_profile_ulps_either_side():
    x = (torch.rand(4096, generator=torch.Generator().manual_seed(6)) * 20 - 10).to(torch.float32)
    y = torch.exp(x.double()).float()
    model = load_profile("interpreter").model("exp")
    k = model.a + model.b * 10
    # a radius of k ulps of the binade (at most 2 ulps of the value near a binade's bottom),
    # rounded at both ends
    assert int(_widths(exp_of, y, (x,)).max()) <= 2 * math.ceil(2 * k) + 1
    assert float(_widths(exp_of, y, (x,)).float().median()) <= 2 * math.ceil(k) + 1


def test_rms_norm_llama_in_bf16_is_decided_on_almost_every_element():
    # fp32 statistics, then x*rstd rounded to bf16 before the bf16 weight multiply: the fp32
    # errors are far below a bf16 ulp, so nearly every element's bf16 roundings are decided
    # (the rest lie within those errors of a bf16 midpoint: two candidates, then x w)
    g = torch.Generator().manual_seed(7)
    x = torch.randn(16, 1024, generator=g).to(torch.bfloat16)
    w = (1 + 0.1 * torch.randn(1024, generator=g)).to(torch.bfloat16)
    xf = x.double()
    t = (xf * torch.rsqrt((xf * xf).mean(-1, keepdim=True) + 1e-6)).to(torch.bfloat16).double() * w.double()
    y = t.to(torch.bfloat16)
    s = _widths(rms_norm_llama, y, (x, w))
    assert float((s == 0).float().mean()) >= 0.98
    assert int(s.max()) <= 2


@pytest.mark.parametrize("fmt", [F.bf16, F.fp16])
def test_the_rounding_interval_check_accepts_exactly_the_roundings_of_the_interval(fmt):
    """y is accepted iff some x in [lo, hi] rounds to y: its rounding cell meets the interval
    (neither end of the check may be moved in by a value, nor out)."""
    from numoracle.oracles.rounding_interval import accepted_interval
    g = torch.Generator().manual_seed(11)
    # interval ends on and beside midpoints between neighbours, widths 0 to a few ulps
    base = F.round(torch.randn(512, generator=g, dtype=torch.float64) * 4, fmt)
    ulp = F.ulp(base, fmt)
    lo = base + ulp * (torch.randint(-4, 5, (512,), generator=g) / 4.0)
    hi = lo + ulp * (torch.randint(0, 9, (512,), generator=g) / 4.0)
    ys = [base + k * ulp for k in range(-4, 7)]
    for y in ys:
        y = F.round(y, fmt)
        clo, chi, lo_closed, hi_closed = F.rounding_cell(y, fmt)
        meets = ((chi > lo) | ((chi == lo) & hi_closed)) & ((clo < hi) | ((clo == hi) & lo_closed))
        assert torch.equal(accepted_interval(lo, hi, y, fmt), meets)
