#!/usr/bin/env python3
"""GPU / interpreter parity: run one Triton kernel on fixed inputs and save or
compare the raw bits of its outputs.

The kernel (``parity_kernel`` in ``tests/kernels_for_backend.py``) does, in
one launch: fp32 -> bf16 / fp16 / e4m3 / e5m2 stores of exact ties, values
past the fp8 ranges, specials and random values; bf16 ``a*b + a`` (which the
GPU contracts into one FMA), ``a*b`` and ``a + b``; ``x + eps.to(tl.float32)``
with a Python float ``eps``; libdevice ``tanh``, ``erf``, ``rsqrt`` and
``tl.math.rsqrt``.

    # on the GPU machine (NVIDIA H200, torch 2.11, Triton 3.6):
    python scripts/gpu_interpreter_parity.py --save gpu.npz
    # here, on the CPU (repaired Triton interpreter):
    python scripts/gpu_interpreter_parity.py --save cpu.npz
    # anywhere (numpy only):
    python scripts/gpu_interpreter_parity.py --compare gpu.npz cpu.npz

Inputs are deterministic (``--seed``, ``--n``; both runs must use the same).
On a CPU the script calls ``numoracle.backends.interpreter.install()``
before the kernel module is imported (so ``TRITON_INTERPRET`` is set in
time); on a GPU it never imports numoracle.  ``--compare`` prints, per
output, the bit-identical count (and the count when all NaNs count as
equal), for the approximate math outputs the maximum ulp difference between
the two files and each file's maximum ulp error against float64, and for the
multiply-add whether each element equals the fused (one rounding) or the
unfused (two roundings) evaluation.  Exit status: 0, or 1 with ``--strict``
when an output expected to be bit-identical differs, 2 for unusable input.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import warnings
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
EPS = 1e-6
BLOCK = 1024
DEFAULT_N = 1 << 18

# output name -> (numpy bits dtype, kind): "exact" outputs should be
# bit-identical between GPU and repaired interpreter; "math" are approximate
# (libdevice / rsqrt.approx); "mad" is the contracted multiply-add.
OUTPUTS = {
    "bf16": (np.uint16, "exact"),
    "fp16": (np.uint16, "exact"),
    "e4m3": (np.uint8, "exact"),
    "e5m2": (np.uint8, "exact"),
    "mad": (np.uint16, "mad"),
    "mul": (np.uint16, "exact"),
    "add": (np.uint16, "exact"),
    "eps": (np.uint32, "exact"),
    "tanh": (np.uint32, "math"),
    "erf": (np.uint32, "math"),
    "rsqrt": (np.uint32, "math"),
    "tl_rsqrt": (np.uint32, "math"),
}


# --------------------------------------------------------------------------
# numpy-only helpers (compare mode needs nothing else)
# --------------------------------------------------------------------------

def f32_to_bf16_rne(x) -> np.ndarray:
    bits = np.asarray(x, dtype=np.float32).view(np.uint32)
    nan = (bits & np.uint32(0x7FFFFFFF)) > np.uint32(0x7F800000)
    with np.errstate(over="ignore"):
        r = (bits + np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1))) >> np.uint32(16)
    return np.where(nan, (bits >> np.uint32(16)) | np.uint32(0x40), r).astype(np.uint16)


def bf16_to_f32(bits) -> np.ndarray:
    return (np.asarray(bits, dtype=np.uint16).astype(np.uint32) << np.uint32(16)).view(np.float32)


def f64_to_f32_round_odd(v64: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore", invalid="ignore"):
        r = v64.astype(np.float32)
        back = r.astype(np.float64)
        inexact = (back != v64) & np.isfinite(v64)
        away = inexact & (np.abs(back) > np.abs(v64))
        r = np.where(away, np.nextafter(r, np.float32(0)), r).astype(np.float32)
    return (r.view(np.uint32) | inexact.astype(np.uint32)).view(np.float32)


def mad_references(a_bits: np.ndarray, b_bits: np.ndarray):
    """bf16 bits of ``a*b + a``: (fused: one rounding of the exact value,
    unfused: RN(RN(a*b) + a))."""
    a = bf16_to_f32(a_bits).astype(np.float64)
    b = bf16_to_f32(b_bits).astype(np.float64)
    with np.errstate(all="ignore"):
        p = a * b  # exact: 8 + 8 significant bits
        s = p + a
        bb = s - p
        err = (p - (s - bb)) + (a - bb)  # TwoSum: s + err == p + a exactly
        toward = np.where(err > 0, np.inf, -np.inf)
        nudged = np.where(np.isfinite(s) & np.isfinite(err) & (err != 0), np.nextafter(s, toward), s)
        exact32 = s.astype(np.float32).astype(np.float64) == s
        fused = f32_to_bf16_rne(f64_to_f32_round_odd(np.where(exact32, nudged, s)))
        prod = bf16_to_f32(f32_to_bf16_rne(p.astype(np.float32)))  # p exact in fp32
        unfused = f32_to_bf16_rne((prod + a.astype(np.float32)).astype(np.float32))
    return fused, unfused


def ordered(bits32: np.ndarray) -> np.ndarray:
    """fp32 bits -> integers in the order of the values (for ulp distances)."""
    b = bits32.astype(np.uint32).view(np.int32).astype(np.int64)
    return np.where(b < 0, -(b & 0x7FFFFFFF), b)


def ulp_vs_f64(bits32: np.ndarray, ref64: np.ndarray) -> np.ndarray:
    got = bits32.view(np.float32).astype(np.float64)
    with np.errstate(all="ignore"):
        spacing = np.spacing(np.abs(ref64.astype(np.float32))).astype(np.float64)
        return np.abs(got - ref64) / spacing


def erf64(x: np.ndarray) -> np.ndarray:
    try:
        from scipy.special import erf

        return erf(x)
    except Exception:  # pragma: no cover
        import math

        return np.vectorize(math.erf, otypes=[np.float64])(x)


# --------------------------------------------------------------------------
# Inputs
# --------------------------------------------------------------------------

def _midpoints(values: np.ndarray) -> np.ndarray:
    v = np.unique(values[np.isfinite(values)].astype(np.float64))
    v = v[v >= 0]
    return ((v[:-1] + v[1:]) / 2).astype(np.float32)


def _fp8_values(fmt: str) -> np.ndarray:
    """All finite non-negative values of e4m3fn / e5m2, decoded by hand."""
    man_bits, bias = (3, 7) if fmt == "e4m3" else (2, 15)
    out = []
    for code in range(0x80):
        e, m = code >> man_bits, code & ((1 << man_bits) - 1)
        if fmt == "e4m3" and code == 0x7F:
            continue  # NaN
        if fmt == "e5m2" and e == 0x1F:
            continue  # inf / NaN
        if e == 0:
            out.append(m * 2.0**(1 - bias - man_bits))
        else:
            out.append((1 + m / 2**man_bits) * 2.0**(e - bias))
    return np.array(out, dtype=np.float64)


def make_inputs(n: int, seed: int = 0) -> dict:
    """Deterministic inputs: x (fp32 store inputs), a, b (bf16 bits), t
    (fp32, tanh/erf), p (fp32 > 0, rsqrt)."""
    rng = np.random.default_rng(seed)
    # --- x: specials and exact ties first, random values after
    bf_codes = rng.integers(0x0001, 0x7F7F, 4000).astype(np.uint32)
    bf_lo, bf_hi = (bf_codes << 16).view(np.float32), ((bf_codes + 1) << 16).view(np.float32)
    bf_ties = ((bf_lo.astype(np.float64) + bf_hi.astype(np.float64)) / 2).astype(np.float32)
    h_codes = rng.integers(0x0001, 0x7BFF, 4000).astype(np.uint16)
    h_ties = ((h_codes.view(np.float16).astype(np.float64) +
               (h_codes + 1).astype(np.uint16).view(np.float16).astype(np.float64)) / 2).astype(np.float32)
    e4_ties, e5_ties = _midpoints(_fp8_values("e4m3")), _midpoints(_fp8_values("e5m2"))
    sat = np.array([448, 449, 463.99, 464, 464.01, 470, 479.99, 480, 500, 1000, 57344, 57345, 61439.99, 61440,
                    61441, 65504, 65519.99, 65520, 1e5, 1e10, 1e30, 3.3895314e38, 3.3961e38, 3.4e38,
                    3.4028235e38], dtype=np.float32)
    specials = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, -np.nan, 1.0, -1.0, 1e-45, 1e-40, 9.2e-41, 1.2e-38,
                         2**-24, 2**-25, 3 * 2**-25, 2**-14, 2**-9, 2**-10, 3 * 2**-10, 2**-16, 2**-17, 6e-8,
                         6e-5], dtype=np.float32)
    head = np.concatenate([bf_ties, -bf_ties, h_ties, -h_ties, e4_ties, -e4_ties, e5_ties, -e5_ties,
                           sat, -sat, specials, -specials])
    rest = max(0, n - head.size)
    k = rest // 3
    wide = rng.standard_normal(k) * np.exp2(rng.uniform(-140, 127, k))
    mid = rng.standard_normal(k) * np.exp2(rng.uniform(-26, 17, k))
    normal = rng.standard_normal(rest - 2 * k)
    with np.errstate(over="ignore"):
        x = np.concatenate([head, wide, mid, normal]).astype(np.float32)[:n]
    # --- a, b: bf16
    a = f32_to_bf16_rne((rng.standard_normal(n) * np.exp2(rng.integers(-8, 9, n))).astype(np.float32))
    b = f32_to_bf16_rne((rng.standard_normal(n) * np.exp2(rng.integers(-8, 9, n))).astype(np.float32))
    # --- t for tanh/erf, p for rsqrt
    t = rng.uniform(-6, 6, n).astype(np.float32)
    t[:12] = [0.0, -0.0, 1e-30, -1e-30, 1e-8, 0.5, 9.0, -9.0, 20.0, -20.0, 3.9, -3.9][:min(12, n)]
    p = np.exp(rng.uniform(-80, 80, n)).astype(np.float32)
    p[:10] = [1.0, 4.0, 2.0, 0.25, 1.1754944e-38, 1e-40, 1e-45, 3.4e38, 1e30, 1e-30][:min(10, n)]
    return {"x": x, "a": a, "b": b, "t": t, "p": p}


# --------------------------------------------------------------------------
# Running the kernel
# --------------------------------------------------------------------------

def _load_interpreter():
    sys.path.insert(0, str(ROOT))
    from numoracle.backends import interpreter

    return interpreter


def _kernels():
    sys.path.insert(0, str(ROOT / "tests"))
    import kernels_for_backend

    return kernels_for_backend


def run_kernel(inputs: dict, device) -> dict:
    """Launch ``parity_kernel`` on ``device``; returns output bits (numpy)."""
    import torch
    import triton

    K = _kernels()
    kern = K.parity_kernel
    if device.type == "cpu":
        interp = _load_interpreter()
        kern = interp.as_interpreted(kern)
    n = inputs["x"].size

    def dev(arr, dtype=None):
        t = torch.from_numpy(np.ascontiguousarray(arr))
        if dtype is not None:
            t = t.view(dtype)
        return t.to(device)

    x, t, p = dev(inputs["x"]), dev(inputs["t"]), dev(inputs["p"])
    a = dev(inputs["a"].view(np.int16), torch.bfloat16)
    b = dev(inputs["b"].view(np.int16), torch.bfloat16)
    outs = {
        "bf16": torch.empty(n, dtype=torch.bfloat16, device=device),
        "fp16": torch.empty(n, dtype=torch.float16, device=device),
        "e4m3": torch.empty(n, dtype=torch.float8_e4m3fn, device=device),
        "e5m2": torch.empty(n, dtype=torch.float8_e5m2, device=device),
        "mad": torch.empty(n, dtype=torch.bfloat16, device=device),
        "mul": torch.empty(n, dtype=torch.bfloat16, device=device),
        "add": torch.empty(n, dtype=torch.bfloat16, device=device),
        "eps": torch.empty(n, dtype=torch.float32, device=device),
        "tanh": torch.empty(n, dtype=torch.float32, device=device),
        "erf": torch.empty(n, dtype=torch.float32, device=device),
        "rsqrt": torch.empty(n, dtype=torch.float32, device=device),
        "tl_rsqrt": torch.empty(n, dtype=torch.float32, device=device),
    }
    grid = (triton.cdiv(n, BLOCK), )
    kern[grid](x, a, b, t, p, outs["bf16"], outs["fp16"], outs["e4m3"], outs["e5m2"], outs["mad"], outs["mul"],
               outs["add"], outs["eps"], outs["tanh"], outs["erf"], outs["rsqrt"], outs["tl_rsqrt"], EPS, n,
               BLOCK=BLOCK)
    if device.type == "cuda":
        torch.cuda.synchronize()
    result = {}
    for name, tensor in outs.items():
        np_dtype = OUTPUTS[name][0]
        view = {np.uint8: torch.uint8, np.uint16: torch.int16, np.uint32: torch.int32}[np_dtype]
        result[name] = tensor.cpu().view(view).numpy().view(np_dtype).copy()
    return result


def save(path: str, n: int, seed: int, device_arg: str) -> int:
    use_cuda = False
    if device_arg in ("auto", "cuda"):
        try:
            import torch

            use_cuda = torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET", "0") not in ("1", "true")
        except Exception:
            use_cuda = False
        if device_arg == "cuda" and not use_cuda:
            print("error: --device cuda but no CUDA device (or TRITON_INTERPRET=1)", file=sys.stderr)
            return 2
    meta = {"n": n, "seed": seed, "eps": EPS, "block": BLOCK, "python": platform.python_version()}
    if not use_cuda:
        # the interpreter: install the repairs before kernels are decorated
        interp = _load_interpreter()
        meta["interpreter_status"] = interp.install()
    import torch
    import triton

    device = torch.device("cuda" if use_cuda else "cpu")
    meta.update(triton=triton.__version__, torch=torch.__version__,
                device=torch.cuda.get_device_name(0) if use_cuda else "cpu (Triton interpreter, numoracle repairs)",
                backend="gpu" if use_cuda else "interpreter")
    inputs = make_inputs(n, seed)
    with warnings.catch_warnings():
        # numpy's overflow warnings from the interpreter's fp16 casts (inf is right)
        warnings.simplefilter("ignore", RuntimeWarning)
        outs = run_kernel(inputs, device)
    arrays = {f"in_{k}": (v.view(np.uint32) if v.dtype == np.float32 else v) for k, v in inputs.items()}
    arrays.update({f"out_{k}": v for k, v in outs.items()})
    arrays["meta"] = np.array(json.dumps(meta))
    np.savez_compressed(path, **arrays)
    print(f"saved {len(outs)} outputs x {n} values to {path} ({meta['backend']}: {meta['device']}, "
          f"triton {meta['triton']}, torch {meta['torch']})")
    return 0


# --------------------------------------------------------------------------
# Comparing two saves
# --------------------------------------------------------------------------

def _nan_mask(name: str, bits: np.ndarray) -> np.ndarray:
    if name in ("bf16", "mad", "mul", "add"):
        return (bits & 0x7FFF) > 0x7F80
    if name == "fp16":
        return (bits & 0x7FFF) > 0x7C00
    if name == "e4m3":
        return (bits & 0x7F) == 0x7F
    if name == "e5m2":
        return (bits & 0x7F) > 0x7C
    return (bits.astype(np.uint32) & 0x7FFFFFFF) > 0x7F800000


def _fmt(value) -> str:
    if isinstance(value, (np.integer, int)):
        return hex(int(value))
    return f"{float(value):.9g}"


def _examples(idx: np.ndarray, *cols, limit: int = 4) -> str:
    rows = []
    for i in idx[:limit]:
        rows.append("(" + ", ".join(_fmt(c[i]) for c in cols) + ")")
    return " ".join(rows)


def compare(path_a: str, path_b: str, strict: bool = False) -> int:
    A, B = np.load(path_a), np.load(path_b)
    meta_a, meta_b = json.loads(str(A["meta"])), json.loads(str(B["meta"]))
    print(f"A: {path_a}: {meta_a.get('backend')} {meta_a.get('device')} triton {meta_a.get('triton')}")
    print(f"B: {path_b}: {meta_b.get('backend')} {meta_b.get('device')} triton {meta_b.get('triton')}")
    for key in ("in_x", "in_a", "in_b", "in_t", "in_p"):
        if key not in A.files or key not in B.files or not np.array_equal(A[key], B[key]):
            print(f"error: input {key} differs between the files (use the same --n and --seed)", file=sys.stderr)
            return 2
    x = A["in_x"].view(np.float32)
    t64 = A["in_t"].view(np.float32).astype(np.float64)
    p64 = A["in_p"].view(np.float32).astype(np.float64)
    refs = {"tanh": np.tanh(t64), "erf": erf64(t64), "rsqrt": 1.0 / np.sqrt(p64), "tl_rsqrt": 1.0 / np.sqrt(p64)}
    inputs_of = {"tanh": t64, "erf": t64, "rsqrt": p64, "tl_rsqrt": p64}
    n = x.size
    exact_failures = []
    for name, (dtype, kind) in OUTPUTS.items():
        key = f"out_{name}"
        if key not in A.files or key not in B.files:
            print(f"{name:9s} missing in one file")
            continue
        a, b = A[key], B[key]
        same = a == b
        nan_a, nan_b = _nan_mask(name, a), _nan_mask(name, b)
        same_nan = same | (nan_a & nan_b)
        line = f"{name:9s} {int(same.sum())}/{n} bit-identical, {int(same_nan.sum())}/{n} with all NaNs equal"
        if kind == "math":
            fin = np.isfinite(a.view(np.float32)) & np.isfinite(b.view(np.float32))
            d = np.abs(ordered(a) - ordered(b))[fin]
            err_a = ulp_vs_f64(a, refs[name])[fin & np.isfinite(refs[name])]
            err_b = ulp_vs_f64(b, refs[name])[fin & np.isfinite(refs[name])]
            line += (f"; max ulp diff A-B {int(d.max()) if d.size else 0} (finite in both)"
                     f", max ulp vs float64 A {np.max(err_a) if err_a.size else 0:.3f}"
                     f" B {np.max(err_b) if err_b.size else 0:.3f}")
            nonfin = ~fin & ~same_nan
            if nonfin.any():
                idx = np.flatnonzero(nonfin)
                line += f"; {int(nonfin.sum())} non-finite disagreements (input, A, B): " + _examples(
                    idx, inputs_of[name], a.view(np.float32), b.view(np.float32))
        elif kind == "mad":
            fused, unfused = mad_references(A["in_a"], A["in_b"])
            for label, arr in (("A", a), ("B", b)):
                f, u = arr == fused, arr == unfused
                line += (f"\n          {label}: fused (one rounding) {int(f.sum())}, unfused (two roundings) "
                         f"{int(u.sum())}, both agree {int((f & u).sum())}, only fused {int((f & ~u).sum())}, "
                         f"only unfused {int((u & ~f).sum())}, neither {int((~f & ~u).sum())}")
        else:
            if not same_nan.all():
                exact_failures.append(name)
                idx = np.flatnonzero(~same_nan)
                if name in ("bf16", "fp16", "e4m3", "e5m2", "eps"):
                    line += "; differing (x, A bits, B bits): " + _examples(idx, x, a, b)
                else:
                    line += "; differing (a bits, b bits, A bits, B bits): " + _examples(
                        idx, A["in_a"], A["in_b"], a, b)
        print(line)
    if exact_failures:
        print(f"outputs expected bit-identical that differ: {', '.join(exact_failures)}")
    return 1 if (strict and exact_failures) else 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    group = ap.add_mutually_exclusive_group(required=True)
    group.add_argument("--save", metavar="PATH", help="run the kernel and save the output bits (.npz)")
    group.add_argument("--compare", nargs=2, metavar=("A", "B"), help="compare two saved .npz files")
    ap.add_argument("--n", type=int, default=DEFAULT_N, help=f"number of values (default {DEFAULT_N})")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--device", choices=("auto", "cuda", "cpu"), default="auto",
                    help="auto: CUDA if available (and TRITON_INTERPRET unset), else the CPU interpreter")
    ap.add_argument("--strict", action="store_true", help="exit 1 when an exact output differs")
    args = ap.parse_args(argv)
    if args.save:
        if args.n <= 0:
            ap.error("--n must be positive")
        return save(args.save, args.n, args.seed, args.device)
    return compare(args.compare[0], args.compare[1], strict=args.strict)


if __name__ == "__main__":
    sys.exit(main())
