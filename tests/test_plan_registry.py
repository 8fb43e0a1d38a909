"""The plan check over the registry: every operator's correct kernel and behaviour-preserving
variants, forward and backward, agree with their reference except for the differences
docs/plan.md explains; faulty kernels are flagged exactly when they change the precision plan."""

import pytest
import torch

from numoracle import backends

backends.select("interpreter")

from numoracle import operators  # noqa: E402
from numoracle.plan import check_plan, study  # noqa: E402

# variants whose plan differs from their operator's reference (docs/plan.md, "What the registry
# shows"), each with the one disagreement it has: 1/sqrt(v) is an approximate sqrt and a division,
# the reference's rsqrt one approximate call (on the H200 up to 2.54 ulp where rsqrt's bound is
# 1.90625: docs/results/2026-12-02-plan-1oversqrt.md); mx_scaled_matmul's scale_after_dot dots
# the codes (exact in bf16) and scales in fp32, where the reference (the dequantize-then-dot
# plan) rounds the scaled operands to bf16, a rounding only below bf16's normals
EXPLAINED = {("rms_norm", "1oversqrt"): "sqrt", ("layer_norm", "1oversqrt"): "sqrt",
             ("rms_layernorm", "1oversqrt"): "sqrt", ("mx_scaled_matmul", "scale_after_dot"): "operands"}


def _explained(kind, disagreements) -> bool:
    if kind == "sqrt":
        got = {(d["kind"], "rsqrt" in d["message"] and "sqrt" in d["message"]) for d in disagreements}
        return got == {("function", True)}
    # fewer bf16 roundings in the kernel than in the reference, the reference's being those of
    # _mx_matmul (the scaled operands' a1.to(bf16) and b1.to(bf16), with the store's), nothing else
    import inspect

    from numoracle.operators import ops_mx
    src, first = inspect.getsourcelines(ops_mx._mx_matmul)
    lines = {f"ops_mx.py:{first + i} round to bf16" for i in range(len(src))}
    return bool(disagreements) and all(d["kind"] == "rounding" and "rounded to bf16" in d["message"]
                                       and "the reference rounds where the kernel does not" in d["message"]
                                       and d["reference"] and all(r.rsplit(" (", 1)[0] in lines
                                                                  for r in d["reference"])
                                       for d in disagreements)


KERNELS = [(n, k) for n in operators.names() for k in operators.get(n).kernel_specs
           if k not in operators.UPSTREAM_KERNELS]


@pytest.mark.parametrize("name", operators.names())
def test_the_correct_kernel_agrees_with_its_reference_on_its_first_example(name):
    op = operators.get(name)
    r = check_plan(op, "correct", *op.example(0))
    assert r.ok, r.explain()


@pytest.mark.slow
@pytest.mark.parametrize("name,kernel", KERNELS, ids=[f"{n}-{k}" for n, k in KERNELS])
def test_every_kernel_agrees_with_its_reference_on_every_format_and_parameter_choice(name, kernel):
    op = operators.get(name)
    for row in study.check_kernels(op, [kernel], study.examples(op)):
        if (name, kernel) in EXPLAINED:
            assert _explained(EXPLAINED[(name, kernel)], row.disagreements), \
                (row.example, row.params, row.disagreements)
        else:
            assert row.ok, (row.example, row.params, row.disagreements)


# faulty kernels that change the plan, with an example where they do: (dtype, seed[, params])
PLAN_FAULTS = {
    # the offset added to w in w's format (llama) is a bf16 rounding: dropping the offset drops it
    ("rms_norm", "offset_dropped"): (torch.bfloat16, 0, {"casting": "llama", "offset": 1.0}),
    ("rms_norm", "unrounded_multiply"): (torch.bfloat16, 0),
    ("rms_layernorm", "fp32_multiply"): (torch.bfloat16, 0),
    ("cross_entropy", "storage_format"): (torch.bfloat16, 0),
    ("cross_entropy_backward", "rounded_label_grad"): (torch.bfloat16, 0),
    ("cross_entropy_loss", "label_lowp"): (torch.bfloat16, 1),           # softcap 30: tanh of a bf16 logit
    ("geglu_backward", "unrounded_gelu"): (torch.bfloat16, 0),
    ("geglu_exact", "tanh_form"): (torch.bfloat16, 0),
    ("geglu_approx", "erf_form"): (torch.bfloat16, 0),
    ("geglu_exact_backward", "tanh_form"): (torch.bfloat16, 0),
    ("geglu_approx_backward", "erf_form"): (torch.bfloat16, 0),
    ("layer_norm_backward", "fp16_as_bf16"): (torch.float16, 0),
    ("per_token_group_quant_fp8", "ties_away"): (torch.bfloat16, 0),
    ("per_token_group_quant_fp8", "truncate"): (torch.bfloat16, 0),
    ("rms_norm_backward", "bf16_dw_sum"): (torch.bfloat16, 0),
    ("rope", "math_in_q_format"): (torch.bfloat16, 0),                   # fp32 cos/sin: the math in bf16
    # the shared exponent rounded the other way: ceil(log2 amax) under the OCP floor rule (seed 0),
    # floor(log2(amax / fmax)) under the round-up rule (mxfp4 seed 1)
    ("mxfp8_quantize", "wrong_rounding"): (torch.bfloat16, 0),
    ("mxfp8_quantize", "nan_on_overflow"): (torch.bfloat16, 0),           # a NaN selected where codes saturate
    ("mxfp4_quantize", "wrong_rounding"): (torch.bfloat16, 1),
    ("mxfp4_quantize", "ties_away"): (torch.bfloat16, 0),                 # >= at every e2m1 midpoint
    ("nvfp4_quantize", "ties_away"): (torch.bfloat16, 0),
    ("nvfp4_quantize", "scale_truncated"): (torch.bfloat16, 0),           # e4m3 code - 1 on its bits
}
# faulty kernels whose fault is in the algorithm (a divisor, a mask, an index, a constant); the
# offset's examples are those where adding it is no rounding of the storage format
SAME_PLAN_FAULTS = [(n, f) for n in operators.names() for f in operators.get(n).faulty
                    if (n, f) not in PLAN_FAULTS or (n, f) == ("rms_norm", "offset_dropped")]
SAME_PLAN_WHERE = {("rms_norm", "offset_dropped"): lambda p: p.get("casting") == "gemma" or not p.get("offset")}


@pytest.mark.parametrize("name,faulty", sorted(PLAN_FAULTS), ids=[f"{n}-{f}" for n, f in sorted(PLAN_FAULTS)])
def test_a_faulty_kernel_that_changes_the_plan_is_flagged(name, faulty):
    op = operators.get(name)
    dt, seed, *extra = PLAN_FAULTS[(name, faulty)]
    inputs, params = op.example(seed, dtype=dt)
    r = check_plan(op, f"faulty:{faulty}", inputs, {**params, **(extra[0] if extra else {})})
    assert not r.ok and r.exit_code() == 1


@pytest.mark.parametrize("name,faulty", SAME_PLAN_FAULTS,
                         ids=[f"{n}-{f}" for n, f in SAME_PLAN_FAULTS])
def test_a_faulty_kernel_with_the_correct_plan_is_not_flagged(name, faulty):
    op = operators.get(name)
    where = SAME_PLAN_WHERE.get((name, faulty), lambda p: True)
    for ex, inputs, params in study.examples(op, seeds=range(4), formats=op.domain.formats[:1])[:4]:
        if not where(params):
            continue
        r = check_plan(op, f"faulty:{faulty}", inputs, params)
        assert r.ok, (ex, params, r.explain())


def test_the_layer_norm_tutorials_vector_accumulators_agree_with_the_registered_reference():
    """Triton's layer-norm tutorial accumulates a row's statistics in BLOCK-wide fp32 vectors over
    its chunks and reduces them after each loop (tests/fixtures/tutorial_layer_norm.py): each
    statistic is one fp32 sum of the row, the registered reference's plan (96 columns in 3
    chunks of 32), on every format; the mean's accumulator in bf16 is a real difference."""
    from fixtures import tutorial_layer_norm as TL
    op = operators.get("layer_norm")
    for dt in (torch.bfloat16, torch.float16, torch.float32):
        inputs, params = op.example(0, dtype=dt)
        r = check_plan(op, TL.layer_norm_tutorial, inputs, params)
        assert r.ok, r.explain()
        assert r.outputs[0]["kernel_sites"] > 0
    inputs, params = op.example(0, dtype=torch.bfloat16)
    r = check_plan(op, TL.layer_norm_tutorial_bf16_mean, inputs, params)
    assert not r.ok
    assert {d.kind for d in r.disagreements} == {"reduction"}, r.explain()
    assert all("1 reduction(s) in bf16 in the kernel and 0 in the reference" in d.message for d in r.disagreements)
    assert {r.output_name(i) for d in r.disagreements for i in d.outputs} == {"y", "mu", "rstd"}, r.explain()
