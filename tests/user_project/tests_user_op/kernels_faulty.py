"""The kernel of ``kernels`` with a planted fault: the mean of squares divides by the block
size instead of the row length, so a row that does not fill its power-of-two block (the
masked lanes load 0) gets too small a mean.  Fixing it means copying ``kernels.py`` over
this file.

    h = x + residual                     fp32 (both widened from their format)
    residual_out = h                     rounded to x's format
    rstd = rsqrt(sum(h * h) / n + eps)   fp32, from the unrounded fp32 h
    y = h * rstd * (w + offset)          fp32, one rounding at the store (x's format)
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl


@triton.jit
def _add_rms_norm_fwd(x_ptr, r_ptr, w_ptr, y_ptr, h_ptr, n_cols, eps,
                      OFFSET: tl.constexpr, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=0.0).to(tl.float32)
    r = tl.load(r_ptr + row * n_cols + cols, mask=mask, other=0.0).to(tl.float32)
    h = x + r
    tl.store(h_ptr + row * n_cols + cols, h.to(h_ptr.dtype.element_ty), mask=mask)
    ms = tl.sum(h * h, axis=0) / BLOCK      # the fault: BLOCK, not n_cols
    rstd = tl.math.rsqrt(ms + eps)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    y = h * rstd * (w + OFFSET)
    tl.store(y_ptr + row * n_cols + cols, y.to(y_ptr.dtype.element_ty), mask=mask)


def add_rms_norm(x, residual, w, *, eps=1e-6, offset=0.0):
    """(y, residual_out) for x, residual [rows, cols] and w [cols]."""
    rows, n_cols = x.shape
    x, residual, w = x.contiguous(), residual.contiguous(), w.contiguous()
    y = torch.empty_like(x)
    h = torch.empty_like(x)
    _add_rms_norm_fwd[(rows,)](x, residual, w, y, h, n_cols, eps,
                               OFFSET=offset, BLOCK=triton.next_power_of_2(n_cols))
    return y, h
