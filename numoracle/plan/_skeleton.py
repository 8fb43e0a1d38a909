"""A reference skeleton from a kernel's plan, and the check of its centre against the intended
math.

:func:`skeleton` writes a reference program in numoracle's language that follows the kernel's
compiled plan site by site: each load becomes the input it reads, each cast a ``.to``, each
operation the same operation in the same format, each reduction along the row a ``no.sum`` /
``no.max`` along the last axis, each math call the reference's call for it.  It reads row-wise
kernels: 1-D (or rows x columns) tiles along a row, reductions along the row, loops over chunks
of a row that add up a reduction, elementwise kernels over flattened tensors.  What it cannot
express it writes as a ``TODO`` for the user, who reads and owns the result.

A skeleton copies the kernel's *algorithm*, so its verdicts cannot catch a wrong constant or
divisor.  :func:`compare_centre` compares the skeleton's exact centre with a float64 function the
user names (the intended math): a float64 value outside the skeleton's region says the
algorithm, not its rounding, differs.
"""

from __future__ import annotations

import inspect
import keyword
import math
import re
from dataclasses import dataclass, field

import numpy as np

from ..errors import InvalidArgument
from . import kernel as K
from .extract import extract_plan

_MATH = {"math.exp": "no.exp", "math.exp2": "no.exp2", "math.log": "no.log", "math.log2": "no.log2",
         "math.rsqrt": "no.rsqrt", "math.sqrt": "no.sqrt", "tt.precise_sqrt": "no.sqrt_rn", "math.erf": "no.erf",
         "math.sin": "no.sin", "math.cos": "no.cos"}
_LIBDEVICE = {"tanh": "no.tanh", "erf": "no.erf", "exp": "no.exp", "log": "no.log", "rsqrt": "no.rsqrt",
              "sqrt": "no.sqrt", "sin": "no.sin", "cos": "no.cos"}
_BINARY = {"arith.addf": "+", "arith.subf": "-", "arith.mulf": "*", "arith.divf": "/"}
_FORMAT_NAMES = {"fp32": "fp32", "bf16": "bf16", "fp16": "fp16", "e4m3fn": "e4m3fn", "e5m2": "e5m2"}


@dataclass
class _Emitter:
    plan: object
    inputs: list                 # (name, tensor or value) of the launcher's inputs
    params: dict
    lines: list = field(default_factory=list)
    memo: dict = field(default_factory=dict)
    used: set = field(default_factory=set)
    todo: int = 0
    todos: list = field(default_factory=list)
    formats: set = field(default_factory=set)

    # ---- names
    def fresh(self, base: str | None) -> str:
        base = re.sub(r"\W", "_", base or "t") or "t"
        if base[0].isdigit() or keyword.iskeyword(base):
            base = "v_" + base
        name, k = base, 1
        while name in self.used:
            k += 1
            name = f"{base}_{k}"
        self.used.add(name)
        return name

    def storage_input(self, storage):
        from .capture import storage_of
        import torch
        for name, t in self.inputs:
            if isinstance(t, torch.Tensor) and storage_of(t) == storage:
                return name, t
        return None, None

    def fmt_expr(self, fmt: str) -> str:
        """A format as the program names it: an input's ``.format`` when an input has it."""
        import torch
        from .extract import _torch_fmt
        for name, t in self.inputs:
            if isinstance(t, torch.Tensor) and t.is_floating_point() and _torch_fmt(str(t.dtype).replace("torch.", "")) == fmt:
                return f"{name}.format"
        self.formats.add(fmt)
        return _FORMAT_NAMES.get(fmt, repr(fmt))

    def const_expr(self, v: float) -> str:
        for k, p in self.params.items():
            if isinstance(p, float) and p == p and np.float32(p) == np.float32(v):
                return k
        if math.isinf(v):
            return "float('inf')" if v > 0 else "-float('inf')"
        # the shortest decimal that rounds to the kernel's fp32 constant, as the calculus rounds
        # a Python constant to its operand's format
        return repr(float(str(np.float32(v)))) if np.float32(v) == v else repr(v)

    def emit(self, stmt_name: str | None, expr: str, comment: str | None) -> str:
        name = self.fresh(stmt_name)
        if comment:
            self.lines.append(f"    # {comment}")
        self.lines.append(f"    {name} = {expr}")
        return name

    def placeholder(self, what: str) -> str:
        self.todo += 1
        self.todos.append(what)
        return f"TODO_{self.todo}"


def _site_of(c, op):
    return c.by_ir().get(id(op))


def _comment(c, op) -> str | None:
    s = _site_of(c, op)
    if s is None:
        return None
    return f"{s.where.short()}: {s.text()}"


class _Launch:
    """Expressions of one launch's values."""

    def __init__(self, em: _Emitter, cones, launch):
        self.em = em
        self.cones = cones
        self.launch = launch
        self.c = cones.compiled(launch)
        self.k = self.c.ir
        self.args = cones.args[id(launch)]

    def value(self, name: str) -> str:
        key = (id(self.launch), name)
        if key in self.em.memo:
            return self.em.memo[key]
        out = self._value(name)
        self.em.memo[key] = out
        return out

    def _value(self, name: str) -> str:
        k, em = self.k, self.em
        d = k.defs.get(name)
        if d is None:
            return em.placeholder(f"unknown value {name}")
        if d[0] == "arg":
            a = self.args.get(k.func.args[d[1]][0])
            return self._scalar(a)
        if d[0] == "block":
            op = d[1]
            return em.placeholder(f"a value carried by {op.name} at {k.where(op).short()}")
        op, idx = d
        n = op.name
        ops = op.operands
        cm = _comment(self.c, op)
        named = k.where(op).name
        if n == "arith.constant":
            v = k.const(name)
            return em.const_expr(v) if v is not None else em.placeholder(f"constant {op.text}")
        if n in K._PASS:
            return self.value(ops[0])
        if n == "tt.load":
            return self._load(op)
        if n == "arith.extf" or (n == "tt.fp_to_fp" and K.subset(k.fmt_of(ops[0]), k.fmt_of(name))):
            return f"{self._wrap(self.value(ops[0]))}.to(fp32)" if k.fmt_of(name) == "fp32" else \
                f"{self._wrap(self.value(ops[0]))}.to({em.fmt_expr(k.fmt_of(name))})"
        if n in ("arith.truncf", "tt.fp_to_fp"):
            return em.emit(named, f"{self._wrap(self.value(ops[0]))}.to({em.fmt_expr(k.fmt_of(name))})", cm)
        if n in _BINARY:
            sig = self._sigmoid(op)
            if sig is not None:
                return em.emit(named, f"no.sigmoid({sig})", cm)
            ca, cb = k.const(ops[0]), k.const(ops[1])
            if (n == "arith.addf" and cb == 0.0) or (n == "arith.mulf" and cb == 1.0) or \
                    (n == "arith.subf" and cb == 0.0):
                return self.value(ops[0])        # x + 0, x * 1: no operation, no rounding
            if (n == "arith.addf" and ca == 0.0) or (n == "arith.mulf" and ca == 1.0):
                return self.value(ops[1])
            a, b = self.value(ops[0]), self.value(ops[1])
            return em.emit(named, f"{self._wrap(a)} {_BINARY[n]} {self._wrap(b)}", cm)
        if n in ("arith.sitofp", "arith.uitofp"):
            i = self._int(ops[0])
            return i if i.endswith("shape[-1]") else f"float({i})"
        if n == "arith.negf":
            return f"-{self._wrap(self.value(ops[0]))}"
        if n == "math.absf":
            return f"abs({self.value(ops[0])})"
        if n in ("arith.maxnumf", "arith.maximumf", "arith.minnumf", "arith.minimumf"):
            f = "no.maximum" if "max" in n else "no.minimum"
            return em.emit(named, f"{f}({self.value(ops[0])}, {self.value(ops[1])})", cm)
        if n == "arith.select":
            if self._is_index_mask(ops[0]):
                return self.value(ops[1])
            return em.emit(named, f"no.where({em.placeholder('the condition ' + ops[0])}, "
                                  f"{self.value(ops[1])}, {self.value(ops[2])})", cm)
        if n in _MATH:
            return em.emit(named, f"{_MATH[n]}({self.value(ops[0])})", cm)
        if n == "tt.extern_elementwise":
            s = _site_of(self.c, op)
            f = _LIBDEVICE.get(s.function if s else "")
            if f is None:
                return em.placeholder(f"libdevice call {op.text}")
            return em.emit(named, f"{f}({self.value(ops[0])})", cm)
        if n == "tt.precise_divf":
            return em.emit(named, f"no.div_rn({self.value(ops[0])}, {self.value(ops[1])})", cm)
        if n == "tt.reduce":
            return self._reduce(op, cm, named, idx)
        if n == "tt.scan":
            return self._scan(op, cm, named)
        if n == "scf.for":
            return self._loop_result(op, idx, cm, named)
        if n == "tt.dot":
            if len(ops) >= 3 and k.const(ops[2]) not in (0.0, None):
                return em.placeholder(f"a dot that starts from a nonzero accumulator at {k.where(op).short()}")
            if len(ops) >= 3 and k.const(ops[2]) is None:
                return em.placeholder(f"a dot added into an accumulator at {k.where(op).short()}")
            return self._dot(op, cm, named)
        return em.placeholder(f"{n} at {k.where(op).short()}")

    def _dot(self, op, cm, named) -> str:
        """``tl.dot`` over the whole K (the products' sum in any order): ``no.matmul``."""
        fmt = self.k.fmt_of(op.results[0]) if getattr(op, "results", None) else "fp32"
        acc = "fp32" if fmt in (None, "fp32") else self.em.fmt_expr(fmt)
        # fp32 operands read as TF32 (tl.dot's default): the reference says so, unless TF32 holds
        # their values (tiles widened from bf16), as the plan check decides; tf32x3, bf16x3 and
        # bf16x6 split every fp32 tile, whatever it holds
        from ..calculus.ops import SPLITS
        prec = (op.attr("inputPrecision") or "ieee").strip(",")
        read = not all(K.subset(f, "tf32") for f in K.dot_operand_formats(self.k, op))
        tiles = [self.k.fmt_of(v) for v in op.operands[:2]]
        says = (prec == "tf32" and read) or (prec in SPLITS and all(t == "fp32" for t in tiles))
        precision = f', input_precision="{prec}"' if says else ""
        return self.em.emit(named, f"no.matmul({self.value(op.operands[0])}, {self.value(op.operands[1])}, "
                                   f"acc={acc}{precision})", cm)

    # ---- pieces
    @staticmethod
    def _wrap(e: str) -> str:
        return e if re.fullmatch(r"-?[\w.]+(\[[^\]]*\]|\([\w.,\s=\-]*\))?", e) else f"({e})"

    def _scalar(self, a) -> str:
        if a is None:
            return self.em.placeholder("a kernel argument")
        v = a.value
        for k, p in self.em.params.items():
            if p == v and not isinstance(p, bool):
                return k
        return repr(v)

    def _int(self, name, depth: int = 0) -> str:
        """An integer the kernel computes from its arguments (a row length, n - 1, ...)."""
        import torch
        k = self.k
        d = k.defs.get(name)
        if d is None or depth > 20:
            return self.em.placeholder("an integer")
        if d[0] == "arg":
            a = self.args.get(k.func.args[d[1]][0])
            rows = [t for _, t in self.em.inputs if isinstance(t, torch.Tensor) and t.dim() >= 1]
            if a is not None and rows and a.value == rows[0].shape[-1] and \
                    not any(p == a.value for p in self.em.params.values() if not isinstance(p, bool)):
                return f"{self._row_input()}.shape[-1]"
            return self._scalar(a)
        if d[0] == "block":
            return self.em.placeholder("a loop index")
        op = d[0]
        if op.name == "arith.constant":
            m = re.match(r"^\s*(-?\d+)\s*$", op.text)
            return m.group(1) if m else self.em.placeholder(f"the constant {op.text}")
        if op.name in ("arith.extsi", "arith.extui", "arith.trunci", "arith.index_cast") or op.name in K._PASS:
            return self._int(op.operands[0], depth + 1)
        sym = {"arith.addi": "+", "arith.subi": "-", "arith.muli": "*", "arith.divsi": "//"}.get(op.name)
        if sym:
            return f"({self._int(op.operands[0], depth + 1)} {sym} {self._int(op.operands[1], depth + 1)})"
        return self.em.placeholder(f"the integer {op.name} at {k.where(op).short()}")

    def _row_input(self) -> str:
        import torch
        for name, t in self.em.inputs:
            if isinstance(t, torch.Tensor) and t.dim() >= 1 and t.is_floating_point():
                return name
        return self.em.inputs[0][0]

    def _is_index_mask(self, name) -> bool:
        """A condition computed from indices only (a padding mask), not from values."""
        seen, todo = set(), [name]
        while todo:
            v = todo.pop()
            if v in seen:
                continue
            seen.add(v)
            op = self.k.def_op(v)
            if op is None:
                continue
            if op.name == "arith.cmpf" or op.name == "tt.load":
                return False
            todo.extend(op.operands)
        return True

    def _sigmoid(self, op):
        """1 / (1 + exp(-x)) as Triton's tl.sigmoid writes it: the x."""
        if op.name != "arith.divf" or self.k.const(op.operands[0]) != 1.0:
            return None
        add = self.k.def_op(op.operands[1])
        if add is None or add.name != "arith.addf":
            return None
        for a, b in ((add.operands[0], add.operands[1]), (add.operands[1], add.operands[0])):
            e = self.k.def_op(b)
            if self.k.const(a) == 1.0 and e is not None and e.name == "math.exp":
                neg = self.k.def_op(e.operands[0])
                if neg is not None and neg.name == "arith.negf":
                    return self.value(neg.operands[0])
        return None

    def _load(self, op) -> str:
        import torch
        p = self.k.pointer_arg(op.operands[0])
        a = self.args.get(p) if p else None
        if a is None or a.storage is None:
            return self.em.placeholder(f"a load at {self.k.where(op).short()}")
        name, t = self.em.storage_input(a.storage)
        if name is None:
            w = self.cones.writer(a.storage, self.launch.seq)
            if w is not None and hasattr(w, "kernel"):
                stores = self.cones.stores[id(w)].get(a.storage, [])
                if len(stores) == 1:
                    return _stored_value(_Launch(self.em, self.cones, w), stores[0])
            return self.em.placeholder(f"the buffer {p} read at {self.k.where(op).short()}")
        ty = op.result_types[0] if op.result_types else None
        if ty is not None and not ty.shape and isinstance(t, torch.Tensor) and t.dim() == 1 and t.numel() > 1:
            return f"{name}.unsqueeze(-1)"       # one value per row, against the row's tile
        return name

    def _reduce(self, op, cm, named, idx: int = 0) -> str:
        comb, _ = K._combine(op)
        ty = op.operand_types[0] if op.operand_types else None
        axis = int(op.attr("axis") or 0)
        if ty is None or axis != len(ty.shape) - 1:
            return self.em.placeholder(f"a reduction along axis {axis} at {self.k.where(op).short()}")
        choice = _choice(op)
        if choice is not None:
            # tl.argmax / tl.argmin: (value, index) pairs combined by a comparison
            largest, first = choice
            x = self.value(op.operands[0])
            if idx == 0:
                return self.em.emit(named, f"{'no.max' if largest else 'no.min'}({x}, axis=-1, keepdims=True)", cm)
            ties = "" if first else ', ties="any"'
            return self.em.emit(named, f"{'no.argmax' if largest else 'no.argmin'}({x}, axis=-1, keepdims=True{ties})",
                                cm)
        f = {"arith.addf": "no.sum", "arith.maxnumf": "no.max", "arith.maximumf": "no.max",
             "arith.minnumf": "no.min", "arith.minimumf": "no.min"}.get(comb)
        if f is None:
            return self.em.placeholder(f"a reduction by {comb} at {self.k.where(op).short()}")
        return self.em.emit(named, f"{f}({self.value(op.operands[0])}, axis=-1, keepdims=True)", cm)

    def _scan(self, op, cm, named) -> str:
        """``tl.cumsum`` along the last axis: ``no.cumsum``."""
        comb, _ = K._combine(op)
        ty = op.operand_types[0] if op.operand_types else None
        axis = int(op.attr("axis") or 0)
        if comb != "arith.addf" or ty is None or axis != len(ty.shape) - 1:
            return self.em.placeholder(f"a scan by {comb} along axis {axis} at {self.k.where(op).short()}")
        return self.em.emit(named, f"no.cumsum({self.value(op.operands[0])}, axis=-1)", cm)

    def _loop_result(self, op, idx, cm, named) -> str:
        """A loop over a row's chunks that adds up a reduction: the reduction over the row."""
        y = next((o for o in op.regions[0] if o.name == "scf.yield"), None) if op.regions else None
        if y is None or idx >= len(y.operands):
            return self.em.placeholder(f"the loop at {self.k.where(op).short()}")
        add = self.k.def_op(y.operands[idx])
        carried = op.block_args[0][idx + 1][0]
        init = op.operands[3 + idx] if 3 + idx < len(op.operands) else None
        if add is not None and add.name == "tt.dot" and len(add.operands) >= 3 and add.operands[2] == carried \
                and init is not None and self.k.const(init) == 0.0:
            # acc = tl.dot(a_tile, b_tile, acc) over the K loop from zero: one dot over the whole K
            return self._dot(add, _comment(self.c, add) or cm, named)
        if add is not None and add.name == "arith.addf" and init is not None and self.k.const(init) == 0.0:
            other = [o for o in add.operands if o != carried]
            red = self.k.def_op(other[0]) if len(other) == 1 else None
            if red is not None and red.name == "tt.reduce":
                return self.value(other[0])
        if add is not None and K.online_rescale(self.k, add, op, idx, rounded=False):
            return self.em.placeholder(f"the online softmax's loop-carried value at {self.k.where(op).short()} "
                                       f"(write the loop over the kernel's blocks: docs/tutorial.md, "
                                       f"\"Flash attention\")")
        return self.em.placeholder(f"the loop-carried value at {self.k.where(op).short()}")


def skeleton(op_or_reference, kernel, inputs, params=None, *, name: str | None = None, arch=None) -> str:
    """The source of a reference program that follows ``kernel``'s compiled plan on ``inputs``."""
    from . import _resolve
    from .cones import Cones
    ref, fn, kname = _resolve(op_or_reference, kernel)
    params = dict(params or {})
    kplan = extract_plan(fn, inputs, params, arch=arch)
    input_names = list(getattr(ref, "input_names", None) or _launcher_inputs(fn, len(inputs)))
    em = _Emitter(kplan, list(zip(input_names, inputs)), params)
    em.used.update(input_names)
    em.used.update(params)
    cones = Cones(kplan)
    results = []
    for i, (storage, dtype, shape) in enumerate(kplan.capture.outputs):
        w = cones.writer(storage, 10 ** 12) if storage is not None else None
        if w is None:
            results.append(em.placeholder(f"output {i}: not written by a kernel"))
            continue
        if not hasattr(w, "kernel"):
            results.append(em.placeholder(f"output {i}: a host step ({w.op}) on the kernels' outputs"))
            continue
        stores = cones.stores[id(w)].get(storage, [])
        if len(stores) != 1:
            results.append(em.placeholder(f"output {i}: {len(stores)} stores write it"))
            continue
        lau = _Launch(em, cones, w)
        e = _stored_value(lau, stores[0])
        val_ty = lau.k.type_of(stores[0].operands[1])
        if val_ty is not None and not val_ty.shape and len(shape) >= 1 and _rank_of_inputs(inputs) > len(shape):
            e = f"{_Launch._wrap(e)}.squeeze(-1)"
        results.append(e)
    # a name Python accepts (a lambda reference is named "<lambda>")
    fname = name or f"{re.sub(r'[^0-9A-Za-z_]', '', str(getattr(ref, 'name', '') or '')) or 'kernel'}_plan"
    sig = ", ".join(input_names) + (", *, " + ", ".join(f"{k}={v!r}" for k, v in params.items()) if params else "")
    fmts = sorted({"fp32"} | em.formats)
    head = [
        f'"""Reference skeleton for {getattr(ref, "name", "the kernel")}, written by numoracle plan --skeleton from',
        f"the compiled plan of {kname} ({kplan.target}, Triton {kplan.triton}).",
        "",
        "It follows the kernel site by site (each comment names the kernel line it comes from).",
        "Read it, rename what you like, simplify steps the kernel does exactly, and own it:",
        "its verdicts are as right as this plan is the one you mean." + (
            f"\n{em.todo} TODO(s) mark what the skeleton could not read:\n"
            + "\n".join(f"  TODO_{i}: {what}" for i, what in enumerate(em.todos, 1)) if em.todo else "") + '"""',
        "",
        "import numoracle as no",
        f"from numoracle.formats import {', '.join(fmts)}",
        "",
        "",
        _decorator(ref, len(results)),
        f"def {fname}({sig}):",
    ]
    body = em.lines + [f"    return {', '.join(results)}" if len(results) != 1 else f"    return {results[0]}"]
    return "\n".join(head + body) + "\n"


def _choice(op):
    """(largest, ties first) of a reduction of (value, index) pairs that keeps the larger
    (smaller) value and its index, as ``tl.argmax`` (``tl.argmin``) compiles; ties first where
    the combine also compares the indices (``tie_break_left=True``).  None for another
    reduction."""
    if len(op.operands) != 2 or not op.regions:
        return None
    body = op.regions[0]
    preds = [o.text.split(",", 1)[0].strip() for o in body if o.name == "arith.cmpf"]
    order = [p for p in preds if p not in ("oeq", "ueq")]
    if len(order) != 1 or order[0] not in ("ogt", "ugt", "oge", "uge", "olt", "ult", "ole", "ule"):
        return None
    if sum(o.name == "arith.select" for o in body) != 2:
        return None
    return order[0] in ("ogt", "ugt", "oge", "uge"), any(o.name == "arith.cmpi" for o in body)


def _stored_value(lau, store) -> str:
    """The value a store (or an atomic add) writes.  An fp32 atomic add flushes subnormal inputs
    and results to zero on NVIDIA GPUs: the sum or dot whose partial it adds says ``ftz=True``
    (docs/design.md §4.4)."""
    e = lau.value(store.operands[1])
    if store.name != "tt.atomic_rmw" or lau.k.fmt_of(store.operands[1]) != "fp32":
        return e
    em = lau.em
    for j in range(len(em.lines) - 1, -1, -1):
        line = em.lines[j]
        if line.startswith(f"    {e} = no.") and re.match(r"    \w+ = no\.(sum|matmul)\(.*\)$", line):
            em.lines[j] = line[:-1] + ", ftz=True)"
            em.lines.insert(j, f"    # {lau.k.where(store).short()}: atomic add in fp32, which flushes subnormals")
            break
    return e


def _decorator(ref, n: int) -> str:
    """``@no.reference``, naming the skeleton's n outputs as the operator's reference names them
    (the skeleton's own variables are the kernel's, ``rstd_3``)."""
    names = tuple(getattr(ref, "output_names", None) or ())
    if len(names) != n or names == ("y",):           # y: the name of one output anyway
        return "@no.reference"
    return f"@no.reference(outputs=({', '.join(map(repr, names))}{',' * (n == 1)}))"


def _rank_of_inputs(inputs) -> int:
    import torch
    return max((t.dim() for t in inputs if isinstance(t, torch.Tensor)), default=0)


def _launcher_inputs(fn, n: int) -> list:
    try:
        ps = [p.name for p in inspect.signature(fn).parameters.values()
              if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    except (TypeError, ValueError):
        ps = []
    return (ps + [f"x{i}" for i in range(len(ps), n)])[:n]


# --------------------------------------------------------------------------- centre vs intended

@dataclass
class CentreReport:
    """Per output (its index and the reference's name for it): elements whose intended float64
    value lies outside the skeleton's region."""
    outputs: list

    @property
    def ok(self) -> bool:
        return all(o["outside"] == 0 for o in self.outputs)

    def explain(self) -> str:
        lines = ["the intended function lies inside the skeleton's region everywhere" if self.ok else
                 "the intended function differs from the kernel's algorithm (beyond rounding):"]
        for o in self.outputs:
            if o["outside"]:
                lines.append(f"  output {o.get('name') or o['output']}: {o['outside']} of {o['elements']} elements "
                             f"outside, worst at "
                             f"{o['worst_index']}: intended {o['intended']:.9g}, centre {o['centre']:.9g}, "
                             f"radius {o['radius']:.3g}")
        return "\n".join(lines)


def compare_centre(reference, intended, inputs, params=None, *, profile="h200") -> CentreReport:
    """Compare a (skeleton) reference's exact centre with ``intended(*inputs_as_float64, **params)``:
    an intended value outside centre ± radius (the fixed-input enclosure of the output, every
    rounding of the program included) says the reference's algorithm is not the intended
    one."""
    import torch

    from ..mathlib import load
    from ..reference import reference as as_reference
    from .reference import run_reference_positions
    prog = as_reference(reference)
    params = dict(params or {})
    # casts do not settle here: the centre stays the exact-arithmetic value of the program's
    # algorithm, and the radius holds every rounding on the way to the output
    outs, _ = run_reference_positions(prog, list(inputs), params, load(profile) if isinstance(profile, str) else profile)
    want = intended(*[t.double() if isinstance(t, torch.Tensor) and t.is_floating_point() else t for t in inputs],
                    **params)
    want = list(want) if isinstance(want, (tuple, list)) else [want]
    if len(want) != len(outs):
        raise InvalidArgument(f"the intended function returns {len(want)} value(s), the reference {len(outs)}; "
                              f"return one float64 tensor per output, in the reference's order.")
    rows = []
    names = prog.names_of(len(outs))
    for i, (t, w) in enumerate(zip(outs, want)):
        c = t.c
        R = t.radius() if hasattr(t, "radius") else torch.zeros_like(c)
        w = torch.as_tensor(w, dtype=torch.float64).reshape(c.shape)
        gap = (w - c).abs() - R
        bad = gap > 0
        j = int(torch.argmax(gap.reshape(-1))) if gap.numel() else 0
        idx = tuple(int(x) for x in np.unravel_index(j, tuple(c.shape))) if c.dim() else ()
        rows.append({"output": i, "name": names[i], "elements": int(c.numel()), "outside": int(bad.sum()), "worst_index": idx,
                     "intended": float(w.reshape(-1)[j]) if w.numel() else 0.0,
                     "centre": float(c.reshape(-1)[j]) if c.numel() else 0.0,
                     "radius": float(R.reshape(-1)[j]) if R.numel() else 0.0})
    return CentreReport(rows)
