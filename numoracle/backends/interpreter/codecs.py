"""The codecs between the interpreter's stored data and a format's values: uint16 bit
patterns for bf16, uint8 for fp8 (the interpreter keeps them as integers), numpy's own
float16; shared by every hook that takes over a format."""

from __future__ import annotations

from typing import Optional

import numpy as np

from ._state import language
from .rounding import (bf16_bits_to_f32, fp8_bits_to_f32, rne_bf16_bits, rne_fp8_bits, rne_fp16, rtz_bf16_bits,
                       rtz_fp16)


def fmt_name(ty) -> Optional[str]:
    tl = language()
    if ty == tl.bfloat16:
        return "bf16"
    if ty == tl.float16:
        return "fp16"
    if ty == tl.float8e4nv:
        return "e4m3"
    if ty == tl.float8e5:
        return "e5m2"
    return None


def decode(data: np.ndarray, ty) -> np.ndarray:
    """The values a handle's data encodes: float32 for bf16/fp16/fp8, else the
    numpy data itself (float32/64, ints, bool)."""
    name = fmt_name(ty)
    if name == "bf16":
        return bf16_bits_to_f32(data)
    if name in ("e4m3", "e5m2"):
        return fp8_bits_to_f32(data, name)
    if name == "fp16":
        return np.asarray(data).astype(np.float32)
    return np.asarray(data)


def encode(values: np.ndarray, ty, toward_zero: bool = False) -> np.ndarray:
    """Round values to format ``ty`` as the GPU would; returns the numpy data
    the interpreter stores for ``ty`` (uint16 for bf16, uint8 for fp8)."""
    name = fmt_name(ty)
    if name == "bf16":
        return rtz_bf16_bits(values) if toward_zero else rne_bf16_bits(values)
    if name == "fp16":
        return rtz_fp16(values) if toward_zero else rne_fp16(values)
    if name in ("e4m3", "e5m2"):
        return rne_fp8_bits(values, name, saturate=True, toward_zero=toward_zero)
    raise TypeError(f"no encoder for {ty}")  # pragma: no cover


def is_fp_type(ty) -> bool:
    return bool(getattr(ty, "is_floating", lambda: False)())
