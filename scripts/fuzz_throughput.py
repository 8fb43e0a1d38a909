"""Fuzz throughput: cases/s for every registered operator's correct kernel
(Hypothesis draws, kernel run, reference, verdict; no shrinking, no saving),
default shapes (each operator's domain), on the chosen backend.

    python scripts/fuzz_throughput.py --backend interpreter --seconds 20
    PYTHONPATH=$PWD python scripts/fuzz_throughput.py --backend gpu --seconds 30 --out $OUT/fuzz_throughput.json

Prints one row per operator (cases, cases/s, statuses) and writes JSON with --out.
A correct kernel rejected here is a finding: the row shows it and the exit code is 1.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--backend", default="interpreter", choices=("interpreter", "gpu", "auto"))
    ap.add_argument("--seconds", type=float, default=20.0, help="time budget per operator")
    ap.add_argument("--examples", type=int, default=None, help="cap on cases per operator")
    ap.add_argument("--ops", nargs="*", default=None, help="operators (default: every registered one)")
    ap.add_argument("--mode", default="statistical", choices=("statistical", "fixed"))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--max-rows", type=int, default=None, help="cap rows (default: the operator's domain)")
    ap.add_argument("--max-cols", type=int, default=None, help="cap cols (default: the operator's domain)")
    ap.add_argument("--out", default=None, help="write the results as JSON here")
    args = ap.parse_args(argv)

    from numoracle import backends, operators
    from numoracle.corpus import versions
    from numoracle.runner import fuzz
    from numoracle.strategies import cases
    backend = backends.select(args.backend)
    names = args.ops or operators.names()
    rows, found = [], False
    print(f"fuzz throughput on {backend} ({args.mode}), {args.seconds:g}s per operator, default shapes")
    print(f"{'operator':22s} {'cases':>6s} {'cases/s':>8s} {'accept':>7s} {'reject':>7s} {'stat-only':>9s} "
          f"{'uncert':>7s} {'error':>6s} {'nan':>4s} {'timeout':>7s} {'exit reason'}")
    for name in names:
        op = operators.get(name)
        if "correct" not in op.kernel_specs:
            continue
        t0 = time.time()
        try:
            res = fuzz(op, "correct", backend=backend, mode=args.mode,
                       max_examples=args.examples or 10**9, seconds=args.seconds, seed=args.seed,
                       strategy=cases(op, max_rows=args.max_rows, max_cols=args.max_cols),
                       shrink=False, stop_on_first=False, database=None)
        except Exception as exc:  # an operator that cannot be fuzzed is reported, not fatal to the table
            print(f"{name:22s} failed: {type(exc).__name__}: {exc}")
            rows.append({"op": name, "failed": f"{type(exc).__name__}: {exc}"})
            continue
        t = res.totals
        found |= res.found
        rate = t.cases / res.elapsed if res.elapsed else 0.0
        print(f"{name:22s} {t.cases:6d} {rate:8.2f} {t.accept:7d} {t.reject:7d} {t.statistical_only:9d} "
              f"{t.uncertified:7d} {t.error:6d} {t.nan:4d} {t.timeout:7d} {res.exit_reason}", flush=True)
        rows.append({"op": name, "cases": t.cases, "seconds": round(res.elapsed, 2),
                     "wall_seconds": round(time.time() - t0, 2), "cases_per_second": round(rate, 3),
                     "totals": t.to_dict(), "exit_reason": res.exit_reason,
                     "findings": [o.summary() for o in (res.errors + res.other_rejects)[:5]]})
    if args.out:
        out = Path(args.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps({"backend": getattr(backend, "name", str(backend)), "mode": args.mode, "seconds_per_op": args.seconds,
                                   "versions": versions(), "machine": platform.node(), "rows": rows}, indent=2))
        print(f"wrote {out}")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
