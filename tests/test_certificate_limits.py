"""Finite-range certificates at their limits (docs/design.md §4.6): each math function just
inside and just outside its certified domain, and each kind of site just inside and just
outside its format's range.  Outside, the element is uncertified (never judged); inside,
certified and accepted."""
import math

import pytest
import torch

import numoracle as no
from numoracle import backends
from numoracle.check import check_modes
from numoracle.formats import fp16, fp32


@pytest.fixture(scope="module", autouse=True)
def _interp():
    backends.select("interpreter")


def _program(name):
    fn = getattr(no, name)

    @no.reference
    def apply(x):
        return fn(x)
    apply.name = f"{name}_of"
    return apply


_REF = {"exp": torch.exp, "exp2": torch.exp2, "log": torch.log, "log2": torch.log2, "rsqrt": torch.rsqrt,
        "sqrt": torch.sqrt, "sigmoid": torch.sigmoid, "tanh": torch.tanh, "erf": torch.erf, "sin": torch.sin,
        "cos": torch.cos, "reciprocal": torch.reciprocal}

# (function, arguments certified, arguments outside the certified domain)
LIMITS = [
    # between the last finite exp and its certain overflow (FP32_EXP_INF); past it the value is
    # +inf exactly (tests/test_calculus_edges.py)
    ("exp", [88.7, -100.0, 0.0], [88.73]),
    ("exp2", [127.9, -140.0], [128.0]),
    ("log", [1e-38, 3e38], [0.0, -1.0]),
    ("log2", [1e-38, 2.0], [0.0, -2.0]),
    ("rsqrt", [1e-38, 1e30], [0.0, -1.0]),
    ("sqrt", [1e-30, 4.0], [-1e-30, -4.0]),
    ("reciprocal", [1e-30, -1e-30], [0.0]),
    ("sigmoid", [-88.7, 1e30, -88.8, -1e4, -3e38], []),   # below -88.72: 0 or the tiny value, see below
    ("tanh", [-1e30, 1e30, 0.0], []),
    ("erf", [-1e30, 1e30, 0.0], []),
    ("sin", [1e5, -1e5], [1.1e5]),
    ("cos", [1e5], [-1.1e5]),
]


@pytest.mark.parametrize("name,inside,outside", LIMITS, ids=[f[0] for f in LIMITS])
def test_a_math_call_is_uncertified_exactly_outside_its_domain(name, inside, outside):
    x = torch.tensor(inside + outside, dtype=torch.float32)
    with torch.no_grad():
        y = _REF[name](x.double()).float()
    for mode, v in check_modes(_program(name), y, (x,)).items():
        unc = v.outputs[0].uncertified
        expected = torch.tensor([False] * len(inside) + [True] * len(outside))
        assert torch.equal(unc, expected), (mode, name, unc, v.explain())
        assert v.n_rejected == 0, v.explain()
        if outside:
            assert any(s.kind in ("domain", "range") for s in v.certificate.failing)


@pytest.mark.parametrize("profile", ["interpreter", "h200"])
def test_sigmoid_below_the_exp_overflow_is_zero_or_its_tiny_value_and_nothing_else(profile):
    """tl.sigmoid is 1/(1 + exp(-x)): below x = -88.72 exp(-x) overflows fp32 and the kernel
    stores 0 where the value is below 2^-127. Such elements are certified: 0 and the true value
    are accepted, a value that is neither (1e-30, or the sign flipped to -1e-30 beside larger
    ones) rejected."""
    x = torch.tensor([-88.8, -100.0, -1e4, -3e38, -3.0], dtype=torch.float32)
    true = torch.sigmoid(x.double()).float()
    zero = torch.where(x < -88.72, torch.zeros_like(true), true)
    for y in (true, zero):
        for mode, v in check_modes(_program("sigmoid"), y, (x,), profile=profile).items():
            assert v.status == "accept", (mode, v.explain())
    for bad in (1e-30, -1e-30):
        y = zero.clone()
        y[1] = bad
        v = check_modes(_program("sigmoid"), y, (x,), profile=profile)["fixed"]
        assert v.status == "reject" and v.outputs[0].rejected.tolist() == [False, True, False, False, False]


def test_rsqrt_and_log_of_a_subnormal_leave_the_domain_under_a_flush_to_zero_profile():
    x = torch.tensor([2.0 ** -130, 2.0 ** -120], dtype=torch.float32)
    for name in ("rsqrt", "log"):
        y = _REF[name](x.double()).float()
        v = check_modes(_program(name), y, (x,), profile="h200")["fixed"]
        assert v.outputs[0].uncertified.tolist() == [True, False], name
        v = check_modes(_program(name), y, (x,), profile="interpreter")["fixed"]
        assert v.outputs[0].uncertified.tolist() == [False, False], name


@no.reference
def square(x):
    return x * x


@no.reference
def to_fp16(x):
    return x.to(fp16)


@no.reference
def exp_times(a, b):
    return no.exp(a) * b


@no.reference
def exp_to_fp16(x):
    return no.exp(x).to(fp16)


@no.reference
def double(x):
    return x * 2.0


@no.reference
def fp16_sum(x):
    return no.sum(x, axis=-1)


@no.reference
def fp32_dot(a, b):
    return no.matmul(a, b, acc=fp32)


def _judged(program, y, *inputs):
    return check_modes(program, y, inputs)


def _assert_infinity_judged(program, y, x, at):
    """y (the kernel's outputs of program on x) is infinite at index ``at``: every element is
    judged and accepted in both modes, and the largest finite value stored there is rejected."""
    assert torch.isinf(y[at])
    for v in _judged(program, y, x).values():
        assert not bool(v.outputs[0].uncertified.any()) and v.status == "accept", v.explain()
    finite = y.clone()
    finite[at] = torch.finfo(y.dtype).max
    assert _judged(program, finite, x)["fixed"].outputs[0].rejected.nonzero().flatten().tolist() == [at]


def test_an_fp32_product_that_may_overflow_is_uncertified_and_one_that_must_is_stored_infinite():
    # x*x: 3.24e38 (in range); 3.42e38, certainly past fp32's overflow threshold: the kernel
    # stores +inf, an exact value
    x = torch.tensor([1.8e19, 1.85e19], dtype=torch.float32)
    _assert_infinity_judged(square, x * x, x, at=1)
    # exp(80) * b with b = threshold / exp(80): exp's error puts the product's enclosure on both
    # sides of the threshold, so the kernel may store the largest value or +inf
    thr = float(torch.finfo(torch.float32).max) * (1 + 2.0 ** -25)
    a = torch.tensor([80.0, 80.0], dtype=torch.float32)
    b = torch.tensor([1000.0, thr / math.exp(80.0)], dtype=torch.float32)
    y = (torch.exp(a.double()) * b.double()).float()
    for v in _judged(exp_times, y, a, b).values():
        assert v.outputs[0].uncertified.tolist() == [False, True], v.explain()
        assert v.n_rejected == 0, v.explain()


def test_an_exact_power_of_two_scaling_past_the_range_is_stored_infinite():
    x = torch.tensor([1.7e38, 1.71e38], dtype=torch.float32)       # 2x: 3.4e38 in range, 3.42e38 not
    _assert_infinity_judged(double, x * 2, x, at=1)


@no.reference
def doubled_back(x):
    return (x.to(fp32) * 2.0).to(x.format)


def test_a_doubled_bf16_value_past_the_range_cast_back_to_bf16_is_stored_infinite():
    # 2x of a bf16 value is a bf16 value too, so the cast back rounds nothing: it still reads
    # the product's rounding, +inf past fp32's range (it had kept the product's taint)
    x = torch.tensor([1.0e38, -3.38953e38], dtype=torch.bfloat16)
    _assert_infinity_judged(doubled_back, (x.float() * 2).to(torch.bfloat16), x, at=1)


def test_a_sum_whose_partial_sums_may_overflow_is_uncertified():
    x = torch.tensor([[20000.0, 20000.0, -20000.0], [40000.0, 40000.0, -40000.0]], dtype=torch.float16)
    v = _judged(fp16_sum, torch.tensor([20000.0, 40000.0], dtype=torch.float16), x)["fixed"]
    # partial sums are bounded by the sum of magnitudes: 60000 stays below fp16's 65504; in the
    # second row some order adds 40000 + 40000
    assert v.outputs[0].uncertified.tolist() == [False, True]


def test_a_dot_whose_partial_sums_may_overflow_is_uncertified():
    a = torch.tensor([[1e38, 1e38, 1e38], [2e38, 2e38, 2e38]], dtype=torch.float32)
    b = torch.tensor([[1.0], [1.0], [-1.0]], dtype=torch.float32)
    # the second row's first two products add up past fp32's 3.4e38 in some order
    v = _judged(fp32_dot, torch.tensor([[1e38], [2e38]], dtype=torch.float32), a, b)["fixed"]
    assert v.outputs[0].uncertified.tolist() == [[False], [True]]


def test_the_certificate_names_the_site_and_counts_its_violations():
    # arguments whose fp32 exp may be the largest finite value or +inf
    x = torch.tensor([1.0, 88.73, 88.74, 2.0], dtype=torch.float32)
    v = check_modes(_program("exp"), torch.exp(x.double()).float(), (x,))["fixed"]
    failing = v.certificate.failing
    assert len(failing) >= 1
    site = failing[0]
    assert "exp" in site.label and site.violations == 2 and site.elements == 4
    assert math.isclose(site.worst, float(x[2]))


def test_an_output_that_is_exactly_infinite_is_judged_as_that_infinity():
    # exp past its certain overflow returned as it is: +inf is the one value the region holds
    x = torch.tensor([1.0, 89.0, 90.0, 2.0], dtype=torch.float32)
    y = torch.exp(x.double()).float()
    for mode, v in check_modes(_program("exp"), y, (x,)).items():
        o = v.outputs[0]
        assert v.status == "accept" and not bool(o.uncertified.any()), (mode, v.explain())
    for bad, special in ((torch.finfo(torch.float32).max, False), (math.nan, True), (-math.inf, True)):
        b = y.clone()
        b[1] = bad
        o = check_modes(_program("exp"), b, (x,))["fixed"].outputs[0]
        assert o.rejected.tolist() == [False, True, False, False], bad
        assert bool(o.special[1]) == special, bad


def test_an_rms_norm_row_whose_sum_of_squares_overflows_is_judged():
    # a row holding bf16's largest value: its square is past fp32's range, so the row's mean
    # square is +inf in every order, rsqrt(+inf) is exactly 0 and the row's outputs are 0
    from numoracle.operators.references import rms_norm
    g = torch.Generator().manual_seed(0)
    x = torch.randn(3, 64, generator=g).to(torch.bfloat16)
    x[1, 5] = torch.finfo(torch.bfloat16).max
    x[2, 7] = -torch.finfo(torch.bfloat16).max
    w = torch.randn(64, generator=g).to(torch.bfloat16)
    xf = x.float()
    r = torch.rsqrt((xf * xf).mean(-1, keepdim=True) + 1e-6)
    y = (xf * r).to(torch.bfloat16) * w
    assert r[1:].eq(0).all() and y[1:].eq(0).all()
    for backend in ("interpreter", "gpu"):
        v = no.check(rms_norm, (y, r.squeeze(-1)), (x, w), backend=backend)
        assert v.status == "accept", (backend, v.explain())
        bad = y.clone()
        bad[1, 3] = 2.0 ** -10
        v = no.check(rms_norm, (bad, r.squeeze(-1)), (x, w), backend=backend)
        assert v.outputs[0].rejected.nonzero().tolist() == [[1, 3]], backend


@no.reference
def signed_row_sum(x, y):
    return no.sum(x * y, axis=-1)


def test_a_sum_with_a_product_past_the_range_and_terms_of_both_signs_is_uncertified():
    # rounded first, 3.45e38 is +inf and so is the sum; fused into the adds, -3.4e38 brings
    # it back: nothing decides it
    x = torch.tensor([[3.45e19, -3.4e19, 1.0]], dtype=torch.float32)
    y = torch.tensor([[1e19, 1e19, 1.0]], dtype=torch.float32)
    v = no.check(signed_row_sum, torch.tensor([math.inf]), (x, y))
    assert v.outputs[0].uncertified.tolist() == [True]
