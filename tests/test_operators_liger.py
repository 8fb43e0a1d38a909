"""Liger's rope, jsd and fused_linear_cross_entropy (docs/operators.md rows 5, 8, 7) on the repaired
interpreter: every kernel and variant accepted in both modes (rope and jsd on a case per input
group, the slower fused_linear_cross_entropy on a few groups), plain float64 sanity checks of
the kernels, and each operator's planted fault rejected."""

import math

import pytest
import torch

from numoracle import backends, operators
from numoracle.check import check
from numoracle.strategies import GROUPS
from operator_checks import assert_accepted, judge

DT = (torch.bfloat16, torch.float32, torch.float16)


@pytest.fixture(scope="module", autouse=True)
def _interpreter():
    backends.select("interpreter")




CASES = {
    "rope": [(400 + i, g, DT[i % 3], (3, 2, 4)[i % 3], (32, 18, 64)[i % 3])
             for i, g in enumerate(GROUPS)],
    "jsd": [(500 + i, g, DT[i % 3], (3, 4, 2)[i % 3], (96, 37, 130)[i % 3])
            for i, g in enumerate(GROUPS)],
    # seeds cycle reduction (mean/sum), H (32/64) and the grad_W accumulator (W's format/fp32)
    "fused_linear_cross_entropy": [(600, "calibration", torch.bfloat16, 5, 48),
                                   (605, "scaled_down", torch.float32, 4, 64),
                                   (607, "laplace", torch.bfloat16, 8, 96)],
}
# our own kernels (adapters of upstream packages attached to these operators are tested with them)
KERNELS = [(n, k) for n in CASES for k, spec in operators.get(n).kernel_specs.items()
           if spec.startswith("numoracle.operators.kernels.")]


@pytest.mark.parametrize("name,kname", KERNELS, ids=[f"{n}-{k}" for n, k in KERNELS])
def test_kernel_accepted_in_both_modes(name, kname):
    op = operators.get(name)
    kernel = op.kernels[kname]
    for case in CASES[name]:
        for v in judge(op, kernel, *case):
            assert_accepted(v, f"{name}/{kname} on {case}")


def test_rope_fp32_matches_float64_rotation():
    from numoracle.operators.kernels import rope as K
    op = operators.get("rope")
    (q, k, cos, sin), _ = op.example(0, dtype=torch.float32, family="calibration", rows=3, cols=16)
    qo, ko = K.rope(q, k, cos, sin)
    c, s = cos.double()[:, :, None, :], sin.double()[:, :, None, :]

    def rot(x):
        x = x.double()
        return x * c + torch.cat([-x[..., 8:], x[..., :8]], -1) * s
    assert torch.allclose(qo.double(), rot(q), rtol=0, atol=1e-6)
    assert torch.allclose(ko.double(), rot(k), rtol=0, atol=1e-6)
    assert torch.equal(qo[:, 0], q[:, 0])           # position 0: cos = 1, sin = 0


@pytest.mark.parametrize("beta", [0.0, 1.0, 0.5])
def test_jsd_fp32_matches_float64(beta):
    from numoracle.operators.kernels import jsd as K
    op = operators.get("jsd")
    (x, y, labels), _ = op.example(1, dtype=torch.float32, family="calibration", rows=4, cols=37)
    loss, dx = K.jsd(x, y, labels, beta=beta)
    xd = x.double().requires_grad_()
    p, q = y.double().exp(), xd.exp()
    keep = (labels != -100).double()[:, None]
    if beta == 0.0:
        elem = p * (y.double() - xd)
    elif beta == 1.0:
        elem = q * (xd - y.double())
    else:
        m = beta * p + (1 - beta) * q
        elem = beta * p * (y.double() - m.log()) + (1 - beta) * q * (xd - m.log())
    want = (elem * keep).sum() / keep.sum()
    want.backward()
    assert abs(loss.item() - want.item()) <= 1e-5 * (1 + abs(want.item()))
    assert torch.allclose(dx.double(), xd.grad, rtol=1e-4, atol=1e-7)


def test_fused_linear_cross_entropy_fp32_matches_float64_autograd():
    from numoracle.operators.kernels import fused_linear_cross_entropy as K
    op = operators.get("fused_linear_cross_entropy")
    (x, w, labels), _ = op.example(0, dtype=torch.float32, family="calibration", rows=8, cols=96)
    loss, gx, gw = K.fused_linear_cross_entropy(x, w, labels, reduction="mean")
    xd, wd = x.double().requires_grad_(), w.double().requires_grad_()
    want = torch.nn.functional.cross_entropy(xd @ wd.T, labels, ignore_index=-100)
    want.backward()
    assert math.isclose(loss.item(), want.item(), rel_tol=1e-5)
    assert torch.allclose(gx.double(), xd.grad, rtol=1e-4, atol=1e-6)
    assert torch.allclose(gw.double(), wd.grad, rtol=1e-4, atol=1e-6)


FAULTS = [
    # (operator, faulty kernel, cases (seed, group, dtype, rows, cols), minimum rejects)
    ("rope", "math_in_q_format",                     # even seeds: fp32 cos/sin with bf16 q
     [(0, "calibration", torch.bfloat16, 3, 32), (2, "uniform", torch.bfloat16, 2, 16),
      (4, "laplace", torch.float16, 2, 64)], 2),
    ("jsd", "all_rows_divisor",                      # every multi-row case ignores one row
     [(0, "calibration", torch.bfloat16, 4, 37), (1, "uniform", torch.float32, 3, 64),
      (2, "laplace", torch.float16, 2, 32)], 2),
    ("fused_linear_cross_entropy", "chunk_count",    # mean (even seed), several chunks
     [(0, "calibration", torch.bfloat16, 8, 64)], 1),
]


@pytest.mark.parametrize("name,fault,cases,need", FAULTS, ids=[f"{f[0]}-{f[1]}" for f in FAULTS])
def test_planted_fault_rejected(name, fault, cases, need):
    op = operators.get(name)
    bad, good = op.faulty_kernel(fault), op.kernels["correct"]
    rejected = 0
    for seed, group, dtype, rows, cols in cases:
        inputs, params = op.example(seed, dtype=dtype, family=group, rows=rows, cols=cols)
        v_good = check(op.reference, good(*[t.clone() for t in inputs], **params), inputs, params,
                       mode="statistical", backend="interpreter")
        assert v_good.status == "accept", v_good.explain()
        v = check(op.reference, bad(*[t.clone() for t in inputs], **params), inputs, params,
                  mode="statistical", backend="interpreter")
        rejected += v.status == "reject"
    assert rejected >= need, f"{name}/{fault} rejected on {rejected} of {len(cases)} cases"
