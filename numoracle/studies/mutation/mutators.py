"""AST mutation operators over the ``@triton.jit`` functions of a kernel module
(docs/operators.md "Mutation operators").  Each mutant changes one site.

A *site* is a node of the module's AST (numbered in ``ast.walk`` order) inside a
``@triton.jit`` function, or a module-level ``NAME = tl.constexpr(<number>)``
constant; a mutation operator looks at a node and proposes replacements for it.
Mutated modules are produced with ``ast.unparse``.
"""

from __future__ import annotations

import ast
import copy
import re
from dataclasses import dataclass

# Name patterns of index/shape arithmetic, where a rounding mutant is meaningless (it would
# turn a pointer offset into a float and fail to compile).
_INDEX_NAME = re.compile(r"(^|_)(row|rows|col|cols|off|offs|offset_|start|end|pid|idx|index|n|n_\w*|"
                         r"block|mask|stride\w*|num\w*|i|j|k|m_off|lane|ptr|\w*_ptr|program\w*)($|_)",
                         re.I)
_FP8_MAXES = {448.0: 240.0, 240.0: 448.0, 224.0: 448.0, 57344.0: 448.0, 6.0: 4.0}
_FORM_STRINGS = {"erf", "tanh", "exact", "approx", "none"}


@dataclass(frozen=True)
class Site:
    kind: str            # mutation operator name
    node: int            # index of the node in ast.walk order
    func: str            # enclosing @triton.jit function ("<module>" for module constants)
    line: int
    detail: str          # human description: "x.to(tl.float32) -> x"
    choice: int = 0      # which replacement of the operator at this node


def _is_jit(dec) -> bool:
    if isinstance(dec, ast.Call):
        dec = dec.func
    if isinstance(dec, ast.Attribute):
        return dec.attr == "jit"
    return isinstance(dec, ast.Name) and dec.id == "jit"


def jit_functions(tree) -> list:
    return [n for n in tree.body if isinstance(n, ast.FunctionDef) and any(_is_jit(d) for d in n.decorator_list)]


def _src(node) -> str:
    try:
        s = ast.unparse(node)
    except Exception:  # pragma: no cover
        s = type(node).__name__
    return s if len(s) <= 70 else s[:67] + "..."


def _call_name(node) -> str:
    """'tl.sum' / 'tl.math.erf' / 'libdevice.tanh' / 'foo' for a Call's function."""
    f = node.func
    parts = []
    while isinstance(f, ast.Attribute):
        parts.append(f.attr)
        f = f.value
    if isinstance(f, ast.Name):
        parts.append(f.id)
    return ".".join(reversed(parts))


def _tail(node) -> str:
    return _call_name(node).rsplit(".", 1)[-1] if isinstance(node, ast.Call) else ""


def _is_fp32(node) -> bool:
    return isinstance(node, ast.Attribute) and node.attr == "float32"


def _is_int_type(node) -> bool:
    return isinstance(node, ast.Attribute) and re.fullmatch(r"u?int\d+|int1", node.attr) is not None


def _names(node) -> set:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}


def _is_caps(name: str) -> bool:
    return name.isupper() and len(name) > 1


def _is_index_expr(node) -> bool:
    return any(_INDEX_NAME.search(n) for n in _names(node))


def _num(node):
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        v = _num(node.operand)
        return None if v is None else -v
    return None


def _const(v):
    return ast.Constant(v) if v >= 0 else ast.UnaryOp(ast.USub(), ast.Constant(-v))


def _few_digits(v: float) -> float:
    return float(f"{v:.3g}")


def _to(node, dtype_expr, **kw):
    return ast.Call(ast.Attribute(copy.deepcopy(node), "to", ast.Load()), [dtype_expr],
                    [ast.keyword(k, v) for k, v in kw.items()])


def _plain_cast(node) -> bool:
    """``v.to(T)`` with T a float type of ``tl`` or a pointer's element type, and no rounding
    mode: a conversion whose rounding a store mutant can change itself."""
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "to"
            and len(node.args) == 1 and not node.keywords):
        return False
    t = node.args[0]
    return (isinstance(t, ast.Attribute) and not _is_int_type(t)
            and (t.attr in ("element_ty", "dtype") or re.fullmatch(r"float\d+|bfloat16|float8\w+", t.attr) is not None))


def _tl(attr):
    return ast.Attribute(ast.Name("tl", ast.Load()), attr, ast.Load())


class Context:
    """What an operator may ask about a node: its enclosing function, the storage format
    expression for that function, whether it lies in pointer/index arithmetic."""

    def __init__(self, func, parents):
        self.func = func
        self.parents = parents
        ptrs = [a.arg for a in func.args.args if a.arg.endswith("_ptr")] if func is not None else []
        self.ptr = ptrs[0] if ptrs else None
        # integers by construction: loop counters of range / tl.range / tl.static_range
        self.counters = {n.target.id for n in ast.walk(func) if isinstance(n, ast.For)
                         and isinstance(n.target, ast.Name) and isinstance(n.iter, ast.Call)
                         and _tail(n.iter) in ("range", "static_range")} if func is not None else set()

    def integer_expr(self, node) -> bool:
        """Whether node computes an index: it holds a loop counter or a ``tl.arange``."""
        return bool(_names(node) & self.counters) or any(
            isinstance(n, ast.Call) and _tail(n) == "arange" for n in ast.walk(node))

    def storage(self):
        """The storage format: the first pointer argument's element type, else bf16."""
        if self.ptr is None:
            return _tl("bfloat16")
        return ast.Attribute(ast.Attribute(ast.Name(self.ptr, ast.Load()), "dtype", ast.Load()),
                             "element_ty", ast.Load())

    def ancestors(self, node):
        p = self.parents.get(node)
        while p is not None:
            yield p
            p = self.parents.get(p)

    def in_pointer_math(self, node) -> bool:
        """Whether node is (part of) an address, index, mask or control-flow test."""
        child = node
        for a in self.ancestors(node):
            if isinstance(a, ast.Call) and _tail(a) in ("load", "store", "arange", "range", "program_id",
                                                        "static_range", "multiple_of", "max_contiguous"):
                args = a.args[:1] if _tail(a) in ("load", "store") else a.args
                if any(child is x for x in args):
                    return True
                if any(k.arg == "mask" and child is k for k in a.keywords):
                    return True
            if isinstance(a, ast.Assign) and any(isinstance(t, ast.Name) and _INDEX_NAME.search(t.id)
                                                 for t in a.targets):
                return True
            if isinstance(a, ast.Compare):
                return True
            if isinstance(a, ast.Subscript) and child is a.slice:
                return True
            if isinstance(a, (ast.If, ast.While)) and child is a.test:
                return True
            if isinstance(a, ast.FunctionDef):
                return False
            child = a
        return False

    def inside_call(self, node, tails) -> bool:
        return any(isinstance(a, ast.Call) and _tail(a) in tails for a in self.ancestors(node))


# ---- the operators: each yields (detail, replacement node) for a node ------------------

def m_widening_dropped(node, ctx):
    """x.to(tl.float32) -> x"""
    if isinstance(node, ast.Call) and _tail(node) == "to" and node.args and _is_fp32(node.args[0]) \
            and isinstance(node.func, ast.Attribute):
        yield f"{_src(node)} -> {_src(node.func.value)}", copy.deepcopy(node.func.value)


def m_later_downcast(node, ctx):
    """v.to(fmt) -> v for a narrowing cast to a float storage format: the rounding moves to the store."""
    if isinstance(node, ast.Call) and _tail(node) == "to" and node.args and isinstance(node.func, ast.Attribute) \
            and not _is_fp32(node.args[0]) and not _is_int_type(node.args[0]) \
            and not any(k.arg == "bitcast" for k in node.keywords) and not ctx.in_pointer_math(node):
        yield f"{_src(node)} -> {_src(node.func.value)}", copy.deepcopy(node.func.value)


def m_earlier_downcast(node, ctx):
    """a OP b -> a.to(storage) OP b: an operand rounded to the storage format before the operation."""
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Sub, ast.Mult, ast.Add, ast.Div)) \
            and _num(node.left) is None and _num(node.right) is None \
            and not ctx.in_pointer_math(node) and not _is_index_expr(node) and not ctx.integer_expr(node) \
            and not any(_is_caps(n) for n in _names(node.left)):
        new = copy.deepcopy(node)
        new.left = _to(node.left, ctx.storage())
        yield f"{_src(node)}: round {_src(node.left)} to storage first", new


def m_reduction_in_storage(node, ctx):
    """tl.sum(v) -> tl.sum(v.to(storage)).to(tl.float32): the reduction runs in the storage format."""
    if isinstance(node, ast.Call) and _tail(node) in ("sum", "cumsum") and _call_name(node).startswith("tl") \
            and node.args:
        new = copy.deepcopy(node)
        new.args[0] = _to(node.args[0], ctx.storage())
        yield f"{_src(node)} in the storage format", _to(new, _tl("float32"))


def m_truncating_store(node, ctx):
    """tl.store(p, v) -> tl.store(p, v.to(p's element type, fp_downcast_rounding='rtz'))"""
    if isinstance(node, ast.Call) and _tail(node) == "store" and len(node.args) >= 2 \
            and _num(node.args[1]) is None:
        p = node.args[0]
        ety = ast.Attribute(ast.Attribute(copy.deepcopy(p), "dtype", ast.Load()), "element_ty", ast.Load())
        new = copy.deepcopy(node)
        v = node.args[1]
        if _plain_cast(v):
            # the value is already rounded to the stored type (``v.to(T)``): wrapping it in a
            # second cast would convert T to T, an equivalent mutant, so that cast truncates
            new.args[1] = _to(v.func.value, copy.deepcopy(v.args[0]), fp_downcast_rounding=ast.Constant("rtz"))
        else:
            new.args[1] = _to(v, ety, fp_downcast_rounding=ast.Constant("rtz"))
        yield f"store of {_src(node.args[1])} truncates (rtz)", new


def m_double_rounding(node, ctx):
    """tl.store(p, v) -> tl.store(p, v.to(tl.float16)): fp32 -> fp16 -> storage format."""
    if isinstance(node, ast.Call) and _tail(node) == "store" and len(node.args) >= 2 \
            and _num(node.args[1]) is None:
        new = copy.deepcopy(node)
        v = node.args[1]
        # v.to(T): through fp16 before that cast (after it, fp16 would hold T's value exactly)
        new.args[1] = _to(_to(v.func.value, _tl("float16")), copy.deepcopy(v.args[0])) if _plain_cast(v) \
            else _to(v, _tl("float16"))
        yield f"store of {_src(node.args[1])} rounded through fp16 first", new


def m_addend_dropped(node, ctx):
    """x + EPS -> x, (OFFSET + w) -> w: drop an eps or offset."""
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Sub)):
        for side, other in (("right", node.left), ("left", node.right)):
            term = getattr(node, side)
            if isinstance(term, ast.Name) and (_is_caps(term.id) or "eps" in term.id.lower()) \
                    and not ctx.in_pointer_math(node) and not re.search(r"BLOCK|ROWS|N_|SIZE", term.id):
                yield f"{_src(node)} -> {_src(other)} (drop {term.id})", copy.deepcopy(other)


def m_eps_scaled(node, ctx):
    """EPS -> EPS * 100 (a wrong eps)"""
    if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and re.search(r"eps", node.id, re.I) \
            and not ctx.in_pointer_math(node) and not isinstance(ctx.parents.get(node), ast.keyword):
        yield f"{node.id} -> {node.id} * 100", ast.BinOp(ast.Name(node.id, ast.Load()), ast.Mult(), ast.Constant(100.0))


def m_divisor_changed(node, ctx):
    """a / n -> a / (n - 1), and a / n -> a (divisor dropped)"""
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div) and _num(node.right) is None \
            and not ctx.in_pointer_math(node):
        new = copy.deepcopy(node)
        new.right = ast.BinOp(copy.deepcopy(node.right), ast.Sub(), ast.Constant(1))
        yield f"{_src(node)} -> divide by {_src(node.right)} - 1", new
        yield f"{_src(node)} -> {_src(node.left)} (divisor dropped)", copy.deepcopy(node.left)


def m_constant(node, ctx):
    """a float constant with too few digits (3 significant), or 1% off; fp8 max changed"""
    v = _num(node)
    if v is None or not isinstance(node, ast.Constant) or not isinstance(v, float):
        return
    par = ctx.parents.get(node)
    if isinstance(par, ast.keyword) or isinstance(par, ast.UnaryOp):
        return
    if abs(v) in _FP8_MAXES:
        yield f"fp8 max {v} -> {_FP8_MAXES[abs(v)]}", ast.Constant(_FP8_MAXES[abs(v)])
        return
    if v in (0.0,) or v != v or v in (float("inf"), float("-inf")):
        return
    few = _few_digits(v)
    if few != v:
        yield f"constant {v!r} -> {few!r} (too few digits)", ast.Constant(few)
    yield f"constant {v!r} -> {v * 1.01!r} (1% off)", ast.Constant(v * 1.01)


def m_load_other(node, ctx):
    """tl.load(..., other=-inf) -> other=0.0 (and 0.0 -> 1.0): the padding value of a masked load"""
    if isinstance(node, ast.Call) and _tail(node) == "load":
        for i, k in enumerate(node.keywords):
            if k.arg == "other":
                s = _src(k.value)
                rep = "0.0" if "inf" in s else "1.0"
                new = copy.deepcopy(node)
                new.keywords[i].value = ast.parse(rep, mode="eval").body
                yield f"load padding other={s} -> {rep}", new


def m_mask_off_by_one(node, ctx):
    """cols < n -> cols <= n (and <= -> <)"""
    if isinstance(node, ast.Compare) and len(node.ops) == 1 and isinstance(node.ops[0], (ast.Lt, ast.LtE)):
        new = copy.deepcopy(node)
        new.ops = [ast.LtE() if isinstance(node.ops[0], ast.Lt) else ast.Lt()]
        yield f"{_src(node)} -> {_src(new)}", new


def m_mask_removed(node, ctx):
    """tl.where(mask, a, b) -> a: the mask of a reduction removed"""
    if isinstance(node, ast.Call) and _tail(node) == "where" and len(node.args) == 3 \
            and any("mask" in n.lower() for n in _names(node.args[0])):
        yield f"{_src(node)} -> {_src(node.args[1])}", copy.deepcopy(node.args[1])


def m_gelu_form_swapped(node, ctx):
    """FORM == "erf" -> FORM != "erf": erf <-> tanh GELU; tl.math.erf(z) -> libdevice.tanh(z)"""
    if isinstance(node, ast.Compare) and len(node.ops) == 1 and isinstance(node.ops[0], (ast.Eq, ast.NotEq)):
        c = node.comparators[0]
        if isinstance(c, ast.Constant) and c.value in ("erf",):
            new = copy.deepcopy(node)
            new.ops = [ast.NotEq() if isinstance(node.ops[0], ast.Eq) else ast.Eq()]
            yield f"{_src(node)} -> {_src(new)} (erf <-> tanh)", new


def m_special_function_swapped(node, ctx):
    """erf(z) -> tanh(z) (as 2·sigmoid(2z) − 1) and libdevice tanh(z) -> tl.math.erf(z):
    the GELU's special function swapped (erf <-> tanh forms)"""
    if isinstance(node, ast.Call) and len(node.args) == 1 and not node.keywords:
        tail = _tail(node)
        z = node.args[0]
        if tail == "erf":
            two_z = ast.BinOp(ast.Constant(2.0), ast.Mult(), copy.deepcopy(z))
            sig = ast.Call(_tl("sigmoid"), [two_z], [])
            new = ast.BinOp(ast.BinOp(ast.Constant(2.0), ast.Mult(), sig), ast.Sub(), ast.Constant(1.0))
            yield f"{_src(node)} -> tanh({_src(z)})", new
        elif tail in ("tanh", "tanh_libdevice"):
            new = ast.Call(ast.Attribute(_tl("math"), "erf", ast.Load()), [copy.deepcopy(z)], [])
            yield f"{_src(node)} -> erf({_src(z)})", new


def m_fp8_max_changed(node, ctx):
    """FP8_MAX -> FP8_MAX * 0.5 (a wrong fp8 max / clamp bound passed as a constexpr)"""
    if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and re.search(r"F(P8)?_?MAX", node.id) \
            and not isinstance(ctx.parents.get(node), ast.keyword) and not ctx.in_pointer_math(node):
        yield f"{node.id} -> {node.id} * 0.5", ast.BinOp(ast.Name(node.id, ast.Load()), ast.Mult(), ast.Constant(0.5))


def m_clamp_removed(node, ctx):
    """tl.maximum(x, EPS) -> x: an eps clamp or scale floor removed"""
    if isinstance(node, ast.Call) and _tail(node) in ("maximum", "minimum") and len(node.args) == 2:
        for keep, drop in ((0, 1), (1, 0)):
            d = node.args[drop]
            if _num(d) is not None or (isinstance(d, ast.Name) and _is_caps(d.id)):
                yield f"{_src(node)} -> {_src(node.args[keep])} (clamp removed)", copy.deepcopy(node.args[keep])


def m_scale_floor_changed(node, ctx):
    """a tiny floor constant (< 1e-3) -> 1e-4 × itself... no: -> 1e3 × itself"""
    v = _num(node)
    if isinstance(node, ast.Constant) and isinstance(v, float) and 0 < v < 1e-3 \
            and ctx.inside_call(node, ("maximum", "clamp")):
        yield f"floor {v!r} -> {v * 1e3!r}", ast.Constant(v * 1e3)


def m_rounding_rule(node, ctx):
    """ceil -> floor, floor -> ceil (UE8M0 scale rounding)"""
    if isinstance(node, ast.Call) and _tail(node) in ("ceil", "floor") and isinstance(node.func, ast.Attribute):
        new = copy.deepcopy(node)
        new.func.attr = "floor" if _tail(node) == "ceil" else "ceil"
        yield f"{_src(node)} -> {new.func.attr}", new


def m_exp_to_exp2(node, ctx):
    """tl.exp(x) -> tl.exp2(x) (no log2 e); tl.exp2(x * LOG2E) -> tl.exp2(x)"""
    if isinstance(node, ast.Call) and _tail(node) == "exp" and isinstance(node.func, ast.Attribute):
        new = copy.deepcopy(node)
        new.func.attr = "exp2"
        yield f"{_src(node)} -> exp2 without log2 e", new
    if isinstance(node, ast.Call) and _tail(node) == "exp2" and node.args and isinstance(node.args[0], ast.BinOp) \
            and isinstance(node.args[0].op, ast.Mult):
        a = node.args[0]
        for keep, drop in ((a.left, a.right), (a.right, a.left)):
            if (isinstance(drop, ast.Name) and "LOG2" in drop.id.upper()) or \
                    (_num(drop) is not None and abs(_num(drop) - 1.4426950408889634) < 1e-3):
                new = copy.deepcopy(node)
                new.args[0] = copy.deepcopy(keep)
                yield f"{_src(node)} -> log2 e factor dropped", new


def m_max_subtraction_dropped(node, ctx):
    """exp(x - m) -> exp(x): the softmax's max subtraction dropped"""
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Sub) and ctx.inside_call(node, ("exp", "exp2")) \
            and not ctx.in_pointer_math(node):
        yield f"{_src(node)} -> {_src(node.left)} (max subtraction dropped)", copy.deepcopy(node.left)


def m_scale_index(node, ctx):
    """tl.load(scale_ptr + off) -> row 0's scale (0 * off) or the next block's (off + 1)"""
    if isinstance(node, ast.Call) and _tail(node) == "load" and node.args and isinstance(node.args[0], ast.BinOp) \
            and isinstance(node.args[0].op, ast.Add):
        p = node.args[0]
        base = _names(p.left)
        if any(re.search(r"scale|(^|_)s_ptr|(^|_)as_|(^|_)bs_", n, re.I) for n in base):
            new = copy.deepcopy(node)
            new.args[0].right = ast.BinOp(ast.Constant(0), ast.Mult(), copy.deepcopy(p.right))
            yield f"{_src(node)} -> row 0's scale", new
            new = copy.deepcopy(node)
            new.args[0].right = ast.BinOp(copy.deepcopy(p.right), ast.Add(), ast.Constant(1))
            yield f"{_src(node)} -> the next scale block", new


def m_choice_flipped(node, ctx):
    """tl.argmax <-> tl.argmin; the tie rule flipped (tie_break_left=True: the first of equal
    values; False: Triton's fast tie break, which promises none of them)"""
    if not (isinstance(node, ast.Call) and _tail(node) in ("argmax", "argmin") and isinstance(node.func, ast.Attribute)):
        return
    other = "argmin" if node.func.attr == "argmax" else "argmax"
    new = copy.deepcopy(node)
    new.func.attr = other
    yield f"{_src(node)} -> {other}", new
    new = copy.deepcopy(node)
    given = next((k for k in new.keywords if k.arg == "tie_break_left"), None)
    if given is None:
        new.keywords.append(ast.keyword("tie_break_left", ast.Constant(False)))
        yield f"{_src(node)} -> any of equal values (tie_break_left=False)", new
    elif isinstance(given.value, ast.Constant) and isinstance(given.value.value, bool):
        given.value = ast.Constant(not given.value.value)
        yield f"{_src(node)} -> tie_break_left={not node.keywords[new.keywords.index(given)].value.value}", new


MUTATORS = {
    "widening_dropped": m_widening_dropped,
    "reduction_in_storage": m_reduction_in_storage,
    "earlier_downcast": m_earlier_downcast,
    "later_downcast": m_later_downcast,
    "truncating_store": m_truncating_store,
    "double_rounding": m_double_rounding,
    "addend_dropped": m_addend_dropped,
    "eps_changed": m_eps_scaled,
    "divisor_changed": m_divisor_changed,
    "constant_changed": m_constant,
    "load_padding_changed": m_load_other,
    "mask_off_by_one": m_mask_off_by_one,
    "mask_removed": m_mask_removed,
    "gelu_form_swapped": m_gelu_form_swapped,
    "special_function_swapped": m_special_function_swapped,
    "fp8_max_changed": m_fp8_max_changed,
    "clamp_removed": m_clamp_removed,
    "scale_floor_changed": m_scale_floor_changed,
    "rounding_rule_changed": m_rounding_rule,
    "exp_to_exp2": m_exp_to_exp2,
    "max_subtraction_dropped": m_max_subtraction_dropped,
    "scale_index_changed": m_scale_index,
    "choice_flipped": m_choice_flipped,
}


def _parents(tree) -> dict:
    par = {}
    for p in ast.walk(tree):
        for c in ast.iter_child_nodes(p):
            par[c] = p
    return par


def _module_constants(tree):
    """Module-level NAME = tl.constexpr(<number>) assignments, and fp8 maxima in module-level
    dicts (FP8_MAX = {"e4m3fn": 448.0}): (assign node, constant node)."""
    for st in tree.body:
        if isinstance(st, ast.Assign) and isinstance(st.value, ast.Dict):
            for v in st.value.values:
                if isinstance(v, ast.Constant) and isinstance(v.value, float) and abs(v.value) in _FP8_MAXES:
                    yield st, v
            continue
        if isinstance(st, ast.Assign) and isinstance(st.value, ast.Call) and _tail(st.value) == "constexpr" \
                and st.value.args and isinstance(st.value.args[0], ast.Constant) \
                and isinstance(st.value.args[0].value, float):
            yield st, st.value.args[0]


def enumerate_sites(source: str, functions=None, kinds=None) -> list:
    """Every (operator, node, choice) of the module's @triton.jit functions (only those named in
    ``functions`` when given) and of its module-level float constexprs."""
    tree = ast.parse(source)
    par = _parents(tree)
    index = {id(n): i for i, n in enumerate(ast.walk(tree))}
    kinds = list(MUTATORS) if kinds is None else list(kinds)
    sites = []
    for fn in jit_functions(tree):
        if functions is not None and fn.name not in functions:
            continue
        ctx = Context(fn, par)
        for node in ast.walk(fn):
            if node is fn or isinstance(node, ast.arguments) or node in fn.decorator_list:
                continue
            for kind in kinds:
                for choice, (detail, _) in enumerate(MUTATORS[kind](node, ctx)):
                    sites.append(Site(kind, index[id(node)], fn.name, getattr(node, "lineno", fn.lineno),
                                      detail, choice))
    if functions is None or "<module>" in functions:
        ctx = Context(None, par)
        for st, c in _module_constants(tree):
            for kind in ("constant_changed",):
                if kind not in kinds:
                    continue
                for choice, (detail, _) in enumerate(MUTATORS[kind](c, ctx)):
                    name = st.targets[0].id if isinstance(st.targets[0], ast.Name) else "?"
                    sites.append(Site(kind, index[id(c)], "<module>", st.lineno, f"{name}: {detail}", choice))
    return sites


def apply_site(source: str, site: Site) -> str:
    """The module source with ``site`` mutated."""
    tree = ast.parse(source)
    par = _parents(tree)
    nodes = list(ast.walk(tree))
    node = nodes[site.node]
    fn = None
    for p in [node] + list(Context(None, par).ancestors(node)):
        if isinstance(p, ast.FunctionDef):
            fn = p
            break
    ctx = Context(fn, par)
    reps = list(MUTATORS[site.kind](node, ctx))
    if site.choice >= len(reps):
        raise ValueError(f"site {site} no longer applies to this source")
    new = reps[site.choice][1]
    parent = par[node]
    for fname, value in ast.iter_fields(parent):
        if value is node:
            setattr(parent, fname, new)
            break
        if isinstance(value, list):
            for i, v in enumerate(value):
                if v is node:
                    value[i] = new
                    break
    ast.fix_missing_locations(tree)
    return ast.unparse(tree) + "\n"
