"""Reductions, selection and products on tracked tensors (docs/design.md §4.4)."""

from __future__ import annotations

import builtins
import math
from dataclasses import dataclass

import torch

from .. import formats as F
from ..errors import InvalidArgument
from . import form as FM
from . import select as S
from .tracked import Cond, LOG2E, Tracked, all_of, any_of, apply, broadcast_shapes, scale_pow2, _div, ulp_bound_fp32, _as_cond, _ax, _or, _squeeze_axis, _sum_axis, _FP64_SLACK, _OVER_SLACK, _exact_infinity, _unmarked_taint, promote, underflow_threshold
# the reference language calls ops.cat (reference._impl looks its functions up here)
from .tracked import cat  # noqa: F401

Tensor = torch.Tensor
ORDERS = ("any", "sequential", "tree")


def depth(order, n: int) -> int:
    """Roundings a term passes through in a sum of n terms (docs/design.md §4.4)."""
    if n <= 1:
        return 0
    if order in ("any", "sequential"):
        return n - 1
    if order == "tree":
        return math.ceil(math.log2(n))
    if isinstance(order, int) and not isinstance(order, bool) and order >= 1:
        return builtins.min(order, n - 1)
    raise InvalidArgument(f"order={order!r}: expected one of {ORDERS} or a positive int depth "
                          f"(the number of roundings a term passes through).")


def _reduce_form(x: Tracked, axis: int, keepdims: bool) -> FM.Form:
    ctx = x.ctx
    n = x.c.shape[axis]
    shared, aggregated = {}, []
    for k, t in x.form.shared.items():
        extent = t.s.shape[axis] if t.s.ndim >= -axis else 1
        if extent == 1:
            shared[k] = FM.Term(_sum_axis(t.coef, axis, n, keepdims), _squeeze_axis(t.s, axis, keepdims))
        else:
            # independent variables along the axis: their sum is private to the
            # result element, remembering which variables it is made of
            a = t.coef.expand(x.c.shape)
            prov, label = ctx.symbols[k]
            aggregated.append(FM.Entry(a.abs().sum(axis, keepdim=keepdims),
                                       (a * t.s).square().sum(axis, keepdim=keepdims), prov, label))
    private = [FM.Entry(_sum_axis(e.abs, axis, n, keepdims), _sum_axis(e.var, axis, n, keepdims),
                        e.prov, e.label) for e in x.form.private]
    det = {k: _sum_axis(v, axis, n, keepdims) for k, v in x.form.det.items()}
    private, det = FM.normalise(private + aggregated, det, ctx.condensed)
    return FM.Form(shared, private, det)


def _reduce_taint(x: Tracked, axis, keepdims):
    if x.taint is None:
        return None
    return any_of(x.taint.expand(x.c.shape), axis, keepdims)


def gamma_bound(d: int, u: float) -> float:
    """(1 + u)^d - 1: the worst relative error of d roundings in a row.  It is
    below Higham's gamma_d = d u / (1 - d u) and, unlike it, holds for every d
    (a bf16 sum of 256 or more terms has d u >= 1)."""
    return math.expm1(d * math.log1p(u))


def _gamma(ctx, d, u: float, device):
    """``gamma_bound(d, u)``; traced with symbolic sizes, computed on the device from the
    size's symbol (a Python number would freeze the traced call's size into the code)."""
    if ctx.symbolic:
        return F.expm1(torch.ones((), dtype=torch.float64, device=device) * d * math.log1p(u))
    return gamma_bound(d, u)


def _fp64_sum_slack(fm: FM.Form, S: Tensor, terms: int, ctx) -> FM.Form:
    """A float64 centre that sums ``terms`` values, with magnitudes summing to at most S, in
    whatever order a device takes: off by up to ((1 + 2**-53)**terms - 1) S, which
    cancellation can make far more than 2**-50 of the result (a mean near zero).  Since
    |result| <= S, (2**-50 + that) S also holds the centre's last rounding.  (Written as a
    constant times S, what the graph had before as 2**-50 |result|: adding the order's term
    beside it made Inductor tile rms_norm's main loop 32 bf16 lanes wide on this project's
    AVX-512 CPU, 37% slower per verdict.)"""
    g = _gamma(ctx, terms, 2.0 ** -53, S.device)
    return FM.add_det(fm, "float64 centre", (_FP64_SLACK + g) * S, ctx.condensed)


def _in_acc(x: Tracked, acc) -> Tracked:
    """x rounded to the accumulation format ``acc`` where one is given (a sum's terms)."""
    if acc is None:
        return x
    from .tracked import _fmt_arg
    acc = _fmt_arg(acc)
    return x if x.fmt is acc else x.to(acc)


def sum(x: Tracked, axis: int = -1, keepdims: bool = False, order="any", acc=None, ftz=False) -> Tracked:
    """Sum along ``axis`` accumulated in ``acc`` (default: x's format) with the
    given order model.  Worst case gamma_d * sum|x~|, variance proxy
    d u^2 (sum|x~|)^2: per level of the reduction tree the partial sums
    partition the terms, and each term passes at most d roundings.  ``ftz``: the
    additions may flush subnormal terms and results to zero (``_flush_anywhere``)."""
    ctx = x.ctx
    x = _in_acc(x, acc)
    fmt = x.fmt
    axis = _ax(axis, x.ndim)
    n = x.c.shape[axis]
    d = depth(order, n)
    c = x.c.sum(dim=axis, keepdim=keepdims)
    fm = _reduce_form(x, axis, keepdims)
    taint = _reduce_taint(x, axis, keepdims)
    R = x.radius()
    S = (x.c.abs() + R).sum(dim=axis, keepdim=keepdims)
    label = ctx.label(f"{fmt} sum over {ctx.count(n)} ({order} order{', flushing subnormals' if ftz else ''})")
    gamma = _gamma(ctx, d, fmt.u, x.c.device)
    # every partial sum is a sum of a subset of the terms, each through at most d roundings
    ok = S * (1 + gamma) <= fmt.max_finite
    ctx.record(label, "range", str(fmt), f"partial sums <= {fmt.max_finite:.6g}", ok, S)
    if not ctx.all(ok):
        taint = _or(taint, ~ok)
    if d:
        u = fmt.u
        key = ctx.new_key()
        fm = FM.add_private(fm, FM.Entry(gamma * S, d * (u * S * (1 + gamma)) ** 2,
                                         frozenset((key,)), label), ctx.condensed)
        fm = _flush_in_sum(fm, x, axis, keepdims, d, fmt, gamma, label, ctx)
    if ftz:
        fm = _flush_anywhere(fm, c, n, fmt, gamma, label, ctx)
    fm = _fp64_sum_slack(fm, S, n, ctx)
    out = Tracked(c, fmt, fm, ctx, taint=taint)
    return _one_signed_overflow(out, x, axis, keepdims, d)


def _one_signed_overflow(out: Tracked, x: Tracked, axis: int, keepdims: bool, d: int) -> Tracked:
    """A sum (``out``, of the terms ``x``) whose terms are all certainly >= 0 (or all <= 0) and
    whose exact value is past fmt's overflow threshold by more than its d roundings can take
    away, is that infinity, in every order: a partial sum that reaches the threshold is
    infinite and stays so (no term of the other sign), and one that never does ends at
    least (1 - u)^d of the exact sum (every rounding of a non-negative partial sum keeps at
    least 1 - u of it, and each term passes at most d of them).  A term that is a product past
    the range (``Tracked.overflow``) counts as its value: rounded it is that infinity,
    contracted into the add its exact value, and either way the sum is infinite (the squares
    of an RMSNorm row holding bf16's largest value); a square (``Tracked.is_square``) is never below 0, whatever its enclosure (a layer
    norm's (x - mean)^2).  Eager runs only, as ``tracked._certain_overflow``."""
    ctx, fmt = x.ctx, x.fmt
    if ctx.traced or not fmt.has_inf or out.taint is None or ctx.all(~out.taint):
        return out
    R = x.radius()
    lo, hi = x.c - R, x.c + R
    if x.is_square:
        lo = lo.clamp(min=0.0)
    other = _unmarked_taint(x)
    if other is not None:
        lo = torch.where(other, math.nan, lo)     # (NaN fails both sign tests)
        hi = torch.where(other, math.nan, hi)
    # the float64 ends and their float64 sum are each within n 2^-52 of the real ones (d and
    # n are plain sizes in an eager run)
    n = x.c.shape[axis]
    need = F.overflow_threshold(fmt) * _OVER_SLACK * (1.0 + n * 2.0 ** -52) / (1.0 - fmt.u) ** d
    plus = (lo >= 0).all(axis, keepdim=keepdims) & (lo.sum(axis, keepdim=keepdims) >= need)
    minus = (hi <= 0).all(axis, keepdim=keepdims) & (-hi.sum(axis, keepdim=keepdims) >= need)
    inf = plus | minus
    if not ctx.any(inf):
        return out
    ctx.infinities = True
    c = torch.where(plus, math.inf, torch.where(minus, -math.inf, out.c))
    return Tracked(c, fmt, FM.masked(out.form, ~inf), ctx, taint=out.taint & ~inf)


def cumsum(x: Tracked, axis: int = -1, order="any", acc=None) -> Tracked:
    """Inclusive prefix sums along ``axis`` (``tl.cumsum``), accumulated in ``acc`` (default:
    x's format): element j is a sum of the j + 1 terms up to it, each through at most
    ``depth(order, j + 1)`` roundings ("any" covers every scan tree Triton builds), so each
    element is ``sum``'s enclosure of its own prefix: worst case gamma_j * S_j, variance
    proxy d_j (u S_j (1 + gamma_j))^2 with S_j the prefix sum of |x~|."""
    ctx = x.ctx
    x = _in_acc(x, acc)
    fmt = x.fmt
    axis = _ax(axis, x.ndim)
    n = x.c.shape[axis]
    depth(order, 2)                                   # the order model is checked once, for any n
    c = x.c.cumsum(dim=axis)
    fm = _scan_form(x, axis)
    taint = None if x.taint is None else x.taint.expand(x.c.shape).to(torch.int32).cumsum(dim=axis) > 0
    R = x.radius()
    S = (x.c.abs() + R).expand(x.c.shape).cumsum(dim=axis)
    # the depth of each prefix, along the axis: j terms' additions ("any", "sequential"),
    # a tree's ceil(log2(j + 1)), or an int model's min(k, j)
    j = torch.arange(n, dtype=torch.float64, device=x.c.device).reshape((n,) + (1,) * (-axis - 1))
    if order in ("any", "sequential"):
        d = j
    elif order == "tree":
        d = torch.ceil(torch.log2(j + 1))
    else:
        d = torch.clamp(j, max=float(order))
    label = ctx.label(f"{fmt} prefix sum over {ctx.count(n)} ({order} order)")
    u = fmt.u
    gamma = F.expm1(d * math.log1p(u))
    ok = S * (1 + gamma) <= fmt.max_finite
    ctx.record(label, "range", str(fmt), f"partial sums <= {fmt.max_finite:.6g}", ok, S)
    if not ctx.all(ok):
        taint = _or(taint, ~ok)
    key = ctx.new_key()
    fm = FM.add_private(fm, FM.Entry(gamma * S, d * (u * S * (1 + gamma)) ** 2, frozenset((key,)), label),
                        ctx.condensed)
    if not fmt.subnormals:
        fm = FM.add_det(fm, f"{label} (flush to zero)", (d * fmt.min_normal * (1 + gamma)).expand_as(S),
                        ctx.condensed)
    fm = _fp64_sum_slack(fm, S, n, ctx)
    return Tracked(c, fmt, fm, ctx, taint=taint)


def _scan_form(x: Tracked, axis: int) -> FM.Form:
    """``_reduce_form`` for prefix sums: every term and error of the prefix up to each element."""
    ctx = x.ctx
    shape = x.c.shape
    shared, aggregated = {}, []
    for k, t in x.form.shared.items():
        extent = t.s.shape[axis] if t.s.ndim >= -axis else 1
        if extent == 1:
            shared[k] = FM.Term(t.coef.expand(shape).cumsum(dim=axis), t.s)
        else:
            a = t.coef.expand(shape)
            prov, label = ctx.symbols[k]
            aggregated.append(FM.Entry(a.abs().cumsum(dim=axis), (a * t.s).square().cumsum(dim=axis), prov, label))
    private = [FM.Entry(e.abs.expand(shape).cumsum(dim=axis), e.var.expand(shape).cumsum(dim=axis), e.prov, e.label)
               for e in x.form.private]
    det = {k: v.expand(shape).cumsum(dim=axis) for k, v in x.form.det.items()}
    private, det = FM.normalise(private + aggregated, det, ctx.condensed)
    return FM.Form(shared, private, det)


def _flush_anywhere(fm, c, n, fmt, gamma, label, ctx):
    """An accumulation that may flush subnormal terms and results to zero, as fp32 atomic adds
    on NVIDIA GPUs do (docs/design.md §4.4; measured on an H100 by
    scripts/dot_subnormal_probe.py, where tl.dot kept them): each of the n terms and each of
    the n - 1 partial sums may lose less than min_normal, each loss then passing the later
    additions (1 + gamma).  Added to every element of the result ``c`` (its shape): it is below
    every normal output's rounding."""
    eta = (2 * n - 1) * fmt.min_normal
    return FM.add_det(fm, f"{label} (flush to zero)", torch.full_like(c, 1.0) * (eta * (1 + gamma)), ctx.condensed)


def _flush_in_sum(fm, x, axis, keepdims, d, fmt, gamma, label, ctx):
    """The absolute underflow term of a sum (docs/design.md §4.1).  With gradual underflow
    an addition of two values of the format whose result is subnormal is exact (both
    lie on the grid of the smallest subnormal, and so does their sum), so a sum needs
    none: its terms' own sites carry theirs (a product's covers its contraction into an
    FMA, see tracked._mul).  A format without subnormals (tf32) flushes such a result:
    up to min_normal per addition where a partial sum may be below it, each then passing
    the later additions (1 + gamma).  A partial sum is never tiny where every term has
    one sign and magnitude at least min_normal."""
    if fmt.subnormals:
        return fm
    R = x.radius()
    lo, hi = x.c - R, x.c + R
    pos = all_of(lo >= fmt.min_normal, axis, keepdims)
    neg = all_of(hi <= -fmt.min_normal, axis, keepdims)
    may = ~(pos | neg)
    if not ctx.any(may):
        return fm
    return FM.add_det(fm, f"{label} (flush to zero)", may.to(torch.float64) * (d * fmt.min_normal * (1 + gamma)),
                      ctx.condensed)


def mean(x: Tracked, axis: int = -1, keepdims: bool = False, order="any", acc=None) -> Tracked:
    """sum / n.  Kernels divide (``/ n``) or multiply by a rounded 1/n; the
    model admits both: one rounding of the quotient plus a deterministic
    max(div error - 1/2, 1/2) ulp for the library division or the rounded
    reciprocal."""
    s = sum(x, axis, keepdims, order, acc)
    n = x.c.shape[_ax(axis, x.ndim)]
    if n & (n - 1) == 0:
        # exact scaling (what s * (1.0 / n) does), without making 1/n a Python number, which
        # would freeze a symbolic size
        return scale_pow2(s, 1.0 / n, s.taint)
    ctx = s.ctx
    c = s.c / n
    fm = FM.add_det(FM.scale(s.form, 1.0 / n), "float64 centre", _FP64_SLACK * c.abs(), ctx.condensed)
    q = Tracked(c, s.fmt, fm, ctx, taint=s.taint)
    model = ctx.profile.model("div")
    extra = builtins.max(model.a - 0.5, 0.5) * (ulp_bound_fp32(q.c.abs() + q.radius()) if s.fmt is F.fp32
                                                   else F.ulp(q.c.abs() + q.radius(), s.fmt))
    # the term belongs to the value *before* the rounding: a kernel that stores the mean
    # stores RN(s * RN(1/n)) (or a library quotient), the rounding of a value that far from
    # s/n, which the rounding-interval check of the stored mean must admit
    fm = FM.add_det(fm, ctx.label(f"mean: 1/{ctx.count(n)} (division or reciprocal)"), extra, ctx.condensed)
    if ctx.infinities:
        # an infinite sum (an overflow ``sum`` decided, a mask's -inf) over n is that infinity
        inf = _exact_infinity(s)
        if ctx.any(inf):
            fm = FM.masked(fm, ~inf)
    q = Tracked(c, s.fmt, fm, ctx, taint=s.taint)
    return q._round(s.fmt, f"mean: divide by {ctx.count(n)}")


def max(x: Tracked, axis: int = -1, keepdims: bool = False) -> Tracked:
    """max is exact on kernel values and 1-Lipschitz: |max x~ - max c| <= max R."""
    ctx = x.ctx
    axis = _ax(axis, x.ndim)
    c = x.c.amax(dim=axis, keepdim=keepdims)
    R = x.radius()
    fm = FM.Form()
    if ctx.any((R > 0)):
        fm = FM.add_det(fm, ctx.label("max of inexact values"), R.amax(dim=axis, keepdim=keepdims),
                        ctx.condensed)
    return Tracked(c, x.fmt, fm, ctx, repr_fmt=x.repr_fmt, taint=_reduce_taint(x, axis, keepdims))


def min(x: Tracked, axis: int = -1, keepdims: bool = False) -> Tracked:
    return -max(-x, axis, keepdims)


def _blend(a: Tracked, b: Tracked, cond: Tensor, shape) -> FM.Form:
    ctx = a.ctx
    z = torch.zeros((), dtype=torch.float64)
    shared = {}
    for k in list(a.form.shared) + [k for k in b.form.shared if k not in a.form.shared]:
        ta, tb = a.form.shared.get(k), b.form.shared.get(k)
        ca = ta.coef if ta is not None else z
        cb = tb.coef if tb is not None else z
        s = (ta or tb).s
        shared[k] = FM.Term(torch.where(cond, ca, cb), s)
    private = [FM.Entry(torch.where(cond, e.abs, z), torch.where(cond, e.var, z), e.prov, e.label)
               for e in a.form.private]
    private += [FM.Entry(torch.where(cond, z, e.abs), torch.where(cond, z, e.var), e.prov, e.label)
                for e in b.form.private]
    det = {k: torch.where(cond, v, z) for k, v in a.form.det.items()}
    for k, v in b.form.det.items():
        w = torch.where(cond, z, v)
        det[k] = det[k] + w if k in det else w
    private, det = FM.normalise(private, det, ctx.condensed)
    return FM.Form(shared, private, det)


def where(cond, a, b) -> Tracked:
    """Select elementwise.  Where the condition is undecided (the kernel's
    values may compare the other way) the result covers both branches.

    Certificate taint: where the condition is decided (and its operands certified) the
    kernel's select takes the same branch as the centre, so the element is the selected
    branch's value and carries only that branch's taint: the other branch may overflow
    (``where(x > 0, x, exp(100 x))``) without touching it, as ``tl.where`` discards the
    unselected value.  Where the condition is undecided the element may be either branch
    and takes both taints; where an operand of the comparison is tainted, its answer is
    not certified and the element is tainted."""
    proto = a if isinstance(a, Tracked) else b
    if not isinstance(proto, Tracked):
        raise InvalidArgument("where needs at least one tracked tensor among its branches.")
    a, b = proto._coerce(a), proto._coerce(b)
    cnd = _as_cond(cond)
    if cnd.value.device != proto.c.device:
        cnd = Cond(cnd.value.to(proto.c.device),
                   None if cnd.undecided is None else cnd.undecided.to(proto.c.device),
                   None if cnd.taint is None else cnd.taint.to(proto.c.device))
    fmt = promote(a.fmt, b.fmt) if a.fmt is not b.fmt else a.fmt
    if a.fmt is not fmt:
        a = a.to(fmt)
    if b.fmt is not fmt:
        b = b.to(fmt)
    shape = broadcast_shapes(cnd.value.shape, a.c.shape, b.c.shape)
    a, b = a._promoted(shape), b._promoted(shape)
    v = cnd.value.expand(shape)
    c = torch.where(v, a.c, b.c)
    fm = _blend(a, b, v, shape)
    ctx = a.ctx
    taint = _where_taint(v, cnd, a.taint, b.taint, shape)
    if cnd.undecided is not None:
        und = cnd.undecided.expand(shape)
        other_gap = (a.c - b.c).abs() + torch.where(v, b.radius(), a.radius())
        fm = FM.add_det(fm, ctx.label("where: undecided branch"),
                        torch.where(und, other_gap, torch.zeros_like(other_gap)), ctx.condensed)
    rf = a.repr_fmt if a.repr_fmt.precision >= b.repr_fmt.precision else b.repr_fmt
    return Tracked(c.clone() if c.shape != shape else c, fmt, fm, ctx, repr_fmt=rf, taint=taint)


def _where_taint(v: Tensor, cnd: Cond, ta, tb, shape):
    """The selected branch's taint where the condition is decided, both where it is not,
    and the condition's own (see ``where``)."""
    if ta is None and tb is None:
        taint = None
    else:
        fa = ta.expand(shape) if ta is not None else torch.zeros(shape, dtype=torch.bool, device=v.device)
        fb = tb.expand(shape) if tb is not None else torch.zeros(shape, dtype=torch.bool, device=v.device)
        taint = torch.where(v, fa, fb)
        if cnd.undecided is not None:
            taint = taint | (cnd.undecided.expand(shape) & (fa | fb))
    if cnd.taint is not None:
        taint = _or(taint, cnd.taint.expand(shape))
    return taint


def maximum(a, b) -> Tracked:
    # tl.maximum takes its operands rounded (no FMA reaches through it)
    proto = a if isinstance(a, Tracked) else b
    a, b = proto._coerce(a).rounded(), proto._coerce(b).rounded()
    return where(a >= b, a, b)


def minimum(a, b) -> Tracked:
    proto = a if isinstance(a, Tracked) else b
    a, b = proto._coerce(a).rounded(), proto._coerce(b).rounded()
    return where(a <= b, a, b)


def full_like(x: Tracked, value, fmt=None) -> Tracked:
    from .tracked import full_like as _full_like
    return _full_like(x, value, fmt)


def clamp(x: Tracked, lo=None, hi=None) -> Tracked:
    if lo is not None:
        x = maximum(x, lo)
    if hi is not None:
        x = minimum(x, hi)
    return x


def argmax(x: Tracked, axis: int = -1, keepdims: bool = False, ties: str = "first") -> S.Selection:
    return S.choose(x, None, axis, True, True, ties, keepdims)


def argmin(x: Tracked, axis: int = -1, keepdims: bool = False, ties: str = "first") -> S.Selection:
    return S.choose(x, None, axis, False, True, ties, keepdims)


def topk(x: Tracked, k: int, axis: int = -1, largest: bool = True, ordered: bool = True):
    sel = S.choose(x, k, axis, largest, ordered, "any", True)
    return gather(x, sel, axis), sel


def gather(x: Tracked, index, axis: int = -1) -> Tracked:
    """x[..., index[...]] along ``axis`` (labels): ``index`` is an integer tensor, or a
    selection (its indices; values read at a choice the kernel may have made otherwise are
    uncertified: ``Selection.taint``)."""
    if isinstance(index, S.Selection):
        out = gather(x, index.index, axis)
        taint = index.taint_of_reading()
        if taint is not None:
            out.taint = _or(out.taint, taint.expand(out.c.shape) if out.taint is None else taint)
        return out
    if not isinstance(index, Tensor) or index.dtype.is_floating_point:
        raise InvalidArgument(f"gather index must be an integer torch tensor, got {index!r:.60}.")
    from .tracked import _index
    idx = index.to(x.c.device).long()
    ax = _ax(axis, x.ndim)
    squeeze = idx.ndim == x.ndim - 1
    if squeeze:
        idx = idx.unsqueeze(ax)
    shape = list(x.c.shape)
    shape[ax] = idx.shape[ax]
    out = _index(x, lambda t: torch.gather(t.expand(x.c.shape), ax, idx.expand(shape)), "gather")
    return out.squeeze(ax) if squeeze else out


def logsumexp(x: Tracked, axis: int = -1, keepdims: bool = False, exp: str = "exp2", order="any") -> Tracked:
    """lse = m + log(sum(exp(x - m))) in fp32 with m the row max; ``exp="exp2"``
    models exp2((x - m) * log2 e) as Liger's kernels compute it."""
    m = max(x, axis, keepdims=True)
    z = x - m
    e = apply(z * LOG2E, "exp2") if exp == "exp2" else apply(z, "exp")
    s = sum(e, axis, keepdims=True, order=order)
    lse = m + apply(s, "log")
    return lse if keepdims else lse.squeeze(axis)


def matmul(a: Tracked, b: Tracked, acc=None, order="any", out=None, ftz=False,
           input_precision="ieee") -> Tracked:
    """a [.., M, K] @ b [.., K, N] (batch dimensions broadcast as in ``torch.matmul``):
    products exact when both are narrow formats
    (bf16/fp16/fp8 in fp32), else each rounded; accumulated in ``acc`` (fp32)
    with the order model; the result is in ``acc`` (cast it to the store
    format with .to).  ``ftz``: the accumulation may flush subnormal products and
    partial sums to zero (split-K partials added by fp32 atomics).  ``input_precision``:
    "tf32" where the dot reads fp32 operands as TF32 (``tl.dot``'s default for fp32), which a
    tensor-core profile models as the H100 does (``_tf32_operand``); "tf32x3" where Triton splits
    fp32 tiles into three TF32 dots, "bf16x3" / "bf16x6" into three / six bf16 dots
    (``_split_matmul``); "ieee" keeps them.  The interpreter's dot keeps fp32 operands whatever
    the precision."""
    from .tracked import _fmt_arg, _subset
    if input_precision not in INPUT_PRECISIONS:
        raise InvalidArgument(
            f"matmul: input_precision={input_precision!r}: expected one of {INPUT_PRECISIONS}, the "
            f"values of tl.dot's input_precision that numoracle models (docs/design.md §4.4).")
    # a float torch tensor beside the program (a constant matrix: a prefix sum as a product
    # with a triangle of ones) is an operand exact in its dtype's format, as in arithmetic
    proto = a if isinstance(a, Tracked) else b
    a, b = proto._coerce(a), proto._coerce(b)
    ctx = a.ctx
    acc = _fmt_arg(acc) if acc is not None else F.fp32
    if a.c.dim() < 2 or b.c.dim() < 2:
        raise InvalidArgument(
            f"matmul: a of shape {list(a.c.shape)} and b of shape {list(b.c.shape)}: expected "
            f"a [..., M, K] and b [..., K, N], two dimensions at least each (for a vector, "
            f"unsqueeze it to a row or column).")
    K = a.c.shape[-1]
    if b.c.shape[-2] != K:
        raise InvalidArgument(
            f"matmul: a of shape {list(a.c.shape)} has K={K} columns but b of shape "
            f"{list(b.c.shape)} has {b.c.shape[-2]} rows (b is [..., K, N]: for a @ b.T, "
            f"pass b.transpose(-1, -2)).")
    try:
        torch.broadcast_shapes(a.c.shape[:-2], b.c.shape[:-2])
    except RuntimeError:
        raise InvalidArgument(
            f"matmul: the batch dimensions of a {list(a.c.shape[:-2])} and b "
            f"{list(b.c.shape[:-2])} do not broadcast together.") from None
    tf32_in = input_precision == "tf32"
    if tf32_in and ctx.profile.dot == "tensor_core":
        # the interpreter's dot reads fp32 operands as they are (a float32 matmul); a GPU's reads
        # them as TF32.  Narrower operands (bf16, fp16) are TF32 values already
        a, b = (x if _subset(x.repr_fmt, F.tf32) else _tf32_operand(x) for x in (a, b))
    if input_precision in SPLITS and ctx.profile.dot == "tensor_core" and acc is F.fp32 \
            and a.fmt is F.fp32 and b.fmt is F.fp32:
        # Triton splits fp32 tiles only; others take their own tensor-core dot below
        return _split_matmul(a, b, K, order, ftz, SPLITS[input_precision], ctx)
    c = a.c @ b.c
    exact_products = a.repr_fmt.precision + b.repr_fmt.precision <= acc.precision
    Ra, Rb = a.radius(), b.radius()
    A, B = a.c.abs() + Ra, b.c.abs() + Rb
    S = A @ B
    fm = _propagate(a, b, ctx)
    d = depth(order, K) + (0 if exact_products else 1)
    u = acc.u
    label = ctx.label(f"{acc} dot over K={ctx.count(K)} ({order} order{'' if exact_products else ', rounded products'}"
                      f"{', TF32 operands' if tf32_in else ''}"
                      f"{', ' + SPLITS[input_precision].label if input_precision in SPLITS else ''}"
                      f"{', flushing subnormals' if ftz else ''})")
    gamma = _gamma(ctx, d, u, a.c.device)
    tc = None
    if tensor_core_dot(ctx, a, b, acc, exact_products):
        # the tensor core's own bound (tensor_core_depth) beside the nearest one, which stays for
        # a dot Triton runs with FMAs: the larger is the worst case.  Its errors lean toward zero,
        # so half of each (tensor_core_lean) is a deterministic term and only the rest random
        # the instruction is chosen by the tiles' type: fp32 tiles of bf16 values still run
        # TF32 instructions of 8 products (more of them, a larger bound)
        block = tensor_core_block(a.fmt, b.fmt)
        g_tc = _gamma(ctx, tensor_core_depth(K, block), u, a.c.device)
        fold = g_tc * (1 + g_tc)
        S_hat = _aligned_magnitudes(a, b, A, B, S, ctx)
        tc = fold * S_hat
        lean, lean_var = tensor_core_lean(K, block, u, S_hat, S, g_tc, ctx)
        fm = FM.add_det(fm, f"{label} (tensor cores, toward zero)", lean, ctx.condensed)
        worst = torch.maximum(gamma * S, tc) - lean if d else tc - lean
        var = torch.maximum(d * (u * S * (1 + gamma)) ** 2, lean_var) if d else lean_var
        fm = FM.add_private(fm, FM.Entry(worst, var, frozenset((ctx.new_key(),)), label), ctx.condensed)
    elif d:
        key = ctx.new_key()
        fm = FM.add_private(fm, FM.Entry(gamma * S, d * (u * S * (1 + gamma)) ** 2, frozenset((key,)), label),
                            ctx.condensed)
    elif ctx.columns:
        # the plan reader's run: a dot over K = 1 rounds nothing, but it is the kernel's tl.dot
        # on the output's way (an entry of zeros names it there)
        z = torch.zeros_like(S)
        fm = FM.add_private(fm, FM.Entry(z, z, frozenset((ctx.new_key(),)), label), ctx.condensed)
    fm = _dot_underflow(fm, a, b, A, B, K, acc, gamma, label, ctx, tc_block=block if tc is not None else None)
    if ftz:
        fm = _flush_anywhere(fm, c, K, acc, gamma, label, ctx)
    # every partial sum is a sum of a subset of the products, each through at most d roundings
    ok = S * (1 + gamma) <= acc.max_finite
    ctx.record(label, "range", str(acc), f"partial sums <= {acc.max_finite:.6g}", ok, S)
    taint = _dot_taint(a, b, ok, ctx)
    fm = _fp64_sum_slack(fm, S, K, ctx)
    out = Tracked(c, acc, fm, ctx, taint=taint)
    if tc is not None:
        # Triton may fold an add of this value into the dot's accumulator (tracked._folded_into_dot)
        out.dot_fold = (fold, None)
    elif ctx.profile.dot == "tensor_core":
        # a GPU dot on FMAs (fp32 operands, inputPrecision="ieee") folds it too: the added value
        # passes every one of the K roundings, and each term one more than the dot's own depth
        g1 = _gamma(ctx, d + 1, u, a.c.device)
        out.dot_fold = (g1, (g1 - gamma) * S)
    return out


def _propagate(a: Tracked, b: Tracked, ctx) -> FM.Form:
    """The first-order propagation of a dot's operand errors, aggregated per output element
    (each operand's terms times the other's centre), and the second-order term."""
    Ra, Rb = a.radius(), b.radius()
    fm = FM.Form()
    for src, other_c, left in ((a, b.c, True), (b, a.c, False)):
        for k, t in src.form.shared.items():
            coef = t.coef.expand(src.c.shape)
            # a symbol that is one variable along K (extent 1 there) adds up with
            # its sign across the dot: it stays a shared symbol of the output
            k_axis = -1 if left else -2
            if t.s.dim() == src.c.dim() and t.s.shape[k_axis] == 1:
                fm = FM.add(fm, FM.Form({k: FM.Term(coef @ other_c if left else other_c @ coef, t.s)}),
                            ctx.condensed)
                continue
            prov, label = ctx.symbols[k]
            ab = (coef.abs() @ other_c.abs()) if left else (other_c.abs() @ coef.abs())
            var = ((coef * t.s).square() @ other_c.square()) if left else (other_c.square() @ (coef * t.s).square())
            fm = FM.add_private(fm, FM.Entry(ab, var, prov, label), ctx.condensed)
        for e in src.form.private:
            ea, ev = e.abs.expand(src.c.shape), e.var.expand(src.c.shape)
            ab = (ea @ other_c.abs()) if left else (other_c.abs() @ ea)
            var = (ev @ other_c.square()) if left else (other_c.square() @ ev)
            fm = FM.add_private(fm, FM.Entry(ab, var, e.prov, e.label), ctx.condensed)
        for k, v in src.form.det.items():
            vv = v.expand(src.c.shape)
            fm = FM.add_det(fm, k, (vv @ other_c.abs()) if left else (other_c.abs() @ vv), ctx.condensed)
    if ctx.any((Ra > 0)) and ctx.any((Rb > 0)):
        fm = FM.add_det(fm, ctx.label("matmul (second order)"), Ra @ Rb, ctx.condensed)
    return fm


def _dot_taint(a: Tracked, b: Tracked, ok: Tensor, ctx) -> Tensor | None:
    """A dot's tainted outputs: those whose row of a or column of b holds a tainted operand, and
    those its range site found not ``ok``; None where there are none."""
    if a.taint is None and b.taint is None and ctx.all(ok):
        return None
    ta = a.taint.expand(a.c.shape).to(torch.float64) if a.taint is not None else torch.zeros_like(a.c)
    tb = b.taint.expand(b.c.shape).to(torch.float64) if b.taint is not None else torch.zeros_like(b.c)
    return (((ta @ torch.ones_like(b.c)) + (torch.ones_like(a.c) @ tb)) > 0) | ~ok


# ---- tl.dot's split precisions on an sm_90 GPU (docs/design.md §4.4)
# Triton's F32DotTC pass rewrites a dot of fp32 tiles before it picks instructions: each operand x
# is split into parts of a narrow format, the first the rounding of x, each next the rounding of
# what the earlier ones leave; per K tile, from zero, tensor-core dots add the products of the
# ``pairs`` of parts in order, NaNs of that sum become 0, a last dot adds hi_a hi_b, and an fp32
# add rounded to nearest adds the tile's sum to the accumulator.  emulator.split_dot computes it.


@dataclass(frozen=True)
class Split:
    """One split precision: the parts' format and rounding, the pairs of part indices the dots
    multiply before the mask (hi_a hi_b comes last), products per instruction, and the bounds its
    derivation gives (docs/design.md §4.4): |T - ab| <= eps |a||b| + spacing (|a| + |b|) + 2^-260
    per product, T what the dots multiply; every part after the first below ``small`` |x| plus
    ``spacing``, and a non-zero one at least ``least`` |x|; the first part at most (1 + 2^-7) |x|."""
    name: str
    fmt: str
    rounding: str
    parts: int
    pairs: tuple
    block: int
    eps: float
    spacing: float
    small: float
    least: float
    overflow: float

    @property
    def dots(self) -> int:
        return len(self.pairs) + 1

    @property
    def label(self) -> str:
        """What the dot's site label says (the plan reader reads it back)."""
        return f"{self.name.upper().replace('X', 'x')} operands"


SPLITS = {
    # big = x to nearest (ties away) in TF32, small = x - big truncated to TF32 by the dot's read:
    # T - ab = big_a (s_b - s_b') + (s_a - s_a') big_b + s_a s_b, |s| <= 2^-11 |x| + 2^-137,
    # |s - s'| <= 2^-21 |x| + 2^-136: (2 (1 + 2^-11) 2^-21 + 2^-22) |a||b|, rounded up
    "tf32x3": Split("tf32x3", "tf32", "rna", 2, ((1, 0), (0, 1)), 8, 2.0 ** -20 + 2.0 ** -22 + 2.0 ** -30,
                    2.0 ** -135, 2.0 ** -10, 2.0 ** -24, (2.0 - 2.0 ** -11) * 2.0 ** 127),
    # hi, mid to nearest even in bf16; r = x - hi - mid, |r| <= 2^-16 |x| + 2^-134: T - ab =
    # mid_a mid_b + hi_a r_b + r_a hi_b + mid_a r_b + r_a mid_b + r_a r_b, below 3 (1 + 2^-7) 2^-16
    "bf16x3": Split("bf16x3", "bf16", "rne", 2, ((1, 0), (0, 1)), 16, 3 * 2.0 ** -16 + 2.0 ** -20,
                    2.0 ** -133, 2.0 ** -7, 2.0 ** -24, (2.0 - 2.0 ** -8) * 2.0 ** 127),
    # hi, mid, lo: x = hi + mid + lo + r, |r| <= 2^-24 |x| + 2^-134; dropped: mid lo, lo mid, lo lo
    # and r's products, below (2^-22 (1 + 2^-6)) |a||b|
    "bf16x6": Split("bf16x6", "bf16", "rne", 3, ((1, 1), (2, 0), (0, 2), (1, 0), (0, 1)), 16,
                    2.0 ** -22 + 2.0 ** -27, 2.0 ** -132, 2.0 ** -7, 2.0 ** -48, (2.0 - 2.0 ** -8) * 2.0 ** 127),
}
SPLIT_TILE = 8         # the narrowest K tile of an fp32 tl.dot (Triton's min_dot_size in 3.9; 16 in 3.6)


def split_parts(v: Tensor, split: Split) -> list:
    """The parts of fp32 values ``v`` (float64 tensor) as the GPU splits and reads them: each a
    rounding of what the earlier parts leave (exact in fp32); under TF32 the parts after the first
    are that remainder itself, truncated as the dot reads it.  An infinity's first part is itself,
    the rest NaN."""
    fmt = F.by_name(split.fmt)
    parts, rest = [], v
    for i in range(split.parts):
        if i and split.fmt == "tf32":
            p = tf32_truncate(rest)         # an fp32 remainder, which the TF32 dot truncates
        else:
            p = torch.where(rest.abs() == math.inf, rest, F.round(rest, fmt, split.rounding))
        parts.append(p)
        rest = rest - p
    return parts


def _split_matmul(a: Tracked, b: Tracked, K: int, order, ftz: bool, split: Split, ctx) -> Tracked:
    """``no.matmul(a, b, acc=fp32, input_precision=split.name)`` under a tensor-core profile.
    Products of two known operands: exactly what the dots multiply (the split computed as the GPU
    does).  Where either is computed: the product of the centres, within eps |a||b| (+ the formats'
    spacing) of what the dots multiply, a deterministic term.  The accumulation: the last dot as a
    tensor-core dot over K whose accumulator starts from the earlier dots' sum (magnitudes
    S^ (1 + 2^-5)); the earlier dots' own truncations (their products below ``small`` of S^,
    aligned at least at the format's smallest normal); and up to ceil(K / 8) fp32 tile adds,
    rounded to nearest, which also carry an added accumulator (dot_fold).  Every dot runs on
    tensor cores (the plan check reports a split dot that Triton gave FMAs)."""
    fp32 = F.fp32
    u = fp32.u
    dev = a.c.device
    Ra, Rb = a.radius(), b.radius()
    ka, kb = Ra == 0, Rb == 0
    A, B = a.c.abs() + Ra, b.c.abs() + Rb
    label = ctx.label(f"fp32 dot over K={ctx.count(K)} ({order} order, {split.label}"
                      f"{', flushing subnormals' if ftz else ''})")
    fm = _propagate(a, b, ctx)
    zero = torch.zeros((), dtype=torch.float64, device=dev)
    pa = split_parts(torch.where(ka, a.c, zero), split)
    pb = split_parts(torch.where(kb, b.c, zero), split)
    c = pa[0] @ pb[0]
    for i, j in split.pairs:
        c = c + pa[i] @ pb[j]
    S = A @ B
    if not (ctx.all(ka) and ctx.all(kb)):
        # pairs with a computed operand: the centres' product, and the split's error bound
        ua, ub = (~ka).to(torch.float64), (~kb).to(torch.float64)
        # (where, not a product with the mask: a known infinite operand times 0 is NaN)
        c = c + torch.where(ka, zero, a.c) @ b.c + torch.where(ka, a.c, zero) @ torch.where(kb, zero, b.c)
        Au, Ak, Bu = torch.where(ka, zero, A), torch.where(ka, A, zero), torch.where(kb, zero, B)
        mixed = Au @ B + Ak @ Bu
        rows = Au.sum(-1, keepdim=True) + Ak @ ub.expand(B.shape)
        cols = ua.expand(A.shape) @ B + (1 - ua).expand(A.shape) @ Bu
        cnt = ua.expand(A.shape) @ torch.ones_like(B) + (1 - ua).expand(A.shape) @ ub.expand(B.shape)
        det = split.eps * mixed + split.spacing * (rows + cols) + 2.0 ** -260 * cnt
        fm = FM.add_det(fm, f"{label} (split of a computed operand)", det, ctx.condensed)
    # the formats' spacing against each operand's magnitude, in what the parts can exceed x by
    tiny = split.spacing * (A.sum(-1, keepdim=True) + B.sum(-2, keepdim=True)) + K * 2.0 ** -260
    S_hat = _aligned_magnitudes(a, b, A, B, S, ctx)
    S_big = S_hat * (1 + 2.0 ** -5) + tiny
    # the earlier dots' terms: a non-zero part is aligned at least at the smallest normal
    lo = F.by_name(split.fmt).min_normal / split.small
    if ctx.any((A > 0) & (A < lo)) or ctx.any((B > 0) & (B < lo)):
        S_small = torch.where(A > 0, A.clamp(min=lo), A) @ torch.where(B > 0, B.clamp(min=lo), B)
    else:
        S_small = S_hat
    S_small = 2 * split.small * S_small + tiny
    block = split.block
    g_tc = _gamma(ctx, tensor_core_depth(K, block), u, dev)
    g_small = _gamma(ctx, tensor_core_depth((split.dots - 1) * K, block), u, dev)
    J = (K + SPLIT_TILE - 1) // SPLIT_TILE
    g_adds = _gamma(ctx, J, u, dev)
    grow = (1 + g_tc) * (1 + g_small)
    lean, lean_var = tensor_core_lean(K, block, u, S_big, S_big, g_tc, ctx)
    fm = FM.add_det(fm, f"{label} (tensor cores, toward zero)", lean, ctx.condensed)
    fm = FM.add_det(fm, f"{label} (earlier dots)", g_small * (1 + g_small) * S_small, ctx.condensed)
    # (the split's dots run on tensor cores: the plan check tells a split dot on FMAs apart)
    worst = g_tc * (1 + g_tc) * S_big + g_adds * grow * S_big - lean
    var = lean_var + J * (u * S_big * grow) ** 2
    fm = FM.add_private(fm, FM.Entry(worst, var, frozenset((ctx.new_key(),)), label), ctx.condensed)
    n = split.dots * K
    g_all = (1 + g_adds) * grow - 1
    fm = _dot_underflow(fm, a, b, A, B, n + J, fp32, g_all, label, ctx, tc_block=block, scale=split.least)
    if ftz:
        fm = _flush_anywhere(fm, c, n + J, fp32, g_all, label, ctx)
    # every partial sum holds a subset of the terms; no operand's first part overflows
    ok = (S_big * (1 + g_all) <= fp32.max_finite) & (A.amax(-1, keepdim=True) < split.overflow) \
        & (B.amax(-2, keepdim=True) < split.overflow)
    ctx.record(label, "range", str(fp32), f"partial sums <= {fp32.max_finite:.6g}, operands < "
               f"{split.overflow:.6g}", ok, S_big)
    taint = _dot_taint(a, b, ok, ctx)
    fm = _fp64_sum_slack(fm, S_big, split.dots * K + 2 * K, ctx)
    out = Tracked(c, fp32, fm, ctx, taint=taint)
    # an added accumulator passes every tile add
    out.dot_fold = (g_adds * grow, None)
    return out


INPUT_PRECISIONS = ("ieee", "tf32") + tuple(SPLITS)


def tf32_truncate(v: Tensor) -> Tensor:
    """fp32 values with their low 13 significand bits dropped, as an H100 reads them: rounded
    toward zero to TF32, subnormals too; an infinity's bits stay infinite."""
    return torch.where(v.abs() == math.inf, v, F.round(v, F.tf32, "rtz"))


def _tf32_operand(x: Tracked) -> Tracked:
    """An fp32 operand as an sm_90 tensor-core dot with inputPrecision="tf32" reads it: the low 13
    significand bits dropped, i.e. rounded toward zero to TF32, subnormals too (every one of 122,880
    H100 results, docs/design.md §4.4).  A known value (no error term) becomes exactly that
    rounding.  A value with an error term R keeps its centre c and gains the truncation's error,
    below one TF32 ulp: 2u(|c| + R) (u TF32's unit roundoff) for normal values, TF32's subnormal
    spacing below its smallest normal.  Of 2u|c|, the average lean toward zero u|c| is a
    deterministic term and the rest random, as for the accumulation's truncations
    (``tensor_core_lean``); 2uR and the subnormal spacing are deterministic."""
    ctx = x.ctx
    c, R = x.c, x.radius()
    fmt = F.tf32
    u = fmt.u
    known = R == 0
    c2 = torch.where(known, tf32_truncate(c), c)
    label = ctx.label("TF32 operand of a dot (low 13 bits dropped)")
    half = torch.where(known, torch.zeros_like(c), u * c.abs())
    fm = FM.add_private(x.form, FM.Entry(half, half.square(), frozenset((ctx.new_key(),)), label), ctx.condensed)
    tiny = ~known & ((c.abs() - R) < fmt.min_normal)
    det = half + 2 * u * R + tiny.to(torch.float64) * fmt.min_subnormal
    fm = FM.add_det(fm, f"{label} (toward zero)", det, ctx.condensed)
    return Tracked(c2, x.fmt, fm, ctx, repr_fmt=fmt, taint=x.taint)


# ---- the sm_90 tensor-core dot (docs/design.md §4.4, measured on an H100)
# One mma/wgmma instruction adds TC_BLOCK products of 16-bit operands to the fp32 accumulator as
# one sum: every term (the accumulator too) truncated toward zero below 2^(E - 25), E the largest
# exponent among the non-zero terms (a product's exponent is the sum of its operands', a
# subnormal operand counting as its format's smallest normal exponent), summed exactly, and the
# sum rounded toward zero to fp32.  selftest.emulator.tensor_core_dot computes it.
TC_BLOCK = 16


def tensor_core_dot(ctx, a, b, acc, exact_products: bool) -> bool:
    """Whether a dot takes the tensor-core model: a GPU profile's, with products exact in an fp32
    accumulator (fp32 operands go through TF32 or FMAs, which the plan check tells apart)."""
    return ctx.profile.dot == "tensor_core" and exact_products and acc.name == "fp32"


def tensor_core_block(a_fmt, b_fmt) -> int:
    """Products per instruction for tiles of these types (held formats): 16 measured for 16-bit
    ones (8 for TF32); 8, more blocks and so a larger bound, for anything else."""
    return TC_BLOCK if builtins.max(a_fmt.bits, b_fmt.bits) == 16 else 8


def tensor_core_depth(K, block: int):
    """d with |error| <= gamma_d (1 + gamma_d) S^ for a tensor-core dot over K products in blocks
    of ``block``: B = ceil(K / block) instructions; their truncations lose less than 2^-25 of the
    aligned magnitude per term, K + B terms (a product or the accumulator), (K + B) u / 2 S^ in
    all; each instruction's rounding toward zero less than 2 u of a partial sum, 2 B u S.  Integer
    arithmetic only, so that a size traced as a symbol stays one."""
    B = (K + block - 1) // block
    return (K + B + 1) // 2 + 2 * B


def tensor_core_lean(K, block: int, u: float, S_hat, S, g, ctx):
    """The part of a tensor-core dot's error that leans one way, and the variance proxy of the
    rest (docs/design.md §4.4).  A truncation toward zero errs by a fraction f in [0, 1) of its
    unit (below (u/2) S^): f/2 of it, on average, toward zero, up to (u/4) S^ per term, K + B
    terms; the remainder, (f - 1/2) of the unit, is as symmetric as a rounding to nearest, proxy
    ((u/4) S^)^2 per term.  Each instruction's rounding toward zero likewise: up to u S leaning,
    proxy (u S)^2.  Counts go through tensors where the size is a traced symbol."""
    B = (K + block - 1) // block
    if ctx.symbolic:
        one = torch.ones((), dtype=torch.float64, device=S.device)
        terms, B = one * (K + B), one * B
    else:
        terms = K + B
    grow = 1 + g
    lean = (terms * (u / 4) * S_hat + B * u * S) * grow
    var = (terms * ((u / 4) * S_hat) ** 2 + B * (u * S) ** 2) * grow ** 2
    return lean, var


def _aligned_magnitudes(a, b, A, B, S, ctx):
    """S^ = sum_k |a_k|^ |b_k|^, the magnitudes the alignment sees: a subnormal operand's exponent
    field is its format's smallest normal one, n, so |x|^ = max(|x|, n) for x != 0 (A and B bound
    |x| from above; a zero, exactly 0 there, is left out of the alignment, as the H100 does).
    S itself where no non-zero operand is below its smallest normal."""
    na, nb = a.repr_fmt.min_normal, b.repr_fmt.min_normal
    small_a, small_b = (A > 0) & (A < na), (B > 0) & (B < nb)
    if not ctx.any(small_a) and not ctx.any(small_b):
        return S
    Ah = torch.where(A > 0, A.clamp(min=na), A)
    Bh = torch.where(B > 0, B.clamp(min=nb), B)
    return Ah @ Bh


def _dot_underflow(fm, a, b, A, B, K, acc, gamma, label, ctx, tc_block=None, scale=1.0):
    """The absolute underflow term of a dot (docs/design.md §4.1): each of its K products may
    be tiny (``underflow_threshold``), rounded to a subnormal or fused into an FMA whose
    subnormal result is rounded: at most one absolute error eta per product (half the
    smallest subnormal, or min_normal without subnormals), which the later additions carry
    (1 + gamma); additions of values of the format are exact where subnormal.  No product
    of a row of a and a column of b is tiny where the smallest non-zero magnitudes of the two
    multiply to at least the threshold (a product with an exact zero is exactly zero).
    ``scale``: the smallest non-zero product relative to the operands' (a split's parts)."""
    eta = acc.min_subnormal / 2 if acc.subnormals else acc.min_normal
    thr = underflow_threshold(a.repr_fmt.precision, b.repr_fmt.precision, acc)
    inf = torch.tensor(float("inf"), dtype=torch.float64, device=A.device)
    Ra, Rb = a.radius(), b.radius()
    a_lo = torch.where(A > 0, (a.c.abs() - Ra).clamp(min=0), inf)
    b_lo = torch.where(B > 0, (b.c.abs() - Rb).clamp(min=0), inf)
    amin = a_lo.expand(a.c.shape).amin(dim=-1, keepdim=True)          # [.., M, 1]
    bmin = b_lo.expand(b.c.shape).amin(dim=-2, keepdim=True)          # [.., 1, N]
    may = (amin * bmin * scale) < thr
    if not ctx.any(may):
        return fm
    # a tensor core's rounding toward zero of a subnormal sum loses up to 2 eta, once an instruction
    n = K if tc_block is None else K + 2 * ((K + tc_block - 1) // tc_block)
    return FM.add_det(fm, f"{label} (underflow)", may.to(torch.float64) * (n * eta * (1 + gamma)), ctx.condensed)


def div_rn(a, b) -> Tracked:
    """tl.math.div_rn: a correctly rounded division."""
    proto = a if isinstance(a, Tracked) else b
    a, b = proto._coerce(a), proto._coerce(b)
    fmt = promote(a.fmt, b.fmt) if a.fmt is not b.fmt else a.fmt
    shape = broadcast_shapes(a.c.shape, b.c.shape)
    a, b = a._promoted(shape), b._promoted(shape)
    return _div(a, b, fmt, shape, _or(a.taint, b.taint), call="div_rn")
