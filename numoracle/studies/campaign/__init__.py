"""``numoracle campaign``: the paper's evaluation on one backend, resumable.

One orchestrator (``campaign``) for every executor.  Stages, each written into
``DIR/campaign.json`` as soon as a unit of it ends (so an interrupted campaign resumes
where it stopped, and a killed one loses only the unit it was running):

- ``correct``: every registered kernel and behaviour-preserving variant over
  generated cases in every input group, judged in both modes (false alarms,
  uncertified inputs and why, acceptance widths beside assert_close's);
- ``mutation``: the mutation kill matrix against the baselines, the
  tuned-tolerance frontier, and (from the same correct-kernel runs) a tolerance
  tuned on the calibration group applied to the other groups: its false-alarm
  rate under input shift;
- ``replays``: the historical change pairs.

``--quick`` sizes it for CI and a 2-core machine; the full size targets a GPU.
"""
from __future__ import annotations

import json
import os
import platform
import sys
import time
from pathlib import Path

STAGES = ("correct", "mutation", "replays")
SIZES = {  # cases per kernel (correct), per pair (replays); mutation: cases per input group,
           # mutants per operator, seconds for the whole stage
    "quick": {"correct": 4, "replays": 6, "mutation": 1, "max_mutants": 4, "mutation_seconds": 600},
    "full": {"correct": 200, "replays": 60, "mutation": 2, "max_mutants": 40, "mutation_seconds": 5400},
}


def versions() -> dict:
    import torch
    v = {"python": platform.python_version(), "torch": torch.__version__}
    try:
        import triton
        v["triton"] = triton.__version__
    except ImportError:
        pass
    from ... import __version__
    v["numoracle"] = __version__
    return v


def device_name(dev: str) -> str:
    if dev == "cuda":
        import torch
        return torch.cuda.get_device_name()
    return f"cpu ({os.cpu_count()} cores)"


class CampaignDir:
    """A campaign's output directory: ``campaign.json`` (every finished unit of every stage),
    ``units/`` (the correct stage's unit results), ``mutation/`` (one file per operator).
    While a campaign runs it holds the directory's lock: a second campaign on it refuses.
    Every file is written under a temporary name and renamed into place; temporary files
    a killed run left are removed when the next one starts."""

    def __init__(self, path):
        self.path = Path(path)
        self.json = self.path / "campaign.json"
        self.units = self.path / "units"
        self.mutation = self.path / "mutation"
        self._lock = None

    def __enter__(self):
        import fcntl
        self.path.mkdir(parents=True, exist_ok=True)
        fh = open(self.path / ".lock", "a+")
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            fh.seek(0)
            holder = fh.read().strip() or "another process"
            fh.close()
            from ...errors import InvalidArgument
            raise InvalidArgument(f"{self.path} is in use by another campaign ({holder}); wait for it to end "
                                  f"or give another --out directory.") from None
        fh.seek(0)
        fh.truncate()
        fh.write(f"pid {os.getpid()} since {time.strftime('%Y-%m-%d %H:%M:%S')}")
        fh.flush()
        self._lock = fh
        self.clean()
        return self

    def __exit__(self, *exc):
        if self._lock is not None:
            self._lock.close()
            self._lock = None
        return False

    def clean(self) -> list:
        """Remove the temporary files of runs that were killed while writing."""
        gone = []
        for d in (self.path, self.units, self.mutation):
            if d.is_dir():
                for f in d.iterdir():
                    if ".tmp" in f.name and f.is_file():
                        f.unlink()
                        gone.append(f)
        return gone

    def save(self, data: dict) -> None:
        _write_json(self.json, data)

    def load(self, meta: dict) -> dict:
        if self.json.exists():
            from .report import load
            data = load(self.json)
            # a campaign written before parameters could be fixed has none ({})
            old = {k: data["meta"].get(k, {} if k == "params" else None) for k in ("backend", "size", "ops", "params")}
            new = {k: meta.get(k) for k in ("backend", "size", "ops", "params")}
            if old != new:
                from ...errors import InvalidArgument
                raise InvalidArgument(f"{self.json} holds a campaign with {old}, not {new}; use another --out "
                                      f"directory or delete it to start again.")
            return data
        return {"schema": 1, "meta": meta}


def _write_json(path: Path, data) -> None:
    tmp = path.with_name(path.name + f".tmp{os.getpid()}")
    tmp.write_text(json.dumps(data, indent=1, default=str))
    os.replace(tmp, path)


class _Clock:
    """A campaign's working time over all its runs: what earlier runs recorded plus this
    run's, brought up to date at every save (a run that is killed keeps what it did)."""

    def __init__(self, data: dict):
        self.data, self.before, self.t0 = data, float(data["meta"].get("seconds", 0) or 0), time.time()

    def tick(self) -> None:
        self.data["meta"]["seconds"] = round(self.before + time.time() - self.t0, 1)


def fixed_params(names, params) -> dict:
    """{operator: {name: value}}: each of ``params`` given to every operator of ``names`` whose
    reference takes it (and checked against it there).  A name no operator takes is an error:
    a misspelt parameter would otherwise leave the campaign drawing it silently."""
    from ... import operators
    from ...errors import InvalidArgument
    params = dict(params or {})
    out, used = {}, set()
    for name in names:
        ref = operators.resolve(name).reference
        mine = {k: v for k, v in params.items() if k in ref.param_names}
        if mine:
            out[name] = ref.check_params(mine)
            used |= set(mine)
    unused = sorted(set(params) - used)
    if unused:
        takes = {n: list(operators.resolve(n).reference.param_names) for n in names}
        raise InvalidArgument(f"parameter(s) {unused}: no operator of this campaign takes them; their parameters "
                              f"are {takes}.")
    return out


def campaign(out_dir, *, backend="interpreter", size="quick", ops=None, stages=STAGES, log=None,
             mutation_ops=None, overrides=None, executor="inline", workers=None, scheduler=None,
             chunk=None, params=None, replay_ops=None) -> dict:
    """Run (or resume) a campaign; returns the results also written to
    ``out_dir/campaign.json``.  The correct stage runs as work units on ``executor``
    ("inline": in this process; "local": worker processes; "dask": a Dask cluster, at
    ``scheduler`` or started here), cut into at most ``chunk`` cases each; the mutation
    stage one operator at a time (``mutation_ops`` narrows it; default ``ops``), the
    replays one change pair at a time (the pairs of ``replay_ops``; default: of ``ops``, and
    every pair without ``ops``).  Every finished unit of every stage is on disk
    before the next starts.  ``params`` ({name: value}) fixes those parameters for every
    operator that takes them, in the correct and mutation stages; the change pairs keep
    the configurations they were recorded with.  A resumed campaign must be given the same
    ``params``."""
    from ... import backends, operators
    from . import mutation as MU
    from . import replays as RP
    log = log or (lambda s: print(s, file=sys.stderr, flush=True))
    backend = backends.select(backend)
    names = list(ops or operators.names())
    fixed = fixed_params(list(dict.fromkeys(names + list(mutation_ops or []))), params)
    sz = {**SIZES[size], **{k: v for k, v in (overrides or {}).items() if v is not None}}
    stages = tuple(stages)
    if {"correct", "mutation"} & set(stages):
        for name in dict.fromkeys(names + list(mutation_ops or [])):
            operators.resolve(name).require_example()        # refused before any unit runs
    meta = {"backend": backend.name, "size": size, "ops": names, "params": {k: repr(v) for k, v in
                                                                            sorted((params or {}).items())},
            "date": time.strftime("%Y-%m-%d"), "device": device_name(backend.device), **versions()}
    with CampaignDir(out_dir) as d:
        data = d.load(meta)
        data["meta"].update({k: meta[k] for k in ("date", "device")})
        clock = _Clock(data)

        def save():
            clock.tick()
            d.save(data)

        if "correct" in stages:
            run_correct_stage(names, sz["correct"], backend.name, executor, scheduler, d, data=data,
                              workers=workers, chunk=chunk, log=log, save=save, params=fixed)
        if "mutation" in stages and "mutation" not in data.get("done", []):
            m, data["frontier"] = MU.run(mutation_ops or names, sz["mutation"], backend.name, d.mutation, log=log,
                                         max_mutants=sz["max_mutants"], time_budget=sz["mutation_seconds"],
                                         on_operator=lambda name: save(), params=fixed)
            # the tuned tolerance under input shift comes from the same correct-kernel runs
            data["tuned_shift"] = m.pop("tuned_shift", None)
            data["mutation"] = m
            data.setdefault("done", []).append("mutation")
            save()
        if "replays" in stages and "replays" not in data.get("done", []):
            done = {RP.key(r): r for r in data.get("replays_partial", [])}

            def finished(r):
                done[RP.key(r)] = r
                data["replays_partial"] = list(done.values())
                save()
            data["replays"] = RP.run(sz["replays"], backend, backend.device, log=log, done=done, on_pair=finished,
                                     ops=replay_ops if replay_ops is not None else ops)
            data.pop("replays_partial", None)
            data.setdefault("done", []).append("replays")
        save()
    return data


def run_correct_stage(names, n_cases: int, backend: str, executor: str = "inline", scheduler: str | None = None,
                      out=None, *, data: dict | None = None, workers: int | None = None, chunk: int | None = None,
                      retries: int = 2, unit_fn=None, log=None, client=None, cluster_options=None, kernels=None,
                      save=None, params=None) -> dict:
    """Fill ``data["correct"]`` (created if absent) with every kernel of ``names`` over
    ``n_cases`` cases, run as units on ``executor``; returns ``data["correct"]``.  With
    ``out`` (a CampaignDir), unit results go to its ``units/`` as they end, and ``save()``
    writes ``data`` as kernels complete.  ``kernels``: only these kernel names of each
    operator; ``params``: {operator: {name: value}} fixed (``fixed_params``); ``unit_fn``
    replaces ``units.run_correct_unit`` (tests)."""
    from ..executors import map_units
    from . import units as U
    log = log or (lambda s: print(s, file=sys.stderr, flush=True))
    data = {} if data is None else data
    res = data.setdefault("correct", {})
    units_dir = out.units if out is not None else None
    units = [u for u in U.correct_units(names, n_cases, backend, chunk=chunk, kernels=kernels, params=params)
             if u.key not in res]
    merger = U.Merger(units)
    todo = []
    for u in units:
        prev = U.load_unit(units_dir, u) if units_dir is not None else None
        if prev is not None:
            merger.add(u, prev)
        else:
            todo.append(u)
    info: dict = {}
    ex = data.setdefault("executor", {})
    t0 = time.time()

    def finish(key):
        res[key] = merger.merged(key)
        r = res[key]
        if "skipped" in r:
            log(f"[correct] {key}: skipped ({r['skipped'][:120]})")
        else:
            log(f"[correct] {key}: rejects stat {r['counts']['statistical'].get('reject', 0)} fixed "
                f"{r['counts']['fixed'].get('reject', 0)}, uncertified {r['counts']['fixed'].get('uncertified', 0)}, "
                f"errors {r['errors']} ({r['seconds']}s in {len(merger.parts[key])} units)")
        if save is not None:
            save()

    for key in list(merger.expected):           # kernels whose units were all on disk already
        if merger.complete(key):
            finish(key)
    fn = unit_fn or U.run_correct_unit
    local = executor == "inline"
    for unit, result in map_units(todo, fn, executor="local" if local else executor, scheduler=scheduler,
                                  workers=0 if local else workers, backend=backend, retries=retries, info=info,
                                  client=client, cluster_options=cluster_options):
        if not merger.add(unit, result):
            continue
        if units_dir is not None:
            U.save_unit(units_dir, unit, result)
        if merger.complete(unit.key) and unit.key not in res:
            finish(unit.key)
    missing = [k for k in merger.expected if k not in res]
    if missing:
        raise RuntimeError(f"kernels with units missing after the run: {missing}")
    from ... import operators
    order = [f"{n}/{k}" for n in names for k in operators.resolve(n).kernel_specs]
    data["correct"] = {k: res[k] for k in order if k in res} | {k: v for k, v in res.items() if k not in order}
    if not units and "correct" in ex:          # nothing was left to run: keep the record of the run that did it
        return data["correct"]
    ex["correct"] = {"executor": executor, "scheduler": info.get("scheduler"), "dashboard": info.get("dashboard"),
                     "workers": info.get("workers"), "units": len(units), "units_run": len(todo),
                     "resubmitted": info.get("resubmitted", 0), "seconds": round(time.time() - t0, 2),
                     "exact_medians": all(U.merge_is_exact(list(merger.parts.get(k, {}).values()))
                                          for k in merger.expected)}
    if save is not None:
        save()
    return data["correct"]
