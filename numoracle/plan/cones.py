"""Backward cones: which kernel sites one element of an output passes.

Through the launches and host steps of a capture: a store's value through the IR (the union over
an operation's operands; one branch of a select, since an element takes one), a load back to
the event that last wrote its storage (one of its stores: an element was written by one), a host
step through its inputs.  Sites are counted once per place in the program text: the launch site,
the source position with its call chain, the operation and its ordinal among same-named
operations at that position.  Accumulation levels (a reduce, a loop-carried add, a dot, an
atomic, a host sum) and the links between them (one feeding the next elementwise) ride along.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from . import kernel as K


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
    """The sites an output element's value passes: keys into ``Cones.items``, and the links
    between accumulation levels (a reduce feeding a loop-carried add, a stored partial feeding a
    host sum)."""
    keys: frozenset = frozenset()
    links: frozenset = frozenset()

    def __or__(self, other: "Cone") -> "Cone":
        return Cone(self.keys | other.keys, self.links | other.links)


EMPTY = Cone()


class Cones:
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
        keys = [key]
        for cs in c.companions().get(id(op), []):
            cw = cs.where
            ck = (stack, cw.file, cw.line, cw.col, cw.chain, cs.kind, cs.op, cs.ordinal)
            self.items[ck] = (stack, cs, None)
            keys.append(ck)
        return Cone(frozenset(keys))

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
            op, ai = d[1], d[3]
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
            enc = kir.encoding
            if enc is not None and id(op) in enc.compares:
                # a comparison that is part of a rounding by hand: the code depends on the value
                return self._value(launch, enc.compares[id(op)])
            return EMPTY
        if n == "arith.mulf" and any(self._known(launch, o) == 0.0 for o in op.operands):
            # an exact zero (a running sum's initial 0 rescaled in a loop that runs once): no
            # rounding reaches it
            return EMPTY
        if n == "arith.select":
            return own | _heaviest([self._value(launch, o) for o in op.operands[1:3]], self.items)
        if n == "arith.ori" and _packs(kir, op):
            # two codes packed in one word (fp4 nibbles): an element of the output is one of them
            return own | _heaviest([self._value(launch, o) for o in op.operands], self.items)
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
            op, ai = d[1], d[3]
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


def _packs(kir: K.KernelIR, op) -> bool:
    """``a | (b << k)``: one operand shifted left by a constant (k >= 2), as packing puts two codes
    in one byte."""
    from .encoding import _int_const
    for o in op.operands:
        d = kir.def_op(o)
        if d is not None and d.name == "arith.shli" and len(d.operands) == 2:
            c = kir.def_op(d.operands[1])
            v = _int_const(c) if c is not None and c.name == "arith.constant" else None
            if v is not None and v >= 2:
                return True
    return False


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
        _mark_online(lv, kir, op, loop, steps)
    elif s is not None and s.kind == "atomic":
        lv = Level("sum", s.fmt, s, None, None, None, {"atomic": True})
    elif op in c.loops and op.name != "tt.dot":
        loop, _ = c.loops[op]
        steps = K.trip_count(kir, loop)
        fmt = kir.fmt_of(op.results[0])
        site = s if s is not None else K.Site("loop", op.name, fmt, kir.where(op), ir=op)
        lv = Level("sum", fmt, site, None, steps, (steps - 1) if steps else None, {"steps": steps, "loop": True})
        _mark_online(lv, kir, op, c.loops[op], steps)
    else:
        return None
    w = lv.site.where
    lv.key = (stack, w.file, w.line, w.col, w.chain, "loop" if lv.detail.get("loop") else lv.site.kind, lv.site.op,
              lv.site.ordinal)
    return lv


def _mark_online(lv: Level, kir, op, loop, steps) -> None:
    """An online softmax's rescaled accumulation (``K.online_rescale``) in a loop that runs
    more than once (or an unknown number of times): its detail names the operations."""
    if loop and steps != 1 and steps != 0:
        found = K.online_rescale(kir, op, loop[0], loop[1])
        if found:
            lv.detail["online"] = {"fmt": found["fmt"], **{k: kir.where(found[k]) for k in ("exp", "rescale", "rounding")}}


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
        op, ai = d[1], d[3]
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
    add, a dot into the accumulator that sums the tiles, a loop-carried vector accumulator into the
    reduce after its loop, a partial into the atomic add that sums the programs' partials)."""
    links = []
    for op, lvl in levels.items():
        if lvl.detail.get("atomic"):
            # split-K / split reduction: each program's partial (a dot's accumulator over its K
            # slice, a reduce over its columns) is added atomically into the output, one more
            # level of the same accumulation, not a reduction of its own
            for other_op, other in levels.items():
                if other_op is not op and other_op.results and any(_flows(kir, o, other_op) for o in op.operands):
                    links.append((other.key, lvl.key))
        elif lvl.detail.get("loop"):
            for other_op, other in levels.items():
                if other_op is op or not other_op.results:
                    continue
                if any(_flows(kir, o, other_op) for o in op.operands):
                    links.append((other.key, lvl.key))
        elif lvl.kind == "sum" and op.name == "tt.reduce":
            # a loop-carried elementwise accumulator reduced after the loop (acc += x·x over a
            # row's chunks, then tl.sum(acc), as Triton's layer-norm tutorial does): each term
            # passes the loop's additions in its lane, then the tree, one reduction of the row
            for other_op, other in levels.items():
                if other_op is op or not other.detail.get("loop"):
                    continue
                if any(_flows(kir, o, other_op) for o in op.operands):
                    links.append((other.key, lvl.key))
    return links


def _host_level(site: K.Site, e) -> Level | None:
    hk = site.detail.get("host_kind")
    if site.detail.get("name") in ("logsumexp", "softmax", "log_softmax"):
        hk = "sum"                       # these sum their exponentials
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

