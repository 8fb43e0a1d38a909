"""Unsloth's operators (docs/operators.md rows 9-11) and their backward passes on the repaired
interpreter: every kernel and variant accepted in both modes on a case per input group, the
chunked cross-entropy path exercised, and each operator's planted fault rejected."""

import pytest
import torch

from numoracle import backends, operators
from numoracle.check import check
from numoracle.strategies import GROUPS
from operator_checks import assert_accepted, judge

DT = (torch.bfloat16, torch.float32, torch.float16)
SHAPES = ((3, 96), (2, 37), (4, 130))


@pytest.fixture(scope="module", autouse=True)
def _interpreter():
    backends.select("interpreter")


def _cases(op, per_group=1):
    out = []
    for i, group in enumerate(list(GROUPS) * per_group):
        rows, cols = SHAPES[i % len(SHAPES)]
        out.append((300 + i, group, DT[i % len(DT)], rows, cols))
    return out




KERNELS = [(name, k) for name in ("rms_layernorm", "cross_entropy_loss", "geglu_exact",
                                  "geglu_approx", "rms_layernorm_backward",
                                  "cross_entropy_loss_backward", "geglu_exact_backward",
                                  "geglu_approx_backward")
           for k, spec in operators.get(name).kernel_specs.items()
           if spec.startswith("numoracle.operators.kernels.")]      # our own kernels


@pytest.mark.parametrize("name,kname", KERNELS, ids=[f"{n}-{k}" for n, k in KERNELS])
def test_kernel_accepted_in_both_modes_on_every_group(name, kname):
    op = operators.get(name)
    kernel = op.kernels[kname]
    for case in _cases(op):
        for v in judge(op, kernel, *case):
            assert_accepted(v, f"{name}/{kname} on {case}")


def test_cross_entropy_chunked_path_matches_the_fused_path():
    """Rows wider than chunk_size go through per-chunk lse combined on the host; the reference
    models the chunking, and the result is within fp32 rounding of the unchunked lse."""
    op = operators.get("cross_entropy_loss")
    from numoracle.operators.kernels import unsloth_cross_entropy as K
    inputs, _ = op.example(5, dtype=torch.bfloat16, family="calibration", rows=4, cols=130)
    params = {"logit_scale": 0.5, "softcap": 30.0, "chunk_size": 32}
    loss_c, lse_c = K.cross_entropy_loss(*inputs, **params)
    loss_f, lse_f = K.cross_entropy_loss(*inputs, **{**params, "chunk_size": 65536})
    assert torch.allclose(lse_c, lse_f, rtol=1e-5, atol=0)
    assert torch.allclose(loss_c, loss_f, rtol=1e-4, atol=1e-6)
    for mode in ("statistical", "fixed"):
        v = check(op.reference, (loss_c, lse_c), inputs, params, mode=mode, backend="interpreter")
        assert v.status == "accept", v.explain()


FAULTS = [
    # (operator, faulty kernel, dtype, params forced on every case)
    ("rms_layernorm", "fp32_multiply", torch.bfloat16, {"gemma": False}),        # change pair 5
    ("cross_entropy_loss", "label_lowp", torch.bfloat16, {"softcap": 30.0}),     # change pair 11
    ("geglu_exact", "tanh_form", torch.bfloat16, {}),                            # change pair 12
    ("geglu_approx", "erf_form", torch.float32, {}),                             # change pair 12
    ("geglu_exact_backward", "tanh_form", torch.bfloat16, {}),
    ("geglu_approx_backward", "erf_form", torch.float32, {}),
    ("rms_layernorm_backward", "no_offset", torch.float32, {"gemma": True}),      # cf. pair 4
    ("cross_entropy_loss_backward", "ignored_rows_kept", torch.bfloat16, {}),
]


@pytest.mark.parametrize("name,fault,dtype,force", FAULTS, ids=[f"{f[0]}-{f[1]}" for f in FAULTS])
def test_planted_fault_rejected(name, fault, dtype, force):
    op = operators.get(name)
    bad = op.faulty_kernel(fault)
    good = op.kernels["correct"]
    rejected = 0
    for seed, group in enumerate(("calibration", "uniform", "laplace", "scaled_up")):
        inputs, params = op.example(seed, dtype=dtype, family=group, rows=3, cols=96)
        params.update({k: v for k, v in force.items() if k in params or k in op.reference.param_names})
        v_good = check(op.reference, good(*[t.clone() for t in inputs], **params), inputs, params,
                       mode="statistical", backend="interpreter")
        assert v_good.status == "accept", v_good.explain()
        v = check(op.reference, bad(*[t.clone() for t in inputs], **params), inputs, params,
                  mode="statistical", backend="interpreter")
        assert v.status != "uncertified", v.explain()
        rejected += v.status == "reject"
    assert rejected >= 2, f"{name}/{fault} rejected on only {rejected} of 4 cases"


@pytest.mark.parametrize("name,fault,dtype", [("geglu_exact_backward", "tanh_form", torch.bfloat16),
                                              ("geglu_approx_backward", "erf_form", torch.float32)])
def test_geglu_backward_outputs_named_h_df_de(name, fault, dtype):
    """The backward references name their outputs (h, df, de) as their docstrings do: the
    verdict, its worst element and its explanation say them, not out0, out1, out2."""
    op = operators.get(name)
    assert list(op.reference.output_names) == ["h", "df", "de"]
    bad = op.faulty_kernel(fault)
    for seed, group in enumerate(("calibration", "uniform", "laplace", "scaled_up")):
        inputs, params = op.example(seed, dtype=dtype, family=group, rows=3, cols=96)
        v = check(op.reference, bad(*[t.clone() for t in inputs], **params), inputs, params,
                  mode="statistical", backend="interpreter")
        assert [o.name for o in v.outputs] == ["h", "df", "de"]
        if v.status == "reject":
            text = v.explain()
            assert v.to_dict()["worst"]["output"] in ("h", "df", "de") and not any(
                f"out{j}" in text for j in range(3)), text
            return
    pytest.fail(f"{name}/{fault} accepted on 4 cases")
