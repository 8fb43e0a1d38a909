"""Assemble one campaign.json from stage results that were run separately (as on a
GPU lease, where each call has a time limit): operator sweeps (JSON written by
scripts/operator_sweep.py, or the per-kernel lines of its log when a run was cut
before it wrote JSON), a campaign directory holding replays, and a mutation
campaign JSON (scripts/mutation_campaign.py).  Then ``numoracle report DIR``.

    python scripts/assemble_campaign.py --out DIR --sweep a.json --sweep-log b.log \
        --campaign camp/campaign.json --mutation mutation.json
"""
from __future__ import annotations

import argparse
import ast
import json
import os
import sys

from numoracle.studies.campaign import mutation as MU


def from_log(path: str, cases: int) -> dict:
    """Per-kernel counts from operator_sweep's log lines ("op/k: stat {...} fixed {...} errors N ...")."""
    out = {}
    for line in open(path, encoding="utf-8"):
        if ": stat {" not in line or " fixed {" not in line:
            continue
        key, rest = line.split(": stat ", 1)
        stat, rest = rest.split(" fixed ", 1)
        fixed, rest = rest.split(" errors ", 1)
        out[key.strip()] = {"cases": cases, "counts": {"statistical": ast.literal_eval(stat),
                                                       "fixed": ast.literal_eval(fixed)},
                            "errors": int(rest.split()[0]), "from_log": True}
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--sweep", action="append", default=[])
    ap.add_argument("--sweep-log", action="append", default=[])
    ap.add_argument("--log-cases", type=int, default=200)
    ap.add_argument("--campaign", default=None, help="a campaign.json with replays (and meta)")
    ap.add_argument("--mutation", default=None)
    ap.add_argument("--note", default="")
    a = ap.parse_args(argv)
    data = {"schema": 1, "meta": {}, "correct": {}}
    for p in a.sweep_log:
        data["correct"].update(from_log(p, a.log_cases))
    for p in a.sweep:                     # full results win over log lines
        s = json.load(open(p, encoding="utf-8"))
        data["correct"].update(s["results"])
        data["meta"].update({k: s[k] for k in ("backend", "device", "torch", "python", "date") if k in s})
    if a.campaign:
        c = json.load(open(a.campaign, encoding="utf-8"))
        data["meta"].update(c.get("meta", {}))
        for k in ("replays",):
            if c.get(k):
                data[k] = c[k]
    if a.mutation:
        m = json.load(open(a.mutation, encoding="utf-8"))
        ops = m["operators"]
        summary = MU.totals(ops)
        data["tuned_shift"] = MU.tuned_shift(ops)
        data["mutation"] = summary
        data["frontier"] = MU.global_frontier(ops)
    data["meta"]["size"] = "assembled"
    data["meta"]["assembled_from"] = {"sweeps": a.sweep, "sweep_logs": a.sweep_log, "campaign": a.campaign,
                                      "mutation": a.mutation}
    if a.note:
        data["meta"]["note"] = a.note
    os.makedirs(a.out, exist_ok=True)
    tmp = os.path.join(a.out, "campaign.json.tmp")
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(data, fh, indent=1)
    os.replace(tmp, os.path.join(a.out, "campaign.json"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
