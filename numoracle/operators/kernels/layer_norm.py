"""LayerNorm forward after Liger-Kernel's precision plan (docs/operators.md row 2).

Precision plan (every variant): x, w, b→fp32; mean = sum(x)/n in fp32; variance two-pass and
masked: sum(where(mask, x − mean, 0)²)/n in fp32; rstd = rsqrt(var + eps) in fp32;
y = (x − mean)·rstd·w + b in fp32 (left to right), one rounding to x's format at the store.
**mean and rstd are stored in x's format** (the backward reloads those rounded statistics).
eps is a compile-time constant (rounded to fp32).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ._common import as_rows, full_row_block, row_block


@triton.jit
def _inv_std(var, EPS: tl.constexpr, RSTD_FORM: tl.constexpr):
    if RSTD_FORM == "rsqrt":
        return tl.math.rsqrt(var + EPS)
    else:
        return 1.0 / tl.sqrt(var + EPS)


@triton.jit
def _layer_norm_fwd_kernel(x_ptr, w_ptr, b_ptr, y_ptr, mean_ptr, rstd_ptr, n_cols,
                           EPS: tl.constexpr, RSTD_FORM: tl.constexpr, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=0.0).to(tl.float32)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    b = tl.load(b_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    mean = tl.sum(x, axis=0) / n_cols
    # Padded lanes would each add mean² to the variance: zero them (change pair 3).
    xc = tl.where(mask, x - mean, 0.0)
    var = tl.sum(xc * xc, axis=0) / n_cols
    rstd = _inv_std(var, EPS, RSTD_FORM)
    tl.store(mean_ptr + row, mean)
    tl.store(rstd_ptr + row, rstd)
    tl.store(y_ptr + row * n_cols + cols, xc * rstd * w + b, mask=mask)


@triton.jit
def _layer_norm_fwd_chunked_kernel(x_ptr, w_ptr, b_ptr, y_ptr, mean_ptr, rstd_ptr, n_cols,
                                   EPS: tl.constexpr, RSTD_FORM: tl.constexpr,
                                   BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    x_row = x_ptr + row * n_cols
    total = tl.zeros([], dtype=tl.float32)
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        total += tl.sum(tl.load(x_row + cols, mask=cols < n_cols, other=0.0).to(tl.float32), 0)
    mean = total / n_cols
    sq = tl.zeros([], dtype=tl.float32)
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        mask = cols < n_cols
        x = tl.load(x_row + cols, mask=mask, other=0.0).to(tl.float32)
        xc = tl.where(mask, x - mean, 0.0)
        sq += tl.sum(xc * xc, axis=0)
    rstd = _inv_std(sq / n_cols, EPS, RSTD_FORM)
    tl.store(mean_ptr + row, mean)
    tl.store(rstd_ptr + row, rstd)
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        mask = cols < n_cols
        x = tl.load(x_row + cols, mask=mask, other=0.0).to(tl.float32)
        w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
        b = tl.load(b_ptr + cols, mask=mask, other=0.0).to(tl.float32)
        tl.store(y_ptr + row * n_cols + cols, (x - mean) * rstd * w + b, mask=mask)


def _launch(x, w, b, eps, rstd_form, block, num_warps, chunked):
    n_cols = x.shape[-1]
    for name, t in (("w", w), ("b", b)):
        if t.dim() != 1 or t.shape[0] != n_cols:
            raise ValueError(f"{name} must have shape ({n_cols},) to match x's last dimension, "
                             f"got {tuple(t.shape)}")
    x2 = as_rows(x)
    n_rows = x2.shape[0]
    y = torch.empty_like(x2)
    mean = torch.empty(n_rows, dtype=x.dtype, device=x.device)
    rstd = torch.empty(n_rows, dtype=x.dtype, device=x.device)
    args = (x2, w.contiguous(), b.contiguous(), y, mean, rstd, n_cols)
    if chunked:
        _layer_norm_fwd_chunked_kernel[(n_rows,)](*args, EPS=float(eps), RSTD_FORM=rstd_form,
                                                  BLOCK=row_block(n_cols, block),
                                                  num_warps=num_warps)
    else:
        _layer_norm_fwd_kernel[(n_rows,)](*args, EPS=float(eps), RSTD_FORM=rstd_form,
                                          BLOCK=full_row_block(n_cols, block),
                                          num_warps=num_warps)
    lead = x.shape[:-1]
    return y.reshape(x.shape), mean.reshape(lead), rstd.reshape(lead)


def layer_norm(x, w, b, *, eps=1e-5, block=None, num_warps=4):
    """LayerNorm forward, one program per row; rstd = ``tl.math.rsqrt``.

    Precision plan: the module docstring's. Returns ``(y, mean, rstd)``, all in x's format;
    mean and rstd have shape x.shape[:-1].
    """
    return _launch(x, w, b, eps, "rsqrt", block, num_warps, chunked=False)


def layer_norm_1oversqrt(x, w, b, *, eps=1e-5, block=None, num_warps=4):
    """As :func:`layer_norm` with rstd = ``1.0 / tl.sqrt(var + eps)`` in fp32."""
    return _launch(x, w, b, eps, "one_over_sqrt", block, num_warps, chunked=False)


def layer_norm_chunked(x, w, b, *, eps=1e-5, block=None, num_warps=4):
    """As :func:`layer_norm`, the row walked in BLOCK-wide chunks (default BLOCK covers the row).

    Two reduction loops (fp32 chunk sums of x added in chunk order, then of the masked
    (x − mean)²), then a third loop that normalises; y = (x − mean)·rstd·w + b in fp32.
    """
    return _launch(x, w, b, eps, "rsqrt", block, num_warps, chunked=True)
