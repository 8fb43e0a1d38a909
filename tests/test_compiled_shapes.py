"""A verdict compiled once for every shape of a kind (settings.compile_shapes_after): the
same verdicts as the eager calculus over a stream of new shapes, sizes that are powers of
two included (their exact scalings are another trace), labels that carry the call's own
sizes, and no symbolic plan before its kind's eager verdicts have taken long enough.

The stream test compiles rms_norm's verdict with symbolic sizes (two traces: a row length
that is a power of two is the second), minutes on a fresh machine: it is in the slow tier."""
import pytest
import torch

import numoracle as no
from numoracle import operators
from numoracle.check import check_modes
from numoracle.errors import InvalidArgument
from numoracle.selftest.emulator import Plan, emulate
from numoracle.verdict import compiled
from numoracle.verdict.compiled import compare

EAGER = no.settings(compile="never")
STREAM = no.settings(compile="auto", compile_shapes_after=1e-9)
# rows x columns, rows >= 2 (a size of 1 is another kind); 256 and 512 are powers of two
SHAPES = [(3, 200), (4, 130), (5, 333), (2, 77), (3, 256), (6, 1000), (4, 512), (2, 45), (7, 130)]
FAULTS = [(), ("ulp_off_store",), (), ("truncating_store",), (), (), ("ulp_off_store",), (), ()]


@pytest.fixture
def fresh():
    compiled.clear()
    yield
    compiled.clear()


def _case(rows, cols, faults, seed):
    op = operators.get("rms_norm")
    inputs, params = op.example(seed, dtype=torch.bfloat16, family="calibration", rows=rows, cols=cols)
    return op, inputs, params, emulate(op.reference, inputs, params, Plan(seed=seed, faults=faults))


def _assert_same(ve, vc):
    for m in ve:
        a, b = ve[m], vc[m]
        assert a.status == b.status, (m, a.status, b.status)
        assert a.certificate.to_dict() == b.certificate.to_dict()
        for oa, ob in zip(a.outputs, b.outputs):
            for f in ("rejected", "uncertified", "special", "fixed_rejected"):
                assert torch.equal(getattr(oa, f), getattr(ob, f)), (m, oa.name, f)
            scale = oa.centre.abs() + (oa.hi - oa.lo).abs()
            for f in ("centre", "lo", "hi"):
                d = (getattr(oa, f) - getattr(ob, f)).abs()
                assert bool((d <= 2.0 ** -45 * scale).all()), (m, oa.name, f, float(d.max()))


@pytest.mark.slow
def test_one_symbolic_plan_judges_a_stream_of_shapes_as_eager_verdicts_do(fresh):
    statuses = []
    for k, ((rows, cols), faults) in enumerate(zip(SHAPES, FAULTS)):
        op, inputs, params, outs = _case(rows, cols, faults, seed=k)
        ve = check_modes(op.reference, outs, inputs, params, settings=EAGER)
        vc = check_modes(op.reference, outs, inputs, params, settings=STREAM)
        _assert_same(ve, vc)
        assert vc["statistical"].explain() == ve["statistical"].explain()
        statuses.append(vc["statistical"].status)
    # the planted faults are caught on the compiled path too
    assert [s == "reject" for s in statuses] == [bool(f) for f in FAULTS]
    kinds = [p for p in compiled.plans() if p.symbolic]
    assert len(kinds) == 1
    kind = kinds[0]
    assert kind.failed is None and kind.whole, kind.failed or kind.split
    # made after the first eager verdict, taught by the second: every later shape but the first
    # power of two (a trace of its own, judged eagerly once to learn its sites) ran compiled
    assert kind.compiled_calls == len(SHAPES) - 3
    assert len(kind._traces) == 2


def test_a_kind_is_compiled_only_after_its_eager_verdicts_took_long_enough(fresh):
    slow = no.settings(compile="auto", compile_shapes_after=3600)
    for k, (rows, cols) in enumerate(SHAPES[:4]):
        op, inputs, params, outs = _case(rows, cols, (), seed=k)
        check_modes(op.reference, outs, inputs, params, settings=slow)
    assert not [p for p in compiled.plans() if p.symbolic]
    assert sum(compiled._kind_seconds.values()) > 0
    never = no.settings(compile="auto", compile_shapes_after=0)
    compiled.clear()
    op, inputs, params, outs = _case(3, 200, (), seed=0)
    check_modes(op.reference, outs, inputs, params, settings=never)
    assert not compiled._kind_seconds and all(p.kind_key is None for p in compiled.plans())


def test_compile_shapes_after_says_what_it_expects():
    with pytest.raises(InvalidArgument, match=r"compile_shapes_after=-1: expected a finite number of seconds "
                                              r">= 0 \(0: never\)"):
        no.settings(compile_shapes_after=-1)


def test_symbolic_labels_stand_for_the_eager_runs_numbers():
    eager = [("fp32 sum over 130 (any order) [rms_norm:85]", "range"),
             ("fp32 mul by 0.00390625 [rms_norm:85]", "range")]
    compare.check_sites([("fp32 sum over <n> (any order)", "range"), ("fp32 mul by <n>", "range")], eager)
    for wrong in ([("fp32 sum over <n> (tree order)", "range"), ("fp32 mul by <n>", "range")],
                  [("fp32 sum over <n> (any order)", "domain"), ("fp32 mul by <n>", "range")],
                  [("fp32 sum over <n> (any order)", "range")]):
        with pytest.raises(RuntimeError, match="the traced program has sites"):
            compare.check_sites(wrong, eager)
    with pytest.raises(RuntimeError):
        compare.check_sites([("fp32 sum over <n> (any order)", "range")], [("fp32 sum over n (any order)", "range")])
