"""``numoracle stress-tolerances OP``: how a fixed (atol, rtol) - or a grid of them - fares
against the same runs numoracle judges (``numoracle.studies.stress``)."""

from __future__ import annotations

import json

from ..errors import InvalidArgument
from . import common



def add_arguments(p) -> None:
    common.add_operator(p)
    p.add_argument("--atol", type=common.nonnegative, default=None,
                   help="one configuration: atol (with --rtol; default: the --grid)")
    p.add_argument("--rtol", type=common.nonnegative, default=None,
                   help="one configuration: rtol (with --atol; default: the --grid)")
    p.add_argument("--grid", type=common.positive_int, default=20,
                   help="N×N log-spaced grid over [1e-6, 1] in atol and rtol (default 20: 400 configurations)")
    common.add_backend(p)
    common.add_format(p, default="bf16", choices=("bf16", "fp16", "fp32"))
    common.add_groups(p)
    common.add_params(p)
    p.add_argument("--examples", type=common.positive_int, default=10, help="Hypothesis examples per group")
    p.add_argument("--max-rows", type=common.positive_int, default=8, help="cap drawn rows")
    p.add_argument("--max-cols", type=common.positive_int, default=256, help="cap drawn columns")
    p.add_argument("--mutants", type=common.count, default=0, help="also count kills on this many mutants")
    p.add_argument("--fault-cases", type=common.positive_int, default=1,
                   help="cases per group for faulty kernels and mutants")
    p.add_argument("--corpus", default="corpora-stress", help="where falsifying inputs are saved ('' to skip)")
    common.add_seed(p)
    common.add_isolate(p)
    common.add_timeout(p)
    common.add_quiet(p)
    common.add_json(p)
    common.add_out(p)


def _configs(args):
    from ..studies.runs import log_grid
    if (args.atol is None) != (args.rtol is None):
        raise InvalidArgument("give both --atol and --rtol for one configuration, or neither for the grid.")
    if args.atol is not None:
        if args.atol < 0 or args.rtol < 0:
            raise InvalidArgument(f"--atol {args.atol} --rtol {args.rtol}: tolerances must be ≥ 0.")
        return [args.atol], [args.rtol]
    if args.grid < 1:
        raise InvalidArgument(f"--grid {args.grid}: expected at least 1.")
    g = log_grid(args.grid)
    return g, g


def run(args) -> int:
    from .. import operators
    from ..studies.stress import stress
    atols, rtols = _configs(args)
    with common.isolation(args):
        report = stress(args.op, atols=atols, rtols=rtols, backend=args.backend, dtype=args.dtype,
                        groups=common.groups(args), examples=args.examples, max_rows=args.max_rows,
                        max_cols=args.max_cols, mutants=args.mutants, fault_cases=args.fault_cases,
                        corpus=args.corpus or None, seed=args.seed,
                        params=common.params(args, operators.resolve(args.op)),
                        log=common.progress(args))
    configs, saved, numoracle_fa = report["configurations"], report["saved_cases"], report["numoracle_rejects_on_correct"]
    faults = report["faulty_and_mutants"]
    if args.out:
        with open(args.out, "w", encoding="utf-8") as f:
            json.dump(report, f, indent=1)
    if args.json:
        common.emit_json(args, report)
    else:
        s = report["summary"]
        print(f"{report['op']} ({args.dtype}, {report['backend']}): {len(configs)} configuration(s), "
              f"{sum(report['runs_per_group'].values())} runs of the correct kernel and variants, "
              f"{len(faults)} faulty kernels/mutants")
        if len(configs) == 1:
            c = configs[0]
            for g, v in c["false_alarm_rate"].items():
                print(f"  {g:14s} false alarms {v:6.1%}")
            print(f"  kills {c['kills']}/{len(faults)}")
        print(f"  {s['within_1pct_every_group']} configuration(s) keep <= 1% false alarms in every group; "
              f"best of those: {s['best_within']}")
        print(f"  numoracle rejects on correct kernels/variants: {s['numoracle_rejects_on_correct']}")
        for c in saved:
            print(f"  saved {c}")
    return 1 if numoracle_fa else 0
