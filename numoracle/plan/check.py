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
* roundings to an integer written by hand (floor, ceil) must be the reference's;
* an online softmax (an accumulator rescaled in its loop by an exp of the running maximum's
  change, after each step's terms were rounded narrow) needs a reference that loops likewise.

A difference the reference's bound covers anyway (a correctly rounded function where the
reference assumes an approximate one, a tensor-core dot accumulating in fp32 with the
instruction's own rounding, which GPU profiles bound) is a note, not a disagreement.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from . import kernel as K
from .cones import Cone, Cones
from .reference import ReferencePlan

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

    def output_name(self, i: int) -> str:
        """Output i's name, as the reference names it (its index where it has none)."""
        for o in self.outputs:
            if o.get("output") == i and o.get("name"):
                return str(o["name"])
        names = [o.get("name") for o in getattr(self.reference_plan, "outputs", None) or []]
        return str(names[i]) if 0 <= i < len(names) and names[i] else str(i)

    def explain(self) -> str:
        lines = [self.summary()]
        for d in self.disagreements + self.notes:
            tag = "DISAGREE" if d.severity == "disagreement" else "note"
            outs = (f" [output{'s' if len(d.outputs) > 1 else ''} {', '.join(self.output_name(i) for i in d.outputs)}]"
                    if d.outputs else "")
            lines.append(f"  {tag} {d.kind}{outs}: {d.message}")
            if d.kernel:
                lines.append(f"      kernel:    {'; '.join(d.kernel)}")
            if d.reference:
                lines.append(f"      reference: {'; '.join(d.reference)}")
        return "\n".join(lines)

    def to_dict(self) -> dict:
        # each finding's outputs by index ("outputs") and by the reference's names ("output_names")
        def named(d):
            return {**d.to_dict(), "output_names": [self.output_name(i) for i in d.outputs]}
        return {"reference": self.reference, "kernel": self.kernel, "ok": self.ok,
                "disagreements": [named(d) for d in self.disagreements],
                "notes": [named(d) for d in self.notes], "outputs": self.outputs}


# torch functions on the host that compute several of the reference's functions
HOST_FUNCTIONS = {"logsumexp": ("exp", "log"), "log_softmax": ("exp", "log"), "softmax": ("exp",),
                  "sigmoid": ("exp",)}


def kernel_tokens(entries: list) -> dict:
    """Per category and key, the kernel sites of one cone: ``{"round": {fmt: [Site]}, "function":
    {name: [Site]}, "integer": {name: [Site]}, "bits": [...], "rtz": {fmt: [Site]}, "nan": {fmt:
    [Site]}, "exact_bits": [...], "codes": [...]}``: ``rtz`` the roundings not to nearest even,
    ``nan`` those of a value a NaN may be selected into, ``bits`` the arithmetic on encodings the
    reader does not recognise, ``exact_bits`` what it does (an exponent read, which also counts as
    its floor or ceil, a power of two from bits), ``codes`` integer codes from comparisons that
    are no rounding to a format."""
    rounds, functions, integer, bits, rtz, exact_bits, nan, codes, by_value = {}, {}, {}, [], {}, [], {}, [], []
    for _, s in entries:
        if s.kind in ("cast", "arith") and s.rounds and K.is_low(s.fmt):
            rounds.setdefault(s.fmt, []).append(s)
            if (s.rounding or "rtne") != "rtne":
                rtz.setdefault(s.fmt, []).append(s)
            if s.detail.get("overflow") == "nan":
                nan.setdefault(s.fmt, []).append(s)
        elif s.kind == "math" and s.function != "pow2":
            functions.setdefault(s.function, []).append(s)
            if s.rounds and K.is_low(s.fmt):
                rounds.setdefault(s.fmt, []).append(s)
        elif s.kind == "host":
            hk = s.detail.get("host_kind")
            if hk in ("cast", "arith", "sum", "dot") and s.rounds and K.is_low(s.fmt):
                rounds.setdefault(s.fmt, []).append(s)
            elif hk == "math":
                for f in HOST_FUNCTIONS.get(s.detail.get("name"), (s.function,)):
                    functions.setdefault(f, []).append(s)
        elif s.kind == "round-int":
            integer.setdefault(s.detail.get("name"), []).append(s)
        elif s.kind == "bits" and s.detail.get("encoding") == "exponent":
            # floor / ceil of log2 read exactly from the exponent field
            integer.setdefault(s.detail.get("rounding"), []).append(s)
            exact_bits.append(s)
        elif s.kind == "bits" and s.detail.get("encoding") == "pow2":
            exact_bits.append(s)
        elif s.kind == "bits" and s.detail.get("by"):
            codes.append(s)           # an integer code from comparisons, not on the encoding
        elif s.kind == "bits" and s.detail.get("encoding") == "by-value":
            by_value.append(s)        # a float's encoding converted by value (a dropped bitcast)
        elif s.kind == "bits":
            bits.append(s)
        elif s.kind == "atomic" and K.is_low(s.fmt):
            rounds.setdefault(s.fmt, []).append(s)
    return {"round": rounds, "function": functions, "integer": integer, "bits": bits, "rtz": rtz,
            "exact_bits": exact_bits, "nan": nan, "codes": codes, "by_value": by_value}


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
        if lvl is None or not lvl.detail.get("loop"):
            entries.append((stack, site))     # a loop-carried add is its reduction's, not a rounding of its own
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
                   kernel_dtype: str | None, name: str | None = None) -> list:
    """Disagreements (and notes) for output i (named ``name`` by the reference): the kernel's
    cones against the reference's per-element site counts."""
    found = []
    sides = [_summarise(c, items) for c in cones] or [_Side(kernel_tokens([]), [], [])]
    ref_round = dict(prof.get("round", {}))
    if out_fmt and kernel_dtype and K.is_low(kernel_dtype) and K.subset(kernel_dtype, out_fmt) \
            and kernel_dtype != out_fmt:
        # a wider reference output: the verdict rounds it to the stored format itself
        from .reference import RefSite
        n, lst = ref_round.get(kernel_dtype, (0, []))
        ref_round[kernel_dtype] = (n + 1, lst + [RefSite("round", f"the verdict's rounding of output {name or i} to "
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
            for mode in sorted({s.rounding for s in v}):
                found.append(Disagreement("rounding-mode", f"the kernel rounds to {fmt} {_MODES.get(mode, mode)} "
                                                           f"where the reference rounds to nearest even",
                                          _kpos([s for s in v if s.rounding == mode]),
                                          _rpos(ref_round.get(fmt, (0, []))[1]), [i]))
        for fmt, v in sd.tokens["nan"].items():
            # a NaN selected into a value the kernel then rounds: past the range it gives NaN
            sat = [r for r in ref_round.get(fmt, (0, []))[1] if r.detail.get("overflow") == "saturate"]
            found.append(Disagreement("rounding-overflow", f"the kernel selects NaN into the value it rounds to {fmt} "
                                                           f"(NaN past the range)" + (
                                          " where the reference's codes saturate" if sat else ""),
                                      _kpos(v), _rpos(sat), [i], "disagreement" if sat else "note"))

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
    exp_read = [s for sd in sides for s in sd.tokens["integer"].get("floor", []) + sd.tokens["integer"].get("ceil", [])
                if s.kind == "bits"]
    if "log2" in missing and exp_read and all(r.detail.get("exact_ok") for r in missing["log2"]):
        found.append(Disagreement("function", "the kernel reads the exponent from the float's bits (an exact floor or "
                                              "ceil of log2) where the reference admits the approximate log2 (covered "
                                              "by its bound)", _kpos(exp_read), _rpos(missing.pop("log2")), [i],
                                  "note"))
    if "div_rn" in extra:
        found.append(Disagreement("function", "the kernel divides correctly rounded (div_rn) where the reference "
                                              "models the default division (covered by its bound)",
                                  _kpos(extra.pop("div_rn")), [], [i], "note"))
    if extra or missing:
        kdesc, rdesc = ", ".join(sorted(extra)), ", ".join(sorted(missing))
        if not extra:
            # the kernel's other functions all appear in the reference too: it builds this value
            # from operations (tanh from a sigmoid, say) whose errors the reference does not model
            what = (f"the reference has {rdesc}, which the kernel never calls: it builds the value from other "
                    f"operations (write the reference the same way) or leaves it out")
        elif not missing:
            what = f"the kernel computes {kdesc}, which the reference does not have"
        else:
            what = f"the kernel computes {kdesc} where the reference has {rdesc}"
        found.append(Disagreement(
            "function", what + _function_hint(extra, missing),
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
    for sd in sides:
        if sd.tokens["by_value"]:
            found.append(Disagreement("bits", "the kernel converts an integer that holds a float's encoding (the bits "
                                              "of a power of two, an exponent field built by hand) to a float by "
                                              "value, not by a bitcast: the value is the bit pattern read as an "
                                              "integer, not the power of two", _kpos(sd.tokens["by_value"]), [], [i]))
        if sd.tokens["codes"]:
            found.append(Disagreement("bits", "the kernel makes an integer code by comparisons with constants that are "
                                              "not the midpoints of a format's grid (no rounding to a format)",
                                      _kpos(sd.tokens["codes"]), [], [i], "note"))
        bits, exact = sd.tokens["bits"], sd.tokens["exact_bits"]
        if exact:
            found.append(Disagreement("bits", "the kernel computes on a float's encoding what the reference models "
                                              "exactly (an exponent read from the bits, a power of two built from "
                                              "them)", _kpos(exact), [], [i], "note"))
        if not bits:
            continue
        # float -> integer -> float on one element's way, through arithmetic the reader does not
        # recognise: its value was made on its encoding (a rounding or scaling by hand); one
        # direction alone (reading an exponent) is a note
        to_int = any(K.fmt_obj(s.src_fmt) is not None for s in bits)
        to_float = any(K.fmt_obj(s.fmt) is not None for s in bits)
        to_int |= to_float and any(K.fmt_obj(s.src_fmt) is not None for s in exact)
        to_float |= to_int and any(K.fmt_obj(s.fmt) is not None for s in exact)
        if to_int and to_float:
            found.append(Disagreement("bits", "the kernel computes the value through its encoding (a bitcast to an "
                                              "integer and back): a rounding or scaling by hand the reference does "
                                              "not model", _kpos(bits), [], [i]))
        else:
            found.append(Disagreement("bits", "the kernel reads a float's encoding (a bitcast)", _kpos(bits), [], [i],
                                      "note"))

    found.extend(_online_rescale(i, sides, prof))
    found.extend(_compare_levels(i, sides, prof))
    return found


def _online_rescale(i: int, sides: list, prof: dict) -> list:
    """A kernel's online softmax (``kernel.online_rescale``: an accumulator rescaled in its loop
    by an exp of the change of a running maximum, after each step's terms were rounded to a
    narrow format) against a reference with its exponentials at one source position: one
    softmax at the final maximum, whose narrow roundings are not the kernel's once the loop runs
    more than once.  A reference that loops over the kernel's blocks has the rescale's exp at a
    position of its own."""
    online = [l for sd in sides for l in sd.levels if l.detail.get("online")]
    if not online:
        return []
    fns = prof.get("function", {})
    rsites = fns.get("exp", (0, []))[1] + fns.get("exp2", (0, []))[1]
    if len({(s.file, s.line) for s in rsites}) >= 2:
        return []
    o = online[0].detail["online"]
    steps = online[0].detail.get("steps")
    runs = f"runs {steps} times on this example" if steps else "may run more than once"
    return [Disagreement(
        "online-softmax", f"the kernel rescales a loop-carried accumulator by an exponential of its running "
                          f"maximum's change ({o['rescale'].short()}, factor from {o['exp'].short()}) after "
                          f"rounding each step's terms to {o['fmt']} ({o['rounding'].short()}): an online softmax, "
                          f"whose loop {runs}; the reference computes its exponentials once, at the final maximum, "
                          f"so its {o['fmt']} roundings are not the kernel's. Write the reference's loop over the "
                          f"kernel's blocks: a running maximum, each block's terms rounded, the accumulator and "
                          f"the sum rescaled by exp2(m_old - m_new) (docs/tutorial.md, \"Flash attention\")",
        [f"{o[k].short()} {what}" for k, what in (("exp", "exp of the maximum's change"),
                                                  ("rescale", "accumulator rescaled"),
                                                  ("rounding", f"terms rounded to {o['fmt']}"))],
        _rpos(rsites), [i])]


_MODES = {"rtz": "toward zero (rtz)", "rna": "to nearest with ties away from zero",
          "rnz": "to nearest with ties toward zero", "mixed": "to nearest with ties broken neither to even nor "
                                                         "one way"}


def _function_hint(extra: dict, missing: dict) -> str:
    if "sqrt" in extra and "rsqrt" in missing:
        return " (1/sqrt(x) is an approximate sqrt and a division, not rsqrt)"
    if "exp2" in extra and "exp" in missing:
        return " (exp2 of x without the log2(e) factor is 2^x, not e^x)"
    if "exp" in extra and "exp2" in missing:
        return (" (the reference's exp2 takes no product by log2(e) as its argument: 2^x, not e^x, unless "
                "the factor is folded into a scale; write no.exp2(z * LOG2E) or no.exp(z))")
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
    found.extend(_flush_checks(i, sides, prof))
    return found


def _flush_checks(i, sides: list, prof: dict) -> list:
    """An fp32 atomic add flushes subnormal inputs and results to zero on NVIDIA GPUs (measured
    on an H100, scripts/dot_subnormal_probe.py; tl.dot keeps them): the reference's sum or dot
    it belongs to must allow that (``ftz=True``)."""
    atomics = [l for sd in sides for l in sd.levels if l.detail.get("atomic") and l.fmt == "fp32"]
    refs = [r for kind in ("sum", "dot") for _, rs in prof.get(kind, {}).values() for r in rs]
    if not atomics or not refs or any(r.detail.get("ftz") for r in refs):
        return []
    fix = "no.matmul(..., ftz=True)" if any(r.kind == "dot" for r in refs) else "no.sum(..., ftz=True)"
    return [Disagreement("flush", "the kernel adds partials with an fp32 atomic add, which flushes subnormal "
                                  "inputs and results to zero on NVIDIA GPUs; the reference's accumulation keeps "
                                  f"them (write {fix})", _kpos([l.site for l in atomics]), _rpos(refs), [i])]


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
    from ..calculus.ops import SPLITS
    found = []
    ref_all = [r for _, rs in ref_dots.values() for r in rs]
    if not dots or not ref_all:
        return found
    ref_rounded = any(r.detail.get("rounded_products") for r in ref_all)
    ref_tf32 = [r for r in ref_all if r.detail.get("tf32_operands")]
    ref_split = [r for r in ref_all if r.detail.get("split")]
    ref_acc = {r.fmt for r in ref_all}
    for l in dots:
        d = l.detail
        if d.get("host"):
            continue
        prec = d.get("precision", "ieee")
        # fp32 operands whose values TF32 does not hold (an fp32 tile widened from bf16 loads does)
        fp32_in = "fp32" in (l.site.src_fmt, d.get("b_fmt")) and not d.get("tf32_exact")
        # Triton splits every fp32 tile under tf32x3, bf16x3 and bf16x6, whatever values it holds
        fp32_tiles = l.site.src_fmt == "fp32" and d.get("b_fmt") in (None, "fp32")
        splits = prec in SPLITS and fp32_tiles
        ref_splits = {r.detail["split"] for r in ref_split}
        tf32_read = prec == "tf32" and fp32_in and ref_tf32
        # (a reference reading TF32 operands where the kernel keeps fp32 has its own message below)
        if not d.get("exact_products") and not ref_rounded and not (fp32_in and (ref_tf32 or ref_split)):
            found.append(Disagreement("dot", "the kernel's dot rounds its products (fp32 operands) where the "
                                             "reference takes them as exact", _kpos([l.site]), _rpos(ref_all), [i]))
        if tf32_read and d.get("ttgir") and not d.get("mma"):
            found.append(Disagreement("dot", "the kernel's dot with inputPrecision=tf32 runs on FMAs (no tensor-core "
                                             "layout), which keep the fp32 operands; the reference's "
                                             "input_precision=\"tf32\" models operands a tensor core truncates to TF32",
                                      _kpos([l.site]), _rpos(ref_tf32), [i]))
        elif splits and ref_splits == {prec} and d.get("ttgir") and not d.get("mma"):
            found.append(Disagreement("dot", f"the kernel's dot with inputPrecision={prec} runs on FMAs (no "
                                             f"tensor-core layout); the reference's input_precision=\"{prec}\" "
                                             f"models the split's tensor-core dots",
                                      _kpos([l.site]), _rpos(ref_split), [i]))
        elif splits and ref_splits != {prec}:
            models = (f"input_precision={'/'.join(sorted(ref_splits))}" if ref_splits else
                      "TF32 operands" if ref_tf32 else "fp32 operands")
            found.append(Disagreement("dot", f"the kernel's dot on fp32 tiles uses inputPrecision={prec} (each "
                                             f"operand split into {SPLITS[prec].parts} {SPLITS[prec].fmt} parts, "
                                             f"{SPLITS[prec].dots} tensor-core dots, the tiles' sums added in fp32); "
                                             f"the reference models {models}: no.matmul(..., input_precision="
                                             f"\"{prec}\") models Triton's split (docs/design.md §4.4)",
                                      _kpos([l.site]), _rpos(ref_all), [i]))
        elif not splits and fp32_tiles and ref_split:
            found.append(Disagreement("dot", f"the reference splits the dot's operands (input_precision="
                                             f"\"{'/'.join(sorted(ref_splits))}\"); the kernel's dot uses "
                                             f"inputPrecision={prec}: give no.matmul the kernel's input_precision, "
                                             f"or the kernel's tl.dot the reference's",
                                      _kpos([l.site]), _rpos(ref_split), [i]))
        elif prec == "tf32" and fp32_in and not tf32_read and "tf32" not in ref_acc:
            found.append(Disagreement("dot", "the kernel's dot on fp32 operands uses inputPrecision=tf32 "
                                             "(operands read as TF32); the reference models fp32 operands: say so "
                                             "with no.matmul(..., input_precision=\"tf32\"), which models what an "
                                             "H100 does (it truncates the operands to TF32, where a reference's "
                                             ".to(tf32) rounds them to nearest); or give the kernel's tl.dot "
                                             "input_precision=\"ieee\" to keep fp32 (docs/design.md §4.4)",
                                      _kpos([l.site]), _rpos(ref_all), [i]))
        elif prec == "ieee" and fp32_in and ref_tf32:
            found.append(Disagreement("dot", "the reference reads the dot's operands as TF32 "
                                             "(input_precision=\"tf32\"); the kernel's dot keeps fp32 operands "
                                             "(inputPrecision=ieee): drop input_precision from the reference's "
                                             "no.matmul, or give the kernel's tl.dot input_precision=\"tf32\"",
                                      _kpos([l.site]), _rpos(ref_tf32), [i]))
        imp, mma = d.get("imprecise"), d.get("mma") or ""
        if imp and l.site.src_fmt in ("e4m3fn", "e5m2") and "v3" in mma and "tf32" not in ref_acc:
            found.append(Disagreement("dot", f"the kernel's fp8 dot runs on wgmma with maxNumImpreciseAcc={imp}: the "
                                             "tensor core accumulates with fewer bits than fp32; the reference models "
                                             "an fp32 accumulation (no.matmul(..., acc=tf32) models the narrower one; "
                                             "w8a8_block_fp8_matmul's --param dot_acc=tf32)",
                                      _kpos([l.site]), _rpos(ref_all), [i]))
        elif mma:
            found.append(Disagreement("dot", f"the kernel's dot runs on tensor cores ({mma}), which truncate and "
                                             f"round toward zero: a GPU profile bounds that (docs/design.md §4.4) "
                                             f"beside the reference's {'/'.join(sorted(ref_acc))} accumulation bound",
                                      _kpos([l.site]), [], [i], "note"))
            if d.get("acc_from"):
                found.append(Disagreement(
                    "dot", f"the kernel's dot starts its accumulation from data loaded at {d['acc_from']} (Triton "
                           f"folds `tl.dot(a, b) + bias` into the dot when nothing comes between, as with one K "
                           f"step): the tensor core adds it with the dot's own rounding, which a GPU profile bounds "
                           f"for an add of a dot's result (docs/design.md §4.4)", _kpos([l.site]), [], [i], "note"))
    return found


def check(kplan, rplan: ReferencePlan, *, kernel_name="kernel") -> PlanReport:
    """Compare a kernel plan with a reference plan, output by output."""
    cones = Cones(kplan)
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
            found.append(Disagreement("output-format", f"output {ro.get('name', i)} is stored as {kdt}; the "
                                                       f"reference's output is {rf}", [], [], [i]))
        out_cones = cones.output(storage) if storage is not None else []
        prof = rplan.output_profile(i)
        per_output.append({"output": i, "name": ro.get("name"), "kernel_format": kdt, "reference_format": rf, "stores": len(out_cones),
                           "kernel_sites": max((len(c.keys) for c in out_cones), default=0)})
        found.extend(compare_output(i, out_cones, cones.items, prof, rf, kdt, ro.get("name")))
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
