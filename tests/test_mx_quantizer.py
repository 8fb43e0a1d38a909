"""The MX / NVFP4 quantizer calculus (numoracle/calculus/quant_mx.py) and its judgement
(numoracle/oracles/quantizer.py), on outputs of the torch quantizers of ops_mx (no Triton):
correct outputs accepted, each kind of fault caught at its own step, the nibble order part
of the reference, argument errors, and the dequantized value's enclosure."""

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import numoracle as no
from numoracle.verdict import compiled
from numoracle import formats as F
from numoracle.errors import InvalidArgument
from numoracle.operators.ops_mx import torch_mx_quantize, torch_nvfp4_quantize

fp32 = F.fp32


@no.reference
def mx_ref(x, *, fmt="e4m3fn", scale_rule="floor", packed=None):
    q = no.quantize_mx(x.to(fp32), fmt, scale_rule, packed=packed)
    return q.codes, q.scales


@no.reference
def nv_ref(x, *, packed="low_first"):
    q = no.quantize_nvfp4(x.to(fp32), packed=packed)
    return q.codes, q.scales, q.tensor_scale


@no.reference
def nv_given_ref(x, ts):
    q = no.quantize_nvfp4(x.to(fp32), tensor_scale=ts)
    return q.codes, q.scales


def _x(seed=0, rows=3, cols=128, dtype=torch.bfloat16):
    """Normal values with blocks scaled by 2^j, one zero block and one tiny block."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(rows, cols, generator=g, dtype=torch.float64)
    f = torch.exp2(torch.randint(-12, 8, (rows, cols // 16), generator=g).double()).repeat_interleave(16, -1)
    x = x * f
    x[0, :32] = 0
    x[1, 32:64] *= 2.0 ** -60
    return x.to(dtype)


def _codes(values, fmt, order=None):
    return F.encode(values, F.Packed(fmt, order) if order else fmt)


def _statuses(v):
    return [bool(o.rejected.any()) for o in v.outputs]


# ------------------------------------------------------------------ correct outputs

@pytest.mark.parametrize("fmt,packed", [("e4m3fn", None), ("e5m2", None), ("e2m1", "low_first"),
                                        ("e2m1", "high_first"), ("e2m1", None)])
@pytest.mark.parametrize("rule", ["floor", "ceil"])
def test_mx_quantizer_of_the_plan_accepted_in_both_modes(fmt, packed, rule):
    x = _x()
    q, s = torch_mx_quantize(x, fmt, rule, nibble_order=packed or "low_first")
    if fmt == "e2m1" and packed is None:         # one code per byte
        q = F.encode(F.decode(q, F.Packed(F.e2m1)), F.e2m1)
    params = dict(fmt=fmt, scale_rule=rule, packed=packed)
    for mode in ("statistical", "fixed"):
        v = no.check(mx_ref, (q, s), (x,), params, mode=mode)
        assert v.status == "accept", v.explain()


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_nvfp4_quantizer_of_the_plan_accepted_in_both_modes(dtype):
    x = _x(1, dtype=dtype)
    out = torch_nvfp4_quantize(x)
    for mode in ("statistical", "fixed"):
        assert no.check(nv_ref, out, (x,), mode=mode).status == "accept"
    # the same codes as torch's own float4_e2m1fn_x2 (low nibble first)
    q, s, ts = out
    assert no.check(nv_ref, (q.view(torch.float4_e2m1fn_x2), s, ts), (x,)).status == "accept"


def test_nvfp4_with_a_given_tensor_scale():
    x = _x(2)
    ts = torch.tensor([0.01], dtype=torch.float32)
    xf = x.float().reshape(3, -1, 16)
    s = ((xf.abs().amax(-1) / 6.0) / ts).clamp(2.0 ** -6, 448.0).to(torch.float8_e4m3fn)
    t = (xf / (ts * s.float())[..., None]).clamp(-6, 6).double()
    q = _codes(F.round(t, F.e2m1, "rne", "saturate").reshape(x.shape), F.e2m1, "low_first")
    assert no.check(nv_given_ref, (q, s), (x, ts), mode="fixed").status == "accept"
    v = no.check(nv_given_ref, (q, s), (x, ts * 2), mode="fixed")       # judged against another ts
    assert v.status == "reject" and v.outputs[1].rejected.any()

    @no.reference
    def computed_ts(x, ts):
        q = no.quantize_nvfp4(x.to(fp32), tensor_scale=ts * 1.5)
        return q.codes, q.scales
    with pytest.raises(InvalidArgument, match="given tensor scale must be exact"):
        no.check(computed_ts, (q, s), (x, ts))


# ------------------------------------------------------------------ faults, each at its step

def _mx_with_scale(x, fmt, E):
    """Codes of x under the exponents E (per block), by the plan."""
    f = F.by_name(fmt)
    xf = x.float().reshape(*x.shape[:-1], -1, 32)
    t = (xf / torch.exp2(E).float()[..., None]).double().clamp(-f.max_finite, f.max_finite)
    return F.round(t, f, "rne", "saturate").reshape(x.shape)


def test_mx_wrong_scale_rejected_at_the_scale_and_codes_at_the_codes():
    x = _x(3)
    q, s = torch_mx_quantize(x, "e4m3fn", "floor")
    E = F.decode(s).log2()
    wrong_q = F.encode(_mx_with_scale(x, "e4m3fn", E + 1), F.e4m3fn)
    wrong_s = F.encode(torch.exp2(E + 1), F.e8m0).view(torch.float8_e8m0fnu)
    # a consistent pair with the scale twice too large: the scales are rejected, not the codes
    v = no.check(mx_ref, (wrong_q, wrong_s), (x,), mode="fixed")
    assert _statuses(v) == [False, True]
    assert bool(v.outputs[1].rejected.all())      # the zero block's 2^-126 too: its rule gives 2^-127
    # right scales, codes of another scale: the codes are rejected (conditioned on the stored scale)
    v = no.check(mx_ref, (wrong_q, s), (x,), mode="fixed")
    assert _statuses(v) == [True, False]


def test_mx_floor_rule_clamps_and_saturation_is_required():
    """Under the OCP rule the block's largest elements pass fmax: they must saturate; a NaN
    there (torch's CUDA e4m3 cast past 464) is rejected as a special value."""
    x = torch.full((1, 32), 1.0, dtype=torch.float32)
    x[0, 0] = 1.96875          # amax/2^E = 1.96875·2^8 = 504 > 464
    q, s = torch_mx_quantize(x, "e4m3fn", "floor")
    assert F.decode(q)[0, 0] == 448 and F.decode(s)[0, 0] == 2.0 ** -8
    assert no.check(mx_ref, (q, s), (x,), mode="fixed").status == "accept"
    bad = q.clone().view(torch.uint8)
    bad[0, 0] = 0x7F
    v = no.check(mx_ref, (bad.view(torch.float8_e4m3fn), s), (x,), mode="fixed")
    assert v.status == "reject" and bool(v.outputs[0].special[0, 0])


def test_nvfp4_faults_each_at_their_level():
    x = _x(4)
    q, s, ts = torch_nvfp4_quantize(x)
    xf = x.float().reshape(3, -1, 16)

    def codes(total):
        t = (xf / total[..., None]).clamp(-6, 6).double()
        return _codes(F.round(t, F.e2m1, "rne", "saturate").reshape(x.shape), F.e2m1, "low_first")
    # tensor scale applied twice: codes rejected
    v = no.check(nv_ref, (codes(ts * s.float() * ts), s, ts), (x,), mode="fixed")
    assert _statuses(v) == [True, False, False]
    # tensor scale applied nowhere: block scales rejected (codes consistent with them rejected too)
    s0 = (xf.abs().amax(-1) / 6.0).clamp(2.0 ** -6, 448.0).to(torch.float8_e4m3fn)
    v = no.check(nv_ref, (codes(s0.float()), s0, ts), (x,), mode="fixed")
    assert _statuses(v) == [True, True, False]
    # a wrong stored tensor scale with everything consistent with it: only the tensor scale
    ts2 = ts * 2
    s2 = ((xf.abs().amax(-1) / 6.0) / ts2).clamp(2.0 ** -6, 448.0).to(torch.float8_e4m3fn)
    v = no.check(nv_ref, (codes(ts2 * s2.float()), s2, ts2), (x,), mode="fixed")
    assert _statuses(v) == [False, False, True]
    text = v.explain()
    assert "tensor scale =" in text and "admissible" in text


def test_nibble_order_is_part_of_the_reference():
    x = _x(5)
    q_hi, s = torch_mx_quantize(x, "e2m1", "floor", nibble_order="high_first")
    assert no.check(mx_ref, (q_hi, s), (x,), dict(fmt="e2m1", packed="high_first")).status == "accept"
    v = no.check(mx_ref, (q_hi, s), (x,), dict(fmt="e2m1", packed="low_first"), mode="fixed")
    assert v.status == "reject" and _statuses(v) == [True, False]
    text = v.explain()
    assert "stored packed (e2m1x2(low_first)): byte" in text and "nibble" in text
    # the judgement is per code: the logical shape, not the bytes'
    assert v.outputs[0].shape == tuple(x.shape)


def test_scale_explanation_names_block_amax_and_ratio():
    x = _x(6)
    q, s = torch_mx_quantize(x, "e5m2", "ceil")
    E = (F.decode(s).log2() - 1).clamp(min=-127)         # the zero block stays at 2^-127
    s2 = F.encode(torch.exp2(E), F.e8m0).view(torch.float8_e8m0fnu)
    q2 = F.encode(_mx_with_scale(x, "e5m2", E), F.e5m2)
    v = no.check(mx_ref, (q2, s2), (x,), dict(fmt="e5m2", scale_rule="ceil"), mode="fixed")
    text = v.explain()
    assert "MX e5m2 per block of 32, E8M0 scale 2^ceil(log2(amax / 57344)) (round-up)" in text
    assert "block (row " in text and ": amax = " in text and "0.5x the reference scale" in text


# ------------------------------------------------------------------ argument errors

@pytest.mark.parametrize("kw,match", [
    (dict(fmt="bf16"), "not an MX element format"), (dict(scale_rule="round"), "scale_rule"),
    (dict(block=24), "must divide"), (dict(fmt="e4m3fn", packed="low_first"), "packs 4-bit codes"),
])
def test_quantize_mx_argument_errors(kw, match):
    args = dict(fmt="e4m3fn", scale_rule="floor", block=32, packed=None)
    args.update(kw)

    @no.reference
    def prog(x):
        q = no.quantize_mx(x.to(fp32), args["fmt"], args["scale_rule"], block=args["block"], packed=args["packed"])
        return q.codes, q.scales
    x = torch.ones(1, 64, dtype=torch.bfloat16)
    with pytest.raises(InvalidArgument, match=match):
        no.check(prog, torch_mx_quantize(x), (x,))


def test_nvfp4_outputs_need_the_scales_they_are_conditioned_on():
    @no.reference
    def no_tensor_scale(x):
        q = no.quantize_nvfp4(x.to(fp32))
        return q.codes, q.scales
    x = _x(7)
    q, s, ts = torch_nvfp4_quantize(x)
    with pytest.raises(InvalidArgument, match="without its tensor_scale"):
        no.check(no_tensor_scale, (q, s), (x,))

    @no.reference
    def codes_only(x):
        return no.quantize_mx(x.to(fp32)).codes
    with pytest.raises(InvalidArgument, match="without its scales"):
        no.check(codes_only, torch_mx_quantize(x)[0], (x,))


def test_packed_codes_must_have_the_bytes_shape():
    x = _x(8)
    q, s = torch_mx_quantize(x, "e2m1")
    unpacked = F.encode(F.decode(q, F.Packed(F.e2m1)), F.e2m1)      # one code per byte
    with pytest.raises(InvalidArgument, match=r"has shape \(3, 128\) but mx_ref produces \(3, 64\)"):
        no.check(mx_ref, (unpacked, s), (x,), dict(fmt="e2m1", packed="low_first"))


# ------------------------------------------------------------------ dequantized values

def _deq_check(x, deq, represented, rule, top):
    R = deq.radius()
    err = (represented - x.double()).abs()
    assert bool((err <= R).all()), float((err - R).max())
    clamp = sum((v for k, v in deq.form.det.items() if "clamp" in k), torch.zeros_like(R))
    ax = x.double().abs()
    if rule == "ceil":       # nothing passes fmax but by the division's rounding
        assert bool((clamp <= ax * 2.0 ** -22).all())
    elif top:                # 1.99·2^k passes fmax·2^E (1.75·2^8, 1.75·2^15, 1.5·2^2): clamped by 12-25%
        assert bool((clamp[:, ::32] >= 0.1 * ax[:, ::32]).all())


@settings(max_examples=25, deadline=None, derandomize=True)
@given(seed=st.integers(0, 10 ** 6), fmt=st.sampled_from(["e4m3fn", "e5m2", "e2m1"]),
       rule=st.sampled_from(["floor", "ceil"]), top=st.booleans())
def test_mx_dequantized_encloses_the_represented_value(seed, fmt, rule, top):
    """|q·2^E − x| within the enclosure of ``.dequantized``, for the plan's own codes; with
    block maxima near the top of their binade (``top``) the floor rule clamps, and the clamp
    is a deterministic term, not part of the rounding symbol."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(2, 64, generator=g, dtype=torch.float64)
    if top:
        # the block maxima
        x[:, ::32] = torch.sign(x[:, ::32]) * 1.99 * 2.0 ** torch.randint(3, 7, (2, 2), generator=g).double()
    x = x.float()
    q, s = torch_mx_quantize(x, fmt, rule)
    layout = F.Packed(F.e2m1) if fmt == "e2m1" else None
    represented = F.decode(q, layout) * F.decode(s).repeat_interleave(32, -1)

    @no.reference
    def deq(x):
        return no.quantize_mx(x.to(fp32), fmt, rule).dequantized
    from numoracle.verdict.evaluation import run_reference
    from numoracle.mathlib import load
    (dq,), ctx, _ = run_reference(deq, (x,), {}, load("interpreter"), condensed=False)
    _deq_check(x, dq, represented, rule, top)
    key = [k for k, (_, label) in ctx.symbols.items() if "quantize to MX" in label]
    assert len(key) == 1
    coef = dq.form.shared[key[0]].coef
    f = F.by_name(fmt)
    normal = x.double().abs() >= f.min_normal * F.decode(s).repeat_interleave(32, -1) * 2
    assert bool((coef[normal] <= x.double().abs()[normal] * (f.u + 2.0 ** -23) * (1 + 2.0 ** -19)).all())


@settings(max_examples=15, deadline=None, derandomize=True)
@given(seed=st.integers(0, 10 ** 6), scale=st.integers(-20, 20))
def test_nvfp4_dequantized_encloses_the_represented_value(seed, scale):
    g = torch.Generator().manual_seed(seed)
    x = (torch.randn(2, 64, generator=g, dtype=torch.float64) * 2.0 ** scale).float()
    q, s, ts = torch_nvfp4_quantize(x)
    represented = (F.decode(q, F.Packed(F.e2m1)) * F.decode(s).repeat_interleave(16, -1) * ts.double())

    @no.reference
    def deq(x):
        return no.quantize_nvfp4(x.to(fp32)).dequantized
    from numoracle.verdict.evaluation import run_reference
    from numoracle.mathlib import load
    (dq,), _, _ = run_reference(deq, (x,), {}, load("h200"))
    R = dq.radius()
    assert bool(((represented - x.double()).abs() <= R).all())


# ------------------------------------------------------------------ the log2 edge and the compiled path

def test_floor_rule_next_to_a_power_of_two_admits_the_log2_rounding():
    """amax = 2^10 (1 − 2^-24): floor(log2) is 9, but fp32 log2 rounds to 10 exactly, so a
    kernel that calls log2 stores 2^(10 − 8): both are admissible, 2^(11 − 8) is not."""
    a = 2.0 ** 10 * (1 - 2.0 ** -24)
    x = torch.full((1, 32), 1.0, dtype=torch.float32)
    x[0, 0] = a
    assert float(torch.log2(torch.tensor(a, dtype=torch.float32))) == 10.0
    got = []
    for E in (1.0, 2.0, 3.0):
        Et = torch.tensor([[E]], dtype=torch.float64)
        q = F.encode(_mx_with_scale(x, "e4m3fn", Et), F.e4m3fn)
        s = F.encode(torch.exp2(Et), F.e8m0).view(torch.float8_e8m0fnu)
        got.append(no.check(mx_ref, (q, s), (x,), mode="fixed").status)
    assert got == ["accept", "accept", "reject"]


def test_mx_outputs_are_judged_eagerly_under_a_compile_policy():
    x = _x(9, rows=4, cols=256)
    q, s = torch_mx_quantize(x, "e2m1", "floor")
    params = dict(fmt="e2m1", packed="low_first")
    for _ in range(3):
        v = no.check(mx_ref, (q, s), (x,), params, settings=no.settings(compile="always"))
        assert v.status == "accept"
    plans = [p for p in compiled.plans() if p.program is mx_ref]
    assert plans and all(p.sites is None and p.fn is None for p in plans)
    bad = F.encode(F.decode(q, F.Packed(F.e2m1)), F.Packed(F.e2m1, "high_first"))
    assert no.check(mx_ref, (bad, s), (x,), params).status == "reject"
    assert math.isfinite(v.outputs[0].lo.sum().item())
