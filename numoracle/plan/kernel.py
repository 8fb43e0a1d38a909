"""A kernel's precision plan, read from its Triton IR (docs/plan.md has the table of what each
IR operation maps to).

For one compiled launch, every operation that decides a value's format or accuracy becomes a
:class:`Site`: loads and stores with their formats, casts with direction and rounding,
arithmetic with the format it is computed in (and whether it can round at all: adding 0.0 or
scaling by a power of two cannot), math functions with their NVIDIA implementation, reductions
with their combine operation, format and shape (elements per thread, lanes and warps along the
reduced axis from the TTGIR layout, and the steps of a loop that carries them), ``tt.dot`` with
its operand and accumulator formats, and multiply-add pairs that may be contracted into one FMA.
Each site names the source line it comes from (the innermost frame in the user's code, with the
call chain).

Exactness is decided on the IR: a value widened from bf16 is exactly representable in bf16, so
rounding it back to bf16 is no rounding; constants are read from the IR.
"""

from __future__ import annotations

import math
import os
import re
import struct
from dataclasses import dataclass, field

from .. import formats as F
from . import mlir as M

ELEM = {"f32": "fp32", "bf16": "bf16", "f16": "fp16", "f64": "fp64", "f8E4M3FN": "e4m3fn",
        "f8E5M2": "e5m2", "f8E4M3FNUZ": "e4m3fnuz", "f8E5M2FNUZ": "e5m2fnuz", "f8E4M3B11FNUZ": "e4m3b11fnuz",
        "tf32": "tf32"}
LOG2E = 1.4426950408889634
LN2 = 0.6931471805599453

_TRITON_DIR = os.sep + "triton" + os.sep

# What each math operation is on NVIDIA GPUs (Triton's lowering; FACTS for the measured errors).
IMPLEMENTATION = {
    "math.exp": "ex2.approx.ftz.f32 of x*log2(e): approximate, error grows with |x|",
    "math.exp2": "ex2.approx.ftz.f32: approximate (about 2 ulp)",
    "math.log": "lg2.approx.ftz.f32 * ln 2: approximate",
    "math.log2": "lg2.approx.ftz.f32: approximate",
    "math.rsqrt": "rsqrt.approx.ftz.f32: approximate (about 1.5 ulp)",
    "math.sqrt": "sqrt.approx.ftz.f32: approximate, not correctly rounded",
    "tt.precise_sqrt": "sqrt.rn.f32: correctly rounded",
    "arith.divf": "div.full.f32: approximate, not correctly rounded (NVIDIA documents 2 ulp)",
    "tt.precise_divf": "div.rn.f32: correctly rounded",
    "math.erf": "libdevice erf",
    "math.sin": "sin (libdevice / approx)",
    "math.cos": "cos (libdevice / approx)",
    "math.tanh": "libdevice tanh",
    "math.log1p": "libdevice log1p",
    "math.expm1": "libdevice expm1",
    "math.fma": "fma.rn.f32: one rounding",
}
# math operations -> the function they compute (canonical names shared with the reference side)
MATH = {"math.exp": "exp", "math.exp2": "exp2", "math.log": "log", "math.log2": "log2",
        "math.rsqrt": "rsqrt", "math.sqrt": "sqrt", "tt.precise_sqrt": "sqrt_rn", "math.erf": "erf",
        "math.sin": "sin", "math.cos": "cos", "math.tanh": "tanh", "math.log1p": "log1p",
        "math.expm1": "expm1", "tt.precise_divf": "div_rn"}
INTEGER_ROUNDING = {"math.floor", "math.ceil", "math.round", "math.roundeven", "math.trunc"}
_PASS = {"tt.splat", "tt.broadcast", "tt.expand_dims", "tt.reshape", "tt.trans", "ttg.convert_layout",
         "tt.permute", "tt.join", "tt.split", "tt.cat", "tt.gather"}
_EXACT_UNARY = {"arith.negf", "math.absf"}
_SELECT = {"arith.select", "arith.maxnumf", "arith.minnumf", "arith.maximumf", "arith.minimumf",
           "tt.clampf"}
ARITH = {"arith.addf": "add", "arith.subf": "sub", "arith.mulf": "mul", "arith.divf": "div",
         "arith.remf": "rem"}


def fmt_name(elem: str | None) -> str | None:
    if elem is None:
        return None
    return ELEM.get(elem)


def fmt_obj(name: str | None):
    if name is None:
        return None
    try:
        return F.by_name(name)
    except Exception:
        return None


def is_low(name: str | None) -> bool:
    """A format narrower than fp32: a rounding there is a site of the precision plan."""
    f = fmt_obj(name)
    return f is not None and f.precision < 24 and name != "tf32"


def subset(a: str | None, b: str | None) -> bool:
    """Every value of format a is a value of format b."""
    if a is None or b is None:
        return False
    if a == b:
        return True
    fa, fb = fmt_obj(a), fmt_obj(b)
    if fa is None or fb is None:
        return False
    return (fa.precision <= fb.precision and fa.max_finite <= fb.max_finite
            and fa.min_subnormal >= fb.min_subnormal)


def wider(a: str | None, b: str | None) -> str | None:
    if a is None or b is None:
        return None
    if subset(a, b):
        return b
    if subset(b, a):
        return a
    return "fp32"


# --------------------------------------------------------------------------- sites

@dataclass(frozen=True)
class Where:
    """A source position: the innermost frame in user code, and the call chain outward."""
    file: str | None
    line: int | None
    col: int | None
    chain: tuple = ()             # ((file, line, col), ...) callers, innermost first
    name: str | None = None       # the variable name Triton recorded

    def short(self) -> str:
        if self.file is None:
            return "?"
        base = os.path.basename(self.file) if not self.file.startswith("<") else self.file
        s = f"{base}:{self.line}"
        if self.chain:
            s += " (" + " <- ".join(str(c[1]) for c in self.chain) + ")"
        return s


@dataclass
class Site:
    kind: str                    # load | store | cast | arith | math | reduce | scan | dot | fma | atomic | round-int | bits | host
    op: str                      # the IR operation (or torch's name for host steps)
    fmt: str | None              # the format the result is computed / held in
    where: Where
    src_fmt: str | None = None   # casts: the source format; dot: the operands'
    rounds: bool = False         # this operation can round its result to fmt
    rounding: str | None = None  # rtne | rtz for casts
    function: str | None = None  # canonical function (exp, rsqrt, ...)
    implementation: str | None = None
    detail: dict = field(default_factory=dict)
    launch: int = 0              # index of the launch (or host step) in the capture
    ir: object = None            # the mlir.Op (None for host steps)
    # among the operations of one kernel with the same name at the same source position
    # (a * b * c: both products start at a), this one's place in program order
    ordinal: int = 0

    def text(self) -> str:
        """One line: operation and formats."""
        k, d = self.kind, self.detail
        if k == "load":
            return f"load {self.fmt}" + (f" from {d['arg']}" if d.get("arg") else "")
        if k == "store":
            s = f"store {self.fmt}" + (f" to {d['arg']}" if d.get("arg") else "")
            return s + (f" (value {self.src_fmt})" if self.src_fmt and self.src_fmt != self.fmt else "")
        if k == "cast" and d.get("by"):
            return f"round {self.src_fmt} -> {self.fmt} by hand ({d['by']}; {self.rounding})"
        if k == "cast":
            how = "rounds" if self.rounds else "exact"
            if d.get("overflow") == "nan":
                how += ", a NaN selected in where it would saturate"
            rnd = f", {self.rounding}" if self.rounding and self.rounds else ""
            return f"cast {self.src_fmt} -> {self.fmt} ({how}{rnd})"
        if k == "arith":
            how = "" if self.rounds else " (exact)"
            impl = f": {self.implementation}" if self.implementation else ""
            return (f"{d.get('name', self.op)} in {self.fmt}{how}{impl}"
                    + (f" ({d['why']})" if d.get("why") else ""))
        if k == "math":
            r = " then rounded to " + self.fmt if self.rounds else ""
            return f"{self.function} in {d.get('computed', self.fmt)}: {self.implementation}{r}"
        if k == "reduce":
            return (f"reduce {d.get('combine')} in {self.fmt} over {d.get('n')} "
                    f"(axis {d.get('axis')}; {d.get('order', 'order unknown')})")
        if k == "scan":
            return f"scan {d.get('combine')} in {self.fmt} over {d.get('n')}"
        if k == "loop":
            return f"loop-carried {d.get('name', 'add')} in {self.fmt} over {d.get('steps', '?')} steps"
        if k == "dot":
            imp = d.get("imprecise")
            return (f"dot {self.src_fmt} x {d.get('b_fmt', self.src_fmt)} -> acc {self.fmt} "
                    f"(K={d.get('k')}, inputPrecision={d.get('precision', 'ieee')}"
                    + (f", maxNumImpreciseAcc={imp}" if imp else "") + (f"; {d['mma']}" if d.get("mma") else "")
                    + ")")
        if k == "fma":
            into = "the reduction's additions" if d.get("into") == "reduction" else "an add"
            return f"{self.fmt} multiply feeding {into}: may be contracted into one FMA ({d.get('fusion')})"
        if k == "atomic":
            return f"atomic {d.get('name')} in {self.fmt} (programs in any order)"
        if k == "round-int":
            return f"{self.op.split('.')[-1]} to an integer in {self.fmt}"
        if k == "bits":
            enc = d.get("encoding")
            if enc == "exponent":
                return f"bitcast {self.src_fmt} -> {self.fmt}: {d.get('rounding')}(log2 x) from the exponent field (exact)"
            if enc == "pow2":
                return f"bitcast {self.src_fmt} -> {self.fmt}: a power of two built from its bits (exact)"
            if enc == "by-value":
                lo, hi = (d.get("exponents") or "??")[:2]
                return (f"convert {self.src_fmt} -> {self.fmt} by value of an integer that holds a float's encoding "
                        f"(the bits of 2^k, k in [{lo}, {hi}]): its value is the bit pattern, not 2^k")
            if d.get("by"):
                return f"integer code by {d['by']} (no format's grid)"
            return f"bitcast {self.src_fmt} -> {self.fmt} (arithmetic on the encoding)"
        if k == "host":
            return d.get("text", self.op)
        return f"{self.op} {self.fmt}"

    def to_dict(self) -> dict:
        return {"kind": self.kind, "op": self.op, "format": self.fmt, "source_format": self.src_fmt,
                "rounds": self.rounds, "rounding": self.rounding, "function": self.function,
                "implementation": self.implementation, "detail": _jsonable(self.detail),
                "file": self.where.file, "line": self.where.line, "col": self.where.col,
                "chain": [list(c) for c in self.where.chain], "launch": self.launch, "text": self.text()}


def _jsonable(d: dict) -> dict:
    out = {}
    for k, v in d.items():
        if isinstance(v, (str, int, float, bool)) or v is None:
            out[k] = v
        elif isinstance(v, (list, tuple)):
            out[k] = [x if isinstance(x, (str, int, float, bool)) or x is None else str(x) for x in v]
        else:
            out[k] = str(v)
    return out


# --------------------------------------------------------------------------- one compiled kernel

class KernelIR:
    """The parsed TTIR (and TTGIR) of one compiled launch, with its value graph."""

    def __init__(self, ttir: str, ttgir: str = "", *, args: list | None = None, grid=None,
                 options: dict | None = None):
        self.module = M.parse(ttir)
        self.func = self.module.function()
        self.gmodule = M.parse(ttgir) if ttgir else None
        self.args = args or []                 # capture.Arg list in parameter order
        self.grid = grid
        self.options = options or {}
        self.defs: dict = {}                   # name -> (op, index) | ("arg", i) | ("block", op, region, i)
        self.users: dict = {}
        self.ops = list(self.func.walk())
        arg_names = [n for n, _ in self.func.args]
        for i, n in enumerate(arg_names):
            self.defs[n] = ("arg", i)
        for op in self.ops:
            for i, r in enumerate(op.results):
                self.defs[r] = (op, i)
            for ri, bargs in enumerate(op.block_args):
                for ai, (n, _) in enumerate(bargs):
                    self.defs[n] = ("block", op, ri, ai)
            for o in op.operands:
                self.users.setdefault(o, []).append(op)
        self._info: dict = {}
        self.encoding = None                   # encoding.Analysis, set when the sites are read
        self._layouts = self._reduce_layouts()
        # runtime arguments by IR argument name (constexprs are not IR arguments)
        runtime = [a for a in self.args if a.kind != "constexpr"]
        self.arg_by_ir = {}
        for (n, _), a in zip(self.func.args, runtime):
            self.arg_by_ir[n] = a

    # ---- value facts
    def def_op(self, name: str):
        d = self.defs.get(name)
        return d[0] if d and not isinstance(d[0], str) else None

    def type_of(self, name: str):
        d = self.defs.get(name)
        if d is None:
            return None
        if d[0] == "arg":
            return self.func.args[d[1]][1]
        if d[0] == "block":
            op, ri, ai = d[1], d[2], d[3]
            ty = op.block_args[ri][ai][1]
            if ty is None and op.name == "scf.for" and ai > 0 and ai - 1 < len(op.result_types):
                return op.result_types[ai - 1]
            return ty
        op, i = d
        if i < len(op.result_types):
            return op.result_types[i]
        return op.result_types[-1] if op.result_types else None

    def fmt_of(self, name: str) -> str | None:
        t = self.type_of(name)
        return fmt_name(t.elem) if t is not None and not t.pointer else None

    def const(self, name: str):
        """The value of a float constant (scalar or splat), else None."""
        return self.info(name)[1]

    def repr_of(self, name: str) -> str | None:
        """The narrowest format known to hold this value exactly."""
        return self.info(name)[0]

    def info(self, name: str, _depth: int = 0):
        if name in self._info:
            return self._info[name]
        self._info[name] = (self.fmt_of(name), None)     # cycle guard (loop-carried values)
        if _depth > 200:
            return self._info[name]
        d = self.defs.get(name)
        out = (self.fmt_of(name), None)
        if d is not None and not isinstance(d[0], str):
            op = d[0]
            n = op.name
            ops = op.operands
            if n == "arith.constant":
                v = _constant_value(op)
                out = (_narrowest(v, self.fmt_of(name)) if v is not None else self.fmt_of(name), v)
            elif n in _PASS and ops:
                out = self.info(ops[0], _depth + 1)
            elif n in ("arith.extf",) or (n == "tt.fp_to_fp" and _widens(self, op)):
                out = self.info(ops[0], _depth + 1)
            elif n in ("arith.truncf", "tt.fp_to_fp"):
                r, v = self.info(ops[0], _depth + 1)
                dst = self.fmt_of(name)
                out = (dst if not subset(r, dst) else r, v)
            elif n == "tt.load":
                pointee = self.fmt_of(name)
                if len(ops) >= 3:
                    r, _ = self.info(ops[2], _depth + 1)
                    pointee = wider(pointee, r) if r else pointee
                out = (pointee, None)
            elif n in _SELECT:
                vals = ops[1:3] if n == "arith.select" else ops
                rs = [self.info(o, _depth + 1)[0] for o in vals]
                r = rs[0]
                for x in rs[1:]:
                    r = wider(r, x)
                out = (r, None)
            elif n == "arith.addf" and len(ops) == 2 and 0.0 in (self.const(ops[0]), self.const(ops[1])):
                # x + 0 is x (tl.zeros(...) + x broadcasts a value)
                other = ops[1] if self.const(ops[0]) == 0.0 else ops[0]
                out = self.info(other, _depth + 1)
            elif n in _EXACT_UNARY and ops:
                r, v = self.info(ops[0], _depth + 1)
                out = (r, None if v is None else (-v if n == "arith.negf" else abs(v)))
            elif n == "arith.sitofp" or n == "arith.uitofp":
                out = (self.fmt_of(name), self._int_const(ops[0]) if ops else None)
        self._info[name] = out
        return out

    def _int_const(self, name: str):
        op = self.def_op(name)
        if op is not None and op.name == "arith.constant":
            m = re.match(r"^\s*(?:dense<)?(-?\d+)(?:>)?\s*$", op.text)
            if m:
                return float(m.group(1))
        return None

    # ---- locations
    def where(self, op) -> Where:
        frames = M.frames(op.loc, self.module.aliases)
        user = [f for f in frames if _TRITON_DIR not in f.file]
        if not user:
            return Where(None, None, None)
        first = user[0]
        name = next((f.name for f in frames if f.name), None)
        return Where(first.file, first.line, first.col, tuple((f.file, f.line, f.col) for f in user[1:]), name)

    # ---- layouts (TTGIR): reduce operand layouts in program order
    def _reduce_layouts(self) -> list:
        if self.gmodule is None:
            return []
        out = []
        g = self.gmodule.function(self.func.name) if self.func.name in self.gmodule.functions else None
        if g is None:
            return []
        for op in g.walk():
            if op.name == "tt.reduce" and op.operand_types:
                out.append(M.layout(op.operand_types[0].encoding, self.gmodule.aliases))
        return out

    def pointer_arg(self, name: str, _depth: int = 0):
        """The function argument a pointer value is derived from (through addptr/splat/...)."""
        if _depth > 100:
            return None
        d = self.defs.get(name)
        if d is None:
            return None
        if d[0] == "arg":
            return self.func.args[d[1]][0]
        if d[0] == "block":
            op, ai = d[1], d[3]
            if op.name == "scf.for" and ai > 0:
                inits = op.operands[3:]
                if ai - 1 < len(inits):
                    return self.pointer_arg(inits[ai - 1], _depth + 1)
            return None
        op = d[0]
        if op.name in ("tt.addptr", "tt.splat", "tt.broadcast", "tt.expand_dims", "ttg.convert_layout",
                       "tt.reshape", "tt.trans", "arith.select", "tt.advance", "tt.make_tensor_ptr"):
            for o in (op.operands[1:3] if op.name == "arith.select" else op.operands[:1]):
                p = self.pointer_arg(o, _depth + 1)
                if p:
                    return p
        return None


def _constant_value(op):
    text = op.text.strip()
    m = re.match(r"^dense<(.*)>\s*$", text)
    body = m.group(1) if m else text
    body = body.strip()
    if body.startswith("["):
        return None
    if body.startswith("0x"):
        ty = op.result_types[0].elem if op.result_types else "f32"
        bits = int(body, 16)
        if ty == "f32":
            return struct.unpack("<f", struct.pack("<I", bits & 0xFFFFFFFF))[0]
        if ty == "f16":
            return struct.unpack("<e", struct.pack("<H", bits & 0xFFFF))[0]
        if ty == "bf16":
            return struct.unpack("<f", struct.pack("<I", (bits & 0xFFFF) << 16))[0]
        return None
    try:
        v = float(body)
    except ValueError:
        return None
    return v if (op.result_types and op.result_types[0].elem and op.result_types[0].elem.startswith(("f", "bf"))) else None


def representable(v: float, fmt: str | None) -> bool:
    """Whether the Python float v is a value of format fmt."""
    f = fmt_obj(fmt)
    if f is None or v is None:
        return False
    if math.isnan(v):
        return f.has_nan
    if math.isinf(v):
        return f.has_inf
    if abs(v) > f.max_finite:
        return False
    if f.has_inf and f.subnormals:
        return F.round_scalar(v, f) == v
    import torch
    return bool(F.round(torch.tensor(v, dtype=torch.float64), f) == v)


def _narrowest(v: float, fmt: str | None) -> str | None:
    """The narrowest of the usual formats that holds the constant v and lies within fmt."""
    if v is None:
        return fmt
    for name in ("e4m3fn", "e5m2", "bf16", "fp16", "fp32"):
        if representable(v, name) and subset(name, fmt or "fp32"):
            return name
    return fmt


def _widens(k: KernelIR, op) -> bool:
    src = k.fmt_of(op.operands[0]) if op.operands else None
    dst = k.fmt_of(op.results[0]) if op.results else None
    return subset(src, dst)


def _is_pow2(v) -> bool:
    if v is None or v == 0 or not math.isfinite(v):
        return False
    return math.frexp(abs(v))[0] == 0.5


# --------------------------------------------------------------------------- site extraction

def _rounding_mode(op) -> str:
    r = op.attr("rounding")
    if r:
        return r.strip(",")
    m = re.search(r"\b(to_nearest_even|toward_zero|downward|upward|to_nearest_away)\b", op.text)
    return {"toward_zero": "rtz", "to_nearest_away": "rna"}.get(m.group(1), "rtne") if m else "rtne"


def _arith_exact(k: KernelIR, op) -> bool:
    """Whether a float arithmetic operation cannot round: x + 0, x - 0, x * (power of two), x / (power of two)."""
    a, b = (op.operands + [None, None])[:2]
    ca, cb = (k.const(a) if a else None), (k.const(b) if b else None)
    n = op.name
    if n == "arith.addf":
        return ca == 0.0 or cb == 0.0
    if n == "arith.subf":
        return cb == 0.0
    if n == "arith.mulf":
        if _is_pow2(ca) or _is_pow2(cb):
            return True
        fa, fb, fr = fmt_obj(k.repr_of(a)), fmt_obj(k.repr_of(b)), fmt_obj(k.fmt_of(op.results[0]))
        return bool(fa and fb and fr and fa.precision + fb.precision <= fr.precision)
    if n == "arith.divf":
        return _is_pow2(cb) or _runtime_pow2(k, b)
    return False


def _through(k: KernelIR, name, also=()):
    """The operation that makes ``name``, past layout operations (``_PASS``) and those named in
    ``also``, following each one's first operand."""
    op = k.def_op(name)
    while op is not None and (op.name in _PASS or op.name in also) and op.operands:
        op = k.def_op(op.operands[0])
    return op


def _runtime_pow2(k: KernelIR, name) -> bool:
    """A divisor that is a runtime integer argument with a power-of-two value (n_cols = 64)."""
    if name is None:
        return False
    op = _through(k, name)
    if op is None or op.name not in ("arith.sitofp", "arith.uitofp"):
        return False
    src = op.operands[0]
    d = k.defs.get(src)
    if d and d[0] == "arg":
        a = k.arg_by_ir.get(k.func.args[d[1]][0])
        return a is not None and isinstance(a.value, int) and _is_pow2(float(a.value))
    return False


def _log2e_scaled(k: KernelIR, name) -> bool:
    op = k.def_op(name)
    if op is None or op.name != "arith.mulf":
        return False
    return any(c is not None and abs(c - LOG2E) < 1e-6 for c in (k.const(o) for o in op.operands))


def _integer_valued(k: KernelIR, name) -> bool:
    op = _through(k, name)
    return op is not None and (op.name in INTEGER_ROUNDING or op.name in ("arith.sitofp", "arith.uitofp"))


def _combine(op) -> tuple:
    """(combine operation, its format) of a reduce / scan body."""
    body = op.regions[0] if op.regions else []
    for o in body:
        if o.name.startswith(("arith.", "math.")) and o.name != "arith.constant":
            t = o.result_types[0] if o.result_types else None
            return o.name, (fmt_name(t.elem) if t else None)
    return None, None


def reduction_order(layout: dict, shape: tuple, axis: int) -> dict:
    """Elements per thread, lanes and warps along ``axis`` of a blocked layout, and the depth of
    Triton's reduction tree (a sequential pass over each thread's elements, then butterflies
    across lanes and warps)."""
    n = shape[axis] if axis < len(shape) else 1
    if not layout or layout.get("kind") != "blocked" or "sizePerThread" not in layout:
        return {"n": n}
    spt = layout["sizePerThread"][axis]
    tpw = layout["threadsPerWarp"][axis]
    wpc = layout["warpsPerCTA"][axis]
    per = min(spt, n)
    lanes = max(1, min(tpw, n // per))
    warps = max(1, min(wpc, n // (per * lanes)))
    elems = max(1, n // (lanes * warps))
    depth = (elems - 1) + int(math.log2(lanes)) + int(math.log2(warps))
    return {"n": n, "elements_per_thread": elems, "lanes": lanes, "warps": warps, "depth": depth,
            "order": f"{elems} per thread in sequence, then {lanes} lanes and {warps} warps by tree (depth {depth})"}


def extract(k: KernelIR, launch_index: int = 0) -> list:
    """Every site of one compiled launch, in program order."""
    sites = _extract(k, launch_index)
    seen = {}
    for s in sites:
        place = (s.where, s.op, s.kind)
        s.ordinal = seen.get(place, 0)
        seen[place] = s.ordinal + 1
    return sites


def _extract(k: KernelIR, launch_index: int) -> list:
    from .encoding import analyse
    sites = []
    reduce_i = 0
    fusion = k.options.get("enable_fp_fusion")
    enc = k.encoding = analyse(k)
    for op in k.ops:
        n = op.name
        res = op.results[0] if op.results else None
        fmt = k.fmt_of(res) if res else None
        w = k.where(op)

        def add(kind, **kw):
            s = Site(kind, n, kw.pop("fmt", fmt), w, launch=launch_index, ir=op, **kw)
            sites.append(s)
            return s

        if n == "tt.load":
            if fmt:
                add("load", detail={"arg": k.pointer_arg(op.operands[0]) if op.operands else None})
        elif n == "tt.store":
            ptr, val = op.operands[0], op.operands[1] if len(op.operands) > 1 else None
            # the pointer's type as the store prints it ("tt.store %p, %v : tensor<128x!tt.ptr<f32>>"),
            # else as its definition gives it; a store rounds nothing: Triton's frontend casts the
            # value to the pointee format before it (that cast is the site that rounds)
            pt = op.operand_types[0] if op.operand_types and op.operand_types[0].pointer else k.type_of(ptr)
            pf = fmt_name(pt.elem) if pt is not None and pt.pointer else None
            if pf:
                add("store", fmt=pf, src_fmt=k.fmt_of(val) if val else None,
                    detail={"arg": k.pointer_arg(ptr)})
        elif n in ("arith.truncf", "arith.extf", "tt.fp_to_fp"):
            src = k.fmt_of(op.operands[0])
            if n == "arith.extf" or subset(src, fmt):
                add("cast", src_fmt=src, rounds=False)
            else:
                c = k.const(op.operands[0])
                exact = subset(k.repr_of(op.operands[0]), fmt) or (c is not None and representable(c, fmt))
                add("cast", src_fmt=src, rounds=not exact, rounding=_rounding_mode(op),
                    detail={"overflow": "nan"} if id(op) in enc.nan_casts else {})
        elif n in ("arith.sitofp", "arith.uitofp") and id(op) in enc.by_value:
            # a float's encoding converted by value: the bit pattern's integer, not its float
            t = k.type_of(op.operands[0])
            add("bits", src_fmt=t.elem if t is not None else "int", detail=dict(enc.by_value[id(op)]))
        elif n in ("arith.sitofp", "arith.uitofp") and is_low(fmt):
            add("cast", src_fmt="int", rounds=True, rounding="rtne")
        elif n in ARITH and fmt and op.parent is not None and op.parent.name in ("tt.reduce", "tt.scan"):
            continue                     # a reduction's combine: the reduce site stands for it
        elif n in ARITH and fmt:
            exact = _arith_exact(k, op)
            add("arith", rounds=not exact, detail={"name": ARITH[n]})
            if n == "arith.divf" and fmt == "fp32" and not exact:
                sites[-1].implementation = IMPLEMENTATION["arith.divf"]
            if n in ("arith.addf", "arith.subf"):
                for o in op.operands:
                    p = k.def_op(o)
                    if p is not None and p.name == "arith.mulf" and len(k.users.get(o, [])) == 1 \
                            and k.fmt_of(o) == fmt and not _arith_exact(k, p):
                        add("fma", detail={"fusion": "fusion on" if fusion else "fusion off",
                                           "enabled": bool(fusion)})
                        break
        elif n in MATH or n == "tt.extern_elementwise" or n == "math.fma":
            if n == "math.fma":
                add("arith", rounds=True, detail={"name": "fma"}, implementation=IMPLEMENTATION[n])
                continue
            if n == "tt.extern_elementwise":
                sym = re.search(r'symbol\s*=\s*"([^"]+)"', op.text)
                sym = sym.group(1) if sym else "?"
                fn = re.sub(r"^__nv_(fast_)?", "", sym)
                fn = fn[:-1] if fn.endswith("f") and fn[:-1] in ("tanh", "erf", "exp", "exp2", "log", "log2",
                                                                 "rsqrt", "sqrt", "sin", "cos", "erfc", "expm1",
                                                                 "log1p", "cbrt", "pow", "fdiv_rn", "rint",
                                                                 "round", "floor", "ceil", "trunc") else fn
                fn = {"fdiv_rn": "div_rn", "fsqrt_rn": "sqrt_rn"}.get(fn, fn)
                if fn in ("rint", "round", "floor", "ceil", "trunc"):
                    add("round-int", detail={"name": fn, "libdevice": sym})
                    continue
                impl = f"libdevice {sym}"
            else:
                fn = MATH[n]
                impl = IMPLEMENTATION.get(n, n)
                if n == "math.exp2" and op.operands:
                    if _log2e_scaled(k, op.operands[0]):
                        fn = "exp"
                        impl = "ex2.approx.ftz.f32 of x*log2(e) written out (what math.exp lowers to)"
                    elif _integer_valued(k, op.operands[0]):
                        add("math", function="pow2", implementation="exp2 of an integer: an exact power of two",
                            detail={"computed": fmt, "exact": True})
                        continue
            computed = "fp32" if is_low(fmt) else fmt
            add("math", function=fn, implementation=impl, rounds=is_low(fmt), detail={"computed": computed})
        elif n in INTEGER_ROUNDING:
            add("round-int", detail={"name": n.split(".")[-1]})
        elif n in ("arith.fptosi", "arith.fptoui"):
            if id(op) not in enc.exact_int:          # an integer-valued float converts exactly
                add("round-int", fmt=k.fmt_of(op.operands[0]), detail={"name": "to-int (truncation)"})
        elif n == "tt.bitcast" and op.operands:
            src = k.fmt_of(op.operands[0])
            rt = k.type_of(res)
            if (src is None) != (fmt is None):
                add("bits", fmt=fmt or (rt.elem if rt else None), src_fmt=src or k.type_of(op.operands[0]).elem,
                    detail={kk: v for kk, v in enc.bits.get(id(op), {}).items() if v is not None})
        elif n in ("tt.reduce", "tt.scan"):
            comb, cfmt = _combine(op)
            ty = op.operand_types[0] if op.operand_types else None
            axis = int(op.attr("axis") or 0)
            shape = ty.shape if ty else ()
            lay = k._layouts[reduce_i] if n == "tt.reduce" and reduce_i < len(k._layouts) else {}
            if n == "tt.reduce":
                reduce_i += 1
            order = reduction_order(lay, shape, axis) if n == "tt.reduce" else {"n": shape[axis] if shape else 1}
            if cfmt is None:
                continue
            summing = comb in ("arith.addf", "arith.subf")
            src = k.def_op(op.operands[0]) if op.operands else None
            if summing and src is not None and src.name == "arith.mulf" and not _arith_exact(k, src) \
                    and len(k.users.get(op.operands[0], [])) == 1:
                add("fma", fmt=cfmt, detail={"fusion": "fusion on" if fusion else "fusion off",
                                             "enabled": bool(fusion), "into": "reduction"})
            add("reduce" if n == "tt.reduce" else "scan", fmt=cfmt, rounds=summing and order.get("n", 1) > 1,
                detail={"combine": comb.split(".")[-1], "axis": axis, "shape": list(shape), "sum": summing,
                        "layout": lay, **order})
        elif n == "tt.dot":
            a_t = op.operand_types[0] if op.operand_types else None
            b_t = op.operand_types[1] if len(op.operand_types) > 1 else None
            af = fmt_name(a_t.elem) if a_t else None
            bf = fmt_name(b_t.elem) if b_t else None
            kdim = a_t.shape[-1] if a_t and a_t.shape else None
            prec = op.attr("inputPrecision") or "ieee"
            imp = op.attr("maxNumImpreciseAcc")
            ra, rb = dot_operand_formats(k, op)
            exact = bool(ra and rb and fmt and fmt_obj(ra) and fmt_obj(rb) and fmt_obj(fmt)
                         and fmt_obj(ra).precision + fmt_obj(rb).precision <= fmt_obj(fmt).precision)
            add("dot", src_fmt=af, rounds=True,
                detail={"b_fmt": bf, "k": kdim, "precision": prec.strip(","),
                        "tf32_exact": subset(ra, "tf32") and subset(rb, "tf32"),
                        "imprecise": int(imp) if imp and imp.isdigit() and int(imp) > 0 else None,
                        "exact_products": exact, "mma": _mma(k, op), "acc_from": _dot_acc_from(k, op),
                        "ttgir": k.gmodule is not None})
        elif n == "tt.dot_scaled":
            _dot_scaled_sites(k, op, add)
        elif n == "tt.atomic_rmw":
            kind = re.match(r"^\s*(\w+)", op.text)
            if fmt and kind and kind.group(1) in ("fadd", "add"):
                add("atomic", rounds=True, detail={"name": kind.group(1)})
    for g in enc.groups:
        # an integer code counted from comparisons with constants: a rounding to the format
        # whose grid midpoints they are, or arithmetic of its own
        by = f"comparisons with the {len(g.thresholds)} midpoints of {g.fmt}'s grid" if g.fmt else \
            f"comparisons with {len(g.thresholds)} constants {g.thresholds}"
        s = Site("cast" if g.fmt else "bits", "compare-round", g.fmt or "i32", k.where(g.root),
                 src_fmt=k.fmt_of(g.value) or "fp32", rounds=bool(g.fmt), rounding=g.rounding, launch=launch_index,
                 ir=g.root, detail={"by": by, "thresholds": list(g.thresholds), "predicates": list(g.predicates)})
        sites.append(s)
    return sites


# tt.dot_scaled's operand format names
_SCALED_FMT = {"e4m3": "e4m3fn", "e5m2": "e5m2", "e2m1": "e2m1", "bf16": "bf16", "fp16": "fp16"}


def _dot_scaled_sites(k: KernelIR, op, add) -> None:
    """``tt.dot_scaled``: a dot of block-scaled operands.  Where the target has no scaled tensor
    core (sm90), Triton's TTGIR upcasts each operand to bf16 and multiplies it by its scale in
    bf16 before a plain ``tt.dot``: those products are roundings to bf16 of their own (the
    scaled operands' values), read from the TTGIR at the same source position."""
    lhs = re.search(r"\blhs\s*=\s*(\w+)", op.text)
    rhs = re.search(r"\brhs\s*=\s*(\w+)", op.text)
    af = _SCALED_FMT.get(lhs.group(1)) if lhs else None
    bf = _SCALED_FMT.get(rhs.group(1)) if rhs else None
    a_t = op.operand_types[0] if op.operand_types else None
    kdim = a_t.shape[-1] * (2 if af == "e2m1" else 1) if a_t is not None and a_t.shape else None
    emulated = _emulated_scaling(k, op)
    opnd = emulated[0].result_types[0].elem if emulated else None
    add("dot", src_fmt=af, rounds=True,
        detail={"b_fmt": bf, "k": kdim, "precision": "ieee", "scaled": True,
                # codes times a power of two: exact products in fp32
                "exact_products": True, "mma": _mma(k, op),
                "emulated": f"operands scaled in {fmt_name(opnd)}" if emulated else None})
    for g in emulated:
        s = add("arith", fmt=fmt_name(g.result_types[0].elem), rounds=True,
                detail={"name": "mul", "companion": True,
                        "why": "dot_scaled's operand times its scale, in the TTGIR's emulation"})
        s.op = "arith.mulf"


def _emulated_scaling(k: KernelIR, op) -> list:
    """The TTGIR's half-precision products that scale the operands of the ``tt.dot`` that
    replaced this ``tt.dot_scaled`` (empty when the TTGIR keeps a scaled dot, or is absent)."""
    if k.gmodule is None or k.func.name not in k.gmodule.functions:
        return []
    want = M.frames(op.loc, k.module.aliases)
    g = k.gmodule.function(k.func.name)
    defs = {}
    for o in g.walk():
        for r in o.results:
            defs[r] = o
    out = []
    for d in g.walk():
        if d.name != "tt.dot" or M.frames(d.loc, k.gmodule.aliases) != want:
            continue
        for v in d.operands[:2]:
            src = _scaling_product(defs, v)
            if src is not None:
                out.append(src)
    return out


def _scaling_product(defs: dict, name, depth: int = 0):
    """The half-precision product an emulated scaled dot's operand comes from, through layout
    operations and selects (Triton 3.6 selects NaN in, ``arith.select %scale_is_nan, %nan,
    %product``, where 3.9 does not): the product, or None."""
    src = defs.get(name)
    while src is not None and depth < 64:
        depth += 1
        if src.name == "arith.mulf":
            if src.result_types and fmt_name(src.result_types[0].elem) in ("bf16", "fp16"):
                return src
            return None
        if src.name == "arith.select" and len(src.operands) >= 3:
            # the value operands (not the condition); a constant one is the NaN selected in
            for o in src.operands[1:3]:
                got = _scaling_product(defs, o, depth)
                if got is not None:
                    return got
            return None
        if src.name in _PASS and src.operands:
            src = defs.get(src.operands[0])
            continue
        return None
    return None


def dot_operand_formats(k: KernelIR, op) -> tuple:
    """The formats of a dot's operand values (not their types): fp32 tiles widened from bf16 loads
    hold bf16 values, whose products are exact and which TF32 holds as they are."""
    types = [fmt_name(t.elem) if t else None for t in (list(op.operand_types) + [None, None])[:2]]
    return tuple((k.repr_of(op.operands[i]) if len(op.operands) > i else None) or types[i] for i in (0, 1))


def _mma(k: KernelIR, op) -> str | None:
    """The tensor-core instruction TTGIR chose for the dot at the same place (e.g. "mma v2",
    "wgmma (mma v3)"), or None when only TTIR is at hand."""
    if k.gmodule is None or k.func.name not in k.gmodule.functions:
        return None
    def kind(g):
        if g.name == "ttng.warp_group_dot":
            return "wgmma (mma v3)"
        enc = g.result_types[0].encoding if g.result_types else None
        text = k.gmodule.aliases.get(enc, enc or "")
        m = re.search(r"versionMajor = (\d+)", text)
        return f"mma v{m.group(1)}" if m else None
    # the two modules number their location aliases apart: compare the resolved frames
    want = M.frames(op.loc, k.module.aliases)
    gdots = [g for g in k.gmodule.function(k.func.name).walk() if g.name in ("tt.dot", "ttng.warp_group_dot")]
    for g in gdots:
        if M.frames(g.loc, k.gmodule.aliases) == want:
            return kind(g)
    # a split precision's dots (Triton 3.9's bf16x3/bf16x6) take the location of their first
    # operand, which is the original dot's first operand's
    src = k.def_op(op.operands[0]) if op.operands else None
    if src is not None and src.loc is not None:
        want = M.frames(src.loc, k.module.aliases)
        for g in gdots:
            if M.frames(g.loc, k.gmodule.aliases) == want:
                return kind(g)
    return None


# --------------------------------------------------------------------------- loops

def loop_levels(k: KernelIR) -> dict:
    """Loop-carried accumulations: {addf op: (scf.for op, iter index)} for each iter_arg whose
    yielded value adds something to itself (possibly rescaled by a product, as an online
    softmax rescales its running sum)."""
    out = {}
    for op in k.ops:
        if op.name != "scf.for" or not op.regions:
            continue
        body = op.regions[0]
        yields = [o for o in body if o.name == "scf.yield"]
        if not yields:
            continue
        iters = [n for n, _ in op.block_args[0][1:]]
        for i, (carried, y) in enumerate(zip(iters, yields[-1].operands)):
            add = k.def_op(y)
            if add is None or add.name not in ("arith.addf", "arith.subf", "tt.dot", "tt.dot_scaled"):
                continue
            if add.name in ("tt.dot", "tt.dot_scaled"):
                acc = add.operands[2] if add.name == "tt.dot" else add.operands[-1]
                if len(add.operands) > 2 and _derives(k, acc, carried):
                    out[add] = (op, i)
                continue
            if any(_derives(k, o, carried) for o in add.operands):
                if _counts(k, add, carried, op.operands[3 + i] if 3 + i < len(op.operands) else None, op):
                    continue
                out[add] = (op, i)
    return out


def _counts(k: KernelIR, add, carried, init, loop) -> bool:
    """``n = n + float(m)`` from an integer constant, ``m`` index arithmetic (no data: a tile's
    element count, ``min(n_cols - start, BLOCK)``): a count kept in a float, as a Welford
    combine keeps its element count.  Exact, and no accumulation to model, while its largest
    value on this launch (trips times the index bound) stays below 2^24."""
    if add.name != "arith.addf" or init is None or len(add.operands) != 2:
        return False
    start = k.const(init)
    if start is None or not float(start).is_integer():
        return False
    others = [o for o in add.operands if o != carried]
    if len(others) != 1:
        return False
    op = _through(k, others[0])
    if op is None or op.name not in ("arith.sitofp", "arith.uitofp"):
        return False
    bound, trips = _index_bound(k, op.operands[0]), trip_count(k, loop)
    return bound is not None and trips is not None and abs(start) + trips * bound < 2 ** 24


# integer operations whose result is at most the sum of their operands' magnitudes
_INDEX_OPS = ("arith.addi", "arith.subi", "arith.minsi", "arith.maxsi", "arith.minui", "arith.maxui",
              "arith.extsi", "arith.extui", "arith.trunci", "arith.index_cast")


def _index_bound(k: KernelIR, name, depth: int = 0) -> int | None:
    """A bound on |value| of integer index arithmetic on this launch (constants, integer
    arguments, a loop's induction variable), None where it reads data or is not known."""
    if depth > 30:
        return None
    d = k.defs.get(name)
    if d is None:
        return None
    if d[0] == "arg":
        v = _int_value(k, name, {})
        return abs(v) if v is not None else None
    if d[0] == "block":
        loop, region, index = d[1], d[2], d[3]
        if loop.name != "scf.for" or region != 0 or index != 0:
            return None                  # a loop-carried value, not the induction variable
        bounds = [_int_value(k, x, {"pid": 0}) for x in loop.operands[:2]]
        return None if None in bounds else max(abs(b) for b in bounds)
    op = d[0]
    if op.name == "arith.constant":
        v = _int_value(k, name, {})
        return abs(v) if v is not None else None
    if op.name not in _INDEX_OPS:
        return None
    parts = [_index_bound(k, o, depth + 1) for o in op.operands]
    return None if None in parts else sum(parts)


def _derives(k: KernelIR, name, carried, depth: int = 0) -> bool:
    """name is the carried value, possibly through a product (a rescale) or layout ops."""
    if name == carried:
        return True
    if depth > 4:
        return False
    op = k.def_op(name)
    if op is None or op.name not in {"arith.mulf", "arith.extf", "arith.truncf", "ttg.convert_layout"} | _PASS:
        return False
    return any(_derives(k, o, carried, depth + 1) for o in op.operands)


def trip_count(k: KernelIR, loop) -> int | None:
    """Iterations of an scf.for whose bounds are constants or runtime arguments (the largest
    over the first and last program when they depend on the program id)."""
    lb, ub, step = loop.operands[:3]
    grid = k.grid if isinstance(k.grid, (tuple, list)) else ((k.grid,) if isinstance(k.grid, int) else None)
    best = None
    for pid in ((0, (grid[0] - 1) if grid else 0)):
        env = {"pid": pid}
        a, b, s = (_int_value(k, x, env) for x in (lb, ub, step))
        if None in (a, b, s) or s <= 0:
            return None
        t = max(0, -(-(b - a) // s))
        best = t if best is None else max(best, t)
    return best


def _int_value(k: KernelIR, name, env, depth: int = 0):
    if depth > 50:
        return None
    d = k.defs.get(name)
    if d is None:
        return None
    if d[0] == "arg":
        a = k.arg_by_ir.get(k.func.args[d[1]][0])
        return a.value if a is not None and isinstance(a.value, int) and not isinstance(a.value, bool) else None
    if d[0] == "block":
        return None
    op = d[0]
    n = op.name
    if n == "arith.constant":
        m = re.match(r"^\s*(-?\d+)\s*$", op.text)
        return int(m.group(1)) if m else None
    if n == "tt.get_program_id":
        return env.get("pid", 0) if "x" in op.text else 0
    vals = [_int_value(k, o, env, depth + 1) for o in op.operands]
    if n in ("arith.extsi", "arith.extui", "arith.trunci", "arith.index_cast") and vals:
        return vals[0]
    if None in vals or not vals:
        return None
    a = vals[0]
    b = vals[1] if len(vals) > 1 else None
    try:
        return {"arith.addi": lambda: a + b, "arith.subi": lambda: a - b, "arith.muli": lambda: a * b,
                "arith.divsi": lambda: int(a / b), "arith.divui": lambda: a // b,
                "arith.ceildivsi": lambda: -(-a // b), "arith.minsi": lambda: min(a, b),
                "arith.maxsi": lambda: max(a, b), "arith.remsi": lambda: a % b}[n]()
    except (KeyError, ZeroDivisionError, TypeError):
        return None


def _from_exp(k: KernelIR, name) -> object | None:
    """The math.exp / math.exp2 a factor is computed by, through layout operations."""
    op = _through(k, name)
    return op if op is not None and op.name in ("math.exp", "math.exp2") else None


def online_rescale(k: KernelIR, acc_op, loop, index: int, rounded: bool = True) -> dict | None:
    """An online softmax's accumulation (flash attention's ``acc = acc * alpha + dot(p, v)``,
    alpha = exp2(m_old - m_new)): the loop-carried value ``acc_op`` accumulates is multiplied
    in the loop by a factor an exp or exp2 computes, and the terms it adds were rounded to a
    format narrower than fp32 in the loop (p cast to fp16 for the dot).  Each step's terms are
    then rounded at the running scale, which the rescale changes later: a reference computing
    one exp at the final maximum rounds other values.  Returns the operations {"rescale",
    "exp", "rounding", "fmt"}, or None.  ``rounded=False``: any such rescale (the running sum's
    too), with "rounding" and "fmt" None where the terms are not rounded narrow."""
    carried = loop.block_args[0][1 + index][0] if len(loop.block_args[0]) > 1 + index else None
    if carried is None:
        return None
    if acc_op.name == "tt.dot":
        if len(acc_op.operands) < 3:
            return None
        acc, terms = acc_op.operands[2], acc_op.operands[:2]
    elif acc_op.name == "arith.addf":
        own = [o for o in acc_op.operands if _derives(k, o, carried)]
        if not own:
            return None
        acc, terms = own[0], [o for o in acc_op.operands if o != own[0]]
    else:
        return None
    mul = _through(k, acc)
    if mul is None or mul.name != "arith.mulf":
        return None
    factors = [o for o in mul.operands if not _derives(k, o, carried)]
    exp = next((e for e in (_from_exp(k, f) for f in factors) if e is not None), None)
    if exp is None:
        return None
    for t in terms:
        r = _through(k, t, ("arith.extf",))
        if r is not None and r.name == "arith.truncf" and r.results and is_low(k.fmt_of(r.results[0])):
            return {"rescale": mul, "exp": exp, "rounding": r, "fmt": k.fmt_of(r.results[0])}
    return None if rounded else {"rescale": mul, "exp": exp, "rounding": None, "fmt": None}


def _dot_acc_from(k: KernelIR, op):
    """Where a ``tt.dot``'s accumulator input comes from, when it is data: the position of the
    load it derives from (Triton folds ``tl.dot(a, b) + bias`` into ``tl.dot(a, b, bias)`` where
    nothing else comes between, as with one K step), else None (a zero, a loop-carried
    accumulator, a value the reader does not follow)."""
    if len(op.operands) < 3:
        return None
    src = _through(k, op.operands[2], ("arith.extf",))
    if src is None or src.name != "tt.load":
        return None
    return k.where(src).short()
