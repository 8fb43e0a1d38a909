"""``numoracle mutate OP``: mutation testing of an operator's kernels against
numoracle and every baseline; prints the kill matrix (or ``--json``)."""

from __future__ import annotations

import json
import sys
import time

from ...errors import InvalidArgument


def add_arguments(p) -> None:
    p.add_argument("op", help="a registered operator (numoracle ops)")
    p.add_argument("--backend", default="interpreter", choices=("interpreter", "gpu", "auto"))
    p.add_argument("--dtype", default="bf16", choices=("bf16", "fp16", "fp32"))
    p.add_argument("--groups", default=None,
                   help="comma-separated input groups (default: every group of numoracle.families.GROUPS)")
    p.add_argument("--cases-per-group", type=int, default=2)
    p.add_argument("--rows", type=int, default=4)
    p.add_argument("--cols", type=int, default=96)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--max-mutants", type=int, default=None,
                   help="at most this many mutants, taken round-robin over the mutation operators")
    p.add_argument("--operators", default=None, help="comma-separated mutation operators (default: all)")
    p.add_argument("--k-ulp", type=float, default=2.0, help="k of the k-ulp baseline")
    p.add_argument("--calibration-runs", type=int, default=8, help="runs the tuned tolerance is fitted on")
    p.add_argument("--time-budget", type=float, default=None, help="stop starting mutants after this many seconds")
    p.add_argument("--json", action="store_true")
    p.add_argument("--out", default=None, help="also write the JSON report to this file")


def run(args) -> int:
    from .engine import kill_table, run_campaign
    from .mutators import MUTATORS
    kinds = None
    if args.operators:
        kinds = [k.strip() for k in args.operators.split(",") if k.strip()]
        bad = [k for k in kinds if k not in MUTATORS]
        if bad:
            raise InvalidArgument(f"--operators {','.join(bad)}: expected some of {', '.join(MUTATORS)}.")
    groups = [g.strip() for g in args.groups.split(",")] if args.groups else None
    if args.cases_per_group < 1:
        raise InvalidArgument(f"--cases-per-group {args.cases_per_group}: expected at least 1.")
    deadline = time.time() + args.time_budget if args.time_budget else None
    progress = None if args.json else (lambda s: print(s, file=sys.stderr, flush=True))
    c = run_campaign(args.op, backend=args.backend, dtype=args.dtype, groups=groups,
                     per_group=args.cases_per_group, rows=args.rows, cols=args.cols, seed=args.seed,
                     max_mutants=args.max_mutants, kinds=kinds, k_ulp=args.k_ulp,
                     n_cal=args.calibration_runs, progress=progress, deadline=deadline)
    d = c.to_dict()
    if args.out:
        with open(args.out, "w", encoding="utf-8") as f:
            json.dump(d, f, indent=1)
    if args.json:
        print(json.dumps(d, indent=1))
    else:
        print(kill_table(c))
    # exit 1 when numoracle rejected a correct kernel or variant (a false alarm to investigate)
    return 1 if d["numoracle_rejects_on_correct_and_variants"] else 0
