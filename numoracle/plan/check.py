"""The plan check: a reference program's sites against a kernel's compiled plan, output by
output.

For each output, the kernel's part of the plan is the backward slice of that output through the
launches and host steps that made it (a store's value through the IR, a load back to the launch
or host step that last wrote its storage), and the reference's part is the set of sites whose
errors reach that output.  Both sides count sites once per place in the program text (a line run
in a loop, a helper inlined twice at one source position, a launch repeated per chunk from one
line of the launcher are one site each).  Then, per output:

* roundings to each format narrower than fp32 (casts, arithmetic in that format, the fp8 codes of
  a quantizer) must be as many in the kernel as in the reference, and round to nearest;
* reductions: the kernel's accumulation levels (a ``tt.reduce``, a loop-carried add, a host
  sum) chain into one reduction when one feeds the next; per format, the reference's sums must
  number at least the kernel's chains and at most its levels, and a reduction's order (its depth
  from the layout and loop) must be covered by the reference's order model;
* dots likewise, with their operand and accumulator formats and input precision;
* math functions must be the same functions with implementations the reference admits
  (``tl.exp`` and ``exp2(x·log2 e)`` are one instruction sequence on NVIDIA; rsqrt is not
  1/sqrt; an approximate sqrt is not ``sqrt_rn``);
* roundings to an integer written by hand (floor, ceil) must be the reference's.

A difference the reference's bound covers anyway (a correctly rounded function where the
reference assumes an approximate one, a tensor-core dot accumulating in fp32 with the
instruction's own rounding) is a note, not a disagreement.
"""

from __future__ import annotations

import os
from collections import Counter
from dataclasses import dataclass, field

from . import kernel as K
from .reference import ReferencePlan

ANY_DEPTH = None        # order "any": covers every order


@dataclass
class Disagreement:
    kind: str
    message: str
    kernel: list = field(default_factory=list)       # kernel positions ("file:line ...")
    reference: list = field(default_factory=list)    # reference positions
    outputs: list = field(default_factory=list)
    severity: str = "disagreement"                   # or "note"

    def key(self) -> tuple:
        return (self.kind, self.message, tuple(self.kernel), tuple(self.reference), self.severity)

    def to_dict(self) -> dict:
        return {"kind": self.kind, "severity": self.severity, "message": self.message, "kernel": self.kernel,
                "reference": self.reference, "outputs": self.outputs}


@dataclass
class PlanReport:
    """The result of one plan check (``numoracle.plan.check_plan``)."""
    reference: str
    kernel: str
    disagreements: list
    notes: list
    kernel_plan: object
    reference_plan: ReferencePlan
    outputs: list = field(default_factory=list)      # per output: counts compared

    @property
    def ok(self) -> bool:
        return not self.disagreements

    def exit_code(self) -> int:
        return 0 if self.ok else 1

    def summary(self) -> str:
        if self.ok:
            return (f"plan check {self.kernel} vs {self.reference}: no disagreement"
                    + (f" ({len(self.notes)} note{'s' * (len(self.notes) != 1)})" if self.notes else ""))
        return (f"plan check {self.kernel} vs {self.reference}: {len(self.disagreements)} "
                f"disagreement{'s' * (len(self.disagreements) != 1)}")

    def assumption(self) -> str:
        """One line for a verdict's assumptions."""
        if self.ok:
            return f"precision plan checked against the compiled kernel ({self.kernel_plan.target}): no disagreement"
        return (f"precision plan checked against the compiled kernel ({self.kernel_plan.target}): "
                f"{len(self.disagreements)} disagreement(s), first: {self.disagreements[0].message}")

    def explain(self) -> str:
        lines = [self.summary()]
        for d in self.disagreements + self.notes:
            tag = "DISAGREE" if d.severity == "disagreement" else "note"
            outs = f" [output{'s' if len(d.outputs) > 1 else ''} {', '.join(map(str, d.outputs))}]" if d.outputs else ""
            lines.append(f"  {tag} {d.kind}{outs}: {d.message}")
            if d.kernel:
                lines.append(f"      kernel:    {'; '.join(d.kernel)}")
            if d.reference:
                lines.append(f"      reference: {'; '.join(d.reference)}")
        return "\n".join(lines)

    def to_dict(self) -> dict:
        return {"reference": self.reference, "kernel": self.kernel, "ok": self.ok,
                "disagreements": [d.to_dict() for d in self.disagreements],
                "notes": [d.to_dict() for d in self.notes], "outputs": self.outputs}


# --------------------------------------------------------------------------- kernel slices

@dataclass
class Level:
    """One accumulation level of the kernel: a reduce, a loop-carried add, a dot, an atomic or a
    host sum / GEMM."""
    kind: str            # sum | dot
    fmt: str | None
    site: K.Site
    key: tuple
    n: int | None = None
    depth: int | None = None     # roundings a term passes at this level (None: any order)
    detail: dict = field(default_factory=dict)


@dataclass(frozen=True)
class Cone:
    """The sites an output element's value passes: keys into ``_Cones.items``, and the links
    between accumulation levels (a reduce feeding a loop-carried add, a stored partial feeding a
    host sum)."""
    keys: frozenset = frozenset()
    links: frozenset = frozenset()

    def __or__(self, other: "Cone") -> "Cone":
        return Cone(self.keys | other.keys, self.links | other.links)


EMPTY = Cone()


class _Cones:
    """Backward cones of a capture's outputs through launches and host steps.

    A cone is the set of sites that one element of a value passes: the union over an
    operation's operands, but one branch of a select (an element takes one) and one of the
    stores that wrote a storage (an element was written by one); a load continues at the launch
    or host step that last wrote the storage before this launch."""

    def __init__(self, plan):
        self.plan = plan
        self.cap = plan.capture
        self.events = self.cap.events()
        self.index = {id(l): i for i, l in enumerate(self.cap.launches)}
        self.items: dict = {}        # key -> (stack, Site, Level | None)
        self.writes, self.stores, self.args = {}, {}, {}
        for e in self.events:
            if hasattr(e, "kernel"):
                c = self.compiled(e)
                runtime = [a for a in e.args if a.kind != "constexpr"]
                args = {n: a for (n, _), a in zip(c.ir.func.args, runtime)}
                self.args[id(e)] = args
                per = {}
                for op in c.ir.ops:
                    if op.name in ("tt.store", "tt.atomic_rmw") and op.operands:
                        argname = c.ir.pointer_arg(op.operands[0]) if op.name == "tt.store" else \
                            next((c.ir.pointer_arg(o) for o in op.operands if c.ir.pointer_arg(o)), None)
                        a = args.get(argname) if argname else None
                        if a is not None and a.storage is not None:
                            per.setdefault(a.storage, []).append(op)
                self.stores[id(e)] = per
                self.writes[id(e)] = set(per)
            else:
                self.writes[id(e)] = {e.output} if e.output is not None else set()
        self._memo: dict = {}
        self._busy: set = set()

    def compiled(self, launch):
        return self.plan.compiled[self.index[id(launch)]]

    def writer(self, storage, before: int):
        for e in reversed(self.events):
            if e.seq < before and storage in self.writes[id(e)]:
                return e
        return None

    def output(self, storage) -> list:
        """The cones of an output: one per store (or host step) that may have written an element."""
        w = self.writer(storage, 10 ** 12)
        if w is None:
            return []
        if not hasattr(w, "kernel"):
            return [self._host(w)]
        return [self._store(w, op) for op in self.stores[id(w)].get(storage, [])]

    def storage(self, storage, before: int) -> Cone:
        w = self.writer(storage, before)
        if w is None:
            return EMPTY
        if not hasattr(w, "kernel"):
            return self._host(w)
        return _heaviest([self._store(w, op) for op in self.stores[id(w)].get(storage, [])], self.items)

    # ---- host steps
    def _host(self, h) -> Cone:
        memo = ("host", id(h))
        if memo in self._memo:
            return self._memo[memo]
        site = self.plan.host_sites[self.cap.host_steps.index(h)]
        stack = ("host",) + tuple(h.stack)
        lvl = _host_level(site, h)
        key = (stack, site.where.file, site.where.line, site.where.col, "host", site.op)
        self.items[key] = (stack, site, lvl)
        cone = Cone(frozenset([key]))
        for s in h.inputs:
            up = self.storage(s, h.seq)
            cone = cone | up
            w = self.writer(s, h.seq)
            if lvl is not None and w is not None and hasattr(w, "kernel"):
                links = set()
                for op in self.stores[id(w)].get(s, []):
                    for k in self._stored_levels(w, op):
                        links.add((k, lvl.key))
                cone = cone | Cone(frozenset(), frozenset(links))
        self._memo[memo] = cone
        return cone

    # ---- launches
    def _store(self, launch, op) -> Cone:
        memo = ("store", id(launch), id(op))
        if memo in self._memo:
            return self._memo[memo]
        self._busy.add(memo)
        vals = op.operands[1:2] if op.name == "tt.store" else op.operands[1:]
        cone = self._site(launch, op)
        for v in vals:
            cone = cone | self._value(launch, v)
        cone = cone | self._links(launch, cone)
        self._busy.discard(memo)
        self._memo[memo] = cone
        return cone

    def _site(self, launch, op) -> Cone:
        c = self.compiled(launch)
        s = c.by_ir().get(id(op))
        if s is None and op not in c.loops:
            return EMPTY
        stack = ("launch",) + tuple(launch.stack)
        lvl = _level(c, op, s, stack)
        if s is None:
            s = lvl.site
        w = s.where
        key = (stack, w.file, w.line, w.col, w.chain, s.kind if lvl is None or s.kind != "arith" else "loop", s.op,
               s.ordinal)
        self.items[key] = (stack, s, lvl)
        return Cone(frozenset([key]))

    def _value(self, launch, name) -> Cone:
        memo = ("value", id(launch), name)
        if memo in self._memo:
            return self._memo[memo]
        if memo in self._busy:
            return EMPTY                 # a loop-carried value met again
        self._busy.add(memo)
        cone = self._value_uncached(launch, name)
        self._busy.discard(memo)
        self._memo[memo] = cone
        return cone

    def _value_uncached(self, launch, name) -> Cone:
        kir = self.compiled(launch).ir
        d = kir.defs.get(name)
        if d is None or d[0] == "arg":
            return EMPTY
        if d[0] == "block":
            op, ri, ai = d[1], d[2], d[3]
            if op.name == "scf.for":
                if ai == 0:
                    return EMPTY
                cone = EMPTY
                inits = op.operands[3:]
                if ai - 1 < len(inits):
                    cone = cone | self._value(launch, inits[ai - 1])
                y = _yield(op, 0)
                if y is not None and ai - 1 < len(y.operands):
                    cone = cone | self._value(launch, y.operands[ai - 1])
                return cone
            cone = EMPTY
            for o in op.operands:
                cone = cone | self._value(launch, o)
            return cone
        op, idx = d
        n = op.name
        own = self._site(launch, op)
        if n == "tt.load":
            cone = own
            p = kir.pointer_arg(op.operands[0]) if op.operands else None
            a = self.args[id(launch)].get(p) if p else None
            if a is not None and a.storage is not None:
                # what an earlier launch or host step left there, or what this launch stored
                # there itself before the load (a kernel that reads back its own output)
                own_stores = [self._store(launch, st) for st in self.stores[id(launch)].get(a.storage, [])
                              if st.line < op.line and ("store", id(launch), id(st)) not in self._busy]
                cone = cone | _heaviest(own_stores + [self.storage(a.storage, launch.seq)], self.items)
            for o in op.operands[2:3]:
                cone = cone | self._value(launch, o)
            return cone
        if n in ("arith.cmpf", "arith.cmpi"):
            return EMPTY
        if n == "arith.mulf" and any(self._known(launch, o) == 0.0 for o in op.operands):
            # an exact zero (a running sum's initial 0 rescaled in a loop that runs once): no
            # rounding reaches it
            return EMPTY
        if n == "arith.select":
            return own | _heaviest([self._value(launch, o) for o in op.operands[1:3]], self.items)
        if n == "scf.for":
            cone = own
            y = _yield(op, 0)
            if y is not None and idx < len(y.operands):
                cone = cone | self._value(launch, y.operands[idx])
            inits = op.operands[3:]
            if idx < len(inits):
                cone = cone | self._value(launch, inits[idx])
            return cone
        if n == "scf.if":
            branches = []
            for r in range(len(op.regions)):
                y = _yield(op, r)
                if y is not None and idx < len(y.operands):
                    branches.append(self._value(launch, y.operands[idx]))
            return own | _heaviest(branches, self.items)
        cone = own
        for o in op.operands:
            cone = cone | self._value(launch, o)
        if n in ("tt.reduce", "tt.scan"):
            for inner in op.regions[0] if op.regions else []:
                cone = cone | self._site(launch, inner)
        return cone

    def _known(self, launch, name, depth: int = 0):
        """The value of ``name`` if the IR fixes it: a constant, or a loop-carried value in a
        loop that runs at most once (its initial value)."""
        if depth > 20:
            return None
        kir = self.compiled(launch).ir
        d = kir.defs.get(name)
        if d is None or d[0] == "arg":
            return None
        if d[0] == "block":
            op, ri, ai = d[1], d[2], d[3]
            if op.name == "scf.for" and ai > 0:
                steps = K.trip_count(kir, op)
                inits = op.operands[3:]
                if steps is not None and steps <= 1 and ai - 1 < len(inits):
                    return self._known(launch, inits[ai - 1], depth + 1)
            return None
        op = d[0]
        if op.name == "arith.constant":
            return kir.const(name)
        if op.name in K._PASS and op.operands:
            return self._known(launch, op.operands[0], depth + 1)
        return None

    def _links(self, launch, cone: Cone) -> Cone:
        """Links between the levels of this launch in a cone."""
        c = self.compiled(launch)
        stack = ("launch",) + tuple(launch.stack)
        levels = {}
        for k in cone.keys:
            st, s, lvl = self.items[k]
            if lvl is not None and st == stack and s.ir is not None:
                levels[s.ir] = lvl
        links = {(a, b) for a, b in _launch_links(c.ir, levels)}
        return Cone(frozenset(), frozenset(links))

    def _stored_levels(self, launch, op) -> list:
        """Keys of the levels whose result one store writes elementwise."""
        cone = self._store(launch, op)
        c = self.compiled(launch)
        val = op.operands[1] if len(op.operands) > 1 else None
        out = []
        for k in cone.keys:
            st, s, lvl = self.items[k]
            if lvl is not None and s.ir is not None and s.ir in c.ir.ops and _flows(c.ir, val, s.ir):
                out.append(lvl.key)
        return out


def _weight(cone: Cone, items: dict) -> tuple:
    n = 0
    for k in cone.keys:
        _, s, lvl = items[k]
        if lvl is not None or (s.kind in ("cast", "arith") and s.rounds) or s.kind in ("math", "round-int"):
            n += 1
    return (n, len(cone.keys))


def _heaviest(cones: list, items: dict) -> Cone:
    return max(cones, key=lambda c: _weight(c, items)) if cones else EMPTY


def _level(c, op, s, stack) -> Level | None:
    """The accumulation level an operation is, if any."""
    kir = c.ir
    if s is not None and s.kind in ("reduce", "scan") and s.detail.get("sum"):
        lv = Level("sum", s.fmt, s, None, s.detail.get("n"), s.detail.get("depth"), {"order": s.detail.get("order")})
    elif s is not None and s.kind == "dot":
        loop = c.loops.get(op)
        steps = K.trip_count(kir, loop[0]) if loop else 1
        lv = Level("dot", s.fmt, s, None, (s.detail.get("k") or 0) * (steps or 1), None, dict(s.detail, steps=steps))
    elif s is not None and s.kind == "atomic":
        lv = Level("sum", s.fmt, s, None, None, None, {"atomic": True})
    elif op in c.loops and op.name != "tt.dot":
        loop, _ = c.loops[op]
        steps = K.trip_count(kir, loop)
        fmt = kir.fmt_of(op.results[0])
        site = s if s is not None else K.Site("loop", op.name, fmt, kir.where(op), ir=op)
        lv = Level("sum", fmt, site, None, steps, (steps - 1) if steps else None, {"steps": steps, "loop": True})
    else:
        return None
    w = lv.site.where
    lv.key = (stack, w.file, w.line, w.col, w.chain, "loop" if lv.detail.get("loop") else lv.site.kind, lv.site.op,
              lv.site.ordinal)
    return lv


def _atomic_ptr(op):
    ptrs = [o for o in op.operands]
    return ptrs[0] if ptrs else None


def _yield(op, region: int):
    if region >= len(op.regions):
        return None
    ys = [o for o in op.regions[region] if o.name in ("scf.yield", "tt.reduce.return")]
    return ys[-1] if ys else None


_FLOW = {"arith.mulf", "arith.divf", "arith.addf", "arith.subf", "arith.extf", "arith.truncf",
         "tt.fp_to_fp", "ttg.convert_layout", "tt.reshape", "arith.select", "tt.trans"}


def _flows(kir: K.KernelIR, name: str, target_op, depth: int = 0) -> bool:
    """``name`` is computed elementwise from ``target_op``'s result (not through a broadcast of it,
    which makes a row statistic into a parameter of other values, and not through another
    reduction)."""
    if depth > 12 or name is None:
        return False
    d = kir.defs.get(name)
    if d is None:
        return False
    if d[0] == "block":
        op, ri, ai = d[1], d[2], d[3]
        if op.name == "scf.for" and ai > 0:
            return _flows(kir, op.operands[3:][ai - 1] if ai - 1 < len(op.operands[3:]) else None, target_op,
                          depth + 1)
        return False
    if d[0] == "arg":
        return False
    op = d[0]
    if op is target_op:
        return True
    if op.name == "scf.for":
        y = _yield(op, 0)
        return y is not None and d[1] < len(y.operands) and _flows(kir, y.operands[d[1]], target_op, depth + 1)
    if op.name not in _FLOW:
        return False
    vals = op.operands[1:] if op.name == "arith.select" else op.operands
    return any(_flows(kir, o, target_op, depth + 1) for o in vals)


def _launch_links(kir: K.KernelIR, levels: dict) -> list:
    """Pairs of level keys where one level's result feeds the next (a reduce into a loop-carried
    add, a dot into the accumulator that sums the tiles)."""
    links = []
    for op, lvl in levels.items():
        if not lvl.detail.get("loop"):
            continue
        for other_op, other in levels.items():
            if other_op is op or not other_op.results:
                continue
            if any(_flows(kir, o, other_op) for o in op.operands):
                links.append((other.key, lvl.key))
    return links


def _host_level(site: K.Site, e) -> Level | None:
    hk = site.detail.get("host_kind")
    w = site.where
    key = (("host",) + tuple(e.stack), w.file, w.line, None, hk, site.op)
    if hk == "sum":
        n = site.detail.get("n")
        return Level("sum", site.fmt, site, key, n, (n - 1) if n else None, {"host": True})
    if hk == "dot":
        return Level("dot", site.fmt, site, key, site.detail.get("k"), None, {"host": True, "exact_products":
                     site.src_fmt in ("bf16", "fp16", "e4m3fn", "e5m2")})
    return None


# --------------------------------------------------------------------------- tokens

def kernel_tokens(entries: list) -> dict:
    """Per category and key, the kernel sites of one cone: ``{"round": {fmt: [Site]}, "function":
    {name: [Site]}, "integer": {name: [Site]}, "bits": [...], "rtz": {fmt: [Site]}}``."""
    rounds, functions, integer, bits, rtz = {}, {}, {}, [], {}
    for _, s in entries:
        if s.kind in ("cast", "arith") and s.rounds and K.is_low(s.fmt):
            rounds.setdefault(s.fmt, []).append(s)
            if (s.rounding or "rtne") != "rtne":
                rtz.setdefault(s.fmt, []).append(s)
        elif s.kind == "math" and s.function != "pow2":
            functions.setdefault(s.function, []).append(s)
            if s.rounds and K.is_low(s.fmt):
                rounds.setdefault(s.fmt, []).append(s)
        elif s.kind == "host":
            hk = s.detail.get("host_kind")
            if hk in ("cast", "arith", "sum", "dot") and s.rounds and K.is_low(s.fmt):
                rounds.setdefault(s.fmt, []).append(s)
            elif hk == "math":
                functions.setdefault(s.function, []).append(s)
        elif s.kind == "round-int":
            integer.setdefault(s.detail.get("name"), []).append(s)
        elif s.kind == "bits":
            bits.append(s)
        elif s.kind == "atomic" and K.is_low(s.fmt):
            rounds.setdefault(s.fmt, []).append(s)
    return {"round": rounds, "function": functions, "integer": integer, "bits": bits, "rtz": rtz}


def _kpos(sites) -> list:
    out = []
    for s in sites:
        p = f"{s.where.short()} {s.text()}"
        if p not in out:
            out.append(p)
    return out


def _rpos(sites) -> list:
    out = []
    for s in sites:
        p = f"{os.path.basename(s.file) if s.file else '?'}:{s.line} {s.what}"
        if p not in out:
            out.append(p)
    return out


def _components(levels: list, links) -> list:
    keys = {l.key: l for l in levels}
    parent = {k: k for k in keys}

    def find(x):
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x
    for a, b in links:
        if a in parent and b in parent:
            ra, rb = find(a), find(b)
            if ra != rb:
                parent[ra] = rb
    groups = {}
    for k in keys:
        groups.setdefault(find(k), []).append(keys[k])
    return list(groups.values())


@dataclass
class _Side:
    """One cone of the kernel, summarised for comparison."""
    tokens: dict
    levels: list
    chains: list


def _summarise(cone: Cone, items: dict) -> _Side:
    entries, levels = [], []
    for k in sorted(cone.keys, key=repr):
        stack, site, lvl = items[k]
        entries.append((stack, site))
        if lvl is not None:
            levels.append(lvl)
    return _Side(kernel_tokens(entries), levels, _components(levels, cone.links))


def _kmax(sides: list, get) -> tuple:
    """(largest count over the cones, the sites of that cone)."""
    best = (0, [])
    for sd in sides:
        sites = get(sd)
        if len(sites) > best[0]:
            best = (len(sites), sites)
    return best


def compare_output(i: int, cones: list, items: dict, prof: dict, out_fmt: str | None,
                   kernel_dtype: str | None) -> list:
    """Disagreements (and notes) for output i: the kernel's cones against the reference's
    per-element site counts."""
    found = []
    sides = [_summarise(c, items) for c in cones] or [_Side(kernel_tokens([]), [], [])]
    ref_round = dict(prof.get("round", {}))
    if out_fmt and kernel_dtype and K.is_low(kernel_dtype) and K.subset(kernel_dtype, out_fmt) \
            and kernel_dtype != out_fmt:
        # a wider reference output: the verdict rounds it to the stored format itself
        from .reference import RefSite
        n, lst = ref_round.get(kernel_dtype, (0, []))
        ref_round[kernel_dtype] = (n + 1, lst + [RefSite("round", f"the verdict's rounding of output {i} to "
                                                         f"{kernel_dtype}", kernel_dtype, None, None, None, "")])

    # roundings to formats narrower than fp32, per element
    fmts = set(ref_round) | {f for sd in sides for f in sd.tokens["round"]}
    for fmt in sorted(fmts):
        kn, ks = _kmax(sides, lambda sd: sd.tokens["round"].get(fmt, []))
        rn, rs = ref_round.get(fmt, (0, []))
        if kn != rn:
            if kn > rn:
                what = "an early rounding, or arithmetic in that format, the reference does not have"
            else:
                what = "the reference rounds where the kernel does not (a widening, or a later rounding)"
            found.append(Disagreement(
                "rounding", f"an element is rounded to {fmt} {kn} time(s) in the kernel and {rn} in the reference "
                            f"({what})", _kpos(ks), _rpos(rs), [i]))
    for sd in sides:
        for fmt, v in sd.tokens["rtz"].items():
            found.append(Disagreement("rounding-mode", f"the kernel rounds to {fmt} toward zero (rtz) where the "
                                                       f"reference rounds to nearest even", _kpos(v),
                                      _rpos(ref_round.get(fmt, (0, []))[1]), [i]))

    # math functions: which functions an element's value passes (a kernel that recomputes a
    # value the reference reuses, as a second pass recomputes exp(x - m), is the same function)
    ref_fn = {k: v for k, v in prof.get("function", {}).items() if v[0] > 0}
    kfn = {}
    for sd in sides:
        for name, v in sd.tokens["function"].items():
            kfn.setdefault(name, []).extend(x for x in v if x not in kfn.get(name, []))
    extra = {k: v for k, v in kfn.items() if k not in ref_fn}
    missing = {k: v[1] for k, v in ref_fn.items() if k not in kfn}
    if "sqrt_rn" in extra and "sqrt" in missing:
        found.append(Disagreement("function", "a correctly rounded sqrt where the reference models the approximate "
                                              "one (covered by its bound)", _kpos(extra.pop("sqrt_rn")),
                                  _rpos(missing.pop("sqrt")), [i], "note"))
    if "div_rn" in extra:
        found.append(Disagreement("function", "the kernel divides correctly rounded (div_rn) where the reference "
                                              "models the default division (covered by its bound)",
                                  _kpos(extra.pop("div_rn")), [], [i], "note"))
    if extra or missing:
        kdesc = ", ".join(sorted(extra)) or "no other function"
        rdesc = ", ".join(sorted(missing)) or "no other function"
        found.append(Disagreement(
            "function", f"the kernel computes {kdesc} where the reference has {rdesc}" + _function_hint(extra, missing),
            _kpos([s for k in sorted(extra) for s in extra[k]]), _rpos([s for k in sorted(missing) for s in missing[k]]),
            [i]))

    # roundings to an integer written out (floor, ceil)
    ref_int = prof.get("integer", {})
    names = set(ref_int) | {f for sd in sides for f in sd.tokens["integer"]}
    for name in sorted(names, key=str):
        kn, ks = _kmax(sides, lambda sd: sd.tokens["integer"].get(name, []))
        rn, rs = ref_int.get(name, (0, []))
        if kn != rn:
            found.append(Disagreement(
                "integer-rounding", f"the kernel rounds to an integer with {name} {kn} time(s), the reference {rn} "
                                    f"time(s)" + (": a rounding written by hand the reference does not model"
                                                  if kn > rn else ""), _kpos(ks), _rpos(rs), [i]))
    bits = [s for sd in sides for s in sd.tokens["bits"]]
    if bits:
        found.append(Disagreement("bits", "the kernel computes on a float's encoding (bitcasts)", _kpos(bits), [],
                                  [i], "note"))

    found.extend(_compare_levels(i, sides, prof))
    return found


def _function_hint(extra: dict, missing: dict) -> str:
    if "sqrt" in extra and "rsqrt" in missing:
        return " (1/sqrt(x) is an approximate sqrt and a division, not rsqrt)"
    if "exp2" in extra and "exp" in missing:
        return " (exp2 of x without the log2(e) factor is 2^x, not e^x)"
    if "sqrt" in extra and "sqrt_rn" in missing:
        return " (tl.sqrt is approximate; the reference assumes the correctly rounded sqrt_rn)"
    return ""


def _compare_levels(i: int, sides: list, prof: dict) -> list:
    """Reductions and dots: per format, the reference's count on one element must lie between
    the kernel's chains and its levels (a split reduction is several levels of one chain)."""
    found = []
    for kind in ("sum", "dot"):
        ref = prof.get(kind, {})

        def chains_of(sd, fmt):
            return [c for c in sd.chains if any(l.kind == kind and l.fmt == fmt for l in c)
                    and (kind == "dot" or not any(x.kind == "dot" for x in c))]

        def levels_of(sd, fmt):
            in_dot = {id(l) for c in sd.chains if any(x.kind == "dot" for x in c) for l in c}
            return [l for l in sd.levels if l.kind == kind and l.fmt == fmt and (kind == "dot" or id(l) not in in_dot)]
        fmts = set(ref) | {l.fmt for sd in sides for l in sd.levels if l.kind == kind and l.fmt}
        surplus, deficit = [], []
        for fmt in sorted(fmts):
            C = max((len(chains_of(sd, fmt)) for sd in sides), default=0)
            Lsd = max(sides, key=lambda sd: len(levels_of(sd, fmt)))
            L = levels_of(Lsd, fmt)
            R, rs = ref.get(fmt, (0, []))
            if R < C:
                surplus.append((fmt, L, rs, C, R))
            elif R > len(L):
                deficit.append((fmt, L, rs, R))
        noun = "reduction" if kind == "sum" else "dot"
        for fmt, L, rs, C, R in surplus:
            other = next((d for d in deficit if d[0] != fmt), None)
            if other is not None and kind == "dot" and other[0] == "tf32" and fmt == "fp32":
                # a TF32 accumulator model has the larger unit roundoff: its bound covers fp32's
                deficit.remove(other)
                found.append(Disagreement("dot-format", "the reference accumulates the dot in tf32, a looser bound "
                                                        "than the kernel's fp32 accumulation (covered)",
                                          _kpos([l.site for l in L]), _rpos(other[2]), [i], "note"))
                continue
            if other is not None:
                deficit.remove(other)
                found.append(Disagreement(f"{noun}-format", f"the kernel accumulates in {fmt} where the reference "
                                                            f"{'sums' if kind == 'sum' else 'accumulates'} in {other[0]}",
                                          _kpos([l.site for l in L]), _rpos(other[2]), [i]))
            else:
                found.append(Disagreement(noun, f"an element passes {C} {noun}(s) in {fmt} in the kernel and {R} in "
                                                f"the reference", _kpos([l.site for l in L]), _rpos(rs), [i]))
        for fmt, L, rs, R in deficit:
            found.append(Disagreement(noun, f"an element passes {R} {noun}(s) in {fmt} in the reference and "
                                            f"{len(L)} in the kernel", _kpos([l.site for l in L]), _rpos(rs), [i]))
    for sd in sides:
        found.extend(_order_checks(i, sd.chains, prof.get("sum", {})))
        found.extend(_dot_checks(i, [l for l in sd.levels if l.kind == "dot"], prof.get("dot", {})))
    return found


def _order_checks(i, chains, ref_sums: dict) -> list:
    """A reference sum whose order model is narrower than "any" must cover the kernel's order."""
    from ..calculus.ops import depth as ref_depth
    found = []
    for fmt, (_, rs) in ref_sums.items():
        for r in rs:
            order, n = r.detail.get("order"), r.detail.get("n")
            if order in ("any", "sequential") or n is None:
                continue
            want = ref_depth(order, n)
            worst, sites = None, []
            for c in chains:
                if not any(l.kind == "sum" and l.fmt == fmt for l in c):
                    continue
                d = 0
                for l in c:
                    if l.depth is None:
                        d = None
                        break
                    d += l.depth
                d = n - 1 if d is None else min(d, n - 1)
                if worst is None or d > worst:
                    worst, sites = d, [l.site for l in c]
            if worst is not None and worst > want:
                found.append(Disagreement(
                    "order", f"the kernel's reduction in {fmt} passes a term through up to {worst} roundings; the "
                             f"reference's order model {order!r} over {n} allows {want}",
                    _kpos(sites), _rpos([r]), [i]))
    return found


def _dot_checks(i, dots: list, ref_dots: dict) -> list:
    found = []
    ref_all = [r for _, rs in ref_dots.values() for r in rs]
    if not dots or not ref_all:
        return found
    ref_rounded = any(r.detail.get("rounded_products") for r in ref_all)
    ref_acc = {r.fmt for r in ref_all}
    for l in dots:
        d = l.detail
        if d.get("host"):
            continue
        prec = d.get("precision", "ieee")
        if not d.get("exact_products") and not ref_rounded:
            found.append(Disagreement("dot", "the kernel's dot rounds its products (fp32 operands) where the "
                                             "reference takes them as exact", _kpos([l.site]), _rpos(ref_all), [i]))
        if prec in ("tf32", "tf32x3") and l.site.src_fmt == "fp32" and "tf32" not in ref_acc:
            found.append(Disagreement("dot", f"the kernel's dot on fp32 operands uses inputPrecision={prec} "
                                             "(operands rounded to TF32); the reference models fp32",
                                      _kpos([l.site]), _rpos(ref_all), [i]))
        imp, mma = d.get("imprecise"), d.get("mma") or ""
        if imp and l.site.src_fmt in ("e4m3fn", "e5m2") and "v3" in mma and "tf32" not in ref_acc:
            found.append(Disagreement("dot", f"the kernel's fp8 dot runs on wgmma with maxNumImpreciseAcc={imp}: the "
                                             "tensor core accumulates with fewer bits than fp32; the reference models "
                                             "an fp32 accumulation (dot_acc='tf32' models the narrower one)",
                                      _kpos([l.site]), _rpos(ref_all), [i]))
        elif mma:
            found.append(Disagreement("dot", f"the kernel's dot runs on tensor cores ({mma}); the reference's fp32 "
                                             "accumulation bound assumes round-to-nearest additions",
                                      _kpos([l.site]), [], [i], "note"))
    return found


def check(kplan, rplan: ReferencePlan, *, kernel_name="kernel") -> PlanReport:
    """Compare a kernel plan with a reference plan, output by output."""
    cones = _Cones(kplan)
    found, per_output = [], []
    outs = kplan.capture.outputs
    if len(outs) != len(rplan.outputs):
        found.append(Disagreement("outputs", f"the kernel returns {len(outs)} output(s), the reference "
                                             f"{len(rplan.outputs)}", [], [], []))
    for i, (o, ro) in enumerate(zip(outs, rplan.outputs)):
        storage, dtype, _ = o
        kdt = _fmt(dtype)
        rf = ro["fmt"] or None
        if kdt and rf and kdt != rf and not (K.is_low(kdt) and K.subset(kdt, rf)) and (kdt, rf) != ("fp32", "tf32"):
            # a narrower reference output than the stored one, or an unrelated format
            found.append(Disagreement("output-format", f"output {i} is stored as {kdt}; the reference's output is "
                                                       f"{rf}", [], [], [i]))
        out_cones = cones.output(storage) if storage is not None else []
        prof = rplan.output_profile(i)
        per_output.append({"output": i, "kernel_format": kdt, "reference_format": rf, "stores": len(out_cones),
                           "kernel_sites": max((len(c.keys) for c in out_cones), default=0)})
        found.extend(compare_output(i, out_cones, cones.items, prof, rf, kdt))
    if kplan.capture.error:
        found.append(Disagreement("launcher", f"the launcher raised after {len(kplan.capture.launches)} launch(es): "
                                              f"{kplan.capture.error}; the plan covers those launches only",
                                  [], [], [], "note"))
    fma = [s for s in kplan.sites() if s.kind == "fma"]
    if fma and kplan.fp_fusion():
        found.append(Disagreement("fma", f"FP fusion is on: {len(fma)} multiply-add pair(s) may be contracted into one "
                                         "FMA (one rounding fewer); the reference admits both evaluations",
                                  _kpos(fma[:6]), [], [], "note"))
    merged = {}
    for d in found:
        k = d.key()
        if k in merged:
            merged[k].outputs = sorted(set(merged[k].outputs) | set(d.outputs))
        else:
            merged[k] = d
    ds = [d for d in merged.values() if d.severity == "disagreement"]
    notes = [d for d in merged.values() if d.severity != "disagreement"]
    return PlanReport(rplan.name, kernel_name, ds, notes, kplan, rplan, per_output)


def _fmt(dtype: str | None) -> str | None:
    from .extract import _torch_fmt
    return _torch_fmt(dtype)
