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

import functools
import itertools
import math
import os
import sys
from dataclasses import dataclass, field, replace

import numpy as np
import torch

from .. import formats as F
from ..errors import InvalidArgument, LanguageMisuse, MisspelledMethod
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
    kind: str            # "range" | "domain" | "selection" (a choice another index may win)
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
    # what the plan reader needs of a math call's argument: "log2e" for exp2 of a product by
    # the constant log2 e (exp written as the kernel writes it)
    argument: str | None = None


@functools.cache
def _numoracle_file(filename: str) -> bool:
    """Whether a code object's file is one of numoracle's own modules (reference programs in
    numoracle/operators count as outside).  Asked for every frame of every site, so kept per
    file: an absolute name only (a relative one is resolved against the working directory
    each time)."""
    return os.path.abspath(filename).startswith(_HERE) and "operators" not in filename


def _ours(code) -> bool:
    name = code.co_filename
    return _numoracle_file(name) if os.path.isabs(name) else _numoracle_file.__wrapped__(name)


def _program_frame(f):
    """The first frame outside numoracle's own modules (reference programs in
    numoracle/operators count as outside)."""
    while f is not None and _ours(f.f_code):
        f = f.f_back
    return f


def _position(f) -> str:
    """fn:line:col@instruction of a program frame, then "<" and its callers' positions up to the
    frame that called into the program from numoracle (``label`` with ``columns``)."""
    parts = []
    while f is not None and not _ours(f.f_code):
        col = _column(f)
        # the instruction offset tells apart two operations that start at one column (a * b * c)
        parts.append(f"{f.f_code.co_name}:{f.f_lineno}" + (f":{col}" if col is not None else "")
                     + f"@{f.f_lasti}")
        f = f.f_back
    return "<".join(parts)


def _column(f):
    """The column of the expression a frame is evaluating (None before Python 3.11)."""
    return _column_at(f.f_code, f.f_lasti)


@functools.lru_cache(maxsize=4096)
def _column_at(code, lasti: int):
    # co_positions is walked from the start: kept per instruction, as every verdict asks again
    try:
        return next(itertools.islice(code.co_positions(), lasti // 2, None))[2]
    except (AttributeError, StopIteration):
        return None


@dataclass
class TracedSite:
    """A site seen under torch.compile: its place in the program only (the
    compiled verdict's certificate comes from an eager run, see ``numoracle.verdict.compiled``)."""
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
    # traced: the program runs under torch.compile (see ``numoracle.verdict.compiled``).  Every
    # data-dependent shortcut then takes its general path, which computes the same values
    # (the shortcut only skips adding zeros), and sites record only their place.
    traced: bool = False
    # symbolic: traced with symbolic sizes (one compiled verdict for every shape of a signature's
    # kind).  Sizes then stay out of Python: labels show them as <n> (``count``), and what is
    # computed from a size is computed on its symbol, never from its value on the traced call
    symbolic: bool = False
    # the program made an infinite constant (a mask's -inf): its additions then check for exact
    # infinities (``_infinite_sum``), in eager and traced runs alike
    infinities: bool = False
    # index outputs (``calculus.select``): the selections made, in order, and the kernel's
    # stored indices by a selection's ordinal, which a verdict's second run reads in place of
    # the reference's own choice
    selections: list = field(default_factory=list)
    forced: dict = field(default_factory=dict)
    _next: int = 0

    def count(self, n) -> str:
        """A size as a site's label shows it: its digits, or ``<n>`` when traced with symbolic
        sizes (``verdict.compiled.compare.check_sites`` reads it as any count)."""
        return "<n>" if self.symbolic else str(n)

    def number(self, g) -> str:
        """A number computed from a size, as a label shows it (``count``'s ``<n>`` when symbolic)."""
        return "<n>" if self.symbolic else f"{g:g}"

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
        f = _program_frame(sys._getframe(2))
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
    """The result of a comparison of tracked values: the centre's answer, the
    elements where the kernel's values may answer differently, and the elements
    where an operand's enclosure is not certified (``taint``: there the answer
    itself is not certified, decided or not)."""

    def __init__(self, value: Tensor, undecided: Tensor | None, taint: Tensor | None = None):
        self.value = value
        self.undecided = undecided
        self.taint = taint

    @property
    def shape(self):
        return tuple(self.value.shape)

    def __bool__(self):
        raise LanguageMisuse(
            f"a comparison of tracked values (shape {self.shape}) was used as a Python bool (in an "
            f"if/while, and/or/not, or by Python's max()/min()/sorted(), which compare with > and <). "
            f"It has one answer per element, and the kernel's values may answer differently from the "
            f"reference's centre, so one Python branch for the whole tensor would give a wrong "
            f"reference. Select per element instead: no.where(x > 0, a, b); for Python's max(0.0, x) "
            f"write no.maximum(x, 0.0) (no.minimum, no.clamp); combine conditions with &, | and ~.")

    def __invert__(self):
        return Cond(~self.value, self.undecided, self.taint)

    def __and__(self, other):
        o = _as_cond(other)
        return Cond(self.value & o.value, _or(self.undecided, o.undecided), _or(self.taint, o.taint))

    def __or__(self, other):
        o = _as_cond(other)
        return Cond(self.value | o.value, _or(self.undecided, o.undecided), _or(self.taint, o.taint))

    __rand__ = __and__
    __ror__ = __or__

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        return _torch_function(func)


def _spelling_hint(spelled: str) -> str:
    if spelled.startswith("nothing: "):
        return "A tracked value has no Python number: " + spelled.removeprefix("nothing: ") + "."
    return f"Write {spelled}."


def _torch_function(func):
    """A torch function given a tracked tensor or condition: raise with our spelling."""
    name = getattr(func, "__name__", str(func))
    if name.startswith("__"):
        # a Tensor operator with a tracked operand (tensor + x): let Python try x's
        # reflected operator, as it did before this hook existed
        return NotImplemented
    spelled = _NO_SPELLING.get(name)
    raise LanguageMisuse(
        f"torch.{name} was given a tracked tensor: torch functions compute on plain tensors, "
        f"without the kernel's rounding. "
        + (_spelling_hint(spelled) if spelled else
           "Use the numoracle.* functions (import numoracle as no): no.exp, no.sum(x, axis=-1), "
           "no.where, no.maximum, ...; axis= (not dim=) and keepdims= (not keepdim=)."))


def _or(a, b):
    if a is None:
        return b
    if b is None:
        return a
    return a | b


def any_of(mask: Tensor, dim=None, keepdim: bool = False) -> Tensor:
    """``mask.any(dim)``, as every verdict's bool reduction is taken.  Off the CPU it counts
    the set elements instead: Inductor's Triton code for a bool reduction fused with others
    can keep an int1 accumulator that the loop re-types to int8, which Triton 3.6 refuses to
    compile (docs/results/2026-12-04-h200-bool-reductions.md); an integer count compiles."""
    if mask.device.type == "cpu":
        return mask.any() if dim is None else mask.any(dim=dim, keepdim=keepdim)
    return _any_by_count(mask, dim, keepdim)


def _any_by_count(mask: Tensor, dim=None, keepdim: bool = False) -> Tensor:
    return (mask.sum() if dim is None else mask.sum(dim=dim, keepdim=keepdim)) > 0


def all_of(mask: Tensor, dim=None, keepdim: bool = False) -> Tensor:
    """``mask.all(dim)``, taken as :func:`any_of` takes its reductions."""
    if mask.device.type == "cpu":
        return mask.all() if dim is None else mask.all(dim=dim, keepdim=keepdim)
    return ~_any_by_count(~mask, dim, keepdim)


def _as_cond(c) -> Cond:
    if isinstance(c, Cond):
        return c
    if isinstance(c, Tensor) and c.dtype == torch.bool:
        return Cond(c, None)
    raise InvalidArgument(f"expected a condition (a comparison of tracked tensors or a bool tensor), "
                          f"got {type(c).__name__}.")


# --------------------------------------------------------------------------- tracked tensor

def _folded_into_dot(fm, x, y, shape, ctx):
    """``dot + c`` where Triton folds c into the dot's accumulator (one K step, or an online
    softmax's ``tl.dot(p, v, acc)``): every instruction of the dot then aligns and rounds with c
    among its terms: ``dot_fold`` (set by ops.matmul) is the factor on |c| and an absolute term
    (the one rounding more each product passes on FMAs, or None); the add's own rounding, kept,
    covers the unfolded add."""
    for dot, other in ((x, y), (y, x)):
        if dot.dot_fold is None:
            continue
        factor, extra = dot.dot_fold
        mag = factor * (other.c.abs() + other.radius()).expand(shape)
        if extra is not None:
            mag = mag + extra.expand(shape)
        fm = FM.add_det(fm, ctx.label("fp32 add folded into a dot"), mag, ctx.condensed)
    return fm


class Tracked:
    """A value of the reference program, as a kernel would hold it."""

    __slots__ = ("c", "fmt", "repr_fmt", "form", "ctx", "taint", "pre", "_R", "k", "scaled_by", "dot_fold",
                 "known", "overflow", "is_square")
    __array_priority__ = 1000

    def __init__(self, c, fmt, form, ctx, *, repr_fmt=None, taint=None, pre=None, known=False):
        self.c = c
        self.fmt = fmt
        self.repr_fmt = repr_fmt or fmt
        self.form = form
        self.ctx = ctx
        self.taint = taint
        self.pre = pre
        self._R = None
        self.k = None        # the Python number, for a constant of the program
        self.scaled_by = None  # the Python number a product multiplied by (exp2's log2 e)
        # a GPU dot's result as it leaves the dot (ops.matmul): (factor on |c|, absolute term or
        # None), what an add that Triton folds into the dot's accumulator adds (_folded_into_dot)
        self.dot_fold = None
        # a value the kernel is given exactly (an input, a runtime argument, an exact constant),
        # perhaps widened, negated, its magnitude taken, sliced or reshaped: a sum of two such is
        # decided (_binary).  The emulator marks at least these (selftest.emulator.Emulated.known)
        self.known = known
        # a product's elements certainly past its format's range: tainted, as a contraction into
        # an add may skip the rounding that makes them infinite, but read as that infinity by
        # every operation that cannot be contracted with it (``rounded``)
        self.overflow = None
        # x * x of one value: never below 0, whatever its enclosure (calculus.ops.sum)
        self.is_square = False

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

    def rounded(self) -> "Tracked":
        """The value as an operation that takes the rounded result reads it (a product, a
        quotient, a comparison, a math call, a narrowing cast, a maximum, a store): where a
        product is certainly past its format's range (``overflow``), that infinity, exactly.
        Only an add or subtract may be contracted with a product (an FMA rounds once, so the
        sum may be finite): ``_binary`` judges those itself."""
        if self.overflow is None:
            return self
        return _overflowed(self, self.pre if self.pre is not None else self, self.overflow)

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
        if math.isinf(v):
            self.ctx.infinities = True
        c = torch.tensor(v, dtype=torch.float64, device=self.c.device)
        fm = FM.Form()
        rv = F.round_scalar(v, fmt)
        err = 0.0 if rv == v else abs(rv - v)          # (an infinity is exact: inf - inf is NaN)
        if err:
            fm = FM.add_det(fm, self.ctx.label(f"constant {v!r} in {fmt}"),
                            torch.tensor(err, dtype=torch.float64, device=self.c.device), self.ctx.condensed)
        t = Tracked(c, fmt, fm, self.ctx, known=not err)
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
                       FM.Form(), self.ctx, known=True)

    # ---- rounding sites
    def _round(self, fmt: F.Format, what: str, scaled: Tensor | None = None,
               tiny_below: float | None = None, settle: bool = False,
               known_settles: bool = False, overflows_exactly: bool = True) -> "Tracked":
        """Round to fmt: a private rounding error of at most u|c| per element, none where
        the value is exact or where ``scaled`` says the operation only scaled by a power
        of two (those keep the underflow term).  The absolute underflow term applies below
        ``tiny_below`` (default: fmt's smallest normal; a product's threshold is higher,
        see ``underflow_threshold``).  ``settle``: an explicit rounding (``_settle``).
        ``known_settles``: a rounding no contraction skips (a sum's): where the value is
        known exactly (R = 0), normal and at most max_finite in magnitude, the result is its
        rounding, exactly.  ``overflows_exactly``: where the whole enclosure is past fmt's
        overflow threshold the result is that infinity, exactly (``_certain_overflow``); False
        for a product, whose rounding a contraction into an add may skip: those elements stay
        tainted, marked for the operations that read them rounded (``Tracked.rounded``)."""
        ctx = self.ctx
        R = self.radius()
        c = self.c
        label = ctx.label(what)
        mag = c.abs() + R
        # round to nearest takes every |value| below the threshold to at most max_finite (a
        # correct store of such a value is finite), and the relative bound u|value| holds there
        thr = F.overflow_threshold(fmt)
        ok = _exact_inf_ok(mag < thr, c, R, fmt)
        over = _certain_overflow(self, thr, fmt) if not ctx.all(ok) else None
        if over is not None and overflows_exactly:
            ok = ok | over
        ctx.record(label, "range", str(fmt), f"|value| < {thr:.6g} (rounds to at most {fmt.max_finite:.6g})",
                   ok, mag)
        taint = self.taint if ctx.all(ok) else _or(self.taint, ~ok)
        u = fmt.u
        zero_r = R == 0
        rlo = None
        if ctx.any(zero_r):
            if known_settles and ctx.settle:
                # a known value's rounding is decided: RN(c), computed in place of the test that
                # c is a value of fmt, is the result inside fmt's normal range (subnormal and
                # out-of-range results keep their terms, as a settled cast's do)
                rc = F.round_within_range(c, fmt)
                inside = c.abs() <= fmt.max_finite
                decided = zero_r & inside & (c.abs() >= fmt.min_normal)
                exact = decided | (zero_r & (((rc == c) & inside) | (c.abs() == math.inf)))
                c = torch.where(decided, rc, c)
            elif settle and ctx.settle and F.rounds_by_magic(c, fmt):
                # compiled for the CPU, representable() is a rounding of its own; the settling
                # rounds lo = c - R anyway, which is c where R = 0: c in range (ok) is a value of
                # fmt iff it is that rounding (subnormals included), and infinities are values
                rlo = F.round_within_range(c - R, fmt)
                exact = zero_r & (((rlo == c) & ok) | (c.abs() == math.inf))
            else:
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
        tiny = (c.abs() - R) < (fmt.min_normal if tiny_below is None else tiny_below)
        extra = u * R
        if ctx.any(tiny):
            # (a float64 mask times eta: torch.where on two Python numbers gives float32,
            # where fp32's half-subnormal 2^-150 is 0)
            extra = extra + (tiny & ~exact).to(torch.float64) * eta
        if ctx.any((extra > 0)):
            fm = FM.add_det(fm, f"{label} (second order, underflow)", extra, ctx.condensed)
        out = Tracked(c, fmt, fm, ctx, repr_fmt=fmt, taint=taint, pre=self)
        if over is not None:
            if not overflows_exactly:
                return _pending(out, over)
            out = _overflowed(out, self, over)
        if not settle:
            return out
        assert tiny_below is None, "a settled rounding's underflow test is at fmt's smallest normal"
        # settling rounds the enclosure's ends within the range only (round_within_range)
        return out._settle(self, ~tiny & (mag <= fmt.max_finite), rlo)

    def to(self, fmt) -> "Tracked":
        fmt = _fmt_arg(fmt)
        # a narrowing cast takes a product's rounded value, even one that changes no bits (2x of
        # a bf16 value, cast back to bf16); a widening one may not (an FMA in the wider format),
        # and leaves the mark behind
        src = self if _subset(self.fmt, fmt) else self.rounded()
        if _subset(src.repr_fmt, fmt):
            # no rounding: the value (and the rounding that made it, for the
            # rounding-interval check of an output) stay what they were
            t = Tracked(src.c, fmt, src.form, src.ctx, repr_fmt=src.repr_fmt, taint=src.taint,
                        pre=src.pre if fmt == src.fmt else None, known=src.known)
            if fmt == src.fmt:
                t.dot_fold = src.dot_fold      # a no-op cast: Triton still folds an add into the dot
            return t
        return src._round(fmt, f"round to {fmt} (.to)", settle=True)

    def _settle(self, src: "Tracked", normal: Tensor, rlo: Tensor | None = None) -> "Tracked":
        """A cast whose whole enclosure rounds to one value of its format has
        that value exactly: no error term remains for those elements.  Only
        explicit casts settle (a rounded product may be contracted into an
        FMA and skip its rounding); the enclosure is the fixed-input one, so
        this holds in both modes.  ``self`` is ``src._round(...)``, and ``normal``
        where |c| - R >= fmt's smallest normal and |c| + R <= max_finite; ``rlo`` the
        rounding of c - R where the rounding took it already."""
        if not self.ctx.settle:
            return self
        fmt = self.fmt
        R = src.radius()
        lo, hi = src.c - R, src.c + R
        # both ends in fmt's normal range, from the rounding's own tests.  The top: ``normal``
        # leaves out every element where |c| + R > max_finite, and the range site put the NaNs
        # in self.taint; elsewhere R is finite and max(|lo|, |hi|) is that same rounded sum
        # (R >= 0).  The bottom: where R <= |c|, min(|lo|, |hi|) is the same rounded |c| - R;
        # where R > |c| the ends have opposite signs and never round to one value, so leaving
        # them out decides no less
        ok = normal if self.taint is None else normal & ~self.taint
        if not self.ctx.any(ok):
            return self
        # ok holds only ends inside the format's normal range, all that round_within_range rounds
        if rlo is None:
            rlo = F.round_within_range(lo, fmt)
        decided = ok & (rlo == F.round_within_range(hi, fmt))
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
        if op in ("mul", "div"):
            x, y = x.rounded(), y.rounded()
        x, y = x._promoted(shape), y._promoted(shape)
        cond = self.ctx.condensed
        # an operand product certainly past its range (``Tracked.overflow``) that an FMA may
        # contract with this add (a promotion that rebuilt the operand dropped the mark, and the
        # taint stays)
        pend = _or(x.overflow, y.overflow) if op in ("add", "sub") else None
        if pend is not None:
            pend = pend.expand(shape)
            taint = _or(_unmarked_taint(x), _unmarked_taint(y))
        else:
            taint = _or(x.taint, y.taint)
        if taint is not None:
            taint = taint.expand(shape) if taint.shape != shape else taint
        if op == "add":
            addend = y.c
            fm = FM.add(x.form, y.form, cond)
        elif op == "sub":
            addend = -y.c
            fm = FM.add(x.form, FM.scale(y.form, -1.0), cond)
        elif op == "mul":
            return _mul(x, y, fmt, shape, taint)
        elif op == "div":
            return _div(x, y, fmt, shape, taint)
        else:  # pragma: no cover
            raise AssertionError(op)
        c = x.c + addend
        # a sum of known values is known where its float64 centre is exact, that is where taking
        # either operand away gives back the other (taking away the larger is exact, as in
        # Fast2Sum): no slack there, and fmt's rounding of it is decided (a tie of fmt too).
        # Tested only for known operands: elsewhere the sum carries their errors
        known = x.known and y.known
        inexact = c
        if known:
            inexact = torch.where(((c - x.c) == addend) & ((c - addend) == x.c), 0.0, c)
        c = c.expand(shape).clone() if c.shape != shape else c
        fm = _folded_into_dot(fm, x, y, shape, self.ctx)
        fm = _fp64_slack(fm, inexact, self.ctx)
        inf = _infinite_sum(x, y)
        if inf is not None and self.ctx.any(inf):
            # an exact infinity plus or minus a finite value is that infinity, exactly
            fm = FM.masked(fm, ~inf)
            if taint is not None:
                taint = taint & ~inf
        if pend is not None:
            # a product past the range plus a finite value: RN(p) is infinite and so is RN(p) + y,
            # but an FMA rounds p + y once.  Where that sum is certainly past the range too, both
            # are the same infinity (the rounding below makes it so).  Two such products may both
            # round (inf - inf is NaN); there, and elsewhere, the element is uncertified
            over = _certain_overflow(Tracked(c, fmt, fm, self.ctx, taint=taint), F.overflow_threshold(fmt), fmt)
            sure = torch.zeros_like(pend) if over is None else pend & over & torch.isfinite(c)
            if x.overflow is not None and y.overflow is not None:
                sure = sure & ~(x.overflow & y.overflow).expand(shape)
            taint = _or(taint, pend & ~sure)
        t = Tracked(c, fmt, fm, self.ctx, taint=taint)
        # a sum's rounding is never skipped (contraction fuses a product into an add, not an
        # add into anything)
        return t._round(fmt, f"{fmt} {op}", known_settles=known)

    def __add__(self, o): return self._binary(o, "add")
    def __radd__(self, o): return self._binary(o, "add", reverse=True)
    def __sub__(self, o): return self._binary(o, "sub")
    def __rsub__(self, o): return self._binary(o, "sub", reverse=True)
    def __mul__(self, o): return _squared(_scaled(self._binary(o, "mul"), o), self, o)
    def __rmul__(self, o): return _scaled(self._binary(o, "mul", reverse=True), o)
    def __truediv__(self, o): return self._binary(o, "div")
    def __rtruediv__(self, o): return self._binary(o, "div", reverse=True)

    def __neg__(self):
        # -(a * b) + c is still an FMA: a product's mark stays
        t = Tracked(-self.c, self.fmt, FM.scale(self.form, -1.0), self.ctx,
                    repr_fmt=self.repr_fmt, taint=self.taint, known=self.known)
        t.overflow = self.overflow
        return t

    def __abs__(self):
        # |x| is 1-Lipschitz; where the sign is known it is +-x exactly
        self = self.rounded()
        sign = torch.sign(self.c)
        R = self.radius()
        unknown = self.c.abs() <= R
        fm = FM.scale(self.form, torch.where(unknown, torch.ones_like(sign), sign))
        if self.ctx.any(unknown):
            # where the sign is unknown, |x~| differs from |c| + e by at most 2|c| <= 2R
            fm = FM.add_det(fm, self.ctx.label("abs near zero"),
                            torch.where(unknown, 2 * R, torch.zeros_like(R)), self.ctx.condensed)
        return Tracked(self.c.abs(), self.fmt, fm, self.ctx, repr_fmt=self.repr_fmt, taint=self.taint,
                       known=self.known)

    def abs(self):
        return self.__abs__()

    # ---- comparisons (decided by the centre; undecided where enclosures touch)
    def _cmp(self, other, op):
        y = self._coerce(other).rounded()
        x = self.rounded()
        d = x.c - y.c
        r = x.radius() + y.radius()
        val = {"gt": d > 0, "ge": d >= 0, "lt": d < 0, "le": d <= 0, "eq": d == 0, "ne": d != 0}[op]
        undecided = (d.abs() <= r) & (r > 0)
        taint = _or(x.taint, y.taint)
        if taint is not None:
            taint = taint.expand(val.shape) if taint.shape != val.shape else taint
        return Cond(val, undecided if self.ctx.any(undecided) else None, taint)

    def __gt__(self, o): return self._cmp(o, "gt")
    def __ge__(self, o): return self._cmp(o, "ge")
    def __lt__(self, o): return self._cmp(o, "lt")
    def __le__(self, o): return self._cmp(o, "le")
    # == and != compare per element too (a Python identity test would silently answer
    # False for every element); identity stays the hash
    def __eq__(self, o): return self._cmp(o, "eq")
    def __ne__(self, o): return self._cmp(o, "ne")
    __hash__ = object.__hash__

    # ---- Python conversions that would silently take one value for the whole tensor
    def __bool__(self):
        raise LanguageMisuse(
            f"a tracked {self.fmt} tensor (shape {self.shape}) was used as a Python bool (if x:, "
            f"and/or/not): a reference program cannot branch on a tracked value. Select per element "
            f"with no.where(x > 0, a, b) (or x != 0 for a truth test).")

    def __iter__(self):
        raise LanguageMisuse(
            f"a tracked {self.fmt} tensor (shape {self.shape}) cannot be iterated over: Python's "
            f"sum(x), max(x), min(x), sorted(x), list(x) and unpacking would loop over its first "
            f"axis with Python arithmetic. Reduce with no.sum(x, axis=...), no.max, no.min, "
            f"no.mean, or take rows with x[i].")

    def _no_scalar(self, what: str):
        raise LanguageMisuse(
            f"{what} of a tracked {self.fmt} tensor (shape {self.shape}): a tracked value is not a "
            f"Python number (Python's float(), int(), round() and the math module's functions "
            f"would take one number, with no rounding model). Use the reference language's "
            f"functions, which model the kernel's math calls: no.exp, no.exp2, no.log, no.log2, "
            f"no.sqrt, no.rsqrt, no.sigmoid, no.tanh, no.erf, no.sin, no.cos, abs(x), "
            f"no.maximum/no.minimum; a cast to a format is x.to(fp32).")

    def __float__(self): self._no_scalar("float() (or a math.* function)")
    def __int__(self): self._no_scalar("int()")
    def __index__(self): self._no_scalar("an integer index (int)")
    def __complex__(self): self._no_scalar("complex()")
    def __round__(self, ndigits=None): self._no_scalar("round()")
    def __floor__(self): self._no_scalar("math.floor()")
    def __ceil__(self): self._no_scalar("math.ceil()")
    def __trunc__(self): self._no_scalar("math.trunc()")

    def __array_ufunc__(self, ufunc, method, *args, **kw):
        name = getattr(ufunc, "__name__", str(ufunc))
        spelled = _NO_SPELLING.get(name)
        raise LanguageMisuse(
            f"numpy.{name} was given a tracked {self.fmt} tensor: numpy does not model the kernel's "
            f"rounding. " + (f"Write {spelled}." if spelled else "Use the numoracle.* functions "
                             "(import numoracle as no).") )

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        return _torch_function(func)

    # ---- powers: products, as a kernel writes them
    def __pow__(self, n):
        if isinstance(n, bool) or not isinstance(n, int):
            if isinstance(n, float) and n.is_integer():
                n = int(n)
            else:
                hint = (" For a square root write no.sqrt(x); for 1/sqrt(x) no.rsqrt(x) or "
                        "1.0 / no.sqrt(x), whichever the kernel calls." if n in (0.5, -0.5) else
                        " For a general power write the kernel's math calls (no.exp2(y * no.log2(x)) "
                        "for exp2(y*log2(x))).")
                raise LanguageMisuse(
                    f"x ** {n!r} on a tracked tensor: only non-negative integer exponents are "
                    f"products (x ** 2 is x * x).{hint}")
        if n < 0:
            raise LanguageMisuse(
                f"x ** {n} on a tracked tensor: a negative power is a division; write "
                f"1.0 / x ** {-n} (or 1.0 / (x * x)), the division the kernel computes.")
        if n == 0:
            return full_like(self, 1.0)
        # x * x * ... * x, left to right: n - 1 products, each rounded in x's format as
        # the kernel's tl multiplications are (x ** 2 is the single product x * x)
        out = self
        for _ in range(n - 1):
            out = out * self
        return out

    def __rpow__(self, base):
        raise LanguageMisuse(
            f"{base!r} ** x with a tracked exponent: write the kernel's math call, "
            f"no.exp2(x) for 2 ** x, no.exp(x) for e ** x, no.exp2(x * log2(b)) for another base b.")

    def pow(self, n):
        return self ** n

    # ---- torch-style conveniences (casts) and misspellings
    def float(self):
        """x.to(fp32), as torch's .float()."""
        return self.to(F.fp32)

    def half(self):
        """x.to(fp16), as torch's .half()."""
        return self.to(F.fp16)

    def bfloat16(self):
        """x.to(bf16), as torch's .bfloat16()."""
        return self.to(F.bf16)

    def __getattr__(self, name):
        # only reached for names a tracked tensor lacks
        if name.startswith("__") or name in Tracked.__slots__:
            raise AttributeError(name)
        spelled = _NO_SPELLING.get(name)
        hint = f" {_spelling_hint(spelled)}" if spelled else (
            " A tracked tensor has .to(fmt), .float(), .half(), .bfloat16(), .abs(), .pow(n), "
            ".reshape, .transpose, .T, .unsqueeze, .squeeze, indexing, .shape, .ndim and .format; "
            "everything else is a numoracle function (import numoracle as no).")
        raise MisspelledMethod(f"a tracked tensor has no attribute .{name}.{hint}")

    # ---- indexing and shape
    def __getitem__(self, idx):
        for i in idx if isinstance(idx, tuple) else (idx,):
            if isinstance(i, Cond):
                raise LanguageMisuse(
                    f"a tracked tensor (shape {tuple(self.shape)}) was indexed by a comparison of tracked values "
                    f"(a mask of shape {i.shape}): that keeps the elements where the reference's centre answers "
                    f"True, but the kernel's values may answer differently, and the result's shape would depend on "
                    f"it. Keep the shape and select per element: no.where(cond, x, 0.0), and reduce that "
                    f"(no.sum(no.where(cond, x, 0.0), axis=-1)) for a sum over the selected elements.")
            if isinstance(i, Tracked):
                raise LanguageMisuse(
                    f"a tracked tensor (shape {tuple(self.shape)}) was indexed by tracked values ({i.fmt}, shape "
                    f"{tuple(i.shape)}): a tracked value is not an index. Indices come from an integer input (pass "
                    f"labels or positions as an integer tensor), no.argmax or no.topk; select with them by no.gather(x, ids, axis).")
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


# torch / numpy names -> the reference language's spelling (for the errors above)
_NO_SPELLING = {
    **{f: f"no.{f}(x)" for f in ("exp", "exp2", "log", "log2", "sqrt", "rsqrt", "sigmoid", "tanh",
                                  "erf", "sin", "cos", "reciprocal")},
    "sum": "no.sum(x, axis=-1, keepdims=False) (axis=, not dim=)",
    "mean": "no.mean(x, axis=-1, keepdims=False) (axis=, not dim=)",
    "max": "no.max(x, axis=-1) for a reduction, no.maximum(a, b) elementwise",
    "amax": "no.max(x, axis=-1)", "amin": "no.min(x, axis=-1)",
    "min": "no.min(x, axis=-1) for a reduction, no.minimum(a, b) elementwise",
    "maximum": "no.maximum(a, b)", "minimum": "no.minimum(a, b)", "fmax": "no.maximum(a, b)",
    "fmin": "no.minimum(a, b)", "clamp": "no.clamp(x, lo, hi)", "clip": "no.clamp(x, lo, hi)",
    "where": "no.where(cond, a, b)", "logsumexp": "no.logsumexp(x, axis=-1)",
    "matmul": "no.matmul(a, b)", "mm": "no.matmul(a, b)", "bmm": "no.matmul(a, b)",
    "dot": "no.matmul(a, b)", "cat": "no.cat([a, b], axis=-1)", "concatenate": "no.cat([a, b], axis=-1)",
    "gather": "no.gather(x, index, axis=-1)", "argmax": "no.argmax(x, axis=-1)",
    "argmin": "no.argmin(x, axis=-1)", "topk": "no.topk(x, k, axis=-1)", "abs": "abs(x)", "absolute": "abs(x)",
    "square": "x * x", "pow": "x ** n (a non-negative integer n: products)", "power": "x ** n",
    "float_power": "x ** n", "exp_": "no.exp(x)", "neg": "-x", "negative": "-x",
    "softmax": "e = no.exp(x - no.max(x, axis=-1, keepdims=True)); e / no.sum(e, axis=-1, keepdims=True)",
    "log_softmax": "x - no.logsumexp(x, axis=-1, keepdims=True)",
    "full_like": "no.full_like(x, value)", "zeros_like": "no.zeros_like(x)",
    "ones_like": "no.ones_like(x)", "type": "x.to(fmt)", "double": "x.to(fp64)",
    "view": "x.reshape(...)", "permute": "x.transpose(a, b)", "add": "a + b", "sub": "a - b",
    "subtract": "a - b", "mul": "a * b", "multiply": "a * b", "div": "a / b (or no.div(a, b))",
    "divide": "a / b (or no.div(a, b))", "true_divide": "a / b",
    "item": "nothing: return the value as an output of the program",
    "numpy": "nothing: return the value as an output of the program",
    "tolist": "nothing: return the value as an output of the program",
    "size": "x.shape", "dim": "x.ndim", "dtype": "x.format",
}


def full_like(x: "Tracked", value, fmt=None) -> "Tracked":
    """A constant tensor of x's shape (and device), in ``fmt`` (default: x's format): the
    constant rounded once to that format, as ``tl.full`` makes it; no dependence on x's
    values, so none of x's errors or taint."""
    fmt = x.fmt if fmt is None else _fmt_arg(fmt)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise LanguageMisuse(f"full_like(x, {value!r}): expected a Python number for the constant "
                              f"(a tensor of values is an input of the program).")
    v = float(value)
    rv = F.round_scalar(v, fmt)
    if not math.isfinite(rv) and math.isfinite(v):
        raise InvalidArgument(f"full_like(x, {v!r}) in {fmt}: the constant overflows {fmt} "
                              f"(largest finite {fmt.max_finite:.6g}); choose a wider format.")
    # the value the kernel holds is the rounded constant: exact, known, no error term
    if math.isinf(rv):
        x.ctx.infinities = True
    c = torch.full(x.c.shape, rv, dtype=torch.float64, device=x.c.device)
    return Tracked(c, fmt, FM.Form(), x.ctx, known=True)


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
        return scale_pow2(x, y.k, taint)
    if x.k is not None and x.form.is_zero() and _is_pow2(x.k) and fmt is y.fmt:
        return _mul(y, x, fmt, shape, taint)
    c = x.c * y.c
    fm = FM.add(FM.scale(x.form, y.c), FM.scale(y.form, x.c), ctx.condensed)
    Rx, Ry = x.radius(), y.radius()
    second = Rx * Ry
    if ctx.any((second > 0)):
        fm = FM.add_det(fm, ctx.label(f"{fmt} mul (second order)"), second, ctx.condensed)
    if x.repr_fmt.precision + y.repr_fmt.precision <= 53:
        # where both factors are known exactly (no error: values of their formats, at most
        # 53 significand bits together) the float64 product is exact and needs no slack;
        # a value known exactly then stays so through a rounding that changes nothing
        # (t*t of a saturated tanh t = 1)
        known = (Rx == 0) & (Ry == 0)
        c_inexact = torch.where(known, torch.zeros_like(c), c) if ctx.any(known) else c
        fm = _fp64_slack(fm, c_inexact, ctx)
    else:
        fm = _fp64_slack(fm, c, ctx)
    inf = _infinite_product(x, y)
    if inf is not None and ctx.any(inf):
        # an exact infinity times a value of known sign, certainly finite and non-zero, is an
        # infinity exactly ((x - m) * log2 e of a masked x)
        fm = FM.masked(fm, ~inf)
        if taint is not None:
            taint = taint & ~inf
    if c.shape != shape:
        c = c.expand(shape).clone()
    t = Tracked(c, fmt, fm, ctx, taint=taint)
    # below this the product may underflow, or its contraction with an add into an FMA
    # may round a subnormal result (its bits reach below the smallest subnormal)
    thr = underflow_threshold(x.repr_fmt.precision, y.repr_fmt.precision, fmt)
    # a product of values with p1 + p2 <= p significand bits is exact in p bits
    if x.repr_fmt.precision + y.repr_fmt.precision <= fmt.precision:
        return _product_range(_underflow_only(t, fmt, f"{fmt} mul (exact)", thr), t, fmt)
    # a runtime scalar (one element: testing it costs nothing) that is a power of two scales
    # exactly, as a Python number does
    masks = [_pow2_scale(s) for s in (y, x) if s.c.numel() == 1]
    scaled = next((m for m in masks if m is not None), None)
    return t._round(fmt, f"{fmt} mul", scaled=scaled, tiny_below=thr, overflows_exactly=False)


def scale_pow2(x: Tracked, g, taint) -> Tracked:
    """x times a power of two g (a Python number, or one computed from a symbolic size:
    ``mean``), in x's format."""
    ctx, fmt = x.ctx, x.fmt
    t = Tracked(x.c * g, fmt, FM.scale(x.form, g), ctx, repr_fmt=x.repr_fmt, taint=taint)
    if g >= 1:
        # exact, but the scaled value may leave the format's range: a site of its own
        return _product_range(_range_only(t, fmt, f"{fmt} mul by {ctx.number(g)}"), t, fmt)
    # scaling down is exact only while the result stays normal
    u = _underflow_only(t, fmt, f"{fmt} mul by {ctx.number(g)}")
    return Tracked(u.c, fmt, u.form, ctx, repr_fmt=x.repr_fmt, taint=u.taint)


def underflow_threshold(pa: int, pb: int, fmt) -> float:
    """Below what magnitude a product of a p_a-bit and a p_b-bit value may carry an absolute
    error when it is rounded to ``fmt``, or fused into an FMA whose result is rounded: where
    it is subnormal in fmt (relative error unbounded there), or where its exact value has
    bits below fmt's smallest subnormal (its lowest bit is above |x y| 2^-(p_a + p_b)), so
    that a subnormal result of adding it is inexact."""
    if not fmt.subnormals:
        return fmt.min_normal
    return max(fmt.min_normal, fmt.min_subnormal * 2.0 ** (pa + pb))


def _range_only(t: Tracked, fmt, what) -> Tracked:
    """An exact operation's result: certified against fmt's finite range, nothing added."""
    R = t.radius()
    ok = _exact_inf_ok((t.c.abs() + R) <= fmt.max_finite, t.c, R, fmt)
    t.ctx.record(t.ctx.label(what), "range", str(fmt), f"|value| <= {fmt.max_finite:.6g}", ok, t.c.abs() + R)
    if t.ctx.all(ok):
        return t
    return Tracked(t.c, fmt, t.form, t.ctx, repr_fmt=t.repr_fmt, taint=_or(t.taint, ~ok), pre=t.pre)


def _underflow_only(t: Tracked, fmt, what, tiny_below: float | None = None) -> Tracked:
    R = t.radius()
    # an exact zero (a product of values known exactly, one of them 0: a padded or masked
    # row) has nothing to lose, in a rounding or in an FMA it is contracted into
    tiny = ((t.c.abs() - R) < (fmt.min_normal if tiny_below is None else tiny_below)) & ((t.c != 0) | (R != 0))
    ok = _exact_inf_ok((t.c.abs() + R) <= fmt.max_finite, t.c, R, fmt)
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
    inf = _infinite_product(q, r)
    if inf is not None and ctx.any(inf):
        # an exact infinity over a finite value of known sign is an infinity exactly (the mean
        # of a sum of squares that overflowed)
        fm = FM.masked(fm, ~inf)
    if c.shape != shape:
        c = c.expand(shape).clone()
    t = Tracked(c, fmt, fm, ctx, taint=_or(taint, r.taint))
    if call == "div" and x.k == 1.0 and x.form.is_zero() and "recip" in ctx.profile.functions:
        call = "recip"               # 1.0 / y: the GPU's reciprocal is more accurate than x / y
    # an exactly known divisor that is a power of two (a count of 64 rows) only scales, as a
    # Python number does; decided per element on the device
    return _library_error(t, call, x_abs=None, what="division" if call in ("div", "recip") else call,
                          scaled=_pow2_scale(y), overflows=True)


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
    x = x.rounded()
    ctx = x.ctx
    f = FUNCTIONS[name]
    R = x.radius()
    lo, hi = x.c - R, x.c + R
    ok = f.in_domain(lo, hi)
    if ctx.profile.ftz and name in _FTZ_POLES:
        # a flushed subnormal argument becomes 0 (see _FTZ_POLES)
        ok = ok & ((lo >= F.fp32.min_normal) | (hi <= -F.fp32.min_normal))
    label = ctx.label(name)
    inf = None
    if f.overflow_above is not None:
        # past its overflow the call returns +inf, an exact value (Function.overflow_above)
        inf = lo >= f.overflow_above
        if x.taint is not None:
            inf = inf & ~x.taint
        if ctx.any(inf):
            ok = ok | inf
            ctx.infinities = True
        else:
            inf = None
    ctx.record(label, "domain", str(x.fmt), f.domain_text, ok,
               torch.maximum(lo.abs(), hi.abs()))
    taint = x.taint if ctx.all(ok) else _or(x.taint, ~ok)
    with torch.no_grad():
        c = f.value(x.c)
        g = f.deriv(x.c) if f.deriv_value is None else f.deriv_value(x.c, c)
    fm = FM.scale(x.form, g)
    if ctx.any((R > 0)):
        # lo and hi move outward past their float64 rounding (c -+ R is rounded once: 2^-52 of
        # it is more than that ulp), so that sup |f''| and the image are taken over an interval
        # that holds the real enclosure; the image's f(whi) or f(wlo) is then the same
        # expression as the curvature's, evaluated once (softmax's exp: two calls, not three)
        wlo = lo - lo.abs() * 2.0 ** -52
        whi = hi + hi.abs() * 2.0 ** -52
        rem = torch.where(R > 0, 0.5 * f.curvature(wlo, whi) * R * R, torch.zeros_like(R))
        if f.image is not None:
            fm, rem = _image_cap(ctx, fm, rem, f, wlo, whi, x.c, c, g.abs() * R)
        fm = FM.add_det(fm, f"{label} (second order)", rem, ctx.condensed)
    if f.zero_below is not None:
        zero = lo < f.zero_below
        if ctx.any(zero):
            # f's value there is below fp32's smallest normal (functions.Function.zero_below)
            fm = FM.add_det(fm, f"{label} (0 below {f.zero_below:g})", zero.to(torch.float64) * F.fp32.min_normal,
                            ctx.condensed)
    if ctx.profile.ftz and name in _FTZ_FLUSH_ABS:
        meets = (lo < F.fp32.min_normal) & (hi > -F.fp32.min_normal) & ((lo != 0) | (hi != 0))
        if ctx.any(meets):
            fm = FM.add_det(fm, f"{label} (flush to zero)", meets.to(torch.float64) * _FTZ_FLUSH_ABS[name],
                            ctx.condensed)
    fm = _fp64_slack(fm, c, ctx)
    if inf is not None:
        c = torch.where(inf, math.inf, c)
        fm = FM.masked(fm, ~inf)
    out = Tracked(c, x.fmt, fm, ctx, taint=taint)
    out.pre = None
    out._R = None
    # remember the enclosure's magnitude for the library error
    out.repr_fmt = x.fmt
    return out


def _image_cap(ctx: Context, fm: FM.Form, rem: Tensor, f, wlo: Tensor, whi: Tensor, x_c: Tensor, c: Tensor,
               lin: Tensor):
    """Cap f's first- and second-order terms by what f can reach over the enclosure
    (docs/design.md §4.1).  With D = sup |f(x~) - f(c)| over [wlo, whi] (``f.image``;
    the enclosure widened past its float64 rounding, so that it holds the real
    interval): the remainder r = f(x~) - f(c) - g e obeys |r| <= D + |g e| <= D + |g| R,
    a bound that holds with the linear form kept; and where D < |g| R even the
    first-order term says more than f can do, so the element's whole error is the
    deterministic D (its symbols dropped: the bound is on f's value, whatever they are)."""
    with torch.no_grad():
        D = f.image(wlo, whi, x_c, c)
    # comparisons with NaN (an enclosure outside the domain) are false: the bound is kept
    rem = torch.where(D + lin < rem, D + lin, rem)
    use_image = D < lin
    if ctx.any(use_image):
        fm = FM.masked(fm, ~use_image)
        rem = torch.where(use_image, D, rem)
    return fm, rem


def _library_error(t: Tracked, call: str, x_abs, what: str, scaled: Tensor | None = None,
                   below: float | None = None, overflows: bool = False) -> Tracked:
    """Add the math library's error for ``call`` to an exact function value t; where
    ``scaled`` is set (a division by a power of two) only the underflow's.  ``below``: the
    function's values lie strictly inside (-below, below), so the error is counted in ulps
    of values under it (the calibration's unit is the ulp of the exact value's binade).
    The result is a value of fp32: where the enclosure holds one fp32 value only, that
    value is exact.  ``overflows`` (a division): where the exact value is past the overflow
    threshold by more than the call's error, its result is that infinity, exactly."""
    ctx = t.ctx
    model = ctx.profile.model(call)
    label = ctx.label(f"{what} ({_ulps_text(model)})")
    if model.b == 0 and model.a <= 0.5:
        # RN(f(x~)) with f(x~) in t's enclosure: a call is never contracted into an FMA,
        # so the rounding-to-one-value rule of an explicit cast holds
        return t._round(F.fp32, f"{what} (correctly rounded)", scaled=scaled, settle=True)
    R = t.radius()
    mag = t.c.abs() + R
    ok = mag <= F.fp32.max_finite
    exact_inf = None
    if ctx.infinities:
        # an overflowed exp is +inf exactly (_exact_fn), and so is an exact infinity over a
        # finite value (_div): in range, with no library error
        exact_inf = _exact_infinity(t)
        ok = ok | exact_inf
    over = None
    if overflows and not model.b and not ctx.all(ok):
        # within a ulps of the exact value q means at least q (1 - a 2^-23) (an fp32 ulp is at
        # most 2^-23 of the value): past the threshold, only an infinity is that close
        over = _certain_overflow(t, F.overflow_threshold(F.fp32), F.fp32,
                                 margin=1.0 / (1.0 - model.a * 2.0 ** -23))
        if over is not None:
            ok = ok | over
    ctx.record(label, "range", "fp32", f"|value| <= {F.fp32.max_finite:.6g}", ok, mag)
    taint = t.taint if ctx.all(ok) else _or(t.taint, ~ok)
    ulps = model.ulps(x_abs) if (x_abs is not None and model.b) else model.a
    if below is not None:
        mag = torch.clamp(mag, max=_fp32_below(below))
    err = ulps * ulp_bound_fp32(mag)
    if ctx.profile.ftz:
        err = err + F.fp32.min_normal
    if exact_inf is not None:
        err = torch.where(exact_inf, 0.0, err)
    if scaled is not None:
        # exact, unless the quotient is subnormal: rounded there, or flushed to 0 under FTZ
        tiny = ((t.c.abs() - R) < F.fp32.min_normal).to(torch.float64)
        under = tiny * (F.fp32.min_normal if ctx.profile.ftz else F.fp32.min_subnormal / 2)
        err = torch.where(scaled, under, err)
    fm = FM.add_det(t.form, label, err, ctx.condensed)
    out = Tracked(t.c, F.fp32, fm, ctx, taint=taint)
    if over is not None:
        out = _overflowed(out, t, over)
    # (a value per row, last axis 1, keeps the check: it costs nothing there, and without its
    # select Inductor inlined layer_norm's row rsqrt into the per-element loops and split them,
    # 14.5 -> 18.3 ms at 10^6: docs/results/2026-12-05-cpu-vector-reductions.md)
    per_row = t.c.dim() > 0 and t.c.shape[-1] == 1
    if below is None and scaled is None and model.a >= 2 and not per_row:
        # never a single fp32 value, so _on_fp32_grid would return it as it is: the enclosure is
        # at least 2 a S wide (S = ulp_bound_fp32(mag), at least the fp32 spacing of the binade
        # [2^e, 2^(e+1)) of mag = |c| + R), and an interval at least twice as wide as every gap in
        # it holds two fp32 values.  Its largest magnitude is mag + ulps S: below 2^(e+2) while
        # ulps S < 2^e, where the gaps are at most 2 S <= a S; past that, gaps are at most
        # 2^-23 (mag + ulps S), far below ulps S.  (A function bounded by ``below`` counts S
        # under the bound, and can saturate: checked.  docs/design.md §4.1.)
        return out
    return _on_fp32_grid(out)


def _fp32_below(v: float) -> float:
    """The largest fp32 value below v (a positive fp32 value); a Python number, so a traced
    program sees a constant."""
    return float(np.nextafter(np.float32(v), np.float32(0)))


def _on_fp32_grid(t: Tracked) -> Tracked:
    """t is a math call's result, an fp32 value inside [c - R, c + R]: where that interval
    holds a single fp32 value v (RU(lo) = RD(hi)), the result is v, exactly (a
    saturated tanh is 1, so 1 - t*t is 0)."""
    ctx = t.ctx
    R = t.radius()
    lo, hi = t.c - R, t.c + R
    ok = F.finite(R) & (torch.maximum(lo.abs(), hi.abs()) <= F.fp32.max_finite)
    if t.taint is not None:
        ok = ok & ~t.taint
    if not ctx.any(ok & (R > 0)):
        return t
    # lo and hi are rounded float64 values: move them outward first, as _image_cap does
    up = F.round(lo - lo.abs() * 2.0 ** -52, F.fp32, "up")
    decided = ok & (up == F.round(hi + hi.abs() * 2.0 ** -52, F.fp32, "down"))
    if not ctx.any(decided):
        return t
    return Tracked(torch.where(decided, up, t.c), F.fp32, FM.masked(t.form, ~decided), ctx,
                   taint=t.taint)


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
    if not model.b:
        return f"{model.a:g} ulp"
    return f"{model.a:g}+{model.b:g}|x| ulp" + (f", at most {model.cap:g}" if model.cap is not None else "")


def _squared(out: Tracked, x, o) -> Tracked:
    """x * x of one tracked value: RN(x x) and an FMA's exact x x are never negative."""
    if o is x:
        out.is_square = True
    return out


def _scaled(out: Tracked, o) -> Tracked:
    if isinstance(o, (int, float)) and not isinstance(o, bool):
        out.scaled_by = float(o)
    return out


def _exact_inf_ok(ok: Tensor, c: Tensor, R: Tensor, fmt) -> Tensor:
    """A range check's ``ok``, with an exact infinity (no error) counted in range where fmt has
    infinities: a mask's -inf carried through exact arithmetic is a value, not an overflow."""
    return ok | ((c.abs() == math.inf) & (R == 0)) if fmt.has_inf else ok


# |c| - R is one float64 rounding of the real lower end: past the threshold by more than that
# rounding, the real end is past it too
_OVER_SLACK = 1.0 + 2.0 ** -50


def _certain_overflow(t: Tracked, thr: float, fmt, margin: float = 1.0) -> Tensor | None:
    """Elements whose whole enclosure lies past ``thr * margin`` (one sign): the kernel's
    rounding of them to fmt is that signed infinity, whatever the error (round to nearest takes
    every |value| >= the overflow threshold ``thr`` to infinity; ``margin`` > 1 for a call that
    is not correctly rounded).  A value known exactly (R = 0) is compared as it is.  Untainted
    elements only; None where fmt has no infinity or no element overflows certainly, and in a
    traced run: there these elements stay uncertified, and a compiled verdict with an uncertified
    element is judged eagerly (``verdict.compiled.plan``), so a verdict is the same either way
    while the compiled code carries none of this (it made layer_norm's 54% slower,
    docs/results/2026-12-07-certain-overflow.md)."""
    if not fmt.has_inf or t.ctx.traced:
        return None
    R = t.radius()
    over = (t.c.abs() - R) >= thr * margin * _OVER_SLACK
    if margin == 1.0:
        over = over | ((R == 0) & (t.c.abs() >= thr))
    if t.taint is not None:
        over = over & ~t.taint
    return over if t.ctx.any(over) else None


def _overflowed(out: Tracked, pre: Tracked, over: Tensor) -> Tracked:
    """``out`` (a rounding of ``pre`` to out.fmt) with the elements ``over`` certainly past the
    range made exact infinities of pre's sign, and untainted: an infinity is a value (design §4,
    "Exact infinities").  The value before the store is that infinity too, so an output judges
    it as one (``verdict.regions``)."""
    ctx = out.ctx
    ctx.infinities = True
    c = torch.where(over, torch.where(pre.c > 0, math.inf, -math.inf), out.c)
    taint = None if out.taint is None else out.taint & ~over
    before = Tracked(c, pre.fmt, FM.masked(pre.form, ~over), ctx, repr_fmt=pre.repr_fmt, taint=pre.taint)
    return Tracked(c, out.fmt, FM.masked(out.form, ~over), ctx, repr_fmt=out.repr_fmt, taint=taint,
                   pre=before)


def _unmarked_taint(x: Tracked) -> Tensor | None:
    """x's taint but for its elements marked as a product past the range (``Tracked.overflow``)."""
    if x.overflow is None or x.taint is None:
        return x.taint
    return x.taint & ~x.overflow


def _pending(out: Tracked, over: Tensor) -> Tracked:
    """A product's rounding ``out`` (tainted where ``over``), with ``over`` marked: its finite
    centres past the range, which an operation that cannot be contracted with the product reads
    as infinities (``Tracked.rounded``)."""
    over = over & torch.isfinite(out.c)      # an exact infinity times a value is one already
    if out.ctx.any(over):
        out.overflow = over
    return out


def _product_range(out: Tracked, t: Tracked, fmt) -> Tracked:
    """An exact product ``out`` (of enclosure ``t``) checked against fmt's range alone: where
    ``t`` is certainly past the overflow threshold, marked as a rounded product's are."""
    if out.taint is None or out.ctx.all(~out.taint):
        return out
    over = _certain_overflow(t, F.overflow_threshold(fmt), fmt)
    return out if over is None else _pending(out, over)


def _exact_infinity(x: Tracked) -> Tensor:
    """Elements that are exactly an infinity: an infinite centre with no error and no taint
    (a program's -inf constant: inputs that hold infinities are tainted)."""
    known = (x.c.abs() == math.inf) & (x.radius() == 0)
    return known if x.taint is None else known & ~x.taint


def _finite_enclosure(x: Tracked) -> Tensor:
    ok = (x.c.abs() + x.radius()) < math.inf
    return ok if x.taint is None else ok & ~x.taint


def _infinite_sum(x: Tracked, y: Tracked) -> Tensor | None:
    """Where x + y or x - y is exactly an infinity (IEEE): one operand an exact infinity, the
    other certainly finite.  None unless the program made an infinite constant."""
    if not x.ctx.infinities:
        return None
    return (_exact_infinity(x) & _finite_enclosure(y)) | (_exact_infinity(y) & _finite_enclosure(x))


def _infinite_product(x: Tracked, y: Tracked) -> Tensor | None:
    """Where x * y is exactly an infinity: one operand an exact infinity, the other's enclosure
    finite, untainted and clear of 0 (inf * 0 is NaN).  None unless the program made an
    infinite constant."""
    if not x.ctx.infinities:
        return None

    def nonzero(t):
        return _finite_enclosure(t) & (t.c.abs() > t.radius())
    return (_exact_infinity(x) & nonzero(y)) | (_exact_infinity(y) & nonzero(x))


def apply(x: Tracked, name: str, call: str | None = None) -> Tracked:
    """A kernel math call ``call`` (profile name) computing function ``name``."""
    call = call or name
    if x.fmt in (F.bf16, F.fp16):
        # Triton evaluates math functions on half formats in fp32 and rounds back
        return apply(x.to(F.fp32), name, call).to(x.fmt)
    if x.fmt is not F.fp32:
        raise InvalidArgument(f"{name} of a {x.fmt} value: math calls take fp32 (or bf16/fp16) "
                              f"arguments; add .to(fp32) as the kernel does.")
    xr = x.rounded()
    t = _exact_fn(xr, name)
    R = xr.radius()
    x_abs = torch.maximum((xr.c - R).abs(), (xr.c + R).abs())
    # a profile measured in ulps below 1 for functions inside (-1, 1) lets a saturated value
    # count its error in 2^-24, not the 2^-23 of the binade its float64 centre 1.0 is in
    below = FUNCTIONS[name].strict_bound if x.ctx.profile.units_below_one else None
    n0 = len(x.ctx.origins)
    out = _at_exact_points(_library_error(t, call, x_abs, call, below=below), xr, call)
    if name == "exp2" and x.scaled_by is not None and abs(x.scaled_by - LOG2E) < 1e-6:
        x.ctx.origins[n0:] = [replace(o, argument="log2e") for o in x.ctx.origins[n0:]]
    return out


def _at_exact_points(t: Tracked, x: Tracked, call: str) -> Tracked:
    """Where the argument is known exactly (no error, no taint) and is one of the profile's
    exact points of ``call`` (x0 at which the library returns f(x0) bit for bit, exp(0) = 1),
    the result is f(x0) with no error at all."""
    ctx = x.ctx
    points = ctx.profile.exact_points(call)
    if not points:
        return t
    known = x.radius() == 0
    if x.taint is not None:
        known = known & ~x.taint
    hit = torch.zeros_like(known)
    c = t.c
    for x0, f0 in points:
        at = known & (x.c == x0)
        hit = hit | at
        c = torch.where(at, f0, c)
    if not ctx.any(hit):
        return t
    taint = None if t.taint is None else t.taint & ~hit
    return Tracked(c, t.fmt, FM.masked(t.form, ~hit), ctx, taint=taint)



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
    return Tracked(c, x.fmt, FM.Form(shared, private, det), ctx, repr_fmt=x.repr_fmt, taint=taint,
                   known=x.known)


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
