"""kl_div (Liger's plan, change pair 7): our kernel and its chunked variant are
accepted for every reduction; the unclamped kernel is rejected where y_true = 0
and for 'mean' (wrong divisor)."""
import pytest
import torch

import numoracle as no
from numoracle import backends
from numoracle.check import check_modes

REDUCTIONS = ("batchmean", "sum", "mean", "none")


@pytest.fixture(scope="module", autouse=True)
def _interp():
    backends.select("interpreter")


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("kernel", ["correct", "chunked"])
def test_correct_kernels_accepted(kernel, reduction):
    op = no.operators.get("kl_div")
    for seed, group, dt in ((1, "calibration", torch.bfloat16), (2, "scaled_up", torch.float32),
                            (3, "heavy_tailed", torch.bfloat16)):
        inputs, params = op.example(seed, dtype=dt, family=group, rows=3, cols=70)
        params["reduction"] = reduction
        y = op.kernels[kernel](*[t.clone() for t in inputs], **params)
        for mode, v in check_modes(op.reference, y, inputs, params).items():
            assert v.status == "accept", (mode, group, v.explain())


@pytest.mark.parametrize("reduction,group", [("batchmean", "scaled_up"), ("none", "scaled_up"),
                                             ("mean", "calibration")])
def test_pair7_fault_rejected(reduction, group):
    op = no.operators.get("kl_div")
    inputs, params = op.example(4, dtype=torch.bfloat16, family=group, rows=3, cols=70)
    params["reduction"] = reduction
    y = op.faulty_kernel("no_eps_clamp")(*inputs, **params)
    v = check_modes(op.reference, y, inputs, params)
    assert v["fixed"].status == "reject" and v["statistical"].confirmation == "confirmed"
