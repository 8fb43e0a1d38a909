"""Mutation campaign over the registered operators: every oracle's kills and false
alarms on the same runs, the kill matrix per operator, and the tuned-tolerance
frontier.  Usage (repo root, PYTHONPATH=$PWD):

    python scripts/mutation_campaign.py [--ops a,b] [--cases-per-group 2] [--max-mutants 30]
        [--backend interpreter|gpu] [--time-budget 1200] [--out FILE]

Prints one line per operator and the totals; --out writes the full JSON (kill
matrices, false alarms per group, frontiers)."""
import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time

from numoracle import operators
from numoracle.backends import select
from numoracle.studies.campaign.mutation import global_frontier, totals
from numoracle.studies.mutation import kill_table, run_campaign


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--ops", default=None, help="comma-separated operators (default: every registered one)")
    p.add_argument("--backend", default="interpreter", choices=("interpreter", "gpu"))
    p.add_argument("--dtype", default="bf16")
    p.add_argument("--cases-per-group", type=int, default=2)
    p.add_argument("--rows", type=int, default=4)
    p.add_argument("--cols", type=int, default=96)
    p.add_argument("--max-mutants", type=int, default=30, help="per operator")
    p.add_argument("--time-budget", type=float, default=1200.0, help="seconds for the whole campaign")
    p.add_argument("--tables", action="store_true", help="print each operator's kill matrix")
    p.add_argument("--out", default=None)
    p.add_argument("--single", default=None, help=argparse.SUPPRESS)
    p.add_argument("--single-out", default=None, help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    backend = select(a.backend)
    if a.single:                               # child process: one operator
        c = run_campaign(a.single, backend=backend, dtype=a.dtype, per_group=a.cases_per_group, rows=a.rows,
                         cols=a.cols, max_mutants=a.max_mutants, deadline=time.time() + a.time_budget)
        if a.tables:
            print(kill_table(c))
        with open(a.single_out, "w", encoding="utf-8") as f:
            json.dump(c.to_dict(), f)
        return 0
    names = a.ops.split(",") if a.ops else operators.names()
    t0 = time.time()
    results, failures = [], {}
    for i, name in enumerate(names):
        left = a.time_budget - (time.time() - t0)
        if left <= 0:
            failures[name] = "not run: time budget spent"
            continue
        share = left / (len(names) - i)        # an even share of what is left
        # each operator in its own process: a mutant that writes out of bounds can corrupt the
        # interpreter's heap (or, on a GPU, poison the CUDA context) - only its operator is lost
        with tempfile.TemporaryDirectory() as tmp:
            out = os.path.join(tmp, "op.json")
            cmd = [sys.executable, os.path.abspath(__file__), "--single", name, "--single-out", out,
                   "--backend", backend, "--dtype", a.dtype, "--cases-per-group", str(a.cases_per_group),
                   "--rows", str(a.rows), "--cols", str(a.cols), "--max-mutants", str(a.max_mutants),
                   "--time-budget", str(share)] + (["--tables"] if a.tables else [])
            proc = subprocess.run(cmd, capture_output=True, text=True)
            if proc.stdout:
                print(proc.stdout, end="", flush=True)
            if proc.returncode != 0 or not os.path.exists(out):
                failures[name] = f"exit {proc.returncode}: " + (proc.stderr.strip().splitlines() or [""])[-1][:300]
                print(f"{name:28s} FAILED: {failures[name]}", flush=True)
                continue
            with open(out, encoding="utf-8") as f:
                d = json.load(f)
        results.append(d)
        st, fr = d["counts"], d["frontier"]
        fa_no = sum(v[0] for v in d["false_alarms"]["numoracle"].values())
        runs = sum(v[1] for v in d["false_alarms"]["numoracle"].values())
        print(f"{name:28s} mutants {st['total']:3d}  effective {st['effective']:3d}  crash {st['crash']:3d}  "
              f"equiv {st['equivalent']:3d}  kills " + " ".join(f"{o}={k}" for o, k in st["kills"].items())
              + f"  numoracle FA {fa_no}/{runs}  frontier {fr['best_kills']}  ({d['seconds']}s)", flush=True)
        if a.tables:
            print(kill_table(c))
    oracles = results[0]["oracles"] if results else []
    tot = totals(results) if results else {"operators": 0, "mutants": 0, "effective": 0, "crash": 0,
                                            "equivalent": 0, "load_error": 0, "kills": {}, "false_alarm_runs": {},
                                            "worst_group_false_alarm_rate": {}}
    tot.pop("matrix", None)
    tot["false_alarms"] = tot.pop("false_alarm_runs")          # [failing runs, runs] per oracle
    tot["frontier_per_operator_sum"] = sum(r["frontier"]["best_kills"] for r in results)
    tot["numoracle_kills_of_frontier_mutants"] = sum(r["frontier"]["numoracle_kills"] for r in results)
    tot["global_frontier"] = global_frontier(results)
    tot["seconds"] = round(time.time() - t0, 1)
    eff = tot["effective"]
    print()
    print(f"total: {tot['mutants']} mutants over {tot['operators']} operators; {eff} effective (+{tot['crash']} "
          f"crash-killed, {tot['equivalent']} equivalent, {tot['load_error']} unloadable)")
    for o in oracles:
        k = tot["kills"][o]
        f, n = tot["false_alarms"][o]
        print(f"  {o:14s} kills {k:4d}/{eff} ({(k / eff if eff else math.nan):.1%})   false alarms {f}/{n} "
              f"(worst group {tot['worst_group_false_alarm_rate'][o]:.1%})")
    print(f"  tuned-tolerance frontier (per operator, <= 1% false alarms in every group): "
          f"{tot['frontier_per_operator_sum']}/{eff} kills; numoracle {tot['numoracle_kills_of_frontier_mutants']}")
    gf = tot["global_frontier"]
    if gf:
        print(f"  one configuration for every operator (<= 1% false alarms in every operator x group): "
              f"{gf['configurations_within']} of {gf['configurations']} qualify; the best kills {gf['best_kills']}/"
              f"{gf['effective_mutants']} at {gf['best']}; numoracle kills {gf['numoracle_kills']}")
    if failures:
        print("  operators not completed:", json.dumps(failures))
    if a.out:
        with open(a.out, "w", encoding="utf-8") as f:
            json.dump({"backend": backend, "args": vars(a), "totals": tot, "operators": results,
                       "failures": failures}, f, indent=1)
    return 1 if any(tot["false_alarms"].get("numoracle", [0])[0] for _ in [0]) else 0


if __name__ == "__main__":
    sys.exit(main())
