"""Bit-exact rounding into the GPU's storage formats, on numpy arrays (the interpreter's
tensors are numpy).  The rounding itself is ``numoracle.formats.round``: one correct
rounding of the float64 value; this module adds what a GPU conversion does with NaN and
beyond the range, and the encodings the interpreter stores (uint16 for bf16, uint8 for
fp8).  Public: oracles and tests use them."""

from __future__ import annotations

import numpy as np
import torch

from ... import formats as F

_FP8 = {"e4m3": F.e4m3fn, "e5m2": F.e5m2}


def _ml_dtype(fmt: str):
    import ml_dtypes

    return {"e4m3": ml_dtypes.float8_e4m3fn, "e5m2": ml_dtypes.float8_e5m2}[fmt]


def _as_float64(values) -> torch.Tensor:
    """Any numeric numpy values (float16/32/64, ints, bool) as a float64 tensor (exact)."""
    # np.array (not ascontiguousarray, which makes a 0-d array 1-d) keeps the shape
    return torch.from_numpy(np.array(values, dtype=np.float64))


def _bits16(rounded: torch.Tensor, dtype) -> np.ndarray:
    """The uint16 encodings of values already in a 16-bit format (NaN excluded)."""
    return rounded.to(dtype).view(torch.int16).numpy().view(np.uint16)


def bf16_bits_to_f32(bits) -> np.ndarray:
    """bf16 bit patterns (uint16) -> float32, exact (subnormals, NaN payloads)."""
    b = np.asarray(bits).astype(np.uint16).astype(np.uint32)
    return (b << np.uint32(16)).view(np.float32)


def _nan_bf16(values, like: np.ndarray) -> tuple:
    """(NaN mask, quiet bf16 NaN with the float32 NaN's sign and top payload bits): what
    ``cvt.rn.bf16.f32`` gives for a NaN."""
    f32 = np.asarray(values).astype(np.float32)
    nan = np.isnan(f32)
    quiet = ((f32.view(np.uint32) >> np.uint32(16)) | np.uint32(0x0040)).astype(np.uint16)
    return nan.reshape(like.shape), quiet.reshape(like.shape)


def rne_bf16_bits(values) -> np.ndarray:
    """Round to bf16, nearest even (``cvt.rn.bf16.f32``); returns uint16 bits.  Overflow
    gives ±inf; NaN stays a quiet NaN with its sign and top payload bits."""
    x = _as_float64(values)
    with np.errstate(all="ignore"):
        bits = _bits16(F.round(x, F.bf16), torch.bfloat16)
    nan, quiet = _nan_bf16(values, bits)
    return np.where(nan, quiet, bits).astype(np.uint16)


def rtz_bf16_bits(values) -> np.ndarray:
    """Round to bf16 toward zero (``cvt.rz.bf16.f32``); returns uint16 bits."""
    x = _as_float64(values)
    bits = _bits16(F.round(x, F.bf16, mode="rtz"), torch.bfloat16)
    nan, quiet = _nan_bf16(values, bits)
    return np.where(nan, quiet, bits).astype(np.uint16)


def rne_fp16(values) -> np.ndarray:
    """Round to fp16, nearest even, overflow to inf (``cvt.rn.f16.f32``), as float16."""
    x = _as_float64(values)
    return F.round(x, F.fp16).numpy().astype(np.float16)


def rtz_fp16(values) -> np.ndarray:
    """Round to fp16 toward zero, as float16."""
    x = _as_float64(values)
    return F.round(x, F.fp16, mode="rtz").numpy().astype(np.float16)


def fp8_bits_to_f32(bits, fmt: str) -> np.ndarray:
    """fp8 bit patterns (uint8) -> float32, exact; ``fmt`` is 'e4m3' (e4m3fn)
    or 'e5m2'.  NaN codes give NaN, e5m2 infinities give inf."""
    return np.asarray(bits).astype(np.uint8).view(_ml_dtype(fmt)).astype(np.float32)


def rne_fp8_bits(values, fmt: str, saturate: bool = True, toward_zero: bool = False) -> np.ndarray:
    """Round to fp8 ('e4m3' = e4m3fn, or 'e5m2'); returns uint8 bits.

    With ``saturate`` (default) this is NVIDIA's ``cvt.rn.satfinite``, which Triton emits
    for ``x.to(tl.float8e4nv)`` and ``x.to(tl.float8e5)`` on sm_89+: round to nearest even,
    values beyond the largest finite value (448, 57344) -- infinities included -- become
    that value with their sign, NaN becomes NaN (0x7F, as NVIDIA's reference
    ``__nv_cvt_float_to_fp8`` gives).  Without ``saturate``: torch's and ml_dtypes' rule
    (NaN past e4m3fn's range, inf past e5m2's).  ``toward_zero`` rounds toward zero instead
    (``fp_downcast_rounding='rtz'``)."""
    f = _FP8[fmt]
    x = _as_float64(values)
    nan = np.isnan(np.asarray(values, dtype=np.float64))
    with np.errstate(all="ignore"):
        y = F.round(x, f, mode="rtz" if toward_zero else "rne", overflow="saturate" if saturate else "inf")
        bits = y.to(f.torch_dtype).view(torch.uint8).numpy().copy()
    if saturate:
        bits = np.where(nan.reshape(bits.shape), np.uint8(0x7F), bits).astype(np.uint8)
    return bits


def _two_sum(a: np.ndarray, b: np.ndarray):
    s = a + b
    bb = s - a
    err = (a - (s - bb)) + (b - bb)
    return s, err


def round_fma(a, b, c, fmt: str) -> np.ndarray:
    """``a*b + c`` rounded once (RNE) to ``fmt`` ('bf16' -> uint16 bits, 'fp16' ->
    float16) for operands given as values in that format (what a GPU ``fma.rn``
    computes).

    The product of two bf16/fp16 values is exact in float64; the sum is rounded to float64
    with its error recovered by TwoSum.  Where that float64 sum is exactly a float32 value
    (a midpoint of the target format is one), it is moved one float64 ulp toward the error,
    so that its single rounding is the exact value's."""
    a64 = np.asarray(a, dtype=np.float64)
    b64 = np.asarray(b, dtype=np.float64)
    c64 = np.asarray(c, dtype=np.float64)
    with np.errstate(all="ignore"):
        p = a64 * b64
        s, err = _two_sum(p, c64)
        finite = np.isfinite(s) & np.isfinite(err)
        nudged = np.where(finite & (err != 0), np.nextafter(s, s + np.where(err > 0, np.inf, -np.inf)), s)
        s32_exact = s.astype(np.float32).astype(np.float64) == s
        value = np.where(s32_exact, nudged, s)
    if fmt == "bf16":
        return rne_bf16_bits(value)
    if fmt == "fp16":
        return rne_fp16(value)
    raise ValueError(f"round_fma: unsupported format {fmt!r}")
