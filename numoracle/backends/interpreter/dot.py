"""``tl.dot`` on half-format operands (part of the cast and arithmetic repairs), and the split
input precisions the interpreter refuses."""

from __future__ import annotations

import dataclasses

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



def repair_dot_split_precisions() -> None:
    """Defect ``dot_split_precisions``: ``tl.dot(..., input_precision="bf16x3")`` (or ``"bf16x6"``),
    which the NVIDIA backend compiles from Triton 3.6 on, raises on the interpreter: its options
    leave them out.  Repair: every builder's options admit them; the interpreter's dot then
    computes its float32 matmul, as it does for "tf32" and "tf32x3" (the interpreter's profile
    models that dot, docs/design.md §4.4)."""
    from .probes import SPLIT_PRECISIONS
    rt = runtime()
    B = rt.InterpreterBuilder
    orig = B.__init__

    def admitting(options):
        have = tuple(options.allowed_dot_input_precisions)
        return dataclasses.replace(
            options, allowed_dot_input_precisions=have + tuple(p for p in SPLIT_PRECISIONS if p not in have))

    def __init__(self, *args, **kwargs):
        orig(self, *args, **kwargs)
        self.options = admitting(self.options)

    state.patcher.set(B, "__init__", __init__)
    # the module's own builder, made at import
    for builder in [getattr(rt, "interpreter_builder", None)]:
        if builder is not None:
            state.patcher.set(builder, "options", admitting(builder.options))
