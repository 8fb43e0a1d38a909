"""A reader for the textual MLIR that Triton prints (TTIR, TTGIR).

Only what the plan needs: every operation with its results, operands, attributes, result
types, source location and nested regions; the location and layout aliases at the top of the
module.  Triton prints one operation per line, and an operation with regions opens a brace on
its line and closes it on a later one (where a generic-form operation such as ``"tt.reduce"``
also prints its type and location), so a line reader with a stack of open operations suffices.
Nothing here depends on Triton's Python API: the same text from Triton 3.6 or 3.9 parses.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

_NAME = re.compile(r"%[\w$.\-]+(?:#\d+)?")
_ALIAS = re.compile(r"^(#[\w$.\-]+)\s*=\s*(.*)$")
_RESULTS = re.compile(r"^((?:%[\w$.\-]+(?::\d+)?)(?:\s*,\s*%[\w$.\-]+(?::\d+)?)*)\s*=\s*(.*)$")
_FUNC = re.compile(r"^tt\.func\s+(?:(public|private)\s+)?@([\w$.\-]+)\s*\((.*)$")
_BLOCK = re.compile(r"^\^[\w]+(\((.*)\))?\s*:")


# --------------------------------------------------------------------------- small text helpers

def split_top(text: str, sep: str) -> list:
    """Split ``text`` at ``sep`` where no bracket or string is open."""
    out, depth, cur, i, quote = [], 0, [], 0, False
    n = len(sep)
    while i < len(text):
        ch = text[i]
        if ch == '"' and (i == 0 or text[i - 1] != "\\"):
            quote = not quote
        if not quote:
            if ch in "<([{":
                depth += 1
            elif ch in ">)]}" and not (ch == ">" and i > 0 and text[i - 1] == "-"):
                depth -= 1
            elif depth == 0 and text.startswith(sep, i):
                out.append("".join(cur))
                cur = []
                i += n
                continue
        cur.append(ch)
        i += 1
    out.append("".join(cur))
    return out


def strip_loc(text: str) -> tuple:
    """(text without its trailing ``loc(...)``, the loc's inside or None)."""
    t = text.rstrip()
    if not t.endswith(")"):
        return t, None
    depth, quote = 0, False
    for i in range(len(t) - 1, -1, -1):
        ch = t[i]
        if ch == '"':
            quote = not quote
        if quote:
            continue
        if ch == ")":
            depth += 1
        elif ch == "(":
            depth -= 1
            if depth == 0:
                if t[max(0, i - 3):i] == "loc" and (i - 3 == 0 or t[i - 4] in " \t,("):
                    return t[:i - 3].rstrip(), t[i + 1:-1]
                return t, None
    return t, None


# --------------------------------------------------------------------------- types

@dataclass(frozen=True)
class Type:
    text: str
    elem: str | None = None          # element type: f32, bf16, f8E4M3FN, i32, ... (pointee for pointers)
    shape: tuple = ()
    encoding: str | None = None      # TTGIR layout alias or inline attribute
    pointer: bool = False

    @property
    def numel(self) -> int:
        n = 1
        for s in self.shape:
            n *= s
        return n


def parse_type(text: str) -> Type:
    t = text.strip()
    m = re.match(r"^tensor<(.*)>$", t)
    if m:
        parts = split_top(m.group(1), ",")
        body = parts[0].strip()
        enc = parts[1].strip() if len(parts) > 1 else None
        dims = []
        rest = body
        while True:
            d = re.match(r"^(\d+)x(.*)$", rest)
            if not d:
                break
            dims.append(int(d.group(1)))
            rest = d.group(2)
        inner = parse_type(rest)
        return Type(t, inner.elem, tuple(dims), enc, inner.pointer)
    m = re.match(r"^!tt\.ptr<([^,>]+)", t)
    if m:
        return Type(t, parse_type(m.group(1)).elem, (), None, True)
    return Type(t, t or None)


def _types_of(sig: str) -> tuple:
    """(operand types, result types) from the text after an op's top-level ' : '."""
    sig = sig.strip()
    if not sig:
        return [], []
    to = split_top(sig, " to ")
    if len(to) == 2:
        return [parse_type(to[0])], [parse_type(to[1])]
    arrow = split_top(sig, "->")
    if len(arrow) >= 2:
        ins = arrow[0].strip()
        outs = arrow[-1].strip()
        if ins.startswith("(") and ins.endswith(")"):
            ins = ins[1:-1]
        if outs.startswith("(") and outs.endswith(")"):
            outs = outs[1:-1]
        ins_t = [parse_type(x) for p in split_top(ins, " * ") for x in split_top(p, ",") if x.strip()]
        return ins_t, [parse_type(x) for x in split_top(outs, ",") if x.strip()]
    ts = [parse_type(x) for x in split_top(sig, ",") if x.strip()]
    return ts, ts[-1:]


# --------------------------------------------------------------------------- operations

@dataclass(eq=False)
class Op:
    name: str
    results: list
    text: str                    # everything after the name, without types, loc and regions
    sig: str                     # the text after the top-level ' : '
    loc: str | None
    operands: list
    regions: list = field(default_factory=list)          # [[Op]] one op list per region
    block_args: list = field(default_factory=list)       # per region: [(name, Type)]
    parent: "Op | None" = None
    line: int = 0
    operand_types: list = field(default_factory=list)
    result_types: list = field(default_factory=list)
    defines: list = field(default_factory=list)          # induction variables / iter_args names (scf.for)

    def attr(self, key: str):
        """An attribute's raw value (``axis = 0 : i32`` -> "0"), or None."""
        m = re.search(rf"\b{re.escape(key)}\s*=\s*([^,}}\s]+)", self.text)
        return m.group(1) if m else None

    @property
    def result_type(self) -> Type | None:
        return self.result_types[0] if self.result_types else None

    def walk(self):
        yield self
        for r in self.regions:
            for op in r:
                yield from op.walk()

    def __repr__(self):
        return f"<{self.name} {', '.join(self.results)} @{self.line}>"


@dataclass
class Function:
    name: str
    args: list                   # [(name, Type)]
    ops: list                    # top-level ops in order (regions nested)
    loc: str | None = None

    def walk(self):
        for op in self.ops:
            yield from op.walk()


@dataclass
class Module:
    functions: dict
    aliases: dict                # "#loc12" -> 'loc("f.py":3:4)' ; "#blocked" -> '#ttg.blocked<...>'
    attributes: str = ""

    def function(self, name: str | None = None) -> Function:
        if name is None:
            pub = [f for f in self.functions.values() if getattr(f, "public", True)]
            return pub[0] if pub else next(iter(self.functions.values()))
        return self.functions[name]


def _result_names(spec: str) -> list:
    names = []
    for part in spec.split(","):
        part = part.strip()
        m = re.match(r"^(%[\w$.\-]+)(?::(\d+))?$", part)
        if not m:
            continue
        if m.group(2):
            names.extend(f"{m.group(1)}#{i}" for i in range(int(m.group(2))))
        else:
            names.append(m.group(1))
    return names


def _parse_args(text: str) -> list:
    out = []
    for part in split_top(text, ","):
        part, _ = strip_loc(part)
        m = re.match(r"^\s*(%[\w$.\-]+)\s*:\s*(.*)$", part)
        if m:
            ty = re.sub(r"\s*\{.*\}\s*$", "", m.group(2).strip())
            out.append((m.group(1), parse_type(ty)))
    return out


def _make_op(name: str, results: list, rest: str, loc, line: int) -> Op:
    body = split_top(rest, " : ")
    head = body[0]
    sig = " : ".join(body[1:]) if len(body) > 1 else ""
    defines = []
    operands_text = head
    if name == "scf.for":
        m = re.match(r"^\s*(%[\w$.\-]+)\s*=\s*(.*)$", head)
        if m:
            defines.append(m.group(1))
            operands_text = m.group(2)
        iters = re.search(r"iter_args\((.*)\)", operands_text)
        if iters:
            for p in split_top(iters.group(1), ","):
                mm = re.match(r"^\s*(%[\w$.\-]+)\s*=\s*(.*)$", p)
                if mm:
                    defines.append(mm.group(1))
            operands_text = re.sub(r"(%[\w$.\-]+)\s*=\s*", "", operands_text)
        if "->" in sig or sig.strip().startswith("("):
            pass
        # "-> (f32, f32)  : i32": the iter results' types precede the induction type
        m2 = re.search(r"->\s*\((.*?)\)\s*$", head) or re.search(r"->\s*([^\s:]+)\s*$", head)
        ins, outs = [], ([parse_type(x) for x in split_top(m2.group(1), ",")] if m2 else [])
        op = Op(name, results, head, sig, loc, _NAME.findall(operands_text), line=line, defines=defines)
        op.operand_types, op.result_types = ins, outs
        return op
    if name == "scf.while":
        m = re.match(r"^\s*\((.*?)\)\s*$", head)
        if m:
            parts = [re.match(r"^\s*(%[\w$.\-]+)\s*=\s*(.*)$", p) for p in split_top(m.group(1), ",")]
            defines = [p.group(1) for p in parts if p]
            operands_text = " ".join(p.group(2) for p in parts if p)
    ins, outs = _types_of(sig)
    if name == "scf.if":
        m2 = re.search(r"->\s*\((.*?)\)\s*$", head) or re.search(r"->\s*([^\s:]+)\s*$", head)
        outs = [parse_type(x) for x in split_top(m2.group(1), ",")] if m2 else []
    if name == "tt.load" and ins:
        p = ins[0]
        outs = [Type(p.text, p.elem, p.shape, p.encoding, False)]
    if name == "tt.addptr" and ins:
        # "tt.addptr %p, %off : !tt.ptr<f32>, i32": the result is the pointer (the first type),
        # not the offset (the last)
        outs = [ins[0]]
    if name in ("arith.cmpf", "arith.cmpi") and ins:
        outs = [Type(ins[0].text, "i1", ins[0].shape, ins[0].encoding)]
    op = Op(name, results, head, sig, loc, _NAME.findall(re.sub(r"\{[^{}]*\}", "", operands_text)),
            line=line, defines=defines)
    op.operand_types, op.result_types = ins, outs
    return op


class _Names:
    """Value names by scope.  MLIR's printer numbers each region's values afresh, so sibling
    regions (two ``scf.for`` bodies one after the other) may print the same name (``%x_20``) for
    different values; a name is visible in its region and the regions it encloses only.  Every
    definition gets a name unique in its function (a reused one gets ``@N`` before any ``#i``
    result index), and every use is resolved innermost scope first."""

    def __init__(self, args: list):
        self.scopes = [{n: n for n, _ in args}]
        self.taken = set(self.scopes[0])
        self.count = 0

    def push(self):
        self.scopes.append({})

    def pop(self):
        if len(self.scopes) > 1:
            self.scopes.pop()

    def use(self, name: str) -> str:
        for scope in reversed(self.scopes):
            if name in scope:
                return scope[name]
        return name

    def define(self, names: list) -> list:
        """Unique names for one operation's results (or one block's arguments) in the innermost
        scope; the results ``%s#0``, ``%s#1`` of one operation share their renamed base."""
        out, bases = [], {}
        for n in names:
            base, sep, idx = n.partition("#")
            if n in self.taken and base not in bases:
                self.count += 1
                bases[base] = f"{base}@{self.count}"
            u = bases.get(base, base) + sep + idx
            self.scopes[-1][n] = u
            self.taken.add(u)
            out.append(u)
        return out


def parse(text: str) -> Module:
    """Parse a printed TTIR / TTGIR module."""
    aliases, functions = {}, {}
    module_attrs = ""
    stack: list = []             # open region ops (or functions): [(Op | Function, region index)]
    func = None
    names = None
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("//"):
            continue
        m = _ALIAS.match(line)
        if m and not stack and func is None:
            aliases[m.group(1)] = m.group(2)
            continue
        if line.startswith("module"):
            module_attrs = line
            continue
        fm = _FUNC.match(line)
        if fm:
            body, loc = strip_loc(line.rsplit("{", 1)[0] if line.endswith("{") else line)
            args_text = fm.group(3)
            close = _close_paren(args_text)
            func = Function(fm.group(2), _parse_args(args_text[:close]), [])
            func.public = fm.group(1) != "private"
            functions[func.name] = func
            stack = []
            names = _Names(func.args)
            continue
        if func is None:
            continue
        if line.startswith("}"):
            # closes the innermost open region; "} else {" / "} do {" / "}, {" open the next one
            if not stack:
                rest, loc = strip_loc(line[1:])
                func.loc = loc
                func = None
                continue
            op, _ = stack[-1]
            tail = line[1:].lstrip()
            if tail.startswith(")"):
                tail = tail[1:]
            if tail.rstrip().endswith("{") and re.search(r"(else|do|,)\s*\{$", tail.strip()):
                op.regions.append([])
                op.block_args.append([])
                stack[-1] = (op, len(op.regions) - 1)
                names.pop()
                names.push()
                continue
            stack.pop()
            names.pop()
            rest, loc = strip_loc(tail)
            if loc is not None:
                op.loc = loc
            rest = rest.strip()
            if rest.startswith(":"):
                op.sig = rest[1:].strip()
                ins, outs = _types_of(op.sig)
                op.operand_types, op.result_types = ins, outs
            continue
        bm = _BLOCK.match(line)
        if bm:
            if stack and bm.group(2):
                op, r = stack[-1]
                bargs = _parse_args(bm.group(2))
                op.block_args[r].extend(zip(names.define([n for n, _ in bargs]), [t for _, t in bargs]))
            continue
        rm = _RESULTS.match(line)
        results, rest = ([], line) if not rm else (_result_names(rm.group(1)), rm.group(2))
        opens = rest.endswith("{")
        if opens:
            rest = rest[:-1].rstrip()
            if rest.endswith("("):
                rest = rest[:-1].rstrip()
        name_m = re.match(r'^"?([\w.]+)"?\s*(.*)$', rest)
        if not name_m:
            continue
        name, rest = name_m.group(1), name_m.group(2)
        body, loc = strip_loc(rest) if not opens else (rest, None)
        if name_m.group(0).startswith('"'):
            # generic form: "tt.reduce"(%x) <{axis = 0 : i32}> ({ ... }) : (types) -> type
            body = body.replace("(", " ", 1) if body.startswith("(") else body
        op = _make_op(name, results, body, loc, lineno)
        # uses in the enclosing scopes; results in the enclosing region; what the op's region
        # defines (an scf.for's induction variable and iter_args) in that region
        op.operands = [names.use(o) for o in op.operands]
        op.results = names.define(op.results)
        if stack:
            parent, r = stack[-1]
            op.parent = parent
            parent.regions[r].append(op)
        else:
            func.ops.append(op)
        if opens:
            op.regions.append([])
            op.block_args.append([])
            names.push()
            if op.defines:
                op.defines = names.define(op.defines)
                op.block_args[0].extend((n, None) for n in op.defines)
            stack.append((op, 0))
    return Module(functions, aliases, module_attrs)


def _close_paren(text: str) -> int:
    depth = 1
    quote = False
    for i, ch in enumerate(text):
        if ch == '"':
            quote = not quote
        if quote:
            continue
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
            if depth == 0:
                return i
    return len(text)


# --------------------------------------------------------------------------- locations

@dataclass(frozen=True)
class Frame:
    file: str
    line: int
    col: int
    name: str | None = None      # the variable a NameLoc names


def frames(loc: str | None, aliases: dict, _depth: int = 0) -> tuple:
    """The call chain of a location, innermost first: callsite(callee at caller) gives the
    callee's frames then the caller's; a name location its child's; a fused one its first."""
    if loc is None or _depth > 64:
        return ()
    s = loc.strip()
    if s.startswith("loc(") and s.endswith(")"):
        s = s[4:-1].strip()
    if s.startswith("#"):
        target = aliases.get(s)
        return frames(target, aliases, _depth + 1) if target else ()
    if s == "unknown":
        return ()
    m = re.match(r'^"((?:[^"\\]|\\.)*)":(\d+):(\d+)(?:\s+to\s+.*)?$', s)
    if m:
        return (Frame(m.group(1), int(m.group(2)), int(m.group(3))),)
    if s.startswith("callsite("):
        inner = s[len("callsite("):-1]
        parts = split_top(inner, " at ")
        if len(parts) == 2:
            return frames(parts[0], aliases, _depth + 1) + frames(parts[1], aliases, _depth + 1)
    m = re.match(r'^"((?:[^"\\]|\\.)*)"\((.*)\)$', s, re.S)
    if m:
        child = frames(m.group(2), aliases, _depth + 1)
        if child:
            first = child[0]
            return (Frame(first.file, first.line, first.col, m.group(1)),) + child[1:]
        return ()
    if s.startswith("fused"):
        m = re.search(r"\[(.*)\]", s)
        if m:
            for p in split_top(m.group(1), ","):
                f = frames(p, aliases, _depth + 1)
                if f:
                    return f
    return ()


def layout(encoding: str | None, aliases: dict) -> dict:
    """A blocked layout's fields ({"sizePerThread": [..], "threadsPerWarp": [..],
    "warpsPerCTA": [..], "order": [..]}) from a TTGIR encoding (an alias or inline); a slice
    layout gives its parent's with the sliced dimension noted; {} for others."""
    if encoding is None:
        return {}
    enc = encoding.strip()
    if enc.startswith("#") and not enc.startswith("#ttg"):
        enc = aliases.get(enc, enc)
    m = re.match(r"^#ttg\.slice<\{dim = (\d+), parent = (.*)\}>$", enc)
    if m:
        parent = layout(m.group(2), aliases)
        return dict(parent, sliced=int(m.group(1))) if parent else {}
    m = re.match(r"^#ttg\.blocked<\{(.*)\}>$", enc)
    if not m:
        kind = re.match(r"^#ttg\.(\w+)", enc)
        return {"kind": kind.group(1), "text": enc} if kind else {}
    out = {"kind": "blocked"}
    for key in ("sizePerThread", "threadsPerWarp", "warpsPerCTA", "order"):
        mm = re.search(rf"{key} = \[([\d,\s]*)\]", m.group(1))
        if mm:
            out[key] = [int(x) for x in mm.group(1).split(",") if x.strip()]
    return out
