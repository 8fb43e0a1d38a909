"""Evidence for the microscaling operators (numoracle/operators/ops_mx.py): per kernel and
variant, generated cases judged in both modes over every input-shift group; per faulty
kernel, on the same cases where its outputs differ from the correct kernel's, how many
numoracle rejects (fixed-input mode, so a reject is confirmed) and how many
``torch.testing.assert_close`` rejects on the upcast values (also run on the correct
kernels: its false alarms).

    PYTHONPATH=$PWD python scripts/sweep_mx.py --seeds 3 --out docs/results/2026-12-01-mx-sweep-interpreter.json
    PYTHONPATH=$PWD python scripts/sweep_mx.py --backend gpu --seeds 10 --out $OUT/mx-sweep-h200.json

The fixed-tolerance comparison, on the same inputs and parameters: the kernel's outputs
upcast to fp32 against those of the torch quantizers of ops_mx (the kernels' plans) -
codes with ``atol`` one element spacing (the grid's spacing at 1: e2m1 0.5, e4m3 0.125,
e5m2 0.25) and ``rtol=0``, scales with assert_close's fp32 defaults; the matmul's output
against the float64 product of the dequantized operands rounded to the output format,
with assert_close's defaults for that format.  Cases: ``--seeds`` per input group, the
input format cycling bf16 / fp16 / fp32, shapes 1..4 rows × (2..5)·32 columns; the
examples cycle each operator's parameters and plant zero, tiny and tie blocks.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import torch

SPACING_AT_1 = {"e2m1": 0.5, "e4m3fn": 0.125, "e5m2": 0.25}


def _upcast(t, fmt=None):
    from numoracle import formats as F
    return F.decode(t, fmt).to(torch.float32) if fmt is not None else F.decode(t).to(torch.float32)


def _assert_close_rejects(op, inputs, params, outs) -> bool:
    """Whether torch.testing.assert_close (the tolerance rule above) rejects the run."""
    from numoracle import formats as F
    from numoracle.operators import ops_mx as X
    outs = outs if isinstance(outs, (tuple, list)) else (outs,)
    x = inputs[0]
    if op.name == "mx_scaled_matmul":
        a, a_s, b, b_s = inputs
        da = F.decode(a) * F.decode(a_s).repeat_interleave(32, -1)
        db = F.decode(b) * F.decode(b_s).repeat_interleave(32, -1)
        out = params.get("out", "bf16")
        want = F.round(da @ db.T, F.by_name(out)).to(F.by_name(out).torch_dtype)
        pairs = [(outs[0].to(torch.float32), want.to(torch.float32), {})]
    elif op.name == "nvfp4_quantize":
        order = params.get("nibble_order", "low_first")
        q, s, ts = X.torch_nvfp4_quantize(x, nibble_order=order)
        lay = F.Packed(F.e2m1, order)
        pairs = [(_upcast(outs[0], lay), _upcast(q, lay), dict(atol=SPACING_AT_1["e2m1"], rtol=0.0)),
                 (_upcast(outs[1]), _upcast(s), {}), (outs[2].to(torch.float32), ts, {})]
    else:
        fmt = params.get("fmt", "e2m1") if op.name == "mxfp8_quantize" else "e2m1"
        order = params.get("nibble_order", "low_first")
        q, s = X.torch_mx_quantize(x, fmt, params.get("scale_rule", "floor"), nibble_order=order)
        lay = F.Packed(F.e2m1, order) if fmt == "e2m1" else None
        pairs = [(_upcast(outs[0], lay), _upcast(q, lay), dict(atol=SPACING_AT_1[fmt], rtol=0.0)),
                 (_upcast(outs[1]), _upcast(s), {})]
    for got, want, tol in pairs:
        try:
            torch.testing.assert_close(got, want.to(got.device), equal_nan=False, **tol)
        except AssertionError:
            return True
    return False


def _cases(seeds: int):
    from numoracle.families import GROUPS
    dtypes = (torch.bfloat16, torch.float16, torch.float32)
    for gi, group in enumerate(GROUPS):
        for s in range(seeds):
            seed = gi * seeds + s          # consecutive: the examples cycle their parameters by seed
            yield seed, dtypes[s % 3], group, 1 + s % 4, 32 * (2 + s % 4)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--backend", default="interpreter", choices=("interpreter", "gpu"))
    ap.add_argument("--seeds", type=int, default=3, help="cases per input group")
    ap.add_argument("--ops", default="mxfp8_quantize,mxfp4_quantize,nvfp4_quantize,mx_scaled_matmul")
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    from numoracle.backends import select
    backend = select(args.backend)
    dev = backend.device
    import numoracle as no
    from numoracle.studies.runs import digest
    from numoracle.check import check_modes
    report = {"backend": backend.name, "torch": torch.__version__, "seeds_per_group": args.seeds, "operators": {}}
    for name in args.ops.split(","):
        op = no.operators.get(name)
        cases = list(_cases(args.seeds))
        kernels = {k: {"runs": 0, "statistical": {}, "fixed": {}, "assert_close_rejects": 0, "by_group": {}}
                   for k in op.kernel_specs}
        # a faulty kernel's run counts where its outputs differ from the correct kernel's
        # (elsewhere the fault did not show, and a reject would be a false alarm)
        faulty = {k: {"runs": 0, "differing": 0, "numoracle_rejects": 0, "assert_close_rejects": 0, "both": 0,
                      "numoracle": {}, "first_case": None, "only_numoracle": [], "only_assert_close": []}
                  for k in op.faulty}
        t0 = time.time()
        for seed, dtype, group, rows, cols in cases:
            inputs, params = op.example(seed, dtype, group, rows=rows, cols=cols)
            inputs = tuple(t.to(dev) for t in inputs)
            correct_digest = None
            for kname, kernel in op.kernels.items():
                if kname == "dot_scaled":
                    from numoracle.operators.kernels.mx_matmul import dot_scaled_supported
                    if not dot_scaled_supported(backend)[0]:
                        continue
                outs = kernel(*[t.clone() for t in inputs], **params)
                if kname == "correct":
                    correct_digest = digest(outs if isinstance(outs, (tuple, list)) else [outs])
                v = check_modes(op.reference, outs, inputs, params, backend=backend)
                rec = kernels[kname]
                rec["runs"] += 1
                for m in ("statistical", "fixed"):
                    rec[m][v[m].status] = rec[m].get(v[m].status, 0) + 1
                    if v[m].status == "reject":
                        print(f"FALSE ALARM {name}/{kname} {group} seed {seed} {dtype} {params} {m}:\n"
                              f"{v[m].explain()}", file=sys.stderr)
                    elif v[m].status == "uncertified":
                        sites = sorted({f"{f.kind}: {f.label}" for f in v[m].certificate.failing or []})
                        rec.setdefault("uncertified_sites", {})
                        for site in sites:
                            rec["uncertified_sites"][site] = rec["uncertified_sites"].get(site, 0) + 1
                rec["assert_close_rejects"] += _assert_close_rejects(op, inputs, params, outs)
                g = rec["by_group"].setdefault(group, [0, 0])
                g[0] += 1
                g[1] += v["fixed"].status != "accept" or v["statistical"].status != "accept"
            for fname in op.faulty:
                outs = op.faulty_kernel(fname)(*[t.clone() for t in inputs], **params)
                rec = faulty[fname]
                rec["runs"] += 1
                if digest(outs if isinstance(outs, (tuple, list)) else [outs]) == correct_digest:
                    continue
                rec["differing"] += 1
                v = no.check(op.reference, outs, inputs, params, mode="fixed", backend=backend)
                nr = v.status == "reject"
                ac = _assert_close_rejects(op, inputs, params, outs)
                rec["numoracle_rejects"] += nr
                rec["assert_close_rejects"] += ac
                rec["both"] += nr and ac
                rec["numoracle"][v.status] = rec["numoracle"].get(v.status, 0) + 1
                case = {"seed": seed, "group": group, "dtype": str(dtype), "params": params, "numoracle": v.status}
                if nr != ac and len(rec["only_numoracle" if nr else "only_assert_close"]) < 5:
                    rec["only_numoracle" if nr else "only_assert_close"].append(case)
                if nr and rec["first_case"] is None:
                    rec["first_case"] = {"seed": seed, "group": group, "dtype": str(dtype), "params": params}
        report["operators"][name] = {"cases": len(cases), "seconds": round(time.time() - t0, 1),
                                     "kernels": kernels, "faulty": faulty}
        print(f"{name}: {len(cases)} cases in {time.time() - t0:.0f}s", file=sys.stderr)
        for k, r in kernels.items():
            print(f"  {k:16s} runs {r['runs']:4d}  statistical {r['statistical']}  fixed {r['fixed']}  "
                  f"assert_close rejects {r['assert_close_rejects']}", file=sys.stderr)
        for k, r in faulty.items():
            print(f"  FAULTY {k:22s} outputs differ in {r['differing']:3d}/{r['runs']} runs; of those rejected by "
                  f"numoracle {r['numoracle_rejects']:3d}, assert_close {r['assert_close_rejects']:3d}  "
                  f"(numoracle verdicts {r['numoracle']})", file=sys.stderr)
    text = json.dumps(report, indent=1, default=str)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")
    else:
        print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
