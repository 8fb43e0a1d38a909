"""The reference language has no silent hazards (issue #30, item 5).

Each test here failed on the code before this change: a tracked comparison used as a Python
bool ran one branch for the whole tensor; Python's max(), sum(), float(), round() and the
math module silently mis-handled tracked values or failed with Python's own TypeError;
there was no ``**`` and no constant maker; ``torch.exp`` and ``dim=`` gave torch's and
Python's own errors; ``no.where`` took the unselected branch's certificate taint where the
condition was decided, and none of the condition's own."""

from __future__ import annotations

import math

import pytest
import torch

import numoracle as no
from numoracle.errors import LanguageMisuse
from numoracle.formats import bf16, fp32

X = torch.tensor([[-3.0, -0.5, 0.0, 0.25, 1.0, 2.5, 3.0, 3.453125]], dtype=torch.float32)


def evaluate(prog, *inputs):
    return no.evaluate(prog, inputs, {})


def statuses(prog, inputs, outputs):
    return {m: v.status for m, v in evaluate(prog, *inputs).judge(outputs).items()}


def raises(prog, *needles, exc=no.InvalidArgument):
    with pytest.raises(exc) as e:
        evaluate(prog, X)
    for needle in needles:
        assert needle in str(e.value), (needle, str(e.value))
    return str(e.value)


# ------------------------------------------------------------------- a tracked value as a bool

def test_comparison_used_as_a_python_bool_raises_with_the_fix():
    @no.reference
    def relu_by_if(x):
        if x > 0:                       # one branch for the whole tensor, before
            return x
        return x * 0.0
    raises(relu_by_if, "Python bool", "no.where(x > 0, a, b)")


def test_and_or_not_on_comparisons_raise():
    @no.reference
    def both(x):
        return no.where((x > 0) and (x < 2), x, -x)
    raises(both, "Python bool", "&, | and ~")

    @no.reference
    def combined(x):                    # the supported spelling still works
        return no.where((x > 0) & (x < 2), x, -x)
    assert statuses(combined, (X,), (torch.where((X > 0) & (X < 2), X, -X),)) == \
        {"statistical": "accept", "fixed": "accept"}


def test_tracked_value_used_as_a_python_bool_raises():
    @no.reference
    def truthy(x):
        return x if x else -x
    raises(truthy, "Python bool", "no.where")


def test_equality_is_per_element_not_identity():
    # before, x == 0 was Python's identity test: False for the whole tensor, silently
    @no.reference
    def zero_to_one(x):
        return no.where(x == 0, x + 1.0, x)
    expected = torch.where(X == 0, X + 1, X)
    assert statuses(zero_to_one, (X,), (expected,)) == {"statistical": "accept", "fixed": "accept"}
    assert statuses(zero_to_one, (X,), (X,))["fixed"] == "reject"

    @no.reference
    def branch_on_eq(x):
        if x == 0:
            return x
        return -x
    raises(branch_on_eq, "Python bool")


# ------------------------------------------------------------------- builtins and the math module

def test_python_max_min_of_a_tracked_value_raise_pointing_to_maximum():
    @no.reference
    def py_max(x):
        return max(0.0, x)
    raises(py_max, "max()", "no.maximum(x, 0.0)")

    @no.reference
    def py_min(x):
        return min(x, 1.0)
    raises(py_min, "min()", "no.minimum")


def test_no_max_with_a_number_for_its_axis_points_to_maximum():
    @no.reference
    def reduce_by_mistake(x):
        return no.max(x, 0.0)
    raises(reduce_by_mistake, "axis", "no.maximum(x, 0.0)")


def test_python_sum_and_iteration_raise_pointing_to_reductions():
    @no.reference
    def py_sum(x):
        return sum(x)                   # looped over the first axis, before
    raises(py_sum, "cannot be iterated", "no.sum(x, axis=...)")

    @no.reference
    def unpack(x):
        a, = x
        return a
    raises(unpack, "cannot be iterated")


def test_a_mask_or_a_tracked_value_as_an_index_raises_pointing_to_where_and_gather():
    # before: torch's "Multiple dispatch failed ... Cond", reported as inputs the program cannot run on
    @no.reference
    def positives(x):
        return x[x > 0]
    raises(positives, "indexed by a comparison of tracked values", "no.where(cond, x, 0.0)", exc=LanguageMisuse)

    @no.reference
    def some_columns(x):
        return x[:, x[0] > 0]
    raises(some_columns, "(a mask of shape (8,))", exc=LanguageMisuse)

    @no.reference
    def by_values(x):
        return x[0, x]
    raises(by_values, "indexed by tracked values", "no.gather(x, ids, axis)", exc=LanguageMisuse)

    @no.reference
    def by_integers(x):                 # a plain index tensor and a plain mask still index
        return x[:, torch.tensor([1, 0])][:, torch.tensor([True, False])]
    assert statuses(by_integers, (X,), (X[:, 1:2],)) == {"statistical": "accept", "fixed": "accept"}


@pytest.mark.parametrize("conv, needle", [
    (float, "float()"), (int, "int()"), (round, "round()"), (math.exp, "math"), (math.sqrt, "math"),
    (math.floor, "math.floor()"), (math.isfinite, "math"),
])
def test_python_numbers_and_math_functions_raise_pointing_to_no(conv, needle):
    @no.reference
    def prog(x):
        return conv(x)
    raises(prog, needle, "no.exp", "no.sqrt")


def test_abs_is_modelled():
    @no.reference
    def prog(x):
        return abs(x)
    assert statuses(prog, (X,), (X.abs(),)) == {"statistical": "accept", "fixed": "accept"}


# ------------------------------------------------------------------- torch-style misuse

@pytest.mark.parametrize("fn, spelled", [
    (torch.exp, "no.exp(x)"), (torch.sigmoid, "no.sigmoid(x)"), (torch.sqrt, "no.sqrt(x)"),
    (lambda x: torch.sum(x, dim=-1), "no.sum(x, axis=-1"),
    (lambda x: torch.where(x > 0, x, x), "no.where"), (lambda x: torch.maximum(x, x), "no.maximum"),
    (lambda x: torch.softmax(x, -1), "no.exp(x - no.max"),
])
def test_torch_functions_on_tracked_values_point_to_no(fn, spelled):
    @no.reference
    def prog(x):
        return fn(x)
    raises(prog, "torch.", spelled)


@pytest.mark.parametrize("call, spelled", [
    (lambda x: x.exp(), "no.exp(x)"), (lambda x: x.sum(-1), "no.sum(x, axis=-1"),
    (lambda x: x.clamp(min=0.0), "no.clamp"), (lambda x: x.item(), "has no Python number: return the value as an output"),
    (lambda x: x.square(), "x * x"),
])
def test_torch_methods_on_tracked_values_point_to_no(call, spelled):
    @no.reference
    def prog(x):
        return call(x)
    raises(prog, "has no attribute", spelled, exc=AttributeError)


@pytest.mark.parametrize("kw, needle", [({"dim": -1}, "dim= -> axis="), ({"keepdim": True}, "keepdim= -> keepdims="),
                                        ({"dtype": torch.float32}, "acc=")])
def test_torch_keywords_point_to_ours(kw, needle):
    @no.reference
    def prog(x):
        return no.sum(x, **kw)
    raises(prog, needle)


def test_torch_style_casts_are_casts():
    b = X.to(torch.bfloat16)

    @no.reference
    def by_float(x):
        return (x.float() * 3.0).half().bfloat16()

    @no.reference
    def by_to(x):
        return (x.to(fp32) * 3.0).to("fp16").to(bf16)
    ra, rb = evaluate(by_float, b).regions[0], evaluate(by_to, b).regions[0]
    assert ra.fmt is rb.fmt is bf16
    assert torch.equal(ra.centre, rb.centre) and torch.equal(ra.fixed, rb.fixed)


def test_a_tensor_operand_still_reaches_the_reflected_operator():
    # torch's Tensor.__add__ consults __torch_function__; a runtime argument on the left must
    # still reach Tracked.__radd__ (and be exact in its dtype)
    n = torch.tensor(2.0, dtype=torch.float32)

    @no.reference
    def prog(x):
        return n * x + n
    assert statuses(prog, (X,), (2 * X + 2,)) == {"statistical": "accept", "fixed": "accept"}


# ------------------------------------------------------------------- powers and constants

def _regions_equal(p, q, *inputs):
    a, b = evaluate(p, *inputs).regions[0], evaluate(q, *inputs).regions[0]
    assert a.fmt is b.fmt
    for k in ("centre", "fixed", "stat"):
        assert torch.equal(getattr(a, k), getattr(b, k)), k


def test_integer_powers_are_the_products_a_kernel_writes():
    b = X.to(torch.bfloat16)

    @no.reference
    def sq(x):
        return (x.to(fp32) ** 2).to(x.format)

    @no.reference
    def sq_by_product(x):
        xf = x.to(fp32)
        return (xf * xf).to(x.format)
    _regions_equal(sq, sq_by_product, b)

    @no.reference
    def cube(x):
        return x.to(fp32).pow(3.0)

    @no.reference
    def cube_by_product(x):
        xf = x.to(fp32)
        return xf * xf * xf
    _regions_equal(cube, cube_by_product, b)
    xf = b.float()
    assert statuses(sq, (b,), ((xf * xf).to(torch.bfloat16),)) == {"statistical": "accept", "fixed": "accept"}

    @no.reference
    def zeroth(x):
        return x ** 0
    r = evaluate(zeroth, X).regions[0]
    assert torch.equal(r.centre, torch.ones_like(X, dtype=torch.float64)) and not r.fixed.any()


@pytest.mark.parametrize("expo, needle", [(0.5, "no.sqrt(x)"), (-1, "1.0 / x ** 1"), (2.5, "exp2")])
def test_other_powers_raise_with_the_spelling(expo, needle):
    @no.reference
    def prog(x):
        return x ** expo
    raises(prog, needle)


def test_a_tracked_exponent_points_to_exp2():
    @no.reference
    def prog(x):
        return 2 ** x
    raises(prog, "no.exp2(x)")


def test_full_like_makes_a_rounded_exact_constant():
    b = X.to(torch.bfloat16)

    @no.reference
    def plus_tenth(x):
        c = no.full_like(x.to(fp32), 0.1)
        assert c.shape == x.shape and c.format is fp32
        return x.to(fp32) + c

    tenth = torch.tensor(0.1, dtype=torch.float32)
    good = b.float() + tenth
    assert statuses(plus_tenth, (b,), (good,)) == {"statistical": "accept", "fixed": "accept"}

    @no.reference
    def tenth_alone(x):
        return no.full_like(x, 0.1, fp32)
    r = evaluate(tenth_alone, b).regions[0]
    # the fp32 constant a kernel holds (tl.full), exactly: one value accepted per element
    assert torch.equal(r.centre, torch.full(b.shape, float(tenth), dtype=torch.float64))
    assert not r.fixed.any()
    off = torch.nextafter(torch.full(b.shape, 0.1), torch.tensor(1.0))
    assert statuses(tenth_alone, (b,), (off,))["fixed"] == "reject"

    @no.reference
    def zeros_ones(x):
        return no.zeros_like(x) + no.ones_like(x, "bf16") * x
    assert statuses(zeros_ones, (b,), (b,)) == {"statistical": "accept", "fixed": "accept"}


def test_full_like_refuses_a_tensor_value():
    @no.reference
    def prog(x):
        return no.full_like(x, torch.tensor(1.0))
    raises(prog, "expected a Python number")


# ------------------------------------------------------------------- where and taint

def test_decided_where_does_not_take_the_unselected_branchs_taint():
    # exp(100 x) overflows fp32 for x > 0.89, where x > 0 selects x: the kernel's tl.where
    # discards the overflowed value; before, every such element came out uncertified
    @no.reference
    def guarded(x):
        return no.where(x > 0, x, no.exp(100.0 * x))
    kernel = torch.where(X > 0, X, torch.exp(100.0 * X))
    assert statuses(guarded, (X,), (kernel,)) == {"statistical": "accept", "fixed": "accept"}
    wrong = kernel.clone()
    wrong[0, 6] = torch.nextafter(wrong[0, 6], torch.tensor(9.0))
    assert statuses(guarded, (X,), (wrong,))["fixed"] == "reject"


def test_where_stays_uncertified_where_the_selected_branch_overflows():
    # an fp32 product past the range (x * 3e38 for x = 2.5, 3, 3.45) may be the largest value or +inf
    # as far as the calculus knows: the selected branch's taint stays
    @no.reference
    def selected_overflows(x):
        return no.where(x > 0, x * 3.0e38, x)
    kernel = torch.where(X > 0, X * 3.0e38, X)
    v = evaluate(selected_overflows, X).judge((kernel,))
    assert {m: r.status for m, r in v.items()} == {"statistical": "uncertified", "fixed": "uncertified"}
    assert v["fixed"].outputs[0].uncertified.tolist() == [[False] * 5 + [True] * 3]

    # an exp past its certain overflow is +inf exactly (design §4): selected, it is judged
    @no.reference
    def selected_exp(x):
        return no.where(x > 0, no.exp(100.0 * x), x)
    kernel = torch.where(X > 0, torch.exp(100.0 * X), X)
    v = evaluate(selected_exp, X).judge((kernel,))
    # exp(25) is finite; exp(100) and beyond are +inf
    assert {m: r.status for m, r in v.items()} == {"statistical": "accept", "fixed": "accept"}


def test_undecided_where_takes_both_branches_taint():
    # (3 x) / 3 compared with x: equal at the centre, the kernel's may differ either way where
    # 3 x rounds (undecided there); the overflowing branch taints those elements. X's values
    # have short significands, so 3 x is exact and the condition decided: no taint from it
    @no.reference
    def undecided(x):
        return no.where((x * 3.0) / 3.0 > x, no.exp(100.0 * x), x)
    inexact = torch.tensor([[1.1, 0.3, 2.7, 3.3, -0.7, 0.1]], dtype=torch.float32)
    r = evaluate(undecided, inexact).regions[0]
    overflow = (100.0 * inexact.double()).exp() > torch.finfo(torch.float32).max
    assert bool(overflow.any()) and not bool(overflow.all())
    assert r.taint is not None and bool(r.taint[overflow].all()) and not bool(r.taint[~overflow].any())
    decided = evaluate(undecided, X).regions[0]
    assert decided.taint is None or not bool(decided.taint.any())


def test_a_tainted_condition_leaves_the_element_uncertified():
    # x * 1e38 overflows fp32 for the last element (3.453125e38): the kernel's product is
    # inf and inf - 3.4e38 < 1e37 is False, while the centre (5.3e36 < 1e37) says True.
    # Before, the condition's operands' taint was dropped and this kernel was rejected.
    @no.reference
    def compare_overflowed(x):
        return no.where(x * 1e38 - 3.4e38 < 1e37, x, -x)
    y = X * 1e38
    assert torch.isinf(y[0, 7])
    kernel = torch.where(y - 3.4e38 < 1e37, X, -X)
    v = evaluate(compare_overflowed, X).judge((kernel,))
    assert {m: r.status for m, r in v.items()} == {"statistical": "uncertified", "fixed": "uncertified"}
    r = evaluate(compare_overflowed, X).regions[0]
    # tainted exactly where the product leaves fp32's range (in float64): a product's rounding
    # may be skipped by its contraction into the subtraction, so its overflow is not a value.
    # Where the difference itself certainly overflows (-3e38 - 3.4e38, contracted or not), it is
    # -inf exactly, and -inf < 1e37 is decided
    big = torch.finfo(torch.float32).max
    p64 = X.double() * float(torch.tensor(1e38, dtype=torch.float32))
    leaves = p64.abs() > big
    assert leaves[0, 7] and not leaves[0, :7].any()
    assert torch.equal(r.taint.expand(X.shape), leaves)
    assert ((p64 - float(torch.tensor(3.4e38, dtype=torch.float32))).abs() > big)[0, :2].all()
    good = kernel.clone()
    good[0, 7] = 0.0                                          # an uncertified element is not judged
    assert {m: r.status for m, r in evaluate(compare_overflowed, X).judge((good,)).items()} \
        == {"statistical": "uncertified", "fixed": "uncertified"}
    flipped = kernel.clone()
    flipped[0, 0] = -flipped[0, 0]                            # -inf < 1e37 selects x, not -x
    assert {m: r.status for m, r in evaluate(compare_overflowed, X).judge((flipped,)).items()} \
        == {"statistical": "reject", "fixed": "reject"}


# ------------------------------------------------------------------- exact special arguments

def _exp_ref(x):
    return no.exp(x)


def _softmax_num(x):
    # a softmax numerator: at the row's maximum the argument is x - x = 0 exactly
    return no.exp(x - no.max(x, axis=-1, keepdims=True))


@pytest.mark.parametrize("backend", ["interpreter", "gpu"])
def test_exp_of_an_exact_zero_is_one_with_no_library_allowance(backend):
    # before: exp(0) had the full math-library allowance (3.7 ulp on the interpreter, 55 on
    # the H200), so an fp32 exp(0) stored as 1 + ulp was accepted
    x = torch.tensor([[0.0, -0.0, 1.0]], dtype=torch.float32)
    ev = no.evaluate(no.reference(_exp_ref), [x], {}, backend=backend)
    o = ev.check(torch.exp(x), "fixed").outputs[0]
    assert o.lo[0, :2].tolist() == o.hi[0, :2].tolist() == [1.0, 1.0]
    assert float(o.hi[0, 2] - o.lo[0, 2]) > 0                # elsewhere the allowance stays
    assert ev.check(torch.exp(x), "fixed").status == "accept"
    off = torch.exp(x)
    off[0, 0] = torch.nextafter(torch.tensor(1.0), torch.tensor(2.0))
    assert {m: v.status for m, v in ev.judge(off).items()} == {"statistical": "reject", "fixed": "reject"}


def test_an_exactly_zero_argument_inside_a_program_is_exact_too():
    x = torch.tensor([[0.5, 2.0, -1.0, 2.0]], dtype=torch.float32)
    ev = no.evaluate(no.reference(_softmax_num), [x], {})
    o = ev.check(torch.exp(x - x.max(-1, keepdim=True).values), "fixed").outputs[0]
    assert o.lo[0, 1] == o.hi[0, 1] == 1.0 and o.lo[0, 3] == o.hi[0, 3] == 1.0
    assert float(o.hi[0, 0] - o.lo[0, 0]) > 0


def test_an_argument_that_is_only_near_the_point_keeps_the_allowance():
    # x is bf16 data times a rounded fp32 scale: its enclosure is not a point, so exp(x)
    # near 0 is not treated as exp(0)
    def prog(x, s):
        return no.exp(x.to(fp32) * s)
    x = torch.tensor([[0.0, 1e-3]], dtype=torch.bfloat16)
    s = torch.tensor([[0.3]], dtype=torch.float32)
    o = no.evaluate(no.reference(prog), [x, s], {}).check(torch.exp(x.float() * s), "fixed").outputs[0]
    assert o.lo[0, 0] == o.hi[0, 0] == 1.0                  # 0 * s is exactly 0
    assert float(o.hi[0, 1] - o.lo[0, 1]) > 0


def test_every_shipped_profile_exact_point_is_an_exact_value_of_its_function():
    from numoracle import mathlib
    from numoracle.calculus.functions import FUNCTIONS
    names = {"sqrt_rn": "sqrt", "recip": "reciprocal"}
    for prof in ("interpreter", "h200", "cuda_documented"):
        p = mathlib.load(prof)
        assert p.exact, prof
        for call, points in p.exact.items():
            f = FUNCTIONS[names.get(call, call)]
            for x0, f0 in points:
                assert float(f.value(torch.tensor(x0, dtype=torch.float64))) == f0, (prof, call, x0)
                assert float(torch.tensor(f0, dtype=torch.float32)) == f0           # an fp32 value


def test_the_emulated_library_returns_the_exact_points_and_is_accepted():
    from numoracle.selftest import emulator
    x = torch.tensor([[0.0, 0.0, 0.7, -0.0]], dtype=torch.float32)
    for plan in [emulator.Plan(seed=s, math="extreme") for s in range(3)] + [emulator.Plan.adversarial(seed=1)]:
        y = emulator.emulate(no.reference(_exp_ref), [x], {}, plan)
        y = y[0] if isinstance(y, (list, tuple)) else y
        assert y[0, 0] == 1.0 and y[0, 3] == 1.0
        assert no.check(_exp_ref, y, [x], mode="fixed").status == "accept"


# fp32 exp is +inf above this argument (docs/tutorial.md, "A kernel that counts on overflow")
EXP_OVERFLOW = 88.72283935546875


def _gelu_tanh_by_exp(saturation_by_where: bool):
    @no.reference
    def gelu(x):
        h = x.to(fp32)
        u = 0.7978845608028654 * (h + 0.044715 * h * h * h)
        v = 2.0 * u
        t_literal = 1.0 - 2.0 / (no.exp(v) + 1.0)
        t = no.where(v > EXP_OVERFLOW, 1.0, t_literal) if saturation_by_where else t_literal
        return (0.5 * h * (1.0 + t)).to(x.format)
    return gelu


def test_a_saturation_the_kernel_gets_from_infinity_is_certified_through_where():
    # exp(2u) is +inf for every element, so the kernel's 2 / (inf + 1) is 0, t is 1 and
    # 0.5 * h * 2 is h: the stored output is x itself, exactly.  The literal reference follows
    # the infinity itself (exp past its certain overflow is +inf exactly), the no.where states it
    x = torch.tensor([[20.0, 60.0, 1000.0, 3.0e4]], dtype=torch.bfloat16)
    off = x.clone()
    off[0, 1] = torch.nextafter(x[0, 1], torch.tensor(float("inf"), dtype=x.dtype))
    for by_where in (False, True):
        ref = _gelu_tanh_by_exp(by_where)
        assert statuses(ref, (x,), x.clone()) == {"statistical": "accept", "fixed": "accept"}, by_where
        assert statuses(ref, (x,), off) == {"statistical": "reject", "fixed": "reject"}, by_where
    # an fp32 h whose 2u lies between the last finite exp and its certain overflow (88.72 and
    # 88.75): the literal reference cannot say whether the kernel's exp overflowed, the no.where can
    lo, hi = 0.0, 100.0
    for _ in range(80):                                       # bisection on 2u(h) = 88.735
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if 2 * 0.7978845608028654 * (mid + 0.044715 * mid ** 3) < 88.735 else (lo, mid)
    h = torch.tensor([[lo]], dtype=torch.float32)
    assert no.check(_gelu_tanh_by_exp(False), h.clone(), (h,)).status == "uncertified"
    assert no.check(_gelu_tanh_by_exp(True), h.clone(), (h,)).status == "accept"


def test_a_cube_past_the_range_is_followed_to_its_saturation():
    # h * h * h overflows fp32 from |h| near 7e12 (0.044715 h^3 past 3.4e38): the kernel's cube
    # is +-inf, so u, exp(2u) and t follow as infinities and 0.5 h (1 + t) is h or 0 exactly.  The
    # literal reference follows it: a product certainly past the range is that infinity for
    # every operation but an add, and h + inf is past the range whether or not the add is an FMA
    x = torch.tensor([[20.0, 1e13, 1e20, 3e38, -1e13, -1e20, -3e38, 1.0]], dtype=torch.float32)
    h = x.double()
    kernel = torch.where(x > 0, x, torch.zeros_like(x))
    kernel[0, 0], kernel[0, 7] = x[0, 0], float((0.5 * h * (1 + torch.tanh(0.7978845608028654 * (h + 0.044715 * h ** 3))))[0, 7])
    for backend in ("interpreter", "gpu"):
        v = no.check(_gelu_tanh_by_exp(False), kernel, (x,), backend=backend)
        assert v.status == "accept", (backend, v.explain())
        off = kernel.clone()
        off[0, 2] = 0.0
        v = no.check(_gelu_tanh_by_exp(False), off, (x,), backend=backend)
        assert v.outputs[0].rejected.tolist() == [[False, False, True] + [False] * 5], backend


@no.reference
def _product_plus(x, y, z):
    return x * y + z


@no.reference
def _minus_product_plus(x, y, z):
    return -(x * y) + z


@no.reference
def _sum_of_products(x, y):
    return no.sum(x * y, axis=-1)


def test_a_product_past_the_range_that_an_fma_may_bring_back_is_uncertified():
    # x * y = 3.45e38 is past fp32's range: rounded, it is +inf and so is inf + z; in an FMA
    # (the GPU contracts x * y + z) the sum is rounded once, and 3.45e38 - 3.4e38 is finite.
    # Only where x * y + z is itself certainly past the range do both give the same infinity
    x = torch.tensor([3.45e19, 3.45e19, 3.45e19, 1e19], dtype=torch.float32)
    y = torch.full((4,), 1e19, dtype=torch.float32)
    z = torch.tensor([-3.4e38, 1e38, -1e30, 1.0], dtype=torch.float32)
    fused = (x.double() * y.double() + z.double()).float()
    assert torch.isinf(fused[1:3]).all() and not torch.isinf(fused[0])
    for prog, sign in ((_product_plus, 1.0), (_minus_product_plus, -1.0)):
        zz = z * sign
        want = (sign * x.double() * y.double() + zz.double()).float()
        v = no.check(prog, want, (x, y, zz))
        assert v.outputs[0].uncertified.tolist() == [True, False, False, False], prog.name
        assert v.n_rejected == 0, v.explain()
        wrong = want.clone()
        wrong[1] = -want[1]
        assert no.check(prog, wrong, (x, y, zz)).outputs[0].rejected.tolist() == [False, True, False, False]
    # a reduction may contract its products too: a row whose product is past the range is
    # +inf only where no term of the other sign can bring it back (row 0, every term >= 0)
    a = torch.tensor([[3.45e19, 1.0], [3.45e19, -3.4e19], [1e19, 1e19]])
    b = torch.tensor([[1e19, 1.0], [1e19, 1e19], [1e19, 1e19]])
    v = no.check(_sum_of_products, torch.tensor([math.inf, math.inf, 2e38]), (a, b))
    assert v.outputs[0].uncertified.tolist() == [False, True, False], v.explain()
    assert v.status == "uncertified" and v.n_rejected == 0


def test_a_clamp_after_a_quotient_that_overflows_is_certified():
    # a static fp8 quantizer: x / scale overflows fp32 for bf16's largest x, and the kernel's
    # clamp of +inf is 448 exactly.  A quotient certainly past fp32's range is that infinity (a
    # division is never contracted), so the literal reference is certified as the no.where is
    from numoracle.formats import e4m3fn

    @no.reference
    def literal(x, scale):
        return no.clamp(x.to(fp32) / scale, -448.0, 448.0).to(e4m3fn)

    @no.reference
    def by_where(x, scale):
        xf = x.to(fp32)
        q = no.where(xf > 448.0 * scale, 448.0, no.where(xf < -448.0 * scale, -448.0, xf / scale))
        return no.clamp(q, -448.0, 448.0).to(e4m3fn)

    x = torch.tensor([[3.3895313892515355e38, -3.3895313892515355e38, 1.0]], dtype=torch.bfloat16)
    scale = torch.tensor([0.0072], dtype=torch.float32)
    stored = torch.tensor([[448.0, -448.0, 1.0 / 0.0072]]).to(torch.float8_e4m3fn)
    wrong = stored.clone()
    wrong[0, 0] = torch.tensor(416.0).to(torch.float8_e4m3fn)
    for ref in (literal, by_where):
        assert statuses(ref, (x, scale), stored) == {"statistical": "accept", "fixed": "accept"}
        assert statuses(ref, (x, scale), wrong) == {"statistical": "reject", "fixed": "reject"}
        # the GPU's x / y is within 2.44 ulp of the quotient (h200 profile): far past the range too
        assert no.check(ref, stored, (x, scale), backend="gpu").status == "accept"
        assert no.check(ref, wrong, (x, scale), backend="gpu").status == "reject"


def test_a_quotient_just_past_the_range_is_infinite_only_where_the_division_is_correctly_rounded():
    # x / s whose exact value is 1.0000001 times fp32's overflow threshold: a correctly rounded
    # division (the interpreter's) returns +inf; the GPU's, within 2.44 ulp, may return the
    # largest finite value, so there the element is uncertified rather than judged either way
    @no.reference
    def quotient(x, s):
        return x / s
    top = float(torch.finfo(torch.float32).max)
    thr = top * (1 + 2.0 ** -25)                   # max_finite + half its ulp
    s = torch.tensor([0.75], dtype=torch.float32)  # (not a power of two, which only scales)
    x = torch.tensor([thr * 1.0000001 * 0.75], dtype=torch.float64).to(torch.float32)
    assert thr * (1 + 2.0 ** -40) < float(x) / 0.75 < thr * (1 + 2.0 ** -23)
    inf = torch.tensor([math.inf], dtype=torch.float32)
    assert no.check(quotient, inf, (x, s)).status == "accept"
    assert no.check(quotient, torch.tensor([top]), (x, s)).status == "reject"
    assert no.check(quotient, inf, (x, s), backend="gpu").status == "uncertified"
