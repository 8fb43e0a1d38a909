"""The block-scaled quantizer calculus (numoracle/calculus/quant.py) and its two-step check
(numoracle/oracles/quantizer.py): every e4m3fn value and every tie between neighbours, the
scale rules' edges, and real kernels on the repaired interpreter."""

import math

import pytest
import torch

import numoracle as no
from numoracle import formats as F
from numoracle.backends import select
from numoracle.calculus import quant as Q
from numoracle.errors import InvalidArgument
from numoracle.mathlib import load

INTERP = load("interpreter")
H200 = load("h200")


def _e4m3_values():
    """Every finite e4m3fn value, ascending (both zeros collapse to one)."""
    v = F.from_bits(torch.arange(256), F.e4m3fn)
    v = v[torch.isfinite(v)]
    return torch.unique(v)


def _bounds(x, scale=1.0, fmt=F.e4m3fn, fmax=448.0, prof=INTERP):
    x = torch.as_tensor(x, dtype=torch.float64)
    s = torch.full_like(x, scale)
    return Q.code_bounds(x, x, s, fmt, fmax, prof)


# ------------------------------------------------------------------ exhaustive: pure functions

def test_every_e4m3_value_accepts_only_itself():
    v = _e4m3_values()
    assert v.numel() == 253          # 2 * 126 non-zero finite values + one zero
    _, _, lo, hi = _bounds(v)
    assert torch.equal(lo, v) and torch.equal(hi, v)


def test_every_tie_between_neighbours_goes_to_even_only():
    v = _e4m3_values()
    mid = (v[:-1] + v[1:]) / 2
    _, _, lo, hi = _bounds(mid)
    assert torch.equal(lo, hi), "an exact tie of fl32(x/s) has one RN-even answer"
    bits = F.to_bits(lo, F.e4m3fn)
    assert bool(((bits & 1) == 0).all()), "ties must land on the code with an even significand"
    # the tie-away answer (what change pair 16's kernel stores) is outside wherever it differs
    away = torch.where(mid > 0, v[1:], v[:-1])
    differs = away != lo
    assert int(differs.sum()) == 126   # half of the 252 ties round toward zero under RN-even
    assert not bool(((away >= lo) & (away <= hi))[differs].any())


def test_just_off_a_tie_rounds_to_the_nearer_neighbour():
    v = _e4m3_values()
    mid = (v[:-1] + v[1:]) / 2
    below = F.next_down(mid, F.fp32)
    above = F.next_up(mid, F.fp32)
    _, _, lo_b, hi_b = _bounds(below)
    _, _, lo_a, hi_a = _bounds(above)
    assert torch.equal(lo_b, v[:-1]) and torch.equal(hi_b, v[:-1])
    assert torch.equal(lo_a, v[1:]) and torch.equal(hi_a, v[1:])


def test_truncation_is_outside_for_every_non_tie_above_the_midpoint():
    v = _e4m3_values()
    pos = v[v > 0]
    x = F.next_up((pos[:-1] + pos[1:]) / 2, F.fp32)   # rounds up to pos[1:], truncates to pos[:-1]
    _, _, lo, hi = _bounds(x)
    assert bool((pos[:-1] < lo).all())


def test_saturation_at_fmax_and_the_clamp():
    x = torch.tensor([448.0, 460.0, 464.0, 500.0, 1e30, -1e30])
    _, _, lo, hi = _bounds(x)
    assert lo.tolist() == hi.tolist() == [448.0, 448.0, 448.0, 448.0, 448.0, -448.0]
    # with vLLM's e4m3fnuz max of 224 the clamp, not the format's 240, bounds the codes
    _, _, lo, _ = _bounds(torch.tensor([230.0, 239.0]), fmt=F.e4m3fnuz, fmax=224.0)
    assert lo.tolist() == [224.0, 224.0]


def test_division_by_the_scale_is_accounted_before_the_fp8_rounding():
    """x/s rounds in fp32 first: an exact quotient just off a tie whose fp32 rounding *is* the
    tie must admit the RN-even answer of the fp32 value (what the kernel stores)."""
    s = torch.tensor(3.0 / 448.0, dtype=torch.float32).double()      # an fp32 scale
    v = _e4m3_values()
    mid = ((v[:-1] + v[1:]) / 2)
    x = F.round(mid * s, F.fp32)                                      # fp32 inputs near ties·s
    kernel = (x.float() / s.float()).clamp(-448, 448).to(torch.float8_e4m3fn).double()
    for prof in (INTERP, H200):
        _, _, lo, hi = _bounds(x, float(s), prof=prof)
        assert bool(((kernel >= lo) & (kernel <= hi)).all())
    # correctly rounded division (the interpreter's profile): exactly one code each
    _, _, lo, hi = _bounds(x, float(s))
    assert torch.equal(lo, hi) and torch.equal(lo, kernel)


# ------------------------------------------------------------------ admissible scales

def _adm(amax, rule, prof=INTERP, fmax=448.0):
    a = torch.as_tensor(amax, dtype=torch.float64)
    return Q.admissible_scales(a, a, fmax, rule, 1e-10, prof)


@pytest.mark.parametrize("div_ulps", [0.5, 2.0])
def test_one_denominator_bounds_the_quotient_as_all_four_corners_do(div_ulps):
    """div_interval with one positive denominator (two divisions, the quotient monotone in
    the numerator) gives the four-corner enclosure exactly: numerators of both signs, zeros,
    subnormal and huge quotients."""
    g = torch.Generator().manual_seed(8)
    n = 200_000
    a = torch.randn(n, generator=g, dtype=torch.float64) * torch.exp2(torch.randint(-140, 120, (n,), generator=g).double())
    b = a + torch.rand(n, generator=g, dtype=torch.float64) * a.abs() * torch.randint(0, 2, (n,), generator=g)
    d = torch.exp2(torch.randint(-130, 120, (n,), generator=g).double()) * (1 + torch.rand(n, generator=g, dtype=torch.float64))
    lo, hi = torch.minimum(a, b), torch.maximum(a, b)
    lo[:50], hi[:50] = 0.0, 0.0
    lo[50:100], hi[50:100] = -0.0, hi[50:100].abs()
    one = Q.div_interval(lo, hi, d, d, div_ulps)
    four = Q.div_interval(lo, hi, d, d.clone(), div_ulps)
    assert all(torch.equal(x, y) for x, y in zip(one, four))


def test_fp32_scale_is_the_correctly_rounded_quotient_or_within_the_division_error():
    amax = torch.tensor([1.0, 3.0, 448.0, 1e-3, 65504.0])
    lo, hi, pow2 = _adm(amax, "fp32")
    want = (amax.float() / 448.0).double()
    assert not pow2 and torch.equal(lo, want) and torch.equal(hi, want)
    lo, hi, _ = _adm(amax, "fp32", H200)                           # div.full: the profile's bound
    assert bool(((lo < want) & (want < hi)).all())
    ulps = H200.model("div").a
    assert bool((hi - lo <= 2 * ulps * F.ulp(want, F.fp32)).all())


def test_fp32_scale_floors_absmax():
    lo, hi, _ = _adm([0.0, 1e-12], "fp32")
    eps32 = float(torch.tensor(1e-10, dtype=torch.float32))
    want = float(torch.tensor(eps32, dtype=torch.float32) / 448.0)
    assert lo.tolist() == hi.tolist() == [want, want]


def test_ue8m0_exact_power_of_two_does_not_bump():
    k = torch.arange(-20, 10, dtype=torch.float64)
    lo, hi, pow2 = _adm(448.0 * torch.exp2(k), "ue8m0")      # correctly rounded division: s = 2^k
    assert pow2 and torch.equal(lo, torch.exp2(k)) and torch.equal(hi, torch.exp2(k))
    # div.full (1.5 ulp) may return 2^k (1 + 2^-23), whose log2 ceils to k + 1: both admissible
    lo, hi, _ = _adm(448.0 * torch.exp2(k), "ue8m0", H200)
    assert torch.equal(lo, torch.exp2(k)) and torch.equal(hi, torch.exp2(k + 1))


def test_ue8m0_just_above_a_power_of_two_admits_the_power_below_when_log2_rounds_onto_it():
    # s = 2^-33 (1 + 2^-20): fp32 log2(s) = -33 + 1.4e-6 is within a few ulps (2^-18) of -33
    s = 2.0 ** -33 * (1 + 2.0 ** -20)
    lo, hi, _ = _adm([448.0 * s], "ue8m0")
    assert lo.tolist() == [2.0 ** -33] and hi.tolist() == [2.0 ** -32]
    # far from the edge only the power above is admissible
    lo, hi, _ = _adm([448.0 * 2.0 ** -33 * 1.25], "ue8m0")
    assert lo.tolist() == hi.tolist() == [2.0 ** -32]


def test_ue8m0_floors_the_scale_not_absmax():
    lo, hi, _ = _adm([0.0, 1e-9], "ue8m0")
    want = 2.0 ** math.ceil(math.log2(float(torch.tensor(1e-10, dtype=torch.float32))))
    assert lo.tolist() == hi.tolist() == [want, want]          # 2^-33, not 2^-42


# ------------------------------------------------------------------ check() on kernels

@no.reference
def quant_ref(x, *, group_size=128, ue8m0=False, column_major_scales=False, fmt="e4m3fn", eps=1e-10):
    q = no.quantize_group(x.to(F.fp32), group_size, fmt, "ue8m0" if ue8m0 else "fp32", eps=eps)
    return q.codes, q.scales


@pytest.fixture(scope="module")
def G():
    select("interpreter")
    from numoracle.operators.kernels import group_quant_fp8
    return group_quant_fp8


def _all_codes_and_ties(dtype=torch.bfloat16):
    """Rows of 64: each group holds ±448 (so its scale is exactly 1, also under UE8M0: the
    power-of-two edge), e4m3 values and ties between neighbours. Every value is a bf16 value."""
    v = _e4m3_values()
    mid = (v[:-1] + v[1:]) / 2
    vals = torch.cat([v, mid])
    per = 63
    n = -(-vals.numel() // per)
    vals = torch.cat([vals, torch.zeros(n * per - vals.numel(), dtype=torch.float64)]).reshape(n, per)
    x = torch.cat([torch.full((n, 1), 448.0, dtype=torch.float64), vals], dim=1)
    assert torch.equal(x.to(dtype).double(), x)
    return x.to(dtype)


@pytest.mark.parametrize("ue8m0", [False, True])
def test_kernel_on_every_code_and_tie(G, ue8m0):
    x = _all_codes_and_ties()
    params = dict(group_size=64, ue8m0=ue8m0)
    q, s = G.group_quant_fp8(x, **params)
    assert bool((s == 1).all())
    assert torch.equal(q.view(torch.uint8), x.to(torch.float8_e4m3fn).view(torch.uint8))  # torch RNE
    for mode in ("statistical", "fixed"):
        assert no.check(quant_ref, (q, s), (x,), params, mode=mode).status == "accept"
    for faulty in (G.group_quant_fp8_ties_away, G.group_quant_fp8_truncate):
        v = no.check(quant_ref, faulty(x, **params), (x,), params)
        assert v.status == "reject" and v.outputs[0].rejected.any() and not v.outputs[1].rejected.any()
    v = no.check(quant_ref, G.group_quant_fp8_ties_away(x, **params), (x,), params)
    assert v.n_rejected == 126                                   # exactly the ties RN-even sends down


def test_stored_scale_bumped_at_the_power_of_two_edge_is_rejected(G):
    x = _all_codes_and_ties()[:1]
    params = dict(group_size=64, ue8m0=True)
    q, s = G.group_quant_fp8(x, **params)
    s2 = s * 2
    q2 = (x.float() / s2.repeat_interleave(64, -1)).clamp(-448, 448).to(torch.float8_e4m3fn)
    v = no.check(quant_ref, (q2, s2), (x,), params)
    assert v.status == "reject" and v.outputs[1].rejected.all() and not v.outputs[0].rejected.any()
    text = v.explain()
    assert "group (row 0, columns 0..63): amax = 448" in text
    assert "admissible [1, 1] (powers of two)" in text and "2x the reference scale" in text


def test_kernel_log2_landing_on_an_integer_is_accepted(G):
    """fp32 input whose UE8M0 scale is just above 2^-33: the kernel's fp32 log2 rounds onto -33,
    it stores 2^-33 and clamps the amax element to 448 — a correct kernel's behaviour."""
    amax = 448.0 * 2.0 ** -33 * (1 + 2.0 ** -20)
    x = torch.tensor([[amax, amax / 3, -amax / 7, 0.0] * 4], dtype=torch.float32)
    params = dict(group_size=16, ue8m0=True)
    q, s = G.group_quant_fp8(x, **params)
    v = no.check(quant_ref, (q, s), (x,), params, mode="fixed")
    assert v.status == "accept", v.explain()
    assert float(s[0, 0]) in (2.0 ** -33, 2.0 ** -32)


def test_pair_14_floor_on_absmax_rejected_on_zero_and_tiny_groups(G):
    x = torch.randn(2, 64, generator=torch.Generator().manual_seed(3)).to(torch.bfloat16)
    x[0, :16] = 0
    x[1, 32:48] *= 2.0 ** -30
    params = dict(group_size=16, ue8m0=True)
    v = no.check(quant_ref, G.group_quant_fp8_floor_absmax(x, **params), (x,), params)
    assert v.status == "reject"
    assert v.outputs[1].rejected.nonzero().tolist() == [[0, 0], [1, 2]]
    assert no.check(quant_ref, G.group_quant_fp8(x, **params), (x,), params).status == "accept"


def test_pair_15_max_224_on_e4m3fn_rejected_at_the_scale(G):
    x = torch.randn(2, 32, generator=torch.Generator().manual_seed(4)).to(torch.bfloat16)
    params = dict(group_size=16)
    v = no.check(quant_ref, G.group_quant_fp8_max224(x, **params), (x,), params)
    assert v.status == "reject" and v.outputs[1].rejected.all()
    assert not v.outputs[0].rejected.any()       # codes are consistent with the (wrong) scale


def test_codes_without_scales_is_an_argument_error():
    @no.reference
    def codes_only(x):
        return no.quantize_group(x.to(F.fp32), 16).codes
    x = torch.ones(1, 16, dtype=torch.bfloat16)
    with pytest.raises(InvalidArgument, match="without its scales"):
        no.check(codes_only, torch.ones(1, 16).to(torch.float8_e4m3fn), (x,))


@pytest.mark.parametrize("bad,match", [
    (dict(group=24), "must divide"), (dict(fmt="bf16"), "not a signed fp8"),
    (dict(scale_rule="mx"), "scale_rule"), (dict(fmax=500.0), "fmax=500"),
])
def test_quantize_group_argument_errors(bad, match):
    kw = dict(group=16, fmt="e4m3fn", scale_rule="fp32")
    kw.update(bad)
    fmax = kw.pop("fmax", None)

    @no.reference
    def prog(x):
        q = no.quantize_group(x.to(F.fp32), kw["group"], kw["fmt"], kw["scale_rule"], fmax=fmax)
        return q.codes, q.scales
    x = torch.ones(1, 32, dtype=torch.bfloat16)
    with pytest.raises(InvalidArgument, match=match):
        no.check(prog, (torch.ones(1, 32).to(torch.float8_e4m3fn), torch.ones(1, 2)), (x,))


def test_e4m3fnuz_on_the_interpreter_is_reported_not_judged(G):
    ok, why = G.fnuz_supported("interpreter")
    if ok:   # a future interpreter (or repair) that rounds tl.float8e4b8 to nearest even
        x = torch.randn(2, 32, generator=torch.Generator().manual_seed(5)).to(torch.bfloat16)
        params = dict(group_size=16, fmt="e4m3fnuz")
        assert no.check(quant_ref, G.group_quant_fp8(x, **params), (x,), params).status == "accept"
    elif __import__("triton").__version__.startswith("3.6."):
        # Triton 3.6's interpreter has no tl.float8e4b8 type to store at all
        assert why.startswith("the interpreter cannot store tl.float8e4b8") and "fp8e4b8" in why
    else:
        assert "ties away" in why
