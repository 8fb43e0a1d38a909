"""Mutation campaigns: mutants of an operator's kernels, run over the same cases
as its correct kernel and variants, judged by numoracle and every baseline.

* Mutants are made by :mod:`numoracle.studies.mutation.mutators` from the source of each
  kernel module of the operator; a mutant is compiled by exec'ing the mutated
  module source (our own package code) in a fresh module namespace, and called
  through the same wrapper function as the kernel it mutates.
* Which ``@triton.jit`` functions a kernel reaches is measured: the wrapper is run
  once with launches recorded, then the jit helpers those kernels call are added.
  A site belongs to the first kernel (``correct`` first, then the variants) that
  reaches it; sites no kernel reaches (e.g. a backward kernel) are not mutated.
* Outcomes per mutant: ``equivalent`` (outputs bit-identical to the kernel's on
  every run — excluded from "effective"), ``crash`` (an exception, or a non-finite
  output where the kernel's is finite, on some run: a crash-kill, counted apart),
  else ``effective``: an oracle kills it when it fails a run whose outputs differ
  from the kernel's; numoracle kills when it rejects and the fixed-input check
  confirms the reject.
"""

from __future__ import annotations

import ast
import importlib
import linecache
import math
import os
import sys
import time
import types
from dataclasses import dataclass, field

from .. import runs as CR
from ...families import GROUPS
from ...strategies import group_cases
from ... import operators
from ...config import settings
from ...runner.worker import RECIPE
from .mutators import MUTATORS, Site, apply_site, enumerate_sites, jit_functions

ORACLE_ORDER = ("numoracle", "assert_close", "upstream", "tuned", "ulp2", "flash2x")


def _module_source(modname: str) -> str:
    mod = importlib.import_module(modname)
    with open(mod.__file__, encoding="utf-8") as f:
        return f.read()


_COUNTER = [0]


def load_source(modname: str, source: str, tag: str = "") -> types.ModuleType:
    """Exec ``source`` as a fresh module beside ``modname`` (relative imports resolve in its
    package); its source is registered in linecache so Triton can read the jit functions."""
    _COUNTER[0] += 1
    filename = f"<numoracle-mutant {modname} {tag or _COUNTER[0]}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    m = types.ModuleType(f"{modname}__mutant{_COUNTER[0]}")
    m.__package__ = modname.rpartition(".")[0]
    m.__file__ = filename
    # a module that registers operators at import must not re-register them from the copy
    saved = dict(operators.REGISTRY)
    sys.modules[m.__name__] = m          # some Triton versions look the jit function's module up
    try:
        exec(compile(source, filename, "exec"), m.__dict__)
    finally:
        operators.REGISTRY.clear()
        operators.REGISTRY.update(saved)
    return m


def _wrapper(module, fn_name: str, pick):
    from ...operators import pick_outputs
    return pick_outputs(getattr(module, fn_name), pick[0] if pick else None)


def mutant_kernel(modname: str, source: str, tag: str, fn_name: str, pick: tuple):
    """A mutant's kernel made from its source: what a worker process runs (runner.worker)."""
    return _wrapper(load_source(modname, source, tag), fn_name, list(pick))


def parse_spec(spec: str):
    mod, fn, *pick = spec.split(":")
    return mod, fn, pick


def jit_callees(source: str) -> dict:
    """jit function name -> names of the module's jit functions it calls."""
    tree = ast.parse(source)
    jits = {f.name: f for f in jit_functions(tree)}
    return {name: {n.id for n in ast.walk(f) if isinstance(n, ast.Name) and n.id in jits and n.id != name}
            for name, f in jits.items()}


def reached_functions(op, spec_name: str, case, backend="interpreter") -> set:
    """The module's jit functions the kernel ``spec_name`` reaches on ``case``: the kernels it
    launches (recorded while it runs) and, transitively, the jit helpers they call.  Empty for
    a module with no ``@triton.jit`` function of its own (an adapter to another package)."""
    modname, fn, pick = parse_spec(op.kernel_specs[spec_name])
    source = _module_source(modname)
    callees = jit_callees(source)
    if not callees:
        return set()
    m = load_source(modname, source, f"trace-{spec_name}")
    objs = {id(getattr(m, n)): n for n in callees if hasattr(m, n)}
    launched = set()
    patched = {}
    for n in callees:
        t = type(getattr(m, n))
        if t in patched:
            continue
        orig = getattr(t, "__getitem__", None)
        if orig is None:
            continue
        patched[t] = orig

        def rec(self, grid, _orig=orig):
            if id(self) in objs:
                launched.add(objs[id(self)])
            return _orig(self, grid)
        t.__getitem__ = rec
    try:
        from ...backends import resolve
        from ...runner.execute import execute
        inputs, params = case.materialize(resolve(backend).device, op)
        execute(_wrapper(m, fn, pick), inputs, params, isolate=False)     # the launches are recorded here
    finally:
        for t, orig in patched.items():
            t.__getitem__ = orig
    seen, todo = set(), list(launched)
    while todo:
        f = todo.pop()
        if f in seen:
            continue
        seen.add(f)
        todo.extend(callees.get(f, ()))
    return seen


# Mutants that may address memory outside their tensors.  On the interpreter an out-of-bounds
# store lands in the host heap (and can abort the process), so these run in a forked child.
MEMORY_UNSAFE = frozenset({"mask_off_by_one", "scale_index_changed"})


def _isolated(fn, timeout=300.0):
    """fn() in a forked child process: ("ok", result), ("err", text) or ("died", text).  A child
    that hangs (glibc can hang aborting on a corrupted heap) is killed after ``timeout`` s."""
    import pickle
    import select
    import signal
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:                                   # child
        os.close(r)
        # only the forking thread survives a fork: a thread pool inherited mid-state (OpenMP
        # is not fork-safe) would deadlock the first parallel op, so run single-threaded
        import torch
        torch.set_num_threads(1)
        try:
            data = pickle.dumps(("ok", fn()))
        except BaseException as exc:               # noqa: BLE001 - reported to the parent
            data = pickle.dumps(("err", repr(exc)[:300]))
        with os.fdopen(w, "wb") as f:
            f.write(data)
        os._exit(0)
    os.close(w)
    chunks, end, hung = [], time.time() + timeout, False
    with os.fdopen(r, "rb") as f:
        while True:
            left = end - time.time()
            ready = select.select([f], [], [], max(left, 0))[0] if left > 0 else []
            if not ready:
                hung = True
                break
            b = os.read(f.fileno(), 1 << 16)
            if not b:
                break
            chunks.append(b)
    if hung:
        os.kill(pid, signal.SIGKILL)
    _, status = os.waitpid(pid, 0)
    data = b"".join(chunks)
    if hung or not data:
        return ("died", f"the process running the mutant {'hung' if hung else 'died'} (wait status {status}): "
                        f"memory corrupted by an out-of-bounds access")
    return pickle.loads(data)


@dataclass
class Mutant:
    id: str
    spec: str                 # kernel it mutates (correct or a variant name)
    module: str
    site: Site
    status: str = ""          # equivalent | crash | effective | load_error
    killed: dict = field(default_factory=dict)     # oracle -> bool
    stat_only: bool = False   # numoracle rejected statistically without fixed-input confirmation
    error: str = ""
    maxneed: list = field(default_factory=list)    # per grid rtol: the largest required atol
    n_runs: int = 0
    n_differing: int = 0

    def to_dict(self) -> dict:
        return {"id": self.id, "kernel": self.spec, "module": self.module, "operator": self.site.kind,
                "function": self.site.func, "line": self.site.line, "change": self.site.detail,
                "status": self.status, "killed": self.killed, "numoracle_statistical_only": self.stat_only,
                "runs": self.n_runs, "runs_differing": self.n_differing, "error": self.error,
                "grid_required_atol": [x if math.isfinite(x) else "inf" for x in self.maxneed]}


def _select(sites, max_mutants):
    """Up to max_mutants sites, taken round-robin over mutation operators (site order within
    one operator kept), so every operator that applies is represented."""
    if max_mutants is None or len(sites) <= max_mutants:
        return list(sites)
    by_kind = {}
    for s in sites:
        by_kind.setdefault(s.kind, []).append(s)
    out, i = [], 0
    while len(out) < max_mutants:
        progressed = False
        for k in MUTATORS:
            lst = by_kind.get(k, [])
            if i < len(lst):
                out.append(lst[i])
                progressed = True
                if len(out) == max_mutants:
                    break
        if not progressed:
            break
        i += 1
    return out


def plan_mutants(op, case, *, max_mutants=None, kinds=None, backend="interpreter"):
    """The mutants of every kernel module of ``op``: (spec, module name, site, mutated source)."""
    claimed = {}                     # (module, function) -> spec
    for spec in op.kernel_specs:
        mod = parse_spec(op.kernel_specs[spec])[0]
        for f in sorted(reached_functions(op, spec, case, backend)):
            claimed.setdefault((mod, f), spec)
    plans, seen_src = [], set()
    mods = []
    for spec in op.kernel_specs:
        mod = parse_spec(op.kernel_specs[spec])[0]
        if mod not in mods:
            mods.append(mod)
    for mod in mods:
        funcs = {f for (m, f) in claimed if m == mod}
        if not funcs:
            continue                 # no jit function of this module is reached
        src = _module_source(mod)
        owner_of_module = next(s for s in op.kernel_specs if parse_spec(op.kernel_specs[s])[0] == mod)
        sites = enumerate_sites(src, functions=funcs | {"<module>"}, kinds=kinds)
        for s in sites:
            spec = claimed.get((mod, s.func), owner_of_module)
            new = apply_site(src, s)
            if new in seen_src:
                continue
            seen_src.add(new)
            plans.append((spec, mod, s, new))
    chosen = _select([p[2] for p in plans], max_mutants)
    keep = {id(s) for s in chosen}
    return [p for p in plans if id(p[2]) in keep]


@dataclass
class Campaign:
    op: str
    backend: str
    dtype: str
    groups: list
    cases: list
    oracles: list
    tuned: dict
    kernel_runs: dict               # spec -> [Run]
    faulty_runs: dict               # faulty name -> [Run]
    mutants: list
    invalid_cases: list
    atols: tuple = CR.DEFAULT_ATOLS
    rtols: tuple = CR.DEFAULT_RTOLS
    seconds: float = 0.0

    # ---- summaries
    def false_alarms(self) -> dict:
        """oracle -> group -> [failing runs, runs] over the correct kernel and its variants."""
        out = {o: {} for o in self.oracles}
        for runs in self.kernel_runs.values():
            for r in runs:
                if r.outcome == "crash":      # a kernel error, reported under kernel_errors
                    continue
                for o in self.oracles:
                    cell = out[o].setdefault(r.case.group, [0, 0])
                    cell[1] += 1
                    cell[0] += int(r.fails(o) if o != "numoracle" else r.numoracle == "reject")
        return out

    def numoracle_false_alarm_runs(self) -> list:
        return [r.to_dict() for runs in self.kernel_runs.values() for r in runs
                if r.numoracle == "reject" and r.outcome != "crash"]

    def counts(self) -> dict:
        st = {"total": len(self.mutants)}
        for s in ("equivalent", "crash", "effective", "load_error"):
            st[s] = sum(m.status == s for m in self.mutants)
        eff = [m for m in self.mutants if m.status == "effective"]
        st["kills"] = {o: sum(bool(m.killed.get(o)) for m in eff) for o in self.oracles}
        st["numoracle_statistical_only"] = sum(m.stat_only for m in eff)
        return st

    def frontier(self, max_fa: float = 0.01) -> dict:
        """Over the (atol, rtol) grid: the most effective non-crash mutants any configuration
        kills while its false-alarm rate stays ≤ max_fa in every input group."""
        eff = [m for m in self.mutants if m.status == "effective"]
        runs = [r for rs in self.kernel_runs.values() for r in rs if r.outcome != "crash"]
        groups = sorted({r.case.group for r in runs})
        best, best_cfg, n_ok = -1, None, 0
        for a in self.atols:
            for k, rt in enumerate(self.rtols):
                ok = True
                for g in groups:
                    rg = [r for r in runs if r.case.group == g]
                    fails = sum((r.need[k] if r.outcome == "ok" and r.need else math.inf) > a for r in rg)
                    if rg and fails / len(rg) > max_fa:
                        ok = False
                        break
                if not ok:
                    continue
                n_ok += 1
                kills = sum(m.maxneed[k] > a for m in eff if m.maxneed)
                if kills > best:
                    best, best_cfg = kills, {"atol": a, "rtol": rt}
        return {"max_false_alarm_rate": max_fa, "configurations": len(self.atols) * len(self.rtols),
                "configurations_within": n_ok, "best_kills": max(best, 0), "best": best_cfg,
                "numoracle_kills": sum(bool(m.killed.get("numoracle")) for m in eff),
                "mutants": len(eff)}

    def to_dict(self) -> dict:
        return {"op": self.op, "backend": self.backend, "dtype": self.dtype, "groups": self.groups,
                "cases": len(self.cases), "invalid_cases": self.invalid_cases, "oracles": self.oracles,
                "tuned_tolerance": self.tuned, "seconds": round(self.seconds, 1),
                "kernels": {k: len(v) for k, v in self.kernel_runs.items()},
                "kernel_errors": {k: sum(r.outcome != "ok" for r in v) for k, v in self.kernel_runs.items()},
                "kernel_error_examples": {k: next(r.error for r in v if r.outcome == "crash")
                                          for k, v in self.kernel_runs.items()
                                          if any(r.outcome == "crash" for r in v)},
                "false_alarms": self.false_alarms(),
                "not_applicable_runs": {o: sum(1 for rs in self.kernel_runs.values() for r in rs
                                               if o in r.baselines and r.baselines[o].ratio != r.baselines[o].ratio)
                                        for o in self.oracles if o != "numoracle"},
                "numoracle_rejects_on_correct_and_variants": self.numoracle_false_alarm_runs(),
                "faulty": {k: {o: any(r.fails(o) for r in v) for o in self.oracles}
                           for k, v in self.faulty_runs.items()},
                "counts": self.counts(), "frontier": self.frontier(),
                "grid": {"atols": list(self.atols), "rtols": list(self.rtols),
                         "kernel_runs": [{"group": r.case.group, "kernel": r.kernel,
                                          "required_atol": [x if math.isfinite(x) else "inf"
                                                            for x in (r.need if r.outcome == "ok" and r.need
                                                                      else [math.inf] * len(self.rtols))]}
                                         for rs in self.kernel_runs.values() for r in rs if r.outcome != "crash"]},
                "mutants": [m.to_dict() for m in self.mutants]}


def run_campaign(op_name, *, backend="interpreter", dtype="bf16", groups=None, per_group=2, rows=4,
                 cols=96, seed=0, max_mutants=None, kinds=None, k_ulp=2.0, n_cal=8, progress=None,
                 deadline=None, params=None) -> Campaign:
    """The mutation campaign of one operator (module docstring)."""
    from ...backends import select
    backend = select(backend).name
    t0 = time.time()
    op = operators.resolve(op_name)
    op_name = op.name            # a spec or an Operator object names it in ids and reports by its name
    baselines = CR.oracles_for(op, dtype=dtype, rows=rows, cols=cols, backend=backend, n_cal=n_cal,
                               k_ulp=k_ulp, params=params)
    oracles = ["numoracle"] + [b.name for b in baselines]
    tuned = next(b for b in baselines if b.name == "tuned").to_dict()
    cases = group_cases(op, groups, per_group, dtype, rows, cols, seed, params=params)
    # one evaluation of the reference per case, shared by every kernel, variant and mutant
    evaluations: dict = {}
    correct = CR.run_kernel(op, op.kernels["correct"], "correct", cases, baselines, backend=backend,
                            evaluations=evaluations)
    invalid = [r.case.to_dict() | {"error": r.error} for r in correct if r.outcome == "crash"]
    cases = [r.case for r in correct if r.outcome != "crash"]
    kernel_runs = {"correct": [r for r in correct if r.outcome != "crash"]}
    for spec in op.kernel_specs:
        if spec != "correct":
            kernel_runs[spec] = CR.run_kernel(op, op.kernels[spec], spec, cases, baselines, backend=backend,
                                              evaluations=evaluations)
    faulty_runs = {}
    for name in op.faulty:
        faulty_runs[name] = CR.run_kernel(op, op.faulty_kernel(name), name, cases, baselines, backend=backend,
                                          evaluations=evaluations)
    if progress:
        progress(f"{op_name}: {len(cases)} cases, {len(op.kernel_specs)} kernels, {len(op.faulty)} faulty "
                 f"({time.time() - t0:.0f}s)")
    plans = plan_mutants(op, cases[0], max_mutants=max_mutants, kinds=kinds, backend=backend)
    mutants = []
    for i, (spec, mod, site, src) in enumerate(plans):
        if deadline is not None and time.time() > deadline:
            if progress:
                progress(f"{op_name}: time budget reached after {i} of {len(plans)} mutants")
            break
        m = Mutant(f"{op_name}-m{i:03d}", spec, mod, site)
        mutants.append(m)
        base = kernel_runs[spec]
        reuse = {(r.case, r.digest): r for r in base}
        try:
            module = load_source(mod, src, m.id)
            _, fn, pick = parse_spec(op.kernel_specs[spec])
            kern = _wrapper(module, fn, pick)
            setattr(kern, RECIPE, ("call", "numoracle.studies.mutation.engine:mutant_kernel",
                                   (mod, src, m.id, fn, tuple(pick))))
        except Exception as exc:
            m.status, m.error = "load_error", repr(exc)[:300]
            continue
        def go(kern=kern, base=base, reuse=reuse, mid=m.id):
            return CR.run_kernel(op, kern, mid, [r.case for r in base], baselines, backend=backend, reuse=reuse,
                                 evaluations=evaluations)
        if (site.kind in MEMORY_UNSAFE and backend == "interpreter" and hasattr(os, "fork")
                and not settings.default.isolate):      # isolated, the worker process takes the crash
            how, runs = _isolated(go, timeout=max(30.0, 10.0 * len(base)))
            if how != "ok":
                m.status, m.error = "crash", runs
                m.killed = {o: True for o in oracles}
                continue
        else:
            runs = go()
        m.n_runs = len(runs)
        differing = [(r, b) for r, b in zip(runs, base) if r.digest != b.digest or r.outcome == "crash"]
        m.n_differing = len(differing)
        if not differing:
            m.status = "equivalent"
            continue
        if any(r.outcome != "ok" and b.outcome == "ok" for r, b in differing):
            m.status = "crash"
            m.error = next((r.error for r, _ in differing if r.error), "non-finite output")
            m.killed = {o: True for o in oracles}
            continue
        m.status = "effective"
        m.killed = {o: any(r.fails(o) for r, _ in differing) for o in oracles}
        m.stat_only = any(r.numoracle == "reject" and not r.confirmed for r, _ in differing) \
            and not m.killed["numoracle"]
        m.maxneed = [max((r.need[k] if r.outcome == "ok" else math.inf) for r, _ in differing)
                     for k in range(len(CR.DEFAULT_RTOLS))]
        if progress:
            progress(f"  {m.id} {site.kind:24s} {m.status:10s} "
                     + " ".join(o for o in oracles if m.killed.get(o)))
    return Campaign(op_name, backend, dtype, list(groups or GROUPS), cases, oracles, tuned, kernel_runs,
                    faulty_runs, mutants, invalid, seconds=time.time() - t0)


def kill_table(c: Campaign) -> str:
    """The kill matrix as text: one row per mutant, one column per oracle."""
    short = {"numoracle": "numor", "assert_close": "aclose", "upstream": "upstr", "tuned": "tuned",
             "ulp2": "ulp2", "flash2x": "flash"}
    cols = c.oracles
    head = f"{'mutant':16s} {'kernel':10s} {'operator':24s} {'status':10s} " + " ".join(
        f"{short.get(o, o[:6]):>6s}" for o in cols) + "  change"
    lines = [head, "-" * len(head)]
    for m in c.mutants:
        marks = " ".join(f"{('X' if m.killed.get(o) else '.') if m.status in ('effective', 'crash') else '-':>6s}"
                         for o in cols)
        lines.append(f"{m.id:16s} {m.spec[:10]:10s} {m.site.kind:24s} {m.status:10s} {marks}  "
                     f"{m.site.func}:{m.site.line} {m.site.detail[:60]}")
    st = c.counts()
    lines.append("")
    lines.append(f"{st['total']} mutants: {st['effective']} effective, {st['crash']} crash-killed, "
                 f"{st['equivalent']} equivalent (bit-identical on every run), {st['load_error']} not loadable")
    lines.append("kills of the effective (non-crash) mutants: " + ", ".join(
        f"{o} {st['kills'][o]}/{st['effective']}" for o in cols))
    fa = c.false_alarms()
    lines.append("false alarms on the correct kernel and variants (failing runs / runs):")
    for o in cols:
        tot = sum(v[0] for v in fa[o].values())
        n = sum(v[1] for v in fa[o].values())
        worst = max(((v[0] / v[1], g) for g, v in fa[o].items() if v[1]), default=(0, ""))
        lines.append(f"  {o:14s} {tot}/{n}" + (f"  (worst group {worst[1]}: {worst[0]:.0%})" if tot else ""))
    fr = c.frontier()
    lines.append(f"tuned-tolerance frontier: of {fr['configurations']} (atol, rtol) configurations, "
                 f"{fr['configurations_within']} keep <= 1% false alarms in every group; the best kills "
                 f"{fr['best_kills']}/{fr['mutants']} (at {fr['best']}); numoracle kills {fr['numoracle_kills']}")
    return "\n".join(lines)
