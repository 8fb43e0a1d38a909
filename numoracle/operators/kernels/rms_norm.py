"""RMSNorm, forward and backward, after Liger-Kernel's precision plan (docs/operators.md row 1).

y = x·rstd·(offset + w) with rstd = rsqrt(sum(x²)/n + eps), per row. Three casting modes decide
where values are widened and rounded:

* ``"llama"``: x→fp32; sum(x·x)/n, + eps and rsqrt in fp32; x·rstd in fp32 **rounded to x's format**;
  (offset + w) evaluated in w's format and rounded to it, then converted to x's format; the product
  x̂·(offset + w) is one operation in x's format; stored in x's format. rstd stored in fp32.
* ``"gemma"``: x and w→fp32; (offset + w), x·rstd and ·(offset + w) in fp32; one rounding at the
  store. rstd stored in fp32.
* ``"none"``: no widening except where the math library demands fp32: x·x and the running sum in
  x's format; /n, + eps and rsqrt in fp32, each result rounded back to x's format; x·rstd and
  ·(offset + w) in x's format. rstd stored in x's format.

eps and offset are compile-time constants (they are rounded to fp32 like any fp32 literal).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ._common import as_rows, full_row_block, row_block

CASTINGS = ("llama", "gemma", "none")


@triton.jit
def _sum_squares(x, AXIS: tl.constexpr, CASTING: tl.constexpr):
    if CASTING != "none":
        x = x.to(tl.float32)
    return tl.sum(x * x, axis=AXIS)


@triton.jit
def _inv_rms(sum_sq, n_cols, EPS: tl.constexpr, CASTING: tl.constexpr, RSTD_FORM: tl.constexpr):
    """rstd from a row's sum of squares: fp32 math, each step rounded back in "none" mode."""
    fmt = sum_sq.dtype
    ms = sum_sq.to(tl.float32) / n_cols
    if CASTING == "none":
        ms = ms.to(fmt).to(tl.float32)
    arg = ms + EPS
    if CASTING == "none":
        arg = arg.to(fmt).to(tl.float32)
    if RSTD_FORM == "rsqrt":
        rstd = tl.math.rsqrt(arg)
    else:
        rstd = 1.0 / tl.sqrt(arg)
    if CASTING == "none":
        rstd = rstd.to(fmt)
    return rstd


@triton.jit
def _scale(x, w, rstd, OFFSET: tl.constexpr, CASTING: tl.constexpr):
    """y = x·rstd·(offset + w) with the casting mode's roundings; shapes broadcast."""
    x_fmt = x.dtype
    if CASTING == "gemma":
        y = (x.to(tl.float32) * rstd) * (w.to(tl.float32) + OFFSET)
    elif CASTING == "llama":
        xhat = (x.to(tl.float32) * rstd).to(x_fmt)
        y = xhat * (w + OFFSET).to(w.dtype).to(x_fmt)
    else:
        y = (x * rstd) * (w + OFFSET).to(w.dtype).to(x_fmt)
    return y


@triton.jit
def _rms_norm_fwd_kernel(x_ptr, w_ptr, y_ptr, rstd_ptr, n_cols,
                         EPS: tl.constexpr, OFFSET: tl.constexpr, CASTING: tl.constexpr,
                         RSTD_FORM: tl.constexpr, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=0.0)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0)
    rstd = _inv_rms(_sum_squares(x, 0, CASTING), n_cols, EPS, CASTING, RSTD_FORM)
    tl.store(rstd_ptr + row, rstd)
    tl.store(y_ptr + row * n_cols + cols, _scale(x, w, rstd, OFFSET, CASTING), mask=mask)


@triton.jit
def _rms_norm_fwd_rows_kernel(x_ptr, w_ptr, y_ptr, rstd_ptr, n_rows, n_cols,
                              EPS: tl.constexpr, OFFSET: tl.constexpr, CASTING: tl.constexpr,
                              RSTD_FORM: tl.constexpr, ROWS: tl.constexpr, BLOCK: tl.constexpr):
    rows = tl.program_id(0).to(tl.int64) * ROWS + tl.arange(0, ROWS)
    cols = tl.arange(0, BLOCK)
    row_mask = rows < n_rows
    mask = row_mask[:, None] & (cols < n_cols)[None, :]
    offs = rows[:, None] * n_cols + cols[None, :]
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    w = tl.load(w_ptr + cols, mask=cols < n_cols, other=0.0)
    rstd = _inv_rms(_sum_squares(x, 1, CASTING), n_cols, EPS, CASTING, RSTD_FORM)
    tl.store(rstd_ptr + rows, rstd, mask=row_mask)
    tl.store(y_ptr + offs, _scale(x, w[None, :], rstd[:, None], OFFSET, CASTING), mask=mask)


@triton.jit
def _rms_norm_fwd_chunked_kernel(x_ptr, w_ptr, y_ptr, rstd_ptr, n_cols,
                                 EPS: tl.constexpr, OFFSET: tl.constexpr, CASTING: tl.constexpr,
                                 RSTD_FORM: tl.constexpr, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    x_row = x_ptr + row * n_cols
    y_row = y_ptr + row * n_cols
    # Partial sums of squares per chunk, added in chunk order (in x's format for "none").
    if CASTING == "none":
        sum_sq = tl.zeros([], dtype=x_ptr.dtype.element_ty)
    else:
        sum_sq = tl.zeros([], dtype=tl.float32)
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        x = tl.load(x_row + cols, mask=cols < n_cols, other=0.0)
        sum_sq += _sum_squares(x, 0, CASTING)
    rstd = _inv_rms(sum_sq, n_cols, EPS, CASTING, RSTD_FORM)
    tl.store(rstd_ptr + row, rstd)
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        mask = cols < n_cols
        x = tl.load(x_row + cols, mask=mask, other=0.0)
        w = tl.load(w_ptr + cols, mask=mask, other=0.0)
        tl.store(y_row + cols, _scale(x, w, rstd, OFFSET, CASTING), mask=mask)


def _check(x: torch.Tensor, w: torch.Tensor, casting: str) -> None:
    if casting not in CASTINGS:
        raise ValueError(f"casting must be one of {CASTINGS}, got casting={casting!r}")
    if w.dim() != 1 or w.shape[0] != x.shape[-1]:
        raise ValueError(f"w must have shape ({x.shape[-1]},) to match x's last dimension, "
                         f"got {tuple(w.shape)}")


def _outputs(x2: torch.Tensor, casting: str):
    y = torch.empty_like(x2)
    rstd_dtype = x2.dtype if casting == "none" else torch.float32
    rstd = torch.empty(x2.shape[0], dtype=rstd_dtype, device=x2.device)
    return y, rstd


def _launch(x, w, eps, offset, casting, rstd_form, block, num_warps, variant):
    _check(x, w, casting)
    x2 = as_rows(x)
    w = w.contiguous()
    n_rows, n_cols = x2.shape
    y, rstd = _outputs(x2, casting)
    consts = dict(EPS=float(eps), OFFSET=float(offset), CASTING=casting, RSTD_FORM=rstd_form)
    if variant == "row":
        _rms_norm_fwd_kernel[(n_rows,)](x2, w, y, rstd, n_cols, **consts,
                                        BLOCK=full_row_block(n_cols, block), num_warps=num_warps)
    elif variant == "two_rows":
        _rms_norm_fwd_rows_kernel[(triton.cdiv(n_rows, 2),)](
            x2, w, y, rstd, n_rows, n_cols, **consts, ROWS=2,
            BLOCK=full_row_block(n_cols, block), num_warps=num_warps)
    else:
        _rms_norm_fwd_chunked_kernel[(n_rows,)](x2, w, y, rstd, n_cols, **consts,
                                                BLOCK=row_block(n_cols, block), num_warps=num_warps)
    return y.reshape(x.shape), rstd.reshape(x.shape[:-1])


def rms_norm(x, w, *, eps=1e-6, offset=0.0, casting="llama", block=None, num_warps=4):
    """RMSNorm forward, one program per row, rstd = ``tl.math.rsqrt`` (fp32).

    Precision plan: the module docstring's, for the chosen ``casting``. Returns ``(y, rstd)``:
    y in x's format and shape, rstd of shape x.shape[:-1] in fp32 ("llama", "gemma") or x's
    format ("none").
    """
    return _launch(x, w, eps, offset, casting, "rsqrt", block, num_warps, "row")


def rms_norm_1oversqrt(x, w, *, eps=1e-6, offset=0.0, casting="llama", block=None, num_warps=4):
    """As :func:`rms_norm` with rstd = ``1.0 / tl.sqrt(ms + eps)`` (fp32 sqrt, fp32 divide)."""
    return _launch(x, w, eps, offset, casting, "one_over_sqrt", block, num_warps, "row")


def rms_norm_two_rows(x, w, *, eps=1e-6, offset=0.0, casting="llama", block=None, num_warps=4):
    """As :func:`rms_norm` with two rows per program (a [2, BLOCK] tile, sums along axis 1)."""
    return _launch(x, w, eps, offset, casting, "rsqrt", block, num_warps, "two_rows")


def rms_norm_chunked(x, w, *, eps=1e-6, offset=0.0, casting="llama", block=None, num_warps=4):
    """As :func:`rms_norm`, the row walked in BLOCK-wide chunks (default BLOCK covers the row).

    Loop 1 adds each chunk's ``tl.sum(x·x)`` into a running sum (fp32, or x's format for "none")
    in chunk order; loop 2 reloads each chunk and normalises it with the row's rstd.
    """
    return _launch(x, w, eps, offset, casting, "rsqrt", block, num_warps, "chunked")


@triton.jit
def _rms_norm_bwd_kernel(dy_ptr, x_ptr, w_ptr, rstd_ptr, dx_ptr, dw_part_ptr,
                         n_rows, n_cols, rows_per_program,
                         OFFSET: tl.constexpr, CASTING: tl.constexpr, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    w = tl.load(w_ptr + cols, mask=mask, other=0.0)
    if CASTING == "gemma":
        w_eff = w.to(tl.float32) + OFFSET
    else:
        w_eff = (w + OFFSET).to(w.dtype).to(tl.float32)
    x_fmt = x_ptr.dtype.element_ty
    dw_acc = tl.zeros([BLOCK], dtype=tl.float32)
    # int64 row indices so that row·n_cols cannot overflow.
    row_start = pid.to(tl.int64) * rows_per_program
    row_end = tl.minimum(row_start + rows_per_program, n_rows)
    for row in range(row_start, row_end):
        offs = row * n_cols + cols
        x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)
        dy = tl.load(dy_ptr + offs, mask=mask, other=0.0).to(tl.float32)
        rstd = tl.load(rstd_ptr + row).to(tl.float32)
        m = dy * w_eff
        c = tl.sum(m * x, axis=0) / n_cols
        dx = rstd * m - (rstd * rstd * rstd * c) * x
        tl.store(dx_ptr + offs, dx, mask=mask)
        xhat = x * rstd
        if CASTING == "llama":
            # The forward multiplied w by x̂ rounded to x's format; dW sees the same x̂.
            xhat = xhat.to(x_fmt).to(tl.float32)
        dw_acc += dy * xhat
    tl.store(dw_part_ptr + pid.to(tl.int64) * n_cols + cols, dw_acc, mask=mask)


def rms_norm_backward(dy, x, w, rstd, *, offset=0.0, casting="llama", num_programs=None,
                      num_warps=4):
    """RMSNorm backward: returns ``(dx, dw)``.

    Precision plan: x, dy, rstd→fp32; w_eff = offset + w (in w's format then widened for "llama"
    and "none"; widened then + offset in fp32 for "gemma"); m = dy·w_eff;
    c = sum(m·x)/n; dx = rstd·m − (rstd·rstd·rstd·c)·x, all fp32, stored in x's format.
    dW: each of ``num_programs`` programs walks a contiguous block of rows accumulating
    dy·x̂ in fp32 (x̂ = x·rstd, rounded to x's format and widened again for "llama"); the host
    sums the fp32 partial rows in fp32 (``torch.sum``) and casts once to w's format.
    """
    _check(x, w, casting)
    x2, dy2 = as_rows(x), as_rows(dy)
    if dy2.shape != x2.shape:
        raise ValueError(f"dy must have x's shape {tuple(x.shape)}, got {tuple(dy.shape)}")
    n_rows, n_cols = x2.shape
    n_prog = max(1, min(n_rows, 64) if num_programs is None else int(num_programs))
    rows_per_program = triton.cdiv(n_rows, n_prog)
    dx = torch.empty_like(x2)
    dw_part = torch.zeros((n_prog, n_cols), dtype=torch.float32, device=x2.device)
    _rms_norm_bwd_kernel[(n_prog,)](dy2, x2, w.contiguous(), rstd.contiguous().reshape(-1), dx,
                                    dw_part, n_rows, n_cols, rows_per_program,
                                    OFFSET=float(offset), CASTING=casting,
                                    BLOCK=triton.next_power_of_2(n_cols), num_warps=num_warps)
    dw = dw_part.sum(dim=0, dtype=torch.float32).to(w.dtype)
    return dx.reshape(x.shape), dw
