"""The adversarial soundness search of ``tests/test_adversarial.py`` on any backend, the GPU
included, over every registered operator and every kernel and behaviour-preserving variant.

Each (operator, kernel) pair is a ``numoracle.runner.fuzz`` run (no shrinking, not stopping at
the first finding) of ``--examples`` cases or ``--seconds``, drawn by ``strategies.soundness_cases``
(the groups where bounds and certificates are easiest to get wrong: subnormals, format
boundaries, cancellation, one huge value per row, all-equal, alternating signs; and three
shifted distributions), with special values injected and ``hypothesis.target`` pushing each
kernel's value toward its region's edge.  The pairs are spread over ``--shards`` processes
sharing the device.  One JSON line per pair goes to ``--out``; a finding is saved under
``--corpus`` for ``numoracle replay``.

    python scripts/adversarial_search.py --backend gpu --shards 12 --examples 3000 --seconds 30 \\
        --out adv.jsonl --corpus corpora-adv

Exit 1 if a correct kernel is rejected in the fixed-input mode, or gives NaN/inf where the
reference is certainly finite (the soundness failures).  Statistical-only rejects (statistical
mode rejects the fixed-input mode does not confirm) and errors (a kernel refusing inputs it does not
implement, inputs numoracle refuses) are counted, not failures.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import traceback

FAILING = ("reject", "nan")
MAX_ROWS, MAX_COLS = 16, 256        # the slow tier's caps


def pairs(ops=""):
    from numoracle import operators
    names = [n for n in ops.split(",") if n] or operators.names()
    return [(n, k) for n in names for k in sorted(operators.get(n).kernel_specs)]


def run_shard(shard: int, shards: int, a) -> None:
    from numoracle.runner.engine import fuzz
    from numoracle.strategies import soundness_cases
    for j, (name, kernel) in enumerate(pairs(a.ops)):
        if j % shards != shard:
            continue
        strategy = soundness_cases(name, max_rows=MAX_ROWS, max_cols=MAX_COLS)
        row = {"op": name, "kernel": kernel, "backend": a.backend}
        t = time.time()
        try:
            r = fuzz(name, kernel, backend=a.backend, strategy=strategy, max_examples=a.examples,
                     seconds=a.seconds, seed=a.seed + j, shrink=False, stop_on_first=False, corpus=a.corpus,
                     isolate=False, progress=False, timeout=a.timeout)
            row.update(statuses={s: v for s, v in r.totals.__dict__.items() if v}, exit=r.exit_reason,
                       saved=r.saved,
                       counterexample=r.counterexample.summary() if r.counterexample is not None else None,
                       errors=[str(e)[:300] for e in r.errors[:3]],
                       statistical_only_cases=[repr(o.case)[:300] for o in r.statistical_only[:8]],
                       groups={g: {k: v for k, v in s.__dict__.items() if v} for g, s in r.groups.items()})
        except Exception:  # noqa: BLE001 - one pair's failure is its line, not the end of the search
            row["exception"] = traceback.format_exc()[-1500:]
        row["seconds"] = round(time.time() - t, 1)
        print(json.dumps(row, default=str), flush=True)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--backend", default="interpreter")
    ap.add_argument("--ops", default="", help="comma-separated operators (default: every registered one)")
    ap.add_argument("--shards", type=int, default=1, help="processes, each a share of the pairs")
    ap.add_argument("--examples", type=int, default=60, help="cases per (operator, kernel)")
    ap.add_argument("--seconds", type=float, default=60.0, help="time limit per (operator, kernel)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--timeout", type=float, default=120.0, help="per-case kernel time limit")
    ap.add_argument("--corpus", default="corpora-adversarial")
    ap.add_argument("--out", default="adversarial.jsonl")
    ap.add_argument("--shard", type=int, default=None, help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.shard is not None:
        run_shard(a.shard, a.shards, a)
        return 0
    args = list(argv if argv is not None else sys.argv[1:])
    procs = [subprocess.Popen([sys.executable, os.path.abspath(__file__), *args, "--shard", str(i)],
                              stdout=subprocess.PIPE, text=True) for i in range(a.shards)]
    rows = []
    for p in procs:
        out, _ = p.communicate()
        rows += [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    with open(a.out, "w") as fh:
        fh.writelines(json.dumps(r) + "\n" for r in rows)
    total: dict = {}
    for r in rows:
        for k, v in r.get("statuses", {}).items():
            total[k] = total.get(k, 0) + v
    failing = [r for r in rows if any(r.get("statuses", {}).get(s) for s in FAILING) or "exception" in r]
    print(f"{len(rows)} of {len(pairs(a.ops))} (operator, kernel) pairs on {a.backend}: {total}")
    for r in failing:
        print(f"FAILED {r['op']}/{r['kernel']}: {r.get('statuses')} {r.get('counterexample') or r.get('exception', '')}")
    return 1 if failing or len(rows) != len(pairs(a.ops)) else 0


if __name__ == "__main__":
    sys.exit(main())
