"""Probes: tiny kernels launched on the interpreter as it is, one per defect; the bare
interpreter's results decide which repairs ``install`` applies, and the same probes after
the repairs confirm them."""

from __future__ import annotations

import warnings
from typing import Callable, Dict

import numpy as np

from .. import _triton_compat as compat
from ._state import STATE as state
from .dot_scaled import probe_dot_scaled_fp8
from .libdevice import _special
from .rounding import bf16_bits_to_f32, fp8_bits_to_f32, rne_fp8_bits

DEFECTS = (
    "bf16_casts",
    "fp16_casts",
    "fp8_casts",
    "bf16_arithmetic",
    "fp16_arithmetic",
    "float_scalar_args",
    "bf16_constants",
    "runtime_range",
    "atomic_fadd_ftz",
    "libdevice",
    "tl_math",
    "autotune",
    "dot_scaled_fp8",
    "dot_split_precisions",
    "argmax_fast_ties",
    "out_of_bounds",
)


def _torch():
    import torch

    return torch


def _bits_equal(got: np.ndarray, want: np.ndarray, is_nan: Callable) -> np.ndarray:
    """Elementwise: same bits, or both NaN."""
    return (got == want) | (is_nan(got) & is_nan(want))


def _launch(fn: Callable, *args, grid=(1, )) -> None:
    kernel = compat.interpreted(fn)
    kernel[grid](*args)


def _raised(what: str, fn: Callable, *args) -> tuple | None:
    """Launch a probe kernel: (True, what it raised) when it raises (the defect), else None."""
    try:
        _launch(fn, *args)
    except Exception as exc:  # noqa: BLE001
        return True, f"{what} raised {type(exc).__name__}: {exc}"[:300]
    return None


def _cast_probe_inputs() -> dict:
    bf = [1 + 2**-8, 1 + 3 * 2**-8, 1 + 2**-8 + 2**-20, -(1 + 3 * 2**-8), 0.1, -2.2, 1e-40, -3e-39,
          2**-133 * 1.5, 3.0e38, 3.4e38, 0.0, -0.0, float("inf")]
    fp16 = [1 + 2**-11, 1 + 3 * 2**-11, 2**-25, 3 * 2**-25, 65519.0, 65520.0, -0.1, 1e-6, 70000.0]
    fp8 = [1 + 2**-4, 1 + 3 * 2**-4, -(1 + 3 * 2**-4), 2**-10, 3 * 2**-10, 300.0, 448.0, 460.0, 464.0,
           470.0, 500.0, -1000.0, 3.0e38, float("inf"), -float("inf"), 0.1, 57344.0, 60000.0, 61440.0,
           70000.0, 1e-7, 2.5]
    return {"bf16": bf, "fp16": fp16, "fp8": fp8}


def _probe_store(values: list, torch_dtype, expected_bits: np.ndarray, is_nan) -> tuple:
    torch = _torch()
    np_bits = np.asarray(expected_bits).dtype
    torch_bits = torch.int16 if np_bits == np.uint16 else torch.uint8
    n = 1 << max(1, (len(values) - 1).bit_length())
    padded = list(values) + [0.0] * (n - len(values))
    x = torch.tensor(padded, dtype=torch.float32)
    out = torch.zeros(n, dtype=torch_dtype)
    try:
        _launch(compat.probe_kernels().cast, x, out, n)
    except Exception as exc:  # noqa: BLE001 - any failure is the defect
        return True, f"cast kernel raised {type(exc).__name__}: {exc}"[:300]
    got = out.view(torch_bits).numpy().view(np_bits)[:len(values)]
    ok = _bits_equal(got, expected_bits, is_nan)
    if ok.all():
        return False, f"{len(values)} values rounded as the GPU does"
    bad = [(values[i], int(got[i]), int(expected_bits[i])) for i in np.flatnonzero(~ok)[:4]]
    return True, f"{int((~ok).sum())} of {len(values)} values differ (value, got bits, GPU bits): {bad}"


def _probe_widen(codes: np.ndarray, torch_dtype, bits_dtype, expected: np.ndarray) -> tuple:
    torch = _torch()
    n = 1 << max(1, (len(codes) - 1).bit_length())
    padded = np.zeros(n, dtype=bits_dtype)
    padded[:len(codes)] = codes
    x = torch.from_numpy(padded.view(np.int16 if bits_dtype == np.uint16 else np.int8).copy()).view(torch_dtype)
    out = torch.zeros(n, dtype=torch.float32)
    try:
        _launch(compat.probe_kernels().cast, x, out, n)
    except Exception as exc:  # noqa: BLE001
        return True, f"widening kernel raised {type(exc).__name__}: {exc}"[:300]
    got = out.numpy()[:len(codes)]
    ok = (got.view(np.uint32) == expected.view(np.uint32)) | (np.isnan(got) & np.isnan(expected))
    if ok.all():
        return False, f"{len(codes)} codes widen exactly"
    bad = [(hex(int(codes[i])), float(got[i]), float(expected[i])) for i in np.flatnonzero(~ok)[:4]]
    return True, f"{int((~ok).sum())} of {len(codes)} codes widen wrongly (code, got, exact): {bad}"


def _probe_bf16_casts() -> tuple:
    torch = _torch()
    vals = _cast_probe_inputs()["bf16"]
    want = torch.tensor(vals, dtype=torch.float32).to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16)
    down = _probe_store(vals, torch.bfloat16, want, lambda b: (b.view(np.uint16) & 0x7FFF) > 0x7F80)
    codes = np.concatenate([np.arange(0, 128), np.arange(0x8000, 0x8080), [0x3F80, 0x3F81, 0xC2C8, 0x7F7F,
                                                                           0x7F80, 0xFF80, 0x7FC0]]).astype(np.uint16)
    up = _probe_widen(codes, torch.bfloat16, np.uint16, bf16_bits_to_f32(codes))
    return _combine(("fp32->bf16", down), ("bf16->fp32", up))


def _probe_fp16_casts() -> tuple:
    torch = _torch()
    vals = _cast_probe_inputs()["fp16"]
    want = torch.tensor(vals, dtype=torch.float32).to(torch.float16).view(torch.int16).numpy().view(np.uint16)
    down = _probe_store(vals, torch.float16, want, lambda b: (b.view(np.uint16) & 0x7FFF) > 0x7C00)
    codes = np.concatenate([np.arange(0, 64), np.arange(0x8000, 0x8040), [0x3C00, 0x3C01, 0x7BFF, 0x7C00,
                                                                          0xFC00, 0x7E00]]).astype(np.uint16)
    up = _probe_widen(codes, torch.float16, np.uint16, codes.view(np.float16).astype(np.float32))
    return _combine(("fp32->fp16", down), ("fp16->fp32", up))


def _probe_fp8_casts() -> tuple:
    torch = _torch()
    vals = _cast_probe_inputs()["fp8"]
    results = []
    for fmt, tdt in (("e4m3", torch.float8_e4m3fn), ("e5m2", torch.float8_e5m2)):
        want = rne_fp8_bits(np.array(vals, dtype=np.float32), fmt)
        nan_check = (lambda b: (b.view(np.uint8) & 0x7F) == 0x7F) if fmt == "e4m3" else \
            (lambda b: (b.view(np.uint8) & 0x7F) > 0x7C)
        results.append((f"fp32->{fmt}", _probe_store(vals, tdt, want, nan_check)))
        codes = np.arange(256, dtype=np.uint8)
        results.append((f"{fmt}->fp32", _probe_widen(codes, tdt, np.uint8, fp8_bits_to_f32(codes, fmt))))
    return _combine(*results)


def _combine(*named: tuple) -> tuple:
    present = any(r[0] for _, r in named)
    return present, "; ".join(f"{name}: {'DEFECT ' if r[0] else ''}{r[1]}" for name, r in named)


def _probe_arith(fmt: str) -> tuple:
    torch = _torch()
    tdt = torch.bfloat16 if fmt == "bf16" else torch.float16
    a = torch.tensor([1.5, -2.25, 3.0e-3, 0.7, -1.3, 7.5, 100.0, -0.4], dtype=torch.float32).to(tdt)
    b = torch.tensor([0.3, 1.7, -250.0, 0.9, -0.75, 3.0e-2, 1.01, -2.5], dtype=torch.float32).to(tdt)
    n = a.numel()
    mad, mx, neg = (torch.zeros(n, dtype=tdt) for _ in range(3))
    try:
        _launch(compat.probe_kernels().binary, a, b, mad, mx, neg, n)
    except Exception as exc:  # noqa: BLE001
        return True, f"{fmt} arithmetic kernel raised {type(exc).__name__}: {exc}"[:300]
    af, bf_ = a.float(), b.float()
    want_mad = ((af * bf_).to(tdt).float() + af).to(tdt)
    checks = {"a*b+a": (mad, want_mad), "maximum": (mx, torch.maximum(a, b)), "-a": (neg, -a)}
    bad = {k: int((g.view(torch.int16) != w.view(torch.int16)).sum()) for k, (g, w) in checks.items()}
    if not any(bad.values()):
        return False, f"{fmt} a*b+a, maximum, -a rounded once from fp32 on {n} values"
    example = f"a*b+a gave {mad[:3].float().tolist()} for {want_mad[:3].float().tolist()}"
    return True, f"{fmt} mismatches per op (of {n}): {bad}; {example}"


def _probe_float_scalar_args() -> tuple:
    torch = _torch()
    x = torch.tensor([1.0, -2.0, 3.5, 1e-3], dtype=torch.float32)
    out = torch.zeros(4, dtype=torch.float32)
    raised = _raised("eps.to(tl.float32) on a float argument", compat.probe_kernels().float_arg, x, out, 0.1, 4)
    if raised:
        return raised
    want = (x.numpy() + np.float32(0.1)).astype(np.float32)
    if np.array_equal(out.numpy().view(np.uint32), want.view(np.uint32)):
        return False, "a float argument is an fp32 scalar tensor"
    return True, f"x + eps gave {out.tolist()}, want {want.tolist()}"


def _probe_bf16_constants() -> tuple:
    torch = _torch()
    out = torch.zeros(4, dtype=torch.bfloat16)
    raised = _raised("tl.full(..., -1.5, tl.bfloat16)", compat.probe_kernels().bf16_constant, out, out.numel())
    if raised:
        return raised
    # no arithmetic: a value of bf16, stored as it is, whatever the other repairs do
    if bool((out.view(torch.int16) == -16448).all()):          # 0xBFC0, -1.5
        return False, "a Python float becomes a bf16 constant"
    return True, f"tl.full(..., -1.5, tl.bfloat16) stored {out.float().tolist()}"


def _probe_runtime_range() -> tuple:
    torch = _torch()
    out = torch.zeros(1, dtype=torch.int32)
    raised = _raised("range(0, n, 2) over a runtime n", compat.probe_kernels().runtime_range, out, 7)
    if raised:
        return raised
    if int(out[0]) == 4:
        return False, "range(0, n, 2) over a runtime n = 7 ran 4 times"
    return True, f"range(0, n, 2) over a runtime n = 7 ran {int(out[0])} times"


# fp32 atomic adds on NVIDIA GPUs flush subnormal inputs and results to zero (measured on an
# H100: docs/results/2026-12-06-h100-atomic-flush.md): start, added value, the GPU's result
ATOMIC_FTZ_CASES = ((0.0, 2.0 ** -140, 0.0),                         # a subnormal input
                    (2.0 ** -140, 2.0 ** -120, 2.0 ** -120),          # a subnormal in memory
                    (2.0 ** -127 * 3, -(2.0 ** -126), 0.0),           # a subnormal result
                    (1.0, 2.0 ** -24, 1.0))                           # normal values: RN as ever


def _probe_atomic_fadd_ftz() -> tuple:
    torch = _torch()
    start = torch.tensor([c[0] for c in ATOMIC_FTZ_CASES], dtype=torch.float32)
    x = torch.tensor([c[1] for c in ATOMIC_FTZ_CASES], dtype=torch.float32)
    want = np.array([c[2] for c in ATOMIC_FTZ_CASES], dtype=np.float32)
    out = start.clone()
    raised = _raised("tl.atomic_add of fp32", compat.probe_kernels().atomic_add, x, out, len(ATOMIC_FTZ_CASES))
    if raised:
        return raised
    got = out.numpy()
    if np.array_equal(got.view(np.uint32) & 0x7FFFFFFF, want.view(np.uint32) & 0x7FFFFFFF):
        return False, "fp32 atomic adds flush subnormal inputs and results to zero, as the GPU's"
    return True, f"fp32 atomic adds of {x.tolist()} into {start.tolist()} gave {got.tolist()}, want {want.tolist()}"


# tl.dot's split precisions, which the NVIDIA backend compiles (Triton 3.6 on) and the
# interpreter's options leave out
SPLIT_PRECISIONS = ("bf16x3", "bf16x6")


def _probe_dot_split_precisions() -> tuple:
    torch = _torch()
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(16, 16, generator=g), torch.randn(16, 16, generator=g)
    want = (a.double() @ b.double()).numpy()
    for prec in SPLIT_PRECISIONS:
        out = torch.zeros(16, 16)
        raised = _raised(f"tl.dot(..., input_precision={prec!r})", compat.probe_kernels().dot, a, b, out, prec)
        if raised:
            return raised
        err = np.abs(out.numpy() - want).max()
        if not err < 1e-4:
            return True, f"tl.dot(..., input_precision={prec!r}) is off the product by {err:.3g}"
    return False, f"tl.dot takes input_precision {' and '.join(SPLIT_PRECISIONS)} (a float32 matmul)"


def _probe_argmax_fast_ties() -> tuple:
    torch = _torch()
    x = torch.tensor([1.0, 3.0, 3.0, -2.0, 0.0, -2.0, 3.0, 1.0])
    out = torch.zeros(2, dtype=torch.int32)
    raised = _raised("tl.argmax(x, 0, tie_break_left=False)", compat.probe_kernels().argmax, x, out, 8)
    if raised:
        return raised
    got = out.tolist()
    if got == [1, 3]:
        return True, ("tl.argmax/tl.argmin with tie_break_left=False return the first of equal values (indices "
                      "1 and 3 of [1, 3, 3, -2, 0, -2, 3, 1]), as with tie_break_left=True")
    return False, f"tl.argmax/tl.argmin with tie_break_left=False return {got} among the equal values"


def _probe_out_of_bounds() -> tuple:
    torch = _torch()
    x = torch.zeros(1, dtype=torch.float32)
    hidden = torch.full((1, ), 7.25, dtype=torch.float32)     # a tensor the kernel is not given
    out = torch.zeros(1, dtype=torch.float32)
    off = (hidden.data_ptr() - x.data_ptr()) // 4
    try:
        _launch(compat.probe_kernels().bounds, x, out, off)
    except Exception as exc:  # noqa: BLE001
        if "OutOfBounds" in f"{type(exc).__name__} {exc!r}":
            return False, "a load outside every tensor argument raises OutOfBounds"
        return True, f"a load outside every tensor argument raised {type(exc).__name__}: {exc}"[:300]
    return True, (f"a load outside every tensor argument read {float(out[0])} (another tensor's value "
                  f"7.25 is there): the access goes unnoticed")


def _ulps_f32(got: np.ndarray, want64: np.ndarray) -> np.ndarray:
    want32 = want64.astype(np.float32)
    spacing = np.spacing(np.abs(want32)).astype(np.float64)
    return np.abs(got.astype(np.float64) - want64) / spacing


def _math_probe(kernel: Callable, names: tuple, x: np.ndarray, refs: tuple, label: str, tol: float = 4.0) -> tuple:
    torch = _torch()
    n = x.size
    outs = [torch.full((n, ), float("nan"), dtype=torch.float32) for _ in names]
    try:
        _launch(kernel, torch.from_numpy(x.copy()), *outs, n)
    except Exception as exc:  # noqa: BLE001
        return True, f"{label} raised {type(exc).__name__}: {exc}"[:300]
    errs = {}
    for name, out, ref in zip(names, outs, refs):
        got = out.numpy()
        errs[name] = float(np.nanmax(_ulps_f32(got, ref))) if np.isfinite(got).all() else float("inf")
    if all(e <= tol for e in errs.values()):
        return False, f"{label} within {tol} ulp: " + ", ".join(f"{k} {v:.2f}" for k, v in errs.items())
    return True, f"{label} max ulp errors " + ", ".join(f"{k} {v}" for k, v in errs.items())


def _probe_inputs_math() -> np.ndarray:
    return np.array([0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 4.5], dtype=np.float32)


def _probe_libdevice() -> tuple:
    x = _probe_inputs_math()
    x64 = x.astype(np.float64)
    refs = (np.tanh(x64), _special("erf")(x64), 1.0 / np.sqrt(x64))
    results = []
    kernels = compat.probe_kernels()
    if kernels.libdevice_stub is not None:
        results.append(("triton.language.extra.libdevice",
                        _math_probe(kernels.libdevice_stub, ("tanh", "erf", "rsqrt"), x, refs,
                                    "libdevice tanh/erf/rsqrt")))
    if kernels.libdevice_cuda is not None:
        results.append(("triton.language.extra.cuda.libdevice",
                        _math_probe(kernels.libdevice_cuda, ("tanh", "erf", "rsqrt"), x, refs,
                                    "libdevice tanh/erf/rsqrt")))
    if not results:  # pragma: no cover
        return False, "no libdevice module in this Triton"
    return _combine(*results)


def _probe_tl_math() -> tuple:
    x = _probe_inputs_math()
    x64 = x.astype(np.float64)
    refs = (1.0 / np.sqrt(x64), _special("erf")(x64), np.exp(x64))
    return _math_probe(compat.probe_kernels().tl_math, ("rsqrt", "erf", "exp"), x, refs,
                       "tl.math.rsqrt/tl.math.erf/tl.exp")


def _probe_autotune() -> tuple:
    import triton

    torch = _torch()
    out = torch.zeros(1, dtype=torch.int32)
    kernel = triton.autotune(configs=[triton.Config({"BLOCK": 3}), triton.Config({"BLOCK": 5})],
                             key=[])(compat.interpreted(compat.probe_kernels().autotune))
    state.autotune_override = 0
    try:
        kernel[(1, )](out)
    except Exception as exc:  # noqa: BLE001
        return True, f"interpreted autotuned kernel raised {type(exc).__name__}: {exc}"[:300]
    finally:
        state.autotune_override = None
    if int(out[0]) == 3:
        return False, "interpreted autotuned kernel ran its first config"
    return False, f"interpreted autotuned kernel ran (config with BLOCK={int(out[0])})"


_PROBES: Dict[str, Callable[[], tuple]] = {
    "bf16_casts": _probe_bf16_casts,
    "fp16_casts": _probe_fp16_casts,
    "fp8_casts": _probe_fp8_casts,
    "bf16_arithmetic": lambda: _probe_arith("bf16"),
    "fp16_arithmetic": lambda: _probe_arith("fp16"),
    "float_scalar_args": _probe_float_scalar_args,
    "bf16_constants": _probe_bf16_constants,
    "runtime_range": _probe_runtime_range,
    "libdevice": _probe_libdevice,
    "tl_math": _probe_tl_math,
    "atomic_fadd_ftz": _probe_atomic_fadd_ftz,
    "autotune": _probe_autotune,
    "dot_scaled_fp8": probe_dot_scaled_fp8,
    "dot_split_precisions": _probe_dot_split_precisions,
    "argmax_fast_ties": _probe_argmax_fast_ties,
    "out_of_bounds": _probe_out_of_bounds,
}


def run_probes() -> Dict[str, tuple]:
    results = {}
    for name in DEFECTS:
        try:
            with warnings.catch_warnings(), np.errstate(all="ignore"):
                warnings.simplefilter("ignore", RuntimeWarning)
                results[name] = _PROBES[name]()
        except Exception as exc:  # noqa: BLE001 - a broken probe must not break install
            results[name] = (True, f"probe itself failed: {type(exc).__name__}: {exc}"[:300])
    return results


def bare_probes(reprobe: bool = False) -> Dict[str, tuple]:
    if state.probe_cache is None or reprobe:
        if state.installed:
            raise RuntimeError("cannot probe the bare interpreter while repairs are installed")
        state.probe_cache = run_probes()
    return state.probe_cache

