"""Evidence for the backward operators (ops_backward.py): every correct kernel and variant over
generated cases, judged in both modes, and every faulty kernel (change pairs 1, 2, 3, 6, 9) over
the same cases, with the input groups that exposed each fault.

    python scripts/sweep_backward.py --backend interpreter --cases 200 --out sweep_backward.json
    python scripts/sweep_backward.py --backend gpu --cases 200 --out $OUT/sweep_backward_h200.json

Case i uses input group GROUPS[i % 11], format (bf16, fp16, fp32)[(i // 11) % 3] and shape
SHAPES[i % 4]; the operator's example(seed=2000 + i) draws the parameters (casting and offset,
reduction, confident and ignored CE rows).  A kernel error is counted, never fatal.
Exit status 1 when a correct kernel or variant is rejected in either mode.
"""
from __future__ import annotations

import argparse
import json
import platform
import sys
import time
import traceback

import torch

from numoracle import backends, operators
from numoracle.check import check
from numoracle.strategies import GROUPS

OPS = ("rms_norm_backward", "layer_norm_backward", "swiglu_backward", "geglu_backward",
       "cross_entropy_backward")
DT = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
SHAPES = ((1, 16), (3, 96), (8, 130), (5, 256))
MODES = ("statistical", "fixed")


def cases(n):
    groups = list(GROUPS)
    fmts = list(DT)
    return [(2000 + i, groups[i % len(groups)], fmts[(i // len(groups)) % len(fmts)], SHAPES[i % len(SHAPES)])
            for i in range(n)]


def run_kernel(op, kernel, case_list, backend, dev):
    counts = {m: {"accept": 0, "reject": 0, "uncertified": 0} for m in MODES}
    errors, rejects, unc_sites, exposing = 0, [], {}, {}
    for seed, group, fmt, (rows, cols) in case_list:
        inputs, params = op.example(seed, dtype=DT[fmt], family=group, rows=rows, cols=cols)
        inputs = tuple(t.to(dev) if isinstance(t, torch.Tensor) else t for t in inputs)
        try:
            outs = kernel(*[t.clone() for t in inputs], **params)
        except Exception:
            errors += 1
            if errors == 1:
                traceback.print_exc()
            continue
        hit = False
        for mode in MODES:
            v = check(op.reference, outs, inputs, params, mode=mode, backend=backend)
            counts[mode][v.status] += 1
            if v.status == "reject":
                hit = True
                if len(rejects) < 3:
                    rejects.append({"seed": seed, "group": group, "format": fmt, "shape": [rows, cols],
                                    "params": params, "mode": mode, "explain": v.explain()[:1200]})
            if v.status == "uncertified":
                for line in v.explain().splitlines():
                    if line.startswith("Uncertified:"):
                        key = line.split("certificate fails at ", 1)[-1].split(" (")[0]
                        unc_sites[key] = unc_sites.get(key, 0) + 1
                        break
        if hit:       # cases (not verdicts) rejected in either mode, per input group and format
            exposing[f"{group}/{fmt}"] = exposing.get(f"{group}/{fmt}", 0) + 1
    return {"counts": counts, "errors": errors, "reject_examples": rejects,
            "uncertified_sites": unc_sites, "exposing_groups": exposing}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backend", default="interpreter", choices=("interpreter", "gpu"))
    ap.add_argument("--cases", type=int, default=200)
    ap.add_argument("--ops", default=",".join(OPS), help="comma-separated operator names")
    ap.add_argument("--no-faulty", action="store_true", help="skip the faulty kernels")
    ap.add_argument("--only-faulty", action="store_true", help="skip the correct kernels and variants")
    ap.add_argument("--out", default=None, help="write the JSON here")
    a = ap.parse_args(argv)
    backend = backends.select(a.backend)
    dev = backend.device
    case_list = cases(a.cases)
    report = {"backend": backend, "cases": a.cases, "python": platform.python_version(),
              "torch": torch.__version__, "operators": {}}
    if backend == "gpu":
        report["device"] = torch.cuda.get_device_name()
    bad = False
    for name in a.ops.split(","):
        op = operators.get(name)
        entry = {"kernels": {}, "faulty": {}}
        for kname, k in ({} if a.only_faulty else op.kernels).items():
            t = time.time()
            r = run_kernel(op, k, case_list, backend, dev)
            r["seconds"] = round(time.time() - t, 1)
            entry["kernels"][kname] = r
            bad |= any(r["counts"][m]["reject"] for m in MODES) or r["errors"] > 0
            c = r["counts"]
            print(f"{name:24s} {kname:18s} " + "  ".join(
                f"{m[:4]} a/r/u {c[m]['accept']}/{c[m]['reject']}/{c[m]['uncertified']}" for m in MODES) + f"  errors {r['errors']}  {r['seconds']}s  unc {r['uncertified_sites']}",
                flush=True)
        if not a.no_faulty:
            for fname in op.faulty:
                t = time.time()
                r = run_kernel(op, op.faulty_kernel(fname), case_list, backend, dev)
                r["seconds"] = round(time.time() - t, 1)
                r.pop("reject_examples")
                entry["faulty"][fname] = r
                print(f"{name:24s} FAULTY {fname:18s} " + "  ".join(
                    f"{m[:4]} rejects {r['counts'][m]['reject']}/{a.cases}" for m in MODES)
                    + f"  exposing groups {r['exposing_groups']}  {r['seconds']}s", flush=True)
        report["operators"][name] = entry
    if a.out:
        with open(a.out, "w") as f:
            json.dump(report, f, indent=1, default=str)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
