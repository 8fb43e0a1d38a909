"""vLLM's operators (numoracle/operators/ops_vllm.py) on the repaired interpreter: registration,
every kernel and variant accepted in both modes, every faulty kernel rejected, and the
quantize → block-matmul pipeline judged against the unquantized activations."""

import pytest
import torch

import numoracle as no
from numoracle.backends import select

select("interpreter")
OPS = ("per_token_group_quant_fp8", "w8a8_block_fp8_matmul")


@pytest.fixture(scope="module")
def V():
    from numoracle.operators import ops_vllm
    return ops_vllm


def test_registered_with_domain_and_faulty_apart():
    for name in OPS:
        op = no.operators.get(name)
        assert op.source == "vllm"
        assert {"correct"} < set(op.kernel_specs) and len(op.kernel_specs) >= 3
        assert op.faulty and not set(op.faulty) & set(op.kernel_specs)
        d = op.to_dict()
        assert d["domain"]["cols_multiple_of"] in (16, 32) and 128 in (d["domain"]["params"].get("group_size")
                                                                or d["domain"]["params"]["group_k"])


@pytest.mark.parametrize("name", OPS)
def test_every_kernel_accepted_in_both_modes(name):
    op = no.operators.get(name)
    for seed in range(4):
        dtype = (torch.bfloat16, torch.float16, torch.float32, torch.bfloat16)[seed]
        inputs, params = op.example(seed, dtype, "normal", rows=3, cols=128)
        for kname, kernel in op.kernels.items():
            out = kernel(*inputs, **params)
            for mode in ("statistical", "fixed"):
                v = no.check(op.reference, out, inputs, params, mode=mode)
                assert v.status == "accept", f"{name}/{kname} seed {seed} {params}:\n{v.explain()}"


FAULTY_CASES = [
    # (operator, faulty kernel, params forced on the example)
    ("per_token_group_quant_fp8", "max224", {}),
    ("per_token_group_quant_fp8", "floor_absmax", {"ue8m0": True}),
    ("per_token_group_quant_fp8", "ties_away", {"ue8m0": True}),
    ("per_token_group_quant_fp8", "truncate", {}),
    ("w8a8_block_fp8_matmul", "bk_over_group", {}),
    ("w8a8_block_fp8_matmul", "row0_scale", {}),
    ("w8a8_block_fp8_matmul", "wrong_scale_block", {}),
]


@pytest.mark.parametrize("name,faulty,force", FAULTY_CASES, ids=[f"{a}-{b}" for a, b, _ in FAULTY_CASES])
def test_faulty_kernel_rejected(name, faulty, force):
    op = no.operators.get(name)
    kernel = op.faulty_kernel(faulty)
    for seed in range(6):
        inputs, params = op.example(seed, torch.bfloat16, "normal", rows=4, cols=128)
        params.update(force)
        v = no.check(op.reference, kernel(*inputs, **params), inputs, params, mode="fixed")
        if v.status == "reject":
            assert v.explain().startswith("Kernel output outside its acceptance region")
            return
    pytest.fail(f"{name}/{faulty} was accepted on seeds 0..5")


def test_reject_explanation_names_group_scale_and_interval():
    op = no.operators.get("per_token_group_quant_fp8")
    inputs, params = op.example(0, torch.bfloat16, "normal", rows=2, cols=64)
    v = no.check(op.reference, op.faulty_kernel("max224")(*inputs, **params), inputs, params)
    text = v.explain()
    assert "Worst element scales[" in text and "group (row " in text and "admissible [" in text
    assert v.to_dict()["outputs"][1]["rejected"] > 0


def test_pipeline_quantize_then_block_matmul_against_unquantized_input(V):
    op_q = no.operators.get("per_token_group_quant_fp8")
    op_m = no.operators.get("w8a8_block_fp8_matmul")
    for seed in range(2):
        (x, b, b_s), params = V.example_pipeline(seed, torch.bfloat16, "normal", rows=4, cols=128)
        q, a_s = op_q.kernels["correct"](x, group_size=params["group_k"], ue8m0=params["ue8m0"])
        for kname in ("correct", "split_k"):
            mm = {k: params[k] for k in ("group_n", "group_k", "out")}
            c = op_m.kernels[kname](q, b, a_s, b_s, **mm)
            for mode in ("statistical", "fixed"):
                v = no.check(V.group_quant_then_block_fp8_matmul, c, (x, b, b_s), params, mode=mode)
                assert v.status == "accept", v.explain()
        # the quantization error is what makes the interval wide: the matmul's own reference on
        # the quantized input is far narrower
        v = no.check(V.group_quant_then_block_fp8_matmul, c, (x, b, b_s), params, mode="fixed")
        w = no.check(op_m.reference, c, (q, b, a_s, b_s), mm, mode="fixed")
        width = (v.outputs[0].hi - v.outputs[0].lo).median()
        assert width > 100 * (w.outputs[0].hi - w.outputs[0].lo).median()
    bad = op_m.faulty_kernel("row0_scale")(q, b, a_s, b_s, **mm)
    assert no.check(V.group_quant_then_block_fp8_matmul, bad, (x, b, b_s), params).status == "reject"


def test_pipeline_quantizer_symbol_is_shared_by_the_outputs_using_the_group():
    """One quantizer site, one symbol (one variable per element, each bounded through its
    group's admissible scales): every matmul output that uses a row carries its provenance."""
    from numoracle.calculus import form as FM
    from numoracle.calculus.tracked import Context, Tracked
    from numoracle.mathlib import load
    ctx = Context(profile=load("interpreter"))
    g = torch.Generator().manual_seed(0)
    x = torch.randn(2, 32, generator=g).to(torch.bfloat16).double()
    w = torch.randn(32, 3, generator=g).to(torch.bfloat16).double()
    t = Tracked(x, no.formats.bf16, FM.Form(), ctx).to(no.formats.fp32)
    dq = no.quantize_group(t, 16).dequantized
    (key,) = dq.form.shared
    assert "quantize to e4m3fn per group of 16" in ctx.symbols[key][1]
    coef = dq.form.shared[key].coef
    normal = x.abs() >= 2.0 ** -6 * x.abs().reshape(2, 2, 16).amax(-1).repeat_interleave(16, -1) / 448
    rel = coef[normal] / x.abs()[normal]
    assert bool((rel >= 2.0 ** -4).all()) and bool((rel <= (2.0 ** -4 + 2.0 ** -22) * (1 + 2.0 ** -19)).all())
    y = no.matmul(dq, Tracked(w, no.formats.bf16, FM.Form(), ctx).to(no.formats.fp32))
    assert any(key in e.prov for e in y.form.private)
    assert y.radius().shape == (2, 3) and bool((y.radius() > 0).all())
