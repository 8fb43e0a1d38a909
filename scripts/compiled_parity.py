#!/usr/bin/env python3
"""Compiled and eager verdicts side by side (numoracle.verdict.compiled).

For each operator and each kernel (on a GPU: its correct kernel, its
behaviour-preserving variants and its faulty kernels; on the CPU: emulator
runs, correct and with planted faults), judge the same outputs eagerly
(settings compile='never') and compiled ('always'), in both modes, and report:
whether the statuses and the rejected / uncertified masks are equal, the
largest difference of centres and radii relative to |centre| + radius (the
two are float64 evaluations in different orders: a few units of 2**-53 are
expected), whether the certificates name the same sites with the same
violation counts, and the eager, compile and compiled times.

    python scripts/compiled_parity.py --rows 64 --cols 1024            # CPU, emulator outputs
    python scripts/compiled_parity.py --backend gpu --rows 256 --cols 4096 --out $OUT/parity.json

Exit status 1 when any status or mask differs.
"""
from __future__ import annotations

import argparse
import json
import sys
import time

import torch

OPS = ("rms_norm", "layer_norm", "softmax", "cross_entropy", "swiglu", "geglu", "rope", "jsd", "kl_div",
       "rms_layernorm", "geglu_exact", "cross_entropy_loss")
CPU_FAULTS = ((), ("truncating_store",), ("ulp_off_store",))


def _kernels(op, backend):
    """(name, callable(inputs, params) -> outputs)."""
    if backend == "gpu":
        out = [(k, (lambda f: lambda i, p: f(*[t.clone() for t in i], **p))(f)) for k, f in op.kernels.items()]
        for name in sorted(op.faulty):
            f = op.faulty_kernel(name)
            out.append((f"faulty:{name}", (lambda f: lambda i, p: f(*[t.clone() for t in i], **p))(f)))
        return out
    from numoracle.selftest.emulator import Plan, emulate
    return [("emulator" + ("" if not faults else ":" + faults[0]),
             (lambda faults: lambda i, p: emulate(op.reference, i, p, Plan(seed=3, faults=faults)))(faults))
            for faults in CPU_FAULTS]


def _judge(op, outs, inputs, params, policy, backend):
    from numoracle.check import check_modes
    from numoracle import settings
    t = time.perf_counter()
    v = check_modes(op.reference, outs, inputs, params, backend=backend, settings=settings(compile=policy, cpu_verdict_max_elements=0))
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    return v, time.perf_counter() - t


def compare(ve: dict, vc: dict) -> dict:
    row = {"same": True}
    for m in ve:
        a, b = ve[m], vc[m]
        same = a.status == b.status and a.confirmation == b.confirmation
        dc = dr = 0.0
        for oa, ob in zip(a.outputs, b.outputs):
            same = same and torch.equal(oa.rejected, ob.rejected) and torch.equal(oa.uncertified, ob.uncertified)
            ra, rb = (oa.hi - oa.lo) / 2, (ob.hi - ob.lo) / 2
            ok = torch.isfinite(oa.centre) & torch.isfinite(ra) & torch.isfinite(ob.centre) & torch.isfinite(rb)
            scale = (oa.centre.abs() + ra).clamp(min=1e-300)
            if bool(ok.any()):
                dc = max(dc, float(((oa.centre - ob.centre).abs() / scale)[ok].max()))
                dr = max(dr, float(((ra - rb).abs() / scale)[ok].max()))
        sa = [(s.label, s.kind, s.violations) for s in a.certificate.sites]
        sb = [(s.label, s.kind, s.violations) for s in b.certificate.sites]
        row[m] = {"eager": a.status, "compiled": b.status, "rejected": [a.n_rejected, b.n_rejected],
                  "uncertified": [a.n_uncertified, b.n_uncertified], "centre_rel_diff": dc,
                  "radius_rel_diff": dr, "sites_equal": sa == sb, "same": same}
        row["same"] = row["same"] and same and sa == sb
    return row


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--backend", default="interpreter", choices=("interpreter", "gpu"))
    ap.add_argument("--ops", default=",".join(OPS))
    ap.add_argument("--rows", type=int, default=32)
    ap.add_argument("--cols", type=int, default=512)
    ap.add_argument("--family", default="calibration")
    ap.add_argument("--out", default="")
    ap.add_argument("--regions", action="store_true",
                    help="also compare verdicts whose regions come from the compiled regions function")
    a = ap.parse_args(argv)
    from numoracle import backends, operators
    from numoracle.verdict import compiled
    from numoracle.verdict.compiled.plan import REGIONS_WANTED
    if a.backend == "gpu":
        backends.select("gpu")
    rows, bad, skipped = [], 0, 0
    for name in a.ops.split(","):
        op = operators.get(name)
        inputs, params = op.example(11, dtype=torch.bfloat16, family=a.family, rows=a.rows, cols=a.cols)
        if a.backend == "gpu":
            inputs = tuple(t.cuda() if isinstance(t, torch.Tensor) else t for t in inputs)
        for kname, run in _kernels(op, a.backend):
            try:
                outs = run(inputs, params)
            except NotImplementedError as exc:
                # an upstream kernel whose adapter refuses this operator's plan (it stores or
                # returns something else): nothing to compare, and no difference
                skipped += 1
                rows.append({"op": name, "kernel": kname, "skipped": str(exc)[:400], "same": None})
                print(f"{name:22s} {kname:34s} skipped: {exc}", flush=True)
                continue
            try:
                compiled.clear()
                ve, te = _judge(op, outs, inputs, params, "never", a.backend)
                _judge(op, outs, inputs, params, "always", a.backend)       # eager: learns the sites
                _, tcomp = _judge(op, outs, inputs, params, "always", a.backend)
                vc, tc = _judge(op, outs, inputs, params, "always", a.backend)
                plans = compiled.plans()
                row = {"op": name, "kernel": kname, "eager_s": te, "compile_s": tcomp, "compiled_s": tc,
                       "compiled": bool(plans) and all(p.fn is not None and p.failed is None for p in plans),
                       "failed": [p.failed for p in plans if p.failed]}
                row.update(compare(ve, vc))
                if a.regions:
                    # the regions are computed eagerly the first time a signature needs them and
                    # compiled from the next time on; a signature whose verdicts keep reading them
                    # then switches to the regions function as its verdict (REGIONS_WANTED):
                    # compare verdicts from every stage
                    again = {"same": True}
                    for _ in range(REGIONS_WANTED + 2):
                        vr, _ = _judge(op, outs, inputs, params, "always", a.backend)
                        one = compare(ve, vr)
                        again = one if again["same"] else again
                    # (where the verdict returns its regions from the start there is nothing to switch)
                    row["regions_compiled"] = all(
                        p.regions_fn is not None and p.region_failed is None for p in compiled.plans())
                    row["switched"] = all(p.full for p in compiled.plans())
                    row["regions"] = again
                    row["same"] = row["same"] and again["same"] and row["regions_compiled"]
            except Exception as exc:       # one operator must not end the run
                row = {"op": name, "kernel": kname, "error": repr(exc)[:400], "same": False}
            bad += not row["same"]
            rows.append(row)
            st = row.get("statistical", {})
            print(f"{name:22s} {kname:34s} same={row['same']!s:5s} compiled={row.get('compiled')!s:5s} "
                  f"{st.get('eager', '?'):>11s}/{st.get('compiled', '?'):<11s} "
                  f"dc={st.get('centre_rel_diff', float('nan')):.1e} dr={st.get('radius_rel_diff', float('nan')):.1e} "
                  f"eager {row.get('eager_s', float('nan')):.3f}s compiled {row.get('compiled_s', float('nan')):.3f}s "
                  f"(compile {row.get('compile_s', float('nan')):.0f}s) switched={row.get('switched', '-')} {row.get('error', '')}",
                  flush=True)
    print(f"{len(rows)} kernels, {bad} with a difference, {skipped} skipped (an adapter that refuses the plan)")
    if a.out:
        meta = {"backend": a.backend, "rows": a.rows, "cols": a.cols, "torch": torch.__version__,
                "device": torch.cuda.get_device_name() if a.backend == "gpu" else "cpu",
                "date": time.strftime("%Y-%m-%d")}
        with open(a.out, "w") as fh:
            json.dump({"meta": meta, "rows": rows}, fh, indent=1)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
