"""``numoracle mutate OP``: mutation testing of an operator's kernels against numoracle and
every baseline; prints the kill matrix (or ``--json``)."""

from __future__ import annotations

import json
import time

from ..errors import InvalidArgument
from . import common



def add_arguments(p) -> None:
    common.add_operator(p)
    common.add_backend(p)
    common.add_format(p, default="bf16", choices=("bf16", "fp16", "fp32"))
    common.add_groups(p)
    common.add_params(p)
    p.add_argument("--cases-per-group", type=common.positive_int, default=2, help="cases in each input group")
    p.add_argument("--rows", type=common.positive_int, default=4, help="rows of every case")
    p.add_argument("--cols", type=common.positive_int, default=96, help="columns of every case")
    common.add_seed(p)
    p.add_argument("--max-mutants", type=common.positive_int, default=None,
                   help="at most this many mutants, taken round-robin over the mutation operators (default: all)")
    p.add_argument("--operators", default=None, help="comma-separated mutation operators (default: all)")
    p.add_argument("--k-ulp", type=common.seconds, default=2.0, help="k of the k-ulp baseline")
    p.add_argument("--calibration-runs", type=common.positive_int, default=8,
                   help="runs the tuned tolerance is fitted on")
    p.add_argument("--seconds", type=common.seconds, default=None,
                   help="stop starting mutants after this many seconds (default: no limit)")
    common.add_isolate(p)
    common.add_timeout(p)
    common.add_quiet(p)
    common.add_json(p)
    common.add_out(p)


def run(args) -> int:
    from .. import operators
    from ..studies.mutation.engine import kill_table, run_campaign
    from ..studies.mutation.mutators import MUTATORS
    kinds = None
    if args.operators:
        kinds = [k.strip() for k in args.operators.split(",") if k.strip()]
        bad = [k for k in kinds if k not in MUTATORS]
        if bad:
            raise InvalidArgument(f"--operators {','.join(bad)}: expected some of {', '.join(MUTATORS)}.")
    groups = common.groups(args)
    deadline = time.time() + args.seconds if args.seconds else None
    progress = common.progress(args)
    with common.isolation(args):
        c = run_campaign(args.op, backend=args.backend, dtype=args.dtype, groups=groups,
                         per_group=args.cases_per_group, rows=args.rows, cols=args.cols, seed=args.seed,
                         max_mutants=args.max_mutants, kinds=kinds, k_ulp=args.k_ulp,
                         n_cal=args.calibration_runs, progress=progress, deadline=deadline,
                         params=common.params(args, operators.resolve(args.op)))
    d = c.to_dict()
    if args.out:
        with open(args.out, "w", encoding="utf-8") as f:
            json.dump(d, f, indent=1)
    if args.json:
        common.emit_json(args, d)
    else:
        print(kill_table(c))
    # exit 1 when numoracle rejected a correct kernel or variant (a false alarm to investigate)
    return 1 if d["numoracle_rejects_on_correct_and_variants"] else 0
