"""Correct kernels and behaviour-preserving variants over generated cases:
false alarms per input group in both modes, uncertified counts with the sites
that caused them, and the width of the acceptance interval in output ulps
beside the width ``assert_close`` allows for the same elements.

Cases cycle through the input-shift groups, the operator's formats, a few
CI-sized shapes inside its domain and its parameter choices; every kernel of
an operator sees the same cases.  A kernel error is counted, never fatal."""
from __future__ import annotations

import time
import traceback

import torch

from ... import formats as F
from ...check import check_modes
from ...runner.execute import execute
from ...strategies import sweep_cases

ASSERT_CLOSE = {"bf16": (1.6e-2, 1e-5), "fp16": (1e-3, 1e-5), "fp32": (1.3e-6, 1e-5)}
MODES = ("statistical", "fixed")
# log10 bins (in output ulps) for the width histograms of the report
HIST_EDGES = [-4.0 + 0.5 * i for i in range(21)]          # 1e-4 .. 1e6


def cases(op, n: int, groups=None, seed0: int = 1000, params=None) -> list:
    """The stage's n cases of an operator (``strategies.sweep_cases``; ``params`` fixed):
    every kernel of the operator sees the same ones."""
    return sweep_cases(op, n, groups=groups, seed0=seed0, params=params)


def widths(v):
    """(pre-store width, width of the accepted stored values, assert_close
    width), in output ulps at the reference value, of every judged, certified,
    finite element, as flat float64 tensors."""
    ws, qs, tols = [], [], []
    for o in v.outputs:
        ok = ~o.uncertified & torch.isfinite(o.centre) & torch.isfinite(o.hi - o.lo)
        if not bool(ok.any()):
            continue
        c = o.centre[ok]
        ulp = F.ulp(c.abs(), o.fmt)
        ws.append(((o.hi - o.lo)[ok] / ulp).cpu())
        qs.append(((o.qhi - o.qlo)[ok] / ulp).cpu())
        if o.fmt.name in ASSERT_CLOSE:
            rtol, atol = ASSERT_CLOSE[o.fmt.name]
            tols.append((2 * (atol + rtol * c.abs()) / ulp).cpu())
    cat = (lambda xs: torch.cat(xs) if xs else torch.empty(0, dtype=torch.float64))
    return cat(ws), cat(qs), cat(tols)


def summary(t: torch.Tensor):
    if t.numel() == 0:
        return None
    t = t[:2_000_000]
    return {"median": round(float(t.median()), 4), "max": round(float(t.max()), 4), "n": int(t.numel())}


def histogram(t: torch.Tensor) -> list[int]:
    if t.numel() == 0:
        return [0] * (len(HIST_EDGES) + 1)
    lg = torch.log10(t.clamp(min=1e-12))
    idx = torch.bucketize(lg, torch.tensor(HIST_EDGES, dtype=lg.dtype))
    return torch.bincount(idx, minlength=len(HIST_EDGES) + 1).tolist()


def sweep_kernel(op, kname, kernel, case_list, backend, dev, progress=None, raw=False) -> dict:
    """Run one kernel over the cases and judge every run in both modes.
    ``raw``: also return each case's widths (``"raw"``: per mode, (seed,
    tensor) pairs), so that results over disjoint case sets merge exactly
    (numoracle.studies.executors)."""
    t1 = time.time()
    segs = {"width": {m: [] for m in MODES}, "accepted": {m: [] for m in MODES}, "assert_close": []}
    groups: dict = {}
    wid = {m: [] for m in MODES}
    qwid = {m: [] for m in MODES}
    tol = []
    unc_sites, examples = {}, []
    for case in case_list:
        seed, group, fmt, rows, cols, drawn = case.seed, case.group, case.fmt, case.rows, case.cols, dict(case.params)
        g = groups.setdefault(group, {"statistical": {}, "fixed": {}, "error": 0})
        try:
            inputs, params = case.materialize(dev, op)
            ran = execute(kernel, inputs, params, device=dev)
            if ran.error_type == "NotImplementedError":     # a kernel that does not cover these parameters
                g["unsupported"] = g.get("unsupported", 0) + 1
                if len(examples) < 3:
                    examples.append({"seed": seed, "group": group, "format": fmt, "params": drawn,
                                     "unsupported": ran.error.partition(": ")[2][:300]})
            elif not ran.ok:
                g["error"] += 1
                if len(examples) < 3:
                    examples.append({"seed": seed, "group": group, "format": fmt, "shape": [rows, cols],
                                     "params": drawn, "error": ran.traceback or ran.error})
            else:
                outs = ran.outputs
                launch = {**dict(case.config), **(ran.launch or {})}
                for mode, v in check_modes(op.reference, outs, inputs, params, modes=MODES, backend=backend,
                                           launch=launch).items():
                    g[mode][v.status] = g[mode].get(v.status, 0) + 1
                    w, q, t = widths(v)
                    wid[mode].append(w)
                    qwid[mode].append(q)
                    segs["width"][mode].append((seed, w))
                    segs["accepted"][mode].append((seed, q))
                    if mode == "fixed":
                        tol.append(t)
                        segs["assert_close"].append((seed, t))
                    if v.status == "uncertified":
                        for s in v.certificate.failing or [None]:
                            key = f"{s.label} ({s.kind})" if s is not None else "non-finite reference"
                            unc_sites[key] = unc_sites.get(key, 0) + 1
                    if v.status == "reject" and len(examples) < 3:
                        examples.append({"seed": seed, "group": group, "format": fmt, "shape": [rows, cols],
                                         "params": drawn, "mode": mode, "explain": v.explain()[:2000]})
        except Exception:                       # an example that does not build, a verdict that fails
            g["error"] += 1
            if len(examples) < 3:
                examples.append({"seed": seed, "group": group, "format": fmt, "shape": [rows, cols],
                                 "params": drawn, "error": traceback.format_exc()[-1500:]})
        if progress:
            progress()
    totals = {m: {} for m in MODES}
    for g in groups.values():
        for m in MODES:
            for k, n in g[m].items():
                totals[m][k] = totals[m].get(k, 0) + n
    cat = (lambda xs: torch.cat(xs) if xs else torch.empty(0, dtype=torch.float64))
    out = {"cases": len(case_list), "counts": totals, "errors": sum(g["error"] for g in groups.values()),
            "unsupported": sum(g.get("unsupported", 0) for g in groups.values()),
            "groups": groups, "seconds": round(time.time() - t1, 2),
            "width_ulps": {m: summary(cat(wid[m])) for m in MODES},
            "accepted_width_ulps": {m: summary(cat(qwid[m])) for m in MODES},
            "assert_close_width_ulps": summary(cat(tol)),
            "width_histogram": {m: histogram(cat(wid[m])) for m in MODES},
            "assert_close_histogram": histogram(cat(tol)),
            "uncertified_sites": unc_sites, "examples": examples}
    if raw:
        out["raw"] = segs
    return out


def run(op_names, n_cases: int, backend: str, dev: str, log=print, params=None) -> dict:
    """Every kernel of ``op_names`` over ``n_cases`` cases in this process; ``params``:
    {operator: {name: value}} fixed per operator."""
    from ... import operators
    results = {}
    for name in op_names:
        op = operators.resolve(name)
        cl = cases(op, n_cases, params=(params or {}).get(name))
        for kname in op.kernel_specs:
            try:
                kernel = op.kernels[kname]
            except Exception as exc:          # an optional upstream kernel that does not import
                results[f"{name}/{kname}"] = {"skipped": repr(exc)[:300]}
                continue
            res = sweep_kernel(op, kname, kernel, cl, backend, dev)
            results[f"{name}/{kname}"] = res
            if log:
                log(f"{name}/{kname}: stat {res['counts']['statistical']} fixed {res['counts']['fixed']} "
                    f"errors {res['errors']} width(fixed) {res['width_ulps']['fixed']} "
                    f"assert_close {res['assert_close_width_ulps']} ({res['seconds']}s)")
    return results
