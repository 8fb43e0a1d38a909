"""``tl.dot`` on half-format operands (part of the cast and arithmetic repairs)."""

from __future__ import annotations


import numpy as np

from ._state import STATE as state
from ._state import language, runtime
from .codecs import decode, encode


def install_dot_hook() -> None:
    """``tl.dot`` on bf16 operands multiplies the uint16 codes; on fp8 it goes
    through the broken fp8 conversion.  Decode such operands to float32
    (exact) before the matmul."""
    if "dot" in state.hooks:
        return
    rt = runtime()
    B = rt.InterpreterBuilder
    orig = B.create_dot

    def create_dot(self, a, b, d, input_precision, max_num_imprecise_acc):
        active = state.cast_formats | state.arith_formats
        if a.dtype.scalar not in active and b.dtype.scalar not in active:
            return orig(self, a, b, d, input_precision, max_num_imprecise_acc)
        tl = language()
        a32 = rt.TensorHandle(decode(a.data, a.dtype.scalar).astype(np.float32), tl.float32)
        b32 = rt.TensorHandle(decode(b.data, b.dtype.scalar).astype(np.float32), tl.float32)
        if d.dtype.scalar in active:
            # accumulator in a half format: accumulate in fp32, round once
            d32 = rt.TensorHandle(decode(d.data, d.dtype.scalar).astype(np.float32), tl.float32)
            out = orig(self, a32, b32, d32, input_precision, max_num_imprecise_acc)
            return rt.TensorHandle(encode(out.data, d.dtype.scalar), d.dtype.scalar)
        # fp32 accumulation (products of bf16/fp8 values are exact in fp32)
        return orig(self, a32, b32, d, input_precision, max_num_imprecise_acc)

    state.patcher.set(B, "create_dot", create_dot)
    state.hooks.add("dot")

