"""RMSNorm backward after Liger-Kernel's precision plan (docs/operators.md row 1), and its variants.

The main kernel, :func:`rms_norm_backward`, lives in :mod:`.rms_norm` beside the forward (the
numeric tests import it from there); this module re-exports it and adds behaviour-preserving
variants and the faulty kernel of change pair 2.

Precision plan (every correct variant), casting modes "llama" and "gemma":

* x, dy and the stored rstd (fp32) widened to fp32; w_eff = offset + w, evaluated in w's format
  and widened for "llama", widened first and + offset in fp32 for "gemma";
* m = dy·w_eff; c = sum(m·x)/n; dx = rstd·m − (rstd·rstd·rstd·c)·x, all fp32 in that order,
  one rounding to x's format at the store;
* dW: per program an fp32 partial row of dy·x̂ (x̂ = x·rstd in fp32, rounded to x's format and
  widened again for "llama"); the host sums the fp32 partial rows in fp32 and casts once to w's
  format.

The variants change only the program-to-row mapping and so the number of dW partials.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ._common import as_rows
from .rms_norm import _check, rms_norm_backward  # noqa: F401  (re-exported: the "correct" kernel)


@triton.jit
def _rms_bwd_tile_kernel(dy_ptr, x_ptr, w_ptr, rstd_ptr, dx_ptr, dw_part_ptr, n_rows, n_cols,
                         OFFSET: tl.constexpr, CASTING: tl.constexpr, DW_SUM: tl.constexpr,
                         ROWS: tl.constexpr, BLOCK: tl.constexpr):
    """One [ROWS, BLOCK] tile of rows per program; its dW partial is the tile's column sum."""
    pid = tl.program_id(0)
    rows = pid.to(tl.int64) * ROWS + tl.arange(0, ROWS)
    cols = tl.arange(0, BLOCK)
    row_mask = rows < n_rows
    col_mask = cols < n_cols
    mask = row_mask[:, None] & col_mask[None, :]
    offs = rows[:, None] * n_cols + cols[None, :]
    w = tl.load(w_ptr + cols, mask=col_mask, other=0.0)
    if CASTING == "gemma":
        w_eff = w.to(tl.float32) + OFFSET
    else:
        w_eff = (w + OFFSET).to(w.dtype).to(tl.float32)
    x_fmt = x_ptr.dtype.element_ty
    x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    dy_raw = tl.load(dy_ptr + offs, mask=mask, other=0.0)
    dy = dy_raw.to(tl.float32)
    rstd = tl.load(rstd_ptr + rows, mask=row_mask, other=0.0).to(tl.float32)
    m = dy * w_eff[None, :]
    c = tl.sum(m * x, axis=1) / n_cols
    dx = rstd[:, None] * m - (rstd * rstd * rstd * c)[:, None] * x
    tl.store(dx_ptr + offs, dx, mask=mask)
    xhat = x * rstd[:, None]
    if CASTING == "llama":
        xhat = xhat.to(x_fmt).to(tl.float32)
    if DW_SUM == "fp32":
        part = tl.sum(dy * xhat, axis=0)
    else:
        # Change pair 2 (faulty): the product and the column sum in dy's format (bf16).
        part = tl.sum(dy_raw * xhat.to(dy_raw.dtype), axis=0).to(tl.float32)
    tl.store(dw_part_ptr + pid.to(tl.int64) * n_cols + cols, part, mask=col_mask)


def _tiles(dy, x, w, rstd, offset, casting, rows_per_tile, dw_sum, num_warps):
    _check(x, w, casting)
    if casting == "none":
        raise ValueError("rms_norm backward kernels cover casting='llama' and 'gemma'; got 'none'")
    x2, dy2 = as_rows(x), as_rows(dy)
    if dy2.shape != x2.shape:
        raise ValueError(f"dy must have x's shape {tuple(x.shape)}, got {tuple(dy.shape)}")
    n_rows, n_cols = x2.shape
    rows_per_tile = rows_per_tile or triton.next_power_of_2(n_rows)
    n_prog = triton.cdiv(n_rows, rows_per_tile)
    dx = torch.empty_like(x2)
    dw_part = torch.zeros((n_prog, n_cols), dtype=torch.float32, device=x2.device)
    _rms_bwd_tile_kernel[(n_prog,)](dy2, x2, w.contiguous(), rstd.contiguous().reshape(-1), dx,
                                    dw_part, n_rows, n_cols, OFFSET=float(offset),
                                    CASTING=casting, DW_SUM=dw_sum, ROWS=rows_per_tile,
                                    BLOCK=triton.next_power_of_2(n_cols), num_warps=num_warps)
    dw = dw_part.sum(dim=0, dtype=torch.float32).to(w.dtype)
    return dx.reshape(x.shape), dw


def rms_norm_backward_one_program(dy, x, w, rstd, *, offset=0.0, casting="llama", num_warps=4):
    """As :func:`rms_norm_backward` with one program walking every row: a single fp32 dW
    partial, accumulated row after row (the host sum is then a copy)."""
    return rms_norm_backward(dy, x, w, rstd, offset=offset, casting=casting, num_programs=1,
                             num_warps=num_warps)


def rms_norm_backward_two_row_tiles(dy, x, w, rstd, *, offset=0.0, casting="llama", num_warps=4):
    """As :func:`rms_norm_backward` with a [2, BLOCK] tile of rows per program: c is a sum along
    axis 1 of the tile, the program's dW partial the tile's fp32 column sum (ceil(rows/2)
    partials summed on the host in fp32, cast to w's format)."""
    return _tiles(dy, x, w, rstd, offset, casting, 2, "fp32", num_warps)


def rms_norm_backward_bf16_dw(dy, x, w, rstd, *, offset=0.0, casting="llama", num_warps=4):
    """FAULTY (change pair 2): one tile of all rows; the dW partial is ``tl.sum`` over dy·x̂
    computed and summed in dy's format (bf16/fp16) instead of widened to fp32 first."""
    return _tiles(dy, x, w, rstd, offset, casting, None, "narrow", num_warps)
