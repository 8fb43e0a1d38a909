"""What a kernel computes on a float's encoding or by comparisons, read off the IR.

Block-scaled quantizers build their scale from the exponent bits and round by hand, so the
plan cannot stop at "a bitcast": it has to say what the integer arithmetic computes.  Integer
arithmetic is evaluated, not pattern-matched: each integer value the IR computes from one
*leaf* (a float's bits, an integer converted from an integer-valued float, a loaded integer)
and constants is a function of that leaf, and the analysis runs it on sample values (every
fp32 binade, its ends and middle, subnormals and zero) to see which of a few exact functions
it is:

* an **exponent read**: ``clamp(s·floor(log2 x) + c)`` or the same with ``ceil`` (the OCP
  floor rule from the exponent field; the round-up rule from the field and a mantissa test),
  for every integer the bits of ``x`` become (a stored E8M0 byte, the exponent of a power of
  two built from bits).  Exact: the reference's log2 bound covers it.
* a **power of two from bits**: an int -> fp32 bitcast whose value is 2^k for every sample
  (``(e + 127) << 23``, with 2^-127's subnormal encoding).  Exact.
* a **rounding by comparisons**: an integer code that sums ``a > m`` / ``a >= m`` over
  constants ``m`` for one value ``a``: when the constants are the midpoints of a format's
  non-negative grid this is a saturating rounding of ``a`` to that format, to nearest, and the
  predicates say where ties go (``>`` at a midpoint below an even code and ``>=`` below an odd
  one is ties to even; ``>=`` everywhere is ties away from zero).

Anything else stays what it was: arithmetic on the encoding, which the check reports.  The
sampling is a test, not a proof: a function equal to floor(log2 x) on about a thousand
values at every binade's edges is taken to be it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np

from .. import formats as F

_INT_BIN = {"arith.addi", "arith.subi", "arith.muli", "arith.andi", "arith.ori", "arith.xori", "arith.shli",
            "arith.shrsi", "arith.shrui", "arith.maxsi", "arith.minsi", "arith.maxui", "arith.minui",
            "arith.divsi", "arith.divui", "arith.remsi", "arith.remui"}
_INT_CAST = {"arith.extui", "arith.extsi", "arith.trunci"}
_PASS = {"tt.splat", "tt.broadcast", "tt.expand_dims", "tt.reshape", "tt.trans", "ttg.convert_layout",
         "tt.permute", "tt.split", "tt.join"}
_WIDTH = {"i1": 1, "i8": 8, "i16": 16, "i32": 32, "i64": 64}
_PRED = {"eq": np.equal, "ne": np.not_equal, "slt": np.less, "sle": np.less_equal, "sgt": np.greater,
         "sge": np.greater_equal, "ult": np.less, "ule": np.less_equal, "ugt": np.greater, "uge": np.greater_equal}


def _samples_fp32(nonneg: bool) -> np.ndarray:
    """fp32 values: zero, subnormals (around 2^-127), and per binade 2^k, its next value up, its
    middle and its top; negated too unless ``nonneg``."""
    sub = np.array([1, 3, 1 << 20, (1 << 22) - 1, 1 << 22, (1 << 22) + 1, (1 << 23) - 1], dtype=np.int64)
    vals = [0.0] + [float(v) * 2.0 ** -149 for v in sub]
    for k in range(-126, 128):
        p = 2.0 ** k
        vals += [p, p * (1 + 2.0 ** -23), p * 1.5, p * (2 - 2.0 ** -23)]
    x = np.array(vals, dtype=np.float64)
    if not nonneg:
        x = np.concatenate([x, -x[1:]])
    return x.astype(np.float32)


def _wrap(v: np.ndarray, w: int) -> np.ndarray:
    """Two's-complement value of width w (i1: 0 or 1)."""
    if w == 1:
        return v & 1
    if w >= 64:
        return v
    m = np.int64(1) << np.int64(w)
    v = v & (m - 1)
    return np.where(v >= (m >> 1), v - m, v)


def _unsigned(v: np.ndarray, w: int) -> np.ndarray:
    if w >= 64:
        return v
    return v & ((np.int64(1) << np.int64(w)) - 1)


@dataclass
class Leaf:
    name: str              # the IR value
    kind: str              # "bits" (a float's encoding) | "int-of" (fptosi of an integer value) | "load"
    op: object
    src: str | None = None  # bits / int-of: the float operand


@dataclass
class Analysis:
    """Per compiled kernel: classifications keyed by id(op)."""
    bits: dict = field(default_factory=dict)          # id(tt.bitcast) -> {"encoding": ..., ...}
    exact_int: set = field(default_factory=set)       # id(arith.fptosi) of integer-valued floats
    groups: list = field(default_factory=list)        # [CompareRounding]
    compares: dict = field(default_factory=dict)      # id(arith.cmpf) in a group -> the compared value
    nan_casts: set = field(default_factory=set)       # id(cast) whose operand may be a selected NaN
    by_value: dict = field(default_factory=dict)      # id(arith.sitofp) of a float's encoding -> detail


@dataclass
class CompareRounding:
    root: object           # the addi whose result is the code
    value: str             # the compared value
    thresholds: list
    predicates: list       # "gt" | "ge" per threshold (sorted with them)
    fmt: str | None        # the format whose midpoints they are, or None
    rounding: str | None   # rtne | rna | rnz | mixed


class _Ints:
    """The integer sub-graph of one kernel: which leaf each value depends on, and its value."""

    def __init__(self, k):
        self.k = k
        self._leaves: dict = {}
        self.leaf_info: dict = {}          # leaf name -> Leaf

    def width(self, name) -> int | None:
        t = self.k.type_of(name)
        return _WIDTH.get(t.elem) if t is not None and not t.pointer else None

    def leaves(self, name, depth: int = 0):
        """The leaves ``name`` is computed from, or None when it depends on anything else (an
        argument, a program id, a range, a loop value)."""
        if name in self._leaves:
            return self._leaves[name]
        self._leaves[name] = None                 # cycle guard
        out = self._leaves_uncached(name, depth)
        self._leaves[name] = out
        return out

    def _leaves_uncached(self, name, depth):
        if depth > 200:
            return None
        k = self.k
        d = k.defs.get(name)
        if d is None or isinstance(d[0], str):
            return None
        op = d[0]
        n = op.name
        if n == "arith.constant":
            return frozenset() if _int_const(op) is not None else None
        if n == "tt.bitcast" and op.operands and self.width(name) and k.fmt_of(op.operands[0]):
            self.leaf_info[name] = Leaf(name, "bits", op, op.operands[0])
            return frozenset([name])
        if n in ("arith.fptosi", "arith.fptoui") and op.operands:
            self.leaf_info[name] = Leaf(name, "int-of", op, op.operands[0])
            return frozenset([name])
        if n == "tt.load" and self.width(name):
            self.leaf_info[name] = Leaf(name, "load", op)
            return frozenset([name])
        if n in _INT_BIN or n in _INT_CAST or n in _PASS or n in ("arith.cmpi", "arith.select"):
            vals = op.operands[:1] if n in _PASS and n != "tt.join" else op.operands
            out = frozenset()
            for o in vals:
                if self.width(o) is None:
                    return None
                sub = self.leaves(o, depth + 1)
                if sub is None:
                    return None
                out |= sub
            return out
        return None

    def evaluate(self, name, env: dict, memo=None) -> np.ndarray:
        memo = {} if memo is None else memo
        if name in memo:
            return memo[name]
        if name in env:
            return env[name]
        op, idx = self.k.defs[name]
        n = op.name
        w = self.width(name) or 64
        ev = lambda o: self.evaluate(o, env, memo)            # noqa: E731
        if n == "arith.constant":
            v = np.int64(_int_const(op))
            out = _wrap(np.array(v, dtype=np.int64), w)
        elif n in _PASS:
            out = ev(op.operands[0])
        elif n == "arith.cmpi":
            pred = op.text.split(",")[0].strip()
            a, b = ev(op.operands[0]), ev(op.operands[1])
            if pred.startswith("u"):
                wa = self.width(op.operands[0]) or 64
                a, b = _unsigned(a, wa), _unsigned(b, wa)
            out = _PRED[pred](a, b).astype(np.int64)
        elif n == "arith.select":
            c, a, b = (ev(o) for o in op.operands[:3])
            out = np.where(c != 0, a, b)
        elif n == "arith.extui":
            out = _unsigned(ev(op.operands[0]), self.width(op.operands[0]) or 64)
        elif n == "arith.extsi":
            v = ev(op.operands[0])
            out = -v if (self.width(op.operands[0]) == 1) else v
        elif n == "arith.trunci":
            out = _wrap(ev(op.operands[0]), w)
        else:
            a, b = ev(op.operands[0]), ev(op.operands[1])
            if n in ("arith.shli", "arith.shrsi", "arith.shrui"):
                bad = (b < 0) | (b >= w)
                b = np.clip(b, 0, max(w - 1, 0))
                if n == "arith.shli":
                    out = _wrap(a << b, w)
                elif n == "arith.shrsi":
                    out = a >> b
                else:
                    out = _wrap(_unsigned(a, w) >> b, w)
                out = np.where(bad, 0, out)             # poison in MLIR: any fixed value will do
            elif n in ("arith.divsi", "arith.divui", "arith.remsi", "arith.remui"):
                safe = np.where(b == 0, 1, b)
                q = np.trunc(a / safe).astype(np.int64)
                out = q if n.startswith("arith.div") else a - q * safe
                out = _wrap(out, w)
            else:
                f = {"arith.addi": np.add, "arith.subi": np.subtract, "arith.muli": np.multiply,
                     "arith.andi": np.bitwise_and, "arith.ori": np.bitwise_or, "arith.xori": np.bitwise_xor,
                     "arith.maxsi": np.maximum, "arith.minsi": np.minimum}.get(n)
                if f is None:            # unsigned min / max
                    ua, ub = _unsigned(a, w), _unsigned(b, w)
                    out = _wrap(np.maximum(ua, ub) if n == "arith.maxui" else np.minimum(ua, ub), w)
                else:
                    out = _wrap(f(a, b), w)
        out = np.asarray(out, dtype=np.int64)
        memo[name] = out
        return out


def _int_const(op):
    text = op.text.strip()
    if op.result_types and op.result_types[0].elem not in _WIDTH:
        return None
    m = re.match(r"^(?:dense<)?\s*(-?\d+|true|false)\s*>?\s*$", text)
    if not m:
        return None
    v = m.group(1)
    return {"true": 1, "false": 0}.get(v, None) if v in ("true", "false") else int(v)


def _log2_rounded(x: np.ndarray, rounding: str) -> np.ndarray:
    """floor / ceil of log2|x| in float64 (-inf at 0)."""
    a = np.abs(x.astype(np.float64))
    with np.errstate(divide="ignore"):
        m, e = np.frexp(a)
    fl = (e - 1).astype(np.float64)
    fl = np.where(a == 0, -np.inf, fl)
    if rounding == "floor":
        return fl
    return np.where(m == 0.5, fl, fl + 1)


def _affine_clamp(w: np.ndarray, r: np.ndarray):
    """(s, c) with w == clamp(s·r + c, min w, max w) everywhere, or None."""
    fin = np.isfinite(r)
    lo, hi = w.min(), w.max()
    for s in (1, -1):
        if not fin.any():
            return None
        d = (w[fin] - s * r[fin]).astype(np.int64)
        vals, counts = np.unique(d, return_counts=True)
        c = int(vals[np.argmax(counts)])
        with np.errstate(invalid="ignore"):
            pred = np.clip(s * r + c, lo, hi)
        if np.array_equal(pred, w.astype(np.float64)):
            return s, c
    return None


def _exponent_of(values: np.ndarray, x: np.ndarray):
    """Which rounding of log2 x the integers ``values`` are (an affine, clamped function of),
    or None."""
    for rounding in ("floor", "ceil"):
        got = _affine_clamp(values, _log2_rounded(x, rounding))
        if got is not None:
            return rounding, got
    return None


def _pow2_exponents(bits: np.ndarray):
    """k with 2^k == the fp32 value of each bit pattern, or None if one is not a power of two."""
    f = (bits & 0xFFFFFFFF).astype(np.uint32).view(np.float32).astype(np.float64)
    if not (np.isfinite(f).all() and (f > 0).all()):
        return None
    m, e = np.frexp(f)
    if not (m == 0.5).all():
        return None
    return (e - 1).astype(np.int64)


def _nonneg(k, name, depth: int = 0) -> bool:
    """The IR makes this float value non-negative (an absolute value, a max of one, a product or
    quotient of such with non-negative constants)."""
    if depth > 30:
        return False
    op = k.def_op(name)
    if op is None:
        return False
    n = op.name
    if n == "math.absf" or n == "math.exp" or n == "math.exp2":
        return True
    if n == "arith.constant":
        c = k.const(name)
        return c is not None and c >= 0
    if n in _PASS or n in ("arith.extf", "arith.truncf", "tt.fp_to_fp"):
        return _nonneg(k, op.operands[0], depth + 1)
    if n == "tt.reduce":
        body = op.regions[0] if op.regions else []
        comb = next((o.name for o in body if o.name.startswith("arith.") and o.name != "arith.constant"), None)
        return comb in ("arith.maxnumf", "arith.maximumf") and _nonneg(k, op.operands[0], depth + 1)
    if n in ("arith.maxnumf", "arith.maximumf"):
        return any(_nonneg(k, o, depth + 1) for o in op.operands)
    if n in ("arith.mulf", "arith.divf", "arith.minnumf", "arith.minimumf", "arith.addf"):
        return all(_nonneg(k, o, depth + 1) for o in op.operands)
    if n == "tt.clampf":
        lo = k.const(op.operands[1]) if len(op.operands) > 1 else None
        return lo is not None and lo >= 0
    return False


def analyse(k) -> Analysis:
    """The classifications of one compiled kernel (module docstring)."""
    out = Analysis()
    ints = _Ints(k)
    # ---- integer frontiers: where an integer computed from leaves leaves integer arithmetic
    frontiers = []                               # (op, value name, "float" | "int")
    for op in k.ops:
        n = op.name
        if n == "tt.bitcast" and op.operands and ints.width(op.operands[0]) and k.fmt_of(op.results[0]):
            frontiers.append((op, op.operands[0], "float"))
        elif n == "tt.store" and len(op.operands) > 1 and ints.width(op.operands[1]):
            frontiers.append((op, op.operands[1], "int"))
        elif n in ("arith.sitofp", "arith.uitofp") and op.operands:
            frontiers.append((op, op.operands[0], "int"))
    per_leaf: dict = {}                          # bits leaf -> [classification of each frontier]
    for op, val, kind in frontiers:
        leaves = ints.leaves(val)
        if leaves is None or len(leaves) != 1:
            if kind == "float":
                out.bits[id(op)] = {"encoding": None}
            for lf in leaves or ():
                per_leaf.setdefault(lf, []).append(None)
            continue
        (lf,) = leaves
        leaf = ints.leaf_info[lf]
        if leaf.kind == "bits":
            if k.fmt_of(leaf.src) != "fp32":
                per_leaf.setdefault(lf, []).append(None)
                if kind == "float":
                    out.bits[id(op)] = {"encoding": None}
                continue
            x = _samples_fp32(_nonneg(k, leaf.src))
            env = {lf: x.view(np.int32).astype(np.int64)}
        elif leaf.kind == "int-of":
            # the integers the float can hold: its clamps' bounds (an unclamped one overflows
            # any exponent field: sample past it)
            lo, hi = _float_range(k, leaf.src)
            x = np.arange(int(max(lo, -300)), int(min(hi, 300)) + 1, dtype=np.int64)
            env = {lf: x}
        else:
            w = ints.width(lf)
            x = np.arange(-(1 << (w - 1)), 1 << (w - 1), dtype=np.int64) if w <= 16 else \
                np.arange(-300, 301, dtype=np.int64)
            env = {lf: x}
        try:
            v = ints.evaluate(val, env)
        except (KeyError, ValueError, IndexError, TypeError):
            v = None
        v = None if v is None else np.broadcast_to(v, x.shape)
        if kind == "float":
            ks = _pow2_exponents(v) if v is not None and k.fmt_of(op.results[0]) == "fp32" else None
            out.bits[id(op)] = {"encoding": "pow2" if ks is not None else None, "from": leaf.kind}
            cls = _exponent_of(ks, x) if ks is not None and leaf.kind == "bits" else None
        else:
            cls = None
            if op.name in ("arith.sitofp", "arith.uitofp") and v is not None:
                enc = _encoding_by_value(k, ints, op, val, v)
                if enc is not None:
                    out.by_value[id(op)] = enc
            if v is not None and leaf.kind == "bits":
                # a stored byte holds its value unsigned (an E8M0 scale is E + 127)
                w = ints.width(val) or 64
                cls = _exponent_of(_unsigned(v, w), x) if w < 32 else None
                cls = cls or _exponent_of(v, x)
        if leaf.kind == "bits":
            per_leaf.setdefault(lf, []).append(cls[0] if cls else None)
    for lf, classes in per_leaf.items():
        leaf = ints.leaf_info.get(lf)
        if leaf is None or leaf.kind != "bits":
            continue
        ok = classes and all(c is not None for c in classes) and len(set(classes)) == 1
        out.bits[id(leaf.op)] = {"encoding": "exponent", "rounding": classes[0]} if ok else {"encoding": None}
    # ---- fptosi of an integer-valued float: an exact conversion
    for op in k.ops:
        if op.name in ("arith.fptosi", "arith.fptoui") and op.operands and _integer_valued(k, op.operands[0]):
            out.exact_int.add(id(op))
    # ---- roundings by comparisons with constants
    _compare_groups(k, out)
    # ---- casts of a value that may be a NaN selected in (non-saturating overflow)
    for op in k.ops:
        if op.name in ("arith.truncf", "tt.fp_to_fp") and op.operands and _selects_nan(k, op.operands[0]):
            out.nan_casts.add(id(op))
    return out


def _encoding_by_value(k, ints, op, val, v: np.ndarray):
    """An int -> fp32 conversion by value (``arith.sitofp``) of an integer that is, on every
    sample, the fp32 encoding of a power of two (an exponent field built by hand, ``(e + 127) <<
    23``, whose bitcast was dropped): {"encoding": "by-value", "exponents": [lo, hi]}, else None.
    The exponent field's all-ones pattern (+inf) may be among the values; at least two powers."""
    if k.fmt_of(op.results[0]) != "fp32" or ints.width(val) != 32:
        return None
    v = np.asarray(v, dtype=np.int64)
    if v.size == 0 or (v < 0).any() or (v > 0x7F800000).any():
        return None
    f = (v & 0xFFFFFFFF).astype(np.uint32).view(np.float32).astype(np.float64)
    fin = np.isfinite(f)
    if not ((f[fin] > 0).all() and (f[~fin] == np.inf).all()):
        return None
    m, e = np.frexp(f[fin])
    if not (m == 0.5).all():
        return None
    ks = np.unique(e - 1)
    if len(ks) < 2:
        return None
    return {"encoding": "by-value", "exponents": [int(ks.min()), int(ks.max())]}


def _integer_valued(k, name, depth: int = 0) -> bool:
    """The float value is an integer whatever the inputs: a floor/ceil/round, an int converted,
    an integer constant, and sums, products, negations and clamps of such (fp32 rounds integers
    to integers)."""
    if depth > 30:
        return False
    op = k.def_op(name)
    if op is None:
        return False
    n = op.name
    if n in ("math.floor", "math.ceil", "math.round", "math.roundeven", "math.trunc", "arith.sitofp",
             "arith.uitofp"):
        return True
    if n == "arith.constant":
        c = k.const(name)
        return c is not None and (c == int(c) if np.isfinite(c) else False)
    if n in _PASS or n in ("arith.negf", "math.absf", "arith.extf"):
        return _integer_valued(k, op.operands[0], depth + 1)
    if n in ("arith.addf", "arith.subf", "arith.mulf", "arith.maxnumf", "arith.minnumf", "arith.maximumf",
             "arith.minimumf", "tt.clampf"):
        vals = op.operands[:3] if n == "tt.clampf" else op.operands
        return all(_integer_valued(k, o, depth + 1) for o in vals)
    if n == "arith.select":
        return all(_integer_valued(k, o, depth + 1) for o in op.operands[1:3])
    return False


def _float_range(k, name, depth: int = 0) -> tuple:
    """Bounds the IR's clamps with constants put on a float value ((-inf, inf) without)."""
    inf = float("inf")
    op = k.def_op(name)
    if op is None or depth > 30:
        return -inf, inf
    n = op.name
    if n == "arith.constant":
        c = k.const(name)
        return (c, c) if c is not None and c == c else (-inf, inf)
    if n in _PASS:
        return _float_range(k, op.operands[0], depth + 1)
    if n == "tt.clampf" and len(op.operands) >= 3:
        lo, hi = k.const(op.operands[1]), k.const(op.operands[2])
        a, b = _float_range(k, op.operands[0], depth + 1)
        return (max(a, lo) if lo is not None else a), (min(b, hi) if hi is not None else b)
    if n in ("arith.maxnumf", "arith.maximumf", "arith.minnumf", "arith.minimumf") and len(op.operands) == 2:
        (a0, b0), (a1, b1) = (_float_range(k, o, depth + 1) for o in op.operands)
        if "max" in n:
            return max(a0, a1), max(b0, b1)
        return min(a0, a1), min(b0, b1)
    return -inf, inf


def _selects_nan(k, name, depth: int = 0) -> bool:
    """A NaN constant can reach this value through selects, clamps and layout operations."""
    if depth > 30:
        return False
    op = k.def_op(name)
    if op is None:
        return False
    n = op.name
    if n == "arith.constant":
        c = k.const(name)
        return c is not None and c != c
    if n == "arith.select":
        return any(_selects_nan(k, o, depth + 1) for o in op.operands[1:3])
    if n in _PASS or n in ("tt.clampf", "arith.maxnumf", "arith.minnumf"):
        return _selects_nan(k, op.operands[0], depth + 1)
    return False


# --------------------------------------------------------------------------- comparisons

def _grids() -> dict:
    """Per format of at most 8 bits: the midpoints of its non-negative finite grid."""
    import torch
    out = {}
    for f in F.ALL:
        if f.bits > 8 or f.name == "e8m0":
            continue
        v = F.from_bits(torch.arange(1 << f.bits), f).to(torch.float64)
        v = torch.unique(v[torch.isfinite(v) & (v >= 0)])
        out[f.name] = ((v[:-1] + v[1:]) / 2).tolist()
    return out


_GRIDS = None


def _term(k, name):
    """(compared value, constant, "gt" | "ge") for a 0/1 integer made from one comparison of a
    value with a float constant, or None."""
    op = k.def_op(name)
    if op is None:
        return None
    if op.name == "arith.extui" and op.operands:
        cmp = k.def_op(op.operands[0])
    elif op.name == "arith.select" and len(op.operands) == 3:
        one, zero = (_int_const(k.def_op(o)) if k.def_op(o) is not None and k.def_op(o).name == "arith.constant"
                     else None for o in op.operands[1:3])
        if (one, zero) != (1, 0):
            return None
        cmp = k.def_op(op.operands[0])
    else:
        return None
    if cmp is None or cmp.name != "arith.cmpf" or len(cmp.operands) < 2:
        return None
    pred = cmp.text.split(",")[0].strip()
    a, b = cmp.operands[:2]
    ca, cb = k.const(a), k.const(b)
    if cb is not None and ca is None:
        rel = {"ogt": "gt", "ugt": "gt", "oge": "ge", "uge": "ge"}.get(pred)
        return (a, cb, rel, cmp) if rel else None
    if ca is not None and cb is None:
        rel = {"olt": "gt", "ult": "gt", "ole": "ge", "ule": "ge"}.get(pred)
        return (b, ca, rel, cmp) if rel else None
    return None


def _sum_terms(k, name, depth: int = 0):
    op = k.def_op(name)
    if op is not None and op.name == "arith.addi" and depth < 64:
        out = []
        for o in op.operands:
            sub = _sum_terms(k, o, depth + 1)
            if sub is None:
                return None
            out += sub
        return out
    t = _term(k, name)
    return [t] if t is not None else None


def _compare_groups(k, out: Analysis) -> None:
    global _GRIDS
    for op in k.ops:
        if op.name != "arith.addi" or not op.results:
            continue
        # the root of a sum: not itself a term of a larger sum
        if any(u.name == "arith.addi" and _sum_terms(k, u.results[0]) is not None for u in k.users.get(op.results[0], [])):
            continue
        terms = _sum_terms(k, op.results[0])
        if not terms or len(terms) < 3 or len({t[0] for t in terms}) != 1:
            continue
        terms = sorted(terms, key=lambda t: t[1])
        th = [t[1] for t in terms]
        if len(set(th)) != len(th):
            continue
        if _GRIDS is None:
            _GRIDS = _grids()
        fmt = next((name for name, mids in _GRIDS.items() if mids == th), None)
        preds = [t[2] for t in terms]
        rounding = None
        if fmt is not None:
            # a tie at midpoint j (between codes j and j + 1) goes to the even code: the lower
            # one (strict >) when j is even, the upper one (>=) when j is odd
            even = ["gt" if j % 2 == 0 else "ge" for j in range(len(th))]
            rounding = ("rtne" if preds == even else "rna" if all(p == "ge" for p in preds)
                        else "rnz" if all(p == "gt" for p in preds) else "mixed")
        g = CompareRounding(op, terms[0][0], th, preds, fmt, rounding)
        out.groups.append(g)
        for t in terms:
            out.compares[id(t[3])] = t[0]
