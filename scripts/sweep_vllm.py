"""Evidence for the vLLM operators (issue 4, item 2): per kernel and variant, generated cases
judged in both modes (counts of accept / reject / uncertified), and per faulty kernel the number
of cases to the first reject.

    PYTHONPATH=$PWD python scripts/sweep_vllm.py --backend interpreter --cases 200 --out sweep_vllm.json
    PYTHONPATH=$PWD python scripts/sweep_vllm.py --backend gpu --cases 200 --out $OUT/sweep_vllm.json
    PYTHONPATH=$PWD python scripts/sweep_vllm.py --backend gpu --real-sizes --cases 50 \\
        --out $OUT/sweep_vllm_real.json      # vLLM's sizes: group 128, 128x128 blocks, K up to 4096

Cases cycle seeds through the input groups (numoracle.families.GROUPS), the input
formats (bf16, fp16, fp32; for the matmul: the output format) and CI shapes (rows 1..8, cols a
multiple of 16 up to 256); the examples cycle each operator's parameters (group size, UE8M0,
column-major scales, group_n/group_k) and put zero and tiny groups in. ``--dot-acc tf32`` judges
the matmul with the conservative model of fp8 tensor cores that accumulate in fewer than 24 bits.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import torch


def _cases(n: int, real: bool):
    from numoracle.families import GROUPS
    groups = list(GROUPS)
    dtypes = (torch.bfloat16, torch.float16, torch.float32)
    cols = (1024, 2048, 4096) if real else (32, 64, 96, 128, 160, 192, 256)
    for seed in range(n):
        rows = (1 + seed % 8) * (8 if real else 1)
        yield seed, dtypes[seed % 3], groups[(seed // 3) % len(groups)], rows, cols[(seed // 5) % len(cols)]


def _example(op, seed, dtype, family, rows, cols, real, dev):
    inputs, params = op.example(seed, dtype, family, rows, cols)
    if real:
        if "group_size" in params:
            params["group_size"] = 128
        else:
            from numoracle.operators.ops_vllm import quantize_blocks
            from numoracle.families import fill
            n = 256 + 64 * (seed % 3)
            a_q, a_s = quantize_blocks(fill((rows, cols), family, seed), 1, 128)
            b_q, b_s = quantize_blocks(fill((n, cols), "normal", seed + 1), 128, 128)
            inputs = (a_q, b_q, a_s, b_s)
            params.update(group_k=128, group_n=128)
    inputs = tuple(t.to(dev) if isinstance(t, torch.Tensor) else t for t in inputs)
    return inputs, params


def _pipeline(no, n, real, dev, backend, dot_acc):
    """per_token_group_quant_fp8 (correct kernel) then w8a8_block_fp8_matmul (correct, split_k)
    judged against group_quant_then_block_fp8_matmul on the unquantized activations."""
    from numoracle.operators import ops_vllm as V
    from numoracle.families import GROUPS
    quant = no.operators.get("per_token_group_quant_fp8").kernels["correct"]
    mm = no.operators.get("w8a8_block_fp8_matmul")
    counts = {f"{k}/{m}": {"accept": 0, "reject": 0, "uncertified": 0}
              for k in ("correct", "split_k") for m in ("statistical", "fixed")}
    groups = list(GROUPS)
    for seed in range(n):
        rows, cols = (1 + seed % 8, (64, 128, 256)[seed % 3]) if not real else (8 * (1 + seed % 8), 1024)
        dtype = (torch.bfloat16, torch.float16)[seed % 2]
        (x, b, b_s), params = V.example_pipeline(seed, dtype, groups[seed % len(groups)], rows, cols)
        if real:
            params.update(group_k=128, group_n=128)
            b, b_s = V.quantize_blocks(torch.randn((256, cols), generator=torch.Generator().manual_seed(seed)),
                                       128, 128)
        x, b, b_s = x.to(dev), b.to(dev), b_s.to(dev)
        q, a_s = quant(x, group_size=params["group_k"], ue8m0=params["ue8m0"])
        for k in ("correct", "split_k"):
            c = mm.kernels[k](q, b, a_s, b_s, **{p: params[p] for p in ("group_n", "group_k", "out")})
            for m in ("statistical", "fixed"):
                extra = {"dot_acc": dot_acc} if dot_acc else {}
                v = no.check(V.group_quant_then_block_fp8_matmul, c, (x, b, b_s), {**params, **extra},
                             mode=m, backend=backend)
                counts[f"{k}/{m}"][v.status] += 1
    return counts


def sweep(backend: str, n: int, real: bool, dot_acc: str | None, faulty_cap: int, pipeline_cases: int = 50):
    import numoracle as no
    from numoracle.backends import device, select
    backend = select(backend)
    dev = device(backend)
    from numoracle.operators.kernels import group_quant_fp8 as G
    result = {"backend": backend, "cases": n, "real_sizes": real, "dot_acc": dot_acc or "fp32",
              "torch": torch.__version__, "operators": {}}
    import triton
    result["triton"] = triton.__version__
    for name in ("per_token_group_quant_fp8", "w8a8_block_fp8_matmul"):
        op = no.operators.get(name)
        extra = {"dot_acc": dot_acc} if (dot_acc and name == "w8a8_block_fp8_matmul") else {}
        rep = {"kernels": {}, "faulty": {}}
        for kname, kernel in op.kernels.items():
            counts = {m: {"accept": 0, "reject": 0, "uncertified": 0} for m in ("statistical", "fixed")}
            errors, rejects, t0 = [], [], time.time()
            for seed, dtype, family, rows, cols in _cases(n, real):
                inputs, params = _example(op, seed, dtype, family, rows, cols, real, dev)
                try:
                    out = kernel(*inputs, **params)
                except Exception as exc:     # a kernel failure is a recorded outcome
                    errors.append(f"seed {seed}: {exc!r}"[:300])
                    continue
                for mode in counts:
                    v = no.check(op.reference, out, inputs, {**params, **extra}, mode=mode, backend=backend)
                    counts[mode][v.status] += 1
                    if v.status == "reject" and len(rejects) < 5:
                        rejects.append({"seed": seed, "family": family, "dtype": str(dtype), "rows": rows,
                                        "cols": cols, "params": params, "mode": mode, "explain": v.explain()})
            rep["kernels"][kname] = {"counts": counts, "errors": errors, "rejects": rejects,
                                     "seconds": round(time.time() - t0, 1)}
            print(f"{name}/{kname}: {counts} errors={len(errors)} ({time.time() - t0:.0f}s)", flush=True)
        for fname in op.faulty:
            kernel = op.faulty_kernel(fname)
            first, tried, t0 = None, 0, time.time()
            for seed, dtype, family, rows, cols in _cases(min(n, faulty_cap), real):
                inputs, params = _example(op, seed, dtype, family, rows, cols, real, dev)
                tried += 1
                v = no.check(op.reference, kernel(*inputs, **params), inputs, {**params, **extra},
                             mode="fixed", backend=backend)
                if v.status == "reject":
                    first = {"case": tried, "seed": seed, "family": family, "params": params,
                             "explain": v.explain()}
                    break
            rep["faulty"][fname] = {"first_reject": first, "tried": tried, "seconds": round(time.time() - t0, 1)}
            print(f"{name}/faulty {fname}: first reject at case {first and first['case']} of {tried}", flush=True)
        result["operators"][name] = rep
    result["pipeline"] = _pipeline(no, min(n, pipeline_cases), real, dev, backend, dot_acc)
    print(f"pipeline quantize -> matmul vs unquantized x: {result['pipeline']}", flush=True)
    ok, why = G.fnuz_supported(backend)
    fnuz = {"supported": ok, "why_not": why}
    if ok:
        op = no.operators.get("per_token_group_quant_fp8")
        counts = {"accept": 0, "reject": 0, "uncertified": 0}
        for seed, dtype, family, rows, cols in _cases(n, real):
            inputs, params = _example(op, seed, dtype, family, rows, cols, real, dev)
            params["fmt"] = "e4m3fnuz"
            v = no.check(op.reference, op.kernels["correct"](*inputs, **params), inputs, params,
                         backend=backend)
            counts[v.status] += 1
        fnuz["counts"] = counts
    result["e4m3fnuz"] = fnuz
    print(f"e4m3fnuz: {fnuz}", flush=True)
    return result


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--backend", default="interpreter", choices=("interpreter", "gpu"))
    ap.add_argument("--cases", type=int, default=200)
    ap.add_argument("--faulty-cap", type=int, default=200, help="cases tried per faulty kernel at most")
    ap.add_argument("--real-sizes", action="store_true", help="vLLM's sizes (group 128, 128x128 blocks)")
    ap.add_argument("--dot-acc", default=None, choices=(None, "fp32", "tf32"))
    ap.add_argument("--pipeline-cases", type=int, default=50)
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    result = sweep(args.backend, args.cases, args.real_sizes, args.dot_acc, args.faulty_cap, args.pipeline_cases)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(result, f, indent=1, default=str)
    bad = sum(c["counts"][m]["reject"] for r in result["operators"].values() for c in r["kernels"].values()
              for m in ("statistical", "fixed"))
    missed = [f"{o}/{f}" for o, r in result["operators"].items() for f, x in r["faulty"].items()
              if x["first_reject"] is None]
    bad += sum(c["reject"] for c in result["pipeline"].values())
    print(f"correct-kernel rejects: {bad}; faulty kernels never rejected: {missed or 'none'}")
    return 1 if bad or missed else 0


if __name__ == "__main__":
    sys.exit(main())
