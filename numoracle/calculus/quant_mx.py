"""MX (OCP Microscaling) and NVFP4 quantizers in the error calculus (docs/design.md §4.5).

**MX.** Blocks of ``block`` (32) contiguous values along the last axis share a scale
X = 2^E, stored as E8M0 (the byte E + 127); the elements are e4m3fn, e5m2 or e2m1
codes ``RN_fmt(clamp(x / X, ±fmax))``, ties to even, saturating.  Two scale rules:

``"floor"`` (OCP MX v1.0)  E = floor(log2 amax) − emax_elem: the block's largest
                           elements can pass fmax and are clamped to it;
``"ceil"`` (round-up)      E = ceil(log2(fl32(amax / fmax))): none passes fmax
                           (up to the division's rounding, which RN absorbs).

E is clamped to E8M0's [−127, 127]: an all-zero block gets 2^−127.  A kernel that
reads the exponent bits gets E exactly; one that calls fp32 ``log2`` may land one off
next to a power of two, which the profile's log2 error admits (as for UE8M0).

**NVFP4.** Blocks of 16 e2m1 codes under two scales: an fp32 tensor scale
``ts = fl32(max(amax_tensor, eps) / (448·6))`` (computed by the kernel, or an input
of the program), and per block an e4m3 scale
``S = RN_e4m3(clamp(fl32(fl32(amax / 6) / ts), 2^-6, 448))`` - a rounded, not a
power-of-two, scale; the codes are ``RN_e2m1(clamp(fl32(x / fl32(ts·S)), ±6))``.
The floor 2^-6 (e4m3's smallest normal) keeps S positive for zero blocks.

**Judgement** is the two-step one of ``calculus.quant`` with one more level: the
tensor scale must be admissible from the enclosure of the tensor's amax; each block
scale, **conditioned on the kernel's stored tensor scale**, from its block's amax;
each code, conditioned on the stored block and tensor scales, must lie in the
rounding interval of x/scale.  A stored scale that is not finite and positive leaves
what depends on it unjudged (uncertified); the scale itself is rejected.

Codes of a 4-bit format may be stored packed two per byte (``formats.Packed``): the
output then has the bytes' shape in the kernel and is judged per code.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from .. import formats as F
from ..errors import InvalidArgument
from . import quant as Q
from .tracked import Tracked, _fmt_arg, any_of

Tensor = torch.Tensor

MX_RULES = ("floor", "ceil")
MX_ELEMENTS = ("e4m3fn", "e5m2", "e2m1")
E8M0_MIN, E8M0_MAX = -127, 127
NVFP4_SCALE_MAX = 448.0            # e4m3fn's largest value
NVFP4_SCALE_FLOOR = 2.0 ** -6      # e4m3fn's smallest normal
NVFP4_ELEMENT_MAX = 6.0            # e2m1's largest value
NVFP4_TENSOR_DIVISOR = NVFP4_SCALE_MAX * NVFP4_ELEMENT_MAX   # 2688, exact in fp32



# --------------------------------------------------------------------------- pure functions

def mx_exponent_range(amax_lo: Tensor, amax_hi: Tensor, fmt: F.Format, rule: str, profile):
    """(E_lo, E_hi): the shared exponents a correct kernel may store for a block whose
    amax lies in [amax_lo, amax_hi] (float64 tensors of integers in [−127, 127])."""
    log2_ulps = profile.model("log2").a
    if rule == "floor":
        # below 2^(emax − 127) every amax gives E = −127 after the clamp: a power of two
        # there keeps log2 exact
        at_least = 2.0 ** (fmt.emax + E8M0_MIN)
        n_lo, n_hi = Q._floor_log2_range(amax_lo.clamp(min=at_least), amax_hi.clamp(min=at_least), log2_ulps)
        e_lo, e_hi = n_lo - fmt.emax, n_hi - fmt.emax
    elif rule == "ceil":
        fm = torch.full_like(amax_lo, fmt.max_finite)
        d_lo, d_hi = Q.div_interval(amax_lo, amax_hi, fm, fm, profile.model("div").a)
        at_least = 2.0 ** E8M0_MIN
        e_lo, e_hi = Q._ceil_log2_range(d_lo.clamp(min=at_least), d_hi.clamp(min=at_least), log2_ulps)
        if profile.ftz:
            # a log2 that flushes a subnormal quotient to zero gives -inf: the clamp's -127
            e_lo = torch.where(d_lo < F.fp32.min_normal, torch.full_like(e_lo, E8M0_MIN), e_lo)
    else:
        raise InvalidArgument(f"scale_rule={rule!r}: expected one of {MX_RULES}.")
    return e_lo.clamp(E8M0_MIN, E8M0_MAX), e_hi.clamp(E8M0_MIN, E8M0_MAX)


def mx_exponent(amax: Tensor, fmt: F.Format, rule: str) -> Tensor:
    """The exact shared exponent of a block from its exact amax (the reference).  For
    an fp32 amax the float64 quotient amax / fmax (fmax 6, 448 or 57344) is a power of
    two exactly when the real one is, so ceil is exact too."""
    if rule == "floor":
        a = amax.clamp(min=2.0 ** (fmt.emax + E8M0_MIN))
        _, e = torch.frexp(a)
        E = (e.to(torch.float64) - 1) - fmt.emax
    else:
        q = (amax / fmt.max_finite).clamp(min=2.0 ** E8M0_MIN)
        m, e = torch.frexp(q)
        E = torch.where(m == 0.5, e - 1, e).to(torch.float64)
    return E.clamp(E8M0_MIN, E8M0_MAX)


def nvfp4_block_scales(r_lo: Tensor, r_hi: Tensor):
    """(r_lo, r_hi, S_lo, S_hi): fp32 quotients enclosed by [r_lo, r_hi] clamped to
    [2^-6, 448], and the e4m3 block scales their RN-even, saturating cast can give (the
    cast is monotone: the ends' roundings bound it)."""
    r_lo = r_lo.clamp(NVFP4_SCALE_FLOOR, NVFP4_SCALE_MAX)
    r_hi = r_hi.clamp(NVFP4_SCALE_FLOOR, NVFP4_SCALE_MAX)
    return r_lo, r_hi, F.round(r_lo, F.e4m3fn, "rne", "saturate"), F.round(r_hi, F.e4m3fn, "rne", "saturate")


def code_tensors(x: Tracked, y: Tensor, s_el: Tensor, fmt: F.Format, fmax: float, profile):
    """Codes y judged conditioned on the kernel's per-element scale s_el: (centre,
    t_lo, t_hi, q_lo, q_hi, rejected, uncertified, valid), with [t_lo, t_hi] the
    enclosure of clamp(fl32(x / s), ±fmax) and [q_lo, q_hi] its RN-even, saturating
    rounding interval in fmt.  Where s_el is not finite and positive the codes are
    uncertified."""
    valid = torch.isfinite(s_el) & (s_el > 0)
    safe = torch.where(valid, s_el, torch.ones_like(s_el))
    R = x.radius().expand(x.c.shape)
    t_lo, t_hi, q_lo, q_hi = Q.code_bounds(x.c - R, x.c + R, safe, fmt, fmax, profile)
    centre = (x.c / safe).clamp(-fmax, fmax)
    unc = ~valid
    if x.taint is not None:
        unc = unc | x.taint.expand(y.shape)
    rejected = ~((y >= q_lo) & (y <= q_hi)) & ~unc
    return centre, t_lo, t_hi, q_lo, q_hi, rejected, unc, valid


def _block_taint(x: Tracked, block: int) -> Tensor:
    if x.taint is None:
        return torch.zeros(x.c.shape[:-1] + (x.c.shape[-1] // block,), dtype=torch.bool, device=x.c.device)
    return any_of(Q.groups_of(x.taint.expand(x.c.shape), block), -1)


def _check_blocks(x, block: int, who: str) -> int:
    if not isinstance(x, Tracked):
        raise InvalidArgument(f"{who} takes a tracked tensor (a reference program's value), got "
                              f"{type(x).__name__}.")
    if x.fmt is not F.fp32:
        raise InvalidArgument(f"{who} quantizes fp32 values (the kernel widens before the amax); got "
                              f"{x.fmt}: add .to(fp32) first.")
    block = int(block)
    K = x.c.shape[-1] if x.c.ndim else 0
    if block <= 0 or K % block:
        raise InvalidArgument(f"{who}: block={block} must divide the last axis ({K}); pad the input "
                              f"or choose a block size that divides it.")
    return block


def _layout(packed, fmt: F.Format, who: str):
    if packed in (None, False):
        return None
    if fmt.bits != 4:
        raise InvalidArgument(f"{who}: packed={packed!r} packs 4-bit codes; {fmt} codes are stored one "
                              f"per byte: pass packed=None.")
    order = "low_first" if packed is True else packed
    return F.Packed(fmt, order)


# --------------------------------------------------------------------------- MX

@dataclass
class MXQuantizer:
    """One MX quantizer site of a reference program (see the module text)."""
    x: Tracked
    block: int
    fmt: F.Format
    rule: str
    label: str
    layout: F.Packed | None = None
    kinds = ("scales", "codes")

    @property
    def fmax(self) -> float:
        return self.fmt.max_finite

    def amax_enclosure(self):
        return Q.amax_enclosure(self.x, self.block)

    def exponents(self):
        alo, ahi = self.amax_enclosure()
        return mx_exponent_range(alo, ahi, self.fmt, self.rule, self.x.ctx.profile)

    def ideal_scales(self) -> Tensor:
        return torch.exp2(mx_exponent(Q.groups_of(self.x.c.abs(), self.block).amax(-1), self.fmt, self.rule))

    def scale_tensors(self, S: Tensor):
        """(centre, lo, hi, rejected, uncertified) of stored scales S (decoded E8M0)."""
        e_lo, e_hi = self.exponents()
        lo, hi = torch.exp2(e_lo), torch.exp2(e_hi)
        unc = _block_taint(self.x, self.block)
        rejected = ~((S >= lo) & (S <= hi)) & ~unc
        return self.ideal_scales(), lo, hi, rejected, unc

    def code_tensors(self, y: Tensor, S: Tensor):
        s_el = Q.per_element(S, self.block)
        return code_tensors(self.x, y, s_el, self.fmt, self.fmax, self.x.ctx.profile) + (s_el,)

    def dequantized(self) -> Tracked:
        x = self.x
        e_lo, e_hi = self.exponents()
        slo, shi = Q.per_element(torch.exp2(e_lo), self.block), Q.per_element(torch.exp2(e_hi), self.block)
        ymax = x.c.abs() + x.radius().expand(x.c.shape)
        rounding, clamp = Q.quantization_error(ymax, slo, shi, self.fmt, self.fmax, x.ctx.profile.model("div").a)
        label = x.ctx.label(f"quantize to MX {self.fmt} per block of {self.block} ({self.rule} scale)")
        return Q.dequantized_value(x, rounding, clamp, torch.ones_like(ymax, dtype=torch.bool), shi, label)


# --------------------------------------------------------------------------- NVFP4

@dataclass
class NVFP4Quantizer:
    """One NVFP4 quantizer site: e2m1 codes, e4m3 block scales, an fp32 tensor scale
    (computed by the kernel, or ``given``: a tracked input of the program)."""
    x: Tracked
    block: int
    label: str
    layout: F.Packed | None
    given: Tracked | None
    eps: float
    fmt = F.e2m1
    scale_fmt = F.e4m3fn
    fmax = NVFP4_ELEMENT_MAX

    @property
    def kinds(self):
        return ("scales", "codes") if self.given is not None else ("tensor_scale", "scales", "codes")

    def amax_enclosure(self):
        return Q.amax_enclosure(self.x, self.block)

    def _div(self):
        return self.x.ctx.profile.model("div").a

    # ---- the tensor scale
    def tensor_scale_range(self):
        """(lo, hi), shape (1,): the fp32 tensor scales a correct kernel may compute, or
        the given one's enclosure."""
        if self.given is not None:
            c = self.given.c.reshape(-1)[:1]
            R = self.given.radius().reshape(-1)[:1].expand(c.shape)
            return c - R, c + R
        alo, ahi = self.amax_enclosure()
        eps32 = Q._fp32_scalar(self.eps)
        a_lo = alo.reshape(-1).amax().reshape(1).clamp(min=eps32)
        a_hi = ahi.reshape(-1).amax().reshape(1).clamp(min=eps32)
        d = torch.full_like(a_lo, NVFP4_TENSOR_DIVISOR)
        return Q.div_interval(a_lo, a_hi, d, d, self._div())

    def ideal_tensor_scale(self) -> Tensor:
        if self.given is not None:
            return self.given.c.reshape(-1)[:1]
        amax = self.x.c.abs().reshape(-1).amax().reshape(1)
        return amax.clamp(min=Q._fp32_scalar(self.eps)) / NVFP4_TENSOR_DIVISOR

    def tensor_scale_tensors(self, T: Tensor):
        lo, hi = self.tensor_scale_range()
        unc = torch.zeros_like(lo, dtype=torch.bool) if self.x.taint is None else self.x.taint.any().reshape(1)
        rejected = ~((T >= lo) & (T <= hi)) & ~unc
        return self.ideal_tensor_scale(), lo, hi, rejected, unc

    # ---- the block scales
    def block_scale_range(self, ts_lo: Tensor, ts_hi: Tensor):
        """(r_lo, r_hi, S_lo, S_hi): the fp32 quotients fl32(fl32(amax/6)/ts) (clamped to
        [2^-6, 448]) for ts in [ts_lo, ts_hi] (positive), and their e4m3 roundings."""
        alo, ahi = self.amax_enclosure()
        six = torch.full_like(alo, NVFP4_ELEMENT_MAX)
        sb_lo, sb_hi = Q.div_interval(alo, ahi, six, six, self._div())
        if ts_lo is ts_hi:
            r_lo, r_hi = Q.div_interval(sb_lo, sb_hi, ts_lo, ts_lo, self._div())
        else:
            r_lo, r_hi = Q.div_interval(sb_lo, sb_hi, ts_lo.expand(sb_lo.shape), ts_hi.expand(sb_lo.shape),
                                        self._div())
        return nvfp4_block_scales(r_lo, r_hi)

    def _valid_ts(self, T: Tensor):
        valid = torch.isfinite(T) & (T > 0)
        return valid, torch.where(valid, T, torch.ones_like(T))

    def scale_tensors(self, S: Tensor, T: Tensor):
        """Stored block scales S judged conditioned on the stored tensor scale T:
        (centre, r_lo, r_hi, S_lo, S_hi, rejected, uncertified)."""
        valid, ts = self._valid_ts(T)
        r_lo, r_hi, s_lo, s_hi = self.block_scale_range(ts, ts)
        amax = Q.groups_of(self.x.c.abs(), self.block).amax(-1)
        centre = (amax / NVFP4_ELEMENT_MAX / ts).clamp(NVFP4_SCALE_FLOOR, NVFP4_SCALE_MAX)
        unc = _block_taint(self.x, self.block) | ~valid
        rejected = ~((S >= s_lo) & (S <= s_hi)) & ~unc
        return centre, r_lo, r_hi, s_lo, s_hi, rejected, unc

    def ideal_scales(self) -> Tensor:
        amax = Q.groups_of(self.x.c.abs(), self.block).amax(-1)
        return (amax / NVFP4_ELEMENT_MAX / self.ideal_tensor_scale()).clamp(NVFP4_SCALE_FLOOR, NVFP4_SCALE_MAX)

    # ---- the codes
    def code_tensors(self, y: Tensor, S: Tensor, T: Tensor):
        """Codes conditioned on the stored block scales S and tensor scale T: the
        divisor is the kernel's fl32(T·S), a correctly rounded fp32 product."""
        valid, ts = self._valid_ts(T)
        s_el = Q.per_element(S, self.block)
        total = F.round(s_el * ts, F.fp32)           # T·S is exact in float64 (24 + 4 bits)
        total = torch.where(valid.expand(total.shape), total, torch.full_like(total, math.nan))
        return code_tensors(self.x, y, total, self.fmt, self.fmax, self.x.ctx.profile) + (total,)

    def dequantized(self) -> Tracked:
        """The represented value q·S·ts as a tracked value; the bound covers every
        admissible tensor scale and block scale, and the rounding of the divisor
        fl32(ts·S) (2^-24 relative)."""
        x = self.x
        ts_lo, ts_hi = self.tensor_scale_range()
        ok_ts = bool((ts_lo > 0).all()) and bool(torch.isfinite(ts_hi).all())
        lo = ts_lo.clamp(min=F.fp32.min_subnormal)
        _, _, s_lo, s_hi = self.block_scale_range(lo, ts_hi.clamp(min=F.fp32.min_subnormal))
        tot_lo = Q.per_element(s_lo, self.block) * lo * (1 - 2.0 ** -23)
        tot_hi = Q.per_element(s_hi, self.block) * ts_hi * (1 + 2.0 ** -23)
        ymax = x.c.abs() + x.radius().expand(x.c.shape)
        rounding, clamp = Q.quantization_error(ymax, tot_lo, tot_hi, self.fmt, self.fmax, self._div())
        # q·S·ts = q·fl32(ts·S)/(1 + δ), |δ| <= 2^-24: at most (|y| + error)·2^-23 more
        rounding = rounding + (ymax + rounding + clamp) * 2.0 ** -23
        label = x.ctx.label(f"quantize to NVFP4 per block of {self.block} (e4m3 block scale, fp32 tensor scale)")
        ok = torch.full_like(ymax, ok_ts, dtype=torch.bool)
        return Q.dequantized_value(x, rounding, clamp, ok, tot_hi, label)


# --------------------------------------------------------------------------- building blocks

class BlockQuant:
    """What ``quantize_mx`` / ``quantize_nvfp4`` return: the outputs a reference program
    may return (``.codes``, ``.scales`` and, for NVFP4 with a computed tensor scale,
    ``.tensor_scale``: judged in two or three steps) and ``.dequantized`` (the
    represented value as a tracked fp32 value carrying the quantizer's error, for
    computation downstream of the quantizer)."""

    def __init__(self, q):
        self.quantizer = q
        ideal = q.ideal_scales()
        divisor = Q.per_element(ideal, q.block)
        if isinstance(q, NVFP4Quantizer):
            divisor = divisor * q.ideal_tensor_scale()
            self.tensor_scale = (Q.QuantOutput(q, "tensor_scale", F.fp32, q.ideal_tensor_scale())
                                 if q.given is None else None)
            scale_fmt = q.scale_fmt
        else:
            scale_fmt = F.e8m0
        self.codes = Q.QuantOutput(q, "codes", q.fmt, (q.x.c / divisor).clamp(-q.fmax, q.fmax), q.layout)
        self.scales = Q.QuantOutput(q, "scales", scale_fmt, ideal)
        self._deq = None

    @property
    def dequantized(self) -> Tracked:
        if self._deq is None:
            self._deq = self.quantizer.dequantized()
        return self._deq


def quantize_mx(x: Tracked, fmt="e4m3fn", scale_rule: str = "floor", *, block: int = 32,
                packed=None) -> BlockQuant:
    """MX quantization of fp32 ``x`` along its last axis (see the module text)."""
    block = _check_blocks(x, block, "quantize_mx")
    fmt = _fmt_arg(fmt)
    if fmt.name not in MX_ELEMENTS:
        raise InvalidArgument(f"quantize_mx: fmt={fmt} is not an MX element format; expected one of "
                              f"{MX_ELEMENTS}.")
    if scale_rule not in MX_RULES:
        raise InvalidArgument(f"scale_rule={scale_rule!r}: expected one of {MX_RULES} ('floor': OCP MX, "
                              f"'ceil': round-up, no element clamps).")
    layout = _layout(packed, fmt, "quantize_mx")
    label = x.ctx.label(f"quantize_mx({fmt}, {scale_rule}, block {block})")
    return BlockQuant(MXQuantizer(x, block, fmt, scale_rule, label, layout))


def quantize_nvfp4(x: Tracked, *, tensor_scale: Tracked | None = None, block: int = 16,
                   packed="low_first", eps: float = 1e-10) -> BlockQuant:
    """NVFP4 quantization of fp32 ``x`` along its last axis (see the module text)."""
    block = _check_blocks(x, block, "quantize_nvfp4")
    if tensor_scale is not None:
        if not isinstance(tensor_scale, Tracked) or tensor_scale.c.numel() != 1:
            raise InvalidArgument("quantize_nvfp4: tensor_scale must be one tracked fp32 value (an input of "
                                  "the program), or None for the kernel's own amax / (448·6).")
        if tensor_scale.fmt is not F.fp32:
            raise InvalidArgument(f"quantize_nvfp4: the tensor scale is fp32, got {tensor_scale.fmt}.")
        if not tensor_scale.form.is_zero():
            raise InvalidArgument("quantize_nvfp4: a given tensor scale must be exact (an fp32 input of the "
                                  "program, as the kernel receives it); for one the kernel computes, pass "
                                  "tensor_scale=None and return q.tensor_scale.")
    if not (eps > 0 and math.isfinite(eps)):
        raise InvalidArgument(f"eps={eps!r}: the tensor amax floor must be a positive finite number.")
    layout = _layout(packed, F.e2m1, "quantize_nvfp4")
    label = x.ctx.label(f"quantize_nvfp4(block {block})")
    return BlockQuant(NVFP4Quantizer(x, block, label, layout, tensor_scale, float(eps)))


def dequantize(codes: Tracked, scales: Tracked, block: int, tensor_scale: Tracked | None = None) -> Tracked:
    """codes·scale (·tensor_scale) in fp32 for stored block-scaled values (a matmul's MX
    operands): codes [..., K] of any format, scales [..., K/block] (E8M0, e4m3 or fp32)
    repeated over their blocks.  A product of a short code and a power of two (or an
    e4m3 scale) is exact in fp32 while it stays normal, so only underflow and range
    enter; a tensor scale multiplies in fp32 (one rounding)."""
    for name, t in (("codes", codes), ("scales", scales)):
        if not isinstance(t, Tracked):
            raise InvalidArgument(f"dequantize: {name} must be a tracked tensor (an input of the program), "
                                  f"got {type(t).__name__}.")
    block = int(block)
    K = codes.c.shape[-1] if codes.c.ndim else 0
    if block <= 0 or scales.c.shape[-1] * block != K or scales.c.shape[:-1] != codes.c.shape[:-1]:
        raise InvalidArgument(f"dequantize: scales {tuple(scales.c.shape)} do not cover codes "
                              f"{tuple(codes.c.shape)} in blocks of {block} along the last axis; expected "
                              f"scales of shape {tuple(codes.c.shape[:-1]) + (K // max(block, 1),)}.")
    idx = torch.arange(K, device=codes.c.device) // block
    v = codes.to(F.fp32) * scales.to(F.fp32)[..., idx]
    if tensor_scale is not None:
        v = v * tensor_scale.to(F.fp32)
    return v


def after_dot_sites(acc: Tracked, a: Tracked, a_s: Tracked, b: Tracked, b_s: Tracked, block: int) -> Tracked:
    """The certificate of the other plan of an MX matmul (docs/design.md §4.5): each
    ``block``-wide K block's dot of the codes in fp32, times 2^Ea, times 2^Eb, added to the
    accumulator ``acc`` (the fp32 result of the dequantize-first plan, whose region covers
    this plan too while both scalings are exact).  A scaling is exact unless it overflows or
    lands below fp32's subnormal spacing: every fp32 partial sum of the block's code
    products is a multiple of lb = (smallest subnormal of a's format) x (b's), so the scaled
    block dot is exact where lb x 2^E >= 2^-149.  Where dot x 2^Ea may overflow (the partial
    sums are at most S = sum |a_k b_k| over the block) or a scaling may be inexact, the
    element is uncertified (never accepted or rejected): returns ``acc`` so tainted."""
    from .tracked import _or
    ctx = a.ctx
    M, K = a.c.shape
    N, G = b.c.shape[0], K // block
    S = torch.einsum("mgk,ngk->mng", a.c.abs().reshape(M, G, block), b.c.abs().reshape(N, G, block))
    sa, sb = a_s.c[:, None, :], b_s.c[None, :, :]
    scaled = S * sa
    big = scaled.amax(-1)
    over = big <= F.fp32.max_finite
    ctx.record(ctx.label(f"block dot x 2^Ea (scale after the dot, blocks of {block})"), "range", "fp32",
               f"|value| <= {F.fp32.max_finite:.6g}", over, big)
    lb = a.repr_fmt.min_subnormal * b.repr_fmt.min_subnormal
    inexact = (S > 0) & ((lb * sa < F.fp32.min_subnormal) | (lb * sa * sb < F.fp32.min_subnormal))
    exact = ~any_of(inexact, -1)
    # per element, the smallest lb x scale among its inexact blocks (0 where none is)
    low = torch.where(inexact, torch.minimum(lb * sa, lb * sa * sb), torch.full_like(S, math.inf)).amin(-1)
    ctx.record(ctx.label(f"block dot x 2^Ea x 2^Eb exact (scale after the dot, blocks of {block})"), "range",
               "fp32", f"lb x scale >= {F.fp32.min_subnormal:.6g}", exact,
               torch.where(torch.isinf(low), torch.zeros_like(low), low))
    bad = ~(over & exact)
    if not ctx.any(bad):
        return acc
    return Tracked(acc.c, acc.fmt, acc.form, ctx, repr_fmt=acc.repr_fmt, taint=_or(acc.taint, bad))
