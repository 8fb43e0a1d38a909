"""Reductions and scans on half formats (part of the arithmetic repairs): numpy's fast
paths read bf16 codes as integers."""

from __future__ import annotations


import numpy as np

from ._state import STATE as state
from ._state import language, runtime
from .codecs import decode, encode


def _sequential(values: np.ndarray, axis: int, ty, combine, scan: bool):
    """Fold ``values`` (float32) along ``axis``, rounding to ``ty`` after
    every step (a bf16 ``tl.sum``/``tl.cumsum`` keeps bf16 partial sums)."""
    n = values.shape[axis]
    acc = np.take(values, 0, axis=axis)
    outs = [acc]
    with np.errstate(all="ignore"):
        for i in range(1, n):
            acc = decode(encode(combine(acc, np.take(values, i, axis=axis)), ty), ty)
            if scan:
                outs.append(acc)
    if scan:
        return encode(np.stack(outs, axis=axis), ty)
    return encode(acc, ty)


def install_reduce_hooks() -> None:
    """Reductions/scans with numpy fast paths (sum, min, max, argmin, argmax,
    cumsum, cumprod) read bf16 uint16 codes as integers: decode first."""
    if "reduce" in state.hooks:
        return
    rt = runtime()
    tl = language()
    R, S = rt.ReduceOps, rt.ScanOps
    orig_min_max, orig_sum = R.min_max, R.sum
    orig_cumsum, orig_cumprod = S.cumsum, S.cumprod

    def min_max(self, input, val_reduce_op, idx_reduce_op=None):
        t = input[0] if isinstance(input, tuple) else input
        ty = t.dtype.scalar
        if ty not in state.arith_formats:
            return orig_min_max(self, input, val_reduce_op, idx_reduce_op)
        vals = decode(t.handle.data, ty)
        val = idx = None
        if val_reduce_op:
            r = val_reduce_op(vals, axis=self.axis, keepdims=self.keep_dims)
            val = self.to_tensor(encode(np.asarray(r, dtype=np.float32), ty), t.dtype)
        if idx_reduce_op:
            idx = self.to_tensor(idx_reduce_op(vals, axis=self.axis, keepdims=self.keep_dims), tl.int32)
        if val is not None and idx is not None:
            return val, idx
        return val if val is not None else idx

    def sum(self, input):
        ty = input.dtype.scalar
        if ty not in state.arith_formats:
            return orig_sum(self, input)
        vals = decode(input.handle.data, ty)
        axis = self.axis
        if axis is None:
            out = _sequential(vals.reshape(-1), 0, ty, np.add, scan=False)
            if self.keep_dims:
                out = np.asarray(out).reshape([1] * vals.ndim)
        else:
            out = _sequential(vals, axis, ty, np.add, scan=False)
            if self.keep_dims:
                out = np.expand_dims(out, axis)
        return self.to_tensor(out, input.dtype)

    def _scan(orig, combine):
        def method(self, input):
            ty = input.dtype.scalar
            if ty not in state.arith_formats:
                return orig(self, input)
            vals = decode(input.handle.data, ty)
            return [self.to_tensor(_sequential(vals, self.axis, ty, combine, scan=True), input.dtype)]

        return method

    state.patcher.set(R, "min_max", min_max)
    state.patcher.set(R, "sum", sum)
    state.patcher.set(S, "cumsum", _scan(orig_cumsum, np.add))
    state.patcher.set(S, "cumprod", _scan(orig_cumprod, np.multiply))
    state.hooks.add("reduce")


def _last(nanarg):
    """``nanarg`` (``np.nanargmax`` or ``np.nanargmin``) taking the last of equal values."""
    def index(data, axis=None, keepdims=False):
        n = data.shape[axis] if axis is not None else data.size
        return (n - 1) - nanarg(np.flip(data, axis=axis), axis=axis, keepdims=keepdims)
    return index


def repair_argmax_fast_ties() -> None:
    """Defect ``argmax_fast_ties``: ``tl.argmax``/``tl.argmin`` with ``tie_break_left=False``
    (Triton's fast tie break, which promises no index among equal values: its combine keeps
    the right operand on a tie) return the first of equal values, as with ``True``.  A kernel
    that asks for the fast tie break then never meets, on the CPU, a reference that promises
    the first (``no.argmax(..., ties="first")``).  Repair: the last of equal values, the
    choice a left-to-right fold of that combine makes (the GPU's tree may make another)."""
    rt = runtime()
    tl = language()
    std = tl.standard
    R = rt.ReduceOps
    orig = R.apply_impl
    fast_max = getattr(std, "_argmax_combine_tie_break_fast", None)
    fast_min = getattr(std, "_argmin_combine_tie_break_fast", None)

    def apply_impl(self, input):
        if fast_max is not None and self.combine_fn is fast_max:
            return self.min_max(input[0], val_reduce_op=np.nanmax, idx_reduce_op=_last(np.nanargmax))
        if fast_min is not None and self.combine_fn is fast_min:
            return self.min_max(input[0], val_reduce_op=np.nanmin, idx_reduce_op=_last(np.nanargmin))
        return orig(self, input)

    state.patcher.set(R, "apply_impl", apply_impl)
