"""``numoracle fuzz`` spread over an executor.

A unit is (operator, kernel, input group, seed range): for each seed of the
range the runner (``numoracle.runner.fuzz``) searches the group's cases with
Hypothesis seeded by it, ``examples`` cases per seed.  A confirmed reject is
shrunk and saved by the runner into a corpus directory private to the unit on
the worker; its files come back with the unit's result and are written into
the real corpus here, on the client, atomically (a temporary directory renamed
into place; a case id already present is the same bits and is kept).

Per-group statistics merge by unit id, so a retried or twice-delivered unit is
counted once.  Note: in a Dask worker the runner's per-case SIGALRM watchdog
cannot run (tasks run off the main thread); use ``isolate=True`` for kernels
that may hang.
"""
from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from ...errors import InvalidArgument
from ...runner.outcomes import STATUSES, Breakdown, compile_note
from .core import Unit, map_units

STATS = ("cases",) + STATUSES


def fuzz_units(op: str, kernel: str, backend: str, *, seeds=(0, 4), seeds_per_unit: int = 1, groups=None,
               examples: int = 20, mode: str = "statistical", seconds: float | None = None, formats=None,
               max_rows: int | None = 8, max_cols: int | None = 256, shrink: bool = True,
               shrink_seconds: float = 30.0, timeout: float = 60.0, isolate: bool = False,
               expect: str = "accept", params: dict | None = None) -> list[Unit]:
    """Units over every (group, seed chunk): seeds lo <= s < hi cut into
    chunks of ``seeds_per_unit``; each seed runs ``examples`` cases (or
    ``seconds``) of one input group.  ``params``: ``{name: choices}``
    overriding the operator's parameter choices (as ``strategies.cases``)."""
    from ... import operators
    from ...strategies import GROUPS
    o = operators.resolve(op)
    groups = list(groups or GROUPS)
    bad = [g for g in groups if g not in GROUPS]
    if bad:
        raise InvalidArgument(f"groups {bad}: unknown input-shift group(s); expected names from {list(GROUPS)}.")
    lo, hi = seeds
    if hi <= lo or seeds_per_unit < 1:
        raise InvalidArgument(f"seeds={seeds!r}, seeds_per_unit={seeds_per_unit}: expected lo < hi and a "
                              f"chunk >= 1.")
    settings = tuple(sorted({"examples": examples, "mode": mode, "seconds": seconds,
                             "formats": tuple(formats) if formats else None, "max_rows": max_rows,
                             "max_cols": max_cols, "shrink": shrink, "shrink_seconds": shrink_seconds,
                             "timeout": timeout, "isolate": isolate, "expect": expect,
                             "params": tuple(sorted((k, tuple(v)) for k, v in (params or {}).items())) or None
                             }.items()))
    # a worker process finds the operator again by its spec: a user's operator is not registered
    # under its name there
    spec = o.spec or (op if isinstance(op, str) else None)
    if spec is None or spec.startswith("__main__:"):
        raise InvalidArgument(f"operator {o.name!r} has no name another process can import it by (defined in "
                              f"__main__ or a function?); define it at the top level of a module and pass "
                              f"'package.module:attribute'.")
    return [Unit("fuzz", spec, kernel, g, (s, min(s + seeds_per_unit, hi)), backend, settings)
            for g in groups for s in range(lo, hi, seeds_per_unit)]


def _read_tree(root: Path) -> dict:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def run_fuzz_unit(unit: Unit) -> dict:
    """Worker side: the runner over the unit's seeds, one input group."""
    from ... import backends
    from ...runner import fuzz
    from ...strategies import cases
    backend = backends.select(unit.backend)
    s = dict(unit.settings)
    strategy = cases(unit.op, groups=[unit.group], formats=list(s["formats"]) if s["formats"] else None,
                     max_rows=s["max_rows"], max_cols=s["max_cols"],
                     params={k: tuple(v) for k, v in s["params"]} if s.get("params") else None)
    out = {"unit": unit.id, "pid": os.getpid(), "groups": {}, "exit_reasons": {}, "counterexamples": [],
           "corpus": [], "seconds": 0.0, "statistical_only": 0, "breakdown": {}, "compiles": 0}
    tmp = Path(tempfile.mkdtemp(prefix="numoracle-unit-"))
    try:
        for seed in range(*unit.seeds):
            corpus = tmp / f"seed{seed}"
            r = fuzz(unit.op, unit.kernel, backend=backend, mode=s["mode"], max_examples=s["examples"],
                     seconds=s["seconds"], strategy=strategy, seed=seed, database=None, timeout=s["timeout"],
                     isolate=s["isolate"], shrink=s["shrink"], shrink_seconds=s["shrink_seconds"],
                     corpus=corpus, expect=s["expect"], progress=None)
            for g, st in r.groups.items():
                acc = out["groups"].setdefault(g, dict.fromkeys(STATS, 0))
                for k, v in st.to_dict().items():
                    acc[k] += v
            out["exit_reasons"][r.exit_reason] = out["exit_reasons"].get(r.exit_reason, 0) + 1
            out["seconds"] += r.elapsed
            for phase, sec in r.times.seconds.items():
                out["breakdown"][phase] = out["breakdown"].get(phase, 0.0) + sec
            out["compiles"] += r.times.compiles
            rel = None
            if r.saved:
                case_dir = Path(r.saved)
                rel = str(case_dir.relative_to(corpus))
                out["corpus"].append({"rel": rel, "files": _read_tree(case_dir)})
            if r.counterexample is not None:
                out["counterexamples"].append({"seed": seed, "counterexample": r.to_dict()["counterexample"],
                                               "rel": rel})
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    out["seconds"] = round(out["seconds"], 3)
    return out


def write_case(corpus_dir, rel: str, files: dict) -> Path:
    """Write a corpus case that came back from a worker under
    ``corpus_dir/rel``: files into a temporary directory, fsynced, renamed into
    place; an existing case of the same id is kept (same id, same bits)."""
    final = Path(corpus_dir) / rel
    if final.exists():
        return final
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = final.parent / f".tmp-{final.name}-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    try:
        for name, data in files.items():
            p = tmp / name
            p.parent.mkdir(parents=True, exist_ok=True)
            if name == "case.json":            # the replay line names where the case lives now
                meta = json.loads(data)
                meta["replay"] = f"numoracle replay {final}"
                data = (json.dumps(meta, indent=2, allow_nan=True) + "\n").encode()
            with open(p, "wb") as fh:
                fh.write(data)
                fh.flush()
                os.fsync(fh.fileno())
        try:
            os.rename(tmp, final)
        except OSError:
            if final.exists():
                shutil.rmtree(tmp, ignore_errors=True)
                return final
            raise
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return final


def run_fuzz(units, *, executor: str = "local", scheduler: str | None = None, workers: int | None = None,
             corpus: str | None = "corpora", stop_on_first: bool = False, retries: int = 2, unit_fn=None,
             log=None, client=None, cluster_options=None) -> dict:
    """Run fuzz units on ``executor``; merge per-group statistics (once per
    unit id) and write returned corpus cases under ``corpus``.  With
    ``stop_on_first`` the units not yet done are cancelled after the first
    counterexample."""
    log = log or (lambda s: print(s, file=sys.stderr, flush=True))
    units = list(units)
    backend = units[0].backend if units else "interpreter"
    info: dict = {}
    merged: dict = {}
    groups: dict = {}
    times = Breakdown()
    found, saved, exits = [], [], {}
    t0 = time.time()
    gen = map_units(units, unit_fn or run_fuzz_unit, executor=executor, scheduler=scheduler, workers=workers,
                    backend=backend, retries=retries, info=info, client=client, cluster_options=cluster_options)
    try:
        for unit, r in gen:
            if unit.id in merged:
                continue
            merged[unit.id] = r
            for g, st in r["groups"].items():
                acc = groups.setdefault(g, dict.fromkeys(STATS, 0))
                for k, v in st.items():
                    acc[k] += v
            for k, v in r["exit_reasons"].items():
                exits[k] = exits.get(k, 0) + v
            for phase, sec in r.get("breakdown", {}).items():
                times.add(phase, sec)
            times.compiles += r.get("compiles", 0)
            where = {}
            for c in r["corpus"]:
                if corpus is not None:
                    where[c["rel"]] = str(write_case(corpus, c["rel"], c["files"]))
                    saved.append(where[c["rel"]])
            for ce in r["counterexamples"]:
                found.append({"unit": unit.id, "seed": ce["seed"], "counterexample": ce["counterexample"],
                              "saved": where.get(ce["rel"])})
            t = sum(s["cases"] for s in groups.values())
            log(f"[fuzz] {len(merged)}/{len(units)} units, {t} cases, {len(found)} counterexample(s)  ({unit.id})")
            if found and stop_on_first:
                break
    finally:
        gen.close()
    totals = dict.fromkeys(STATS, 0)
    for st in groups.values():
        for k, v in st.items():
            totals[k] += v
    el = time.time() - t0
    return {"units": len(units), "units_done": len(merged), "groups": dict(sorted(groups.items())),
            "totals": totals, "exit_reasons": exits, "counterexamples": found, "saved": saved,
            "seconds": round(el, 2), "cases_per_second": round(totals["cases"] / el, 3) if el > 0 else 0.0,
            # the searches' own time, summed over units: the wall time less process starts and waits
            "unit_seconds": round(sum(r["seconds"] for r in merged.values()), 3),
            # where the searches' time went, summed over units (as a serial run's breakdown)
            "breakdown": times.to_dict(totals["cases"]),
            "executor": {k: info.get(k) for k in ("executor", "scheduler", "dashboard", "workers", "resubmitted")},
            "found": bool(found or totals["reject"] or totals["error"] or totals["nan"] or totals["timeout"])}


def _plan_line(units: list, per_group: int, seconds: float, workers: int | None) -> str:
    """What a run of timed searches takes: the searches, each ``seconds`` long, and (when the
    worker count is known here) about how long they take on the workers, in rounds."""
    groups = len({u.group for u in units})
    line = (f"[fuzz] {len(units)} searches ({groups} input group(s) x {per_group} unit(s)), {seconds:g} s each "
            "(--seconds is each search's budget)")
    if workers:
        rounds = -(-len(units) // workers)
        line += f", on {workers} worker(s): about {rounds * seconds:g} s of searches, and the workers' start"
    return line


def run_from_cli(args, *, op, groups=None, formats=None, seconds=None, params=None) -> int:
    """``numoracle fuzz ... --executor dask|local --workers N``: ``--units``
    Hypothesis searches (seeds ``--seed``.. on) per input group, each of
    ``--examples`` cases (20 by default) or ``--seconds``; the first
    counterexample of each search is shrunk and saved to ``--corpus`` here.  ``params``:
    ``{name: choices}`` of ``--param``."""
    from ... import backends
    from ...cli.common import emit_json, progress
    backend = backends.select(args.backend)
    base = args.seed or 0
    n = getattr(args, "units", None) or 4
    examples = args.examples if args.examples is not None else (10**9 if seconds else 20)
    units = fuzz_units(op.spec or args.op, args.kernel, backend.name, seeds=(base, base + n), groups=groups, examples=max(examples, 1),
                       mode=args.mode, seconds=seconds, formats=formats, max_rows=args.rows or args.max_rows,
                       max_cols=args.cols or args.max_cols, shrink=not args.no_shrink,
                       shrink_seconds=args.shrink_seconds, timeout=args.timeout, isolate=args.isolate,
                       expect=args.expect, params=params)
    quiet = args.json or args.quiet
    if seconds and not quiet:
        # --seconds is each search's budget here, not the run's: say what the run will take
        print(_plan_line(units, n, seconds, args.workers if args.workers is not None else
                         (1 if args.executor == "local" and backend.name == "interpreter" else None)),
              file=sys.stderr, flush=True)
    res = run_fuzz(units, executor=args.executor, scheduler=args.scheduler, workers=args.workers,
                   corpus=None if args.no_save else args.corpus,
                   log=(lambda s: None) if quiet else progress(args))
    if args.json:
        emit_json(args, res)
        return 1 if res["found"] else 0
    t = res["totals"]
    ex = res["executor"]
    print(f"{op.name} / {args.kernel} on {backend} ({args.mode}): {t['cases']} cases in {res['units_done']} units "
          f"({res['cases_per_second']}/s) on {ex['executor']} with {ex['workers']} worker(s)"
          + (f", dashboard {ex['dashboard']}" if ex.get("dashboard") else ""))
    print(f"  {'group':16s}" + "".join(f"{c:>17s}" if c == "statistical_only" else f"{c:>12s}" for c in STATS))
    for g, st in res["groups"].items():
        print(f"  {g:16s}" + "".join(f"{st[c]:>17d}" if c == "statistical_only" else f"{st[c]:>12d}"
                                      for c in STATS))
    note = compile_note(res["breakdown"])
    if note:
        print(f"  {note}")
    for ce in res["counterexamples"]:
        print(f"  counterexample ({ce['unit']}): saved {ce['saved']}")
    return 1 if res["found"] else 0
