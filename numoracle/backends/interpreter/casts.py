"""Casts: the repairs of defects ``bf16_casts``, ``fp16_casts`` and ``fp8_casts`` (with
``tl.dot``'s operands, which go through the same conversions)."""

from __future__ import annotations

from typing import Any

import numpy as np

from ._state import STATE as state
from ._state import language, runtime
from .codecs import decode, encode, fmt_name, is_fp_type
from .dot import install_dot_hook


def _convert(builder, orig_cast, src, dst_ty, rounding) -> Any:
    """Convert handle ``src`` to scalar type ``dst_ty``, or return None to
    leave the conversion to the original code (no repaired format involved,
    or a format this module does not handle, such as fp8e4b15)."""
    tl = language()
    rt = runtime()
    src_ty = src.dtype.scalar
    involved = {src_ty, dst_ty} & state.cast_formats
    if not involved:
        return None
    if src_ty == dst_ty:
        return rt.TensorHandle(src.data.copy(), dst_ty)
    src_name, dst_name = fmt_name(src_ty), fmt_name(dst_ty)
    known = (tl.float32, tl.float64, tl.float16, tl.bfloat16, tl.float8e4nv, tl.float8e5)
    if (is_fp_type(src_ty) and src_ty not in known) or (is_fp_type(dst_ty) and dst_ty not in known):
        return None
    if np.asarray(src.data).dtype != rt._get_np_dtype(src_ty):
        # a handle whose data is not stored as its type says (upstream gives
        # comparison results the operands' type): take the data at face value
        if dst_name is None:
            return None
        values = np.asarray(src.data)
    else:
        values = decode(src.data, src_ty)
    toward_zero = rounding is not None and rounding == rt._ir.ROUNDING_MODE.RTZ
    if dst_name is not None:
        with np.errstate(all="ignore"):
            data = encode(values, dst_ty, toward_zero=toward_zero)
        return rt.TensorHandle(np.asarray(data).reshape(np.shape(src.data)), dst_ty)
    if dst_ty in (tl.float32, tl.float64):
        return rt.TensorHandle(values.astype(rt._get_np_dtype(dst_ty)), dst_ty)
    # integer destination: let the original code convert the decoded values
    if src_name is not None:
        return orig_cast(builder, rt.TensorHandle(values.astype(np.float32), tl.float32), dst_ty)
    return None



def install_cast_hooks() -> None:
    """Route casts through :func:`_convert` (active formats only)."""
    if "casts" in state.hooks:
        return
    rt = runtime()
    B = rt.InterpreterBuilder
    orig_cast_impl = B.cast_impl
    orig_fp_to_fp = B.create_fp_to_fp

    def cast_impl(self, src, dst_type):
        out = _convert(self, orig_cast_impl, src, dst_type.scalar, None)
        return orig_cast_impl(self, src, dst_type) if out is None else out

    def create_fp_to_fp(self, src, dst_type, rounding_mode):
        out = _convert(self, orig_cast_impl, src, dst_type.scalar, rounding_mode)
        return orig_fp_to_fp(self, src, dst_type, rounding_mode) if out is None else out

    cast_impl.__doc__ = "numoracle: GPU-faithful casts for repaired formats (see numoracle.backends.interpreter)."
    create_fp_to_fp.__doc__ = cast_impl.__doc__
    state.patcher.set(B, "cast_impl", cast_impl)
    state.patcher.set(B, "create_fp_to_fp", create_fp_to_fp)
    install_dot_hook()
    state.hooks.add("casts")



def repair_bf16_casts() -> None:
    """Defect ``bf16_casts``: ``InterpreterBuilder.cast_impl`` converts fp32 to
    bf16 with ``_convert_float(..., rounding_mode=None)``, which drops the low
    16 bits (round toward zero) and mangles subnormals; bf16 subnormals also
    widen wrongly.  Detected by storing ``x.to(tl.bfloat16)`` for exact ties,
    non-ties and subnormals and comparing with torch's RNE cast, and by
    widening every bf16 subnormal code.  Repair: ``cast_impl`` and
    ``create_fp_to_fp`` route bf16 conversions through :func:`rne_bf16_bits`
    (``fp_downcast_rounding='rtz'`` through :func:`rtz_bf16_bits`)."""
    state.cast_formats.add(language().bfloat16)
    install_cast_hooks()


def repair_fp16_casts() -> None:
    """Defect ``fp16_casts``: fp32->fp16 conversions that are not RNE /
    fp16->fp32 that are not exact.  Detected like ``bf16_casts`` against
    torch.  Not present on Triton 3.6-3.9 (numpy's ``astype(float16)`` is
    RNE); the repair routes fp16 conversions through :func:`rne_fp16`."""
    state.cast_formats.add(language().float16)
    install_cast_hooks()


def repair_fp8_casts() -> None:
    """Defect ``fp8_casts``: ``create_fp_to_fp`` converts to e4m3/e5m2 with
    ``_convert_float``, which rounds ties away from zero, clamps the exponent
    field (500 -> 256 in e4m3, NaN -> 384), and widens NaN/inf codes to
    numbers.  Detected by storing ties, values past 448 / 57344, inf and NaN
    through ``x.to(tl.float8e4nv)`` / ``x.to(tl.float8e5)``, and by widening
    all 256 codes.  Repair: fp8 conversions go through :func:`rne_fp8_bits`
    (RNE + satfinite, like ``cvt.rn.satfinite``) and ml_dtypes decoding."""
    tl = language()
    state.cast_formats.update({tl.float8e4nv, tl.float8e5})
    install_cast_hooks()

