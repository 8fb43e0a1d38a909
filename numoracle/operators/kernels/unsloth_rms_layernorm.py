"""RMS LayerNorm after Unsloth's precision plan (docs/operators.md row 9), forward and backward dX.

Forward, one row per program (the whole row in one BLOCK):

* x→fp32; var = sum(x·x)/n in fp32 (``tl.sum`` then an fp32 division by n); rstd = rsqrt(var + eps)
  in fp32, stored in fp32 (the backward reloads it);
* **Llama** (``gemma=False``): x̂ = x·rstd in fp32, **rounded to w's format**, then x̂·w in w's
  format (one rounding of the product); stored in x's format;
* **Gemma** (``gemma=True``): w→fp32; y = x̂·(w + 1) all fp32; one rounding at the store.

Backward (dX only), all fp32: dy, x, w, rstd→fp32; x̂ = x·rstd; dyw = dy·w (Llama) or dy·(w + 1)
(Gemma); s = sum(dyw·x̂); dx = (rstd / n)·(n·dyw − x̂·s); stored in x's format.

eps is a compile-time constant (rounded to fp32 like any fp32 literal).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ._common import as_rows, full_row_block


@triton.jit
def _rstd(x, n_cols, EPS: tl.constexpr, AXIS: tl.constexpr, RSTD_FORM: tl.constexpr):
    var = tl.sum(x * x, axis=AXIS) / n_cols
    if RSTD_FORM == "rsqrt":
        r = tl.math.rsqrt(var + EPS)
    else:
        r = 1.0 / tl.sqrt(var + EPS)
    return r


@triton.jit
def _normed(x, w, r, GEMMA: tl.constexpr, FAULT_FP32_MULTIPLY: tl.constexpr):
    xh = x * r
    if GEMMA:
        y = xh * (w.to(tl.float32) + 1.0)
    elif FAULT_FP32_MULTIPLY:
        # change pair 5 (faulty): x̂ kept in fp32 and multiplied by w in fp32
        y = xh * w.to(tl.float32)
    else:
        y = xh.to(w.dtype) * w
    return y


@triton.jit
def _fwd_row_kernel(x_ptr, w_ptr, y_ptr, r_ptr, n_cols, EPS: tl.constexpr, GEMMA: tl.constexpr,
                    RSTD_FORM: tl.constexpr, FAULT_FP32_MULTIPLY: tl.constexpr,
                    BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=0.0).to(tl.float32)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0)
    r = _rstd(x, n_cols, EPS, 0, RSTD_FORM)
    tl.store(r_ptr + row, r)
    tl.store(y_ptr + row * n_cols + cols, _normed(x, w, r, GEMMA, FAULT_FP32_MULTIPLY), mask=mask)


@triton.jit
def _fwd_rows_kernel(x_ptr, w_ptr, y_ptr, r_ptr, n_rows, n_cols, EPS: tl.constexpr,
                     GEMMA: tl.constexpr, RSTD_FORM: tl.constexpr,
                     FAULT_FP32_MULTIPLY: tl.constexpr, ROWS: tl.constexpr, BLOCK: tl.constexpr):
    rows = tl.program_id(0).to(tl.int64) * ROWS + tl.arange(0, ROWS)
    cols = tl.arange(0, BLOCK)
    rmask = rows < n_rows
    mask = rmask[:, None] & (cols < n_cols)[None, :]
    offs = rows[:, None] * n_cols + cols[None, :]
    x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    w = tl.load(w_ptr + cols, mask=cols < n_cols, other=0.0)
    r = _rstd(x, n_cols, EPS, 1, RSTD_FORM)
    tl.store(r_ptr + rows, r, mask=rmask)
    tl.store(y_ptr + offs, _normed(x, w[None, :], r[:, None], GEMMA, FAULT_FP32_MULTIPLY),
             mask=mask)


def _check(x, w):
    if w.dim() != 1 or w.shape[0] != x.shape[-1]:
        raise ValueError(f"w must have shape ({x.shape[-1]},) to match x's last dimension, "
                         f"got {tuple(w.shape)}")


def _launch(x, w, eps, gemma, rstd_form, rows, block, num_warps, fault=False):
    _check(x, w)
    x2 = as_rows(x)
    n_rows, n_cols = x2.shape
    y = torch.empty_like(x2)
    r = torch.empty(n_rows, dtype=torch.float32, device=x2.device)
    consts = dict(EPS=float(eps), GEMMA=bool(gemma), RSTD_FORM=rstd_form,
                  FAULT_FP32_MULTIPLY=bool(fault), BLOCK=full_row_block(n_cols, block),
                  num_warps=num_warps)
    if rows == 1:
        _fwd_row_kernel[(n_rows,)](x2, w.contiguous(), y, r, n_cols, **consts)
    else:
        _fwd_rows_kernel[(triton.cdiv(n_rows, rows),)](x2, w.contiguous(), y, r, n_rows, n_cols,
                                                       ROWS=rows, **consts)
    return y.reshape(x.shape), r.reshape(x.shape[:-1])


def rms_layernorm(x, w, *, eps=1e-6, gemma=False, block=None, num_warps=4):
    """Unsloth RMS LayerNorm forward, one program per row, ``tl.math.rsqrt``.

    Precision plan: the module docstring's. Returns ``(y, rstd)``: y in x's format and shape,
    rstd (fp32) of shape x.shape[:-1].
    """
    return _launch(x, w, eps, gemma, "rsqrt", 1, block, num_warps)


def rms_layernorm_1oversqrt(x, w, *, eps=1e-6, gemma=False, block=None, num_warps=4):
    """As :func:`rms_layernorm` with rstd = ``1.0 / tl.sqrt(var + eps)`` (fp32)."""
    return _launch(x, w, eps, gemma, "one_over_sqrt", 1, block, num_warps)


def rms_layernorm_two_rows(x, w, *, eps=1e-6, gemma=False, block=None, num_warps=8):
    """As :func:`rms_layernorm` with two rows per program ([2, BLOCK] tile, 8 warps)."""
    return _launch(x, w, eps, gemma, "rsqrt", 2, block, num_warps)


def rms_layernorm_wide_block(x, w, *, eps=1e-6, gemma=False, num_warps=8):
    """As :func:`rms_layernorm` with a BLOCK twice the row's power of two (more masked lanes)."""
    return _launch(x, w, eps, gemma, "rsqrt", 1, 2 * triton.next_power_of_2(x.shape[-1]),
                   num_warps)


def rms_layernorm_fp32_multiply(x, w, *, eps=1e-6, gemma=False, block=None, num_warps=4):
    """FAULTY (change pair 5): Llama path multiplies x̂ by w in fp32 without rounding x̂ to w's
    format first; rounds once at the store. Registered in ``Operator.faulty`` only."""
    return _launch(x, w, eps, gemma, "rsqrt", 1, block, num_warps, fault=True)


# ------------------------------------------------------------------------------- backward

@triton.jit
def _bwd_row_kernel(dy_ptr, x_ptr, w_ptr, r_ptr, dx_ptr, n_rows, n_cols, GEMMA: tl.constexpr,
                    ROWS: tl.constexpr, BLOCK: tl.constexpr):
    rows = tl.program_id(0).to(tl.int64) * ROWS + tl.arange(0, ROWS)
    cols = tl.arange(0, BLOCK)
    rmask = rows < n_rows
    mask = (cols < n_cols)[None, :] & rmask[:, None]
    offs = rows[:, None] * n_cols + cols[None, :]
    dy = tl.load(dy_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    w = tl.load(w_ptr + cols, mask=cols < n_cols, other=0.0).to(tl.float32)
    r = tl.load(r_ptr + rows, mask=rmask, other=0.0).to(tl.float32)[:, None]
    xh = x * r
    if GEMMA:
        dyw = dy * (w[None, :] + 1.0)
    else:
        dyw = dy * w[None, :]
    s = tl.sum(dyw * xh, axis=1)[:, None]
    dx = (r / n_cols) * (n_cols * dyw - xh * s)
    tl.store(dx_ptr + offs, dx, mask=mask)


def rms_layernorm_backward(dy, x, w, rstd, *, gemma=False, rows_per_program=1, num_warps=4):
    """Unsloth RMS LayerNorm backward (dX only): returns dx in x's format.

    Precision plan: the module docstring's. ``rows_per_program`` (1 or a divisor of the row
    count) picks the program-to-row mapping.
    """
    _check(x, w)
    x2, dy2 = as_rows(x), as_rows(dy)
    if dy2.shape != x2.shape:
        raise ValueError(f"dy must have x's shape {tuple(x.shape)}, got {tuple(dy.shape)}")
    n_rows, n_cols = x2.shape
    if rows_per_program < 1 or rows_per_program & (rows_per_program - 1):
        raise ValueError(f"rows_per_program must be a positive power of two, got {rows_per_program}")
    dx = torch.empty_like(x2)
    _bwd_row_kernel[(triton.cdiv(n_rows, rows_per_program),)](
        dy2, x2, w.contiguous(), rstd.contiguous().reshape(-1).to(torch.float32), dx, n_rows, n_cols,
        GEMMA=bool(gemma), ROWS=rows_per_program, BLOCK=triton.next_power_of_2(n_cols),
        num_warps=num_warps)
    return dx.reshape(x.shape)


def rms_layernorm_backward_two_rows(dy, x, w, rstd, *, gemma=False, num_warps=8):
    """As :func:`rms_layernorm_backward` with two rows per program."""
    return rms_layernorm_backward(dy, x, w, rstd, gemma=gemma, rows_per_program=2,
                                  num_warps=num_warps)


def rms_layernorm_backward_no_offset(dy, x, w, rstd, *, gemma=False, num_warps=4):
    """FAULTY (change pair 4's backward form): the Gemma (w + 1) offset dropped in the backward
    (dy·w used for both variants). Kept in ``Operator.faulty`` only."""
    return rms_layernorm_backward(dy, x, w, rstd, gemma=False, num_warps=num_warps)


def rms_layernorm_backward_four_rows(dy, x, w, rstd, *, gemma=False, num_warps=2):
    """As :func:`rms_layernorm_backward` with four rows per program and two warps."""
    return rms_layernorm_backward(dy, x, w, rstd, gemma=gemma, rows_per_program=4, num_warps=num_warps)
