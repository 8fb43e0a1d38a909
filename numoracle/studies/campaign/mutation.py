"""The campaign's mutation stage: every operator's mutation campaign
(``numoracle.studies.mutation.run_campaign``), each in its own process (a mutant that
writes out of bounds can corrupt the interpreter's heap or a CUDA context: only
its operator is lost), then the totals across operators - kills and false
alarms per oracle, the kill matrix, the tuned-tolerance frontier over the
(atol, rtol) grid with one configuration for every operator - and, from the
same correct-kernel runs, the tuned tolerance's false-alarm rate per input
group (the "shift" figures)."""
from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import tempfile
import time


def _f(x):
    return math.inf if x == "inf" else x


def global_frontier(results, max_fa=0.01) -> dict | None:
    """One (atol, rtol) for every operator: its worst false-alarm rate over every (operator,
    input group) cell of the correct-kernel and variant runs, and its kills over every
    effective mutant; the best configuration with at most ``max_fa`` everywhere."""
    if not results:
        return None
    atols, rtols = results[0]["grid"]["atols"], results[0]["grid"]["rtols"]
    cells = {}
    for r in results:
        for run in r["grid"]["kernel_runs"]:
            cells.setdefault((r["op"], run["group"]), []).append([_f(x) for x in run["required_atol"]])
    muts = [[_f(x) for x in m["grid_required_atol"]] for r in results for m in r["mutants"]
            if m["status"] == "effective" and m["grid_required_atol"]]
    configs, best, best_cfg = [], -1, None
    for a in atols:
        for k, rt in enumerate(rtols):
            worst = max((sum(n[k] > a for n in needs) / len(needs) for needs in cells.values() if needs), default=0.0)
            kills = sum(m[k] > a for m in muts)
            configs.append({"atol": a, "rtol": rt, "max_false_alarm_rate": worst, "kills": kills})
            if worst <= max_fa and kills > best:
                best, best_cfg = kills, {"atol": a, "rtol": rt, "kills": kills}
    nk = sum(bool(m["killed"].get("numoracle")) for r in results for m in r["mutants"] if m["status"] == "effective")
    return {"configurations": len(configs), "configurations_within": sum(c["max_false_alarm_rate"] <= max_fa
                                                                          for c in configs),
            "max_false_alarm_rate": max_fa, "best_kills": max(best, 0), "best": best_cfg,
            "effective_mutants": len(muts), "numoracle_kills": nk, "configs": configs}


def totals(results) -> dict:
    oracles = results[0]["oracles"] if results else []
    tot = {"operators": len(results), "mutants": sum(r["counts"]["total"] for r in results)}
    for k in ("effective", "crash", "equivalent", "load_error"):
        tot[k] = sum(r["counts"][k] for r in results)
    tot["oracles"] = oracles
    tot["kills"] = {o: sum(r["counts"]["kills"][o] for r in results) for o in oracles}
    tot["false_alarm_runs"] = {o: [sum(v[0] for r in results for v in r["false_alarms"][o].values()),
                                   sum(v[1] for r in results for v in r["false_alarms"][o].values())]
                               for o in oracles}
    tot["false_alarms"] = {o: v[0] for o, v in tot["false_alarm_runs"].items()}
    tot["worst_group_false_alarm_rate"] = {}
    for o in oracles:
        per_group = {}
        for r in results:
            for g, (f, n) in r["false_alarms"][o].items():
                c = per_group.setdefault(g, [0, 0])
                c[0] += f
                c[1] += n
        tot["worst_group_false_alarm_rate"][o] = max((f / n for f, n in per_group.values() if n), default=0.0)
    tot["frontier_per_operator_sum"] = sum(r["frontier"]["best_kills"] for r in results)
    tot["matrix"] = [{"id": f"{r['op']}:{m['id']}", "op": r["op"], "operator": m.get("operator"),
                      "status": m["status"], "equivalent": m["status"] == "equivalent", "killed": m["killed"]}
                     for r in results for m in r["mutants"] if m["status"] == "effective"]
    return tot


def tuned_shift(results) -> dict:
    """Per operator, the tuned tolerance and its false-alarm rate per input group on the
    correct kernels and variants (the paper's 'tolerances under input shift')."""
    out = {}
    for r in results:
        fa = r["false_alarms"].get("tuned")
        if not fa:
            continue
        out[r["op"]] = {"tolerance": r.get("tuned_tolerance"),
                        "groups": {g: (f / n if n else None) for g, (f, n) in fa.items()},
                        "numoracle_groups": {g: (f / n if n else None)
                                             for g, (f, n) in r["false_alarms"]["numoracle"].items()}}
    return out


def run_operator(name: str, *, backend: str, per_group: int, max_mutants: int, seconds: float,
                 dtype="bf16", params=None) -> tuple[dict | None, str | None]:
    """One operator's campaign in a child process: (result dict, failure text).  ``params``
    travel as a Python literal (read back with ``ast.literal_eval``, never unpickled)."""
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "op.json")
        cmd = [sys.executable, "-m", "numoracle.studies.campaign.mutation", name, out, backend, str(per_group),
               str(max_mutants), str(seconds), dtype, repr(dict(params or {}))]
        from ...processes import child_environment
        proc = subprocess.run(cmd, capture_output=True, text=True, env=child_environment())
        if proc.returncode != 0 or not os.path.exists(out):
            return None, f"exit {proc.returncode}: " + ((proc.stderr.strip().splitlines() or [""])[-1])[:300]
        with open(out, encoding="utf-8") as fh:
            return json.load(fh), None


def run(names, per_group: int, backend: str, out_dir, log=print, max_mutants: int = 40,
        time_budget: float = 3600.0, on_operator=None, params=None):
    """The stage: returns (mutation summary, frontier).  Each operator's result (or why it
    failed) is written to ``out_dir/<operator>.json`` when it ends and ``on_operator(name)``
    is called; an operator already there (a resumed campaign) is not run again.  The time
    budget is this run's, shared by the operators still to run.  ``params``: {operator:
    {name: value}} fixed in that operator's cases."""
    t0 = time.time()
    results, failures = [], {}
    out = None if out_dir is None else os.fspath(out_dir)
    if out is not None:
        os.makedirs(out, exist_ok=True)
    todo = []
    for name in names:
        path = None if out is None else os.path.join(out, f"{name}.json")
        if path is not None and os.path.exists(path):
            with open(path, encoding="utf-8") as fh:
                saved = json.load(fh)
            if "failure" in saved:
                failures[name] = saved["failure"]
            else:
                results.append(saved)
            continue
        todo.append((name, path))
    for i, (name, path) in enumerate(todo):
        left = time_budget - (time.time() - t0)
        if left <= 0:
            failures[name] = "not run: time budget spent"     # not written: a resumed run runs it
            continue
        d, why = run_operator(name, backend=backend, per_group=per_group, max_mutants=max_mutants,
                              seconds=left / (len(todo) - i), params=(params or {}).get(name))
        if d is None:
            failures[name] = why
            log(f"[mutation] {name}: FAILED {why}")
        else:
            results.append(d)
            st = d["counts"]
            log(f"[mutation] {name}: {st['effective']} effective, {st['equivalent']} equivalent, kills "
                + " ".join(f"{o}={k}" for o, k in st["kills"].items()) + f" ({d['seconds']}s)")
        if path is not None:
            _write(path, d if d is not None else {"op": name, "failure": why})
        if on_operator is not None:
            on_operator(name)
    order = {n: k for k, n in enumerate(names)}
    results.sort(key=lambda r: order.get(r["op"], len(order)))
    summary = totals(results) if results else {}
    summary["failures"] = failures
    summary["tuned_shift"] = tuned_shift(results)
    return summary, global_frontier(results)


def _write(path: str, data) -> None:
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(data, fh)
    os.replace(tmp, path)


def _child(argv) -> int:
    import ast
    name, out, backend, per_group, max_mutants, seconds, dtype, params = argv
    from ...processes import die_with_parent
    die_with_parent()                      # a killed campaign leaves no mutation run behind
    from ...backends import select
    from ..mutation import run_campaign
    backend = select(backend).name
    c = run_campaign(name, backend=backend, dtype=dtype, per_group=int(per_group), max_mutants=int(max_mutants),
                     deadline=time.time() + float(seconds), params=ast.literal_eval(params) or None)
    with open(out, "w", encoding="utf-8") as fh:
        json.dump(c.to_dict(), fh)
    return 0


if __name__ == "__main__":
    sys.exit(_child(sys.argv[1:]))
