"""Judge flash-linear-attention's kernels (``fla_ops``) across every input-shift group, in
bf16, fp16 and fp32, in both modes, on the repaired interpreter; print a table and write the
counts as JSON (docs/results/2026-12-02-third-party-fla.md).  From the repository root:

    python tests/third_party/sweep_fla.py --drawn 150 --out docs/results/2026-12-01-third-party-fla.json
    python tests/third_party/sweep_fla.py --drawn 50 --autotune-config last \
        --out docs/results/2026-12-01-third-party-fla-last-config.json

Per operator and format: in every group, one case per shape of ``SHAPES`` (both layer-norm
kernels: D <= 512 and D > 512) and per parameter choice, then ``--drawn`` cases drawn by
``numoracle.strategies.cases`` (shapes, power-of-two scales of input 0, special values,
parameters; Hypothesis derandomized, so a run is reproducible).  Each case's kernel runs
once and its outputs are judged in both modes against one evaluation of the reference.  A
reject is saved under ``--corpus`` (replay it with ``numoracle replay``)."""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import time
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SHAPES = ((4, 96), (2, 512), (3, 700), (1, 1))
FORMATS = ("bf16", "fp16", "fp32")
MODES = ("statistical", "fixed")


def param_grid(op) -> list:
    names = list(op.domain.params)
    return [dict(zip(names, vals)) for vals in itertools.product(*(op.domain.params[n] for n in names))] or [{}]


def fixed_cases(op, fmt: str) -> list:
    from numoracle.strategies import GROUPS, Case
    out = []
    for gi, g in enumerate(GROUPS):
        for si, (rows, cols) in enumerate(SHAPES):
            for pi, params in enumerate(param_grid(op)):
                out.append(Case(op.name, fmt, rows, cols, g, 0, (), tuple(sorted(params.items())), (),
                                10_000 * gi + 100 * si + pi))
    return out


def drawn_cases(op, fmt: str, n: int) -> list:
    from hypothesis import HealthCheck, given, settings
    from numoracle.strategies import cases
    got = []
    if n <= 0:
        return got

    @settings(max_examples=n, derandomize=True, database=None, deadline=None,
              suppress_health_check=list(HealthCheck))
    @given(cases(op, formats=[fmt], max_rows=8, max_cols=1024))
    def collect(case):
        got.append(case)
    collect()
    return got[:n]


def judge_case(op, kernel, case, corpus):
    """(mode -> verdict summary, error text or None) of one case."""
    import numoracle as no
    from numoracle.runner.execute import execute
    inputs, params = case.materialize("cpu", op)
    ran = execute(kernel, inputs, params, (), timeout=120.0, device="cpu")
    if not ran.ok:
        return None, f"{ran.status}: {ran.error}"
    verdicts = no.evaluate(op.reference, inputs, params).judge(ran.outputs)
    out = {}
    for m, v in verdicts.items():
        out[m] = {"status": v.status, "elements": v.n_elements, "rejected": v.n_rejected,
                  "uncertified": v.n_uncertified, "reasons": v.certificate.reason_kinds() if v.n_uncertified else []}
        if m == "statistical" and v.status == "reject":
            out[m]["confirmation"] = v.confirmation
    if corpus and any(v.status == "reject" for v in verdicts.values()):
        from numoracle import corpus as C
        from numoracle.runner.outcomes import Outcome
        o = Outcome("reject", case, verdicts["fixed"], inputs=inputs, params=params, outputs=ran.outputs)
        out["saved"] = str(C.save(corpus, op, "correct", o, backend="interpreter", mode="fixed"))
    return out, None


def sweep(ops, drawn: int, corpus, log=print) -> dict:
    from numoracle.strategies import GROUPS
    rows = []
    for op in ops:
        kernel = op.kernels["correct"]
        for fmt in FORMATS:
            t0 = time.time()
            cases = fixed_cases(op, fmt) + drawn_cases(op, fmt, drawn)
            table = {g: {m: {"cases": 0, "accept": 0, "reject": 0, "uncertified": 0, "statistical_only": 0,
                             "elements": 0, "rejected_elements": 0, "uncertified_elements": 0, "reasons": {}}
                         for m in MODES} for g in GROUPS}
            errors, saved = [], []
            for case in cases:
                res, err = judge_case(op, kernel, case, corpus)
                if err is not None:
                    errors.append({"case": repr(case), "error": err[:300]})
                    continue
                saved += [res.pop("saved")] if "saved" in res else []
                for m in MODES:
                    r, cell = res[m], table[case.group][m]
                    cell["cases"] += 1
                    status = r["status"]
                    if status == "reject" and r.get("confirmation") == "statistical-only":
                        status = "statistical_only"
                    cell[status] += 1
                    cell["elements"] += r["elements"]
                    cell["rejected_elements"] += r["rejected"]
                    cell["uncertified_elements"] += r["uncertified"]
                    for why in r["reasons"]:
                        cell["reasons"][why] = cell["reasons"].get(why, 0) + 1
            row = {"op": op.name, "format": fmt, "cases": len(cases), "groups": table, "errors": errors,
                   "saved": saved, "seconds": round(time.time() - t0, 1)}
            rows.append(row)
            log(summary_line(row))
    return {"rows": rows, "shapes": [list(s) for s in SHAPES], "drawn_per_format": drawn}


def summary_line(row) -> str:
    parts = []
    for m in MODES:
        t = {k: sum(row["groups"][g][m][k] for g in row["groups"])
             for k in ("cases", "accept", "reject", "statistical_only", "uncertified", "uncertified_elements",
                       "elements")}
        parts.append(f"{m}: {t['accept']}/{t['reject']}/{t['uncertified']} (stat-only {t['statistical_only']}, "
                     f"uncertified elements {t['uncertified_elements']}/{t['elements']})")
    return (f"{row['op']:26s} {row['format']:5s} {row['cases']:4d} cases  " + "  ".join(parts)
            + (f"  ERRORS {len(row['errors'])}" if row["errors"] else "") + f"  {row['seconds']}s")


def markdown(res) -> str:
    """Per operator and format, each group's accept/reject/uncertified cases (one mode's
    counts when both modes agree on every cell, else both), then the uncertified reasons."""
    from numoracle.strategies import GROUPS
    groups = list(GROUPS)
    head = "| operator | format | " + " | ".join(groups) + " | uncertified elements |"
    lines = [head, "|" + "---|" * (len(groups) + 3)]
    reasons: dict = {}
    for r in res["rows"]:
        cells = []
        for g in groups:
            st, fx = r["groups"][g]["statistical"], r["groups"][g]["fixed"]
            a = f"{st['accept']}/{st['reject']}/{st['uncertified']}"
            b = f"{fx['accept']}/{fx['reject']}/{fx['uncertified']}"
            cells.append(a if a == b and not st["statistical_only"] else f"{a} (fixed {b})")
            for why, n in fx["reasons"].items():
                key = (r["op"], why.split(" [")[0])
                reasons[key] = reasons.get(key, 0) + n
        unc = sum(r["groups"][g]["fixed"]["uncertified_elements"] for g in groups)
        tot = sum(r["groups"][g]["fixed"]["elements"] for g in groups)
        lines.append(f"| {r['op'].removeprefix('fla_')} | {r['format']} | " + " | ".join(cells)
                     + f" | {unc}/{tot} |")
    lines += ["", "| operator | uncertified because (site kind) | cases |", "|---|---|---|"]
    lines += [f"| {op.removeprefix('fla_')} | {why} | {n} |" for (op, why), n in sorted(reasons.items())]
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("ops", nargs="*", help="operator names (default: every one in fla_ops)")
    ap.add_argument("--drawn", type=int, default=24, help="drawn cases per operator and format")
    ap.add_argument("--out", default=None, help="write the counts as JSON here")
    ap.add_argument("--corpus", default="corpora-fla", help="save rejects here ('' to skip)")
    ap.add_argument("--autotune-config", default="first",
                    help="the config interpreted autotuned kernels run: first, last, or an index "
                         "(fla's tile sizes and warp counts; numoracle.backends.interpreter.set_autotune_config)")
    ap.add_argument("--table", default=None, metavar="JSON",
                    help="print the Markdown tables of a sweep's JSON and exit (runs nothing)")
    args = ap.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    if args.table:
        print(markdown(json.loads(Path(args.table).read_text())))
        return 0
    from numoracle import backends
    from numoracle.backends.interpreter import set_autotune_config
    backends.select("interpreter")          # before fla's kernels are imported
    set_autotune_config({"first": 0, "last": -1}.get(args.autotune_config, args.autotune_config))
    warnings.simplefilter("ignore")         # fla: "Triton is not supported on current platform"
    from tests.third_party import fla_ops
    ops = [o for o in fla_ops.OPERATORS if not args.ops or o.name in args.ops or o.name[4:] in args.ops]
    res = sweep(ops, args.drawn, args.corpus or None)
    import platform

    import torch
    import triton
    res["autotune_config"] = args.autotune_config
    res["versions"] = {"torch": torch.__version__, "triton": triton.__version__, "python": platform.python_version(),
                       "fla-core": _version("fla-core")}
    if args.out:
        Path(args.out).write_text(json.dumps(res, indent=1) + "\n")
    bad = [r for r in res["rows"] if r["errors"] or any(
        c[m]["reject"] for c in r["groups"].values() for m in MODES)]
    return 1 if bad else 0


def _version(dist: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version
    try:
        return version(dist)
    except PackageNotFoundError:
        return None


if __name__ == "__main__":
    sys.exit(main())
