"""``numoracle stress-tolerances OP``: how a fixed (atol, rtol) — or a grid of
them — fares against the same runs numoracle judges (docs/design.md §10).

For each input group, Hypothesis searches the operator's domain (seed, shape,
parameter choices) for **false alarms** on the correct kernel and its variants,
steered by ``target()`` toward the run that comes closest to failing the
strictest configurations still clean; the faulty kernels (``op.faulty``) and,
with ``--mutants K``, K mutants are run on fixed cases of every group to count
each configuration's **kills** (a kill: the configuration fails a run whose
outputs differ from the correct kernel's).  A configuration (atol, rtol) fails
a run when some element has |y − e| > atol + rtol·|e|, e the reference rounded to
the output format (``numoracle.oracles.baselines``).

The worst false alarm of each group is saved as a corpus case (``--corpus``)
with ``numoracle.corpus`` (expect "accept": numoracle accepts it; the tolerance
rejected a correct kernel).
"""

from __future__ import annotations

import math
import time
import types

from ..errors import InvalidArgument


def search_group(op, group, specs, atols, rtols, *, examples, dtype, max_rows, max_cols, backend, seed=0,
                 params=None):
    """Hypothesis search in one input group; returns every judged run (correct kernel and variants)."""
    from hypothesis import HealthCheck, Phase, given, settings, target

    from ..strategies import cases
    from . import runs as CR
    strategy = cases(op, formats=[dtype], groups=[group], max_rows=max_rows, max_cols=max_cols, scale_exps=(0, 0),
                     specials=0, seeds=(seed, seed + 2 ** 20),
                     params={k: (v,) for k, v in (params or {}).items()} or None)
    found = []

    @settings(max_examples=examples, deadline=None, database=None, derandomize=True,
              phases=(Phase.generate, Phase.target), suppress_health_check=list(HealthCheck))
    @given(case=strategy)
    def probe(case):
        evaluations: dict = {}
        try:
            base = CR.run_kernel(op, op.kernels["correct"], "correct", [case], [], backend=backend,
                                 rtols=rtols, keep=True, evaluations=evaluations)
        except InvalidArgument:
            return
        if base[0].outcome == "crash":
            return                       # the example does not fit these parameters
        got = list(base)
        for spec in specs:
            if spec != "correct":
                got += CR.run_kernel(op, op.kernels[spec], spec, [case], [], backend=backend, rtols=rtols,
                                     keep=True, evaluations=evaluations)
        found.extend(got)
        # steer toward failing the strictest configuration: the required atol (at each rtol of
        # the grid) over the smallest atol of the grid, worst over runs and rtols, in log10
        floor = max(min(atols), 1e-12)
        score = max((nk for r in got if r.outcome == "ok" for nk in r.need), default=0.0) / floor
        target(math.log10(min(score, 1e300) + 1e-300), label="required atol / smallest atol")

    probe()
    return found


def _save(op, run, corpus, backend):
    from .. import corpus as C
    o = types.SimpleNamespace(inputs=run.observed.inputs, params=run.observed.params, outputs=run.outputs,
                              case=run.case, failure_class=None)
    return str(C.save(corpus, op, run.kernel, o, backend=backend, mode="statistical", expect="accept"))


def stress(op_name, *, atols, rtols, backend="interpreter", dtype="bf16", groups=None, examples=10, max_rows=8,
           max_cols=256, mutants=0, fault_cases=1, corpus=None, seed=0, log=None, params=None) -> dict:
    """The report of ``numoracle stress-tolerances``: every (atol, rtol) of the grid against
    the same runs numoracle judges (module docstring)."""
    from . import runs as CR
    from .. import operators
    from ..backends import select
    from ..families import GROUPS
    from ..strategies import group_cases
    backend = select(backend).name
    op = operators.resolve(op_name)
    groups = list(groups or GROUPS)
    for g in groups:
        if g not in GROUPS:
            raise InvalidArgument(f"groups: {g!r} is not an input group; expected some of {sorted(GROUPS)}.")
    t0 = time.time()
    log = log or (lambda s: None)
    specs = list(op.kernel_specs)
    per_group = {}
    for g in groups:
        per_group[g] = search_group(op, g, specs, atols, rtols, examples=examples, dtype=dtype,
                                    max_rows=max_rows, max_cols=max_cols, backend=backend, seed=seed,
                                    params=params)
        log(f"{op.name} / {g}: {len(per_group[g])} runs ({time.time() - t0:.0f}s)")
    # faulty kernels and mutants on fixed cases
    cases = group_cases(op, groups, fault_cases, dtype, 4, 96, seed, params=params)
    base = CR.run_kernel(op, op.kernels["correct"], "correct", cases, [], backend=backend, rtols=rtols)
    keep_cases = [r.case for r in base if r.outcome != "crash"]
    base = [r for r in base if r.outcome != "crash"]
    faults = {}
    for name in op.faulty:
        faults[f"faulty:{name}"] = CR.run_kernel(op, op.faulty_kernel(name), name, keep_cases, [],
                                                 backend=backend, rtols=rtols)
    if mutants:
        from .mutation.engine import _wrapper, load_source, parse_spec, plan_mutants
        for i, (spec, mod, site, src) in enumerate(plan_mutants(op, keep_cases[0], max_mutants=mutants,
                                                                backend=backend)):
            _, fn, pick = parse_spec(op.kernel_specs[spec])
            try:
                kern = _wrapper(load_source(mod, src, f"stress{i}"), fn, pick)
            except Exception:
                continue
            sb = base if spec == "correct" else CR.run_kernel(op, op.kernels[spec], spec, keep_cases, [],
                                                              backend=backend, rtols=rtols)
            runs = CR.run_kernel(op, kern, f"m{i}", keep_cases, [], backend=backend, rtols=rtols)
            faults[f"mutant:{site.kind}:{site.func}:{site.line}:{i}"] = [
                r for r, b in zip(runs, sb) if r.digest != b.digest or r.outcome == "crash"]
    configs = []
    for a in atols:
        for k, rt in enumerate(rtols):
            fa = {}
            for g, runs in per_group.items():
                n = len(runs)
                bad = sum((r.need[k] if r.outcome == "ok" else math.inf) > a for r in runs)
                fa[g] = bad / n if n else 0.0
            kills = sorted(name for name, runs in faults.items()
                           if any((r.need[k] if r.outcome == "ok" else math.inf) > a for r in runs))
            configs.append({"atol": a, "rtol": rt, "false_alarm_rate": fa,
                            "max_false_alarm_rate": max(fa.values(), default=0.0),
                            "kills": len(kills), "killed": kills})
    saved = []
    if corpus:
        for g, runs in per_group.items():
            def n_fail(r):
                return sum((r.need[k] if r.outcome == "ok" else math.inf) > a
                           for a in atols for k in range(len(rtols)))
            worst = max(runs, key=n_fail, default=None)
            if worst is not None and n_fail(worst) and worst.observed is not None and worst.numoracle == "accept":
                try:
                    saved.append({"group": g, "kernel": worst.kernel, "path": _save(op, worst, corpus, backend),
                                  "configurations_failed": n_fail(worst)})
                except Exception as exc:     # saving must not lose the report
                    saved.append({"group": g, "error": repr(exc)[:200]})
    numoracle_fa = [r.to_dict() for runs in per_group.values() for r in runs if r.numoracle == "reject"]
    within = [c for c in configs if c["max_false_alarm_rate"] <= 0.01]
    best = max(within, key=lambda c: c["kills"], default=None)
    report = {"op": op.name, "backend": backend, "dtype": dtype, "groups": groups,
              "runs_per_group": {g: len(r) for g, r in per_group.items()},
              "faulty_and_mutants": sorted(faults), "configurations": configs,
              "summary": {"configurations": len(configs), "within_1pct_every_group": len(within),
                          "best_within": None if best is None else {k: best[k] for k in ("atol", "rtol", "kills")},
                          "faults": len(faults), "numoracle_rejects_on_correct": len(numoracle_fa)},
              "numoracle_rejects_on_correct": numoracle_fa, "saved_cases": saved,
              "seconds": round(time.time() - t0, 1)}
    return report
