"""The GPU's tensor-core dot (docs/design.md §4.4): the emulator reproduces what an H100
computed, bit for bit, and the calculus's tensor-core bound contains what that instruction can
compute, folded adds included, where the round-to-nearest bound does not."""

import json
import os
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from numoracle import backends

backends.select("interpreter")     # the flash attention kernel below runs on the CPU

import numoracle as no  # noqa: E402
from numoracle import formats as F  # noqa: E402
from numoracle.check import check  # noqa: E402
from numoracle.formats import bf16, fp16, fp32  # noqa: E402
from numoracle.selftest.emulator import Plan, emulate, tensor_core_dot  # noqa: E402

FIXTURE = Path(__file__).parent / "fixtures" / "h100_tensor_core.json"
# NUMORACLE_TENSOR_CORE_EXAMPLES=3000 python -m pytest tests/test_tensor_core.py -k contains: a long run
EXAMPLES = int(os.environ.get("NUMORACLE_TENSOR_CORE_EXAMPLES", "150"))


@no.reference(outputs=("y",))
def dot(a, b):
    return no.matmul(a, b, acc=fp32)


@no.reference(outputs=("y",))
def dot_bias(a, b, c):
    return no.matmul(a, b, acc=fp32) + c.to(fp32)


@no.reference(outputs=("y",))
def dot_bias_relu_bf16(a, b, c):
    return no.maximum(no.matmul(a, b, acc=fp32).to(fp32) + c, 0.0).to(bf16)


def _values(bits, fmt):
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}[fmt]
    return torch.tensor(bits, dtype=torch.int32).to(torch.int16).view(dtype).double()


def test_the_emulated_tensor_core_dot_is_what_an_h100_computed():
    """291 dot products measured on an H100 (wgmma; K = 1..17; from zero and from a bias; fp16
    subnormal operands): chosen where the result is not the round-to-nearest one, or where the
    alignment's treatment of subnormal exponents decides it."""
    data = json.loads(FIXTURE.read_text())
    differ_from_nearest = 0
    for i, case in enumerate(data["cases"]):
        fmt = F.by_name(case["fmt"])
        a = _values(case["a"], case["fmt"]).reshape(1, -1)
        b = _values(case["b"], case["fmt"]).reshape(-1, 1)
        init = torch.tensor([[float.fromhex(case["init"])]], dtype=torch.float64)
        y = float.fromhex(case["y"])
        got = float(tensor_core_dot(a, b, fmt, fmt, init=init))
        assert got == y, (i, case, got)
        differ_from_nearest += y != float(F.round(a @ b + init, fp32))
    assert differ_from_nearest > 150


def _magnitudes(draw, shape, fmt):
    """Values of fmt over a wide range of binades, with zeros and subnormals."""
    n = 1
    for s in shape:
        n *= s
    sig = torch.tensor(draw(st.lists(st.floats(-2, 2, allow_nan=False), min_size=n, max_size=n)), dtype=torch.float64)
    lo = fmt.emin - fmt.precision + 1
    exps = torch.tensor(draw(st.lists(st.sampled_from([lo, lo + 3, fmt.emin + 1, -12, -4, 0, 0, 0, 3, 9]),
                                      min_size=n, max_size=n)), dtype=torch.float64)
    return F.round(sig * torch.exp2(exps), fmt).reshape(shape)


@st.composite
def dot_cases(draw):
    fmt = draw(st.sampled_from([bf16, fp16]))
    M, K, N = draw(st.integers(1, 3)), draw(st.sampled_from([1, 2, 3, 4, 5, 6, 7, 9, 16, 17, 40])), draw(st.integers(1, 4))
    a, b = _magnitudes(draw, (M, K), fmt), _magnitudes(draw, (K, N), fmt)
    scale = draw(st.sampled_from([0.0, 2.0 ** -20, 1.0, 2.0 ** 12]))
    c = F.round(torch.tensor(draw(st.lists(st.floats(-4, 4), min_size=N, max_size=N)), dtype=torch.float64) * scale,
                fp32)
    dtype = torch.bfloat16 if fmt is bf16 else torch.float16
    return a.to(dtype), b.to(dtype), c.to(torch.float32)


@settings(max_examples=EXAMPLES, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(dot_cases(), st.integers(0, 3))
def test_the_tensor_core_bound_contains_every_tensor_core_dot(case, seed):
    """The emulated sm_90 instruction, an add folded into it every time, judged under the GPU
    profile: accepted in both modes, whatever the operands' binades, zeros and subnormals."""
    a, b, c = case
    plan = Plan(seed=seed, dot="tensor_core_folded")
    for program, inputs in ((dot, (a, b)), (dot_bias, (a, b, c)), (dot_bias_relu_bf16, (a, b, c))):
        y = emulate(program, inputs, plan=plan)
        for mode in ("fixed", "statistical"):
            v = check(program, y, inputs, mode=mode, backend="gpu", profile="h200")
            assert v.status == "accept", (program.name, mode, v.explain())


def test_round_to_nearest_bounds_reject_the_tensor_core_and_the_gpu_profile_does_not():
    """Why the GPU profile needs its own model: a dot of one or two products plus a bias, as an
    H100 computes it, falls outside the round-to-nearest region (the interpreter's profile)."""
    g = torch.Generator().manual_seed(0)
    rejected = {"interpreter": 0, "h200": 0}
    for t in range(30):
        K = 1 + t % 2
        a = torch.randn(4, K, generator=g).to(torch.bfloat16)
        b = torch.randn(K, 8, generator=g).to(torch.bfloat16)
        c = (torch.randn(8, generator=g) * 16).float()
        y = emulate(dot_bias, (a, b, c), plan=Plan(seed=t, dot="tensor_core_folded"))
        for backend, profile in (("interpreter", "interpreter"), ("gpu", "h200")):
            v = check(dot_bias, y, (a, b, c), mode="fixed", backend=backend, profile=profile)
            rejected[profile] += v.status == "reject"
    assert rejected["h200"] == 0 and rejected["interpreter"] >= 5, rejected


@pytest.mark.parametrize("K", [1, 3, 40])
def test_the_tensor_core_bound_still_catches_a_dot_that_drops_a_product(K):
    g = torch.Generator().manual_seed(K)
    a = torch.randn(8, K + 1, generator=g).to(torch.bfloat16)
    b = torch.randn(K + 1, 8, generator=g).to(torch.bfloat16)
    y = tensor_core_dot(a[:, :K].double(), b[:K].double(), bf16, bf16).float()
    v = check(dot, y, (a, b), mode="fixed", backend="gpu", profile="h200")
    assert v.status == "reject"


def test_the_assumptions_of_a_gpu_verdict_name_the_tensor_core_model():
    a = torch.ones(2, 3, dtype=torch.bfloat16)
    v = check(dot, (a.double() @ a.double().T).float(), (a, a.T.contiguous()), backend="gpu", profile="h200")
    assert any(line.startswith("dot: tl.dot") and "§4.4" in line for line in v.assumptions.lines())
    v = check(dot, (a.double() @ a.double().T).float(), (a, a.T.contiguous()))
    assert not any(line.startswith("dot:") for line in v.assumptions.lines())


@pytest.mark.parametrize("n", [16, 40])
def test_flash_attention_folds_its_rescaled_accumulator_into_the_dot_and_stays_judged(n):
    """The online softmax's ``tl.dot(p, v, acc)`` end to end (the reference's
    ``acc * alpha + no.matmul(p, v)``): emulated with every such add folded into the tensor-core
    dot, under the GPU profile, it is accepted in both modes; the kernel that forgets the
    rescale is still rejected past one block. (The folded-add term itself is what the property
    test above needs; here the exponentials' errors dominate.)"""
    from tests.fixtures import user_attention as A
    x, p = A.inputs(n, seed=1)
    for seed in range(3):
        y = emulate(A.attention_online, x, p, plan=Plan(seed=seed, profile="h200", dot="tensor_core_folded"))
        for mode in ("fixed", "statistical"):
            v = check(A.attention_online, y, x, p, mode=mode, backend="gpu", profile="h200")
            assert v.status == "accept", (seed, mode, v.explain())
    bad = check(A.attention_online, A.attention_noalpha(*x, **p), x, p, mode="fixed", backend="gpu", profile="h200")
    assert bad.status == ("reject" if n > 16 else "accept")


def test_a_long_dot_of_positive_terms_leans_toward_zero_and_the_statistical_mode_allows_it(monkeypatch):
    """Every truncation and rounding toward zero errs the same way where all terms are
    positive: over K = 16384 the emulated tensor core's error is systematic, beyond the
    statistical radius of a model in which it is all random. The deterministic half
    (``ops.tensor_core_lean``) keeps the statistical mode accepting; without it all 64
    elements are rejected."""
    from numoracle.calculus import ops
    g = torch.Generator().manual_seed(0)
    K = 16384
    a = torch.randn(8, K, generator=g).abs().to(torch.bfloat16)
    b = torch.randn(K, 8, generator=g).abs().to(torch.bfloat16)
    y = tensor_core_dot(a.double(), b.double(), bf16, bf16).float()
    for mode in ("fixed", "statistical"):
        assert check(dot, y, (a, b), mode=mode, backend="gpu", profile="h200").status == "accept", mode
    lean = ops.tensor_core_lean
    monkeypatch.setattr(ops, "tensor_core_lean", lambda *args: (lean(*args)[0] * 0, lean(*args)[1]))
    v = check(dot, y, (a, b), mode="statistical", backend="gpu", profile="h200")
    assert v.status == "reject" and int(v.outputs[0].rejected.sum()) == 64


@no.reference(outputs=("y",))
def bias_dot(a, b, c):
    return c + no.matmul(a, b, acc=fp32)


def test_a_gpu_fma_dot_that_starts_from_its_accumulator_is_inside_the_folded_bound():
    """42 results of ``tl.dot(a, b, acc, input_precision="ieee")`` on fp32 operands measured on an
    H100 (FMAs from the loaded accumulator: it passes every rounding), each outside the region of
    ``c + no.matmul(a, b)`` without the fold (the interpreter's profile) and inside the GPU
    profile's, which adds the folded accumulator's roundings."""
    data = json.loads((Path(__file__).parent / "fixtures" / "h100_fma_dot.json").read_text())
    for case in data["cases"]:
        a = torch.tensor([[float.fromhex(v) for v in case["a"]]], dtype=torch.float32)
        b = torch.tensor([[float.fromhex(v)] for v in case["b"]], dtype=torch.float32)
        c = torch.tensor([[float.fromhex(case["c"])]], dtype=torch.float32)
        y = torch.tensor([[float.fromhex(case["y"])]], dtype=torch.float32)
        assert check(bias_dot, y, (a, b, c), mode="fixed", backend="interpreter").status == "reject", case
        for mode in ("fixed", "statistical"):
            v = check(bias_dot, y, (a, b, c), mode=mode, backend="gpu", profile="h200")
            assert v.status == "accept", (case, mode, v.explain())
