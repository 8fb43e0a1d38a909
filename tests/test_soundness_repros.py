"""Reproductions of fixed-mode false alarms and a useless bound, each now judged right:
accepted, or uncertified with the site that may overflow named; and the registered faulty
kernels of the same operators (or a planted fault) still rejected on the same inputs."""
import pytest
import torch

import numoracle as no
from numoracle import backends
from numoracle.check import check_modes
from numoracle.formats import fp32


@pytest.fixture(scope="module", autouse=True)
def _interp():
    backends.select("interpreter")


@no.reference
def fp32_matmul(a, b):
    return no.matmul(a, b, acc=fp32)


def _subnormal_products():
    g = torch.Generator().manual_seed(0)
    a = (0.01 * torch.randn(8, 16, generator=g)).float()
    b = (2.0 ** -127 * torch.randn(16, 8, generator=g, dtype=torch.float64)).float()
    return a, b


def test_a_dot_of_products_in_the_subnormal_range_admits_their_underflow():
    a, b = _subnormal_products()
    prods = a.unsqueeze(-1) * b.unsqueeze(0)           # fp32-rounded products, many subnormal
    seq = torch.zeros(8, 8)
    for k in range(16):
        seq = seq + prods[:, k, :]
    assert bool(((prods != 0) & (prods.abs() < 2.0 ** -126)).any())
    for y in (seq, a @ b):
        for mode, v in check_modes(fp32_matmul, y, (a, b)).items():
            assert v.status == "accept", (mode, v.explain())
    # the term is an allowance for underflow, not a licence: a wrong product is still caught
    wrong = (a @ b) * 1.5
    assert check_modes(fp32_matmul, wrong, (a, b))["fixed"].status == "reject"


def _flce_subnormal(seed):
    op = no.operators.get("fused_linear_cross_entropy")
    inputs, params = op.example(seed, dtype=torch.float32, rows=4, cols=48)
    x, w, labels = inputs
    return op, ((x.double() * 2.0 ** -127).float(), w, labels), params


@pytest.mark.parametrize("seed", [0, 5])
def test_fused_linear_cross_entropy_on_subnormal_inputs_accepts_its_correct_kernels(seed):
    op, inputs, params = _flce_subnormal(seed)
    for name, kernel in op.kernels.items():
        y = kernel(*[t.clone() for t in inputs], **params)
        v = check_modes(op.reference, y, inputs, params)
        assert v["fixed"].status == "accept", (name, v["fixed"].explain())
    if params["reduction"] == "mean":        # the chunk-count fault changes the mean only
        y = op.faulty_kernel("chunk_count")(*[t.clone() for t in inputs], **params)
        assert check_modes(op.reference, y, inputs, params)["fixed"].status == "reject"


def _w8a8_near_overflow():
    from numoracle.operators.ops_vllm import quantize_blocks
    g = torch.Generator().manual_seed(0)
    # codes near 448 with A scales near 2e35: dot(codes) x a_scale overflows fp32 before the
    # small B scale (b ~ 1e-3) brings it back into range
    a = (torch.randn(4, 128, generator=g, dtype=torch.float64).clamp(-3, 3) * 8.5e37 / 3).float()
    a[2:] = torch.randn(2, 128, generator=g)        # two ordinary rows beside the two huge ones
    b = torch.randn(16, 128, generator=g) * 1e-3
    a_q, a_s = quantize_blocks(a, 1, 64)
    b_q, b_s = quantize_blocks(b, 16, 64)
    return (a_q, b_q, a_s, b_s), {"group_n": 16, "group_k": 64, "out": "bf16"}


def test_block_fp8_matmul_whose_dot_times_a_scale_may_overflow_is_uncertified_never_rejected():
    op = no.operators.get("w8a8_block_fp8_matmul")
    inputs, params = _w8a8_near_overflow()
    for out in ("bf16", "fp32"):
        p = {**params, "out": out}
        for name, kernel in op.kernels.items():
            y = kernel(*[t.clone() for t in inputs], **p)
            assert bool(torch.isinf(y[:2]).any())      # the overflow is real
            for mode, v in check_modes(op.reference, y, inputs, p).items():
                assert v.status == "uncertified", (name, mode, v.explain())
                assert v.n_rejected == 0
                unc = v.outputs[0].uncertified
                assert bool(unc[:2].all()) and not bool(unc[2:].any())
                sites = [s.label for s in v.certificate.failing]
                assert sites and all("x a_scale" in s for s in sites), sites
        # on the same inputs the faulty kernels are rejected on the rows that are certified
        for name in op.faulty:
            y = op.faulty_kernel(name)(*[t.clone() for t in inputs], **p)
            v = check_modes(op.reference, y, inputs, p)["fixed"]
            assert v.status == "reject", (name, out, v.explain())


def test_block_fp8_matmul_faulty_kernels_are_still_rejected_on_ordinary_inputs():
    op = no.operators.get("w8a8_block_fp8_matmul")
    for seed in (0, 1, 2, 3):
        inputs, params = op.example(seed, dtype=torch.bfloat16, rows=4, cols=128)
        y = op.kernels["correct"](*[t.clone() for t in inputs], **params)
        assert check_modes(op.reference, y, inputs, params)["fixed"].status == "accept"
        for name in op.faulty:
            y = op.faulty_kernel(name)(*[t.clone() for t in inputs], **params)
            assert check_modes(op.reference, y, inputs, params)["fixed"].status == "reject", (seed, name)


@no.reference
def tanh_of(x):
    return no.tanh(x)


def test_a_saturated_tanh_is_one_not_an_interval_of_width_twelve():
    x = torch.tensor([1.1e7, -9.6e8, 30.0], dtype=torch.float32)
    # the argument with a large error of its own: z = x * 1.000001 in fp32
    outs = check_modes(tanh_of, torch.tanh(x.double()).float(), (x,))
    for v in outs.values():
        assert v.status == "accept"
        o = v.outputs[0]
        assert bool((o.hi - o.lo <= 2.0 ** -23).all()), (o.lo, o.hi)


def _geglu_scaled_up(seed, dtype):
    op = no.operators.get("geglu_backward")
    inputs, params = op.example(seed, dtype=dtype, family="scaled_up", rows=8, cols=64)
    return op, inputs, params


@pytest.mark.parametrize("seed", [0, 1])
def test_geglu_backward_on_scaled_up_inputs_catches_a_gross_fault_on_nine_elements_in_ten(seed):
    op, inputs, params = _geglu_scaled_up(seed, torch.float32)
    da, db = op.kernels["correct"](*[t.clone() for t in inputs], **params)
    assert check_modes(op.reference, (da, db), inputs, params)["fixed"].status == "accept"
    bad = ((da.double() * -3 + 7).float(), db)
    v = check_modes(op.reference, bad, inputs, params)["fixed"]
    o = v.outputs[0]
    judged = ~o.uncertified
    assert float((o.rejected & judged).sum()) >= 0.9 * float(judged.sum())


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_geglu_backward_unrounded_gelu_is_rejected_wherever_its_outputs_differ(dtype):
    seen = 0
    for seed in range(4):
        op, inputs, params = _geglu_scaled_up(seed, dtype)
        good = op.kernels["correct"](*[t.clone() for t in inputs], **params)
        bad = op.faulty_kernel("unrounded_gelu")(*[t.clone() for t in inputs], **params)
        v = check_modes(op.reference, bad, inputs, params)["fixed"]
        # where the fault changes a certified element's value, the verdict rejects
        differ = any(bool(((g.float() != b.float()) & ~o.uncertified).any())
                     for g, b, o in zip(good, bad, v.outputs))
        if differ:
            seen += 1
            assert v.status == "reject", (seed, v.explain())
    assert seen        # on scaled_up most |a| saturate gelu, where the fault changes nothing


def _softmax_exp2_case():
    # found by the slow tier's adversarial search (docs/results/2026-12-05-softmax-exp2-
    # interpreter-false-alarm.md): y[5, 12] was 3.29 ulp above its bound, x - m = -32.55
    from numoracle.strategies import Case
    case = Case("softmax", fmt="fp32", rows=15, cols=15, group="heavy_tailed", scale_exp=0, specials=(),
                params=(), config=(), seed=484)
    inputs, params = case.materialize()
    return no.operators.get("softmax"), inputs, params


def _softmax_exp2_form(x, log2e):
    """softmax with e = exp2(fp32((x - m) * fp32(log2e))), as the exp2 kernel computes it."""
    m = x.max(dim=-1, keepdim=True).values
    t = (x - m) * torch.tensor(log2e, dtype=torch.float32)
    e = torch.exp2(t.double()).float()
    return e / e.sum(dim=-1, keepdim=True)


def test_softmax_exp2_kernel_whose_rounded_argument_moves_exp_is_accepted():
    op, inputs, params = _softmax_exp2_case()
    y = op.kernels["exp2"](*[t.clone() for t in inputs], **params)
    for mode, v in check_modes(op.reference, y, inputs, params).items():
        assert v.status == "accept", (mode, v.explain())


def test_softmax_exp2_form_with_log2e_to_five_digits_is_still_rejected():
    op, inputs, params = _softmax_exp2_case()
    (x,) = inputs
    good = _softmax_exp2_form(x, 1.4426950408889634)
    assert check_modes(op.reference, good, inputs, params)["fixed"].status == "accept"
    # a constant with too few digits (docs/operators.md, mutation operators)
    bad = _softmax_exp2_form(x, 1.4427)
    assert check_modes(op.reference, bad, inputs, params)["fixed"].status == "reject"


def _flce_ignored_row_case():
    # found by the adversarial search (docs/results/2026-12-05-statistical-nan-radius.md): row 0's
    # label is the ignore index, so its grad_input is exactly 0; row 1's logits overflow fp32
    from numoracle.strategies import Case
    case = Case("fused_linear_cross_entropy", fmt="fp32", rows=2, cols=2, group="format_boundary",
                params={"accum_fp32": False, "reduction": "mean"}, seed=0)
    inputs, params = case.materialize()
    return no.operators.get("fused_linear_cross_entropy"), inputs, params


def test_a_term_masked_to_zero_after_its_variance_overflowed_does_not_reject_in_statistical_mode():
    op, inputs, params = _flce_ignored_row_case()
    assert int(inputs[2][0]) == -100
    y = op.kernels["two_pass"](*[t.clone() for t in inputs], **params)
    v = check_modes(op.reference, y, inputs, params)
    grad_input = 1
    for mode in ("statistical", "fixed"):
        assert v[mode].status == "uncertified", (mode, v[mode].explain())
        o = v[mode].outputs[grad_input]
        assert not bool(o.rejected.any()), mode
        # the ignored row is judged (its region is {0}), the overflowing row uncertified
        assert not bool(o.uncertified[0].any()) and bool(o.uncertified[1].all()), mode
        assert bool((o.lo[0] == 0).all() and (o.hi[0] == 0).all()), mode
    # a nonzero gradient on the ignored row is still caught, in both modes
    bad = [t.clone() for t in y]
    bad[grad_input][0, 3] = 1e-30
    for mode, w in check_modes(op.reference, tuple(bad), inputs, params).items():
        assert bool(w.outputs[grad_input].rejected[0, 3]), mode


def test_the_statistical_radius_falls_back_to_the_fixed_one_where_its_proxy_is_not_a_number():
    from types import SimpleNamespace

    from numoracle import statistical
    from numoracle.calculus import form as FM
    fixed = torch.tensor([0.0, 1.0, 2.0 ** -30], dtype=torch.float64)
    entry = FM.Entry(abs=fixed.clone(), var=torch.tensor([float("nan"), 1.0, 2.0 ** -60], dtype=torch.float64),
                     prov=frozenset({1}), label=FM.PRIVATE)
    pre = SimpleNamespace(form=FM.Form(private=[entry]), ctx=SimpleNamespace(symbols={}, symbolic=False),
                          c=torch.zeros(3, dtype=torch.float64), radius=lambda: fixed)
    r = statistical.radius(pre, 3, 1e-6, fixed=fixed)
    lam = statistical.lam(3, 1e-6)
    assert r.tolist() == [0.0, 1.0, min(2.0 ** -30, lam * 2.0 ** -30)]
    # where the fixed radius is not a number either, nor is this one (the element is uncertified)
    nan = torch.tensor([float("nan")], dtype=torch.float64)
    pre.c, pre.form = nan * 0, FM.Form(private=[FM.Entry(nan, nan, frozenset({1}), FM.PRIVATE)])
    assert bool(statistical.radius(pre, 1, 1e-6, fixed=nan).isnan().all())
