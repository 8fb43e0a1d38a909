"""``numoracle campaign``: the paper's evaluation on one backend, resumable.

Stages, each written into ``DIR/campaign.json`` as soon as a unit of it ends
(so an interrupted campaign resumes where it stopped):

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


def _versions() -> dict:
    import torch
    v = {"python": platform.python_version(), "torch": torch.__version__}
    try:
        import triton
        v["triton"] = triton.__version__
    except ImportError:
        pass
    from .. import __version__
    v["numoracle"] = __version__
    return v


def _save(path: Path, data: dict) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=1, default=str))
    os.replace(tmp, path)


def _load(path: Path, meta: dict) -> dict:
    if path.exists():
        from .report import load
        data = load(path)
        old = {k: data["meta"].get(k) for k in ("backend", "size", "ops")}
        new = {k: meta.get(k) for k in ("backend", "size", "ops")}
        if old != new:
            from ..errors import InvalidArgument
            raise InvalidArgument(f"{path} holds a campaign with {old}, not {new}; use another --out "
                                  f"directory or delete it to start again.")
        return data
    return {"schema": 1, "meta": meta}


def campaign(out_dir, *, backend="interpreter", size="quick", ops=None, stages=STAGES, log=None,
             mutation_ops=None, overrides=None) -> dict:
    """Run (or resume) a campaign; returns the results dict also written to
    ``out_dir/campaign.json``.  ``mutation_ops`` narrows the mutation stage (default: ``ops``)."""
    from .. import backends, operators
    from . import correct as C
    from . import replays as RP
    log = log or (lambda s: print(s, file=sys.stderr, flush=True))
    backend = backends.select(backend)
    dev = backend.device
    names = list(ops or operators.names())
    sz = {**SIZES[size], **{k: v for k, v in (overrides or {}).items() if v is not None}}
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    path = out / "campaign.json"
    meta = {"backend": backend.name, "size": size, "ops": names, "date": time.strftime("%Y-%m-%d"),
            "device": _device(dev), **_versions()}
    data = _load(path, meta)
    data["meta"].update({k: meta[k] for k in ("date", "device")})
    t0 = time.time()
    if "correct" in stages:
        res = data.setdefault("correct", {})
        for name in names:
            op = operators.get(name)
            cl = C.cases(op, sz["correct"])
            for kname in op.kernel_specs:
                key = f"{name}/{kname}"
                if key in res:
                    continue
                try:
                    kernel = op.kernels[kname]
                except Exception as exc:
                    res[key] = {"skipped": repr(exc)[:300]}
                else:
                    res[key] = C.sweep_kernel(op, kname, kernel, cl, backend, dev)
                    r = res[key]
                    log(f"[correct] {key}: rejects stat {r['counts']['statistical'].get('reject', 0)} fixed "
                        f"{r['counts']['fixed'].get('reject', 0)}, uncertified {r['counts']['fixed'].get('uncertified', 0)}, "
                        f"errors {r['errors']} ({r['seconds']}s)")
                _save(path, data)
    if "mutation" in stages and "mutation" not in data.get("done", []):
        from . import mutation as MU
        m, data["frontier"] = MU.run(mutation_ops or names, sz["mutation"], backend.name, dev, out, log=log,
                                     max_mutants=sz["max_mutants"], time_budget=sz["mutation_seconds"])
        # the tuned tolerance under input shift comes from the same correct-kernel runs
        data["tuned_shift"] = m.pop("tuned_shift", None)
        data["mutation"] = m
        data.setdefault("done", []).append("mutation")
        _save(path, data)
    if "replays" in stages and "replays" not in data.get("done", []):
        data["replays"] = RP.run(sz["replays"], backend, dev, log=log)
        data.setdefault("done", []).append("replays")
        _save(path, data)
    data["meta"]["seconds"] = round(data["meta"].get("seconds", 0) + time.time() - t0, 1)
    _save(path, data)
    return data


def _device(dev: str) -> str:
    if dev == "cuda":
        import torch
        return torch.cuda.get_device_name()
    return f"cpu ({os.cpu_count()} cores)"


def add_arguments(p) -> None:
    p.add_argument("--backend", default="interpreter", choices=("interpreter", "gpu", "auto"))
    p.add_argument("--out", default="campaign", help="results directory (campaign.json; resumed if present)")
    p.add_argument("--quick", action="store_true", help="CI-sized campaign")
    p.add_argument("--ops", default="", help="comma-separated operators (default: all registered)")
    p.add_argument("--stages", default=",".join(STAGES), help=f"comma-separated subset of {','.join(STAGES)}")
    p.add_argument("--cases", type=int, default=None, help="cases per kernel in the correct stage (size default)")
    p.add_argument("--replay-cases", type=int, default=None, help="cases per change pair")
    p.add_argument("--mutation-cases", type=int, default=None, help="mutation runs per input group")
    p.add_argument("--max-mutants", type=int, default=None, help="mutants per operator")
    p.add_argument("--mutation-seconds", type=float, default=None, help="time budget of the mutation stage")
    p.add_argument("--mutation-ops", default="", help="operators of the mutation stage (default: --ops)")
    p.add_argument("--report", action="store_true", help="write report.html and report.md at the end")
    p.add_argument("--json", action="store_true", help="print the headline figures as JSON")
    from ..executor import add_arguments as executor_arguments
    executor_arguments(p)


def run(args) -> int:
    from ..errors import InvalidArgument
    from .report import headline, write
    stages = tuple(s for s in args.stages.split(",") if s)
    bad = [s for s in stages if s not in STAGES]
    if bad:
        raise InvalidArgument(f"--stages {args.stages!r}: unknown stage(s) {bad}; expected a subset of {STAGES}.")
    from ..executor import wants_executor
    run_campaign = campaign
    if wants_executor(args):      # the correct stage as units on local processes or Dask, the rest as below
        from functools import partial

        from ..executor.campaign import campaign as on_executor
        run_campaign = partial(on_executor, executor=args.executor, scheduler=args.scheduler, workers=args.workers)
    data = run_campaign(args.out, backend=args.backend, size="quick" if args.quick else "full",
                    ops=[o for o in args.ops.split(",") if o] or None, stages=stages,
                    mutation_ops=[o for o in args.mutation_ops.split(",") if o] or None,
                    overrides={"correct": args.cases, "replays": args.replay_cases, "mutation": args.mutation_cases,
                               "max_mutants": args.max_mutants, "mutation_seconds": args.mutation_seconds})
    if args.report:
        write(args.out)
    h = headline(data)
    print(json.dumps(h, indent=2) if args.json else "\n".join(f"{k}: {v}" for k, v in h.items()))
    return 1 if h["false_alarms_fixed"] or h["false_alarms_statistical"] else 0
