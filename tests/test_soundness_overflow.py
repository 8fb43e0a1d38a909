"""Soundness where values leave their format's range (docs/design.md §4, "Exact infinities"):
a sum, quotient or cast whose enclosure is certainly past the overflow threshold is that
infinity, and a product is one for every operation that cannot be contracted with it.  An
emulated correct kernel (FMAs on or off, every rounding directed, math calls at the edge of
their bound) on inputs near fp32's overflow is never rejected in fixed-input mode, and the
infinities are judged, not left uncertified."""

import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import numoracle as no
from numoracle.check import check_modes
from numoracle.formats import bf16, e4m3fn, fp16
from numoracle.selftest.emulator import Plan, emulate


@no.reference
def product_plus(x, y, z, w):
    return x * y + z


@no.reference
def minus_product_plus(x, y, z, w):
    return -(x * y) + z


@no.reference
def two_products(x, y, z, w):
    return x * y - z * w


@no.reference
def product_chain(x, y, z, w):
    return x * y * w


@no.reference
def product_to_bf16(x, y, z, w):
    return (x * y).to(bf16)


@no.reference
def clamped_quotient(x, y, z, w):
    return no.clamp(x / w, -448.0, 448.0).to(e4m3fn)


@no.reference
def sum_to_fp16(x, y, z, w):
    return (x + z).to(fp16)


@no.reference
def maximum_then_add(x, y, z, w):
    return no.maximum(x * y, z) + w


@no.reference
def gelu_tanh(x, y, z, w):
    u = 0.7978845608028654 * (x + 0.044715 * x * x * x)
    return 0.5 * x * (1.0 + (1.0 - 2.0 / (no.exp(2.0 * u) + 1.0)))


@no.reference
def rms_of_row(x, y, z, w):
    # an RMSNorm's statistic over rows of 8: squares certainly >= 0, their sum past the range
    # where one square is
    xr = x.reshape(8, 8)
    return no.rsqrt(no.mean(xr * xr, axis=-1, keepdims=True) + 1e-6) * xr


@no.reference
def signed_sum(x, y, z, w):
    # products of both signs: one past the range does not decide the sum
    return no.sum((x * y).reshape(8, 8), axis=-1)


@no.reference
def sum_in_bf16(x, y, z, w):
    xb = (x * 1e-19).to(bf16).reshape(8, 8)
    return no.sum(xb * xb * 1e19, axis=-1)


PROGRAMS = [product_plus, minus_product_plus, two_products, product_chain, product_to_bf16,
            clamped_quotient, sum_to_fp16, maximum_then_add, gelu_tanh, rms_of_row, signed_sum,
            sum_in_bf16]


def _near_overflow(g, n, lo, hi):
    """fp32 values of both signs, log-uniform in magnitude over [10^lo, 10^hi]."""
    e = lo + (hi - lo) * torch.rand(n, generator=g, dtype=torch.float64)
    sign = torch.where(torch.rand(n, generator=g) < 0.5, -1.0, 1.0).to(torch.float64)
    return (sign * 10.0 ** e).clamp(-3.4e38, 3.4e38).to(torch.float32)


judged_infinities = []


@settings(max_examples=80, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(program=st.sampled_from(PROGRAMS), seed=st.integers(0, 2 ** 31 - 1),
       fma=st.booleans(), rounding=st.sampled_from(["nearest", "up", "down", "away"]),
       math_=st.sampled_from(["random", "extreme", "directed"]), gpu=st.booleans())
def test_an_emulated_kernel_near_overflow_is_never_rejected(program, seed, fma, rounding, math_, gpu):
    g = torch.Generator().manual_seed(seed)
    n = 64
    # products of two of x, y near 1e19 reach fp32's 3.4e38; z, w near it themselves; small
    # divisors w for the quotient
    x = _near_overflow(g, n, 17.0, 20.0) if program is not sum_to_fp16 else _near_overflow(g, n, 3.0, 6.0)
    y = _near_overflow(g, n, 17.0, 20.0)
    z = _near_overflow(g, n, 30.0, 38.6) if program is not sum_to_fp16 else _near_overflow(g, n, 3.0, 6.0)
    w = _near_overflow(g, n, -30.0, 0.0) if program is clamped_quotient else _near_overflow(g, n, 30.0, 38.6)
    if program is gelu_tanh:
        x = _near_overflow(g, n, 0.0, 38.5)
    if program is rms_of_row:
        x = _near_overflow(g, n, 0.0, 20.0)
    inputs = (x, y, z, w)
    profile = "h200" if gpu else "interpreter"
    outs = emulate(program, inputs, {}, Plan(seed=seed, fma=fma, rounding=rounding, math=math_, profile=profile))
    v = check_modes(program, outs, inputs, modes=("fixed",), backend="gpu" if gpu else "interpreter")["fixed"]
    assert v.status != "reject", v.explain()
    out = outs[0] if isinstance(outs, (tuple, list)) else outs
    judged_infinities.append(int((torch.isinf(out.float()) & ~v.outputs[0].uncertified).sum()))


def test_the_overflow_soundness_run_judged_infinities():
    """The property above is not vacuous: its kernels stored infinities that were judged."""
    if not judged_infinities:
        test_an_emulated_kernel_near_overflow_is_never_rejected()
    assert sum(judged_infinities) > 100, judged_infinities


def test_rows_whose_square_overflows_are_certified():
    """rms_of_row's rows holding a value whose square is past fp32's range are judged (their
    statistic is +inf, rsqrt of it exactly 0), not left uncertified."""
    judged = 0
    for seed in range(12):
        g = torch.Generator().manual_seed(seed)
        x = _near_overflow(g, 64, 0.0, 20.0)
        inputs = (x, x, x, x)
        outs = emulate(rms_of_row, inputs, {}, Plan(seed=seed, fma=bool(seed % 2), rounding="away"))
        v = check_modes(rms_of_row, outs, inputs, modes=("fixed",))["fixed"]
        assert v.status != "reject", v.explain()
        over = ((x.double().reshape(8, 8) ** 2) >= 3.41e38).any(-1)
        assert not bool(v.outputs[0].uncertified[over].any())
        judged += int(over.sum())
    assert judged > 10
