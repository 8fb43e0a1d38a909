"""Tightness as a measured figure: per operator and input-shift group, on the Triton
interpreter (CPU), for the operator's correct kernel and its behaviour-preserving variants:

- the width of the fixed-input acceptance interval in output ulps at the reference value
  (pre-store ``hi - lo`` over ``ulp(|centre|)`` of the output format): median and p99;
- the position of the correct outputs inside their regions: per element
  ``|kernel - centre|`` over the centre's distance to the first storage value rejected on
  that side (the one past the accepted bound): 0 at the centre, 1 at a rejected value, so
  a correct kernel stays below 1 and one storing the only accepted value sits near 0.5:
  median, p99 and max;
- the fraction of certified elements a gross fault (``-3 y + 7``, rounded to the output
  format) brings outside the region: a region made sound by being wide shows here;
- per registered faulty kernel, the fraction of cases it is rejected on (fixed-input mode,
  and statistical confirmed in fixed mode).

Every kernel sees the same cases: the operator's example for each group, each format of its
domain and two (seed, shape) pairs, the domain's parameter choices cycling from case to case
(parameters the example returns win, as in ``strategies.Case``).  A region wider than its format's whole range, and
uncertified elements, are left out of the width figures (counted apart).

    python benchmarks/tightness.py --out docs/results/<date>-tightness-<tag>.json [--md table.md]
    python benchmarks/tightness.py --compare BEFORE.json AFTER.json
"""
from __future__ import annotations

import argparse
import json
import math
import sys
import time

import torch

from numoracle import backends, operators
from numoracle import formats as F
from numoracle.check import check_modes
from numoracle.strategies import GROUPS

DT = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
# (seed, rows, cols): clamped into each operator's domain
CASES = ((0, 4, 96), (1, 8, 256))


def _shape(op, rows, cols):
    d = op.domain
    m = max(d.cols_multiple_of, 1)
    c = min(max(cols, d.cols[0]), d.cols[1])
    c = max(m, c - c % m)
    return min(max(rows, d.rows[0]), d.rows[1]), c


def _q(t: torch.Tensor, q: float) -> float | None:
    if t.numel() == 0:
        return None
    t = t.double()
    k = min(t.numel() - 1, max(0, math.ceil(q * t.numel()) - 1))
    return float(t.sort().values[k])


def _element_figures(v):
    """(width in ulps, position, gross-fault rejected) of every certified finite element."""
    ws, ps = [], []
    for o in v.outputs:
        try:
            lo, hi, qlo, qhi = o.lo, o.hi, o.qlo, o.qhi
        except Exception:          # an output judged without an interval (none at present)
            continue
        c, k = o.centre, o.kernel
        ok = ~o.uncertified & torch.isfinite(c) & torch.isfinite(hi - lo) & torch.isfinite(k)
        ok &= torch.isfinite(qlo) & torch.isfinite(qhi)
        if not bool(ok.any()):
            continue
        ulp = F.ulp(c[ok].abs(), o.fmt)
        ws.append(((hi - lo)[ok] / ulp).cpu())
        kk, cc, lo_, hi_ = k[ok], c[ok], qlo[ok], qhi[ok]
        tiny = torch.finfo(torch.float64).tiny
        up = (F.next_up(hi_, o.fmt) - cc).clamp(min=tiny)
        down = (cc - F.next_down(lo_, o.fmt)).clamp(min=tiny)
        pos = torch.where(kk >= cc, (kk - cc) / up, (cc - kk) / down)
        pos = torch.where(kk == cc, torch.zeros_like(pos), pos)
        ps.append(pos.cpu())
    cat = (lambda xs: torch.cat(xs) if xs else torch.empty(0, dtype=torch.float64))
    return cat(ws), cat(ps)


def _gross(op, outs, inputs, params, backend):
    """Fraction of certified elements rejected (fixed) when every output y becomes -3 y + 7."""
    outs_t = outs if isinstance(outs, (tuple, list)) else (outs,)
    bad = []
    for y in outs_t:
        if not (isinstance(y, torch.Tensor) and y.dtype.is_floating_point and y.dtype in
                (torch.bfloat16, torch.float16, torch.float32)):
            bad.append(y)
            continue
        bad.append((y.double() * -3 + 7).to(y.dtype))
    v = check_modes(op.reference, tuple(bad) if len(bad) > 1 else bad[0], inputs, params,
                    modes=("fixed",), backend=backend)["fixed"]
    hit = tot = 0
    for o, y in zip(v.outputs, outs_t):
        if not (isinstance(y, torch.Tensor) and y.dtype in (torch.bfloat16, torch.float16, torch.float32)):
            continue
        keep = ~o.uncertified
        tot += int(keep.sum())
        hit += int((o.rejected & keep).sum())
    return hit, tot


def run(ops, backend, groups, log=print):
    rows, kills = [], []
    for name in ops:
        op = operators.get(name)
        fmts = [f for f in op.domain.formats if f in DT]
        kernels = {k: v for k, v in op.kernel_specs.items()}
        faulty = sorted(op.faulty)
        fk = {k: 0 for k in faulty}
        fk_stat = {k: 0 for k in faulty}
        fk_cases = {k: 0 for k in faulty}
        choices = sorted(op.domain.params.items())
        case_no = 0
        for group in groups:
            acc_w, acc_p = [], []
            gross_hit = gross_tot = 0
            n_cases = fixed_rejects = stat_rejects = uncert = errors = 0
            first_error = None
            for fmt in fmts:
                for seed, r, c in CASES:
                    r, c = _shape(op, r, c)
                    drawn = {k: v[(case_no + j) % len(v)] for j, (k, v) in enumerate(choices)}
                    case_no += 1
                    try:
                        inputs, params = op.example(seed, dtype=DT[fmt], family=group, rows=r, cols=c)
                    except Exception as exc:
                        errors += 1
                        first_error = first_error or f"example: {type(exc).__name__}: {exc}"
                        continue
                    # the examples are made on the CPU; the kernels run on the backend's device
                    inputs = tuple(t.to(backend.device) if isinstance(t, torch.Tensor) else t for t in inputs)
                    params = {**drawn, **params}
                    for kname in kernels:
                        try:
                            kern = op.kernels[kname]
                            outs = kern(*[t.clone() if isinstance(t, torch.Tensor) else t for t in inputs],
                                        **params)
                        except Exception as exc:
                            errors += 1
                            first_error = first_error or f"kernel {kname}: {type(exc).__name__}: {exc}"
                            continue
                        try:
                            v = check_modes(op.reference, outs, inputs, params, backend=backend)
                        except Exception as exc:
                            errors += 1
                            first_error = first_error or f"verdict: {type(exc).__name__}: {exc}"
                            continue
                        n_cases += 1
                        fixed_rejects += v["fixed"].status == "reject"
                        stat_rejects += v["statistical"].status == "reject"
                        uncert += v["fixed"].status == "uncertified"
                        w, p = _element_figures(v["fixed"])
                        acc_w.append(w)
                        acc_p.append(p)
                        if kname == "correct":
                            h, t = _gross(op, outs, inputs, params, backend)
                            gross_hit += h
                            gross_tot += t
                    for fname in faulty:
                        try:
                            kern = op.faulty_kernel(fname)
                            outs = kern(*[t.clone() if isinstance(t, torch.Tensor) else t for t in inputs],
                                        **params)
                            v = check_modes(op.reference, outs, inputs, params, backend=backend)
                        except Exception:
                            continue
                        fk_cases[fname] += 1
                        fk[fname] += v["fixed"].status == "reject"
                        fk_stat[fname] += (v["statistical"].status == "reject"
                                           and v["statistical"].confirmation == "confirmed")
            w = torch.cat(acc_w) if acc_w else torch.empty(0, dtype=torch.float64)
            p = torch.cat(acc_p) if acc_p else torch.empty(0, dtype=torch.float64)
            row = {"op": name, "group": group, "cases": n_cases, "errors": errors,
                   "first_error": first_error[:300] if first_error else None, "elements": int(w.numel()),
                   "width_median": _q(w, 0.5), "width_p99": _q(w, 0.99),
                   "position_median": _q(p, 0.5), "position_p99": _q(p, 0.99),
                   "position_max": float(p.max()) if p.numel() else None,
                   "fixed_rejects": fixed_rejects, "statistical_rejects": stat_rejects,
                   "uncertified_cases": uncert,
                   "gross_fault_caught": (gross_hit / gross_tot) if gross_tot else None}
            rows.append(row)
            log(json.dumps(row))
        for fname in faulty:
            kills.append({"op": name, "faulty": fname, "cases": fk_cases[fname],
                          "fixed_kill_rate": fk[fname] / fk_cases[fname] if fk_cases[fname] else None,
                          "statistical_confirmed_kill_rate":
                              fk_stat[fname] / fk_cases[fname] if fk_cases[fname] else None})
            log(json.dumps(kills[-1]))
    return rows, kills


def _fmt(v, digits=3):
    if v is None:
        return "–"
    if v == 0:
        return "0"
    return f"{v:.{digits}g}"


def markdown(rows, kills) -> str:
    out = ["| operator | group | cases | width median | width p99 | position median | position p99 | "
           "position max | gross fault caught | fixed rejects | uncertified |",
           "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        out.append(f"| {r['op']} | {r['group']} | {r['cases']} | {_fmt(r['width_median'])} | "
                   f"{_fmt(r['width_p99'])} | {_fmt(r['position_median'])} | {_fmt(r['position_p99'])} | "
                   f"{_fmt(r['position_max'])} | {_fmt(r['gross_fault_caught'])} | {r['fixed_rejects']} | "
                   f"{r['uncertified_cases']} |")
    out += ["", "| operator | faulty kernel | cases | fixed kill rate | statistical (confirmed) kill rate |",
            "|---|---|---|---|---|"]
    for k in kills:
        out.append(f"| {k['op']} | {k['faulty']} | {k['cases']} | {_fmt(k['fixed_kill_rate'])} | "
                   f"{_fmt(k['statistical_confirmed_kill_rate'])} |")
    return "\n".join(out) + "\n"


def compare(before: dict, after: dict) -> str:
    """Before -> after, per operator and group, of the figures that a change can move."""
    b = {(r["op"], r["group"]): r for r in before["rows"]}
    out = ["| operator | group | width median | width p99 | position max | gross fault caught | fixed rejects |",
           "|---|---|---|---|---|---|---|"]
    for r in after["rows"]:
        o = b.get((r["op"], r["group"]))
        if o is None:
            continue
        cells = [f"{_fmt(o[k])} → {_fmt(r[k])}" for k in ("width_median", "width_p99", "position_max",
                                                             "gross_fault_caught")]
        out.append(f"| {r['op']} | {r['group']} | " + " | ".join(cells) +
                   f" | {o['fixed_rejects']} → {r['fixed_rejects']} |")
    bk = {(k["op"], k["faulty"]): k for k in before["faulty"]}
    out += ["", "| operator | faulty kernel | fixed kill rate | statistical (confirmed) kill rate |", "|---|---|---|---|"]
    for k in after["faulty"]:
        o = bk.get((k["op"], k["faulty"]))
        if o is None:
            continue
        out.append(f"| {k['op']} | {k['faulty']} | {_fmt(o['fixed_kill_rate'])} → {_fmt(k['fixed_kill_rate'])} | "
                   f"{_fmt(o['statistical_confirmed_kill_rate'])} → {_fmt(k['statistical_confirmed_kill_rate'])} |")
    return "\n".join(out) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ops", default="", help="comma-separated operators (default: every registered one)")
    ap.add_argument("--groups", default="", help="comma-separated input-shift groups (default: all)")
    ap.add_argument("--backend", default="interpreter")
    ap.add_argument("--out", default="", help="JSON file for the rows")
    ap.add_argument("--md", default="", help="markdown table file")
    ap.add_argument("--compare", nargs=2, metavar=("BEFORE", "AFTER"),
                    help="print a before -> after table of two result files (runs nothing)")
    a = ap.parse_args(argv)
    if a.compare:
        with open(a.compare[0]) as f0, open(a.compare[1]) as f1:
            print(compare(json.load(f0), json.load(f1)), end="")
        return 0
    backend = backends.select(a.backend)
    ops = a.ops.split(",") if a.ops else operators.names()
    groups = a.groups.split(",") if a.groups else list(GROUPS)
    t0 = time.time()
    rows, kills = run(ops, backend, groups, log=lambda s: print(s, file=sys.stderr, flush=True))
    doc = {"command": "python " + " ".join(sys.argv), "backend": backend.name, "seconds": round(time.time() - t0, 1),
           "cases": [list(c) for c in CASES], "rows": rows, "faulty": kills}
    if a.out:
        with open(a.out, "w") as fh:
            json.dump(doc, fh, indent=1)
            fh.write("\n")
    md = markdown(rows, kills)
    if a.md:
        with open(a.md, "w") as fh:
            fh.write(f"Tightness ({backend}; `{doc['command']}`; {doc['seconds']} s)\n\n" + md)
    else:
        print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
