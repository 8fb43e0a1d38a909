#!/usr/bin/env python3
"""The evidence kernel: does the repaired interpreter compute what the GPU does?

One Triton kernel (``evidence_kernel`` below) does, in one launch:

* ``x.to(tl.bfloat16)``, ``x.to(tl.float16)``, ``x.to(tl.float8e4nv)`` stores of
  fp32 values that include exact ties of each format (plus random values);
* bf16 arithmetic on bf16 tensors: ``a * b``, ``a + b``, ``a - b``, ``a / b``;
* ``x + eps.to(tl.float32)`` with ``eps`` a Python float argument;
* libdevice ``tanh`` and ``rsqrt``, and ``tl.math.rsqrt`` (approximate);
* a multiply-add chain in fp32, ``y1 = u*v + w; y2 = y1*v + u``, and a bf16
  ``a*b + a``, which the GPU may contract into FMAs.

    # on the GPU (from the repo root, PYTHONPATH=$PWD, TRITON_INTERPRET unset):
    python scripts/parity_kernel.py --backend gpu --save $OUT/parity_gpu.npz
    # here, on the repaired interpreter:
    python scripts/parity_kernel.py --backend interpreter --save parity_interp.npz
    # anywhere:
    python scripts/parity_kernel.py --compare parity_gpu.npz parity_interp.npz [--profile h200 interpreter]
    # one save against what the GPU's semantics give (numpy, exact; math outputs vs their profile):
    python scripts/parity_kernel.py --expect parity_interp.npz --profile interpreter

``--compare`` prints per output: the count of bit-identical elements; for
the approximate functions the maximum ulp difference between the two files
and each file's maximum error against a float64 reference next to its
profile's bound; for the multiply-add chains how many elements of each file
equal the fused (one rounding per multiply-add) and the unfused (two
roundings) evaluation.  Exit status: 0; 1 when an output that must be
bit-identical differs, or a math output exceeds its profile bound; 2 for
unusable input.
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
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))
# the numpy bit helpers both parity scripts use (numpy only; the GPU side needs nothing else)
from gpu_interpreter_parity import bf16_to_f32, f32_to_bf16_rne, ordered  # noqa: E402

EPS = 1e-6
BLOCK = 1024
DEFAULT_N = 1 << 16

# output -> (numpy bits dtype, kind, profile function)
OUTPUTS = {
    "st_bf16": (np.uint16, "exact", None),
    "st_fp16": (np.uint16, "exact", None),
    "st_e4m3": (np.uint8, "exact", None),
    "bf_mul": (np.uint16, "exact", None),
    "bf_add": (np.uint16, "exact", None),
    "bf_sub": (np.uint16, "exact", None),
    "bf_div": (np.uint16, "exact", None),
    "eps_add": (np.uint32, "exact", None),
    "tanh": (np.uint32, "math", "tanh"),
    "rsqrt_ld": (np.uint32, "math", "rsqrt"),
    "rsqrt_tl": (np.uint32, "math", "rsqrt"),
    "bf_mad": (np.uint16, "mad", None),
    "mad1": (np.uint32, "mad", None),
    "mad2": (np.uint32, "mad", None),
}


# --------------------------------------------------------------------------
# The kernel (defined on first use, after the backend is chosen)
# --------------------------------------------------------------------------

_KERNEL = None
triton = tl = libdevice = None   # bound by _kernel(), after the backend is chosen


def _kernel():
    """``evidence_kernel`` jitted now: Triton is imported only after
    ``backends.select`` has set ``TRITON_INTERPRET`` for the interpreter."""
    global _KERNEL, triton, tl, libdevice
    if _KERNEL is None:
        import triton as _triton
        import triton.language as _tl

        try:
            from triton.language.extra import libdevice as _ld
        except ImportError:  # pragma: no cover
            from triton.language.extra.cuda import libdevice as _ld
        triton, tl, libdevice = _triton, _tl, _ld
        _KERNEL = triton.jit(evidence_kernel)
    return _KERNEL


def evidence_kernel(x_ptr, a_ptr, b_ptr, t_ptr, p_ptr, u_ptr, v_ptr, w_ptr,
                    st_bf16, st_fp16, st_e4m3, bf_mul, bf_add, bf_sub, bf_div, eps_add,
                    tanh_o, rsqrt_ld, rsqrt_tl, bf_mad, mad1, mad2, eps, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(x_ptr + offs, mask=m, other=0.0)
    tl.store(st_bf16 + offs, x.to(tl.bfloat16), mask=m)
    tl.store(st_fp16 + offs, x.to(tl.float16), mask=m)
    tl.store(st_e4m3 + offs, x.to(tl.float8e4nv), mask=m)
    a = tl.load(a_ptr + offs, mask=m, other=1.0)      # bf16
    b = tl.load(b_ptr + offs, mask=m, other=1.0)      # bf16
    tl.store(bf_mul + offs, a * b, mask=m)
    tl.store(bf_add + offs, a + b, mask=m)
    tl.store(bf_sub + offs, a - b, mask=m)
    tl.store(bf_div + offs, a / b, mask=m)
    tl.store(bf_mad + offs, a * b + a, mask=m)
    tl.store(eps_add + offs, x + eps.to(tl.float32), mask=m)
    t = tl.load(t_ptr + offs, mask=m, other=0.0)
    tl.store(tanh_o + offs, libdevice.tanh(t), mask=m)
    p = tl.load(p_ptr + offs, mask=m, other=1.0)
    tl.store(rsqrt_ld + offs, libdevice.rsqrt(p), mask=m)
    tl.store(rsqrt_tl + offs, tl.math.rsqrt(p), mask=m)
    u = tl.load(u_ptr + offs, mask=m, other=0.0)
    v = tl.load(v_ptr + offs, mask=m, other=0.0)
    w = tl.load(w_ptr + offs, mask=m, other=0.0)
    y1 = u * v + w
    tl.store(mad1 + offs, y1, mask=m)
    tl.store(mad2 + offs, y1 * v + u, mask=m)


# --------------------------------------------------------------------------
# numpy helpers: exact roundings (what the GPU's instructions compute)
# --------------------------------------------------------------------------

def _two_sum(a, b):
    s = a + b
    bb = s - a
    return s, (a - (s - bb)) + (b - bb)


def _round_exact_sum_to_f32(s, err) -> np.ndarray:
    """RN to fp32 of the exact value s + err (|err| <= half a float64 ulp of s):
    s itself rounds the same way unless s sits exactly on an fp32 midpoint,
    where it is nudged one float64 ulp toward err first."""
    with np.errstate(all="ignore"):
        s32 = s.astype(np.float32)
        lo = np.where(s32.astype(np.float64) > s, np.nextafter(s32, np.float32(-np.inf)), s32)
        hi = np.nextafter(lo, np.float32(np.inf))
        mid = (lo.astype(np.float64) + hi.astype(np.float64)) / 2
        on_mid = (s == mid) & (err != 0) & np.isfinite(s)
        nudged = np.where(on_mid, np.nextafter(s, np.where(err > 0, np.inf, -np.inf)), s)
        return nudged.astype(np.float32)


def fma_f32(a, b, c) -> np.ndarray:
    """fp32 fma: a*b + c rounded once (a*b is exact in float64)."""
    a64, b64, c64 = (np.asarray(z, dtype=np.float32).astype(np.float64) for z in (a, b, c))
    with np.errstate(all="ignore"):
        s, err = _two_sum(a64 * b64, c64)
    return _round_exact_sum_to_f32(s, err)


def mad_f32_unfused(a, b, c) -> np.ndarray:
    with np.errstate(all="ignore"):
        return (np.asarray(a, np.float32) * np.asarray(b, np.float32)).astype(np.float32) + np.asarray(c, np.float32)


def chain_references(u, v, w, y1=None) -> dict:
    """mad1 = u*v + w, mad2 = y1*v + u: fused (the multiply-add rounded once)
    and unfused (product and sum each rounded).  ``y1``: the mad1 values the
    kernel computed (so mad2 is judged on its own step); default: fused."""
    f1 = fma_f32(u, v, w)
    n1 = mad_f32_unfused(u, v, w)
    y1 = f1 if y1 is None else np.asarray(y1, np.float32)
    return {"mad1": (f1, n1), "mad2": (fma_f32(y1, v, u), mad_f32_unfused(y1, v, u))}


def bf16_mad_references(a_bits, b_bits):
    a = bf16_to_f32(a_bits)
    b = bf16_to_f32(b_bits)
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    with np.errstate(all="ignore"):
        s, err = _two_sum(a64 * b64, a64)
    fused = _bf16_from_exact(s, err)
    prod = f32_to_bf16_rne((a * b).astype(np.float32))
    unfused = f32_to_bf16_rne((bf16_to_f32(prod) + a).astype(np.float32))
    return fused, unfused


def _bf16_from_exact(s, err) -> np.ndarray:
    """RN to bf16 of s + err, via round-to-odd in fp32 (24 >= 8 + 2 bits)."""
    with np.errstate(all="ignore"):
        val = np.where(err != 0, np.nextafter(s, np.where(err > 0, np.inf, -np.inf)), s)
        exact_f32 = s.astype(np.float32).astype(np.float64) == s
        v = np.where(exact_f32, val, s)
        r = v.astype(np.float32)
        back = r.astype(np.float64)
        inexact = (back != v) & np.isfinite(v)
        away = inexact & (np.abs(back) > np.abs(v))
        r = np.where(away, np.nextafter(r, np.float32(0)), r).astype(np.float32)
    odd = (r.view(np.uint32) | inexact.astype(np.uint32)).view(np.float32)
    return f32_to_bf16_rne(odd)


def expected_exact(inputs: dict) -> dict:
    """The bits every exact output must have on a GPU (RNE casts, bf16
    arithmetic rounded once, satfinite e4m3)."""
    import ml_dtypes

    x = inputs["x"]
    a, b = bf16_to_f32(inputs["a"]), bf16_to_f32(inputs["b"])
    with np.errstate(all="ignore"):
        e4 = np.clip(x, -448.0, 448.0).astype(ml_dtypes.float8_e4m3fn).view(np.uint8)
        e4 = np.where(np.isnan(x), np.uint8(0x7F), e4).astype(np.uint8)
        out = {
            "st_bf16": f32_to_bf16_rne(x),
            "st_fp16": x.astype(np.float16).view(np.uint16),
            "st_e4m3": e4,
            "bf_mul": f32_to_bf16_rne(a * b),                    # exact product in fp32, one rounding
            "bf_add": _bf16_from_exact(*_two_sum(a.astype(np.float64), b.astype(np.float64))),
            "bf_sub": _bf16_from_exact(*_two_sum(a.astype(np.float64), -b.astype(np.float64))),
            "bf_div": _bf16_div(a, b),
            "eps_add": (x + np.float32(EPS)).astype(np.float32).view(np.uint32),
        }
    return out


def _bf16_div(a, b) -> np.ndarray:
    """RN to bf16 of a / b: the float64 quotient (53 bits >= 2*8 + 2) rounded
    once, through round-to-odd in fp32."""
    with np.errstate(all="ignore"):
        q = a.astype(np.float64) / b.astype(np.float64)
    return _bf16_from_exact(q, np.zeros_like(q))


def ulp_err(bits32: np.ndarray, ref64: np.ndarray) -> np.ndarray:
    """|got - exact| in fp32 ulps of the exact value's binade (the calculus's unit)."""
    got = bits32.view(np.float32).astype(np.float64)
    a = np.abs(ref64)
    _, e = np.frexp(a)
    ulp = np.where(a < 2.0**-126, 2.0**-149, np.ldexp(1.0, (e - 24).astype(np.int64)))
    with np.errstate(all="ignore"):
        return np.abs(got - ref64) / ulp


def math_references(inputs: dict) -> dict:
    t = inputs["t"].astype(np.float64)
    p = inputs["p"].astype(np.float64)
    return {"tanh": np.tanh(t), "rsqrt_ld": 1.0 / np.sqrt(p), "rsqrt_tl": 1.0 / np.sqrt(p)}


# --------------------------------------------------------------------------
# Inputs
# --------------------------------------------------------------------------

def _ties_of(codes_lo, decode):
    lo = decode(codes_lo).astype(np.float64)
    hi = decode(codes_lo + 1).astype(np.float64)
    return ((lo + hi) / 2).astype(np.float32)


def make_inputs(n: int, seed: int = 0) -> dict:
    import ml_dtypes

    rng = np.random.default_rng(seed)
    k = max(1, n // 16)
    bf_ties = _ties_of(rng.integers(1, 0x7F7F, k).astype(np.uint16), bf16_to_f32)
    h_ties = _ties_of(rng.integers(1, 0x7BFF, k).astype(np.uint16),
                      lambda c: c.astype(np.uint16).view(np.float16).astype(np.float32))
    e4_codes = np.arange(0, 0x7E, dtype=np.uint8)
    e4_ties = _ties_of(e4_codes, lambda c: c.astype(np.uint8).view(ml_dtypes.float8_e4m3fn).astype(np.float32))
    specials = np.array([0.0, -0.0, 1.0, -1.0, 448.0, 460.0, 464.0, 500.0, 1e30, 65504.0, 65520.0, 1e-40,
                         2.0**-133, 2.0**-24, 3 * 2.0**-25, 2.0**-10, 3 * 2.0**-10], dtype=np.float32)
    head = np.concatenate([bf_ties, -bf_ties, h_ties, -h_ties, e4_ties, -e4_ties, specials, -specials])
    rest = max(0, n - head.size)
    with np.errstate(over="ignore"):
        tail = (rng.standard_normal(rest) * np.exp2(rng.uniform(-30, 20, rest))).astype(np.float32)
    x = np.concatenate([head, tail])[:n].astype(np.float32)
    a = f32_to_bf16_rne((rng.standard_normal(n) * np.exp2(rng.integers(-8, 9, n))).astype(np.float32))
    b = f32_to_bf16_rne((rng.standard_normal(n) * np.exp2(rng.integers(-8, 9, n))).astype(np.float32))
    b = np.where((b & 0x7FFF) == 0, np.uint16(0x3F80), b).astype(np.uint16)     # no division by zero
    t = rng.uniform(-6, 6, n).astype(np.float32)
    p = np.exp(rng.uniform(-80, 80, n)).astype(np.float32)
    u = rng.standard_normal(n).astype(np.float32)
    v = rng.standard_normal(n).astype(np.float32)
    w = (-u * v * rng.uniform(0.5, 1.5, n)).astype(np.float32)   # cancellation: fusing shows
    return {"x": x, "a": a, "b": b, "t": t, "p": p, "u": u, "v": v, "w": w}


# --------------------------------------------------------------------------
# Running
# --------------------------------------------------------------------------

_TORCH_OUT = {"st_bf16": "bfloat16", "st_fp16": "float16", "st_e4m3": "float8_e4m3fn", "bf_mul": "bfloat16",
              "bf_add": "bfloat16", "bf_sub": "bfloat16", "bf_div": "bfloat16", "eps_add": "float32",
              "tanh": "float32", "rsqrt_ld": "float32", "rsqrt_tl": "float32", "bf_mad": "bfloat16",
              "mad1": "float32", "mad2": "float32"}


def run(inputs: dict, backend: str) -> tuple:
    """Run the kernel on ``backend`` ("interpreter" or "gpu"); returns (output bits, metadata)."""
    from numoracle import backends

    backend = backends.select(backend)
    dev = backend.device
    import torch

    kern = _kernel()
    n = inputs["x"].size

    def t_(arr, view=None):
        t = torch.from_numpy(np.ascontiguousarray(arr))
        return (t.view(view) if view is not None else t).to(dev)

    args = [t_(inputs["x"]), t_(inputs["a"].view(np.int16), torch.bfloat16),
            t_(inputs["b"].view(np.int16), torch.bfloat16), t_(inputs["t"]), t_(inputs["p"]),
            t_(inputs["u"]), t_(inputs["v"]), t_(inputs["w"])]
    outs = {k: torch.empty(n, dtype=getattr(torch, d), device=dev) for k, d in _TORCH_OUT.items()}
    grid = (triton.cdiv(n, BLOCK), )
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore", RuntimeWarning)
        kern[grid](*args, *outs.values(), EPS, n, BLOCK=BLOCK)
    if dev == "cuda":
        torch.cuda.synchronize()
    bits = {}
    for k, tensor in outs.items():
        np_dtype = OUTPUTS[k][0]
        view = {np.uint8: torch.uint8, np.uint16: torch.int16, np.uint32: torch.int32}[np_dtype]
        bits[k] = tensor.cpu().view(view).numpy().view(np_dtype).copy()
    meta = {"backend": backend.name, "triton": triton.__version__, "torch": torch.__version__,
            "python": platform.python_version(), "n": n, "eps": EPS,
            "device": torch.cuda.get_device_name(0) if dev == "cuda" else "cpu (Triton interpreter, repaired)"}
    return bits, meta


def save(path: str, n: int, seed: int, backend: str) -> int:
    inputs = make_inputs(n, seed)
    bits, meta = run(inputs, backend)
    meta["seed"] = seed
    arrays = {f"in_{k}": (v.view(np.uint32) if v.dtype == np.float32 else v) for k, v in inputs.items()}
    arrays.update({f"out_{k}": v for k, v in bits.items()})
    arrays["meta"] = np.array(json.dumps(meta))
    np.savez_compressed(path, **arrays)
    print(f"saved {len(bits)} outputs x {n} values to {path} ({meta['backend']}: {meta['device']}, "
          f"triton {meta['triton']}, torch {meta['torch']})")
    return 0


def load(path: str) -> tuple:
    z = np.load(path)
    meta = json.loads(str(z["meta"]))
    inputs = {k[3:]: z[k] for k in z.files if k.startswith("in_")}
    for k in ("x", "t", "p", "u", "v", "w"):
        inputs[k] = inputs[k].view(np.float32)
    outs = {k[4:]: z[k] for k in z.files if k.startswith("out_")}
    return inputs, outs, meta


# --------------------------------------------------------------------------
# Judging
# --------------------------------------------------------------------------

def _nan(name: str, bits: np.ndarray) -> np.ndarray:
    dt = OUTPUTS[name][0]
    if name == "st_e4m3":
        return (bits & 0x7F) == 0x7F
    if name == "st_fp16":
        return (bits & 0x7FFF) > 0x7C00
    if dt == np.uint16:
        return (bits & 0x7FFF) > 0x7F80
    return (bits.astype(np.uint32) & 0x7FFFFFFF) > 0x7F800000


def mad_summary(name: str, inputs: dict, bits: np.ndarray, mad1_bits=None) -> dict:
    """How many elements equal the fused / unfused evaluation (mad2: of its
    own step, from the file's mad1)."""
    if name == "bf_mad":
        fused, unfused = bf16_mad_references(inputs["a"], inputs["b"])
    else:
        y1 = None if mad1_bits is None else mad1_bits.view(np.float32)
        f, u = chain_references(inputs["u"], inputs["v"], inputs["w"], y1)[name]
        fused, unfused = f.view(np.uint32), u.view(np.uint32)
    f, u = bits == fused, bits == unfused
    return {"fused": int(f.sum()), "unfused": int(u.sum()), "both": int((f & u).sum()),
            "only_fused": int((f & ~u).sum()), "only_unfused": int((u & ~f).sum()), "neither": int((~f & ~u).sum())}


def math_summary(name: str, inputs: dict, bits: np.ndarray, profile) -> dict:
    ref = math_references(inputs)[name]
    got = bits.view(np.float32)
    fin = np.isfinite(got) & np.isfinite(ref) & (np.abs(ref) <= np.finfo(np.float32).max)
    if profile is not None and profile.ftz:
        fin &= np.abs(ref) >= 2.0**-126
        if name.startswith("rsqrt"):
            fin &= inputs["p"] >= 2.0**-126
    err = ulp_err(bits, ref)[fin]
    out = {"max_ulp": float(err.max()) if err.size else 0.0, "nonfinite": int((~np.isfinite(got)).sum())}
    if profile is not None:
        m = profile.model(OUTPUTS[name][2])
        out["bound"] = m.a
        out["within_profile"] = bool(out["max_ulp"] <= m.a)
    return out


def _profile(name):
    if not name:
        return None
    from numoracle import mathlib

    return mathlib.load(name)


def expect(path: str, profile_name: str | None) -> int:
    """One save against the GPU's exact semantics (numpy)."""
    inputs, outs, meta = load(path)
    prof = _profile(profile_name or ("h200" if meta.get("backend") == "gpu" else "interpreter"))
    want = expected_exact(inputs)
    bad = 0
    print(f"{path}: {meta['backend']} {meta['device']} triton {meta['triton']}")
    for name, (dt, kind, _) in OUTPUTS.items():
        got = outs[name]
        if kind == "exact":
            same = (got == want[name]) | (_nan(name, got) & _nan(name, want[name]))
            bad += int(not same.all())
            print(f"{name:9s} {int(same.sum())}/{got.size} equal to the exactly rounded result")
        elif kind == "math":
            s = math_summary(name, inputs, got, prof)
            bad += int(not s.get("within_profile", True))
            print(f"{name:9s} max {s['max_ulp']:.3f} ulp vs float64 (profile {prof.name}: {s.get('bound')} ulp)")
        else:
            s = mad_summary(name, inputs, got, outs.get("mad1"))
            bad += int(s["neither"] > 0)
            print(f"{name:9s} fused {s['fused']}, unfused {s['unfused']}, only fused {s['only_fused']}, "
                  f"only unfused {s['only_unfused']}, neither {s['neither']}")
    return 1 if bad else 0


def compare(path_a: str, path_b: str, profiles=(None, None)) -> int:
    ia, oa, ma = load(path_a)
    ib, ob, mb = load(path_b)
    for k in ia:
        if not np.array_equal(ia[k].view(np.uint8), ib[k].view(np.uint8)):
            print(f"error: input {k} differs between the files (use the same --n and --seed)", file=sys.stderr)
            return 2
    pa = _profile(profiles[0] or ("h200" if ma.get("backend") == "gpu" else "interpreter"))
    pb = _profile(profiles[1] or ("h200" if mb.get("backend") == "gpu" else "interpreter"))
    print(f"A: {path_a}: {ma['backend']} {ma['device']} triton {ma['triton']} torch {ma['torch']}")
    print(f"B: {path_b}: {mb['backend']} {mb['device']} triton {mb['triton']} torch {mb['torch']}")
    failures = []
    n = ia["x"].size
    for name, (dt, kind, _) in OUTPUTS.items():
        a, b = oa[name], ob[name]
        same = (a == b) | (_nan(name, a) & _nan(name, b))
        line = f"{name:9s} {int(same.sum())}/{n} bit-identical"
        if kind == "exact":
            if not same.all():
                failures.append(name)
                i = np.flatnonzero(~same)[:3]
                line += f"  DIFFER at {i.tolist()}: A {a[i].tolist()} B {b[i].tolist()}"
        elif kind == "math":
            fin = np.isfinite(a.view(np.float32)) & np.isfinite(b.view(np.float32))
            d = np.abs(ordered(a) - ordered(b))[fin]
            sa, sb = math_summary(name, ia, a, pa), math_summary(name, ib, b, pb)
            line += (f"; max ulp diff A-B {int(d.max()) if d.size else 0}; vs float64: A {sa['max_ulp']:.3f} "
                     f"(bound {sa.get('bound')}, {pa.name}) B {sb['max_ulp']:.3f} (bound {sb.get('bound')}, {pb.name})")
            for lab, s in (("A", sa), ("B", sb)):
                if not s.get("within_profile", True):
                    failures.append(f"{name} ({lab} beyond its profile)")
        else:
            for lab, bits in (("A", a), ("B", b)):
                s = mad_summary(name, ia, bits, (oa if lab == "A" else ob).get("mad1"))
                verdict = ("fused" if s["only_unfused"] == 0 and s["neither"] == 0 and s["only_fused"] > 0 else
                           "unfused" if s["only_fused"] == 0 and s["neither"] == 0 and s["only_unfused"] > 0 else
                           "mixed" if s["neither"] == 0 else "NEITHER")
                line += (f"\n          {lab}: {verdict}: fused {s['fused']}, unfused {s['unfused']}, "
                         f"only fused {s['only_fused']}, only unfused {s['only_unfused']}, neither {s['neither']}")
                if s["neither"]:
                    failures.append(f"{name} ({lab} neither fused nor unfused)")
        print(line)
    if failures:
        print("FAIL: " + ", ".join(failures))
        return 1
    print("OK: exact outputs bit-identical, math outputs within their profiles, multiply-adds fused or unfused")
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    g = ap.add_mutually_exclusive_group(required=True)
    g.add_argument("--save", metavar="PATH", help="run the kernel and save inputs and output bits (.npz)")
    g.add_argument("--compare", nargs=2, metavar=("A", "B"), help="compare two saves")
    g.add_argument("--expect", metavar="PATH", help="check one save against exact numpy expectations")
    ap.add_argument("--backend", default="auto", choices=("interpreter", "gpu", "auto"))
    ap.add_argument("--n", type=int, default=DEFAULT_N)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--profile", nargs="+", metavar="NAME", help="math profile(s) for the approximate outputs "
                    "(one per file; default h200 for GPU saves, interpreter for interpreter saves)")
    args = ap.parse_args(argv)
    if args.save:
        if args.n <= 0:
            ap.error("--n must be positive")
        return save(args.save, args.n, args.seed, args.backend)
    if args.expect:
        return expect(args.expect, (args.profile or [None])[0])
    profs = tuple((args.profile or []) + [None, None])[:2]
    if args.profile and len(args.profile) == 1:
        profs = (args.profile[0], args.profile[0])
    return compare(args.compare[0], args.compare[1], profs)


if __name__ == "__main__":
    os.environ.setdefault("PYTHONWARNINGS", "ignore::RuntimeWarning")
    sys.exit(main())
