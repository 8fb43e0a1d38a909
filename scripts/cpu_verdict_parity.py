"""Small verdicts of CUDA tensors computed on the CPU (settings.cpu_verdict_max_elements):
the same verdicts as on the GPU, and where the CPU is the faster place.

    PYTHONPATH=$PWD python scripts/cpu_verdict_parity.py --out parity.json

1. Parity: for each of the five throughput operators, drawn shapes (rows 1-64, columns
   1-4096, bf16; benchmarks/throughput.py's cases), the correct (emulated) outputs and two
   planted faults (one element moved by about one bf16 ulp, one by 2^-3 relative), judged
   in both modes on the GPU (cpu_verdict_max_elements=0) and on the CPU (no limit): every
   status, rejected and uncertified mask must be equal, and the bounds lo/hi equal by the
   compiled safety net's rule (2^-40 relative or 2^-12 of the fixed-input radius: float64
   sums run in another order on each device, and a centre that cancels, layer_norm's
   x - mean, loses relative accuracy to it).  Exit 1 on any difference.
2. Cost: eager verdict time on each device at sizes from tens of elements to 2^19, median
   of 5 after 2 warm-up calls, compile='never' (what a stream of new shapes runs).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "benchmarks"))

import torch  # noqa: E402

import numoracle as no  # noqa: E402
import throughput as T  # noqa: E402
from numoracle.check import check_modes  # noqa: E402
from numoracle.verdict.compiled.compare import close  # noqa: E402

ON_GPU = no.settings(cpu_verdict_max_elements=0, compile="never")
ON_CPU = no.settings(cpu_verdict_max_elements=1 << 40, compile="never")
SIZES = [(1, 32), (4, 128), (8, 256), (16, 512), (32, 1024), (64, 2048), (128, 4096)]


def _first_float(outs):
    """(index, tensor) of the first plain floating output to plant a fault in."""
    outs = list(outs) if isinstance(outs, (tuple, list)) else [outs]
    for k, o in enumerate(outs):
        if isinstance(o, torch.Tensor) and o.is_floating_point() and o.numel():
            return outs, k
    return outs, None


def faults(outs, seed):
    outs, k = _first_float(outs)
    if k is None:
        return []
    g = torch.Generator().manual_seed(seed)
    y = outs[k]
    i = int(torch.randint(y.numel(), (1,), generator=g))
    made = []
    for rel in (2.0 ** -7, 2.0 ** -3):
        z = y.clone()
        flat = z.view(-1)
        v = flat[i].double()
        flat[i] = (v * (1 + rel) + (rel if v == 0 else 0)).to(y.dtype)
        made.append(tuple(outs[:k]) + (z,) + tuple(outs[k + 1:]) if len(outs) > 1 else z)
    return made


def compare(a: dict, b: dict) -> list:
    diffs = []
    # the compiled safety net's rule (numoracle.verdict.compiled.compare.close): 2^-40 relative,
    # or 2^-12 of the fixed-input radius (a centre that cancels, layer_norm's x - mean)
    radius = {o.name: ((o.hi - o.lo) / 2).cpu() for o in a["fixed"].outputs}
    for mode in a:
        va, vb = a[mode], b[mode]
        if va.status != vb.status:
            diffs.append(f"{mode}: status {va.status} (GPU) vs {vb.status} (CPU)")
            continue
        for oa, ob in zip(va.outputs, vb.outputs):
            for name in ("rejected", "uncertified"):
                if not torch.equal(getattr(oa, name).cpu(), getattr(ob, name).cpu()):
                    diffs.append(f"{mode}: {oa.name}.{name} differs")
            for name in ("lo", "hi"):
                x, y = getattr(oa, name).cpu(), getattr(ob, name).cpu()
                if not close(x, y, radius[oa.name]):
                    rel = ((x - y).abs() / y.abs().clamp_min(1e-300))[torch.isfinite(x) & torch.isfinite(y)]
                    diffs.append(f"{mode}: {oa.name}.{name} off by {rel.max().item() if rel.numel() else 0:.3g} "
                                 f"relative, more than the safety net allows")
        if va.device is not None or vb.device is None or any(m.device != vb.device for m in vb.rejected + vb.uncertified):
            diffs.append(f"{mode}: devices {va.device} (GPU run) / {vb.device} (CPU run), masks "
                         f"{[str(m.device) for m in vb.rejected]}")
    return diffs


def parity(ops, n, seed) -> dict:
    rows = []
    for op_name in ops:
        op, cases = T.make_cases(op_name, n, seed, device="cuda")
        for k, (inputs, params, outs) in enumerate(cases):
            for variant, o in [("correct", outs)] + [(f"fault{j}", f) for j, f in enumerate(faults(outs, seed + k))]:
                got = {}
                for where, s in (("gpu", ON_GPU), ("cpu", ON_CPU)):
                    got[where] = check_modes(op.reference, o, inputs, params, settings=s)
                d = compare(got["gpu"], got["cpu"])
                rows.append({"op": op_name, "case": k, "shape": list(inputs[0].shape) if hasattr(inputs[0], "shape")
                             else None, "variant": variant,
                             "status": {m: v.status for m, v in got["gpu"].items()}, "differences": d})
                if d:
                    print(op_name, k, variant, d, flush=True)
    return {"cases": len(rows), "differing": sum(1 for r in rows if r["differences"]),
            "statuses": _count(rows), "rows": rows}


def _count(rows):
    c: dict = {}
    for r in rows:
        key = f"{r['variant'].rstrip('0123456789')}:{r['status'].get('statistical')}/{r['status'].get('fixed')}"
        c[key] = c.get(key, 0) + 1
    return c


def cost(ops, reps=5) -> list:
    out = []
    for op_name in ops:
        sizes = [(r, c) for r, c in SIZES if op_name != "per_token_group_quant_fp8" or c % 128 == 0]
        op, cases = T.make_cases(op_name, 0, 7, extra=sizes, device="cuda")
        for (rows_, cols), (inputs, params, outs) in zip(sizes, cases):
            elements = sum(t.numel() for t in T._flat(inputs) + T._flat(outs) if hasattr(t, "numel"))
            row = {"op": op_name, "shape": [rows_, cols], "elements": elements}
            for where, s in (("gpu", ON_GPU), ("cpu", ON_CPU)):
                times = []
                for r in range(reps + 2):
                    torch.cuda.synchronize()
                    t = time.perf_counter()
                    check_modes(op.reference, outs, inputs, params, modes=("statistical",), settings=s)
                    times.append(time.perf_counter() - t)
                row[f"{where}_ms"] = 1e3 * statistics.median(times[2:])
            print(f"{op_name:28s} {rows_:4d}x{cols:<5d} {elements:8d}  GPU {row['gpu_ms']:8.2f} ms  "
                  f"CPU {row['cpu_ms']:8.2f} ms", flush=True)
            out.append(row)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ops", default=",".join(T.OPS))
    ap.add_argument("--cases", type=int, default=8, help="drawn shapes per operator for the parity")
    ap.add_argument("--seed", type=int, default=11)
    ap.add_argument("--skip", default="", help="comma-separated: parity, cost")
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    if not torch.cuda.is_available():
        print("needs a CUDA device", file=sys.stderr)
        return 2
    ops = a.ops.split(",")
    skip = set(filter(None, a.skip.split(",")))
    doc = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "threads": torch.get_num_threads()}
    if "cost" not in skip:
        doc["cost"] = cost(ops)
    if "parity" not in skip:
        doc["parity"] = parity(ops, a.cases, a.seed)
        print(f"parity: {doc['parity']['cases']} verdict pairs, {doc['parity']['differing']} differing; "
              f"{doc['parity']['statuses']}", flush=True)
    if a.out:
        with open(a.out, "w") as f:
            json.dump(doc, f, indent=1)
    return 1 if doc.get("parity", {}).get("differing") else 0


if __name__ == "__main__":
    sys.exit(main())
