"""Sums of known values (inputs, runtime arguments, exact constants) settle on their rounding to
nearest (docs/design.md §4, "Settling"): the region of ``x + r`` in bf16 is a point wherever the
float64 sum is exact and its rounding normal, ties included; a kernel that uses the unrounded
sum is caught; and a correct kernel stays accepted under every emulated plan."""

from fractions import Fraction

import pytest
import torch

import numoracle as no
from numoracle import formats as F
from numoracle.formats import bf16, fp32
from numoracle.selftest.emulator import Plan, emulate
from numoracle.selftest.programs import PROGRAMS, make_inputs


@no.reference
def widened_sum(x, r):
    return (x + r).to(fp32)          # a widening: the output's interval is the sum's own


def _every_finite_bf16():
    bits = torch.arange(-32768, 32768, dtype=torch.int32).to(torch.int16)
    v = bits.view(torch.bfloat16)
    return v[torch.isfinite(v.float())]


@pytest.mark.parametrize("addend", [1.0, -3.0, 0.0078125, 2.0 ** -133, -(2.0 ** 127), 3.0e38])
def test_a_sum_of_two_bf16_values_is_the_rounding_of_their_exact_sum(addend):
    x = _every_finite_bf16()
    r = torch.full_like(x, addend)
    exact = [Fraction(float(a)) + Fraction(float(b)) for a, b in zip(x.tolist(), r.tolist())]
    as64 = torch.tensor([float(e) for e in exact], dtype=torch.float64)
    exact64 = torch.tensor([Fraction(float(e)) == e for e in exact])
    rn = F.round(as64, bf16)
    decided = exact64 & (as64.abs() >= bf16.min_normal) & (as64.abs() <= bf16.max_finite)
    o = no.check(widened_sum, (rn.to(torch.float32),), (x, r), mode="fixed").outputs[0]
    assert decided.sum() > 0
    # decided: one value, the rounding of the exact sum (a tie of bf16 to its even neighbour)
    assert torch.equal(o.lo[decided], rn[decided]) and torch.equal(o.hi[decided], rn[decided])
    # elsewhere an interval that still holds it, or no certificate (a sum past bf16's range)
    assert not bool(o.uncertified[decided].any())
    rest = ~decided & ~o.uncertified
    assert bool(((o.lo[rest] <= rn[rest]) & (rn[rest] <= o.hi[rest])).all())
    assert bool((as64[o.uncertified].abs() >= F.overflow_threshold(bf16)).all())


def test_a_tie_of_two_stored_values_accepts_only_its_even_rounding():
    x = torch.tensor([1.0, 8.25], dtype=torch.bfloat16)
    r = torch.tensor([2.0 ** -8, 2.0 ** -5], dtype=torch.bfloat16)      # 1 + 2^-8, 8.28125: ties
    @no.reference
    def stored_sum(x, r):
        return x + r
    even = (x.double() + r.double()).to(torch.float32).to(torch.bfloat16)   # exact in fp32, then RNE
    assert no.check(stored_sum, even, (x, r), mode="fixed").status == "accept"
    odd = (even.view(torch.int16) + 1).view(torch.bfloat16)
    v = no.check(stored_sum, odd, (x, r), mode="fixed")
    assert v.status == "reject" and v.n_rejected == 2, v.explain()


def test_a_kernel_that_normalises_the_unrounded_residual_is_rejected():
    """The fault a tolerance and the earlier calculus missed: h stored in bf16, but the norm
    computed from the fp32 sum (the rounding of h then only scales the row by a hair)."""
    @no.reference(outputs=("y", "h"))
    def unrounded(x, r, w, *, eps=1e-6):
        hf = x.to(fp32) + r.to(fp32)
        rstd = no.rsqrt(no.mean(hf * hf, axis=-1, keepdims=True) + eps)
        return (hf * rstd).to(x.format) * w, hf.to(x.format)

    program = PROGRAMS["add_rms_norm"]
    rejected = 0
    for seed in range(10):
        inputs = make_inputs("add_rms_norm", "bf16", 4, 256, "normal", 0, seed)
        assert no.check(program, emulate(program, inputs, plan=Plan(seed=seed)), inputs,
                        mode="fixed").status == "accept"
        rejected += no.check(program, emulate(unrounded, inputs, plan=Plan(seed=seed)), inputs,
                             mode="fixed").status == "reject"
    assert rejected == 10


@pytest.mark.parametrize("direction", ["up", "down", "away"])
def test_one_way_roundings_round_known_sums_to_nearest(direction):
    """The emulator's directed plans round every other sum one way, but a sum of known values
    to nearest, as the calculus settles it (else its one-way search would reject correct
    kernels the calculus rightly judges)."""
    inputs = make_inputs("add_rms_norm", "bf16", 2, 64, "normal", 0, 3)
    y, h = emulate(PROGRAMS["add_rms_norm"], inputs, plan=Plan.adversarial(seed=1, direction=direction))
    want = (inputs[0].double() + inputs[1].double()).to(torch.float32).to(torch.bfloat16)
    assert torch.equal(h, want)


def test_a_users_fused_add_norm_kernel_accepted_and_its_faults_rejected(monkeypatch):
    """The kernels of tests/fixtures/user_add_norm.py on the interpreter, in both formats: the
    correct one accepted in both modes, each fault rejected in fixed mode on most cases; the
    plan reader finds the kernel's plan to be its reference's."""
    from pathlib import Path

    from numoracle import backends
    from numoracle.plan import check_plan
    backends.select("interpreter")
    monkeypatch.chdir(Path(__file__).resolve().parents[1])
    from tests.fixtures import user_add_norm_op as U
    rejected = {name: 0 for name in U.op.faulty}
    for seed, (dtype, family) in enumerate([(torch.bfloat16, "normal"), (torch.float16, "normal"),
                                            (torch.bfloat16, "laplace"), (torch.float16, "uniform")]):
        inputs, params = U.example(seed, dtype, family, 4, 96)
        outs = U.op.kernels["correct"](*inputs, **params)
        for mode in ("fixed", "statistical"):
            assert no.check(U.reference, outs, inputs, params, mode=mode).status == "accept"
        for name in rejected:
            outs = U.op.faulty_kernel(name)(*inputs, **params)
            rejected[name] += no.check(U.reference, outs, inputs, params, mode="fixed").status == "reject"
    assert rejected == {"ms_rounded": 4, "unrounded_residual": 4}, rejected
    inputs, _ = U.example(0, torch.bfloat16, "normal", 4, 64)
    report = check_plan(U.op, "correct", inputs, {})
    assert report.ok, report.summary() + "".join(f"\n{d.message}" for d in report.disagreements)


def test_slices_reshapes_and_magnitudes_of_known_values_are_known():
    @no.reference
    def halves(x, r):
        n = x.shape[-1] // 2
        return (abs(x[:, :n]) + r.reshape(x.shape[0], n)).to(fp32)

    g = torch.Generator().manual_seed(0)
    x = torch.randn(3, 64, generator=g).to(torch.bfloat16)
    r = torch.randn(3 * 32, generator=g).to(torch.bfloat16)
    o = no.check(halves, torch.zeros(3, 32), (x, r), mode="fixed").outputs[0]
    want = F.round(x[:, :32].double().abs() + r.reshape(3, 32).double(), bf16)
    normal = want.abs() >= bf16.min_normal
    assert bool(normal.all())
    assert torch.equal(o.lo, want) and torch.equal(o.hi, want)
