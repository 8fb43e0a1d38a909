"""Row-wise softmax (beyond the 13; Liger-Kernel's plan).

Precision plan: x→fp32; m = max(x); e = exp(x − m) in fp32; s = sum(e) in fp32; y = e / s in
fp32 (one fp32 division per element); one rounding to x's format at the store. Variants differ
only in how exp is evaluated or how the row is walked, as each launcher says.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ._common import as_rows, full_row_block, row_block

# log2(e); a constexpr so the JIT may read it; rounded to fp32 where used.
LOG2E = tl.constexpr(1.4426950408889634)


@triton.jit
def _exp_shifted(x, m, EXP_FORM: tl.constexpr):
    if EXP_FORM == "exp":
        return tl.exp(x - m)
    else:
        return tl.exp2((x - m) * LOG2E)


@triton.jit
def _softmax_kernel(x_ptr, y_ptr, n_cols, EXP_FORM: tl.constexpr, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=-float("inf")).to(tl.float32)
    m = tl.max(x, axis=0)
    e = _exp_shifted(x, m, EXP_FORM)
    s = tl.sum(e, axis=0)
    tl.store(y_ptr + row * n_cols + cols, e / s, mask=mask)


@triton.jit
def _softmax_online_kernel(x_ptr, y_ptr, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    x_row = x_ptr + row * n_cols
    m = tl.full([], -float("inf"), dtype=tl.float32)
    s = tl.zeros([], dtype=tl.float32)
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        x = tl.load(x_row + cols, mask=cols < n_cols, other=-float("inf")).to(tl.float32)
        m_new = tl.maximum(m, tl.max(x, axis=0))
        s = s * tl.exp(m - m_new) + tl.sum(tl.exp(x - m_new), axis=0)
        m = m_new
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        mask = cols < n_cols
        x = tl.load(x_row + cols, mask=mask, other=-float("inf")).to(tl.float32)
        tl.store(y_ptr + row * n_cols + cols, tl.exp(x - m) / s, mask=mask)


def _launch(x, exp_form, block, num_warps):
    x2 = as_rows(x)
    y = torch.empty_like(x2)
    n_rows, n_cols = x2.shape
    _softmax_kernel[(n_rows,)](x2, y, n_cols, EXP_FORM=exp_form,
                               BLOCK=full_row_block(n_cols, block), num_warps=num_warps)
    return y.reshape(x.shape)


def softmax(x, *, block=None, num_warps=4):
    """Softmax over the last dimension, one program per row, e = ``tl.exp(x − m)`` (fp32).

    Precision plan: the module docstring's. Returns y in x's format and shape.
    """
    return _launch(x, "exp", block, num_warps)


def softmax_exp2(x, *, block=None, num_warps=4):
    """As :func:`softmax` with e = ``tl.exp2((x − m)·log2e)``: the subtraction and the multiply by
    the fp32 constant log2e each rounded to fp32."""
    return _launch(x, "exp2", block, num_warps)


def softmax_online(x, *, block=None, num_warps=4):
    """Softmax with an online (chunked) max and sum, then a second pass.

    Pass 1 walks BLOCK-wide chunks (default BLOCK covers the row) in order:
    m' = max(m, max(chunk)); s = s·exp(m − m') + sum(exp(x − m')), all fp32 with ``tl.exp``.
    Pass 2 stores exp(x − m) / s (fp32) rounded to x's format. A row whose first chunks are all
    −inf gives NaN (exp(−inf − (−inf))), as the upstream online softmax does.
    """
    x2 = as_rows(x)
    y = torch.empty_like(x2)
    n_rows, n_cols = x2.shape
    _softmax_online_kernel[(n_rows,)](x2, y, n_cols, BLOCK=row_block(n_cols, block),
                                      num_warps=num_warps)
    return y.reshape(x.shape)


def softmax_one_warp(x, *, block=None):
    """As :func:`softmax` with one warp per program."""
    return _launch(x, "exp", block, 1)
