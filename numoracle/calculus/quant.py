"""Block-scaled quantizers in the error calculus (docs/design.md §4.5).

A per-token-group quantizer splits the last axis into groups of ``group``
contiguous values and, per group, computes a scale from the group's absolute
maximum and codes ``RN_fmt(clamp(x / scale, ±fmax))``.  Two facts shape how a
kernel is judged:

* the scale is a *choice* a correct kernel makes within a small set (the fp32
  division ``amax / fmax`` is correctly rounded or not, per the math profile;
  with UE8M0 the power of two comes from fp32 ``log2``, whose rounding can
  land exactly on an integer just above a power of two, so a correct kernel
  may pick the power of two *below* the real scale and clamp);
* once the kernel has chosen its scale, every code is determined up to the
  fp32 division ``x / scale`` and one fp8 rounding (ties to even, saturating).

So the check is in two steps: the kernel's stored scale must lie in the
*admissible* set derived from the enclosure of the group's amax; then,
**conditioned on that stored scale**, each code must lie in the rounding
interval of ``clamp(fl32(x / scale))``.  Functions here are pure and
vectorised over float64 tensors (``admissible_scales``, ``code_bounds``);
``quantize_group`` is the reference-language building block, returning the
codes and scales outputs (judged by ``numoracle.oracles.quantizer``) and the
dequantized value as a tracked tensor for downstream use (a matmul after the
quantizer), carrying the quantization error as the quantizer's own symbol.

Scale rules (docs/operators.md row 12, change pair 14):
``"fp32"``  scale = max(amax, eps) / fmax             (the floor is on absmax)
``"ue8m0"`` scale = 2^ceil(log2(max(amax / fmax, eps))) (the floor is on the
            scale, before the power-of-two round-up)
eps is rounded to fp32 as the kernel's fp32 literal / argument is.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from .. import formats as F
from ..errors import InvalidArgument
from . import form as FM
from .tracked import Tracked, _fmt_arg, any_of

Tensor = torch.Tensor
SCALE_RULES = ("fp32", "ue8m0")
# vLLM's fp8 maxima: e4m3fn's own 448; on e4m3fnuz (ROCm) it uses 224, not 240.
DEFAULT_FMAX = {"e4m3fn": 448.0, "e4m3fnuz": 224.0, "e5m2": 57344.0}
_F64_REL = 2.0 ** -50          # slack for float64 evaluation of one quotient / log2

ASSUMPTIONS = (
    "quantizer codes are judged conditioned on the kernel's stored scales (docs/design.md §4.5)",
    "UE8M0 scales: log2 of a power of two and exp2 of an integer are exact (lg2/ex2 and numpy)",
)


def _fp32_scalar(v: float) -> float:
    return F.round_scalar(v, F.fp32)


def fmax_for(fmt: F.Format, fmax=None) -> float:
    if fmax is not None:
        return float(fmax)
    if fmt.name not in DEFAULT_FMAX:
        raise InvalidArgument(f"quantize_group: no default fp8 max for {fmt}; pass fmax=... "
                              f"(expected one of {sorted(DEFAULT_FMAX)} or an explicit fmax).")
    return DEFAULT_FMAX[fmt.name]


# --------------------------------------------------------------------------- pure intervals

def div_interval(num_lo: Tensor, num_hi: Tensor, den_lo: Tensor, den_hi: Tensor, div_ulps: float):
    """The fp32 values a kernel's ``n / d`` (fp32 operands, positive d) can
    produce for n in [num_lo, num_hi], d in [den_lo, den_hi]: the exact
    quotient's enclosure widened by the division's error (``div_ulps`` ulps of
    the result, 0.5 = correctly rounded), restricted to fp32 values."""
    if den_lo is den_hi:
        # one (positive) denominator: the quotient grows with the numerator.  Two float64
        # divisions per element instead of four, and no stacked copy (a GPU's float64
        # division is slow: these were most of a quantizer verdict's time on the H200)
        qlo, qhi = num_lo / den_lo, num_hi / den_lo
    else:
        cands = torch.stack([num_lo / den_lo, num_lo / den_hi, num_hi / den_lo, num_hi / den_hi])
        qlo = cands.amin(0)
        qhi = cands.amax(0)
    qlo = qlo - qlo.abs() * _F64_REL
    qhi = qhi + qhi.abs() * _F64_REL
    if div_ulps <= 0.5:
        return F.round(qlo, F.fp32), F.round(qhi, F.fp32)
    big = torch.maximum(qlo.abs(), qhi.abs())
    err = div_ulps * F.ulp(big, F.fp32)
    return F.round(qlo - err, F.fp32, "up"), F.round(qhi + err, F.fp32, "down")


def _is_pow2(v: Tensor) -> Tensor:
    return F.power_of_two(v) & (v > 0)


def _ceil_log2_range(s_lo: Tensor, s_hi: Tensor, log2_ulps: float):
    """Integers ceil(L) a kernel can reach where L = fp32 log2(s), s in
    [s_lo, s_hi] (fp32, positive): L within ``log2_ulps`` ulps (at least the
    fp32 rounding) of the exact log2, except at an exact power of two, where
    L is exact and ceil does not bump."""
    a = max(log2_ulps, 0.5)
    out = []
    for s, side in ((s_lo, -1.0), (s_hi, 1.0)):
        l2 = torch.log2(s)
        exact = _is_pow2(s)
        err = a * F.ulp(l2.abs(), F.fp32) + l2.abs() * _F64_REL + 1e-300
        n = torch.ceil(l2 + side * err)
        out.append(torch.where(exact, torch.round(l2), n))
    return out[0], out[1]


def _floor_log2_range(s_lo: Tensor, s_hi: Tensor, log2_ulps: float):
    """Integers floor(L) a kernel can reach where L = fp32 log2(s), s in [s_lo, s_hi]
    (positive): the mirror of ``_ceil_log2_range``.  A kernel that reads the exponent
    bits gets the exact floor, which lies in the range too."""
    a = max(log2_ulps, 0.5)
    out = []
    for s, side in ((s_lo, -1.0), (s_hi, 1.0)):
        l2 = torch.log2(s)
        exact = _is_pow2(s)
        err = a * F.ulp(l2.abs(), F.fp32) + l2.abs() * _F64_REL + 1e-300
        n = torch.floor(l2 + side * err)
        out.append(torch.where(exact, torch.round(l2), n))
    return out[0], out[1]


def admissible_scales(amax_lo: Tensor, amax_hi: Tensor, fmax: float, rule: str, eps: float, profile):
    """(lo, hi, pow2): the interval of scales a correct kernel may store for a
    group whose amax lies in [amax_lo, amax_hi]; ``pow2`` says whether the
    stored scale must also be a power of two (UE8M0)."""
    if rule not in SCALE_RULES:
        raise InvalidArgument(f"scale_rule={rule!r}: expected one of {SCALE_RULES}.")
    eps32 = _fp32_scalar(eps)
    fm = torch.full_like(amax_lo, float(fmax))
    div_ulps = profile.model("div").a
    if rule == "fp32":
        num_lo, num_hi = amax_lo.clamp(min=eps32), amax_hi.clamp(min=eps32)
        lo, hi = div_interval(num_lo, num_hi, fm, fm, div_ulps)
        return lo, hi, False
    dlo, dhi = div_interval(amax_lo, amax_hi, fm, fm, div_ulps)
    s_lo, s_hi = dlo.clamp(min=eps32), dhi.clamp(min=eps32)
    n_lo, n_hi = _ceil_log2_range(s_lo, s_hi, profile.model("log2").a)
    return torch.exp2(n_lo), torch.exp2(n_hi), True


def reference_scale(amax: Tensor, fmax: float, rule: str, eps: float) -> Tensor:
    """The ideal scale of a group from its exact amax (the verdict's 'reference')."""
    eps32 = _fp32_scalar(eps)
    if rule == "fp32":
        return amax.clamp(min=eps32) / fmax
    return torch.exp2(torch.ceil(torch.log2((amax / fmax).clamp(min=eps32))))


def code_bounds(x_lo: Tensor, x_hi: Tensor, scale: Tensor, fmt: F.Format, fmax: float, profile):
    """Conditioned on the kernel's scale (positive, finite, broadcast to x):
    (t_lo, t_hi, q_lo, q_hi) where [t_lo, t_hi] encloses clamp(fl32(x / scale),
    ±fmax) for x in [x_lo, x_hi], and [q_lo, q_hi] are the codes its RN-even,
    saturating store to ``fmt`` can give."""
    t_lo, t_hi = div_interval(x_lo, x_hi, scale, scale, profile.model("div").a)
    t_lo, t_hi = t_lo.clamp(-fmax, fmax), t_hi.clamp(-fmax, fmax)
    return t_lo, t_hi, F.round(t_lo, fmt, "rne", "saturate"), F.round(t_hi, fmt, "rne", "saturate")


def groups_of(t: Tensor, group: int) -> Tensor:
    """View [..., K] as [..., K/group, group]."""
    return t.reshape(*t.shape[:-1], t.shape[-1] // group, group)


def per_element(t: Tensor, group: int) -> Tensor:
    """A per-group tensor [..., K/group] repeated over each group's elements."""
    return t.repeat_interleave(group, dim=-1)


# --------------------------------------------------------------------------- the building block

@dataclass
class Quantizer:
    """One quantizer site of a reference program."""
    x: Tracked                # the value quantized (fp32 in the kernel)
    group: int
    fmt: F.Format
    fmax: float
    rule: str
    eps: float
    label: str

    def amax_enclosure(self):
        return amax_enclosure(self.x, self.group)

    def scales(self):
        alo, ahi = self.amax_enclosure()
        return admissible_scales(alo, ahi, self.fmax, self.rule, self.eps, self.x.ctx.profile)

    def ideal_scales(self) -> Tensor:
        return reference_scale(groups_of(self.x.c.abs(), self.group).amax(-1), self.fmax, self.rule, self.eps)


def amax_enclosure(x, group: int) -> tuple:
    """(lo, hi): each group's amax of the enclosure of x.  An exact x (no error term: an input)
    is its own enclosure, and its one amax is both: one reduction over the groups, not two that
    compiled code cannot tell are equal (in Inductor's C++ each is a horizontal reduction per
    group)."""
    if x.form.is_zero():
        a = groups_of(x.c.abs(), group).amax(-1)
        return a, a
    R = x.radius().expand(x.c.shape)
    lo = (x.c.abs() - R).clamp(min=0)
    hi = x.c.abs() + R
    return groups_of(lo, group).amax(-1), groups_of(hi, group).amax(-1)


class QuantOutput:
    """A quantizer output of a reference program (``kind`` "codes" or
    "scales"): judged by ``numoracle.oracles.quantizer`` in two steps, not by
    an acceptance region.  It has the attributes the verdict machinery reads
    of an output (centre ``c``, ``fmt``, an empty ``form``, no ``pre``)."""

    def __init__(self, quantizer, kind: str, fmt: F.Format, c: Tensor, layout: F.Packed | None = None):
        self.quantizer = quantizer
        self.kind = kind
        self.fmt = fmt
        self.c = c
        self.ctx = quantizer.x.ctx
        self.form = FM.Form()
        self.pre = None
        self.taint = quantizer.x.taint
        # packed storage (two fp4 codes per byte): the kernel's tensor has ``stored_shape``
        # and decodes through ``layout``; the judgement is per code, in ``shape``
        self.layout = layout
        self.stored_shape = layout.stored_shape(c.shape) if layout is not None else tuple(c.shape)

    @property
    def shape(self):
        return tuple(self.c.shape)

    def __repr__(self):
        stored = f", stored as {self.layout!r}" if self.layout is not None else ""
        return f"QuantOutput({self.kind}, {self.fmt}, shape={self.shape}{stored})"


class GroupQuant:
    """What ``quantize_group`` returns: ``.codes`` and ``.scales`` (outputs a
    reference program may return, judged in two steps) and ``.dequantized``
    (a tracked fp32 value codes·scale for downstream computation)."""

    def __init__(self, q: Quantizer):
        self.quantizer = q
        ideal = q.ideal_scales()
        self.codes = QuantOutput(q, "codes", q.fmt, (q.x.c / per_element(ideal, q.group)).clamp(-q.fmax, q.fmax))
        self.scales = QuantOutput(q, "scales", F.fp32, ideal)
        self._deq = None

    @property
    def dequantized(self) -> Tracked:
        if self._deq is None:
            self._deq = _dequantized(self.quantizer)
        return self._deq


def quantization_error(ymax: Tensor, slo: Tensor, shi: Tensor, fmt: F.Format, fmax: float, div_ulps: float):
    """Per element (rounding, clamp): bounds on |q·s − y| for a code
    q = RN_fmt(clamp(fl32(y / s), ±fmax)) (saturating) of a kernel value y with
    |y| <= ymax and any scale s in [slo, shi] (element-wise, positive):

    rounding = |y|(u_fmt + d·2^-23) (the fmt rounding of fl32(y/s), the division
    error d ulps), + s·min_subnormal/2 where y/s may be subnormal in fmt, + s·2^-149
    (fp32 underflow of y/s); clamp = |y|(1 + d) − s·fmax where s < amax/fmax lets
    y/s pass fmax (MX's floor rule clamps the largest elements by design).

    The rounding part is a rounding (one variable per element); the clamp is not
    (it always shrinks |y|), so a caller keeps it deterministic."""
    d = max(div_ulps, 0.5) * 2.0 ** -23
    slack = 1 + 2.0 ** -20
    rounding = ymax * (fmt.u + d) * slack
    may_sub = ymax < fmt.min_normal * shi * slack
    rounding = rounding + torch.where(may_sub, shi * fmt.min_subnormal / 2, torch.zeros_like(shi))
    rounding = rounding + shi * 2.0 ** -149
    # slo·fmax is exact in float64 (a power of two or an fp32 value times a short constant)
    clamp = (ymax * (1 + d) * (1 + 2.0 ** -48) - slo * fmax).clamp(min=0)
    return rounding, clamp


def dequantized_value(x: Tracked, rounding: Tensor, clamp: Tensor, ok: Tensor, worst: Tensor,
                      label: str) -> Tracked:
    """x plus a quantizer's error as a tracked fp32 value: the rounding part one symbol
    of the quantizer site (one variable per element: the element roundings are
    independent; their *bound* depends on the block's admissible scales, which every
    output using the block shares through the site), the clamp part deterministic.
    ``ok``: where the scales are finite and positive (certified), per element."""
    ctx = x.ctx
    key = ctx.new_key()
    ctx.symbols[key] = (frozenset((key,)), label)
    shared = dict(x.form.shared)
    shared[key] = FM.Term(rounding, torch.ones_like(rounding))
    form = FM.Form(shared, list(x.form.private), dict(x.form.det))
    if ctx.any(clamp > 0):
        form = FM.add_det(form, f"{label} (clamp at the format's max)", clamp, ctx.condensed)
    ctx.record(label, "range", "fp32", "a finite positive scale per block", ok, worst)
    taint = x.taint if ctx.all(ok) else (~ok if x.taint is None else x.taint | ~ok)
    return Tracked(x.c, F.fp32, form, ctx, taint=taint)


def _dequantized(q: Quantizer) -> Tracked:
    """codes·scale for a per-token-group quantizer (see ``quantization_error``), with
    s over its group's admissible scales."""
    x = q.x
    s_lo, s_hi, _ = q.scales()
    slo, shi = per_element(s_lo, q.group), per_element(s_hi, q.group)
    ymax = x.c.abs() + x.radius().expand(x.c.shape)
    rounding, clamp = quantization_error(ymax, slo, shi, q.fmt, q.fmax, x.ctx.profile.model("div").a)
    label = x.ctx.label(f"quantize to {q.fmt} per group of {q.group} ({q.rule} scale)")
    ok = per_element(torch.isfinite(s_hi) & (s_lo > 0), q.group)
    return dequantized_value(x, rounding, clamp, ok, shi, label)


def quantize_group(x: Tracked, group: int, fmt="e4m3fn", scale_rule: str = "fp32", *,
                   fmax=None, eps: float = 1e-10) -> GroupQuant:
    """Per-token-group quantization of ``x`` (fp32 in the kernel) along its
    last axis, ``group`` contiguous values per scale.  See the module text for
    the scale rules; codes are RN-even with saturation at ±fmax."""
    if not isinstance(x, Tracked):
        raise InvalidArgument(f"quantize_group takes a tracked tensor (a reference program's value), "
                              f"got {type(x).__name__}.")
    if x.fmt is not F.fp32:
        raise InvalidArgument(f"quantize_group quantizes fp32 values (the kernel widens before the "
                              f"amax); got {x.fmt}: add .to(fp32) first.")
    fmt = _fmt_arg(fmt)
    if fmt.bits != 8 or not fmt.signed:
        raise InvalidArgument(f"quantize_group: fmt={fmt} is not a signed fp8 format (e4m3fn, e4m3fnuz, e5m2).")
    if scale_rule not in SCALE_RULES:
        raise InvalidArgument(f"scale_rule={scale_rule!r}: expected one of {SCALE_RULES}.")
    group = int(group)
    K = x.c.shape[-1] if x.c.ndim else 0
    if group <= 0 or K % group:
        raise InvalidArgument(f"quantize_group: group={group} must divide the last axis ({K}); "
                              f"pad the input or choose a group size that divides it.")
    fm = fmax_for(fmt, fmax)
    if not 0 < fm <= fmt.max_finite:
        raise InvalidArgument(f"fmax={fm} must lie in (0, {fmt.max_finite}] for {fmt}.")
    if not (eps > 0 and math.isfinite(eps)):
        raise InvalidArgument(f"eps={eps!r}: the scale floor must be a positive finite number (vLLM: 1e-10).")
    label = x.ctx.label(f"quantize_group({group}, {fmt}, {scale_rule})")
    return GroupQuant(Quantizer(x, group, fmt, fm, scale_rule, float(eps), label))


# --------------------------------------------------------------------------- block-scaled GEMM

def block_scaled_matmul(a: Tracked, b: Tracked, a_s: Tracked, b_s: Tracked, *, group_n: int, group_k: int,
                        acc="fp32", min_tile: int = 32) -> Tracked:
    """C[m, n] = sum_g a_s[m, g] * b_s[n // group_n, g] * sum_{k in group g} a[m, k] * b[n, k]
    for fp8 codes a [M, K], b [N, K] and fp32 scales a_s [M, K/group_k], b_s [ceil(N/group_n),
    K/group_k], in the order a block-scaled GEMM computes it (vLLM's w8a8_block_fp8_matmul,
    docs/design.md §4.5): per K tile of T columns, the tile's dot of the codes accumulated in
    ``acc``, times the tile's A scale (an fp32 rounding), times its B scale (another), added
    to an fp32 accumulator.  T is any divisor of group_k of at least ``min_tile`` (the
    kernel's BLOCK_K: NVIDIA's fp8 dot takes K tiles of 32 or more), tiles are added in any
    order (split-K partials summed on the host included), the last multiply may be fused
    with the add.  Returns the fp32 accumulator (cast it to the store format with .to).

    Bound: each product passes at most (T - 1) roundings in ``acc`` and 2 + (K/T - 1) in
    fp32, so the error is at most gamma * sum_k |a_k b_k| a_s b_s with gamma the larger of
    the two ends of T's range ((1+u)^(T-1) (1+u32)^(K/T+1) - 1 is convex in T).  The
    certificate covers every intermediate the plan has, per group: the tile dot's partial
    sums (at most S_g = sum_{k in g} |a_k b_k|), dot x a_scale (S_g a_s), x b_scale
    (S_g a_s b_s) and the accumulator; an overflow of dot x a_scale that the B scale would
    bring back makes the element uncertified, never accepted or rejected.

    a, b, a_s and b_s must be the kernel's inputs as loaded (values known exactly): the
    underflow bound uses that a non-zero tile dot of codes is at least the product of the
    two formats' smallest subnormals (every partial sum is a multiple of it)."""
    from .ops import _fp64_sum_slack, gamma_bound
    from .tracked import underflow_threshold
    for name, t in (("a", a), ("b", b), ("a_s", a_s), ("b_s", b_s)):
        if not isinstance(t, Tracked) or not t.form.is_zero():
            raise InvalidArgument(f"block_scaled_matmul: {name} must be an input of the program (the codes and "
                                  f"scales as the kernel loads them, known exactly); got a computed value.")
    acc = _fmt_arg(acc)
    ctx = a.ctx
    if a.c.ndim != 2 or b.c.ndim != 2 or a.c.shape[1] != b.c.shape[1]:
        raise InvalidArgument(f"block_scaled_matmul: a [M, K] and b [N, K] must share K; got {a.shape} and "
                              f"{b.shape}.")
    M, K = a.c.shape
    N = b.c.shape[0]
    group_n, group_k = int(group_n), int(group_k)
    if group_k <= 0 or K % group_k:
        raise InvalidArgument(f"block_scaled_matmul: group_k={group_k} must divide K={K}.")
    G = K // group_k
    if tuple(a_s.c.shape) != (M, G) or tuple(b_s.c.shape) != (-(-N // group_n), G):
        raise InvalidArgument(f"block_scaled_matmul: a_s must be [{M}, {G}] and b_s [{-(-N // group_n)}, {G}]; "
                              f"got {a_s.shape} and {b_s.shape}.")
    f32 = F.fp32
    u_d, u = acc.u, f32.u
    t_lo = min(group_k, min_tile)

    def log_growth(T):
        return (T - 1) * math.log1p(u_d) + (K // T + 1) * math.log1p(u)

    tiles = [t for t in {t_lo, group_k} if K % t == 0] or [group_k]
    gamma = max(math.expm1(log_growth(T)) for T in tiles)
    var_depth = max((T - 1) * u_d ** 2 + (K // T + 1) * u ** 2 for T in tiles)
    g_dot = gamma_bound(group_k - 1, u_d)                               # a tile's partial sums
    g_as = math.expm1((group_k - 1) * math.log1p(u_d) + math.log1p(u))  # ... times a_scale
    g_bs = math.expm1((group_k - 1) * math.log1p(u_d) + 2 * math.log1p(u))
    # a non-zero tile dot is a multiple of lb (see above), so dot x a_s is normal where
    # lb a_s >= min_normal; x b_s (or its FMA with the add) is safe above the threshold
    lb = a.repr_fmt.min_subnormal * b.repr_fmt.min_subnormal
    thr2 = underflow_threshold(f32.precision, f32.precision, f32)
    eta = f32.min_subnormal / 2
    per_group_tiles = group_k // t_lo

    rows_n = torch.arange(N, device=b.c.device) // group_n
    c = torch.zeros((M, N), dtype=torch.float64, device=a.c.device)
    s_tot = torch.zeros_like(c)
    tiny = torch.zeros_like(c)
    ok_dot = torch.ones_like(c, dtype=torch.bool)
    ok_as, ok_bs = ok_dot.clone(), ok_dot.clone()
    worst = [torch.zeros_like(c) for _ in range(3)]
    for g in range(G):
        cols = slice(g * group_k, (g + 1) * group_k)
        ag, bg = a.c[:, cols], b.c[:, cols]
        d = ag @ bg.T
        sg = ag.abs() @ bg.abs().T
        sa = a_s.c[:, g:g + 1].abs()                       # [M, 1]
        sb = b_s.c[rows_n, g].abs()[None, :]               # [1, N]
        c = c + d * a_s.c[:, g:g + 1] * b_s.c[rows_n, g][None, :]
        m_as, m_bs = sg * sa, sg * sa * sb
        s_tot = s_tot + m_bs
        ok_dot &= sg * (1 + g_dot) <= acc.max_finite
        ok_as &= m_as * (1 + g_as) <= f32.max_finite
        ok_bs &= m_bs * (1 + g_bs) <= f32.max_finite
        worst = [torch.maximum(worst[0], sg), torch.maximum(worst[1], m_as), torch.maximum(worst[2], m_bs)]
        t1 = (lb * sa > 0) & (lb * sa < f32.min_normal)
        t2 = (lb * sa * sb > 0) & (lb * sa * sb * (1 - u) < thr2)
        tiny = tiny + per_group_tiles * (t1.to(torch.float64) + t2.to(torch.float64))
    ok_acc = s_tot * (1 + gamma) <= f32.max_finite
    # the matmul's own label names the tile dots' accumulation format: numoracle.plan reads the
    # site recorded under it (the fp32 accumulator, the matmul's value) as the reference's one dot
    label = ctx.label(f"block-scaled fp8 matmul over K={K} ({acc} tile dots, group {group_n}x{group_k}, K tiles "
                      f"of {t_lo}..{group_k})")
    sites = [(ctx.label(f"block-scaled matmul: {acc} tile dot of the codes (K tile <= {group_k})"), str(acc),
              acc.max_finite, ok_dot, worst[0]),
             (ctx.label("block-scaled matmul: tile dot x a_scale"), "fp32", f32.max_finite, ok_as, worst[1]),
             (ctx.label("block-scaled matmul: tile dot x a_scale x b_scale"), "fp32", f32.max_finite, ok_bs,
              worst[2]),
             (label, "fp32", f32.max_finite, ok_acc, s_tot)]
    ok = ok_dot & ok_as & ok_bs & ok_acc
    for site, fmt_name, lim, ok_i, w in sites:
        ctx.record(site, "range", fmt_name, f"|value| <= {lim:.6g}", ok_i, w)
    key = ctx.new_key()
    fm = FM.add_private(FM.Form(), FM.Entry(gamma * s_tot, var_depth * (s_tot * (1 + gamma)) ** 2,
                                            frozenset((key,)), label), ctx.condensed)
    if ctx.any(tiny > 0):
        fm = FM.add_det(fm, f"{label} (underflow)", tiny * (eta * (1 + gamma)), ctx.condensed)
    # the centre: K products and two scalings per term in float64
    fm = _fp64_sum_slack(fm, s_tot, K + 2, ctx)
    taint = None if ctx.all(ok) else ~ok
    inputs_taint = _row_col_taint(a, b, a_s, b_s, rows_n)
    if inputs_taint is not None:
        taint = inputs_taint if taint is None else taint | inputs_taint
    return Tracked(c, f32, fm, ctx, taint=taint)


def _row_col_taint(a, b, a_s, b_s, rows_n):
    """Outputs depending on a tainted input (non-finite, zeroed): row m of a or a_s, row n of b,
    its scales' row."""
    if all(t.taint is None for t in (a, b, a_s, b_s)):
        return None
    M, N = a.c.shape[0], b.c.shape[0]
    rows = torch.zeros((M, 1), dtype=torch.bool, device=a.c.device)
    cols = torch.zeros((1, N), dtype=torch.bool, device=a.c.device)
    for t, side in ((a, "r"), (a_s, "r"), (b, "c")):
        if t.taint is not None:
            m = any_of(t.taint.expand(t.c.shape), -1)
            if side == "r":
                rows = rows | m[:, None]
            else:
                cols = cols | m[None, :]
    if b_s.taint is not None:
        cols = cols | any_of(b_s.taint.expand(b_s.c.shape), -1)[rows_n][None, :]
    return rows | cols
