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
from numoracle.calculus.ops import SPLITS, tf32_truncate  # noqa: E402
from numoracle.selftest.emulator import Plan, emulate, split_dot, tensor_core_dot  # noqa: E402

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


# ---- fp32 operands read as TF32 (tl.dot's default input_precision on fp32)

@no.reference(outputs=("y",))
def bias_dot_tf32(a, b, c):
    return c + no.matmul(a, b, acc=fp32, input_precision="tf32")


@no.reference(outputs=("y",))
def bias_dot_to_tf32(a, b, c):
    return c + no.matmul(a.to(F.tf32), b.to(F.tf32), acc=fp32)


@no.reference(outputs=("y",))
def scaled_dot_tf32(a, b, c):
    # a * 3.0 rounds in fp32: an operand with an error term, truncated by the dot
    return c + no.matmul(a * 3.0, b, acc=fp32, input_precision="tf32")


def _tf32_cases():
    data = json.loads((Path(__file__).parent / "fixtures" / "h100_tf32_dot.json").read_text())
    for case in data["cases"]:
        K = case["K"]
        t = lambda key, shape: torch.tensor([float.fromhex(v) for v in case[key]], dtype=torch.float32).reshape(shape)
        yield K, t("a", (8, K)), t("b", (K, 8)), t("c", (8, 8)), t("y", (8, 8)), case.get("subnormal", False)


def test_a_tf32_dot_as_an_h100_computed_it_is_emulated_bit_for_bit_and_accepted():
    """512 results of ``tl.dot(a, b, acc, input_precision="tf32")`` on fp32 operands measured on an
    H100 (wgmma, K = 2..64; 128 of them with subnormal operands beside 2^100 partners): the H100
    drops the operands' low 13 bits and keeps subnormals (flushing them would miss some results),
    which the emulator does and ``input_precision="tf32"`` models under the GPU profile (accepted
    in both modes).  A reference that rounds the operands with ``.to(tf32)`` (to nearest) rejects
    most of them, and so does the interpreter's profile, whose dot keeps the fp32 operands."""
    to_nearest = elements = flush_missed = 0
    for K, a, b, c, y, subnormal in _tf32_cases():
        em = emulate(bias_dot_tf32, (a, b, c), plan=Plan(dot="tensor_core_folded"))
        assert torch.equal(em, y), K
        if subnormal:
            t = F.round(a.double(), F.tf32, "rtz")
            flushed = tensor_core_dot(torch.where(t.abs() < 2.0 ** -126, 0.0, t), F.round(b.double(), F.tf32, "rtz"),
                                      F.tf32, F.tf32, init=c.double(), block=8)
            flush_missed += int((flushed != y.double()).sum())
        for mode in ("fixed", "statistical"):
            v = check(bias_dot_tf32, y, (a, b, c), mode=mode, backend="gpu", profile="h200")
            assert v.status == "accept", (K, mode, v.explain())
        v = check(bias_dot_to_tf32, y, (a, b, c), mode="fixed", backend="gpu", profile="h200")
        to_nearest += int(v.outputs[0].rejected.sum()) if v.status == "reject" else 0
        elements += y.numel()
        assert check(bias_dot_tf32, y, (a, b, c), mode="fixed", backend="interpreter").status == "reject", K
    assert elements == 512 and to_nearest > elements // 2 and flush_missed > 0, (to_nearest, flush_missed)


@st.composite
def fp32_dot_cases(draw):
    M, K, N = draw(st.integers(1, 3)), draw(st.sampled_from([1, 2, 3, 5, 8, 9, 17, 40])), draw(st.integers(1, 4))
    a, b = _magnitudes(draw, (M, K), fp32), _magnitudes(draw, (K, N), fp32)
    c = F.round(torch.tensor(draw(st.lists(st.floats(-4, 4), min_size=N, max_size=N)), dtype=torch.float64)
                * draw(st.sampled_from([0.0, 2.0 ** -20, 1.0, 2.0 ** 12])), fp32)
    return a.float(), b.float(), c.float()


@settings(max_examples=EXAMPLES, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(fp32_dot_cases(), st.integers(0, 3))
def test_the_tf32_operand_model_contains_every_emulated_tf32_dot(case, seed):
    """fp32 operands over wide binades, with zeros and subnormals, truncated to TF32 and added as
    the tensor core does, the bias folded into the dot: accepted under the GPU profile in both
    modes; and with the operands kept (the interpreter's dot), under the interpreter's profile.
    Also where an operand is computed (rounded in fp32) before the dot truncates it."""
    a, b, c = case
    for plan, backend, profile in ((Plan(seed=seed, dot="tensor_core_folded"), "gpu", "h200"),
                                   (Plan(seed=seed), "interpreter", "interpreter")):
        for program in (bias_dot_tf32, scaled_dot_tf32):
            y = emulate(program, (a, b, c), plan=plan)
            for mode in ("fixed", "statistical"):
                v = check(program, y, (a, b, c), mode=mode, backend=backend, profile=profile)
                assert v.status == "accept", (program.name, profile, mode, v.explain())


def test_the_tf32_operand_model_catches_a_dot_that_keeps_fp32_or_drops_a_product():
    """Planted: the dot reads the fp32 operands whole (a GPU dot with inputPrecision="ieee"), and a
    TF32 dot that drops its last product; both rejected under the GPU profile."""
    g = torch.Generator().manual_seed(3)
    a, b = torch.randn(8, 33, generator=g), torch.randn(33, 8, generator=g)
    c = torch.zeros(8, 8)
    whole = tensor_core_dot(a.double(), b.double(), fp32, fp32, block=8).float()
    assert check(bias_dot_tf32, whole, (a, b, c), mode="fixed", backend="gpu", profile="h200").status == "reject"
    t = lambda x: F.round(x.double(), F.tf32, "rtz")
    dropped = tensor_core_dot(t(a[:, :32]), t(b[:32]), F.tf32, F.tf32, block=8).float()
    ok = tensor_core_dot(t(a), t(b), F.tf32, F.tf32, block=8).float()
    assert check(bias_dot_tf32, ok, (a, b, c), mode="fixed", backend="gpu", profile="h200").status == "accept"
    assert check(bias_dot_tf32, dropped, (a, b, c), mode="fixed", backend="gpu", profile="h200").status == "reject"


def test_input_precision_names_what_is_modelled():
    a = torch.ones(2, 2)

    @no.reference(outputs=("y",))
    def bf16x9(a, b):
        return no.matmul(a, b, input_precision="bf16x9")

    with pytest.raises(no.InvalidArgument) as e:
        check(bf16x9, a, (a, a))
    assert "input_precision='bf16x9'" in str(e.value), str(e.value)
    assert "('ieee', 'tf32', 'tf32x3', 'bf16x3', 'bf16x6')" in str(e.value), str(e.value)


def _split_programs(name):
    @no.reference(outputs=("y",))
    def bias_dot_split(a, b, c):
        return c + no.matmul(a, b, acc=fp32, input_precision=name)

    @no.reference(outputs=("y",))
    def scaled_dot_split(a, b, c):
        # a * 0.7 rounds in fp32 (subnormals too): an operand with an error term, split by the dot
        return c + no.matmul(a * 0.7, b, acc=fp32, input_precision=name)
    return bias_dot_split, scaled_dot_split


SPLIT_PROGRAMS = {name: _split_programs(name) for name in SPLITS}


@pytest.mark.parametrize("name", sorted(SPLITS))
@settings(max_examples=EXAMPLES, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(case=fp32_dot_cases(), seed=st.integers(0, 7))
def test_the_split_models_contain_every_emulated_split_dot(name, case, seed):
    """fp32 operands over wide binades, with zeros and subnormals, split as Triton does for
    tf32x3 (TF32 big part, truncated small part), bf16x3 and bf16x6 (bf16 parts rounded to nearest)
    and summed by tensor-core dots per K tile (8 to 64 wide), the tiles' sums added in fp32, the
    bias as the accumulator's start: accepted under the GPU profile in both modes, with known
    operands and with a computed one; and on the interpreter, whose dot keeps the fp32 operands
    whatever the precision."""
    a, b, c = case
    for plan, backend, profile in ((Plan(seed=seed, dot="tensor_core_folded"), "gpu", "h200"),
                                   (Plan(seed=seed, dot="tensor_core"), "gpu", "h200"),
                                   (Plan(seed=seed), "interpreter", "interpreter")):
        for program in SPLIT_PROGRAMS[name]:
            y = emulate(program, (a, b, c), plan=plan)
            for mode in ("fixed", "statistical"):
                v = check(program, y, (a, b, c), mode=mode, backend=backend, profile=profile)
                assert v.status == "accept", (program.name, profile, mode, v.explain())


def test_split_dots_as_an_h200_computed_them_are_emulated_bit_for_bit_and_accepted():
    """960 results of ``acc = tl.dot(a, b, acc, input_precision=P)`` on fp32 operands, P = tf32x3,
    bf16x3 and bf16x6, measured on an H200 with Triton 3.6 (K = 16 and 64; K tiles of 16 on mma
    v2 and of 32 on wgmma; mixed, positive, wide-exponent, cancelling and subnormal operands): the
    emulated split reproduces every one bit for bit and the matching ``input_precision`` accepts
    them in both modes under the GPU profile, where a reference of one TF32 dot rejects most of
    them (docs/design.md §4.4)."""
    data = json.loads((Path(__file__).parent / "fixtures" / "h200_split_dot.json").read_text())
    results = one_dot_rejects = 0
    for case in data["cases"]:
        K = case["K"]
        t = lambda key, shape: torch.tensor([float.fromhex(v) for v in case[key]], dtype=torch.float32).reshape(shape)
        a, b, c = t("a", (4, K)), t("b", (K, 4)), t("c", (4, 4))
        for name in SPLITS:
            for bk in (16, 32):
                y = t(f"y {name} bk{bk}", (4, 4))
                em = split_dot(a.double(), b.double(), SPLITS[name], init=c.double(), bk=bk)
                assert torch.equal(em, y.double()), (name, case["kind"], K, bk)
                for mode in ("fixed", "statistical"):
                    v = check(SPLIT_PROGRAMS[name][0], y, (a, b, c), mode=mode, backend="gpu", profile="h200")
                    assert v.status == "accept", (name, case["kind"], K, bk, mode, v.explain())
                v = check(bias_dot_tf32, y, (a, b, c), mode="fixed", backend="gpu", profile="h200")
                one_dot_rejects += int(v.outputs[0].rejected.sum()) if v.status == "reject" else 0
                results += y.numel()
    assert results == 960 and one_dot_rejects > results // 2, one_dot_rejects


@pytest.mark.parametrize("name", sorted(SPLITS))
def test_a_split_model_rejects_the_other_splits_and_the_whole_product(name):
    """Planted, under the GPU profile: on random operands the true split is accepted, the same
    split dropping its last product and one TF32 dot rejected.  On operands 1 + 1.5 2^-9, whose
    bf16 split leaves a mid part that bf16x3 squares away (tf32x3 and bf16x6 keep them whole),
    bf16x3's result and the whole products' are told apart both ways."""
    g = torch.Generator().manual_seed(5)
    a, b = torch.randn(8, 64, generator=g), torch.randn(64, 8, generator=g)
    c = torch.zeros(8, 8)

    def verdict(y, a, b):
        return check(SPLIT_PROGRAMS[name][0], y.float(), (a, b, c), mode="fixed", backend="gpu",
                     profile="h200").status
    A, B = a.double(), b.double()
    assert verdict(split_dot(A, B, SPLITS[name], bk=32), a, b) == "accept"
    assert verdict(split_dot(A[:, :63], B[:63], SPLITS[name], bk=32), a, b) == "reject"
    assert verdict(tensor_core_dot(tf32_truncate(A), tf32_truncate(B), F.tf32, F.tf32, block=8), a, b) == "reject"
    a2, b2 = torch.full((8, 64), 1 + 1.5 * 2.0 ** -9), torch.full((64, 8), 1 + 1.5 * 2.0 ** -9)
    A2, B2 = a2.double(), b2.double()
    whole = A2 @ B2
    assert verdict(split_dot(A2, B2, SPLITS[name], bk=32), a2, b2) == "accept"
    for other in SPLITS:
        y = split_dot(A2, B2, SPLITS[other], bk=32)
        assert verdict(y, a2, b2) == ("accept" if (other == "bf16x3") == (name == "bf16x3") else "reject"), other
    assert verdict(whole, a2, b2) == ("reject" if name == "bf16x3" else "accept")


def test_an_added_accumulator_passes_every_tile_add_of_a_tf32x3_dot():
    """A K loop ``acc = tl.dot(a, b, acc, input_precision="tf32x3")`` from a large start adds each
    tile's small sum to it in fp32, rounded to nearest: one rounding per tile, each of up to half
    an ulp of the start, which the reference's single add of c after the dot does not hold.  Here
    every tile of 8 sums to 3/4 of an ulp of 1, so every add rounds up by a quarter: 32 tiles
    leave 8 ulps.  The region carries them (accepted); without that term they are rejected."""
    from numoracle.calculus import ops
    K = 256
    a = torch.full((4, K), 0.75 * 2.0 ** -26)
    b = torch.ones(K, 4)
    c = torch.ones(4)
    y = split_dot(a.double(), b.double(), SPLITS["tf32x3"], init=c.double()[None, :].expand(4, 4), bk=8).float()
    assert torch.equal(y.double(), torch.full((4, 4), 1 + 32 * 2.0 ** -23))
    assert check(SPLIT_PROGRAMS["tf32x3"][0], y, (a, b, c), mode="fixed", backend="gpu", profile="h200").status == "accept"
    orig = ops._split_matmul

    def no_fold(*args):
        out = orig(*args)
        out.dot_fold = None
        return out
    ops._split_matmul = no_fold
    try:
        v = check(SPLIT_PROGRAMS["tf32x3"][0], y, (a, b, c), mode="fixed", backend="gpu", profile="h200")
    finally:
        ops._split_matmul = orig
    assert v.status == "reject", v.explain()


@no.reference(outputs=("y",))
def dot_of_widened(a, b):
    return no.matmul(a.to(fp32), b.to(fp32), acc=fp32)


@no.reference(outputs=("y",))
def dot_of_widened_tf32(a, b):
    return no.matmul(a.to(fp32), b.to(fp32), acc=fp32, input_precision="tf32")


def test_fp32_tiles_of_bf16_values_are_bounded_as_tf32_instructions():
    """The instruction follows the tiles' type: bf16 values widened to fp32 before the dot run TF32
    instructions of 8 products (twice as many as bf16 tiles take), so their statistical radius is
    the TF32 dot's, wider than the bf16 dot's; reading them as TF32 changes nothing (exact)."""
    g = torch.Generator().manual_seed(4)
    a = torch.randn(4, 4096, generator=g).abs().to(torch.bfloat16)
    b = torch.randn(4096, 4, generator=g).abs().to(torch.bfloat16)
    y = tensor_core_dot(a.double(), b.double(), bf16, bf16, block=8).float()
    radius = {}
    for program in (dot, dot_of_widened, dot_of_widened_tf32):
        v = check(program, y, (a, b), mode="statistical", backend="gpu", profile="h200")
        assert v.status == "accept", (program.name, v.explain())
        o = v.outputs[0]
        radius[program.name] = (o.hi - o.lo).double()
    assert torch.equal(radius["dot_of_widened"], radius["dot_of_widened_tf32"])
    assert bool((radius["dot_of_widened"] > radius["dot"]).all())


@no.reference(outputs=("y",))
def subnormal_dot_tf32(a, b):
    # a * 0.7 of a subnormal a rounds in fp32 (a * 3.0 would be exact there): an error term
    return no.matmul(a * 0.7, b, acc=fp32, input_precision="tf32")


def test_a_computed_subnormal_operand_loses_up_to_tf32s_subnormal_spacing():
    """A subnormal operand with an error term is truncated to TF32's subnormal spacing, 2^-136, far
    more than 2u of it: times 2^100 partners that loss is what the dot's region must hold
    (accepted in both modes); no other term of the bound covers it."""
    g = torch.Generator().manual_seed(8)
    a = (torch.rand(16, 8, generator=g, dtype=torch.float64) * 2.0 ** -134).float()
    b = (torch.rand(8, 4, generator=g, dtype=torch.float64) * 2.0 ** 100).float()
    y = emulate(subnormal_dot_tf32, (a, b), plan=Plan(dot="tensor_core"))
    whole = (F.round(a.double() * 0.7, fp32) @ b.double()).float()
    assert not torch.equal(y, whole)     # the truncation lost something
    for mode in ("fixed", "statistical"):
        v = check(subnormal_dot_tf32, y, (a, b), mode=mode, backend="gpu", profile="h200")
        assert v.status == "accept", (mode, v.explain())
