"""The error-form algebra (docs/design.md §4), with exact expected radii: small programs
whose fixed-input radius is written out term by term from the rules, and the form
operations themselves.  A change to a constant, a dropped term or a wrong combination
rule changes these numbers."""
import math

import pytest
import torch

import numoracle as no
from numoracle import formats as F
from numoracle.calculus import form as FM
from numoracle.calculus.ops import gamma_bound
from numoracle.calculus.tracked import ulp_bound_fp32
from numoracle.verdict.evaluation import run_reference
from numoracle.formats import bf16
from numoracle.mathlib import load as load_profile

U32 = 2.0 ** -24
SLACK = 2.0 ** -50          # the float64 centre's own rounding (tracked._FP64_SLACK)
PROFILE = load_profile("interpreter")


def _pre_radius(program, *inputs, **params):
    """(centre, fixed radius) of the program's first output before its store."""
    outs, ctx, _ = run_reference(program, inputs, params, PROFILE)
    o = outs[0]
    pre = o.pre if o.pre is not None else o
    return pre.c, pre.radius().expand(pre.c.shape), pre, ctx


def _f32(*vals):
    return torch.tensor(vals, dtype=torch.float32)


# ---------------------------------------------------------------------------- programs

@no.reference
def triple_product(x, w, v):
    return (x * w) * v


def test_a_rounded_product_then_an_exact_one_has_radius_u_plus_the_centres_slack():
    # x*w: exact inputs, one fp32 rounding: u|xw| (its float64 product is exact: no slack);
    # times v: that error scaled by |v|, and the float64 slack of the inexact product xwv
    x, w, v = _f32(1.1, -3.3, 7.7), _f32(2.9, 0.7, -1.3), _f32(5.1, 1.9, 0.37)
    c, R, _, _ = _pre_radius(triple_product, x, w, v)
    xw = x.double() * w.double()
    expected = U32 * xw.abs() * v.double().abs() + SLACK * (xw * v.double()).abs()
    torch.testing.assert_close(R, expected, rtol=1e-12, atol=0)


@no.reference
def plain_sum(x, *, order="any"):
    return no.sum(x, axis=-1, order=order)


@no.reference
def blocked_sum(x, *, width=2):
    # an integer order (blocks of that width), kept apart: a parameter holds one type
    return no.sum(x, axis=-1, order=width)


@pytest.mark.parametrize("n,order,d", [(2, "any", 1), (5, "any", 4), (8, "tree", 3), (7, "tree", 3),
                                       (9, 2, 2), (2, "sequential", 1)])
def test_a_sum_costs_gamma_of_its_depth_times_the_sum_of_magnitudes(n, order, d):
    g = torch.Generator().manual_seed(n)
    x = torch.randn(3, n, generator=g).to(torch.float32)
    if isinstance(order, int):
        _, R, _, _ = _pre_radius(blocked_sum, x, width=order)
    else:
        _, R, _, _ = _pre_radius(plain_sum, x, order=order)
    S = x.double().abs().sum(-1)
    expected = gamma_bound(d, U32) * S + (SLACK + gamma_bound(n, 2.0 ** -53)) * S
    torch.testing.assert_close(R, expected, rtol=1e-12, atol=0)


@no.reference
def mean3(x):
    return no.mean(x, axis=-1)


def test_a_mean_over_a_count_that_is_not_a_power_of_two_adds_half_an_ulp_for_the_division():
    x = _f32(1.1, 2.3, -0.7).reshape(1, 3)
    _, R, _, _ = _pre_radius(mean3, x)
    S = x.double().abs().sum()
    Rs = gamma_bound(2, U32) * S + (SLACK + gamma_bound(3, 2.0 ** -53)) * S
    q = x.double().sum() / 3
    Rq = Rs / 3 + SLACK * q.abs()
    # before the store (the stored mean is the rounding of this): the sum's error over 3, the
    # quotient's float64 slack and max(div - 1/2, 1/2) = 1/2 ulp for a reciprocal multiply or
    # a library division (a stored mean is RN of a value that far from s/3)
    expected = Rq + 0.5 * ulp_bound_fp32((q.abs() + Rq).reshape(1))
    torch.testing.assert_close(R, expected.reshape(R.shape), rtol=1e-12, atol=0)


@no.reference
def exp_of(x):
    return no.exp(x)


@no.reference
def rsqrt_of(x):
    return no.rsqrt(x)


@pytest.mark.parametrize("program,fn,name", [(exp_of, torch.exp, "exp"), (rsqrt_of, torch.rsqrt, "rsqrt")])
def test_a_math_call_on_an_exact_argument_costs_its_profile_ulps(program, fn, name):
    x = _f32(0.3, 2.5, 11.0)
    _, R, _, _ = _pre_radius(program, x)
    f = fn(x.double())
    model = PROFILE.model(name)
    ulps = model.a + model.b * x.double().abs()
    expected = SLACK * f + ulps * ulp_bound_fp32(f + SLACK * f)
    torch.testing.assert_close(R, expected, rtol=1e-12, atol=0)


@no.reference
def exp_of_bf16_product(x, w):
    return no.exp(x * w)          # bf16: evaluated in fp32, rounded back to bf16


def test_a_math_call_on_an_inexact_argument_adds_its_curvature_remainder():
    # the bf16 product's error u|xw| (plus its second-order u R, R = 0 here) passes exp
    # as e^c e; the rigorous remainder bounds e^(c+R) R^2 / 2 (the enclosure's curvature)
    x = torch.tensor([1.1, -2.3, 3.7], dtype=torch.bfloat16)
    w = torch.tensor([1.3, 0.9, 0.7], dtype=torch.bfloat16)
    outs, _, _ = run_reference(exp_of_bf16_product, (x, w), {}, PROFILE)
    exp_site = outs[0].pre              # the fp32 exp, before its rounding back to bf16
    xw = x.double() * w.double()
    assert not bool(F.representable(xw, bf16).any())
    c = torch.exp(xw)
    Rt = 2.0 ** -8 * xw.abs()           # the bf16 product's rounding (exact inputs, exact float64 product)
    first = c * Rt
    rem = 0.5 * torch.exp(xw + Rt) * Rt * Rt
    R_exact_fn = first + rem + SLACK * c
    model = PROFILE.model("exp")
    x_abs = (xw.abs() + Rt)
    lib = (model.a + model.b * x_abs) * ulp_bound_fp32(c + R_exact_fn)
    torch.testing.assert_close(exp_site.radius(), R_exact_fn + lib, rtol=1e-12, atol=0)
    assert bool((rem > 1e-4 * (R_exact_fn + lib)).all())      # the remainder is not negligible here


@no.reference
def same_symbol_twice(r, v):
    # r [R, 1]: its rounding (x * 3) is one variable per row, shared by every element
    t = r * 3.0
    p = v * t
    return p - p


def test_two_paths_to_one_symbol_combine_with_their_sign():
    r = _f32(1.1, -0.7).reshape(2, 1)
    v = _f32(2.9, -1.3, 0.4, 5.5, -0.1, 3.3).reshape(2, 3)
    _, R, pre, ctx = _pre_radius(same_symbol_twice, r, v)
    # p - p: the shared symbol of t cancels exactly; the product roundings of p are private
    # (element-local) and add; so do their second-order and slack terms
    t = 3.0 * r.double()
    a_t = U32 * t.abs()                                   # t's rounding (x * 3 exact in float64)
    cp = v.double() * t
    Rp = v.double().abs() * a_t + SLACK * cp.abs()        # p before its rounding
    Rp_rounded_extra = U32 * cp.abs() + U32 * Rp          # its rounding and second order
    # p - p = 0 before its store (the region's interval; the store is the rounding check's)
    expected = 2 * (SLACK * cp.abs() + Rp_rounded_extra)
    torch.testing.assert_close(R, expected, rtol=1e-12, atol=0)
    assert all(bool((t_.coef == 0).all()) for t_ in pre.form.shared.values())


# ---------------------------------------------------------------------------- the form itself

def _t(*v):
    return torch.tensor(v, dtype=torch.float64)


def test_adding_one_symbol_twice_adds_its_coefficients_with_sign():
    one = _t(1.0)
    f1 = FM.Form({7: FM.Term(_t(3.0, -2.0), one)})
    f2 = FM.Form({7: FM.Term(_t(-1.0, -2.0), one)})
    s = FM.add(f1, f2, condensed=True)
    torch.testing.assert_close(s.shared[7].coef, _t(2.0, -4.0))
    torch.testing.assert_close(FM.fixed_radius(s, _t(0.0, 0.0)), _t(2.0, 4.0))


def test_independent_symbols_add_their_magnitudes_in_the_worst_case():
    one = _t(1.0)
    s = FM.add(FM.Form({1: FM.Term(_t(3.0), one)}), FM.Form({2: FM.Term(_t(-1.0), one)}), condensed=True)
    torch.testing.assert_close(FM.fixed_radius(s, _t(0.0)), _t(4.0))


def test_dependent_terms_add_standard_deviations_independent_ones_variances():
    # symbols 1 and 2 are made of the same roundings (provenance {10}); symbol 3 is not
    provs = {1: (frozenset({10, 1}), "a"), 2: (frozenset({10, 2}), "b"), 3: (frozenset({3}), "c")}
    f = FM.Form({1: FM.Term(_t(3.0), _t(0.5)), 2: FM.Term(_t(4.0), _t(0.25)), 3: FM.Term(_t(2.0), _t(1.0))})
    s2 = FM.stat_sigma2(f, provs, _t(0.0))
    torch.testing.assert_close(s2, _t((3.0 * 0.5 + 4.0 * 0.25) ** 2 + 2.0 ** 2))


def test_a_private_entry_dependent_on_a_symbol_joins_its_cluster():
    provs = {1: (frozenset({5, 1}), "sym")}
    f = FM.Form({1: FM.Term(_t(2.0), _t(1.0))},
                [FM.Entry(_t(3.0), _t(1.5 ** 2), frozenset({5}), "p")])
    torch.testing.assert_close(FM.stat_sigma2(f, provs, _t(0.0)), _t((2.0 + 1.5) ** 2))
    # merging two entries of one rounding (overlapping provenance) adds standard deviations too
    e = FM.merge_entry(FM.Entry(_t(1.0), _t(4.0), frozenset({9}), "x"),
                       FM.Entry(_t(2.0), _t(9.0), frozenset({9}), "x"), "x")
    torch.testing.assert_close(e.var, _t(25.0))
    e = FM.merge_entry(FM.Entry(_t(1.0), _t(4.0), frozenset({8}), "x"),
                       FM.Entry(_t(2.0), _t(9.0), frozenset({9}), "x"), "x")
    torch.testing.assert_close(e.var, _t(13.0))


def test_the_statistical_radius_is_lambda_sigma_plus_the_deterministic_part_capped_by_the_fixed():
    from numoracle.statistical import lam
    from numoracle.verdict.regions import region_of
    x = torch.randn(4, 300, generator=torch.Generator().manual_seed(3)).to(torch.float32)
    outs, ctx, _ = run_reference(plain_sum, (x,), {}, PROFILE)
    reg = region_of(outs[0], 4, 1e-6)
    S = x.double().abs().sum(-1)
    d = 299
    gamma = gamma_bound(d, U32)
    sigma = math.sqrt(d) * U32 * S * (1 + gamma)
    det = (SLACK + gamma_bound(300, 2.0 ** -53)) * S
    torch.testing.assert_close(reg.stat, torch.minimum(reg.fixed, lam(4, 1e-6) * sigma + det), rtol=1e-12, atol=0)
    assert bool((reg.stat < 0.5 * reg.fixed).all())       # many roundings: far below the worst case
