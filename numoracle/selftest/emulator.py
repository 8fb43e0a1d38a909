"""The emulator: runs a reference program's precision plan the way a kernel
would — every site rounded in its format, reductions in an order drawn per run
(sequential, pairwise tree, Triton-like blocked, over a random permutation),
multiply-adds fused or not, math calls off by a random error inside their
profile bound — and returns concrete outputs in their storage formats.

It is the "kernel" of numoracle's own soundness tests (a correct emulated
kernel must never be rejected in fixed-input mode) and, with ``faults``, of
its planted-fault tests.

Random choices make errors cancel, so they rarely come near the calculus's
bounds.  The adversarial plan (``Plan.adversarial``) drives them there: every
arithmetic rounding goes one way (``rounding="up"|"down"|"away"``: the neighbour
in that direction wherever it is within u|x| of the exact value, which the
standard model |delta| <= u that the calculus assumes admits; explicit casts
and the final rounding of an output stay round-to-nearest, as the calculus's
settled casts and rounding-interval check require), math calls return the
farthest fp32 value their profile admits on one side (``math="directed"``), and
sums run sequentially from the largest term down (``order="worst"``: every
partial sum as large as it can be).  Values are float64 tensors holding numbers exactly
representable in their format; fp32 arithmetic is computed in float64 and
rounded once, which is exact round-to-nearest for + - * / because
53 >= 2*24 + 2 (double rounding is innocuous).
"""

from __future__ import annotations

import builtins
import math
from dataclasses import dataclass, field

import torch

from .. import formats as F
from ..calculus.ops import SPLITS, split_parts, tensor_core_block, tf32_truncate
from ..calculus.tracked import LOG2E, _fmt_arg, _subset, promote
from ..errors import InvalidArgument
from ..mathlib import MathProfile
from ..mathlib import load as load_profile

Tensor = torch.Tensor

FAULTS = ("truncating_store", "bf16_accumulation", "no_widening", "ulp_off_store")
ROUNDINGS = ("nearest", "up", "down", "away")
DOTS = ("nearest", "tensor_core", "tensor_core_folded")
# functions whose values lie strictly inside (-1, 1) (calculus.functions strict_bound)
_BELOW_ONE = ("sigmoid", "tanh", "erf")
_EXACT = {"exp": torch.exp, "exp2": torch.exp2, "log": torch.log, "log2": torch.log2,
          "rsqrt": torch.rsqrt, "sqrt": torch.sqrt, "sigmoid": torch.sigmoid, "tanh": torch.tanh,
          "erf": torch.erf, "sin": torch.sin, "cos": torch.cos}


@dataclass
class Plan:
    """The choices of one emulated execution."""
    seed: int = 0
    order: str = "random"        # "random" | "sequential" | "tree" | "blocked" | "worst"
    fma: object = "random"       # True | False | "random"
    math: str = "random"         # "random" | "extreme" | "exact" | "directed"
    profile: MathProfile | str = "interpreter"
    faults: tuple = ()
    rounding: str = "nearest"    # "nearest" | "up" | "down" | "away" (arithmetic sites)
    # "nearest": a dot's additions round as a sum's; "tensor_core": the measured sm_90
    # instruction (tensor_core_dot), and an add of a dot's result folded into it half the time
    # ("tensor_core_folded": every time)
    dot: str = "nearest"
    gen: torch.Generator = field(default=None, repr=False)

    @classmethod
    def adversarial(cls, seed: int = 0, direction: str = "away", fma=False, **kw) -> "Plan":
        """Every rounding and math error one way, sums in their worst order (module text)."""
        return cls(seed=seed, order="worst", fma=fma, math="directed", rounding=direction, **kw)

    def __post_init__(self):
        bad = set(self.faults) - set(FAULTS)
        if bad:
            raise InvalidArgument(f"unknown fault(s) {sorted(bad)}; expected some of {FAULTS}.")
        if self.rounding not in ROUNDINGS:
            raise InvalidArgument(f"rounding={self.rounding!r}: expected one of {ROUNDINGS}.")
        if self.dot not in DOTS:
            raise InvalidArgument(f"dot={self.dot!r}: expected one of {DOTS}.")
        if isinstance(self.profile, str):
            self.profile = load_profile(self.profile)
        self.gen = torch.Generator().manual_seed(self.seed)
        if self.fma == "random":
            self.fma = bool(self.randint(2))

    def randint(self, n: int) -> int:
        return int(torch.randint(n, (1,), generator=self.gen))

    def uniform(self, shape) -> Tensor:
        return torch.rand(shape, generator=self.gen, dtype=torch.float64)


def _sign(plan: Plan, exact: Tensor) -> Tensor:
    """+1 or -1 per element: the direction the plan pushes errors (away: with the sign)."""
    if plan.rounding == "down":
        return torch.full_like(exact, -1.0)
    if plan.rounding == "away":
        return torch.where(exact < 0, -1.0, 1.0).to(torch.float64)
    return torch.full_like(exact, 1.0)


def round_site(plan: Plan, exact: Tensor, fmt) -> Tensor:
    """An arithmetic site's rounding: to nearest, or (a directed plan) to the neighbour in
    the plan's direction where it is within u|x| of x and x is normal: the standard model
    fl(x) = x(1 + delta), |delta| <= u, holds either way (below min_normal, where only the
    absolute half-subnormal bound holds, to nearest)."""
    rn = F.round(exact, fmt)
    if plan.rounding == "nearest":
        return rn
    sign = _sign(plan, exact)
    d = torch.where(sign > 0, F.round(exact, fmt, "up"), F.round(exact, fmt, "down"))
    ok = torch.isfinite(d) & (exact.abs() >= fmt.min_normal) & ((d - exact).abs() <= fmt.u * exact.abs())
    return torch.where(ok, d, rn)


class Emulated:
    __slots__ = ("v", "fmt", "plan", "prod", "pre", "site", "dot", "known")
    __array_priority__ = 1000

    def __init__(self, v, fmt, plan, prod=None, pre=None, site=None, dot=None, known=False):
        self.v, self.fmt, self.plan, self.prod, self.pre = v, fmt, plan, prod, pre
        # site: "arith" where v is pre rounded at an arithmetic site (an output's store rounds
        # to nearest), "cast" where an explicit cast rounded pre
        self.site = site
        # a tensor-core dot as a function of its accumulator's start, for an add folded into it
        self.dot = dot
        # a value the kernel is given (an input, a runtime argument, a constant), or one taken
        # from such without rounding (_wrap): at least every value the calculus calls known
        # (calculus.tracked), whose sums it settles, so such sums round to nearest in every plan
        self.known = known

    format = property(lambda self: self.fmt)
    shape = property(lambda self: tuple(self.v.shape))
    ndim = property(lambda self: self.v.ndim)

    def _wrap(self, v, fmt=None, prod=None, pre=None):
        # v taken from self without rounding (a widening, sign, slice, reshape): as known as self
        return Emulated(v, fmt or self.fmt, self.plan, prod, pre, known=self.known)

    def _rounded(self, exact: Tensor, fmt, prod=None) -> "Emulated":
        return Emulated(round_site(self.plan, exact, fmt), fmt, self.plan, prod, pre=exact, site="arith")

    def _cast(self, exact: Tensor, fmt) -> "Emulated":
        # an explicit cast rounds to nearest (Triton's casts; the calculus settles on that)
        return Emulated(F.round(exact, fmt), fmt, self.plan, pre=exact, site="cast")

    def _coerce(self, o):
        if isinstance(o, Emulated):
            return o
        if isinstance(o, (int, float)) and not isinstance(o, bool):
            return Emulated(F.round(torch.tensor(float(o), dtype=torch.float64), self.fmt), self.fmt, self.plan,
                            known=True)
        if isinstance(o, Tensor) and o.is_floating_point():
            # a runtime argument, exact in its own dtype (as in the calculus)
            return Emulated(o.to(device=self.v.device, dtype=torch.float64), F.from_dtype(o.dtype), self.plan,
                            known=True)
        raise InvalidArgument(f"cannot combine an emulated tensor with {type(o).__name__}"
                              f"{' of ' + str(o.dtype) if isinstance(o, Tensor) else ''}: use Python "
                              f"numbers or float torch tensors.")

    def to(self, fmt):
        fmt = _fmt_arg(fmt)
        if "no_widening" in self.plan.faults and fmt is F.fp32 and self.fmt in (F.bf16, F.fp16):
            return self
        if _subset(self.fmt, fmt):
            w = self._wrap(self.v, fmt)
            w.dot = self.dot if fmt is self.fmt else None
            return w
        return self._cast(self.v, fmt)

    def _binary(self, o, op, reverse=False):
        y = self._coerce(o)
        x = self
        if reverse:
            x, y = y, x
        fmt = self.fmt if isinstance(o, (int, float)) else promote(x.fmt, y.fmt)
        if op == "div":
            return _div(x, y, fmt, "div")
        if op == "mul":
            exact = x.v * y.v
            return self._rounded(exact, fmt, prod=exact)
        folded = _fold(x, y, op)
        if folded is not None:
            return folded
        # a contracted multiply-add uses the unrounded product of its operand
        xv = x.prod if (self.plan.fma and x.prod is not None and x.fmt is fmt) else x.v
        yv = y.prod if (self.plan.fma and y.prod is not None and y.fmt is fmt) else y.v
        exact = xv + yv if op == "add" else xv - yv
        if x.known and y.known:
            # the calculus settles a sum of known values on its rounding to nearest
            return Emulated(F.round(exact, fmt), fmt, self.plan, pre=exact, site="arith")
        return self._rounded(exact, fmt)

    def __add__(self, o): return self._binary(o, "add")
    def __radd__(self, o): return self._binary(o, "add", True)
    def __sub__(self, o): return self._binary(o, "sub")
    def __rsub__(self, o): return self._binary(o, "sub", True)
    def __mul__(self, o): return self._binary(o, "mul")
    def __rmul__(self, o): return self._binary(o, "mul", True)
    def __truediv__(self, o): return self._binary(o, "div")
    def __rtruediv__(self, o): return self._binary(o, "div", True)
    def __neg__(self): return self._wrap(-self.v, prod=None if self.prod is None else -self.prod)
    def __abs__(self): return self._wrap(self.v.abs())
    def abs(self): return self.__abs__()
    def __gt__(self, o): return self.v > self._coerce(o).v
    def __ge__(self, o): return self.v >= self._coerce(o).v
    def __lt__(self, o): return self.v < self._coerce(o).v
    def __le__(self, o): return self.v <= self._coerce(o).v
    def __getitem__(self, idx): return self._wrap(self.v[idx])
    def reshape(self, *s):
        s = s[0] if len(s) == 1 and isinstance(s[0], (tuple, list)) else s
        return self._wrap(self.v.reshape(s))
    def transpose(self, a, b): return self._wrap(self.v.transpose(a, b))
    T = property(lambda self: self.transpose(-1, -2))
    def unsqueeze(self, a): return self._wrap(self.v.unsqueeze(a))
    def squeeze(self, a): return self._wrap(self.v.squeeze(a))


def _library(plan: Plan, exact: Tensor, call: str, x_abs, name: str | None = None) -> Tensor:
    """An fp32 result within the profile's bound of the exact value: k ulps of the exact
    value's binade (for a function inside (-1, 1) under a profile measured so, of the binade
    below 1), never farther, also where the result crosses into the binade above."""
    model = plan.profile.model(call)
    k = model.ulps(x_abs) if model.b else model.a
    k = torch.as_tensor(k, dtype=torch.float64)
    slack = torch.clamp(k - 0.5, min=0.0)
    if plan.math == "exact" or not bool((slack > 0).any()):
        return F.round(exact, F.fp32)
    # an infinite exact value (exp past float64's range) is what the library returns past its
    # overflow: ulps of it are not a number
    return torch.where(torch.isinf(exact), exact, _within(plan, exact, k, slack, name))


def _within(plan: Plan, exact: Tensor, k: Tensor, slack: Tensor, name) -> Tensor:
    mag = exact.abs()
    if name in _BELOW_ONE and plan.profile.units_below_one:
        mag = mag.clamp(max=1.0 - 2.0 ** -24)
    ulp = F.ulp(mag, F.fp32)
    bound = k * ulp
    if plan.math == "directed":
        # the farthest fp32 value on the plan's side within the bound
        sign = _sign(plan, exact)
        b = bound * (1 - 2.0 ** -40)     # float64's rounding of exact -+ bound stays inside it
        return torch.where(sign > 0, F.round(exact + b, F.fp32, "down"), F.round(exact - b, F.fp32, "up"))
    if plan.math == "extreme":
        r = torch.where(plan.uniform(exact.shape) < 0.5, -1.0, 1.0).to(torch.float64)
    else:
        r = 2 * plan.uniform(exact.shape) - 1
    v = F.round(exact + r * slack * ulp, F.fp32)
    # rounding the target can step past the bound where it crosses a binade: step back
    over = (v - exact).abs() > bound
    back = torch.where(v > exact, F.next_down(v, F.fp32), F.next_up(v, F.fp32))
    return torch.where(over, back, v)


def _widen(x: Emulated) -> Emulated:
    # the hardware's own upcast of half formats (not the program's .to, which a fault may drop)
    return Emulated(x.v, F.fp32, x.plan)


def _div(x: Emulated, y: Emulated, fmt, call) -> Emulated:
    if fmt in (F.bf16, F.fp16):
        return _div(_widen(x), _widen(y), F.fp32, call).to(fmt)
    exact = x.v / y.v
    if fmt is F.fp64:
        return x._rounded(exact, fmt)
    v = _library(x.plan, exact, call, None)
    # a division by a power of two only scales (the calculus's model: exact while normal)
    v = torch.where(F.power_of_two(y.v), F.round(exact, F.fp32), v)
    return Emulated(v, F.fp32, x.plan, pre=exact)


def apply(x: Emulated, name: str, call: str) -> Emulated:
    if x.fmt in (F.bf16, F.fp16):
        return apply(_widen(x), name, call).to(x.fmt)
    exact = _EXACT[name](x.v)
    v = _library(x.plan, exact, call, x.v.abs(), name)
    # at the profile's exact points the library returns f(x0) itself (exp(0) = 1)
    for x0, f0 in x.plan.profile.exact_points(call):
        v = torch.where(x.v == x0, torch.full_like(v, f0), v)
    return Emulated(v, F.fp32, x.plan, pre=exact)


def div_rn(a, b):
    proto = a if isinstance(a, Emulated) else b
    a, b = proto._coerce(a), proto._coerce(b)
    return _div(a, b, promote(a.fmt, b.fmt), "div_rn")


# ---- reductions

def _flush(v: Tensor, fmt) -> Tensor:
    """Subnormal values of fmt flushed to a zero of their sign (a flushing accumulation)."""
    return torch.where(v.abs() < fmt.min_normal, v * 0.0, v)


def _reduce_rows(v: Tensor, fmt, order: str, plan: Plan, ftz: bool = False) -> Tensor:
    """Sum the last axis of a 2-D tensor with roundings to fmt in the given order; ``ftz``:
    every addition's subnormal result flushed to zero."""
    def rnd(exact):
        r = round_site(plan, exact, fmt)
        return _flush(r, fmt) if ftz else r
    n = v.shape[-1]
    if n == 0:
        return v.sum(-1)
    if order == "worst":
        # sequential from the largest magnitude down: each partial sum is as large as it
        # gets, so one-way roundings add up to nearly u * sum_k |s_k|
        v = torch.gather(v, -1, v.abs().argsort(dim=-1, descending=True))
        order = "sequential"
    if order == "sequential":
        acc = v[:, 0]
        for j in range(1, n):
            acc = rnd(acc + v[:, j])
        return acc
    if order == "tree":
        cur = v
        while cur.shape[-1] > 1:
            m = cur.shape[-1]
            if m % 2:
                cur = torch.cat([cur, torch.zeros_like(cur[:, :1])], dim=-1)
            cur = rnd(cur[:, 0::2] + cur[:, 1::2])
        return cur[:, 0]
    # blocked, like Triton: each "thread" sums a contiguous chunk sequentially,
    # then the partial sums meet in a butterfly tree
    chunk = 1 << plan.randint(builtins.max(1, int(math.log2(builtins.max(n, 1))) + 1))
    pad = (-n) % chunk
    w = torch.cat([v, torch.zeros(v.shape[0], pad, dtype=v.dtype)], dim=-1) if pad else v
    w = w.reshape(v.shape[0], -1, chunk)
    acc = w[:, :, 0]
    for j in range(1, chunk):
        acc = rnd(acc + w[:, :, j])
    return _reduce_rows(acc, fmt, "tree", plan, ftz)


def _choose_order(model, plan: Plan, n: int) -> str:
    if model == "sequential":
        return "sequential"
    if model == "tree":
        return "tree"
    if plan.order == "worst" and n > 2048:
        return "blocked"          # keeps the Python-level sequential loop short
    if plan.order != "random":
        return plan.order
    return ("sequential", "tree", "blocked")[plan.randint(3)] if n <= 512 else ("tree", "blocked")[plan.randint(2)]


def _in_acc(x: Emulated, acc):
    """(x in the accumulation format, that format): ``acc`` (default x's own), or bf16 where
    the plan plants the fault ``bf16_accumulation`` in an fp32 one."""
    acc = _fmt_arg(acc) if acc is not None else x.fmt
    if "bf16_accumulation" in x.plan.faults and acc is F.fp32:
        acc = F.bf16
    if x.fmt is not acc:
        x = x.to(acc) if not _subset(x.fmt, acc) else x._wrap(x.v, acc)
    return x, acc


def sum(x: Emulated, axis=-1, keepdims=False, order="any", acc=None, ftz=False):
    plan = x.plan
    x, acc = _in_acc(x, acc)
    ax = axis % x.v.ndim
    v = x.v.movedim(ax, -1)
    lead = v.shape[:-1]
    n = v.shape[-1]
    rows = v.reshape(-1, n)
    rows = rows[:, torch.randperm(n, generator=plan.gen)]
    if ftz:
        rows = _flush(rows, acc)
    s = _reduce_rows(rows, acc, _choose_order(order, plan, n), plan, ftz).reshape(lead)
    if keepdims:
        s = s.unsqueeze(ax)
    return Emulated(s, acc, plan, pre=x.v.sum(dim=ax, keepdim=keepdims))


def cumsum(x: Emulated, axis=-1, order="any", acc=None):
    """Prefix sums as one kernel computes them: in order along the axis, each partial sum
    rounded to ``acc``.  A sequential scan passes term 0 through j roundings, which only the
    "any" and "sequential" models admit; a narrower model is refused, not emulated outside it."""
    if order not in ("any", "sequential"):
        raise InvalidArgument(f"cumsum(order={order!r}): the emulator scans sequentially, which only the "
                              f"'any' and 'sequential' order models admit.")
    plan = x.plan
    x, acc = _in_acc(x, acc)
    v = x.v.movedim(axis % x.v.ndim, -1)
    out = torch.empty_like(v)
    run = v[..., 0]
    out[..., 0] = run
    for j in range(1, v.shape[-1]):
        run = round_site(plan, run + v[..., j], acc)
        out[..., j] = run
    return Emulated(out.movedim(-1, axis % x.v.ndim), acc, plan)


def mean(x: Emulated, axis=-1, keepdims=False, order="any", acc=None):
    s = sum(x, axis, keepdims, order, acc)
    n = x.v.shape[axis % x.v.ndim]
    if x.plan.randint(2):
        return s * (1.0 / n)      # multiply by the rounded reciprocal
    return s / float(n)


def max(x: Emulated, axis=-1, keepdims=False):
    # the calculus does not call a reduction's result known: its sums keep their one-way roundings
    return Emulated(x.v.amax(dim=axis, keepdim=keepdims), x.fmt, x.plan)


def min(x: Emulated, axis=-1, keepdims=False):
    # the calculus does not call a reduction's result known: its sums keep their one-way roundings
    return Emulated(x.v.amin(dim=axis, keepdim=keepdims), x.fmt, x.plan)


def where(cond, a, b):
    proto = a if isinstance(a, Emulated) else b
    a, b = proto._coerce(a), proto._coerce(b)
    fmt = promote(a.fmt, b.fmt) if a.fmt is not b.fmt else a.fmt
    a = a if a.fmt is fmt else a.to(fmt)
    b = b if b.fmt is fmt else b.to(fmt)
    return Emulated(torch.where(cond, a.v, b.v), fmt, proto.plan)


def maximum(a, b):
    proto = a if isinstance(a, Emulated) else b
    a, b = proto._coerce(a), proto._coerce(b)
    return where(a.v >= b.v, a, b)


def minimum(a, b):
    proto = a if isinstance(a, Emulated) else b
    a, b = proto._coerce(a), proto._coerce(b)
    return where(a.v <= b.v, a, b)


def clamp(x, lo=None, hi=None):
    if lo is not None:
        x = maximum(x, lo)
    if hi is not None:
        x = minimum(x, hi)
    return x


def full_like(x: Emulated, value, fmt=None):
    fmt = x.fmt if fmt is None else _fmt_arg(fmt)
    v = F.round(torch.full(x.v.shape, float(value), dtype=torch.float64, device=x.v.device), fmt)
    return Emulated(v, fmt, x.plan, known=True)


def argmax(x: Emulated, axis=-1, keepdims=False, ties="first"):
    # the kernel holds its values in x's format; torch.argmax takes the first of equal values
    return x.v.argmax(dim=axis, keepdim=keepdims)


def argmin(x: Emulated, axis=-1, keepdims=False, ties="first"):
    return x.v.argmin(dim=axis, keepdim=keepdims)


def topk(x: Emulated, k, axis=-1, largest=True, ordered=True):
    idx = x.v.topk(k, dim=axis, largest=largest, sorted=ordered).indices
    return gather(x, idx, axis), idx


def gather(x: Emulated, index: Tensor, axis=-1):
    ax = axis % x.v.ndim
    idx = index.long()
    squeeze = idx.ndim == x.v.ndim - 1
    if squeeze:
        idx = idx.unsqueeze(ax)
    out = torch.gather(x.v, ax, idx)
    return x._wrap(out.squeeze(ax) if squeeze else out)


def cat(xs, axis=-1):
    fmt = xs[0].fmt
    for t in xs[1:]:
        fmt = promote(fmt, t.fmt)
    return Emulated(torch.cat([(t if t.fmt is fmt else t.to(fmt)).v for t in xs], dim=axis), fmt, xs[0].plan)


def logsumexp(x: Emulated, axis=-1, keepdims=False, exp="exp2", order="any"):
    m = max(x, axis, keepdims=True)
    z = x - m
    e = apply(z * LOG2E, "exp2", "exp2") if exp == "exp2" else apply(z, "exp", "exp")
    s = sum(e, axis, keepdims=True, order=order)
    lse = m + apply(s, "log", "log")
    return lse if keepdims else lse.squeeze(axis)


def _exponents(x: Tensor, fmt) -> Tensor:
    """floor(log2 |x|), at least fmt's smallest normal exponent (a subnormal's exponent field is
    the smallest normal's); -inf for a zero, which the alignment leaves out (measured)."""
    e = torch.floor(torch.log2(x.abs().clamp(min=fmt.min_normal)))
    return torch.where(x != 0, e, torch.full_like(e, -math.inf))


def tensor_core_dot(a: Tensor, b: Tensor, a_fmt, b_fmt, init: Tensor | None = None, block: int = 16) -> Tensor:
    """The sm_90 tensor-core dot as measured on an H100 (docs/design.md §4.4): a [.., M, K] and
    b [.., K, N] float64 tensors of a_fmt/b_fmt values, init the fp32 accumulator's start
    (zeros by default); each block of ``block`` products is added to the accumulator as one sum
    whose terms are truncated toward zero below 2^(E - 25), E the largest exponent among its
    non-zero terms (a product's the sum of its operands', a subnormal operand's counted as its
    format's smallest normal one), and that sum is rounded toward zero to fp32.  Every
    step is exact in float64 (terms of at most 22 significant bits, sums below 2^32 units)."""
    prods = a.unsqueeze(-1) * b.unsqueeze(-3)                     # [.., M, K, N]
    exps = _exponents(a, a_fmt).unsqueeze(-1) + _exponents(b, b_fmt).unsqueeze(-3)
    shape = torch.broadcast_shapes(prods.shape[:-2] + prods.shape[-1:], () if init is None else init.shape)
    accv = torch.zeros(shape, dtype=torch.float64) if init is None else init.expand(shape).clone()
    K = a.shape[-1]
    for k0 in range(0, K, block):
        p, e = prods[..., k0:k0 + block, :], exps[..., k0:k0 + block, :]
        e_acc = _exponents(accv, F.fp32)
        E = torch.maximum(e.amax(-2), e_acc)
        # a block of zeros only (E = -inf) sums to zero whatever the unit
        unit = torch.where(torch.isfinite(E), torch.exp2(E - 25), torch.ones_like(E))
        terms = torch.cat([accv.unsqueeze(-2), p.expand(*shape[:-1], p.shape[-2], shape[-1])], -2)
        s = (torch.trunc(terms / unit.unsqueeze(-2)) * unit.unsqueeze(-2)).sum(-2)
        accv = F.round(s, F.fp32, "rtz")
    return accv


def split_dot(a: Tensor, b: Tensor, split, init: Tensor | None = None, bk: int = 32) -> Tensor:
    """A GPU ``tl.dot(a, b, init, input_precision=split.name)`` (an ``ops.SPLITS`` entry) over a K
    loop of ``bk``-wide tiles, as Triton's F32DotTC pass rewrites it (docs/design.md §4.4): each
    fp32 operand split into parts (``ops.split_parts``); per tile, from zero, a tensor-core dot of
    each of the split's pairs of parts in order, NaNs of that sum to 0, then hi_a hi_b; the tile's
    sum added to the accumulator by an fp32 add rounded to nearest."""
    fmt = F.by_name(split.fmt)
    pa, pb = split_parts(a, split), split_parts(b, split)
    acc = init
    for k0 in range(0, a.shape[-1], bk):
        ta, tb = (..., slice(k0, k0 + bk)), (..., slice(k0, k0 + bk), slice(None))     # the tile's K
        s = None
        for i, j in split.pairs:
            s = tensor_core_dot(pa[i][ta], pb[j][tb], fmt, fmt, init=s, block=split.block)
        s = torch.where(torch.isnan(s), torch.zeros_like(s), s)
        s = tensor_core_dot(pa[0][ta], pb[0][tb], fmt, fmt, init=s, block=split.block)
        acc = s if acc is None else F.round(s + acc, F.fp32)
    return acc


def _fold(x: Emulated, y: Emulated, op: str):
    """``dot + c`` with the add folded into the dot's accumulator, as Triton does for a
    tensor-core dot (half the time under dot="tensor_core", always under "tensor_core_folded")."""
    if op != "add" or x.plan.dot == "nearest":
        return None
    for d, c in ((x, y), (y, x)):
        if d.dot is not None and (x.plan.dot == "tensor_core_folded" or x.plan.randint(2)):
            v = d.dot(F.round(c.v, F.fp32))
            return Emulated(v, F.fp32, x.plan, pre=v)
    return None


def matmul(a: Emulated, b: Emulated, acc=None, order="any", ftz=False, input_precision="ieee"):
    proto = a if isinstance(a, Emulated) else b
    a, b = proto._coerce(a), proto._coerce(b)
    acc = _fmt_arg(acc) if acc is not None else F.fp32
    if input_precision in SPLITS and a.plan.dot != "nearest" and acc is F.fp32 \
            and a.fmt is F.fp32 and b.fmt is F.fp32:
        # Triton splits fp32 tiles (fp32 values or not); the tile width is the kernel's choice
        bk = (8, 16, 32, 64)[a.plan.randint(4)]
        av, bv, split = a.v, b.v, SPLITS[input_precision]
        v = split_dot(av, bv, split, bk=bk)
        return Emulated(v, acc, a.plan, pre=v, dot=lambda init: split_dot(av, bv, split, init, bk))
    if input_precision == "tf32" and a.plan.dot != "nearest":
        # an H100 reads fp32 operands with their low 13 bits dropped (the interpreter keeps them)
        a, b = (x if _subset(x.fmt, F.tf32) else Emulated(tf32_truncate(x.v), F.tf32, x.plan) for x in (a, b))
    if a.plan.dot != "nearest" and acc is F.fp32 and a.fmt.precision + b.fmt.precision <= acc.precision:
        block = tensor_core_block(a.fmt, b.fmt)
        av, bv, af, bf = a.v, b.v, a.fmt, b.fmt
        v = tensor_core_dot(av, bv, af, bf, block=block)
        return Emulated(v, acc, a.plan, pre=v,
                        dot=lambda init: tensor_core_dot(av, bv, af, bf, init=init, block=block))
    prods = a.v.unsqueeze(-1) * b.v.unsqueeze(-3)           # [.., M, K, N], exact in float64
    if a.fmt.precision + b.fmt.precision > acc.precision:
        prods = round_site(a.plan, prods, acc)
    p = Emulated(prods.movedim(-2, -1), acc, a.plan)         # [.., M, N, K]
    return sum(p, -1, False, order, acc, ftz)


# ---- running a program

def emulate(program, inputs, params=None, plan: Plan | None = None, *, before_store: bool = False):
    """Run ``program`` on ``inputs`` (torch tensors) as one concrete kernel would;
    returns the outputs as torch tensors in their storage formats.  ``before_store``: also
    each output's value before its final rounding (float64; the stored value itself where
    the output is not a rounding site), which must lie inside the fixed-input interval:
    returns (outputs, values before the store)."""
    from ..verdict.evaluation import as_input as _as_input, outputs_list as _outputs_tuple
    plan = plan or Plan()
    args = []
    for i, x in enumerate(inputs):
        v, fmt = _as_input(i, f"arg{i}", x)
        args.append(v if fmt is None else Emulated(v, fmt, plan, known=True))
    outs = _outputs_tuple(program.fn(*args, **dict(params or {})))
    result, pres = [], []
    for o in outs:
        if isinstance(o, torch.Tensor):
            # an index output (argmax, top-k): stored as chosen
            result.append(o)
            pres.append(o)
            continue
        v = o.v
        pres.append(o.pre if o.site else o.v)
        if o.site == "arith" and plan.rounding != "nearest":
            v = F.round(o.pre, o.fmt)        # the store rounds to nearest (rounding-interval check)
        if "truncating_store" in plan.faults and o.pre is not None:
            v = F.round(o.pre, o.fmt, mode="rtz")
        if "ulp_off_store" in plan.faults:
            v = F.next_up(v, o.fmt)
        result.append(F.encode(v, o.fmt))
    out = tuple(result) if len(result) > 1 else result[0]
    return (out, pres) if before_store else out


def _register() -> None:
    import sys

    from ..reference import register_arithmetic
    register_arithmetic(Emulated, sys.modules[__name__])


_register()
