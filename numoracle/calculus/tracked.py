"""Tracked tensors: a centre (float64, the exact-input ideal value), the format
the kernel holds the value in, and an error form (see ``form.py``).

Every operation mirrors what a Triton kernel does: exact real arithmetic on the
form, then a rounding *site* in the operation's format (docs/design.md §4.1), unless
the result is provably exact (widening casts, products of narrow formats in
fp32, scaling by powers of two).  Each site checks its enclosure against the
format's finite range (or the math function's domain); elements that may leave
it are *tainted* and end up ``uncertified`` rather than judged (docs/design.md §4.6).
"""

from __future__ import annotations

import itertools
import math
import os
import sys
from dataclasses import dataclass, field

import torch

from .. import formats as F
from ..errors import InvalidArgument
from ..mathlib import MathProfile
from . import form as FM
from .functions import FUNCTIONS

Tensor = torch.Tensor
LOG2E = 1.4426950408889634
_FP64_SLACK = 2.0 ** -50   # bound on float64 evaluation error of one centre op, relative
_HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


# --------------------------------------------------------------------------- context

@dataclass
class SiteRecord:
    label: str
    kind: str            # "range" | "domain"
    fmt: str
    limit: str
    elements: int
    violations: int
    worst: float         # largest |enclosure| (range) or the worst argument bound (domain)

    def to_dict(self) -> dict:
        return dict(site=self.label, kind=self.kind, format=self.fmt, limit=self.limit,
                    elements=self.elements, violations=self.violations, worst=self.worst,
                    holds=self.violations == 0)


@dataclass(frozen=True)
class SiteOrigin:
    """Where a site was made: its label, kind and format as recorded, and the position in the
    reference program that made it (column where Python knows it), for ``numoracle.plan``,
    which matches a reference's sites with a kernel's compiled plan."""
    label: str
    kind: str
    fmt: str
    file: str | None
    line: int | None
    col: int | None


def _program_frame(f):
    """The first frame outside numoracle's own modules (reference programs in
    numoracle/operators count as outside)."""
    while f is not None and os.path.abspath(f.f_code.co_filename).startswith(_HERE) \
            and "operators" not in f.f_code.co_filename:
        f = f.f_back
    return f


def _position(f) -> str:
    """fn:line:col@instruction of a program frame, then "<" and its callers' positions up to the
    frame that called into the program from numoracle (``label`` with ``columns``)."""
    parts = []
    while f is not None and (not os.path.abspath(f.f_code.co_filename).startswith(_HERE)
                             or "operators" in f.f_code.co_filename):
        col = _column(f)
        # the instruction offset tells apart two operations that start at one column (a * b * c)
        parts.append(f"{f.f_code.co_name}:{f.f_lineno}" + (f":{col}" if col is not None else "")
                     + f"@{f.f_lasti}")
        f = f.f_back
    return "<".join(parts)


def _column(f):
    """The column of the expression a frame is evaluating (None before Python 3.11)."""
    try:
        return next(itertools.islice(f.f_code.co_positions(), f.f_lasti // 2, None))[2]
    except (AttributeError, StopIteration):
        return None


@dataclass
class TracedSite:
    """A site seen under torch.compile: its place in the program only (the
    compiled verdict's certificate comes from an eager run, see ``numoracle.compiled``)."""
    what: str
    kind: str


@dataclass
class Context:
    """State of one evaluation of a reference program."""
    profile: MathProfile
    condensed: bool = True
    ftz_arith: bool = False
    symbols: dict = field(default_factory=dict)   # key -> (prov, label)
    sites: list = field(default_factory=list)
    origins: list = field(default_factory=list)   # SiteOrigin per site, in the order made
    # numoracle.plan reads which elements each site reaches: labels carry the column and the
    # callers too (two sites of one line, or two calls of one helper, stay apart), and casts
    # do not settle (settling zeroes the terms)
    columns: bool = False
    settle: bool = True
    # traced: the program runs under torch.compile (see ``numoracle.compiled``).  Every
    # data-dependent shortcut then takes its general path, which computes the same values
    # (the shortcut only skips adding zeros), and sites record only their place.
    traced: bool = False
    _next: int = 0

    def any(self, mask: Tensor) -> bool:
        """Whether any element is set; True (take the general path) when traced."""
        return True if self.traced else bool(mask.any())

    def all(self, mask: Tensor) -> bool:
        """Whether every element is set; False (take the general path) when traced."""
        return False if self.traced else bool(mask.all())

    def new_key(self) -> int:
        self._next += 1
        return self._next

    def label(self, what: str) -> str:
        """``what`` plus the reference-program line that created the site (when
        traced, ``what`` alone: the compiled path takes the full labels from an
        eager run of the same program and shapes)."""
        if self.traced:
            return what
        f = sys._getframe(2)
        while f is not None and os.path.abspath(f.f_code.co_filename).startswith(_HERE) \
                and "operators" not in f.f_code.co_filename:
            f = f.f_back
        if f is None:
            return what
        if self.columns:
            return f"{what} [{_position(f)}]"
        return f"{what} [{f.f_code.co_name}:{f.f_lineno}]"

    def record(self, label, kind, fmt, limit, ok: Tensor, worst: Tensor) -> None:
        if self.traced:
            self.sites.append(TracedSite(label, kind))
            return
        f = _program_frame(sys._getframe(1))
        self.origins.append(SiteOrigin(label, kind, fmt, f.f_code.co_filename if f else None,
                                       f.f_lineno if f else None, _column(f) if f else None))
        ok_all = bool(ok.all())
        w = float(worst.max()) if worst.numel() else 0.0
        self.sites.append(SiteRecord(label, kind, fmt, limit, int(ok.numel()),
                                     0 if ok_all else int((~ok).sum()), w))


# --------------------------------------------------------------------------- helpers

def _ax(axis: int, ndim: int) -> int:
    if not -ndim <= axis < ndim:
        raise InvalidArgument(f"axis {axis} is out of range for a tensor of {ndim} dimensions; "
                              f"expected an axis in [{-ndim}, {ndim - 1}].")
    return axis - ndim if axis >= 0 else axis


def _sum_axis(t: Tensor, axis: int, n: int, keepdim: bool) -> Tensor:
    """Sum a broadcastable tensor along (negative) ``axis`` of a tensor whose size there is n."""
    if t.ndim < -axis:                       # t lacks the axis: broadcast along it
        return t * n
    if t.shape[axis] == 1:
        r = t * n
        return r if keepdim else r.squeeze(axis)
    return t.sum(dim=axis, keepdim=keepdim)


def broadcast_shapes(*shapes) -> torch.Size:
    """``torch.broadcast_shapes`` of static shapes, in Python: torch's own imports its
    symbolic-shapes machinery (and sympy) on its first call, seconds of a process's first
    verdict.  Shapes that do not broadcast go to torch's, for its error."""
    nd = max(len(s) for s in shapes)
    out = [1] * nd
    for s in shapes:
        for i, d in enumerate(s, nd - len(s)):
            if d != 1:
                if out[i] != 1 and out[i] != d:
                    return torch.broadcast_shapes(*shapes)
                out[i] = d
    return torch.Size(out)


def _squeeze_axis(t: Tensor, axis: int, keepdim: bool) -> Tensor:
    if keepdim or t.ndim < -axis:
        return t
    return t.squeeze(axis)


def _is_pow2(v: float) -> bool:
    if v == 0 or not math.isfinite(v):
        return False
    m, _ = math.frexp(abs(v))
    return m == 0.5


def _subset(a: F.Format, b: F.Format) -> bool:
    """Every value of a is a value of b."""
    if a is b:
        return True
    return (a.precision <= b.precision and a.max_finite <= b.max_finite
            and a.min_subnormal >= b.min_subnormal and (a.signed <= b.signed))


def promote(fa: F.Format, fb: F.Format) -> F.Format:
    """Triton's promotion for arithmetic on two float tensors."""
    if fa is fb:
        return fa
    for wide in (F.fp64, F.fp32):
        if fa is wide or fb is wide:
            return wide
    if {fa, fb} == {F.bf16, F.fp16}:
        return F.fp32
    raise InvalidArgument(
        f"no arithmetic between {fa} and {fb}: Triton does not compute in fp8/fp4; widen both "
        f"operands with .to(fp32) (or .to(bf16)) first, as the kernel does.")


# --------------------------------------------------------------------------- condition

class Cond:
    """The result of a comparison of tracked values: the centre's answer, and
    the elements where the kernel's values may answer differently."""

    def __init__(self, value: Tensor, undecided: Tensor | None):
        self.value = value
        self.undecided = undecided

    def __invert__(self):
        return Cond(~self.value, self.undecided)

    def __and__(self, other):
        o = _as_cond(other)
        return Cond(self.value & o.value, _or(self.undecided, o.undecided))

    def __or__(self, other):
        o = _as_cond(other)
        return Cond(self.value | o.value, _or(self.undecided, o.undecided))


def _or(a, b):
    if a is None:
        return b
    if b is None:
        return a
    return a | b


def _as_cond(c) -> Cond:
    if isinstance(c, Cond):
        return c
    if isinstance(c, Tensor) and c.dtype == torch.bool:
        return Cond(c, None)
    raise InvalidArgument(f"expected a condition (a comparison of tracked tensors or a bool tensor), "
                          f"got {type(c).__name__}.")


# --------------------------------------------------------------------------- tracked tensor

class Tracked:
    """A value of the reference program, as a kernel would hold it."""

    __slots__ = ("c", "fmt", "repr_fmt", "form", "ctx", "taint", "pre", "_R", "k")
    __array_priority__ = 1000

    def __init__(self, c, fmt, form, ctx, *, repr_fmt=None, taint=None, pre=None):
        self.c = c
        self.fmt = fmt
        self.repr_fmt = repr_fmt or fmt
        self.form = form
        self.ctx = ctx
        self.taint = taint
        self.pre = pre
        self._R = None
        self.k = None        # the Python number, for a constant of the program

    # ---- basics
    @property
    def format(self) -> F.Format:
        return self.fmt

    @property
    def shape(self):
        return tuple(self.c.shape)

    @property
    def ndim(self) -> int:
        return self.c.ndim

    def __repr__(self):
        return f"Tracked({self.fmt}, shape={self.shape})"

    def radius(self) -> Tensor:
        """Worst-case (fixed-input) radius of the enclosure."""
        if self._R is None:
            self._R = FM.fixed_radius(self.form, self.c)
        return self._R

    # ---- constructors
    def _new(self, c, fmt, form, taint, *, repr_fmt=None, pre=None) -> "Tracked":
        return Tracked(c, fmt, form, self.ctx, repr_fmt=repr_fmt, taint=taint, pre=pre)

    def _const(self, v: float, fmt: F.Format) -> "Tracked":
        v = float(v)
        c = torch.tensor(v, dtype=torch.float64, device=self.c.device)
        fm = FM.Form()
        err = abs(F.round_scalar(v, fmt) - v)
        if err:
            fm = FM.add_det(fm, self.ctx.label(f"constant {v!r} in {fmt}"),
                            torch.tensor(err, dtype=torch.float64, device=self.c.device), self.ctx.condensed)
        t = Tracked(c, fmt, fm, self.ctx)
        t.k = v
        return t

    def _coerce(self, other) -> "Tracked":
        if isinstance(other, Tracked):
            return other
        if isinstance(other, (int, float)) and not isinstance(other, bool):
            return self._const(other, self.fmt)
        if isinstance(other, Tensor):
            return self._argument(other)
        raise InvalidArgument(
            f"cannot combine a tracked {self.fmt} tensor with {type(other).__name__}: a reference "
            f"program mixes tracked tensors (its inputs and values derived from them), Python "
            f"numbers and float torch tensors only; pass other values as inputs of the program.")

    def _argument(self, v: Tensor) -> "Tracked":
        """A float torch tensor computed beside the program (a count of kept rows, say): the
        kernel's runtime argument, exact in its own dtype's format.  Unlike a Python number
        it stays on the device, so reading it costs no synchronisation and a compiled verdict
        need not specialise on its value."""
        if not v.is_floating_point():
            raise InvalidArgument(
                f"cannot combine a tracked {self.fmt} tensor with a {v.dtype} torch tensor: "
                f"convert it to the float dtype the kernel receives it in first "
                f"(for a count passed as a Python float: .to(torch.float32)).")
        return Tracked(v.to(device=self.c.device, dtype=torch.float64), F.from_dtype(v.dtype),
                       FM.Form(), self.ctx)

    # ---- rounding sites
    def _round(self, fmt: F.Format, what: str, scaled: Tensor | None = None) -> "Tracked":
        """Round to fmt: a private rounding error of at most u|c| per element, none where
        the value is exact or where ``scaled`` says the operation only scaled by a power
        of two (those keep the underflow term)."""
        ctx = self.ctx
        R = self.radius()
        c = self.c
        label = ctx.label(what)
        mag = c.abs() + R
        ok = mag <= fmt.max_finite
        ctx.record(label, "range", str(fmt), f"|value| <= {fmt.max_finite:.6g}", ok, mag)
        taint = self.taint if ctx.all(ok) else _or(self.taint, ~ok)
        u = fmt.u
        zero_r = R == 0
        if ctx.any(zero_r):
            exact = zero_r & F.representable(c, fmt)
            a = torch.where(exact, torch.zeros_like(c), u * c.abs())
        else:
            exact = zero_r
            a = u * c.abs()
        if scaled is not None:
            a = torch.where(scaled, torch.zeros_like(a), a)
        key = ctx.new_key()
        fm = FM.add_private(self.form, FM.Entry(a, a.square(), frozenset((key,)), label), ctx.condensed)
        # second order: the rounding error of the error, u*|e|; and underflow
        eta = fmt.min_subnormal / 2 if fmt.subnormals else fmt.min_normal
        tiny = (c.abs() - R) < fmt.min_normal
        extra = u * R
        if ctx.any(tiny):
            # (a float64 mask times eta: torch.where on two Python numbers gives float32,
            # where fp32's half-subnormal 2^-150 is 0)
            extra = extra + (tiny & ~exact).to(torch.float64) * eta
        if ctx.any((extra > 0)):
            fm = FM.add_det(fm, f"{label} (second order, underflow)", extra, ctx.condensed)
        return Tracked(c, fmt, fm, ctx, repr_fmt=fmt, taint=taint, pre=self)

    def to(self, fmt) -> "Tracked":
        fmt = _fmt_arg(fmt)
        if _subset(self.repr_fmt, fmt):
            # no rounding: the value (and the rounding that made it, for the
            # rounding-interval check of an output) stay what they were
            return Tracked(self.c, fmt, self.form, self.ctx, repr_fmt=self.repr_fmt, taint=self.taint,
                           pre=self.pre if fmt == self.fmt else None)
        return self._round(fmt, f"round to {fmt} (.to)")._settle(self)

    def _settle(self, src: "Tracked") -> "Tracked":
        """A cast whose whole enclosure rounds to one value of its format has
        that value exactly: no error term remains for those elements.  Only
        explicit casts settle (a rounded product may be contracted into an
        FMA and skip its rounding); the enclosure is the fixed-input one, so
        this holds in both modes."""
        if not self.ctx.settle:
            return self
        fmt = self.fmt
        R = src.radius()
        lo, hi = src.c - R, src.c + R
        ok = torch.isfinite(R) & (torch.maximum(lo.abs(), hi.abs()) <= fmt.max_finite)
        ok &= torch.minimum(lo.abs(), hi.abs()) >= fmt.min_normal
        if self.taint is not None:
            ok &= ~self.taint
        if not self.ctx.any(ok):
            return self
        rlo = F.round(lo, fmt)
        decided = ok & (rlo == F.round(hi, fmt))
        if not self.ctx.any(decided):
            return self
        # rounding is monotone and lo <= c <= hi: where RN(lo) = RN(hi), RN(c) is that value too
        c = torch.where(decided, rlo, self.c)
        return Tracked(c, fmt, FM.masked(self.form, ~decided), self.ctx, repr_fmt=self.repr_fmt,
                       taint=self.taint, pre=self.pre)

    # ---- broadcasting: private errors reused by many elements become shared symbols
    def _promoted(self, out_shape) -> "Tracked":
        if tuple(out_shape) == self.shape or not self.form.private:
            return self
        ctx = self.ctx
        shared = dict(self.form.shared)
        for e in self.form.private:
            key = ctx.new_key()
            ctx.symbols[key] = (e.prov | {key}, e.label)
            a = e.abs.expand(self.shape) if e.abs.shape != self.c.shape else e.abs
            s = torch.where(a > 0, e.var.sqrt() / a, torch.zeros_like(a)).clamp(max=1.0)
            shared[key] = FM.Term(a, s)
        t = Tracked(self.c, self.fmt, FM.Form(shared, [], self.form.det), ctx,
                    repr_fmt=self.repr_fmt, taint=self.taint)
        return t

    # ---- arithmetic
    def _binary(self, other, op: str, reverse=False):
        y = self._coerce(other)
        x = self
        if reverse:
            x, y = y, x
        fmt = self.fmt if isinstance(other, (int, float)) else promote(x.fmt, y.fmt)
        shape = broadcast_shapes(x.c.shape, y.c.shape)
        x, y = x._promoted(shape), y._promoted(shape)
        cond = self.ctx.condensed
        taint = _or(x.taint, y.taint)
        if taint is not None:
            taint = taint.expand(shape) if taint.shape != shape else taint
        if op == "add":
            c = x.c + y.c
            fm = FM.add(x.form, y.form, cond)
            exact = False
        elif op == "sub":
            c = x.c - y.c
            fm = FM.add(x.form, FM.scale(y.form, -1.0), cond)
            exact = False
        elif op == "mul":
            return _mul(x, y, fmt, shape, taint)
        elif op == "div":
            return _div(x, y, fmt, shape, taint)
        else:  # pragma: no cover
            raise AssertionError(op)
        c = c.expand(shape).clone() if c.shape != shape else c
        fm = _fp64_slack(fm, c, self.ctx)
        t = Tracked(c, fmt, fm, self.ctx, taint=taint)
        return t if exact else t._round(fmt, f"{fmt} {op}")

    def __add__(self, o): return self._binary(o, "add")
    def __radd__(self, o): return self._binary(o, "add", reverse=True)
    def __sub__(self, o): return self._binary(o, "sub")
    def __rsub__(self, o): return self._binary(o, "sub", reverse=True)
    def __mul__(self, o): return self._binary(o, "mul")
    def __rmul__(self, o): return self._binary(o, "mul", reverse=True)
    def __truediv__(self, o): return self._binary(o, "div")
    def __rtruediv__(self, o): return self._binary(o, "div", reverse=True)

    def __neg__(self):
        return Tracked(-self.c, self.fmt, FM.scale(self.form, -1.0), self.ctx,
                       repr_fmt=self.repr_fmt, taint=self.taint)

    def __abs__(self):
        # |x| is 1-Lipschitz; where the sign is known it is +-x exactly
        sign = torch.sign(self.c)
        R = self.radius()
        unknown = self.c.abs() <= R
        fm = FM.scale(self.form, torch.where(unknown, torch.ones_like(sign), sign))
        if self.ctx.any(unknown):
            # where the sign is unknown, |x~| differs from |c| + e by at most 2|c| <= 2R
            fm = FM.add_det(fm, self.ctx.label("abs near zero"),
                            torch.where(unknown, 2 * R, torch.zeros_like(R)), self.ctx.condensed)
        return Tracked(self.c.abs(), self.fmt, fm, self.ctx, repr_fmt=self.repr_fmt, taint=self.taint)

    def abs(self):
        return self.__abs__()

    # ---- comparisons (decided by the centre; undecided where enclosures touch)
    def _cmp(self, other, op):
        y = self._coerce(other)
        d = self.c - y.c
        r = self.radius() + y.radius()
        val = {"gt": d > 0, "ge": d >= 0, "lt": d < 0, "le": d <= 0}[op]
        undecided = (d.abs() <= r) & (r > 0)
        return Cond(val, undecided if self.ctx.any(undecided) else None)

    def __gt__(self, o): return self._cmp(o, "gt")
    def __ge__(self, o): return self._cmp(o, "ge")
    def __lt__(self, o): return self._cmp(o, "lt")
    def __le__(self, o): return self._cmp(o, "le")

    # ---- indexing and shape
    def __getitem__(self, idx):
        return _index(self, lambda t: t[idx], "slice")

    def reshape(self, *shape):
        shape = shape[0] if len(shape) == 1 and isinstance(shape[0], (tuple, list)) else shape
        return _index(self, lambda t: t.reshape(shape), "reshape")

    def transpose(self, a, b):
        return _index(self, lambda t: t.transpose(a, b), "transpose")

    @property
    def T(self):
        return self.transpose(-1, -2)

    def unsqueeze(self, axis):
        return _index(self, lambda t: t.unsqueeze(axis), "unsqueeze")

    def squeeze(self, axis):
        return _index(self, lambda t: t.squeeze(axis), "squeeze")


def _fmt_arg(fmt) -> F.Format:
    if isinstance(fmt, F.Format):
        return fmt
    if isinstance(fmt, torch.dtype):
        return F.from_dtype(fmt)
    if isinstance(fmt, str):
        return F.by_name(fmt)
    raise InvalidArgument(f"expected a format (numoracle.formats.fp32, a torch dtype or a name such as "
                          f"'bf16'), got {fmt!r}.")


def _fp64_slack(fm: FM.Form, c: Tensor, ctx: Context) -> FM.Form:
    # centres are float64 computations: account for their own rounding
    return FM.add_det(fm, "float64 centre", _FP64_SLACK * c.abs(), ctx.condensed)


def _pow2_scale(y: Tracked) -> Tensor | None:
    """Where y, known exactly (no error terms: an input or a runtime argument), is a power
    of two: a product or quotient by it only scales, exact while the result stays normal.
    None for a Python number (handled by value) and for values with errors."""
    if y.k is not None or y.taint is not None or not y.form.is_zero():
        return None
    return F.power_of_two(y.c)


def _mul(x: Tracked, y: Tracked, fmt, shape, taint) -> Tracked:
    ctx = x.ctx
    # powers of two (from Python numbers) scale exactly
    if y.k is not None and y.form.is_zero() and _is_pow2(y.k) and fmt is x.fmt:
        g = y.k
        t = Tracked(x.c * g, fmt, FM.scale(x.form, g), ctx, repr_fmt=x.repr_fmt, taint=taint)
        if g >= 1:
            return t
        # scaling down is exact only while the result stays normal
        u = _underflow_only(t, fmt, f"{fmt} mul by {g:g}")
        return Tracked(u.c, fmt, u.form, ctx, repr_fmt=x.repr_fmt, taint=u.taint)
    if x.k is not None and x.form.is_zero() and _is_pow2(x.k) and fmt is y.fmt:
        return _mul(y, x, fmt, shape, taint)
    c = x.c * y.c
    fm = FM.add(FM.scale(x.form, y.c), FM.scale(y.form, x.c), ctx.condensed)
    Rx, Ry = x.radius(), y.radius()
    second = Rx * Ry
    if ctx.any((second > 0)):
        fm = FM.add_det(fm, ctx.label(f"{fmt} mul (second order)"), second, ctx.condensed)
    fm = _fp64_slack(fm, c, ctx)
    if c.shape != shape:
        c = c.expand(shape).clone()
    t = Tracked(c, fmt, fm, ctx, taint=taint)
    # a product of values with p1 + p2 <= p significand bits is exact in p bits
    if x.repr_fmt.precision + y.repr_fmt.precision <= fmt.precision:
        return _underflow_only(t, fmt, f"{fmt} mul (exact)")
    # a runtime scalar (one element: testing it costs nothing) that is a power of two scales
    # exactly, as a Python number does
    masks = [_pow2_scale(s) for s in (y, x) if s.c.numel() == 1]
    scaled = next((m for m in masks if m is not None), None)
    return t._round(fmt, f"{fmt} mul", scaled=scaled)


def _underflow_only(t: Tracked, fmt, what) -> Tracked:
    R = t.radius()
    tiny = (t.c.abs() - R) < fmt.min_normal
    ok = (t.c.abs() + R) <= fmt.max_finite
    label = t.ctx.label(what)
    t.ctx.record(label, "range", str(fmt), f"|value| <= {fmt.max_finite:.6g}", ok, t.c.abs() + R)
    taint = t.taint if t.ctx.all(ok) else _or(t.taint, ~ok)
    fm = t.form
    if t.ctx.any(tiny):
        eta = fmt.min_subnormal / 2 if fmt.subnormals else fmt.min_normal
        fm = FM.add_det(fm, f"{label} (underflow)", tiny.to(torch.float64) * eta,
                        t.ctx.condensed)
    return Tracked(t.c, fmt, fm, t.ctx, repr_fmt=fmt, taint=taint, pre=t)


def _div(x: Tracked, y: Tracked, fmt, shape, taint, call: str = "div") -> Tracked:
    ctx = x.ctx
    if y.k is not None and y.form.is_zero() and _is_pow2(y.k):
        return _mul(x, x._const(1.0 / y.k, x.fmt), fmt, shape, taint)
    if fmt is F.fp64:
        return _mul(x, _exact_fn(y, "reciprocal"), fmt, shape, taint)
    if fmt in (F.bf16, F.fp16):
        # Triton divides half-precision values in fp32 and rounds back
        return _div(x.to(F.fp32), y.to(F.fp32), F.fp32, shape, taint, call).to(fmt)
    r = _exact_fn(y, "reciprocal")
    q = Tracked(x.c, x.fmt, x.form, ctx, repr_fmt=x.repr_fmt, taint=taint)
    c = q.c * r.c
    fm = FM.add(FM.scale(q.form, r.c), FM.scale(r.form, q.c), ctx.condensed)
    second = q.radius() * r.radius()
    if ctx.any((second > 0)):
        fm = FM.add_det(fm, ctx.label("division (second order)"), second, ctx.condensed)
    fm = _fp64_slack(fm, c, ctx)
    if c.shape != shape:
        c = c.expand(shape).clone()
    t = Tracked(c, fmt, fm, ctx, taint=_or(taint, r.taint))
    if call == "div" and x.k == 1.0 and x.form.is_zero() and "recip" in ctx.profile.functions:
        call = "recip"               # 1.0 / y: the GPU's reciprocal is more accurate than x / y
    # an exactly known divisor that is a power of two (a count of 64 rows) only scales, as a
    # Python number does; decided per element on the device
    return _library_error(t, call, x_abs=None, what="division" if call in ("div", "recip") else call,
                          scaled=_pow2_scale(y))


# Under flush-to-zero a subnormal argument becomes 0.  At a pole (rsqrt, log, reciprocal) the
# result leaves every bound: such arguments leave the certified domain.
_FTZ_POLES = ("rsqrt", "log", "log2", "reciprocal")
# Where the function is finite at 0, the flush costs at most |f(x) - f(0)| over the subnormal
# range: an absolute term where the argument's enclosure meets it (sqrt.approx.ftz and erf
# return 0 for subnormal arguments on the H200).
_FTZ_FLUSH_ABS = {"sqrt": 2.0 ** -63, "erf": 1.1283791670955126 * F.fp32.min_normal}


def _exact_fn(x: Tracked, name: str) -> Tracked:
    """f(x) as exact real function of the kernel's value: first order plus a
    rigorous remainder; no library error yet."""
    ctx = x.ctx
    f = FUNCTIONS[name]
    R = x.radius()
    lo, hi = x.c - R, x.c + R
    ok = f.in_domain(lo, hi)
    if ctx.profile.ftz and name in _FTZ_POLES:
        # a flushed subnormal argument becomes 0 (see _FTZ_POLES)
        ok = ok & ((lo >= F.fp32.min_normal) | (hi <= -F.fp32.min_normal))
    label = ctx.label(name)
    ctx.record(label, "domain", str(x.fmt), f.domain_text, ok,
               torch.maximum(lo.abs(), hi.abs()))
    taint = x.taint if ctx.all(ok) else _or(x.taint, ~ok)
    with torch.no_grad():
        c = f.value(x.c)
        g = f.deriv(x.c) if f.deriv_value is None else f.deriv_value(x.c, c)
    fm = FM.scale(x.form, g)
    if ctx.any((R > 0)):
        rem = torch.where(R > 0, 0.5 * f.curvature(lo, hi) * R * R, torch.zeros_like(R))
        fm = FM.add_det(fm, f"{label} (second order)", rem, ctx.condensed)
    if ctx.profile.ftz and name in _FTZ_FLUSH_ABS:
        meets = (lo < F.fp32.min_normal) & (hi > -F.fp32.min_normal) & ((lo != 0) | (hi != 0))
        if ctx.any(meets):
            fm = FM.add_det(fm, f"{label} (flush to zero)", meets.to(torch.float64) * _FTZ_FLUSH_ABS[name],
                            ctx.condensed)
    fm = _fp64_slack(fm, c, ctx)
    out = Tracked(c, x.fmt, fm, ctx, taint=taint)
    out.pre = None
    out._R = None
    # remember the enclosure's magnitude for the library error
    out.repr_fmt = x.fmt
    return out


def _library_error(t: Tracked, call: str, x_abs, what: str, scaled: Tensor | None = None) -> Tracked:
    """Add the math library's error for ``call`` to an exact function value t; where
    ``scaled`` is set (a division by a power of two) only the underflow's."""
    ctx = t.ctx
    model = ctx.profile.model(call)
    label = ctx.label(f"{what} ({_ulps_text(model)})")
    if model.b == 0 and model.a <= 0.5:
        return t._round(F.fp32, f"{what} (correctly rounded)", scaled=scaled)
    R = t.radius()
    mag = t.c.abs() + R
    ok = mag <= F.fp32.max_finite
    ctx.record(label, "range", "fp32", f"|value| <= {F.fp32.max_finite:.6g}", ok, mag)
    taint = t.taint if ctx.all(ok) else _or(t.taint, ~ok)
    ulps = model.ulps(x_abs) if (x_abs is not None and model.b) else model.a
    err = ulps * ulp_bound_fp32(mag)
    if ctx.profile.ftz:
        err = err + F.fp32.min_normal
    if scaled is not None:
        # exact, unless the quotient is subnormal: rounded there, or flushed to 0 under FTZ
        tiny = ((t.c.abs() - R) < F.fp32.min_normal).to(torch.float64)
        under = tiny * (F.fp32.min_normal if ctx.profile.ftz else F.fp32.min_subnormal / 2)
        err = torch.where(scaled, under, err)
    fm = FM.add_det(t.form, label, err, ctx.condensed)
    return Tracked(t.c, F.fp32, fm, ctx, taint=taint)


def ulp_bound_fp32(mag: Tensor) -> Tensor:
    """An upper bound on the fp32 ulp of every value of magnitude <= mag: the
    ulp of the binade of mag rounded to fp32 (never smaller than the exact one)."""
    t = mag.to(torch.float32).abs()
    # fp32's spacing there, from t's float32 exponent bits (int32: cheaper than formats.ulp's
    # int64 on a GPU); 2**105, the spacing the exponent field 255 would have, for the
    # magnitudes that overflow float32 (and NaN)
    finite = torch.isfinite(t)
    u, _ = F._value_spacing(torch.where(finite, t, 0.0).to(torch.float64), F.fp32)
    return torch.where(finite, u, 2.0 ** 105)


def _ulps_text(model) -> str:
    return f"{model.a:g}+{model.b:g}|x| ulp" if model.b else f"{model.a:g} ulp"


def apply(x: Tracked, name: str, call: str | None = None) -> Tracked:
    """A kernel math call ``call`` (profile name) computing function ``name``."""
    call = call or name
    if x.fmt in (F.bf16, F.fp16):
        # Triton evaluates math functions on half formats in fp32 and rounds back
        return apply(x.to(F.fp32), name, call).to(x.fmt)
    if x.fmt is not F.fp32:
        raise InvalidArgument(f"{name} of a {x.fmt} value: math calls take fp32 (or bf16/fp16) "
                              f"arguments; add .to(fp32) as the kernel does.")
    t = _exact_fn(x, name)
    R = x.radius()
    x_abs = torch.maximum((x.c - R).abs(), (x.c + R).abs())
    return _library_error(t, call, x_abs, call)


# --------------------------------------------------------------------------- index ops

def _index(x: Tracked, op, what: str) -> Tracked:
    """Apply an index/shape operation.  Symbols shared over every touched axis
    keep their identity; others become derived symbols with the same provenance
    (so dependence is still honoured by clustering)."""
    ctx = x.ctx
    full = x.c.shape
    c = op(x.c)
    shared = {}
    for k, t in x.form.shared.items():
        coef = op(t.coef.expand(full))
        if t.s.numel() == 1:
            shared[k] = FM.Term(coef, t.s.reshape([1] * coef.ndim))
        else:
            key = ctx.new_key()
            prov, label = ctx.symbols[k]
            ctx.symbols[key] = (prov | {key}, label)
            shared[key] = FM.Term(coef, op(t.s.expand(full)))
    private = [FM.Entry(op(e.abs.expand(full)), op(e.var.expand(full)), e.prov, e.label)
               for e in x.form.private]
    det = {k: op(v.expand(full)) for k, v in x.form.det.items()}
    taint = None if x.taint is None else op(x.taint.expand(full))
    return Tracked(c, x.fmt, FM.Form(shared, private, det), ctx, repr_fmt=x.repr_fmt, taint=taint)


def cat(xs, axis: int = -1) -> Tracked:
    xs = list(xs)
    if not xs:
        raise InvalidArgument("cat needs at least one tracked tensor.")
    ctx = xs[0].ctx
    fmt = xs[0].fmt
    for t in xs[1:]:
        fmt = promote(fmt, t.fmt)
    xs = [t if t.fmt is fmt else t.to(fmt) for t in xs]
    c = torch.cat([t.c for t in xs], dim=axis)
    keys = {}
    for t in xs:
        for k in t.form.shared:
            keys.setdefault(k, None)
    shared = {}
    for k in keys:
        # a symbol present in every part with unit extent keeps its identity
        parts_coef, parts_s, same = [], [], True
        for t in xs:
            term = t.form.shared.get(k)
            if term is None:
                parts_coef.append(torch.zeros_like(t.c))
                same = False
            else:
                parts_coef.append(term.coef.expand(t.c.shape))
                parts_s.append(term.s)
                same = same and term.s.numel() == 1
        coef = torch.cat(parts_coef, dim=axis)
        if same and all(float(s.reshape(-1)[0]) == float(parts_s[0].reshape(-1)[0]) for s in parts_s):
            shared[k] = FM.Term(coef, parts_s[0].reshape([1] * coef.ndim))
        else:
            s_parts = []
            for t in xs:
                term = t.form.shared.get(k)
                s_parts.append(torch.zeros_like(t.c) if term is None else term.s.expand(t.c.shape))
            key = ctx.new_key()
            prov, label = ctx.symbols[k]
            ctx.symbols[key] = (prov | {key}, label)
            shared[key] = FM.Term(coef, torch.cat(s_parts, dim=axis))
    labels = {}
    for t in xs:
        for e in t.form.private:
            labels.setdefault(FM.PRIVATE if ctx.condensed else e.label, []).append(None)
    private = []
    all_entries = {}
    for i, t in enumerate(xs):
        for e in t.form.private:
            all_entries.setdefault(FM.PRIVATE if ctx.condensed else e.label, {})[i] = e
    for label, per in all_entries.items():
        abs_p, var_p, prov = [], [], frozenset()
        for i, t in enumerate(xs):
            e = per.get(i)
            z = torch.zeros_like(t.c)
            abs_p.append(z if e is None else e.abs.expand(t.c.shape))
            var_p.append(z if e is None else e.var.expand(t.c.shape))
            prov = prov | (e.prov if e is not None else frozenset())
        private.append(FM.Entry(torch.cat(abs_p, axis), torch.cat(var_p, axis), prov, label))
    det = {}
    det_labels = {k for t in xs for k in t.form.det}
    for k in det_labels:
        det[k] = torch.cat([t.form.det[k].expand(t.c.shape) if k in t.form.det else torch.zeros_like(t.c)
                            for t in xs], axis)
    taint = None
    if any(t.taint is not None for t in xs):
        taint = torch.cat([t.taint.expand(t.c.shape) if t.taint is not None
                           else torch.zeros_like(t.c, dtype=torch.bool) for t in xs], axis)
    return Tracked(c, fmt, FM.Form(shared, private, det), ctx, taint=taint)
