"""The compiled verdict (numoracle.verdict.compiled): the same verdicts as the eager
calculus, compiled once per signature, eager whenever it cannot compile.

The tests that compile graphs of their own (the quantizer, cross_entropy, a program
with a graph break) are in the slow tier, and so are those that compile rms_norm's verdict
again to follow one behaviour (the auto policy, holding, regions on demand and the switch
to one function, every fallback after a failed or wrong compile): each compile is seconds
of Dynamo tracing that no cache shares, since every plan gets a code object of its own.
On a fresh machine every distinct graph is also a cold C++ compile (minutes on two
loaded cores), so the default tier compiles one graph: the parity of compiled and eager
verdicts of one rms_norm signature (check_modes) on three fault cases, which Inductor's
graph cache then shares; with every test that compiles nothing.  The cast functions, the
traced fingerprint and the flags-only verdict's regions are slow."""
import math

import pytest
import torch

import numoracle as no
from numoracle import formats as F
from numoracle import operators
from numoracle.check import check, check_modes
from numoracle.selftest.emulator import Plan, emulate
from numoracle.errors import InvalidArgument, TensorsChanged
from numoracle.operators.ops_vllm import torch_group_quant
from numoracle.verdict import compiled
from numoracle.verdict.compiled import compare, graphs, holding, inductor
from numoracle.verdict.compiled import plan as plan_module
from numoracle.verdict.compiled.plan import REGIONS_WANTED

EAGER = no.settings(compile="never")
ALWAYS = no.settings(compile="always")


@pytest.fixture
def fresh():
    """No plan before the test, none left after it."""
    compiled.clear()
    yield
    compiled.clear()


def _case(name="rms_norm", rows=6, cols=256, faults=(), seed=5):
    op = operators.get(name)
    inputs, params = op.example(seed, dtype=torch.bfloat16, family="calibration", rows=rows, cols=cols)
    outs = emulate(op.reference, inputs, params, Plan(seed=1, faults=faults))
    return op, inputs, params, outs


def _only_plan():
    plans = compiled.plans()
    assert len(plans) == 1
    return plans[0]


def _eager_and_compiled(name="rms_norm", faults=(), judge=check, settings=ALWAYS):
    """(op, inputs, params, outs, eager verdict, compiled verdict) of one case: the
    first call under ``settings`` learns the sites, the second is compiled."""
    op, inputs, params, outs = _case(name, faults=faults)
    ve = judge(op.reference, outs, inputs, params, settings=EAGER)
    judge(op.reference, outs, inputs, params, settings=settings)
    vc = judge(op.reference, outs, inputs, params, settings=settings)
    return op, inputs, params, outs, ve, vc


def _assert_same(ve, vc):
    for m in ve:
        a, b = ve[m], vc[m]
        assert (a.status, a.confirmation) == (b.status, b.confirmation)
        assert a.certificate.to_dict() == b.certificate.to_dict()
        for oa, ob in zip(a.outputs, b.outputs):
            for f in ("rejected", "uncertified", "special", "fixed_rejected", "kernel", "qlo", "qhi"):
                assert torch.equal(getattr(oa, f), getattr(ob, f)), (m, oa.name, f)
            # the centres and radii are float64 evaluations in different orders
            scale = oa.centre.abs() + (oa.hi - oa.lo).abs()
            for f in ("centre", "lo", "hi"):
                a_, b_ = getattr(oa, f), getattr(ob, f)
                # an exact infinity is the same value in both (inf - inf would be NaN)
                d = torch.where(a_ == b_, 0.0, (a_ - b_).abs())
                assert bool(((d == 0) | (d <= 2.0 ** -45 * scale)).all()), (m, oa.name, f, float(d.max()))


def _judged_eagerly_and_compiled(program, outs, inputs):
    """The eager verdicts (both modes) of one call, after checking that the same call compiled
    (learnt on a first call, compiled on the second) gives the same ones."""
    ve = check_modes(program, outs, inputs, settings=EAGER)
    check_modes(program, outs, inputs, settings=ALWAYS)
    vc = check_modes(program, outs, inputs, settings=ALWAYS)
    plan = _only_plan()
    assert plan.fn is not None and plan.failed is None
    _assert_same(ve, vc)
    return ve


@pytest.mark.parametrize("faults", [(), ("truncating_store",), ("ulp_off_store",)])
def test_compiled_verdicts_equal_eager_ones(fresh, faults):
    """One compile (the first fault case) serves the others: same program, shapes and params."""
    op, inputs, params, outs, ve, vc = _eager_and_compiled(faults=faults, judge=check_modes)
    plan = _only_plan()
    assert plan.fn is not None and plan.failed is None
    # traced whole, with no graph break (what CUDA graphs and one fused verdict need): a
    # getattr probe on a tracked value once split every plan at the outputs' decoding
    assert plan.whole, plan.split
    _assert_same(ve, vc)
    assert ve["statistical"].status == ("accept" if not faults else "reject")
    assert vc["statistical"].explain() == ve["statistical"].explain()
    assert vc["fixed"].to_dict() == ve["fixed"].to_dict()


def test_a_program_with_an_infinite_constant_compiles_to_its_eager_verdict(fresh):
    """A mask's -inf makes every addition check for exact infinities (``Context.infinities``):
    the traced verdict carries those checks and decides as the eager one."""
    from numoracle.operators.references import masked_attention
    from numoracle.selftest.programs import make_inputs
    inputs = make_inputs("masked_attention", "bf16", 6, 40, "normal", 0, 3)
    outs = emulate(masked_attention, inputs, {}, Plan(seed=1))
    ve = _judged_eagerly_and_compiled(masked_attention, outs, inputs)
    assert ve["fixed"].status == "accept" and not bool(ve["fixed"].outputs[0].uncertified.any())


@no.reference
def _masked_logits(x, keep):
    return no.where(keep, x.to(F.fp32), float("-inf")).to(x.format)


def test_an_output_that_is_exactly_infinite_compiles_to_its_eager_verdict(fresh):
    g = torch.Generator().manual_seed(4)
    x = torch.randn(8, 64, generator=g).to(torch.bfloat16)
    keep = torch.rand(8, 64, generator=g) < 0.3
    y = torch.where(keep, x, torch.tensor(-math.inf, dtype=torch.bfloat16))
    for outs, status in ((y, "accept"), (torch.where(keep, x, torch.zeros_like(x)), "reject")):
        compiled.clear()
        ve = _judged_eagerly_and_compiled(_masked_logits, outs, (x, keep))
        assert ve["fixed"].status == status, ve["fixed"].explain()


@no.reference
def _silu_by_exp(a, b):
    af = a.to(F.fp32)
    return (af / (1.0 + no.exp(-af)) * b.to(F.fp32)).to(a.format)


@pytest.mark.parametrize("scale", [60.0, 1.0])
def test_an_overflowing_exp_compiles_to_its_eager_verdict(fresh, scale):
    """exp past its overflow is an exact +inf (``Function.overflow_above``), which the traced
    verdict carries for every exp, overflowing or not (scale 1: none does)."""
    g = torch.Generator().manual_seed(3)
    a = (torch.randn(8, 64, generator=g) * scale).to(torch.bfloat16)
    b = torch.randn(8, 64, generator=g).to(torch.bfloat16)
    af = a.float()
    y = (af / (1.0 + torch.exp(-af)) * b.float()).to(torch.bfloat16)
    ve = _judged_eagerly_and_compiled(_silu_by_exp, y, (a, b))
    assert ve["fixed"].status == "accept", ve["fixed"].explain()
    assert scale == 1.0 or bool((-a.double() >= 88.75).any())


@no.reference
def _static_fp8(x, scale):
    return no.clamp(x.to(F.fp32) / scale, -448.0, 448.0).to(F.e4m3fn)


def test_a_case_the_traced_calculus_leaves_uncertified_is_judged_eagerly(fresh, monkeypatch):
    """A quotient certainly past fp32's range is +inf exactly in an eager verdict; the traced
    calculus takes the general path, where such an element is uncertified, so a compiled call
    whose flags say uncertified is judged eagerly, and gives the eager verdict."""
    import sys
    C = sys.modules["numoracle.check"]          # (numoracle.check, the attribute, is the function)
    g = torch.Generator().manual_seed(5)
    x = torch.randn(8, 64, generator=g).to(torch.bfloat16)
    scale = torch.tensor([0.01], dtype=torch.float32)

    def quantized(x):
        return torch.clamp(x.float() / scale, -448.0, 448.0).to(torch.float8_e4m3fn)
    big = x.clone()
    big[2, 3], big[5, 0] = 3.3e38, -3.3e38                    # x / 0.01 is past fp32's range
    for _ in range(2):
        check_modes(_static_fp8, quantized(x), (x, scale), settings=ALWAYS)
    assert _only_plan().fn is not None
    evaluated = []
    real = C.evaluate
    monkeypatch.setattr(C, "evaluate", lambda *a, **k: evaluated.append(1) or real(*a, **k))
    v = check_modes(_static_fp8, quantized(x), (x, scale), settings=ALWAYS)
    assert v["fixed"].status == "accept" and not evaluated
    v = check_modes(_static_fp8, quantized(big), (big, scale), settings=ALWAYS)
    assert v["fixed"].status == "accept" and evaluated, v["fixed"].explain()
    assert not bool(v["fixed"].outputs[0].uncertified.any())
    wrong = quantized(big)
    wrong[2, 3] = 416.0
    v = check_modes(_static_fp8, wrong, (big, scale), settings=ALWAYS)
    assert v["fixed"].outputs[0].rejected[2, 3] and int(v["fixed"].outputs[0].rejected.sum()) == 1
    assert _only_plan().failed is None


@no.reference(outputs=("y",))
def _linear(a, b, c):
    return no.maximum(no.matmul(a, b, acc=F.fp32) + c, 0.0).to(F.bf16)


@no.reference(outputs=("y",))
def _linear_tf32(a, b, c):
    return no.maximum(no.matmul(a, b, acc=F.fp32, input_precision="tf32") + c, 0.0)


@no.reference(outputs=("y",))
def _linear_x3(a, b, c):
    return no.maximum(no.matmul(a * 0.7, b, acc=F.fp32, input_precision="tf32x3") + c, 0.0)


@pytest.mark.parametrize("program,dtype,K", [(_linear, torch.bfloat16, 1), (_linear, torch.bfloat16, 3),
                                             (_linear, torch.bfloat16, 40), (_linear_tf32, torch.float32, 3),
                                             (_linear_tf32, torch.float32, 40), (_linear_x3, torch.float32, 3),
                                             (_linear_x3, torch.float32, 40)],
                         ids=["bf16-1", "bf16-3", "bf16-40", "tf32-3", "tf32-40", "tf32x3-3", "tf32x3-40"])
def test_a_tensor_core_dot_compiles_to_its_eager_verdict(fresh, program, dtype, K):
    """The GPU profile's tensor-core bound and folded add, with bf16 operands or fp32 ones read as
    TF32 (known operands truncated) or split into three TF32 dots (a computed operand), traced
    with K a symbol, decide as the eager verdict on the emulated instruction's outputs, which
    are accepted (docs/design.md §4.4)."""
    g = torch.Generator().manual_seed(K)
    a = (torch.randn(24, K, generator=g) * 4).to(dtype)
    b = torch.randn(K, 16, generator=g).to(dtype)
    c = (torch.randn(16, generator=g) * 8).float()
    outs = emulate(program, (a, b, c), {}, Plan(seed=K, dot="tensor_core_folded"))
    kw = {"backend": "gpu", "profile": "h200"}
    ve = check_modes(program, outs, (a, b, c), settings=EAGER, **kw)
    check_modes(program, outs, (a, b, c), settings=ALWAYS, **kw)
    vc = check_modes(program, outs, (a, b, c), settings=ALWAYS, **kw)
    plan = _only_plan()
    assert plan.fn is not None and plan.failed is None
    _assert_same(ve, vc)
    assert ve["fixed"].status == "accept" and ve["statistical"].status == "accept"


@pytest.mark.slow
@pytest.mark.parametrize("fmt", (F.bf16, F.fp16), ids=str)
def test_compiled_16_bit_rounding_is_exact(fmt):
    """Inductor keeps a fused bf16 cast in fp32 unless emulate_precision_casts is set, and its
    C++ must not reassociate ``_rne_by_magic``'s (x + S) - S: compiled with the verdict's
    options, at static and symbolic sizes, the rounding equals the grid path on every value,
    midpoint and float32 neighbour of the format (``_double_rounding_hazards``), signs of
    zero included."""
    import test_formats as TF
    x = TF._double_rounding_hazards(fmt)
    want = TF._general_rne(x, fmt)
    for dynamic in (False, True):
        f = torch.compile(lambda t: F._rne_fast(t, fmt), dynamic=dynamic, options=inductor.COMPILE_OPTIONS)
        assert TF._same_values(f(x), want).all(), dynamic
        assert TF._same_values(f(x[3:]), want[3:]).all(), dynamic


@pytest.mark.slow
def test_compiled_fp8_and_directed_roundings_equal_the_grid_path():
    """The paths for fp8 and fp4 (saturating, as the quantizer rounds; ``_magic`` compiled)
    and for rounding float32 up and down, compiled as a verdict is, against the grid path run
    eagerly."""
    g = torch.Generator().manual_seed(8)
    x = torch.randn(4096, generator=g, dtype=torch.float64) * torch.exp2(
        torch.randint(-150, 130, (4096,), generator=g).to(torch.float64))
    x = torch.cat([x, torch.tensor([464.0, -464.0, 448.0 + 2.0 ** -40, 61440.0, 0.0, -0.0, math.inf, math.nan],
                                   dtype=torch.float64)])
    x = torch.cat([x, x * 2.0 ** -120, x * 2.0 ** 120, torch.tensor([1e300, -1e300, 2.0 ** 128], dtype=torch.float64)])
    rules = [(F.e4m3fn, "rne", "saturate"), (F.e5m2, "rne", "saturate"), (F.e2m1, "rne", "saturate"),
             (F.e4m3fnuz, "rne", "inf"), (F.e5m2, "rne", "inf"), (F.fp16, "rne", "saturate"),
             (F.bf16, "rne", "saturate"), (F.fp32, "rne", "saturate"),
             (F.fp32, "up", "inf"), (F.fp32, "down", "inf")]
    for dynamic in (False, True):
        f = torch.compile(lambda t: [F.round(t, fmt, mode, ov) for fmt, mode, ov in rules],
                          dynamic=dynamic, options=inductor.COMPILE_OPTIONS)
        got = f(x)
        for (fmt, mode, ov), a in zip(rules, got):
            b = F._round_rest(x, fmt, mode, ov, "grid")
            same = ((a == b) & (torch.signbit(a) == torch.signbit(b))) | (a.isnan() & b.isnan())
            assert same.all(), (fmt, mode, ov, dynamic, x[~same][:4], a[~same][:4], b[~same][:4])


def test_auto_keeps_small_signatures_eager(fresh):
    op, inputs, params, outs = _case()
    auto = no.settings(compile="auto")
    for _ in range(auto.eager_calls + 2):
        check(op.reference, outs, inputs, params, settings=auto)
    plan = _only_plan()
    assert plan.judged < auto.compile_min_elements and not plan.ready and plan.fn is None


@pytest.mark.slow
def test_auto_compiles_a_signature_once_it_is_large_enough_and_repeated(fresh):
    """The auto policy's two numbers are settings: a signature of at least
    compile_min_elements elements (inputs and outputs) compiles after eager_calls eager verdicts."""
    op, inputs, params, outs = _case()
    auto = no.settings(compile="auto", compile_min_elements=sum(t.numel() for t in list(inputs) + list(outs)),
                       eager_calls=1)
    check(op.reference, outs, inputs, params, settings=auto)
    plan = _only_plan()
    assert not plan.ready
    check(op.reference, outs, inputs, params, settings=auto)
    assert plan.ready and plan.fn is not None


def test_never_makes_no_plan_and_a_bad_policy_says_what_is_expected(fresh):
    op, inputs, params, outs = _case()
    check(op.reference, outs, inputs, params, settings=EAGER)
    assert not compiled.plans()
    with pytest.raises(InvalidArgument, match="compile='sometimes': expected one of"):
        no.settings(compile="sometimes")


def test_a_failed_compile_is_judged_eagerly_with_one_warning(fresh, monkeypatch):
    op, inputs, params, outs = _case(faults=("truncating_store",))
    ve = check(op.reference, outs, inputs, params, settings=EAGER)

    def broken(self, full):
        def fn(*tensors):
            raise RuntimeError("no compiler here")
        return fn
    monkeypatch.setattr(plan_module.Plan, "_core", broken)
    check(op.reference, outs, inputs, params, settings=ALWAYS)
    with pytest.warns(RuntimeWarning, match="judging rms_norm eagerly.*no compiler here"):
        v = check(op.reference, outs, inputs, params, settings=ALWAYS)
    assert v.status == ve.status == "reject" and v.n_rejected == ve.n_rejected
    assert _only_plan().failed.startswith("RuntimeError")
    check(op.reference, outs, inputs, params, settings=ALWAYS)      # no second warning: the plan stays eager


@pytest.mark.slow
def test_non_finite_inputs_under_a_compiled_signature(fresh):
    """Under nonfinite='uncertified' a compiled verdict is traced with sanitised inputs: a
    non-finite input makes what depends on it uncertified, compiled as eagerly; under 'error'
    (another signature, traced unsanitised) it raises."""
    op, inputs, params, outs = _case()
    check(op.reference, outs, inputs, params, nonfinite="uncertified", settings=ALWAYS)
    check(op.reference, outs, inputs, params, nonfinite="uncertified", settings=ALWAYS)
    x = inputs[0].clone()
    x[1, 3] = math.inf
    bad = (x,) + tuple(inputs[1:])
    v = check(op.reference, outs, bad, params, nonfinite="uncertified", settings=ALWAYS)
    assert _only_plan().sanitise and _only_plan().fn is not None
    assert v.certificate.inputs.startswith("non-finite inputs")
    assert v.status == "uncertified" and bool(v.outputs[0].uncertified[1].all())
    assert not bool(v.outputs[0].uncertified[0].any())
    check(op.reference, outs, inputs, params, settings=ALWAYS)
    check(op.reference, outs, inputs, params, settings=ALWAYS)
    with pytest.raises(InvalidArgument, match="non-finite"):
        check(op.reference, outs, bad, params, settings=ALWAYS)


def _row_whose_squares_sum_to(n: int, fraction: float) -> torch.Tensor:
    """n bf16 values whose squares add up to ``fraction`` of fp32's overflow threshold (within
    1e-9 of it): most of them equal, the last four filling the gap, each rounded down.  Just
    below the threshold, the sum's rounding error bound reaches past it: the kernel's sum may
    overflow or not, and the row is uncertified (a row of 3e38 would be +inf, and judged)."""
    thr = float(torch.finfo(torch.float32).max) * (1 + 2.0 ** -25)

    def down(v):
        t = torch.tensor(v, dtype=torch.float64).to(torch.bfloat16)
        return float(torch.nextafter(t, torch.zeros_like(t)) if float(t) > v else t)
    row = [down(math.sqrt(thr / n) * 0.99)] * n
    gap = thr * fraction - sum(v * v for v in row[:-4])
    for k in range(4, 0, -1):
        row[n - k] = down(math.sqrt(gap))
        gap -= row[n - k] ** 2
    assert abs(sum(v * v for v in row) / (thr * fraction) - 1) < 1e-9
    return torch.tensor(row, dtype=torch.float64).to(torch.bfloat16)


@pytest.mark.slow
def test_an_uncertified_compiled_verdict_names_the_failing_site(fresh):
    """The compiled graph leaves the sites' statistics out; the certificate read from a
    compiled verdict (an eager run on the same inputs) is the eager one, failing site included."""
    op, inputs, params, outs = _case()
    x = inputs[0].clone()
    x[2] = _row_whose_squares_sum_to(x.shape[1], 1 - 6e-6)
    big = (x,) + tuple(inputs[1:])
    big_outs = emulate(op.reference, big, params, Plan(seed=1))
    ve = check_modes(op.reference, big_outs, big, params, settings=EAGER)
    check_modes(op.reference, outs, inputs, params, settings=ALWAYS)               # eager: learns the sites
    vc = check_modes(op.reference, big_outs, big, params, settings=ALWAYS)         # compiled, same signature
    assert _only_plan().fn is not None
    assert vc["statistical"].status == ve["statistical"].status == "uncertified"
    failing = [s.label for s in vc["statistical"].certificate.failing]
    assert failing and failing == [s.label for s in ve["statistical"].certificate.failing]
    assert any("sum" in label for label in failing)
    _assert_same(ve, vc)


@pytest.mark.slow
@pytest.mark.parametrize("scale_factor", [1.0, 1.01])
def test_compiled_quantizer_verdicts_equal_eager_ones(fresh, scale_factor):
    """The group quantizer's two-step judgement runs compiled too (its explanation details
    come from an eager run): its flags alone, then, read again and again, its tensors."""
    op = operators.get("per_token_group_quant_fp8")
    inputs, params = op.example(5, dtype=torch.bfloat16, family="calibration", rows=4, cols=512)
    q, s = torch_group_quant(inputs[0], **params)
    outs = (q, s * scale_factor)
    ve = check_modes(op.reference, outs, inputs, params, settings=EAGER)
    check_modes(op.reference, outs, inputs, params, settings=ALWAYS)
    plan = None
    for _ in range(REGIONS_WANTED + 2):
        vc = check_modes(op.reference, outs, inputs, params, settings=ALWAYS)
        plan = _only_plan()
        assert plan.fn is not None and plan.failed is None and plan.has_quantizer
        _assert_same(ve, vc)
        assert vc["statistical"].explain() == ve["statistical"].explain()
        assert vc["statistical"].assumptions == ve["statistical"].assumptions
    assert plan.full                             # the regions function became the verdict
    assert ve["statistical"].status == ("accept" if scale_factor == 1.0 else "reject")


@pytest.mark.slow
def test_masks_of_a_compiled_verdict_are_computed_when_asked_for(fresh):
    """The compiled function returns flags, not rejected masks: an accepted verdict's
    masks are all False without a pass over the outputs, a rejected one's are the eager ones."""
    op, inputs, params, outs, ve, vc = _eager_and_compiled(faults=("ulp_off_store",))
    o = vc.outputs[0]
    assert "rejected" not in o._cache                  # not computed yet
    assert vc.status == "reject"
    assert torch.equal(o.rejected, ve.outputs[0].rejected) and bool(o.rejected.any())
    op, inputs, params, outs = _case()
    va = check(op.reference, outs, inputs, params, settings=ALWAYS)
    assert va.status == "accept" and not bool(va.outputs[0].rejected.any())
    assert not bool(va.outputs[0].uncertified.any())


@pytest.mark.slow
def test_a_compiled_verdict_computes_no_region_until_one_is_needed(fresh):
    """The compiled function returns the flags alone; an accepted verdict's status,
    counts of zero and certificate need no region."""
    op, inputs, params, outs = _case()
    check(op.reference, outs, inputs, params, settings=ALWAYS)
    v = check(op.reference, outs, inputs, params, settings=ALWAYS)
    plan = _only_plan()
    assert v.status == "accept" and plan.region_calls == 0
    assert v.n_rejected == 0 and plan.region_calls == 0          # masks known empty from the flags
    assert v.n_elements == sum(t.numel() for t in outs) and plan.region_calls == 0
    v.explain()                                                   # the closest element needs the region
    assert plan.region_calls == 1


@pytest.mark.slow
def test_regions_describe_the_call_even_when_the_caller_reuses_its_buffers(fresh):
    """A rejecting verdict keeps copies of what it judged: overwriting the inputs and the
    kernel's output afterwards changes neither its masks nor its explanation."""
    op, inputs, params, outs, ve, vc = _eager_and_compiled(faults=("ulp_off_store",))
    want = ve.explain()
    for t in list(inputs) + [outs[0] if isinstance(outs, tuple) else outs]:
        if isinstance(t, torch.Tensor) and t.is_floating_point():
            t.mul_(-3)
    assert vc.status == "reject"
    assert torch.equal(vc.outputs[0].rejected, ve.outputs[0].rejected)
    assert torch.equal(vc.outputs[0].kernel, ve.outputs[0].kernel)
    assert vc.explain() == want


@pytest.mark.slow
def test_an_accepted_verdict_holds_the_callers_tensors_and_says_when_they_changed(fresh):
    """No copy for a plain accept: its regions, kernel values and certificate come from the
    caller's tensors, equal to the eager verdict's while they are unchanged; overwritten, each
    of them raises TensorsChanged, naming which tensor changed, instead of describing other data."""
    op, inputs, params, outs, ve, vc = _eager_and_compiled(judge=check_modes)
    plan = _only_plan()
    assert plan.hold and vc["statistical"].status == "accept"
    _assert_same(ve, vc)
    op, inputs, params, outs = _case()
    v = check_modes(op.reference, outs, inputs, params, settings=ALWAYS)["fixed"]
    assert v.status == "accept" and plan.calls == 3
    outs[0].view(torch.int16)[2, 7] += 1             # one bit pattern of the kernel's output y
    for read in (lambda: v.explain(), lambda: v.outputs[0].kernel, lambda: v.certificate.to_dict()):
        with pytest.raises(TensorsChanged, match=r"rms_norm's accepted verdict.*\(tensor 2 was overwritten; "
                                                 r"inputs then outputs"):
            read()
    inputs[0].view(torch.int16)[0, 0] += 1
    with pytest.raises(TensorsChanged, match=r"\(tensors 0, 2 were overwritten; "):
        v.explain()


@pytest.mark.slow
def test_without_holding_an_accepted_verdict_keeps_copies(fresh):
    copying = no.settings(compile="always", hold_accepted=False)
    op, inputs, params, outs, ve, vc = _eager_and_compiled(settings=copying)
    want = ve.explain()
    assert not _only_plan().hold and vc.status == "accept"
    outs[0].mul_(-3)
    assert vc.explain() == want


def test_fingerprints_change_with_any_one_value_or_a_swap():
    """Every single-element change of every bit pattern-preserving dtype, and a swap of two
    neighbours, changes a tensor's fingerprint; the traced and the eager ones agree."""
    base = {torch.bfloat16: torch.randn(3, 64).to(torch.bfloat16),
            torch.float8_e4m3fn: torch.randn(3, 64).to(torch.float8_e4m3fn),
            torch.float32: torch.randn(3, 64).t(),                      # strided
            torch.int64: torch.arange(192).reshape(3, 64),
            torch.bool: torch.rand(3, 64) > 0.5}
    for dtype, t in base.items():
        want = int(holding.fingerprint(t))
        bits = holding.as_bits(t)
        for i in range(bits.numel()):
            u = bits.clone()
            flat = u.view(-1) if u.is_contiguous() else u.t().reshape(-1)
            if dtype == torch.bool:
                flat[i] ^= 1
            else:
                flat[i] += 1
            if not u.is_contiguous():
                u = flat.reshape(u.t().shape).t()
            assert int(holding.fingerprint(u.view(dtype))) != want, (dtype, i)
        u = bits.clone()
        r = u.reshape(-1) if u.is_contiguous() else None
        if r is not None and not torch.equal(r[0], r[1]):
            r[0], r[1] = r[1].clone(), r[0].clone()
            assert int(holding.fingerprint(u.view(dtype))) != want, dtype


def test_a_bf16_cpu_fingerprint_reads_every_bit_pattern_as_its_int16_view():
    """bf16 CPU tensors are read through float32's bits (vector code in Inductor's C++): every
    one of the 65,536 patterns, NaNs and both zeros included, gives its own int16 bits, so
    the fingerprint is the one of the int16 view, eager and traced."""
    patterns = torch.arange(-2 ** 15, 2 ** 15, dtype=torch.int32).to(torch.int16)
    t = patterns.view(torch.bfloat16).reshape(256, 256)
    assert torch.equal(holding._bits(t), patterns.to(torch.int64).reshape(256, 256))
    rows = holding._weighed(patterns.to(torch.int64).reshape(256, 256)).reshape(-1)
    assert int(holding.fingerprint(t)) == int(holding._weighed(holding._fold16(rows)))


def test_fingerprints_of_long_axes_change_with_any_one_value(monkeypatch):
    """Past ``_LINEAR_UP_TO`` positions an axis weighs them by a cycle: a change of any one
    value, of a 16-bit and of a folded 32-bit tensor, still changes the fingerprint."""
    monkeypatch.setattr(holding, "_LINEAR_UP_TO", 8)
    for t in (torch.randn(3, 70).to(torch.bfloat16), torch.randn(2, 65)):
        want = int(holding.fingerprint(t))
        bits = holding.as_bits(t)
        for i in range(bits.numel()):
            u = bits.clone()
            u.view(-1)[i] += 1
            assert int(holding.fingerprint(u.view(t.dtype))) != want, (t.dtype, i)


@pytest.mark.slow
def test_the_traced_fingerprint_equals_the_eager_one():
    """Static and symbolic sizes (where a wrapping weight made them differ: Inductor's C++
    leaves signed overflow undefined), 16-, 32- and 64-bit elements."""
    x = torch.randn(3, 64).to(torch.bfloat16)
    assert int(torch.compile(holding.fingerprint, fullgraph=True)(x)) == int(holding.fingerprint(x))
    traced = torch.compile(holding.fingerprint, fullgraph=True, dynamic=True)
    for shape in ((50,), (60, 4000), (63, 4093), (64, 17)):
        for t in (torch.randn(shape).to(torch.bfloat16), torch.randn(shape), torch.randn(shape, dtype=torch.float64)):
            assert int(traced(t)) == int(holding.fingerprint(t)), (shape, t.dtype)
    # every bf16 bit pattern, NaNs included, as numoracle compiles (vector code, float tiling)
    t = torch.arange(-2 ** 15, 2 ** 15, dtype=torch.int32).to(torch.int16).view(torch.bfloat16).reshape(256, 256)
    torch._dynamo.reset()
    options = dict(inductor.COMPILE_OPTIONS, **inductor.vector_code_options(), **inductor.float_tiling_options())
    compiled = torch.compile(holding.fingerprint, fullgraph=True, options=options)
    with inductor.float_tiling(bool(inductor.float_tiling_options())), inductor.vector_code(True):
        assert int(compiled(t)) == int(holding.fingerprint(t))
        assert int(compiled(t.flip(0))) == int(holding.fingerprint(t.flip(0))) != int(holding.fingerprint(t))


@pytest.mark.slow
def test_regions_compile_once_needed_repeatedly_and_equal_eager_ones(fresh):
    """The first verdict needing its regions computes them eagerly (an explained reject
    costs no compile); from the next one on ('always') they come compiled, equal."""
    op, inputs, params, outs, ve, first = _eager_and_compiled(faults=("truncating_store",), judge=check_modes)
    plan = _only_plan()
    _assert_same(ve, first)
    assert plan.region_calls == 1 and plan.regions_fn is None
    second = check_modes(op.reference, outs, inputs, params, settings=ALWAYS)
    _assert_same(ve, second)
    assert plan.region_calls == 2 and plan.regions_fn is not None and plan.region_failed is None


@pytest.mark.slow
def test_a_failed_regions_compile_falls_back_to_eager_regions(fresh, monkeypatch):
    op, inputs, params, outs = _case(faults=("truncating_store",))
    ve = check(op.reference, outs, inputs, params, settings=EAGER)
    check(op.reference, outs, inputs, params, settings=ALWAYS)
    check(op.reference, outs, inputs, params, settings=ALWAYS).outputs[0].rejected       # first need: eager
    real = plan_module.Plan._core

    def broken(self, full):
        if not full:
            return real(self, full)

        def fn(*tensors):
            raise RuntimeError("no compiler for regions")
        return fn
    monkeypatch.setattr(plan_module.Plan, "_core", broken)
    with pytest.warns(RuntimeWarning, match="regions eagerly.*no compiler for regions"):
        v = check(op.reference, outs, inputs, params, settings=ALWAYS)   # a confirmed reject reads its regions
    assert v.confirmation == ve.confirmation == "confirmed"
    assert torch.equal(v.outputs[0].rejected, ve.outputs[0].rejected)
    assert _only_plan().region_failed.startswith("RuntimeError")


@pytest.mark.slow
def test_regions_of_an_accept_whose_flags_disagree_with_it_raise(fresh, monkeypatch):
    """An accepted verdict's regions, read later, that would contradict it are a bug, said
    loudly (the verdict was given already)."""
    op, inputs, params, outs = _case()
    check(op.reference, outs, inputs, params, settings=ALWAYS)
    v = check(op.reference, outs, inputs, params, settings=ALWAYS)
    assert v.status == "accept" and _only_plan().compiled_calls == 1
    real = plan_module.Plan._function

    def lying(self, full):
        fn = real(self, full)

        def g(*tensors):
            sites, flags, outs_ = fn(*tensors)
            return sites, ~flags, outs_
        return g
    monkeypatch.setattr(plan_module.Plan, "_function", lying)
    with pytest.raises(compare.Mismatch, match="regions give the flags .* where its verdict had"):
        v.outputs[0].centre


@pytest.mark.slow
def test_a_compiled_reject_that_its_regions_do_not_give_is_judged_eagerly(fresh, monkeypatch):
    """A flags function right on its first call (compared with eager code) and wrong later:
    a verdict that is not a plain accept reads its regions before it is given, finds that they
    give other flags, and is judged eagerly; the signature stays eager, with a warning.  (What
    torch 2.11's Inductor did to rope's verdict: radii of bf16 products that were too small,
    unseen by a first call whose values were near the centres.)"""
    real = plan_module.Plan._core

    def wrong_after_first_call(self, full):
        fn = real(self, full)
        if full:
            return fn
        calls = []

        def wrong(*tensors):
            sites, flags = fn(*tensors)
            calls.append(1)
            if len(calls) > 1:
                flags = flags.clone()
                flags[-3] = 1           # the last output (rstd) rejected in the statistical mode
            return sites, flags
        return wrong
    monkeypatch.setattr(plan_module.Plan, "_core", wrong_after_first_call)
    op, inputs, params, outs = _case()
    for _ in range(2):
        assert check(op.reference, outs, inputs, params, settings=ALWAYS).status == "accept"
    plan = _only_plan()
    assert plan.compiled_calls == 1 and plan.failed is None
    with pytest.warns(RuntimeWarning, match="judging rms_norm eagerly; compiling its verdict failed .Mismatch: "
                                            "numoracle: rms_norm's regions give the flags"):
        v = check(op.reference, outs, inputs, params, settings=ALWAYS)
    assert v.status == "accept" and plan.failed is not None and not plan.ready
    assert check(op.reference, outs, inputs, params, settings=ALWAYS).status == "accept"
    assert plan.compiled_calls == 2


@pytest.mark.slow
def test_a_graph_that_cannot_be_captured_leaves_the_compiled_verdict_running(fresh, monkeypatch):
    def refuse(fn, tensors):
        raise RuntimeError("operation not permitted when stream is capturing")
    monkeypatch.setattr(graphs, "wanted", lambda settings, device, elements: True)
    monkeypatch.setattr(graphs, "Captured", refuse)
    op, inputs, params, outs = _case(faults=("ulp_off_store",))
    ve = check(op.reference, outs, inputs, params, settings=EAGER)
    check(op.reference, outs, inputs, params, settings=ALWAYS)
    with pytest.warns(RuntimeWarning, match="runs without a CUDA graph; capturing it failed .RuntimeError: "
                                            "operation not permitted"):
        vc = check(op.reference, outs, inputs, params, settings=ALWAYS)
    plan = _only_plan()
    assert plan.fn is not None and plan.failed is None and plan.graphs is False
    assert vc.status == ve.status == "reject"


def _flip_rejected_flags(real):
    """A miscompiled flags function: every flag but the last (any non-finite input) wrong."""
    def miscompiled(self, full):
        fn = real(self, full)

        def wrong(*tensors):
            sites, flags, *regions = fn(*tensors)
            head = ~flags[:-1] if flags.dtype == torch.bool else 1 - flags[:-1]
            return (sites, torch.cat([head, flags[-1:]]), *regions)
        return wrong
    return miscompiled


@pytest.mark.slow
def test_a_miscompiled_verdict_is_caught_on_its_first_call_and_judged_eagerly(fresh, monkeypatch):
    """The first compiled call is compared with the same tensor code run eagerly: a compiler
    that gets a flag wrong leaves the signature eager, with a warning."""
    monkeypatch.setattr(plan_module.Plan, "_core", _flip_rejected_flags(plan_module.Plan._core))
    op, inputs, params, outs = _case(faults=("ulp_off_store",))
    ve = check(op.reference, outs, inputs, params, settings=EAGER)
    check(op.reference, outs, inputs, params, settings=ALWAYS)
    with pytest.warns(RuntimeWarning, match="compiling its verdict failed .RuntimeError: the compiled flags"):
        vc = check(op.reference, outs, inputs, params, settings=ALWAYS)
    plan = _only_plan()
    assert plan.failed is not None and "flags" in plan.failed
    assert vc.status == ve.status == "reject"
    assert torch.equal(vc.outputs[0].rejected, ve.outputs[0].rejected)


def test_copies_into_buffers_of_mixed_dtypes_pair_by_pair():
    # the captured graph's argument copy groups its tensors by dtype: each must land in its own buffer
    srcs = [torch.randn(3, 5).to(torch.bfloat16), torch.randn(4), torch.arange(6), torch.randn(2, 2).to(torch.bfloat16),
            torch.randn(4, 3).to(torch.float8_e4m3fn), torch.randn(3, 4) > 0, torch.randn(5, 4).t(),
            torch.randn(6).to(torch.float16)]
    dsts = [torch.empty_like(t) for t in srcs]
    holding.copy_into(dsts, srcs)

    def same(a, b):      # fp8 has no equality of its own: compare bytes
        return a.dtype == b.dtype and (torch.equal(a.view(torch.uint8), b.view(torch.uint8))
                                       if a.element_size() == 1 else torch.equal(a, b))
    assert all(same(d, s) for d, s in zip(dsts, srcs))
    kept = holding.copies(srcs)
    assert all(same(k, s) and k.data_ptr() != s.data_ptr() for k, s in zip(kept, srcs))


def test_cuda_graphs_only_for_small_cuda_signatures():
    auto = no.settings(cuda_graphs="auto")
    assert graphs.wanted(auto, "cuda", auto.cuda_graph_max_elements)
    assert not graphs.wanted(auto, "cuda", auto.cuda_graph_max_elements + 1)
    assert not graphs.wanted(auto, "cpu", 10)
    always = no.settings(cuda_graphs="always")
    assert graphs.wanted(always, "cuda", 10 ** 9) and not graphs.wanted(always, "cpu", 10)
    assert not graphs.wanted(no.settings(cuda_graphs="never"), "cuda", 10)
    with pytest.raises(InvalidArgument, match="cuda_graphs='yes': expected one of"):
        no.settings(cuda_graphs="yes")


@pytest.mark.slow
def test_the_cuda_graph_size_limit_counts_every_judged_tensor(fresh, monkeypatch):
    """A graph keeps a copy of its inputs: cross_entropy's limit counts its logits and labels,
    not only its per-row losses."""
    asked = []
    monkeypatch.setattr(graphs, "wanted", lambda settings, device, elements: asked.append(elements) or False)
    op = operators.get("cross_entropy")
    inputs, params = op.example(3, dtype=torch.bfloat16, family="calibration", rows=8, cols=64)
    outs = emulate(op.reference, inputs, params, Plan(seed=1))
    check(op.reference, outs, inputs, params, settings=ALWAYS)
    check(op.reference, outs, inputs, params, settings=ALWAYS)
    judged = sum(t.numel() for t in list(inputs) + list(outs if isinstance(outs, (tuple, list)) else [outs])
                 if isinstance(t, torch.Tensor))
    assert asked == [judged] and judged > 8 * 64


class _PassThrough:
    """graphs.Captured where there is no CUDA: the compiled function called as it is."""

    def __init__(self, fn, tensors):
        self.fn = fn

    def __call__(self, *tensors):
        return self.fn(*tensors)


@pytest.mark.slow
def test_a_program_not_traceable_whole_is_compiled_without_cuda_graphs(fresh, monkeypatch):
    """A program that reads its row count to the host (a graph break): asked to run as a
    CUDA graph, it is traced whole first, and on failure compiled in pieces, with the same
    verdict and without a graph."""
    monkeypatch.setattr(graphs, "wanted", lambda settings, device, elements: True)
    monkeypatch.setattr(graphs, "Captured", _PassThrough)
    inputs, outs = _counted_cases(_mean_loss_read_to_the_host)[4]          # the faulty one
    params = {"ignore_index": -100}
    ve = check(_mean_loss_read_to_the_host, outs, inputs, params, settings=EAGER)
    check(_mean_loss_read_to_the_host, outs, inputs, params, settings=ALWAYS)
    vc = check(_mean_loss_read_to_the_host, outs, inputs, params, settings=ALWAYS)
    plan = _only_plan()
    assert plan.fn is not None and plan.failed is None and plan.graphs is False and plan.whole is False
    assert vc.status == ve.status == "reject"
    assert torch.equal(vc.outputs[0].rejected, ve.outputs[0].rejected)
    compiled.clear()
    op, inputs, params, outs = _case()
    check(op.reference, outs, inputs, params, settings=ALWAYS)
    check(op.reference, outs, inputs, params, settings=ALWAYS)
    assert _only_plan().graphs is True                   # rms_norm traces whole


@no.reference
def _mean_loss_read_to_the_host(logits, labels, *, ignore_index=-100):
    """cross_entropy's mean as a user may write it, with its count read to the host."""
    xf = logits.to(F.fp32)
    keep = labels != ignore_index
    loss = no.logsumexp(xf, axis=-1) - no.gather(xf, labels.clamp(min=0), axis=-1)
    loss = loss / float(max(int(keep.sum()), 1))
    return no.where(keep, loss, 0.0).to(logits.format)


def _counted_cases(program, seed=4):
    """Cases of 16 rows with 0, 0, 0, 7, 3 (one faulty store), 15 and 1 rows ignored."""
    g = torch.Generator().manual_seed(seed)
    cases = []
    for ignored, faults in ((0, ()), (0, ()), (0, ()), (7, ()), (3, ("ulp_off_store",)), (15, ()), (1, ())):
        logits = (torch.randn(16, 256, generator=g) * 2).to(torch.bfloat16)
        labels = torch.randint(0, 256, (16,), generator=g)
        labels[:ignored] = -100
        outs = emulate(program, (logits, labels), {"ignore_index": -100}, Plan(seed=1, faults=faults))
        cases.append(((logits, labels), outs))
    return cases


def _eager_then_compiled(program, cases, read_regions):
    got = {}
    for s in (EAGER, ALWAYS):
        compiled.clear()
        got[s] = []
        for inputs, outs in cases:
            v = check(program, outs, inputs, {"ignore_index": -100}, settings=s)
            got[s].append((v.status, v.outputs[0].rejected.clone() if read_regions or v.status != "accept"
                           else None))
    assert [st for st, _ in got[EAGER]] == ["accept"] * 4 + ["reject"] + ["accept"] * 2
    for (se, me), (sc, mc) in zip(got[EAGER], got[ALWAYS]):
        assert se == sc and (mc is None or torch.equal(me, mc))


@pytest.mark.slow
@pytest.mark.parametrize("read_regions", (True, False))
def test_a_value_read_to_the_host_is_not_reused_from_an_earlier_call(fresh, read_regions):
    """A program that reads its count of kept rows to the host breaks the trace: the frame
    resumed after the break takes the count as a constant, which only Dynamo's guard on it
    keeps from being reused for another count (tensor-only guards did reuse it, and rejected
    correct outputs). Cases with other counts, correct and faulty, judged compiled as eagerly,
    with their regions read each time (the regions function becomes the verdict) or not."""
    _eager_then_compiled(_mean_loss_read_to_the_host, _counted_cases(_mean_loss_read_to_the_host), read_regions)
    plan = _only_plan()
    assert plan.fn is not None and plan.failed is None and plan.whole is False


@pytest.mark.slow
@pytest.mark.parametrize("read_regions", (True, False))
def test_cross_entropy_mean_traces_whole_whatever_its_count(fresh, read_regions):
    """cross_entropy's mean divides by its count as a device tensor (references.kept_rows):
    the verdict traces whole, once, and judges every count as the eager verdict does."""
    op = operators.get("cross_entropy")
    _eager_then_compiled(op.reference, _counted_cases(op.reference), read_regions)
    plan = _only_plan()
    assert plan.fn is not None and plan.failed is None and plan.whole is True


@pytest.mark.slow
def test_a_signature_whose_verdicts_all_need_their_regions_switches_to_one_function(fresh):
    """A fuzzing loop scores every case from its region: after a few verdicts the
    signature's compiled regions function becomes its verdict (one call, not two), and reading
    its masks then computes no region."""
    op, inputs, params, outs, ve, _ = _eager_and_compiled(faults=("ulp_off_store",))
    plan = _only_plan()
    for _ in range(REGIONS_WANTED + 2):
        v = check(op.reference, outs, inputs, params, settings=ALWAYS)
        assert torch.equal(v.outputs[0].rejected, ve.outputs[0].rejected)
        assert v.explain() == ve.explain()
    assert plan.full and plan.fn is plan.regions_fn and not plan.graphs
    assert plan.region_calls == REGIONS_WANTED


@pytest.mark.slow
def test_a_miscompiled_regions_function_is_caught_when_compiled_and_its_regions_come_eager(fresh, monkeypatch):
    """A flags-only verdict's first call compares its flags alone: the regions function, once
    compiled, is compared with the same code run eagerly, centres against their radii."""
    real = plan_module.Plan._core

    def miscompiled(self, full):
        fn = real(self, full)
        if not full:
            return fn

        def wrong(*tensors):
            sites, flags, regions = fn(*tensors)
            (centre, *rest), *others = regions
            return sites, flags, [(centre * (1 + 2.0 ** -30), *rest), *others]
        return wrong
    monkeypatch.setattr(plan_module.Plan, "_core", miscompiled)
    op, inputs, params, outs, ve, vc = _eager_and_compiled(faults=("ulp_off_store",))
    assert _only_plan().region_calls == 1 and _only_plan().regions_fn is None    # a confirmed reject: eager
    with pytest.warns(RuntimeWarning, match="regions eagerly.*centre.*differ from the eager"):
        v = check(op.reference, outs, inputs, params, settings=ALWAYS)     # second need: compiled, refused
    assert torch.equal(v.outputs[0].centre, ve.outputs[0].centre)
    assert _only_plan().region_failed is not None and _only_plan().regions_fn is None


@pytest.mark.slow
def test_a_signature_whose_verdicts_rarely_need_regions_keeps_the_flags_alone(fresh):
    op, inputs, params, outs, _, _ = _eager_and_compiled()
    plan = _only_plan()
    for k in range(12):
        v = check(op.reference, outs, inputs, params, settings=ALWAYS)
        if k % 4 == 0:
            v.outputs[0].centre                 # one verdict in four reads its region
    assert plan.region_calls == 3 and plan.regions_fn is not None and not plan.full


@pytest.mark.slow
def test_a_function_returning_regions_never_runs_as_a_cuda_graph(fresh, monkeypatch):
    """A replay overwrites a graph's outputs, so regions a verdict keeps must not come from
    one: the flags function runs as a graph, the regions function that replaces it does not."""
    monkeypatch.setattr(graphs, "wanted", lambda settings, device, elements: True)
    monkeypatch.setattr(graphs, "Captured", _PassThrough)
    op, inputs, params, outs, ve, _ = _eager_and_compiled(faults=("ulp_off_store",))
    plan = _only_plan()
    assert not plan.full and plan.graphs                      # flags alone: a graph is allowed
    for _ in range(REGIONS_WANTED + 2):
        check(op.reference, outs, inputs, params, settings=ALWAYS).outputs[0].rejected
    assert plan.full and not plan.graphs                      # regions returned


def test_centres_are_compared_against_their_radius_and_a_lost_rounding_still_shows():
    """The first-call check's tolerance: a float64 reordering of a cancelling centre (relative
    difference far above 2**-40, a tiny part of the radius) passes; a centre that lost an fp32
    rounding (off by 2**-30 of 1, with a radius of one fp32 unit roundoff) does not."""
    radius = torch.full((2,), 2.0 ** -24, dtype=torch.float64)
    a = torch.tensor([2.0 ** -40, 1.0], dtype=torch.float64)
    reordered = a + torch.tensor([2.0 ** -60, 0.0], dtype=torch.float64)
    assert not compare.close(a, reordered)
    assert compare.close(a, reordered, radius)
    exact = torch.tensor([1.0 + 2.0 ** -30, 1.0], dtype=torch.float64)
    lost = exact.to(torch.float32).to(torch.float64)
    assert not compare.close(exact, lost, radius)
    nan = torch.tensor([float("nan"), float("inf")], dtype=torch.float64)
    assert compare.close(nan, nan.clone(), radius) and not compare.close(nan, a, radius)


@pytest.mark.slow
def test_the_first_call_check_waits_for_finite_inputs(fresh, monkeypatch):
    """A first compiled call with a non-finite input is judged eagerly (under 'error' it raises):
    only its non-finite flag is compared, and the full comparison comes with the first finite
    call, which still catches a wrong flag."""
    monkeypatch.setattr(plan_module.Plan, "_core", _flip_rejected_flags(plan_module.Plan._core))
    op, inputs, params, outs = _case()
    check(op.reference, outs, inputs, params, settings=ALWAYS)
    x = inputs[0].clone()
    x[0, 0] = math.nan
    with pytest.raises(InvalidArgument, match="non-finite"):
        check(op.reference, outs, (x,) + tuple(inputs[1:]), params, settings=ALWAYS)
    plan = _only_plan()
    assert plan.fn is not None and plan.failed is None and not plan.compared
    with pytest.warns(RuntimeWarning, match="the compiled flags"):
        check(op.reference, outs, inputs, params, settings=ALWAYS)
    assert plan.failed is not None


@pytest.mark.slow
def test_a_verdict_whose_unsanitised_code_fails_to_compile_is_compiled_sanitised(fresh, monkeypatch):
    """Inductor's Triton once failed on one unsanitised verdict kernel (rms_norm at 1e8 on the
    H200): the same verdict traced with sanitised inputs is compiled instead, not judged eagerly."""
    real = plan_module.Plan._core

    def picky(self, full):
        if not self.sanitise:
            def broken(*tensors):
                raise RuntimeError("Loop-carried variable has initial type int1 but is re-assigned to int8")
            return broken
        return real(self, full)
    monkeypatch.setattr(plan_module.Plan, "_core", picky)
    op, inputs, params, outs, ve, vc = _eager_and_compiled(faults=("ulp_off_store",))
    plan = _only_plan()
    assert plan.fn is not None and plan.failed is None and plan.whole
    assert plan.sanitise and "int8" in plan.unsanitised_failed
    _assert_same({"statistical": ve}, {"statistical": vc})


def test_a_long_compiler_error_is_warned_with_its_start_and_its_end():
    msg = "InductorError: SubprocException: An exception occurred in a subprocess:\n" + "  frame\n" * 500 + \
        "AssertionError('Loop-carried variable _tmp424 has initial type int1 but is re-assigned to int8')"
    brief = inductor.brief(msg)
    assert brief.startswith("InductorError: SubprocException") and brief.endswith("re-assigned to int8')")
    assert len(brief) < 800 and inductor.brief("short") == "short"


def test_float_tiling_is_scoped_to_numoracle_compiles():
    """While a CPU verdict compiles, Inductor's tiling sees no 16-bit dtype; before and after
    (and after an error) its own functions are back in place."""
    if not inductor.float_tiling_options():
        pytest.skip("no 512-bit vectors here, or another torch's internals: Inductor's tiling is kept")
    from torch._inductor.codegen import cpp as C
    select, lowp = C.TilingSelect.select_tiling, C.get_loop_body_lowp_fp
    with inductor.float_tiling(True):
        assert C.TilingSelect.select_tiling is not select
        assert C.get_loop_body_lowp_fp is lowp          # swapped only inside select_tiling
    assert C.TilingSelect.select_tiling is select
    with pytest.raises(RuntimeError, match="boom"):
        with inductor.float_tiling(True):
            raise RuntimeError("boom")
    assert C.TilingSelect.select_tiling is select and C.get_loop_body_lowp_fp is lowp
    with inductor.float_tiling(False):
        assert C.TilingSelect.select_tiling is select
