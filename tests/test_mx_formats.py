"""Packed fp4 storage (numoracle.formats.Packed, pack, unpack) and the rounding paths the
MX / NVFP4 quantizers use: every e2m1 and e4m3 value and every tie between neighbours,
against ml_dtypes on float32-exact inputs, and the E8M0 scale rules on every exponent an
fp32 amax can give."""

import math
from fractions import Fraction

import ml_dtypes
import numpy as np
import pytest
import torch

from numoracle import formats as F
from numoracle.calculus import form as FM
from numoracle.calculus import quant as Q
from numoracle.calculus import quant_mx as MX
from numoracle.calculus.tracked import Context, Tracked
from numoracle.errors import InvalidArgument
from numoracle.mathlib import load

INTERP = load("interpreter")
H200 = load("h200")


def t64(v):
    return torch.tensor(v, dtype=torch.float64)


# ------------------------------------------------------------------ packing

@pytest.mark.parametrize("order", F.PACK_ORDERS)
def test_every_byte_unpacks_and_packs_back(order):
    b = torch.arange(256, dtype=torch.uint8).reshape(16, 16)
    codes = F.unpack(b, order)
    assert codes.shape == (16, 32) and int(codes.min()) == 0 and int(codes.max()) == 15
    assert torch.equal(F.pack(codes, order), b)
    first = b.long() & 0xF if order == "low_first" else b.long() >> 4
    assert torch.equal(codes[:, 0::2], first)


def test_low_first_is_the_layout_triton_and_torch_read():
    """tl.dot_scaled reads "the first element in lower bits"; torch.float4_e2m1fn_x2 too."""
    vals = t64([0.5, -6.0, 1.5, 0.0])
    packed = F.encode(vals, F.Packed(F.e2m1))
    assert packed.tolist() == [0x1 | 0xF << 4, 0x3]
    assert F.decode(packed.view(torch.float4_e2m1fn_x2)).tolist() == vals.tolist()
    swapped = F.encode(vals, F.Packed(F.e2m1, "high_first"))
    assert swapped.tolist() == [0x10 | 0xF, 0x30]
    assert F.decode(swapped, F.Packed(F.e2m1, "high_first")).tolist() == vals.tolist()


def test_packed_decode_agrees_with_ml_dtypes_per_nibble():
    b = torch.arange(256, dtype=torch.uint8)
    got = F.decode(b, F.Packed(F.e2m1)).numpy()
    nib = np.stack([b.numpy() & 0xF, b.numpy() >> 4], -1).reshape(-1).astype(np.uint8)
    want = nib.view(ml_dtypes.float4_e2m1fn).astype(np.float64)
    assert np.array_equal(got, want)


def test_packing_argument_errors():
    with pytest.raises(InvalidArgument, match="4-bit"):
        F.Packed(F.e4m3fn)
    with pytest.raises(InvalidArgument, match="order="):
        F.Packed(F.e2m1, "big_endian")
    with pytest.raises(InvalidArgument, match="even length"):
        F.Packed(F.e2m1).stored_shape((2, 3))
    with pytest.raises(InvalidArgument, match="even length"):
        F.pack(torch.zeros(3, dtype=torch.int64))
    with pytest.raises(InvalidArgument, match="4-bit patterns"):
        F.pack(torch.tensor([1, 16]))
    with pytest.raises(InvalidArgument, match="packed bytes"):
        F.decode(torch.zeros(2), F.Packed(F.e2m1))
    assert F.Packed(F.e2m1).stored_shape((3, 8)) == (3, 4) and repr(F.Packed(F.e2m1)) == "e2m1x2(low_first)"


# ------------------------------------------------------------------ E2M1 and E4M3 rounding

def _grid(fmt):
    """Every finite value of fmt, ascending (both zeros as one)."""
    v = F.from_bits(torch.arange(1 << fmt.bits), fmt)
    return torch.unique(v[torch.isfinite(v)])


def _ml(x: torch.Tensor, fmt) -> torch.Tensor:
    """ml_dtypes' cast of float32-exact values (it rounds a float32 once, nearest-even)."""
    dt = {"e2m1": ml_dtypes.float4_e2m1fn, "e4m3fn": ml_dtypes.float8_e4m3fn}[fmt.name]
    x32 = x.to(torch.float32).numpy()
    assert np.array_equal(x32.astype(np.float64), x.numpy()), "inputs must be float32 values"
    return torch.from_numpy(x32.astype(dt).astype(np.float64))


def _values_ties_and_neighbours(fmt):
    v = _grid(fmt)
    mid = (v[:-1] + v[1:]) / 2
    return v, mid, torch.cat([v, mid, F.next_down(mid, F.fp32), F.next_up(mid, F.fp32)])


def test_e2m1_has_15_values_and_14_ties():
    v, mid, _ = _values_ties_and_neighbours(F.e2m1)
    assert v.tolist() == [-6, -4, -3, -2, -1.5, -1, -0.5, 0, 0.5, 1, 1.5, 2, 3, 4, 6]
    assert mid.numel() == 14


@pytest.mark.parametrize("fmt", [F.e2m1, F.e4m3fn], ids=lambda f: f.name)
def test_every_value_tie_and_tie_neighbour_rounds_as_ml_dtypes(fmt):
    """The quantizers' element rounding (RN-even, saturating) and the rounding interval the
    codes are checked against (scale 1, so x/scale is x), on every value, every tie and the
    float32 neighbours of each tie."""
    _, _, x = _values_ties_and_neighbours(fmt)
    want = _ml(x, fmt)
    assert torch.equal(F.round(x, fmt, "rne", "saturate"), want)
    one = torch.ones_like(x)
    _, _, lo, hi = Q.code_bounds(x, x, one, fmt, fmt.max_finite, INTERP)
    assert torch.equal(lo, want) and torch.equal(hi, want)


def test_e2m1_ties_go_to_the_even_code_and_ties_away_lands_outside():
    v, mid, _ = _values_ties_and_neighbours(F.e2m1)
    got = F.round(mid, F.e2m1, "rne", "saturate")
    assert bool(((F.to_bits(got, F.e2m1) & 1) == 0).all())          # even significand
    away = torch.where(mid > 0, v[1:], v[:-1])
    differs = away != got
    # 0.25, 1.25, 2.5 and 5 (and their negatives) round toward zero under RN-even
    assert sorted(mid[differs].abs().unique().tolist()) == [0.25, 1.25, 2.5, 5.0]
    _, _, lo, hi = Q.code_bounds(mid, mid, torch.ones_like(mid), F.e2m1, 6.0, INTERP)
    assert not bool(((away >= lo) & (away <= hi))[differs].any())


def test_e2m1_saturates_past_six():
    """Our rule, not a library's: past 6 (the tie at 7 included) every value is 6."""
    x = t64([6.0, 6.5, 7.0, 7.5, 8.0, 1e30, -7.0, -1e30])
    assert F.round(x, F.e2m1, "rne", "saturate").tolist() == [6, 6, 6, 6, 6, 6, -6, -6]
    _, _, lo, hi = Q.code_bounds(x, x, torch.ones_like(x), F.e2m1, 6.0, INTERP)
    assert lo.tolist() == hi.tolist() == [6, 6, 6, 6, 6, 6, -6, -6]


def _nvfp4_site(amax: torch.Tensor):
    """An NVFP4 quantizer whose blocks of 16 have the given amax, tensor scale given as 1."""
    ctx = Context(profile=INTERP)
    x = torch.zeros(amax.numel(), 16, dtype=torch.float64)
    x[:, 0] = amax
    t = Tracked(x.reshape(1, -1), F.fp32, FM.Form(), ctx)
    one = Tracked(torch.ones(1, dtype=torch.float64), F.fp32, FM.Form(), ctx)
    return MX.quantize_nvfp4(t, tensor_scale=one).quantizer


def test_every_e4m3_value_and_tie_as_an_nvfp4_block_scale():
    """S = RN_e4m3(clamp(fl32(fl32(amax/6)/ts), 2^-6, 448)) with ts = 1 and amax = 6r (so the
    fp32 quotients are r exactly), r every e4m3 value, tie and tie neighbour: the
    admissible block scale is the single value ml_dtypes gives for clamp(r)."""
    v, mid, near = _values_ties_and_neighbours(F.e4m3fn)
    r = torch.cat([v, mid])
    r = r[r > 0]
    amax = r * 6
    assert torch.equal(F.round(amax, F.fp32), amax) and torch.equal(F.round(amax / 6, F.fp32), r)
    q = _nvfp4_site(amax)
    one = torch.ones(1, dtype=torch.float64)
    _, _, s_lo, s_hi = q.block_scale_range(one, one)
    want = _ml(r.clamp(2.0 ** -6, 448.0), F.e4m3fn)
    assert torch.equal(s_lo[0], want) and torch.equal(s_hi[0], want)
    # a tie's float32 neighbours (6r is no fp32 value there): the cast of the quotient itself
    near = near[near > 0]
    _, _, s_lo, s_hi = MX.nvfp4_block_scales(near, near)
    want = _ml(near.clamp(2.0 ** -6, 448.0), F.e4m3fn)
    assert torch.equal(s_lo, want) and torch.equal(s_hi, want)


# ------------------------------------------------------------------ E8M0 scale rules

def _fp32_amaxes(fmt):
    """fp32 amax values reaching every E8M0 exponent: per binade 2^k (k = -149..127) the
    power, its float32 neighbours and 1.5·2^k; fmax·2^j and its float32 neighbours (the
    round-up rule's edges); zero."""
    out = [0.0]
    for k in range(-149, 128):
        p = 2.0 ** k
        p32 = np.float32(p)
        out += [p, float(np.nextafter(p32, np.float32(np.inf))), float(np.nextafter(p32, np.float32(0)))]
        if k > -149:
            out.append(1.5 * p)
    for j in range(-160, 128):
        m = fmt.max_finite * 2.0 ** j
        if 2.0 ** -149 <= m < 3.4e38:
            m32 = np.float32(m)
            out += [float(m32), float(np.nextafter(m32, np.float32(np.inf))), float(np.nextafter(m32, np.float32(0)))]
    a = torch.tensor(sorted(set(v for v in out if 0 <= v < 3.5e38)), dtype=torch.float64)
    return a[torch.isfinite(a) & (F.round(a, F.fp32) == a)]


def _floor_rule(a: float, fmt) -> int:
    if a == 0:
        return -127
    return max(-127, min(127, math.frexp(a)[1] - 1 - fmt.emax))


def _ceil_of_log2(q: Fraction) -> int:
    """The least n with 2^n >= q > 0, in exact rational arithmetic."""
    n = q.numerator.bit_length() - q.denominator.bit_length()
    while Fraction(2) ** n < q:
        n += 1
    while Fraction(2) ** (n - 1) >= q:
        n -= 1
    return n


def _ceil_rule(a: float, fmt, quotient: str) -> int:
    """ceil(log2(amax / fmax)) of the exact quotient, or of its float32 rounding (what a
    kernel computes)."""
    if a == 0:
        return -127
    q = Fraction(a) / Fraction(fmt.max_finite)
    if quotient == "fp32":
        d = float(np.float32(a) / np.float32(fmt.max_finite))      # one correctly rounded division
        if d == 0:
            return -127
        q = Fraction(d)
    return max(-127, min(127, _ceil_of_log2(q)))


@pytest.mark.parametrize("fmt", [F.e4m3fn, F.e5m2, F.e2m1], ids=lambda f: f.name)
@pytest.mark.parametrize("rule", MX.MX_RULES)
def test_scale_rule_on_every_e8m0_exponent_an_fp32_amax_gives(fmt, rule):
    a = _fp32_amaxes(fmt)
    exact = MX.mx_exponent(a, fmt, rule)
    if rule == "floor":
        want = torch.tensor([_floor_rule(v, fmt) for v in a.tolist()], dtype=torch.float64)
        kernel = want                             # the exponent bits give the floor exactly
        top = 127 - fmt.emax
    else:
        want = torch.tensor([_ceil_rule(v, fmt, "exact") for v in a.tolist()], dtype=torch.float64)
        kernel = torch.tensor([_ceil_rule(v, fmt, "fp32") for v in a.tolist()], dtype=torch.float64)
        top = math.ceil(math.log2(float(np.finfo(np.float32).max) / fmt.max_finite))
    assert torch.equal(exact, want)
    # every exponent from -127 to the largest an fp32 amax reaches, each one
    assert sorted(set(want.tolist())) == list(range(-127, top + 1))
    # log2 of what the rule takes it of (amax; the quotient amax / fmax) is exact at a power
    # of two and cannot round onto an integer 2^-10 away from one; the quotient is exact
    # only after a correctly rounded division
    m, _ = torch.frexp(a if rule == "floor" else a / fmt.max_finite)
    inside = (m > 0.5 + 2.0 ** -10) & (m < 1 - 2.0 ** -10)
    for prof in (INTERP, H200):
        exact_div = rule == "floor" or prof.model("div").a <= 0.5
        far = inside | ((m == 0.5) & exact_div)
        lo, hi = MX.mx_exponent_range(a, a, fmt, rule, prof)
        assert bool(((lo <= kernel) & (kernel <= hi)).all()), prof.name
        # a log2 that flushes a quotient that may be subnormal gives -127 (the profile's ftz)
        sub = (a / fmt.max_finite < 2 * F.fp32.min_normal) if (rule == "ceil" and prof.ftz) else torch.zeros_like(far)
        assert bool((hi - lo <= 1)[~sub].all())
        # one admissible exponent away from the edges where an fp32 log2 may round onto an
        # integer
        one = far & ~sub
        assert int(one.sum()) > a.numel() // 4
        assert torch.equal(lo[one], hi[one]) and torch.equal(lo[one], kernel[one])
    # the scale is the E8M0 byte E + 127
    assert torch.equal(F.to_bits(torch.exp2(kernel), F.e8m0), (kernel + 127).to(torch.int64))
