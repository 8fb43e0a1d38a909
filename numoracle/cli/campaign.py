"""``numoracle campaign``: the paper's evaluation on one backend, resumable
(``numoracle.studies.campaign``)."""

from __future__ import annotations


from ..errors import InvalidArgument
from ..studies.campaign import STAGES
from . import common



def add_arguments(p) -> None:
    common.add_backend(p)
    p.add_argument("--out", default="campaign", help="results directory (campaign.json; resumed if present)")
    p.add_argument("--quick", action="store_true", help="CI-sized campaign")
    p.add_argument("--ops", default="", help="comma-separated operators (default: all registered)")
    p.add_argument("--stages", default=",".join(STAGES), help=f"comma-separated subset of {','.join(STAGES)}")
    p.add_argument("--cases", type=common.positive_int, default=None,
                   help="cases per kernel in the correct stage (default: the size's)")
    p.add_argument("--replay-cases", type=common.positive_int, default=None,
                   help="cases per change pair (default: the size's)")
    p.add_argument("--mutation-cases", type=common.positive_int, default=None,
                   help="mutation runs per input group (default: the size's)")
    p.add_argument("--max-mutants", type=common.positive_int, default=None,
                   help="mutants per operator (default: the size's)")
    p.add_argument("--mutation-seconds", type=common.seconds, default=None,
                   help="time budget of the mutation stage in this run (default: the size's)")
    p.add_argument("--mutation-ops", default="", help="operators of the mutation stage (default: --ops)")
    p.add_argument("--replay-ops", default="", help="operators whose change pairs are replayed (default: --ops; "
                                                   "every pair without --ops)")
    p.add_argument("--chunk", type=common.positive_int, default=None,
                   help="cases per work unit of the correct stage (default: one unit per kernel and input group)")
    p.add_argument("--report", action="store_true", help="write report.html and report.md at the end")
    common.add_params(p, where="for every operator of the campaign that takes it, in the correct and mutation "
                               "stages (the change pairs keep their recorded configurations)")
    common.add_isolate(p)
    common.add_timeout(p)
    common.add_quiet(p)
    common.add_json(p)
    common.add_executor(p)


def run(args) -> int:
    from ..studies.campaign import STAGES, campaign
    from ..studies.campaign.report import headline, write
    stages = tuple(s for s in args.stages.split(",") if s)
    bad = [s for s in stages if s not in STAGES]
    if bad:
        raise InvalidArgument(f"--stages {args.stages!r}: unknown stage(s) {bad}; expected a subset of {STAGES}.")
    from ..studies.executors import wants_executor
    # the correct stage as units on local processes or Dask, or in this process
    executor = args.executor if wants_executor(args) else "inline"
    with common.isolation(args):
        data = campaign(args.out, backend=args.backend, size="quick" if args.quick else "full",
                        ops=[o for o in args.ops.split(",") if o] or None, stages=stages,
                        mutation_ops=[o for o in args.mutation_ops.split(",") if o] or None,
                        replay_ops=[o for o in args.replay_ops.split(",") if o] or None,
                        overrides={"correct": args.cases, "replays": args.replay_cases, "mutation": args.mutation_cases,
                                   "max_mutants": args.max_mutants, "mutation_seconds": args.mutation_seconds},
                        executor=executor, scheduler=args.scheduler, workers=args.workers, chunk=args.chunk,
                        params=common.parse_params(args),
                        log=common.progress(args))
    if args.report:
        write(args.out)
    h = headline(data)
    if args.json:
        common.emit_json(args, h)
    else:
        print("\n".join(f"{k}: {v}" for k, v in h.items()))
    return 1 if h["false_alarms_fixed"] or h["false_alarms_statistical"] else 0
