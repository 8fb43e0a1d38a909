"""Accumulations that flush subnormals to zero: ``ftz=True`` on ``no.sum`` and ``no.matmul``
(fp32 atomic adds on NVIDIA GPUs flush subnormal inputs and results; measured on an H100 by
scripts/dot_subnormal_probe.py, docs/results/2026-12-06-h100-atomic-flush.md)."""

import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import numoracle as no
from numoracle.formats import bf16, fp32
from numoracle.selftest.emulator import Plan, emulate


@no.reference
def mm_ftz(a, b):
    return no.matmul(a, b, acc=fp32, ftz=True).to(bf16)


@no.reference
def mm_keeps(a, b):
    return no.matmul(a, b, acc=fp32).to(bf16)


@no.reference
def row_sum_ftz(x):
    return no.sum(x.to(fp32), axis=-1, ftz=True)


@st.composite
def tiny_operands(draw):
    """bf16 operands whose products and partial sums straddle fp32's smallest normal 2^-126."""
    m, k, n = draw(st.integers(1, 4)), draw(st.integers(1, 40)), draw(st.integers(1, 4))
    seed = draw(st.integers(0, 2**31 - 1))
    g = torch.Generator().manual_seed(seed)

    def tiny(shape):
        e = torch.randint(-72, -55, shape, generator=g).double()
        s = torch.randint(0, 2, shape, generator=g).double() * 2 - 1
        return (s * torch.rand(shape, generator=g, dtype=torch.float64).add(1) * 2.0 ** e).to(torch.bfloat16)
    return tiny((m, k)), tiny((k, n)), seed, draw(st.sampled_from(["random", "sequential", "tree", "blocked"]))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tiny_operands())
def test_a_flushing_accumulation_lies_in_the_ftz_region(case):
    a, b, seed, order = case
    for program in (mm_ftz, row_sum_ftz):
        inputs = (a, b) if program is mm_ftz else (a,)
        (y,) = emulate_ftz(program, inputs, Plan(seed=seed, order=order))
        for mode in ("fixed", "statistical"):
            v = no.check(program, y, inputs, mode=mode)
            assert v.status != "reject", v.explain()


def emulate_ftz(program, inputs, plan):
    out = emulate(program, inputs, plan=plan)
    return out if isinstance(out, tuple) else (out,)


def test_the_emulator_flushes_and_a_reference_that_keeps_subnormals_rejects_it():
    # one product 2^-66 * 2^-66 = 2^-132, subnormal in fp32 and bf16: a flushing accumulation gives 0
    a = torch.full((1, 1), 2.0 ** -66).to(torch.bfloat16)
    b = torch.full((1, 2), 2.0 ** -66).to(torch.bfloat16)
    (y,) = emulate_ftz(mm_ftz, (a, b), Plan(seed=0))
    assert float(y.abs().max()) == 0.0
    assert no.check(mm_keeps, y, (a, b), mode="fixed").status == "reject"
    assert no.check(mm_ftz, y, (a, b), mode="fixed").status == "accept"


def test_a_split_k_kernel_on_the_repaired_interpreter_flushes_as_the_gpu_does():
    """The interpreter's fp32 atomic adds flush as an H100's (defect atomic_fadd_ftz): a split-K
    kernel's output of a subnormal product is 0 on the CPU too, which a reference that keeps
    subnormals rejects and ``ftz=True`` accepts; normal outputs are unchanged."""
    from numoracle import backends
    backends.select("interpreter")
    import test_plan_kernels as PK
    # the plan tests' references of the same kernel (fp32 out, with and without ftz)
    from test_plan import matmul_fp32 as split_keeps, matmul_fp32_ftz as split_ftz
    a = torch.full((2, 32), 2.0 ** -66).to(torch.bfloat16)
    b = torch.zeros(32, 16, dtype=torch.bfloat16)
    b[0, :] = 2.0 ** -66                       # one product 2^-132 an element, subnormal in fp32
    c = PK.split_k_matmul(a, b)
    assert float(c.abs().max()) == 0.0
    assert no.check(split_keeps, c, (a, b), mode="fixed").status == "reject"
    assert no.check(split_ftz, c, (a, b), mode="fixed").status == "accept"
    g = torch.Generator().manual_seed(1)
    a, b = torch.randn(20, 64, generator=g).to(torch.bfloat16), torch.randn(64, 24, generator=g).to(torch.bfloat16)
    c = PK.split_k_matmul(a, b)
    for program in (split_keeps, split_ftz):
        assert no.check(program, c, (a, b), mode="fixed").status == "accept"
