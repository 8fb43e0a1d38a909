"""``python -m numoracle.executor campaign|fuzz|workers``: the distributed
campaign and fuzzing until the ``numoracle`` command takes ``--executor``."""
from __future__ import annotations

import argparse
import json
import sys

from . import add_arguments


def _campaign(args) -> int:
    from ..campaign import STAGES
    from ..campaign.report import headline, write
    from ..errors import InvalidArgument
    from .campaign import campaign
    stages = tuple(s for s in args.stages.split(",") if s)
    bad = [s for s in stages if s not in STAGES]
    if bad:
        raise InvalidArgument(f"--stages {args.stages!r}: unknown stage(s) {bad}; expected a subset of {STAGES}.")
    data = campaign(args.out, backend=args.backend, size="quick" if args.quick else "full",
                    ops=[o for o in args.ops.split(",") if o] or None, stages=stages, executor=args.executor,
                    scheduler=args.scheduler, workers=args.workers, chunk=args.chunk,
                    mutation_ops=[o for o in getattr(args, "mutation_ops", "").split(",") if o] or None,
                    overrides={"correct": getattr(args, "cases", None), "replays": getattr(args, "replay_cases", None),
                               "mutation": getattr(args, "mutation_cases", None),
                               "max_mutants": getattr(args, "max_mutants", None),
                               "mutation_seconds": getattr(args, "mutation_seconds", None)})
    if args.report:
        write(args.out)
    h = headline(data)
    print(json.dumps(h, indent=2) if args.json else "\n".join(f"{k}: {v}" for k, v in h.items()))
    print(f"executor: {json.dumps(data.get('executor', {}).get('correct'))}")
    return 1 if h["false_alarms_fixed"] or h["false_alarms_statistical"] else 0


def _seeds(text: str):
    lo, sep, hi = text.partition(":")
    if not sep:
        return int(lo), int(lo) + 1
    return int(lo), int(hi)


def _fuzz(args) -> int:
    from .. import backends
    from .fuzz import fuzz_units, run_fuzz
    backend = backends.select(args.backend)
    groups = [g for s in (args.shift or []) for g in s.split(",") if g] or None
    units = fuzz_units(args.op, args.kernel, backend, seeds=_seeds(args.seeds), seeds_per_unit=args.seeds_per_unit,
                       groups=groups, examples=args.examples, mode=args.mode, seconds=args.seconds,
                       max_rows=args.max_rows, max_cols=args.max_cols, shrink=not args.no_shrink,
                       timeout=args.timeout, isolate=args.isolate, expect=args.expect)
    res = run_fuzz(units, executor=args.executor, scheduler=args.scheduler, workers=args.workers,
                   corpus=None if args.no_save else args.corpus, stop_on_first=args.stop_on_first)
    if args.json:
        print(json.dumps(res, indent=2, default=str))
    else:
        t = res["totals"]
        print(f"{args.op} / {args.kernel} on {backend}: {t['cases']} cases in {res['units_done']}/{res['units']} "
              f"units, {res['seconds']}s ({res['cases_per_second']}/s) via {res['executor']}")
        for g, st in res["groups"].items():
            print(f"  {g:16s} " + "  ".join(f"{k} {v}" for k, v in st.items()))
        for ce in res["counterexamples"]:
            print(f"  counterexample ({ce['unit']}, seed {ce['seed']}): saved {ce['saved']}")
    return 1 if res["found"] else 0


def _workers(args) -> int:
    from .core import serve_workers
    serve_workers(args.scheduler_address, backend=args.backend, workers=args.workers,
                  memory_limit=0 if args.memory_limit == "0" else args.memory_limit)
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m numoracle.executor", description=__doc__)
    sub = p.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("campaign", help="numoracle campaign with the correct stage on an executor")
    from ..campaign import add_arguments as campaign_arguments
    campaign_arguments(c)
    if not any("--executor" in a.option_strings for a in c._actions):   # until the campaign parser has them
        add_arguments(c)
    c.add_argument("--chunk", type=int, default=None, help="cases per unit (default: one unit per input group)")
    c.set_defaults(func=_campaign)
    f = sub.add_parser("fuzz", help="the runner over seed ranges of every input group, on an executor")
    f.add_argument("op")
    f.add_argument("--kernel", default="correct")
    f.add_argument("--backend", default="interpreter", choices=("interpreter", "gpu", "auto"))
    f.add_argument("--mode", default="statistical", choices=("statistical", "fixed"))
    f.add_argument("--seeds", default="0:4", help="seed range LO:HI (each seed: one Hypothesis search per group)")
    f.add_argument("--seeds-per-unit", type=int, default=1)
    f.add_argument("--examples", type=int, default=20, help="cases per seed and group")
    f.add_argument("--seconds", type=float, default=None, help="time budget per seed and group")
    f.add_argument("--shift", action="append", default=None, metavar="GROUP", help="restrict to input group(s)")
    f.add_argument("--max-rows", type=int, default=8)
    f.add_argument("--max-cols", type=int, default=256)
    f.add_argument("--timeout", type=float, default=60.0)
    f.add_argument("--isolate", action="store_true")
    f.add_argument("--no-shrink", action="store_true")
    f.add_argument("--expect", default="accept", choices=("accept", "reject"))
    f.add_argument("--corpus", default="corpora")
    f.add_argument("--no-save", action="store_true")
    f.add_argument("--stop-on-first", action="store_true", help="cancel the other units after a counterexample")
    f.add_argument("--json", action="store_true")
    add_arguments(f)
    f.set_defaults(func=_fuzz)
    w = sub.add_parser("workers", help="start this host's Dask workers (one per GPU, pinned) and block")
    w.add_argument("scheduler_address")
    w.add_argument("--backend", default="gpu", choices=("interpreter", "gpu"))
    w.add_argument("--workers", type=int, default=None)
    w.add_argument("--memory-limit", default="0", help="host memory per worker (e.g. 16GiB; 0: no limit)")
    w.set_defaults(func=_workers)
    return p


def main(argv=None) -> int:
    from ..errors import InvalidArgument, NumoracleError
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except (InvalidArgument, NumoracleError) as exc:
        print(f"numoracle: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
