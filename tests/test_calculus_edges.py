"""Edges of the calculus found by fuzzing correct kernels (each was a false alarm):
fp32 results in the subnormal range, scaling by a power of two below 1, and
long low-precision sums where d*u >= 1."""
import pytest
import torch

import numoracle as no
from numoracle import backends
from numoracle.calculus.ops import gamma_bound
from numoracle.check import check_modes
from numoracle.formats import fp32


@pytest.fixture(scope="module", autouse=True)
def _interp():
    backends.select("interpreter")


@pytest.mark.parametrize("name", ["swiglu", "geglu", "geglu_exact"])
def test_subnormal_fp32_product_keeps_its_underflow_term(name):
    op = no.operators.get(name)
    a = torch.tensor([[2.0 ** -149]], dtype=torch.float32)
    b = torch.tensor([[2.0]], dtype=torch.float32)
    y = op.kernels["correct"](a.clone(), b.clone())
    for mode, v in check_modes(op.reference, y, (a, b), {}).items():
        assert v.status == "accept", (mode, v.explain())


@no.reference
def halve(x):
    return (x.to(fp32) * 0.5).to(x.format)


def test_scaling_down_into_subnormals_admits_the_rounding():
    x = torch.tensor([2.0 ** -149, 3 * 2.0 ** -149, -(2.0 ** -126)], dtype=torch.float32)
    for y in (torch.tensor([0.0, 2 * 2.0 ** -149, -(2.0 ** -127)]), torch.tensor([2.0 ** -149, 2.0 ** -149, -(2.0 ** -127)])):
        v = check_modes(halve, y, (x,), {})
        assert all(vv.status == "accept" for vv in v.values()), v["fixed"].explain()
    v = check_modes(halve, torch.tensor([0.0, 2 * 2.0 ** -149, -(2.0 ** -126)]), (x,), {})
    assert v["fixed"].status == "reject"          # a normal value halved is exact


def test_gamma_bound_holds_for_every_depth():
    u = 2.0 ** -8
    assert gamma_bound(1, u) == pytest.approx(u)
    assert 0 < gamma_bound(300, u) < float("inf")          # d*u > 1: Higham's gamma would be negative
    assert gamma_bound(10, u) <= 10 * u / (1 - 10 * u)


def test_long_bf16_sum_is_never_an_inverted_interval():
    op = no.operators.get("rms_norm")
    x = torch.randn(2, 262, generator=torch.Generator().manual_seed(1)).to(torch.bfloat16)
    w = torch.ones(262, dtype=torch.bfloat16)
    params = {"eps": 1e-6, "casting": "none"}
    y = op.kernels["correct"](x, w, **params)
    for v in check_modes(op.reference, y, (x, w), params).values():
        assert v.status != "reject", v.explain()
        for o in v.outputs:                        # judged elements have an ordered interval
            assert bool(((o.lo <= o.hi) | o.uncertified).all())


@no.reference
def erf_of(x):
    return no.erf(x.to(fp32))


@no.reference
def sqrt_of(x):
    return no.sqrt(x.to(fp32))


@pytest.mark.parametrize("program,flushed", [(erf_of, 0.0), (sqrt_of, 0.0)])
def test_flush_to_zero_of_a_subnormal_argument_is_admitted_under_an_ftz_profile(program, flushed):
    x = torch.tensor([2.0 ** -140, 4.0, 1.0], dtype=torch.float32)
    erf = program.fn.__name__ == "erf_of"
    good = torch.tensor([flushed, 1.0 if erf else 2.0, 0.8427007794380188 if erf else 1.0], dtype=torch.float32)
    v = check_modes(program, good, (x,), {}, profile="h200")
    assert all(vv.status == "accept" for vv in v.values()), v["fixed"].explain()
    # without flush-to-zero the same output is wrong for the subnormal argument
    assert check_modes(program, good, (x,), {}, profile="interpreter")["fixed"].status == "reject"


@no.reference
def recip_const(x):
    return 1.0 / x.to(fp32)


@no.reference
def recip_tensor(one, x):
    return one.to(fp32) / x.to(fp32)


def test_a_constant_numerator_of_one_uses_the_reciprocal_bound():
    from numoracle.check import run_reference
    from numoracle.mathlib import load
    prof = load("h200")
    assert prof.model("recip").a < prof.model("div").a
    x = torch.tensor([3.0, 7.0, 0.1], dtype=torch.float32)
    r1 = run_reference(recip_const, (x,), {}, prof)[0][0]
    r2 = run_reference(recip_tensor, (torch.ones(3), x), {}, prof)[0][0]
    assert bool((r1.radius() < r2.radius()).all())


def test_ulp_bound_fp32_is_the_binade_spacing():
    """2**(max(e, 1) - 150) for the float32 exponent field e of |mag| rounded to float32, built
    from bits (no exp2): every binade's ends, zeros, subnormals, the float32 overflow, inf and NaN."""
    import math

    from numoracle.calculus.tracked import ulp_bound_fp32
    fields = torch.arange(0, 256, dtype=torch.int32) << 23
    lead = fields.view(torch.float32).double()
    g = torch.Generator().manual_seed(2)
    x = torch.cat([lead, lead * 1.999, torch.tensor([0.0, -0.0, 1e-320, 1e-45, 3.5e38, 1e300, math.inf, math.nan],
                                                    dtype=torch.float64),
                   torch.randn(100_000, generator=g, dtype=torch.float64)
                   * 2.0 ** torch.randint(-160, 140, (100_000,), generator=g).double()])
    x = torch.cat([x, -x])
    e = (x.to(torch.float32).abs().view(torch.int32) >> 23) & 0xFF
    want = torch.tensor([math.ldexp(1.0, max(int(k), 1) - 150) for k in e], dtype=torch.float64)
    assert torch.equal(ulp_bound_fp32(x), want)
