"""Every registered operator's kernels (correct + behaviour-preserving variants)
over generated cases, judged in both modes on one backend: verdict counts per
kernel, uncertified counts with the sites that caused them, and the width of
the acceptance interval in output ulps against the width a fixed tolerance
allows for the same elements.

    python scripts/operator_sweep.py --backend interpreter --cases 200 --out sweep.json
    python scripts/operator_sweep.py --backend gpu --cases 200 --out $OUT/sweep-h200.json

Cases cycle through the input-shift groups, the operator's formats and a few
CI-sized shapes inside its domain; every kernel of an operator sees the same
cases.  The run never stops on one bad case: a kernel error is counted."""
from __future__ import annotations

import argparse
import json
import platform
import sys
import time
import traceback

import torch

from numoracle import backends, operators
from numoracle import formats as F
from numoracle.check import check
from numoracle.strategies import GROUPS

DT = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
ROWS = (1, 3, 8)
COLS = (16, 96, 130, 256)
ASSERT_CLOSE = {"bf16": (1.6e-2, 1e-5), "fp16": (1e-3, 1e-5), "fp32": (1.3e-6, 1e-5)}


def shapes(op):
    d = op.domain
    m = max(d.cols_multiple_of, 1)
    out = []
    for i, c in enumerate(COLS):
        c = max(m, (c // m) * m)
        c = min(max(c, d.cols[0]), d.cols[1])
        r = min(max(ROWS[i % len(ROWS)], d.rows[0]), d.rows[1])
        out.append((r, c))
    return out


def case_list(op, n):
    groups = list(GROUPS)
    fmts = [f for f in op.domain.formats if f in DT] or ["bf16"]
    shp = shapes(op)
    return [(1000 + i, groups[i % len(groups)], fmts[(i // len(groups)) % len(fmts)], shp[i % len(shp)])
            for i in range(n)]


def widths(v):
    """(pre-store width, width of the accepted stored values, assert_close
    width), all in output ulps at the reference value, of every
    judged, certified, finite element, as flat float64 tensors."""
    ws, qs, tols = [], [], []
    for o in v.outputs:
        ok = ~o.uncertified & torch.isfinite(o.centre) & torch.isfinite(o.hi - o.lo)
        if not bool(ok.any()):
            continue
        c = o.centre[ok]
        ulp = F.ulp(c.abs(), o.fmt)
        ws.append(((o.hi - o.lo)[ok] / ulp).cpu())
        qs.append(((o.qhi - o.qlo)[ok] / ulp).cpu())
        name = o.fmt.name if o.fmt.name in ASSERT_CLOSE else None
        if name:
            rtol, atol = ASSERT_CLOSE[name]
            tols.append((2 * (atol + rtol * c.abs()) / ulp).cpu())
    cat = (lambda xs: torch.cat(xs) if xs else torch.empty(0, dtype=torch.float64))
    return cat(ws), cat(qs), cat(tols)


def summary(t):
    if t.numel() == 0:
        return None
    t = t[:2_000_000]
    return {"median": round(float(t.median()), 3), "max": round(float(t.max()), 3)}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--backend", default="interpreter")
    ap.add_argument("--cases", type=int, default=20)
    ap.add_argument("--ops", default="", help="comma-separated operator names (default: all)")
    ap.add_argument("--out", default="")
    a = ap.parse_args(argv)
    backend = backends.select(a.backend)
    dev = backends.device(backend)
    names = a.ops.split(",") if a.ops else operators.names()
    report = {"backend": backend, "device": torch.cuda.get_device_name() if dev == "cuda" else platform.processor() or "cpu",
              "torch": torch.__version__, "python": platform.python_version(), "cases_per_kernel": a.cases,
              "date": time.strftime("%Y-%m-%d"), "results": {}}
    try:
        import triton
        report["triton"] = triton.__version__
    except ImportError:
        pass
    t0 = time.time()
    for name in names:
        op = operators.get(name)
        cases = case_list(op, a.cases)
        for kname in op.kernel_specs:
            t1 = time.time()
            counts = {"statistical": {}, "fixed": {}, "error": 0}
            wid = {"statistical": [], "fixed": []}
            qwid = {"statistical": [], "fixed": []}
            tol = []
            unc_sites, examples = {}, []
            try:
                kernel = op.kernels[kname]
            except Exception as exc:      # an optional kernel (e.g. an upstream package) that is not importable
                report["results"][f"{name}/{kname}"] = {"skipped": repr(exc)[:300]}
                continue
            for seed, group, fmt, (rows, cols) in cases:
                try:
                    inputs, params = op.example(seed, dtype=DT[fmt], family=group, rows=rows, cols=cols)
                    inputs = tuple(t.to(dev) if isinstance(t, torch.Tensor) else t for t in inputs)
                    outs = kernel(*[t.clone() if isinstance(t, torch.Tensor) else t for t in inputs], **params)
                    if dev == "cuda":
                        torch.cuda.synchronize()
                    for mode in ("statistical", "fixed"):
                        v = check(op.reference, outs, inputs, params, mode=mode, backend=backend)
                        counts[mode][v.status] = counts[mode].get(v.status, 0) + 1
                        w, q, t = widths(v)
                        wid[mode].append(w)
                        qwid[mode].append(q)
                        if mode == "fixed":
                            tol.append(t)
                        if v.status == "uncertified":
                            for s in v.certificate.failing or [None]:
                                key = f"{s.label} ({s.kind})" if s is not None else "non-finite reference"
                                unc_sites[key] = unc_sites.get(key, 0) + 1
                        if v.status == "reject" and len(examples) < 3:
                            examples.append({"seed": seed, "group": group, "format": fmt, "shape": [rows, cols],
                                             "mode": mode, "explain": v.explain()[:2000]})
                except Exception:
                    counts["error"] += 1
                    if len(examples) < 3:
                        examples.append({"seed": seed, "group": group, "format": fmt, "shape": [rows, cols],
                                         "error": traceback.format_exc()[-1500:]})
            res = {"counts": counts, "seconds": round(time.time() - t1, 1),
                   "width_ulps": {m: summary(torch.cat(wid[m])) if wid[m] else None for m in wid},
                   "accepted_width_ulps": {m: summary(torch.cat(qwid[m])) if qwid[m] else None for m in qwid},
                   "assert_close_width_ulps": summary(torch.cat(tol)) if tol else None,
                   "uncertified_sites": unc_sites, "examples": examples}
            report["results"][f"{name}/{kname}"] = res
            print(f"{name}/{kname}: stat {counts['statistical']} fixed {counts['fixed']} errors {counts['error']} "
                  f"width stat {res['width_ulps']['statistical']} fixed {res['width_ulps']['fixed']} "
                  f"assert_close {res['assert_close_width_ulps']} ({res['seconds']}s)", flush=True)
    report["seconds"] = round(time.time() - t0, 1)
    if a.out:
        with open(a.out, "w") as fh:
            json.dump(report, fh, indent=1)
    bad = sum(r.get("counts", {}).get(m, {}).get("reject", 0) for r in report["results"].values()
              for m in ("statistical", "fixed"))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
