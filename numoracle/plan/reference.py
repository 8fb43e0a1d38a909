"""A reference program's precision plan: its sites, read from one run under the error calculus.

The calculus records every site it makes (``Context.origins``: label, kind, format and the
position in the reference program that made it).  Run uncondensed, each output's error form
keeps the label of every site that contributes to it, which gives each output's sites: the
reference's data flow, with no dataflow analysis of our own.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from ..errors import InvalidArgument

# reference math calls -> the function the kernel computes for them (kernel.MATH's names):
# numoracle's exp2 is exp2(x·log2 e) (logsumexp's exp="exp2"), i.e. the exponential;
# sigmoid is 1/(1 + exp(-x)), built on the exponential.
FUNCTIONS = {"exp": "exp", "exp2": "exp", "log": "log", "log2": "log2", "rsqrt": "rsqrt", "sqrt": "sqrt",
             "sqrt_rn": "sqrt_rn", "sigmoid": "exp", "tanh": "tanh", "erf": "erf", "sin": "sin",
             "cos": "cos", "div_rn": "div_rn", "log1p": "log1p", "expm1": "expm1"}
_LABEL = re.compile(r"^(.*?) \[([\w<>.]+?):(\d+)(?::(\d+))?(?:@\d+)?(?:<[^\]]*)?\]$")
_SUM = re.compile(r"^(\w+) (?:prefix )?sum over (\d+) \((.+?) order(, flushing subnormals)?\)$")
# a split precision's label (ops.Split.label) names it: ", TF32x3 operands"
_DOT = re.compile(r"^(\w+) dot over K=(\d+) \((.+?) order(, rounded products)?"
                  r"(, TF32 operands|, (?P<split>(?:TF32|BF16)x\d) operands)?(?P<ftz>, flushing subnormals)?\)$")
# calculus.quant.block_scaled_matmul: per K tile a dot of the codes in this format, scaled,
# accumulated in fp32 -- one dot on the way to each element, as the kernel's tl.dot loop is
_BLOCK_DOT = re.compile(r"^block-scaled fp8 matmul over K=(\d+) \((\w+) tile dots, ")
_ARITH = re.compile(r"^(\w+) (add|sub|mul)$")
_ROUND = re.compile(r"^round to (\w+) \(\.to\)$")
_CALL = re.compile(r"^([\w]+) \((?:[\d.+|x]+ ulp|[\d.]+\+[\d.]+\|x\| ulp(?:, at most [\d.]+)?|correctly rounded)\)$")
_QUANT = re.compile(r"^quantize(?:_group\((\d+), (\w+), (\w+)\)| to (\w+) per group of (\d+) \((\w+) scale\))$")
LOW = {"bf16", "fp16", "e4m3fn", "e5m2", "e4m3fnuz", "e5m2fnuz", "e2m1", "tf32"}


@dataclass
class RefSite:
    kind: str                  # round | function | sum | dot | arith | exact | other
    what: str                  # the label without its position
    fmt: str
    file: str | None
    line: int | None
    col: int | None
    label: str
    function: str | None = None
    detail: dict = field(default_factory=dict)

    def key(self) -> tuple:
        """One site of the program text (a line executed in a loop is one site)."""
        return (self.file, self.line, self.col, self.what)

    def where(self) -> str:
        import os
        f = os.path.basename(self.file) if self.file else "?"
        return f"{f}:{self.line}"

    def to_dict(self) -> dict:
        return {"kind": self.kind, "what": self.what, "format": self.fmt, "file": self.file,
                "line": self.line, "col": self.col, "function": self.function, "detail": self.detail}


def classify(label: str, kind: str, fmt: str, file, line, col) -> RefSite | None:
    m = _LABEL.match(label)
    what = m.group(1) if m else label
    if kind == "domain":
        return None                      # the math call's library record carries it
    s = RefSite("other", what, fmt, file, line, col, label)
    if (mm := _ROUND.match(what)):
        s.kind, s.fmt = "round", mm.group(1)
    elif (mm := _ARITH.match(what)):
        s.kind, s.fmt = "arith", mm.group(1)
        s.detail["name"] = mm.group(2)
    elif what.startswith("mean: divide by"):
        s.kind = "arith"
        s.detail["name"] = "div"
    elif (mm := _SUM.match(what)):
        s.kind, s.fmt = "sum", mm.group(1)
        s.detail.update(n=int(mm.group(2)), order=_order(mm.group(3)), ftz=bool(mm.group(4)))
    elif (mm := _DOT.match(what)):
        s.kind, s.fmt = "dot", mm.group(1)
        s.detail.update(k=int(mm.group(2)), order=_order(mm.group(3)), rounded_products=bool(mm.group(4)),
                        tf32_operands=mm.group(5) == ", TF32 operands",
                        split=mm.group("split").lower() if mm.group("split") else None,
                        ftz=bool(mm.group("ftz")))
    elif (mm := _BLOCK_DOT.match(what)):
        s.kind, s.fmt = "dot", mm.group(2)
        s.detail.update(k=int(mm.group(1)), order="any", rounded_products=False)
    elif (mm := _CALL.match(what)):
        name = mm.group(1)
        if name == "division":
            s.kind = "division"
        elif name in FUNCTIONS:
            s.kind, s.function = "function", FUNCTIONS[name]
            s.detail["call"] = name
    elif (mm := _QUANT.match(what)):
        s.kind = "quantize"
        s.fmt = mm.group(2) or mm.group(4)
        s.detail["rule"] = mm.group(3) or mm.group(6)
    elif " mul (exact)" in what or " mul by " in what:
        s.kind = "exact"
    return s


def _order(text: str):
    return int(text) if text.isdigit() else text


@dataclass
class ReferencePlan:
    name: str
    file: str | None
    sites: list                       # [RefSite] in the order made (one per execution)
    outputs: list                     # per output: {"fmt": str, "labels": {label: element mask}, "extra": [...]}

    def site(self, label: str) -> RefSite | None:
        return self._by_label().get(label)

    def _by_label(self) -> dict:
        if not hasattr(self, "_labels"):
            self._labels = {}
            for s in self.sites:
                self._labels.setdefault(s.label, s)
        return self._labels

    def output_profile(self, i: int) -> dict:
        """For output i, per site category and key, the largest number of distinct sites any one
        element passes (``{"round": {fmt: (count, [RefSite])}, "function": ..., "sum": ...,
        "dot": ..., "integer": ...}``)."""
        import torch
        out = self.outputs[i]
        # a site the output's form names whose term is zero on every element is on the output's
        # path but exact there: a cast the calculus settles (its whole enclosure rounds to one
        # value), or the rounding of a value known exactly that its format holds (MX operands,
        # codes times a power of two, cast to bf16): count it for every element, as a site
        # the form names
        labels = {k: (m if bool(m.any()) else torch.ones_like(m)) for k, m in out["labels"].items()}
        groups: dict = {}
        for label, mask in labels.items():
            site = self.site(label)
            if site is None:
                continue
            key = _category(site)
            if key is None:
                continue
            groups.setdefault(key, []).append((site, mask))
        prof: dict = {}
        for (cat, k), members in groups.items():
            masks = torch.broadcast_tensors(*[m for _, m in members])
            if cat in ("sum", "dot"):
                # one reduction of the program text that a Python loop runs per tile (a chunked
                # row, a split) is one level, as the kernel's loop body is one level of its IR
                # however often the loop runs: count source positions, not executions
                positions: dict = {}
                for (site, _), m in zip(members, masks):
                    pos = (site.file, site.line, site.col)
                    positions[pos] = positions[pos] | m if pos in positions else m
                count = sum(m.to(torch.int32) for m in positions.values()).reshape(-1)
            else:
                count = sum(m.to(torch.int32) for m in masks).reshape(-1)
            if count.numel() == 0:
                prof.setdefault(cat, {})[k] = (0, [])
                continue
            j = int(torch.argmax(count))
            chosen = [s for (s, _), m in zip(members, masks) if bool(m.reshape(-1)[j])]
            prof.setdefault(cat, {})[k] = (int(count[j]), chosen)
        for s in out.get("extra", []):
            key = _category(s)
            if key is not None:
                n, lst = prof.setdefault(key[0], {}).get(key[1], (0, []))
                prof[key[0]][key[1]] = (n + 1, lst + [s])
        return prof


def _category(s: RefSite):
    """(category, key) of a site for the plan check, or None for sites that are not compared."""
    if s.kind == "round" and s.fmt in LOW:
        return ("round", s.fmt)
    if s.kind == "arith" and s.fmt in LOW:
        return ("round", s.fmt)
    if s.kind == "quantize-codes":
        return ("round", s.fmt)
    if s.kind == "function":
        return ("function", s.function)
    if s.kind == "round-int":
        return ("integer", s.detail.get("name"))
    if s.kind == "sum":
        return ("sum", s.fmt)
    if s.kind == "dot":
        return ("dot", s.fmt)
    return None


def run_reference_positions(prog, inputs, params, prof):
    """Run a reference program under the calculus, uncondensed, with labels that carry the
    column (so that every site of the program text has its own label) and without settling
    casts (so that every site's term stays where it reaches); the inputs as ``numoracle.check``
    takes them."""
    import torch

    from ..calculus import form as FM
    from ..calculus.tracked import Context, Tracked
    from ..verdict.evaluation import as_input as _as_input
    ctx = Context(profile=prof, condensed=False, columns=True, settle=False)
    if len(inputs) != len(prog.input_names):
        raise InvalidArgument(f"{prog.name} takes {len(prog.input_names)} inputs ({', '.join(prog.input_names)}) "
                              f"but {len(inputs)} were given; pass them in the program's order.")
    args = []
    for i, (name, x) in enumerate(zip(prog.input_names, inputs)):
        v, fmt = _as_input(i, name, x)
        if fmt is None:
            args.append(v)
            continue
        bad = ~torch.isfinite(v)
        v = torch.where(bad, torch.zeros_like(v), v)
        args.append(Tracked(v, fmt, FM.Form(), ctx, taint=bad if bool(bad.any()) else None))
    unknown = set(params) - set(prog.param_names)
    if unknown:
        raise InvalidArgument(f"unknown parameter(s) {sorted(unknown)} for {prog.name}; it takes "
                              f"{prog.param_names or 'no keyword parameters'}.")
    out = prog.fn(*args, **params)
    return (list(out) if isinstance(out, (tuple, list)) else [out]), ctx


def _element_labels(t, ctx) -> dict:
    """label -> bool mask over the output's elements where that site's error reaches it."""
    import torch
    form = getattr(t, "form", None)
    if form is None:
        return {}
    shape = tuple(t.c.shape)
    out = {}

    def put(label, mag):
        m = (mag.abs() > 0) if isinstance(mag, torch.Tensor) else torch.tensor(bool(mag))
        m = torch.broadcast_to(m, shape) if m.dim() <= len(shape) else m
        out[label] = out[label] | m if label in out else m
    for e in form.private:
        put(e.label, e.abs)
    for k, term in form.shared.items():
        if k in ctx.symbols:
            put(ctx.symbols[k][1], term.coef)
    for label, v in form.det.items():
        put(label, v)
    return out


def _selection_labels(sel, ctx) -> dict:
    """label -> bool mask over a selection's indices: a site reaches an index where it reaches
    any value of the row the index was chosen in."""
    out = {}
    for label, m in _element_labels(sel.source, ctx).items():
        m = m.expand(sel.source.c.shape).movedim(sel.axis, -1).any(-1, keepdim=True)
        out[label] = sel.shaped(m.expand(m.shape[:-1] + (sel.k or 1,)))
    return out


def reference_plan(program, inputs, params, *, profile="h200", launch=None) -> ReferencePlan:
    """Run ``program`` once under the calculus on ``inputs`` and read its sites.  ``launch``:
    the kernel's launch values ({name: value}, ``Capture.launch_values``) for the program's
    ``no.launch()`` parameters."""
    import inspect

    from ..calculus.select import Selection
    from ..mathlib import load
    from ..reference import reference as as_reference

    prog = as_reference(program)
    prof = load(profile) if isinstance(profile, str) else profile
    outs, ctx = run_reference_positions(prog, list(inputs), prog.with_launch(dict(params or {}), launch), prof)
    try:
        file = inspect.getsourcefile(prog.fn)
    except TypeError:
        file = None
    sites = [s for s in (_classify_origin(o) for o in ctx.origins) if s]
    outputs = []
    names = prog.names_of(len(outs))
    for t, name in zip(outs, names):
        if isinstance(t, Selection):
            # indices: no format of their own; every site that reaches a value of a row reaches
            # the choice made in it
            outputs.append({"name": name, "fmt": "", "labels": _selection_labels(t, ctx), "extra": []})
            continue
        entry = {"name": name, "fmt": str(getattr(t, "fmt", "")), "labels": _element_labels(t, ctx), "extra": []}
        q = getattr(t, "quantizer", None)
        if q is not None:
            entry["extra"] = _quantizer_sites(q, getattr(t, "kind", "codes"), file)
            entry["labels"].update(_element_labels(q.x, ctx))
        outputs.append(entry)
    return ReferencePlan(prog.name, file, sites, outputs)


def _classify_origin(o):
    """A recorded site as a RefSite: an exp2 is the function exp where its argument is a
    product by log2 e (``no.exp2(z * LOG2E)``, logsumexp's exp2), as the kernel reader takes
    ``exp2(x * 1.44269504)``; otherwise exp2 (2^x, or e^x with log2 e folded into a scale that
    neither reader sees)."""
    s = classify(o.label, o.kind, o.fmt, o.file, o.line, o.col)
    if s and s.kind == "function" and s.detail.get("call") == "exp2" and o.argument != "log2e":
        s.function = "exp2"
    return s


def _quantizer_sites(q, kind: str, file) -> list:
    """A quantizer output's sites.  Group quantizers (``quantize_group``): the codes' rounding to
    the fp8 format, and the UE8M0 scale's log2 then ceil.  MX (``quantize_mx``): the codes'
    rounding to the element format; for codes and scales the shared exponent, floor or ceil of
    a log2 by the rule (read from the exponent bits or computed by an approximate log2: the
    bound admits both).  NVFP4 (``quantize_nvfp4``): the e2m1 codes, and the e4m3 rounding of
    the block scale, which the scales are and the codes are divided by; the tensor scale has
    fp32 arithmetic only.  Codes saturate."""
    from ..calculus.quant_mx import MXQuantizer, NVFP4Quantizer
    m = _LABEL.match(q.label)
    line = int(m.group(3)) if m else None
    what = m.group(1) if m else q.label
    fmt = str(q.fmt)
    out = []

    def site(kind_, text, fmt_, **kw):
        out.append(RefSite(kind_, f"{what}: {text}", fmt_, file, line, None, q.label, **kw))
    if kind == "codes":
        site("quantize-codes", "codes", fmt, detail={"overflow": "saturate"})
    if isinstance(q, NVFP4Quantizer):
        if kind in ("codes", "scales"):
            site("quantize-codes", "e4m3 block scale", "e4m3fn", detail={"overflow": "saturate"})
        return out
    if isinstance(q, MXQuantizer):
        rounding = "floor" if q.rule == "floor" else "ceil"
        of = "the block's amax" if q.rule == "floor" else "amax / fmax"
        site("function", f"log2 of {of}", "fp32", function="log2", detail={"exact_ok": True})
        site("round-int", f"{rounding} of log2", "fp32", detail={"name": rounding})
    elif q.rule == "ue8m0":
        site("function", "log2 of the scale", "fp32", function="log2", detail={"exact_ok": True})
        site("round-int", "ceil of log2", "fp32", detail={"name": "ceil"})
    return out
