"""LayerNorm backward after Liger-Kernel's precision plan (docs/operators.md row 2).

Inputs dy, x, w, and the forward's per-row mean and rstd **stored in x's format** (bf16 when x is
bf16): the backward reloads those rounded statistics. Precision plan (every correct variant):

* x, dy, w, mean, rstd widened to fp32;
* x̂ = (x − mean)·rstd; wdy = w·dy; c1 = sum(x̂·wdy)/n; c2 = sum(wdy)/n;
  dx = (wdy − (x̂·c1 + c2))·rstd, all fp32 in that order, one rounding to x's format;
* dW, dB: per program fp32 partial rows of dy·x̂ and dy; the host sums the partial rows in fp32
  and casts once to w's and b's formats.

Variants change the number of programs (and so of partials) and walk a row in column chunks.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ._common import as_rows


@triton.jit
def _ln_bwd_kernel(dy_ptr, x_ptr, w_ptr, mean_ptr, rstd_ptr, dx_ptr, dw_part_ptr, db_part_ptr,
                   n_rows, n_cols, rows_per_program, DX_VIA_BF16: tl.constexpr,
                   BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    dw_acc = tl.zeros([BLOCK], dtype=tl.float32)
    db_acc = tl.zeros([BLOCK], dtype=tl.float32)
    row_start = pid.to(tl.int64) * rows_per_program
    row_end = tl.minimum(row_start + rows_per_program, n_rows)
    for row in range(row_start, row_end):
        offs = row * n_cols + cols
        x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)
        dy = tl.load(dy_ptr + offs, mask=mask, other=0.0).to(tl.float32)
        mean = tl.load(mean_ptr + row).to(tl.float32)
        rstd = tl.load(rstd_ptr + row).to(tl.float32)
        xhat = tl.where(mask, (x - mean) * rstd, 0.0)
        wdy = w * dy
        c1 = tl.sum(xhat * wdy, axis=0) / n_cols
        c2 = tl.sum(wdy, axis=0) / n_cols
        dx = (wdy - (xhat * c1 + c2)) * rstd
        if DX_VIA_BF16:
            # Change pair 3 (faulty): an fp16 gradient passed through bf16 before the store.
            dx = dx.to(tl.bfloat16)
        tl.store(dx_ptr + offs, dx, mask=mask)
        dw_acc += dy * xhat
        db_acc += dy
    tl.store(dw_part_ptr + pid.to(tl.int64) * n_cols + cols, dw_acc, mask=mask)
    tl.store(db_part_ptr + pid.to(tl.int64) * n_cols + cols, db_acc, mask=mask)


@triton.jit
def _ln_bwd_chunked_kernel(dy_ptr, x_ptr, w_ptr, mean_ptr, rstd_ptr, dx_ptr, dw_part_ptr,
                           db_part_ptr, n_cols, BLOCK: tl.constexpr):
    """One program per row, the row walked in BLOCK-wide chunks: loop 1 adds each chunk's sums
    into c1, c2 in chunk order; loop 2 writes dx and this row's dW/dB partial chunk."""
    row = tl.program_id(0).to(tl.int64)
    mean = tl.load(mean_ptr + row).to(tl.float32)
    rstd = tl.load(rstd_ptr + row).to(tl.float32)
    s1 = tl.zeros([], dtype=tl.float32)
    s2 = tl.zeros([], dtype=tl.float32)
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        mask = cols < n_cols
        x = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=0.0).to(tl.float32)
        dy = tl.load(dy_ptr + row * n_cols + cols, mask=mask, other=0.0).to(tl.float32)
        w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
        xhat = tl.where(mask, (x - mean) * rstd, 0.0)
        wdy = w * dy
        s1 += tl.sum(xhat * wdy, axis=0)
        s2 += tl.sum(wdy, axis=0)
    c1 = s1 / n_cols
    c2 = s2 / n_cols
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        mask = cols < n_cols
        offs = row * n_cols + cols
        x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)
        dy = tl.load(dy_ptr + offs, mask=mask, other=0.0).to(tl.float32)
        w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
        xhat = tl.where(mask, (x - mean) * rstd, 0.0)
        wdy = w * dy
        tl.store(dx_ptr + offs, (wdy - (xhat * c1 + c2)) * rstd, mask=mask)
        tl.store(dw_part_ptr + offs, dy * xhat, mask=mask)
        tl.store(db_part_ptr + offs, dy, mask=mask)


def _check(dy, x, w, mean, rstd):
    n_cols = x.shape[-1]
    if w.dim() != 1 or w.shape[0] != n_cols:
        raise ValueError(f"w must have shape ({n_cols},) to match x's last dimension, "
                         f"got {tuple(w.shape)}")
    if dy.shape != x.shape:
        raise ValueError(f"dy must have x's shape {tuple(x.shape)}, got {tuple(dy.shape)}")
    for name, t in (("mean", mean), ("rstd", rstd)):
        if tuple(t.shape) != tuple(x.shape[:-1]):
            raise ValueError(f"{name} must have shape {tuple(x.shape[:-1])} (one per row), "
                             f"got {tuple(t.shape)}")


def _finish(dx, dw_part, db_part, x, w, b_dtype):
    dw = dw_part.sum(dim=0, dtype=torch.float32).to(w.dtype)
    db = db_part.sum(dim=0, dtype=torch.float32).to(b_dtype)
    return dx.reshape(x.shape), dw, db


def _launch(dy, x, w, mean, rstd, b_dtype, num_programs, dx_via_bf16, num_warps):
    _check(dy, x, w, mean, rstd)
    x2, dy2 = as_rows(x), as_rows(dy)
    n_rows, n_cols = x2.shape
    n_prog = max(1, min(n_rows, 64) if num_programs is None else int(num_programs))
    dx = torch.empty_like(x2)
    dw_part = torch.zeros((n_prog, n_cols), dtype=torch.float32, device=x2.device)
    db_part = torch.zeros((n_prog, n_cols), dtype=torch.float32, device=x2.device)
    _ln_bwd_kernel[(n_prog,)](dy2, x2, w.contiguous(), mean.contiguous().reshape(-1),
                              rstd.contiguous().reshape(-1), dx, dw_part, db_part, n_rows, n_cols,
                              triton.cdiv(n_rows, n_prog), DX_VIA_BF16=dx_via_bf16,
                              BLOCK=triton.next_power_of_2(n_cols), num_warps=num_warps)
    return _finish(dx, dw_part, db_part, x, w, b_dtype)


def layer_norm_backward(dy, x, w, mean, rstd, *, b_dtype=None, num_programs=None, num_warps=4):
    """LayerNorm backward: returns ``(dx, dw, db)`` (dx in x's format, dw in w's, db in
    ``b_dtype``, default w's). Precision plan: the module docstring's; ``num_programs``
    (default min(rows, 64)) programs each walk a contiguous block of rows."""
    return _launch(dy, x, w, mean, rstd, b_dtype or w.dtype, num_programs, False, num_warps)


def layer_norm_backward_one_program(dy, x, w, mean, rstd, *, b_dtype=None, num_warps=4):
    """As :func:`layer_norm_backward` with one program for all rows (one fp32 partial)."""
    return _launch(dy, x, w, mean, rstd, b_dtype or w.dtype, 1, False, num_warps)


def layer_norm_backward_chunked(dy, x, w, mean, rstd, *, b_dtype=None, block=32, num_warps=4):
    """As :func:`layer_norm_backward` with one program per row walking the row in
    ``block``-wide chunks; each row's dy·x̂ and dy are its own fp32 partial row."""
    _check(dy, x, w, mean, rstd)
    x2, dy2 = as_rows(x), as_rows(dy)
    n_rows, n_cols = x2.shape
    dx = torch.empty_like(x2)
    dw_part = torch.zeros((n_rows, n_cols), dtype=torch.float32, device=x2.device)
    db_part = torch.zeros((n_rows, n_cols), dtype=torch.float32, device=x2.device)
    _ln_bwd_chunked_kernel[(n_rows,)](dy2, x2, w.contiguous(), mean.contiguous().reshape(-1),
                                      rstd.contiguous().reshape(-1), dx, dw_part, db_part,
                                      n_cols, BLOCK=block, num_warps=num_warps)
    return _finish(dx, dw_part, db_part, x, w, b_dtype or w.dtype)


def layer_norm_backward_fp16_as_bf16(dy, x, w, mean, rstd, *, b_dtype=None, num_warps=4):
    """FAULTY (change pair 3, backward half): dx of an fp16 input is rounded to bf16 before the
    fp16 store, as when a dtype map sends fp16 to bf16. Other formats behave correctly."""
    return _launch(dy, x, w, mean, rstd, b_dtype or w.dtype, None, x.dtype == torch.float16,
                   num_warps)
