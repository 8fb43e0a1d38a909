"""The calculus against kernels that drive every error one way (``Plan.adversarial``: each
arithmetic rounding toward one side within the standard model's u|x|, math calls at the far
end of their profile bound, sums from the largest term down): the value each emulated
kernel holds before its store lands inside the fixed-input interval, and close to its edge
where the plan allows it.  Random emulated kernels cancel their errors and rarely come
near a bound; these do, so a bound made too small shows as a reject here."""
import itertools

import pytest
import torch

import numoracle as no
from numoracle.check import check_modes
from numoracle.formats import fp32
from numoracle.selftest.emulator import Plan, emulate
from numoracle.operators import references as R
from numoracle.selftest.programs import PROGRAMS, make_inputs

DIRECTIONS = ("up", "down", "away")


def _positive(shape, seed):
    g = torch.Generator().manual_seed(seed)
    return (0.5 + 1.5 * torch.rand(shape, generator=g)).to(torch.float32)


@no.reference
def triple_product(x, w, v):
    return (x * w) * v


@no.reference
def product_chain(x, w, v):
    return ((x * w) * v) * (x * v)


@no.reference
def plain_sum(x):
    return no.sum(x, axis=-1)


@no.reference
def exp_of_product(x, w):
    return no.exp(x * w)


def _positive_bf16(shape, seed):
    return _positive(shape, seed).to(torch.bfloat16)


@no.reference
def exp_of_bf16_product(x, w):
    # the bf16 product's error (2^-8 |xw|) is large enough that exp's curvature shows
    return no.exp((x * w).to(fp32))


@no.reference
def one_symbol_two_paths(x, v):
    # the row sum's rounding, broadcast over the row, is one symbol reaching y by two paths
    # with one sign: its coefficients add (root-sum-square would undercount it)
    t = v * no.sum(x, axis=-1, keepdims=True)
    return t * 2.0 + t * 4.0


@no.reference
def mean_of_three(x):
    return no.mean(x, axis=-1)


@no.reference
def fp32_dot(a, b):
    return no.matmul(a, b, acc=fp32)


def _subnormal_dot_inputs():
    g = torch.Generator().manual_seed(16)
    a = (0.01 * torch.randn(64, 16, generator=g)).float()
    b = (2.0 ** -127 * torch.randn(16, 32, generator=g, dtype=torch.float64)).float()
    return a, b


@no.reference
def rsqrt_of_sum(x):
    return no.rsqrt(no.sum(x, axis=-1))


@no.reference
def sigmoid_of_scaled(x):
    return no.sigmoid(x * 0.75)


# (program, inputs, the position the adversarial plan must reach: a fraction of the radius)
CASES = {
    "triple_product": (triple_product, lambda: (_positive(2048, 1), _positive(2048, 2), _positive(2048, 3)), 0.9),
    "product_chain": (product_chain, lambda: (_positive(2048, 1), _positive(2048, 2), _positive(2048, 3)), 0.8),
    "sum_of_two": (plain_sum, lambda: (_positive((1024, 2), 4),), 0.9),
    "sum_of_three": (plain_sum, lambda: (_positive((1024, 3), 5),), 0.7),
    "exp_of_product": (exp_of_product, lambda: (_positive(2048, 6), _positive(2048, 7)), 0.9),
    "exp_of_bf16_product": (exp_of_bf16_product, lambda: (_positive_bf16(2048, 13), _positive_bf16(2048, 14)), 0.9),
    "rsqrt_of_sum": (rsqrt_of_sum, lambda: (_positive((1024, 4), 8),), 0.6),
    "sigmoid": (sigmoid_of_scaled, lambda: (_positive(2048, 9),), 0.9),
    "one_symbol_two_paths": (one_symbol_two_paths, lambda: (_positive((256, 2), 17), _positive((256, 64), 18)), 0.95),
    "mean_of_three": (mean_of_three, lambda: (_positive((1024, 3), 15),), 0.7),
    # products in the subnormal range: their rounding is to nearest (within half the smallest
    # subnormal), so the errors only reach a fraction of K such terms; the bound must hold
    "dot_of_subnormal_products": (fp32_dot, _subnormal_dot_inputs, 0.05),
    "softmax": (R.softmax, lambda: (_positive((256, 8), 10),), 0.25),
    "rms_norm_gemma": (R.rms_norm_gemma, lambda: (_positive((256, 16), 11), _positive(16, 12)), 0.25),
}


def _positions(program, inputs, plan):
    """(fixed verdict, largest |value before the store - centre| / radius over certified elements)."""
    outs, pres = emulate(program, inputs, plan=plan, before_store=True)
    v = check_modes(program, outs, inputs)["fixed"]
    best = 0.0
    for o, pre in zip(v.outputs, pres):
        r = (o.hi - o.lo) / 2
        ok = ~o.uncertified & (r > 0)
        if bool(ok.any()):
            best = max(best, float(((pre.expand(o.centre.shape) - o.centre).abs()[ok] / r[ok]).max()))
        # where the region is a single point the kernel must hold exactly that value
        point = ~o.uncertified & (r == 0)
        assert torch.equal(pre.expand(o.centre.shape)[point], o.centre[point])
    return v, best


@pytest.mark.parametrize("name", sorted(CASES))
def test_one_way_errors_reach_their_bound_and_never_pass_it(name):
    program, make, reach = CASES[name]
    inputs = make()
    best = 0.0
    for direction, fma in itertools.product(DIRECTIONS, (False, True)):
        v, pos = _positions(program, inputs, Plan.adversarial(seed=1, direction=direction, fma=fma))
        assert v.status == "accept", (direction, fma, v.explain())
        assert pos <= 1.0, (direction, fma, pos)
        best = max(best, pos)
    assert best >= reach, f"{name}: one-way errors reached only {best:.3f} of the radius"


@pytest.mark.parametrize("program", sorted(PROGRAMS))
def test_the_operators_under_one_way_errors_are_never_rejected_in_fixed_mode(program):
    for dtype, family, direction in itertools.product(("bf16", "fp32"), ("shifted_mean", "constant_rows", "normal"),
                                                      ("away", "down")):
        inputs = make_inputs(program, dtype, 4, 96, family, 2, 7)
        v, pos = _positions(PROGRAMS[program], inputs, Plan.adversarial(seed=7, direction=direction))
        assert v.status != "reject", (dtype, family, direction, v.explain())
        assert pos <= 1.0, (dtype, family, direction, pos)


def test_one_way_roundings_break_the_zero_mean_model_and_the_fixed_confirmation_removes_every_reject():
    """The statistical mode assumes independent zero-mean roundings; one-way roundings
    are neither, so it may reject such a kernel: every such reject must be statistical-only."""
    stat_rejects = 0
    for program, dtype in itertools.product(("rms_norm_gemma", "softmax", "layer_norm"), ("fp32", "bf16")):
        inputs = make_inputs(program, dtype, 3, 2048, "constant_rows", 0, 5)
        outs = emulate(PROGRAMS[program], inputs, plan=Plan.adversarial(seed=5, direction="up"))
        v = check_modes(PROGRAMS[program], outs, inputs)
        assert v["fixed"].status != "reject", v["fixed"].explain()
        if v["statistical"].status == "reject":
            stat_rejects += 1
            assert v["statistical"].confirmation == "statistical-only", v["statistical"].explain()
    assert stat_rejects >= 1          # the model is measurably broken by these kernels


def test_a_random_rounding_kernel_stays_inside_the_statistical_region():
    """Beyond constant rows: independent random roundings and math errors (the model the
    statistical mode assumes) over long rows stay inside its much narrower region."""
    for program, family, seed in itertools.product(("rms_norm_gemma", "softmax", "layer_norm"),
                                                   ("normal", "heavy_tailed", "pow2_grid"), (1, 2)):
        inputs = make_inputs(program, "fp32", 4, 1024, family, 0, seed)
        outs = emulate(PROGRAMS[program], inputs, plan=Plan(seed=seed, order="blocked", math="random"))
        v = check_modes(PROGRAMS[program], outs, inputs)
        assert v["statistical"].status == "accept", (program, family, v["statistical"].explain())
        o = v["statistical"].outputs[0]
        f = v["fixed"].outputs[0]
        assert float(((o.hi - o.lo) <= (f.hi - f.lo)).float().mean()) == 1.0
