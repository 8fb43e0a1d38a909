"""The plan check's evidence: every registered kernel against its reference, and the mutation
engine's mutants (``numoracle.studies.mutation``) classified by whether they change the compiled
precision plan, then checked (docs/plan.md, docs/results/2026-12-01-plan-*).

A mutant *changes the plan* when its compiled kernels' precision signature differs from the
original's on some example: per output the operator judges, the multiset, over the sites whose
value reaches that output, of the roundings to formats narrower than fp32 (with their rounding mode), the
math functions with their implementation, the reductions, loop-carried sums and dots with their
formats, roundings to an integer, bitcasts with what their integer arithmetic computes (an exponent
read, a power of two, a rounding by comparisons: ``encoding.py``), and the host steps that round
or reduce.  That is read from the IR alone, before and independently of any
reference; the check is then judged on whether it flags the mutants that change the plan and
none of those that do not.  A mutant is flagged when its report has a disagreement the
original kernel's report on the same example does not have.
"""

from __future__ import annotations

import itertools
import time
from collections import Counter
from dataclasses import dataclass, field

import torch

from .. import operators
from ..studies.mutation.engine import jit_callees, load_source, parse_spec, _module_source
from ..studies.mutation.mutators import MUTATORS, apply_site, enumerate_sites
from . import check_plan, extract_plan
from . import kernel as K

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
# mutation operators whose every effect is on the precision plan (others change the algorithm:
# constants, divisors, masks, indices, clamps); a mutant of either kind counts as a plan change
# exactly when its compiled signature changes
PLAN_OPERATORS = ("widening_dropped", "reduction_in_storage", "earlier_downcast", "later_downcast",
                  "truncating_store", "double_rounding", "gelu_form_swapped", "special_function_swapped",
                  "exp_to_exp2")


def examples(op, seeds=range(8), formats=None, per_params: int = 1) -> list:
    """[((format, seed), inputs, params)]: one example (``per_params`` of them) for each distinct
    set of parameters and input dtypes and shapes that the operator's examples and domain
    choices give over ``seeds``, per format.  A compiled plan depends on those, not on the
    values; the example's own parameters win over domain choices, as in campaigns."""
    formats = list(formats or op.domain.formats)
    choices = op.domain.params
    names = list(choices)
    combos = [dict(zip(names, vals)) for vals in itertools.product(*[choices[n] for n in names])] if names else [{}]
    if len(combos) > 8:           # one choice changed at a time from the defaults
        base = {n: choices[n][0] for n in names}
        combos = [base] + [dict(base, **{n: v}) for n in names for v in choices[n][1:]]
    out, count = [], Counter()
    for fmt in formats:
        for seed in seeds:
            inputs, ex = op.example(seed, dtype=DTYPES[fmt])
            for c in combos:
                params = {**c, **ex}
                shapes = tuple((str(t.dtype), tuple(t.shape)) for t in inputs if isinstance(t, torch.Tensor))
                key = (fmt, repr(sorted(params.items())), shapes)
                if count[key] < per_params:
                    count[key] += 1
                    out.append(((fmt, seed), inputs, params))
    return out


def signature(kplan) -> tuple:
    """The precision signature of a kernel plan (module docstring): per output the operator
    judges, a multiset over the sites that reach it (a kernel may compute more than its operator
    judges: Liger's cross-entropy forward also writes the gradient)."""
    from .cones import Cones
    cones = Cones(kplan)
    out = []
    for storage, _, _ in kplan.capture.outputs:
        keys = set()
        if storage is not None:
            for c in cones.output(storage):
                keys |= c.keys
        out.append(_site_multiset(cones, keys))
    return tuple(out)


def _site_multiset(cones, keys) -> Counter:
    sig = Counter()
    for key in keys:
        _, s, lvl = cones.items[key]
        k = s.kind
        if lvl is not None and lvl.detail.get("loop"):
            sig[("loop", lvl.fmt)] += 1
        elif k == "cast" and s.rounds:
            sig[("cast", s.src_fmt, s.fmt, s.rounding, s.detail.get("overflow"), s.op == "compare-round")] += 1
        elif k == "arith" and s.rounds and K.is_low(s.fmt):
            sig[("arith", s.op, s.fmt)] += 1
        elif k == "math":
            sig[("math", s.function, s.implementation, s.fmt)] += 1
        elif k in ("reduce", "scan") and s.detail.get("sum"):
            sig[(k, s.detail.get("combine"), s.fmt)] += 1
        elif k == "dot":
            sig[("dot", s.src_fmt, s.detail.get("b_fmt"), s.fmt, s.detail.get("precision"))] += 1
        elif k == "bits":
            # what the integer arithmetic on the encoding computes (encoding.py), if recognised
            sig[(k, s.op, s.fmt, s.detail.get("encoding"), s.detail.get("rounding"), s.detail.get("by"))] += 1
        elif k in ("round-int", "atomic"):
            sig[(k, s.op, s.fmt)] += 1
        elif k == "host" and (s.rounds or s.detail.get("host_kind") in ("sum", "dot", "math")):
            sig[("host", s.detail.get("host_kind"), s.src_fmt, s.fmt)] += 1
    return sig


@dataclass
class KernelRow:
    op: str
    kernel: str
    example: str
    params: dict
    ok: bool
    disagreements: list
    seconds: float


def check_kernels(op, kernels=None, exs=None) -> list:
    """The plan check of each of ``kernels`` (default: correct and variants) on each example."""
    kernels = kernels or [k for k in op.kernel_specs if k not in operators.UPSTREAM_KERNELS]
    rows = []
    for kname in kernels:
        for ex, inputs, params in exs or examples(op):
            t = time.perf_counter()
            r = check_plan(op, kname, inputs, params)
            rows.append(KernelRow(op.name, kname, f"{ex[0]} seed {ex[1]}", params, r.ok,
                                  [d.to_dict() for d in r.disagreements], time.perf_counter() - t))
    return rows


@dataclass
class MutantRow:
    op: str
    kernel: str
    operator: str
    function: str
    line: int
    change: str
    status: str                  # "compiled" | "does not compile" | "does not load"
    plan_changed: bool = False
    flagged: bool = False
    flagged_on_unchanged: bool = False
    new: list = field(default_factory=list)      # the new disagreements' messages
    error: str = ""

    def to_dict(self) -> dict:
        return dict(self.__dict__)


def _reached(op, spec_name, exs) -> set:
    """The module's jit functions the kernel launches on the examples, and their jit callees."""
    mod, fn, pick = parse_spec(op.kernel_specs[spec_name])
    callees = jit_callees(_module_source(mod))
    launched = set()
    for _, inputs, params in exs:
        try:
            kp = extract_plan(op.kernels[spec_name], inputs, params)
        except Exception:
            continue
        launched |= {l.name for l in kp.capture.launches}
    seen, todo = set(), [n for n in launched if n in callees]
    while todo:
        f = todo.pop()
        if f not in seen:
            seen.add(f)
            todo.extend(callees.get(f, ()))
    return seen


def mutants(op, exs):
    """(kernel spec, module, site, mutated source) for every site the kernels reach; a site
    belongs to the first kernel (correct, then the variants) that reaches it."""
    claimed, mods = {}, []
    for spec in op.kernel_specs:
        if spec in operators.UPSTREAM_KERNELS:
            continue
        mod = parse_spec(op.kernel_specs[spec])[0]
        if mod not in mods:
            mods.append(mod)
        for f in sorted(_reached(op, spec, exs)):
            claimed.setdefault((mod, f), spec)
    seen = set()
    for mod in mods:
        funcs = {f for (m, f) in claimed if m == mod}
        if not funcs:
            continue
        src = _module_source(mod)
        for s in enumerate_sites(src, functions=funcs | {"<module>"}):
            spec = claimed.get((mod, s.func))
            if spec is None:
                continue
            new = apply_site(src, s)
            if new in seen:
                continue
            seen.add(new)
            yield spec, mod, s, new


def mutation_study(op, exs=None, *, kinds=None, progress=None) -> list:
    """Every mutant of ``op``'s kernels: does it change the compiled plan, is it flagged."""
    from ..operators import pick_outputs
    from .check import check
    from .reference import reference_plan
    exs = exs or examples(op)
    # the reference's plan does not depend on the kernel: read it once per example
    rplans = [reference_plan(op.reference, inputs, params) for _, inputs, params in exs]
    base = {}
    for spec in op.kernel_specs:
        if spec in operators.UPSTREAM_KERNELS:
            continue
        for (ex, inputs, params), rp in zip(exs, rplans):
            kp = extract_plan(op.kernels[spec], inputs, params)
            r = check(kp, rp)
            base[(spec, ex, repr(sorted(params.items())))] = (signature(kp), {_key(d) for d in r.disagreements})
    rows = []
    for i, (spec, mod, site, src) in enumerate(mutants(op, exs)):
        if kinds is not None and site.kind not in kinds:
            continue
        row = MutantRow(op.name, spec, site.kind, site.func, site.line, site.detail, "compiled")
        try:
            module = load_source(mod, src, f"plan-{op.name}-{i}")
            _, fn, pick = parse_spec(op.kernel_specs[spec])
            kern = pick_outputs(getattr(module, fn), pick[0] if pick else None)
        except Exception as exc:           # noqa: BLE001 - a mutant that is not valid Python
            row.status, row.error = "does not load", repr(exc)[:200]
            rows.append(row)
            continue
        compiled = 0
        for (ex, inputs, params), rp in zip(exs, rplans):
            sig0, dis0 = base[(spec, ex, repr(sorted(params.items())))]
            try:
                kp = extract_plan(kern, inputs, params)
                r = check(kp, rp)
            except Exception as exc:       # noqa: BLE001 - Triton rejects the mutant on this example
                row.error = repr(exc)[:200]
                continue
            compiled += 1
            changed = signature(kp) != sig0
            new = [d for d in r.disagreements if _key(d) not in dis0]
            row.plan_changed |= changed
            if new:
                row.flagged = True
                row.flagged_on_unchanged |= not changed
                row.new.extend(d.message for d in new if d.message not in row.new)
        if not compiled:
            row.status = "does not compile"
        rows.append(row)
        if progress:
            progress(row)
    return rows


def _key(d) -> tuple:
    """A disagreement's identity across a kernel and its mutant (whose source file differs)."""
    return (d.kind, d.message, tuple(d.reference), tuple(d.outputs))


def summary(rows: list) -> dict:
    """Per mutation operator: mutants, plan changes, how many of those flagged, and flags on
    unchanged plans."""
    out = {}
    for r in rows:
        s = out.setdefault(r.operator, Counter())
        s["mutants"] += 1
        s[r.status] += 1
        if r.status != "compiled":
            continue
        if r.plan_changed:
            s["plan_changed"] += 1
            s["flagged"] += r.flagged
        else:
            s["plan_unchanged"] += 1
            s["flagged_unchanged"] += r.flagged
    return {k: dict(v) for k, v in sorted(out.items(), key=lambda kv: list(MUTATORS).index(kv[0]))}


def registry_rows(names=None, formats=None) -> list:
    """The plan check of every registered kernel (correct and variants) on every example."""
    rows = []
    for name in names or operators.names():
        op = operators.get(name)
        rows.extend(check_kernels(op, exs=examples(op, formats=formats)))
    return rows


def timing(names=None) -> list:
    """Seconds per correct kernel on its first example: capture, compile and read, the reference's
    plan, the comparison."""
    from .check import check
    from .reference import reference_plan
    out = []
    for name in names or operators.names():
        op = operators.get(name)
        inputs, params = op.example(0)
        t0 = time.perf_counter()
        kp = extract_plan(op.kernels["correct"], inputs, params)
        t1 = time.perf_counter()
        rp = reference_plan(op.reference, inputs, params, launch=kp.capture.launch_values())
        t2 = time.perf_counter()
        check(kp, rp)
        t3 = time.perf_counter()
        out.append({"op": name, "launches": len(kp.capture.launches), "compiled": len(kp.distinct()),
                    "capture": kp.seconds["capture"], "compile_and_read": kp.seconds["compile_and_read"],
                    "reference": t2 - t1, "check": t3 - t2, "total": t3 - t0})
    return out


def main(argv=None) -> int:
    """``python -m numoracle.plan.study registry|mutants OUT.json``: the evidence as JSON (and a
    text summary beside it)."""
    import argparse
    import json
    p = argparse.ArgumentParser(prog="python -m numoracle.plan.study")
    p.add_argument("what", choices=("registry", "mutants", "timing"))
    p.add_argument("out")
    p.add_argument("--op", action="append", default=None, help="operators (default: all)")
    p.add_argument("--format", action="append", default=None, help="formats (default: each operator's; "
                                                                  "mutants: bf16)")
    a = p.parse_args(argv)
    names = a.op or operators.names()
    lines = []
    if a.what == "timing":
        data = timing(names)
        lines.append(f"{'operator':28s} {'launches':>8s} {'compiled':>8s} {'capture':>8s} {'compile+read':>12s} "
                     f"{'reference':>9s} {'check':>7s} {'total':>7s}")
        for d in data:
            lines.append(f"{d['op']:28s} {d['launches']:8d} {d['compiled']:8d} {d['capture']:8.3f} "
                         f"{d['compile_and_read']:12.3f} {d['reference']:9.3f} {d['check']:7.3f} {d['total']:7.3f}")
        tot = sorted(d["total"] for d in data)
        lines.append(f"per kernel: median {tot[len(tot) // 2]:.3f}s, max {tot[-1]:.3f}s (one example, bf16, "
                     f"compiled for sm90 in this process, no GPU)")
    elif a.what == "registry":
        rows = registry_rows(names, a.format)
        data = [r.__dict__ | {"params": {k: repr(v) for k, v in r.params.items()}} for r in rows]
        times = sorted(r.seconds for r in rows)
        lines.append(f"{len(rows)} checks: {sum(r.ok for r in rows)} agree, {sum(not r.ok for r in rows)} disagree; "
                     f"seconds per check: median {times[len(times) // 2]:.3f}, max {times[-1]:.3f}")
        for r in rows:
            if not r.ok:
                lines.append(f"{r.op} / {r.kernel} ({r.example}, {r.params}): " +
                             "; ".join(f"{d['kind']}: {d['message']}" for d in r.disagreements))
    else:
        rows = []
        for name in names:
            op = operators.get(name)
            t = time.perf_counter()
            got = mutation_study(op, examples(op, formats=a.format or ("bf16",)))
            rows.extend(got)
            lines.append(f"{name}: {len(got)} mutants in {time.perf_counter() - t:.0f}s")
        data = [r.to_dict() for r in rows]
        lines.append("")
        lines.append(f"{'mutation operator':26s} {'mutants':>8s} {'no compile':>10s} {'plan changed':>12s} "
                     f"{'flagged':>8s} {'rate':>6s} {'unchanged':>9s} {'flagged':>8s}")
        for kind, s in summary(rows).items():
            ch = s.get("plan_changed", 0)
            lines.append(f"{kind:26s} {s['mutants']:8d} {s.get('does not compile', 0) + s.get('does not load', 0):10d} "
                         f"{ch:12d} {s.get('flagged', 0):8d} {(s.get('flagged', 0) / ch if ch else float('nan')):6.0%} "
                         f"{s.get('plan_unchanged', 0):9d} {s.get('flagged_unchanged', 0):8d}")
        lines.append("")
        for r in rows:
            if r.status == "compiled" and ((r.plan_changed and not r.flagged) or r.flagged_on_unchanged):
                lines.append(f"{'not flagged' if r.plan_changed else 'flagged, plan unchanged'}: {r.op} {r.kernel} "
                             f"{r.operator} {r.function}:{r.line} {r.change}")
    with open(a.out, "w", encoding="utf-8") as f:
        json.dump(data, f, indent=1, default=str)
    with open(a.out.rsplit(".", 1)[0] + ".txt", "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines[:60]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
