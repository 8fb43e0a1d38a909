"""``numoracle calibrate``: measure the math library's errors on a backend and write a
math-library profile (``numoracle.mathlib.calibrate``)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from ..mathlib import FUNCTION_NAMES
from . import common



def add_arguments(p) -> None:
    common.add_backend(p)
    p.add_argument("--out", metavar="PATH", help="write the profile JSON here (default: not written, only reported)")
    p.add_argument("--samples", type=common.positive_int, default=1 << 20, help="inputs per kernel call besides the edge cases "
                   "(half dense bit-pattern sweep, half random; default 2^20)")
    p.add_argument("--functions", nargs="+", metavar="FN", help=f"profile functions to measure (default all: "
                   f"{' '.join(FUNCTION_NAMES)})")
    p.add_argument("--margin", type=common.nonnegative, default=0.25, help="safety margin: bound = fit x (1 + margin)")
    common.add_seed(p, help="seed of the random inputs")
    p.add_argument("--name", help="profile name (default: 'interpreter', or the GPU's model, e.g. 'h200')")
    p.add_argument("--base", help="copy functions not measured from this profile (a shipped name or a path)")
    p.add_argument("--refine", type=common.count, default=32, help="after the first pass, measure every fp32 neighbour "
                   "around this many worst inputs per call (errors cluster; 0 turns it off)")
    p.add_argument("--note", help="a sentence recorded in the profile's provenance (why this margin, ...)")
    common.add_quiet(p)
    common.add_json(p)


def run(args) -> int:
    from ..mathlib.calibrate import calibrate
    log = common.progress(args)
    profile, report, uncovered = calibrate(args.backend, args.functions, args.samples, args.seed, args.margin,
                                           args.name, args.base, log, refine=args.refine, note=args.note)
    if args.out:
        Path(args.out).write_text(json.dumps(profile, indent=1) + "\n")
    if args.json:
        common.emit_json(args, profile)
    else:
        print(f"ftz: {profile['ftz']}; {profile['provenance']['seconds']} s; "
              + (f"written to {args.out}" if args.out else "not written (no --out)"))
    if uncovered:
        print(f"{uncovered} measured point(s) no ulp model covers (see 'uncovered' per call): the profile is "
              f"not sound for them", file=sys.stderr)
        return 1
    return 0
