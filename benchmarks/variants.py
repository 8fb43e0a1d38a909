"""Compiled verdict time under implementation variants, in one process: for
A/B measurements of the calculus's hot paths on a device (each variant is
traced and compiled afresh).  Also reports the Triton kernels' registers and
spills on a GPU.

    python benchmarks/variants.py --device cuda --ops rms_norm,softmax --n 1e8 \
        --variant base:X_SETTLE=round,X_RI=round --variant new:
    python benchmarks/variants.py --device cuda --ops softmax --n 1e7 \
        --variant default: --variant recompute:inductor.realize_reads_threshold=64
    python benchmarks/variants.py --device cuda --ops rms_norm --n 1e6 \
        --variant capture:compiled.CUDAGRAPH_BY=capture --variant trees:compiled.CUDAGRAPH_BY=inductor
    python benchmarks/variants.py --device cuda --ops softmax,rms_norm --n 1e7 \
        --variant flat: --variant rows:compiled.FLAGS_BY_ROW=True

``inductor.NAME=value`` sets an Inductor option of the compiled verdict, ``compiled.NAME=value``
a setting of ``numoracle.compiled``, anything else an environment variable.
"""
from __future__ import annotations

import argparse
import gc
import json
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import run as B  # noqa: E402


def _kernel_stats():
    out = []
    for o in gc.get_objects():
        if type(o).__name__ == "CachingAutotuner":
            for ln in getattr(o, "launchers", []) or []:
                out.append(dict(name=getattr(o.fn, "__name__", "?"), regs=getattr(ln, "n_regs", None),
                                spills=getattr(ln, "n_spills", None), config=str(getattr(ln, "config", ""))[:120]))
    return out


def _value(v: str):
    for cast in (int, float):
        try:
            return cast(v)
        except ValueError:
            pass
    return {"True": True, "False": False}.get(v, v)


def _one_op(op_name: str, a) -> list:
    from numoracle import compiled
    from numoracle.check import check
    rows = []
    op, inputs, params, outs = B.setup(op_name, int(a.n), a.device)
    ref = B._time(lambda: B._ref64(op_name, inputs, params), a.device, a.reps)
    for spec in a.variant or ["default:"]:
        name, _, env = spec.partition(":")
        pairs = [kv.split("=", 1) for kv in env.split(",") if kv]
        # inductor.NAME=value: an Inductor option of the compiled verdict; others: environment
        opts = {k[len("inductor."):]: _value(v) for k, v in pairs if k.startswith("inductor.")}
        settings = {k[len("compiled."):]: _value(v) for k, v in pairs if k.startswith("compiled.")}
        pairs = [(k, v) for k, v in pairs if not k.startswith(("inductor.", "compiled."))]
        old_settings = {k: getattr(compiled, k) for k in settings}
        for k, v in settings.items():
            setattr(compiled, k, v)
        old = {k: os.environ.get(k) for k, _ in pairs}
        os.environ.update(dict(pairs))
        old_opts = dict(compiled.COMPILE_OPTIONS)
        compiled.COMPILE_OPTIONS.update(opts)
        compiled.clear()
        torch._dynamo.reset()
        try:
            t0 = time.perf_counter()
            for _ in range(2):
                v = check(op.reference, outs, inputs, params)
                v.status
            compile_s = time.perf_counter() - t0
            t = B._time(lambda: check(op.reference, outs, inputs, params).status, a.device, a.reps)
            stats = _kernel_stats() if a.device == "cuda" else []
            row = dict(op=op_name, n=int(a.n), variant=name, env=env, status=v.status, verdict_s=t,
                       ref64_s=ref, ratio=t / ref, compile_s=compile_s, kernels=stats)
        except Exception as exc:  # a variant that fails is reported, the others still run
            row = dict(op=op_name, n=int(a.n), variant=name, env=env, error=f"{type(exc).__name__}: {exc}"[:500])
        finally:
            compiled.COMPILE_OPTIONS.clear()
            compiled.COMPILE_OPTIONS.update(old_opts)
            for k, v0 in old_settings.items():
                setattr(compiled, k, v0)
            for k, v0 in old.items():
                if v0 is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v0
        rows.append(row)
        if "error" in row:
            print(f"{op_name:14s} {name:10s} ERROR {row['error']}", flush=True)
        else:
            spills = sum(k["spills"] or 0 for k in row["kernels"])
            print(f"{op_name:14s} {name:10s} {row['status']:8s} verdict {t * 1e3:8.3f} ms  ref64 {ref * 1e3:7.3f} ms"
                  f"  ratio {t / ref:6.2f}  compile {compile_s:5.1f} s  kernels {len(row['kernels'])}"
                  f" spills {spills}", flush=True)
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ops", default="rms_norm,softmax")
    ap.add_argument("--n", type=float, default=1e6)
    ap.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    ap.add_argument("--variant", action="append", default=[], help="name:VAR=value,VAR=value")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--out")
    a = ap.parse_args(argv)
    os.environ["NUMORACLE_COMPILE"] = "always"
    rows = []
    for op_name in a.ops.split(","):
        rows += _one_op(op_name, a)
        gc.collect()
        if a.device == "cuda":
            torch.cuda.empty_cache()
    if a.out:
        with open(a.out, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
