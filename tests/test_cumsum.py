"""``no.cumsum``: inclusive prefix sums (``tl.cumsum``).  An emulated scan (sequential, each
partial sum rounded) is never rejected; a Triton scan kernel is accepted on the interpreter, a
scan in the storage format is caught, the plan check pairs the kernel's scan with the
reference's prefix sum, and the compiled verdict over a stream of shapes equals the eager one."""

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import numoracle as no
from numoracle import backends
from numoracle.check import check_modes
from numoracle.formats import fp32
from numoracle.selftest.emulator import Plan, emulate
from numoracle.strategies import fill
from numoracle.verdict import compiled
from numoracle.verdict.compiled import compare

backends.select("interpreter")
from test_plan_kernels import scan  # noqa: E402


@no.reference
def scan_fp32(x):
    return no.cumsum(x.to(fp32), axis=-1).to(x.format)


@no.reference
def scan_own(x):
    return no.cumsum(x, axis=-1)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(fmt=st.sampled_from([torch.bfloat16, torch.float16, torch.float32]), rows=st.integers(1, 6),
       cols=st.integers(1, 300), family=st.sampled_from(["normal", "lognormal", "uniform", "heavy_tailed"]),
       seed=st.integers(0, 2**31 - 1), own=st.booleans(), rounding=st.sampled_from(["nearest", "up", "down"]))
def test_an_emulated_scan_is_never_rejected(fmt, rows, cols, family, seed, own, rounding):
    x = fill((rows, cols), family, seed, dtype=fmt)
    program = scan_own if own else scan_fp32
    y = emulate(program, (x,), plan=Plan(seed=seed, rounding=rounding))
    for mode, v in check_modes(program, y, (x,)).items():
        assert v.status != "reject", (mode, v.explain())


def test_a_triton_scan_is_accepted_and_a_scan_in_the_storage_format_caught():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(4, 200, generator=g).to(torch.bfloat16)
    for mode, v in check_modes(scan_fp32, scan(x), (x,)).items():
        assert v.status == "accept", (mode, v.explain())
    v = no.check(scan_fp32, scan(x, storage=True), (x,), mode="fixed")
    assert v.status == "reject", v.explain()
    # and the reference that says so accepts it
    assert no.check(scan_own, scan(x, storage=True), (x,), mode="fixed").status == "accept"


def test_the_plan_pairs_the_kernels_scan_with_the_prefix_sum():
    from numoracle.plan import check_plan
    x = torch.randn(3, 100).to(torch.bfloat16)
    r = check_plan(scan_fp32, scan, [x], {})
    assert r.ok, r.explain()
    # the skeleton writes the scan as no.cumsum
    from numoracle.plan import skeleton
    text = skeleton(scan_fp32, scan, [x], name="scan_plan")
    assert "no.cumsum(x.to(fp32), axis=-1)" in text and "TODO" not in text, text
    # a reference with no sum at all disagrees
    r = check_plan(no.reference(lambda x: x.to(fp32).to(x.format)), scan, [x], {})
    assert not r.ok and any(d.kind == "reduction" for d in r.disagreements), r.explain()


def test_torch_spelling_points_to_ours():
    with pytest.raises(no.InvalidArgument, match="axis="):
        no.check(no.reference(lambda x: no.cumsum(x, dim=-1)), torch.zeros(2, 3), (torch.zeros(2, 3),))


@pytest.mark.slow
def test_compiled_prefix_sums_over_a_stream_of_shapes_equal_eager():
    compiled.clear()
    try:
        eager, stream = no.settings(compile="never"), no.settings(compile="auto", compile_shapes_after=1e-9)
        for k, (rows, cols) in enumerate([(3, 200), (4, 130), (5, 333), (2, 77), (3, 256)]):
            x = fill((rows, cols), "normal", k, dtype=torch.bfloat16)
            y = emulate(scan_fp32, (x,), plan=Plan(seed=k))
            ve = check_modes(scan_fp32, y, (x,), settings=eager)
            vc = check_modes(scan_fp32, y, (x,), settings=stream)
            for m in ve:
                assert ve[m].status == vc[m].status
                for oa, ob in zip(ve[m].outputs, vc[m].outputs):
                    assert torch.equal(oa.rejected, ob.rejected)
                    scale = oa.centre.abs() + (oa.hi - oa.lo).abs()
                    assert bool(((oa.lo - ob.lo).abs() <= 2.0 ** -45 * scale).all())
                    assert bool(((oa.hi - ob.hi).abs() <= 2.0 ** -45 * scale).all())
                    # the radii themselves as the safety net compares them (a gamma off by 1e-11
                    # relative, from Inductor's exp(t) - 1, hides in lo and hi)
                    ra, rb = oa._parts.judged.region(), ob._parts.judged.region()
                    assert compare.close(ra.fixed, rb.fixed) and compare.close(ra.stat, rb.stat), (m, rows, cols)
        assert any(p.symbolic and p.compiled_calls for p in compiled.plans()), [p.failed for p in compiled.plans()]
        # no compiled function fell back to eager code (the power of two, 256, is a trace of its own)
        assert not [(p.failed, p.region_failed) for p in compiled.plans() if p.failed or p.region_failed]
    finally:
        compiled.clear()


def test_a_matrix_computed_beside_the_program_is_a_matmul_operand():
    # the prefix sum as a product with a triangle of ones (it raised AttributeError: 'Tensor'
    # object has no attribute 'c'); the matrix is exact in its dtype's format
    @no.reference
    def by_triangle(x):
        tri = torch.triu(torch.ones(x.shape[-1], x.shape[-1], dtype=torch.bfloat16))
        return no.matmul(x, tri, acc=fp32).to(x.format)
    x = fill((3, 50), "normal", 3, dtype=torch.bfloat16)
    for mode, v in check_modes(by_triangle, scan(x), (x,)).items():
        assert v.status == "accept", (mode, v.explain())
    y = emulate(by_triangle, (x,), plan=Plan(seed=3))
    assert no.check(by_triangle, y, (x,), mode="fixed").status == "accept"


def test_the_emulator_refuses_an_order_its_sequential_scan_would_break():
    @no.reference
    def scan_tree(x):
        return no.cumsum(x.to(fp32), axis=-1, order="tree").to(x.format)
    x = fill((2, 40), "normal", 0, dtype=torch.bfloat16)
    with pytest.raises(no.InvalidArgument, match="scans sequentially"):
        emulate(scan_tree, (x,), plan=Plan(seed=0))
