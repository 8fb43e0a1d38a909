"""Generalised Jensen-Shannon divergence after Liger-Kernel's precision plan (docs/operators.md row 8).

Inputs are log-probabilities: x = log Q (the student's ``input``) and y = log P (the ``target``),
[rows, V], plus per-row labels (rows labelled ``ignore_index`` contribute nothing). β = 0 is the
forward KL(P‖Q), β = 1 the reverse KL(Q‖P), β in between the generalised JSD.

Precision plan, per row (one program, the row in one BLOCK), all fp32 after widening x and y:

* β = 0: m = max(y); P = exp(y − m)·exp(m); loss = P·(y − x); dx = −P;
* β = 1: m = max(x); Q = exp(x − m)·exp(m); loss = Q·(x − y); dx = loss + Q;
* otherwise: m = max(max(x), max(y)); E = exp(m); Q = exp(x − m)·E; P = exp(y − m)·E;
  βP = β·P; (1−β)Q = (1 − β)·Q (1 − β folded in float64, used as fp32); M = βP + (1−β)Q;
  log M; loss = βP·y + (1−β)Q·x − M·log M; dx = (1−β)Q·(x − log M);
* loss and dx times scale = 1/n (n the non-ignored row count; 1/n rounded once to fp32 on the
  host); ignored rows give 0.

The per-element loss is stored in fp32 and summed on the host (``torch.sum``, fp32), the sum cast
to x's format (as Liger returns it); dx is stored in x's format. Returns ``(loss, dx)``: loss a
0-d tensor in x's format.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

LOG2E = tl.constexpr(1.4426950408889634)


@triton.jit
def _exp(z, EXP_FORM: tl.constexpr):
    if EXP_FORM == "exp":
        r = tl.exp(z)
    else:
        r = tl.exp2(z * LOG2E)
    return r


@triton.jit
def _jsd_math(x, y, mask, AXIS: tl.constexpr, BETA: tl.constexpr, ONE_MINUS_BETA: tl.constexpr,
              EXP_FORM: tl.constexpr):
    if BETA == 0.0:
        m = tl.max(y, axis=AXIS)
        if AXIS == 1:
            m = m[:, None]
        p = _exp(y - m, EXP_FORM) * _exp(m, EXP_FORM)
        loss = p * (y - x)
        dx = -p
    elif BETA == 1.0:
        m = tl.max(x, axis=AXIS)
        if AXIS == 1:
            m = m[:, None]
        q = _exp(x - m, EXP_FORM) * _exp(m, EXP_FORM)
        loss = q * (x - y)
        dx = loss + q
    else:
        m = tl.maximum(tl.max(x, axis=AXIS), tl.max(y, axis=AXIS))
        if AXIS == 1:
            m = m[:, None]
        em = _exp(m, EXP_FORM)
        q = _exp(x - m, EXP_FORM) * em
        p = _exp(y - m, EXP_FORM) * em
        bp = BETA * p
        oq = ONE_MINUS_BETA * q
        mix = bp + oq
        log_mix = tl.log(mix)
        loss = bp * y + oq * x - mix * log_mix
        dx = oq * (x - log_mix)
    return loss, dx


@triton.jit
def _jsd_row_kernel(x_ptr, y_ptr, label_ptr, loss_ptr, dx_ptr, n_cols, scale, ignore_index,
                    BETA: tl.constexpr, ONE_MINUS_BETA: tl.constexpr, EXP_FORM: tl.constexpr,
                    BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    offs = row * n_cols + cols
    label = tl.load(label_ptr + row)
    if label == ignore_index:
        tl.store(loss_ptr + offs, tl.zeros([BLOCK], dtype=tl.float32), mask=mask)
        tl.store(dx_ptr + offs, tl.zeros([BLOCK], dtype=tl.float32), mask=mask)
        return
    x = tl.load(x_ptr + offs, mask=mask, other=-float("inf")).to(tl.float32)
    y = tl.load(y_ptr + offs, mask=mask, other=-float("inf")).to(tl.float32)
    loss, dx = _jsd_math(x, y, mask, 0, BETA, ONE_MINUS_BETA, EXP_FORM)
    tl.store(loss_ptr + offs, loss * scale, mask=mask)
    tl.store(dx_ptr + offs, dx * scale, mask=mask)


@triton.jit
def _jsd_rows_kernel(x_ptr, y_ptr, label_ptr, loss_ptr, dx_ptr, n_rows, n_cols, scale,
                     ignore_index, BETA: tl.constexpr, ONE_MINUS_BETA: tl.constexpr,
                     EXP_FORM: tl.constexpr, ROWS: tl.constexpr, BLOCK: tl.constexpr):
    rows = tl.program_id(0).to(tl.int64) * ROWS + tl.arange(0, ROWS)
    cols = tl.arange(0, BLOCK)
    rmask = rows < n_rows
    label = tl.load(label_ptr + rows, mask=rmask, other=ignore_index)
    keep = (label != ignore_index)[:, None]
    mask = rmask[:, None] & (cols < n_cols)[None, :]
    offs = rows[:, None] * n_cols + cols[None, :]
    # Ignored rows are computed on a neutral row (log-probabilities 0) and zeroed.
    lmask = mask & keep
    x = tl.load(x_ptr + offs, mask=lmask, other=0.0).to(tl.float32)
    y = tl.load(y_ptr + offs, mask=lmask, other=0.0).to(tl.float32)
    x = tl.where(mask, x, -float("inf"))
    y = tl.where(mask, y, -float("inf"))
    loss, dx = _jsd_math(x, y, mask, 1, BETA, ONE_MINUS_BETA, EXP_FORM)
    tl.store(loss_ptr + offs, tl.where(keep, loss * scale, 0.0), mask=mask)
    tl.store(dx_ptr + offs, tl.where(keep, dx * scale, 0.0), mask=mask)


def _launch(x, y, labels, beta, ignore_index, exp_form, rows, num_warps, fault_divisor=False,
            widen=1):
    if x.shape != y.shape or x.dim() != 2:
        raise ValueError(f"input and target must be 2-D of one shape, got {tuple(x.shape)} and "
                         f"{tuple(y.shape)}")
    if labels.shape != x.shape[:1]:
        raise ValueError(f"labels must hold one label per row ({x.shape[0]}), got shape "
                         f"{tuple(labels.shape)}")
    if not 0.0 <= beta <= 1.0:
        raise ValueError(f"beta must lie in [0, 1], got beta={beta}")
    x, y, labels = x.contiguous(), y.contiguous(), labels.contiguous()
    n_rows, n_cols = x.shape
    n_kept = int((labels != ignore_index).sum().item())
    scale = 1.0 / max(n_rows if fault_divisor else n_kept, 1)
    loss = torch.empty((n_rows, n_cols), dtype=torch.float32, device=x.device)
    dx = torch.empty_like(x)
    consts = dict(BETA=float(beta), ONE_MINUS_BETA=1.0 - float(beta), EXP_FORM=exp_form,
                  BLOCK=widen * triton.next_power_of_2(n_cols), num_warps=num_warps)
    if rows == 1:
        _jsd_row_kernel[(n_rows,)](x, y, labels, loss, dx, n_cols, scale, int(ignore_index),
                                   **consts)
    else:
        _jsd_rows_kernel[(triton.cdiv(n_rows, rows),)](x, y, labels, loss, dx, n_rows, n_cols,
                                                       scale, int(ignore_index), ROWS=rows,
                                                       **consts)
    return torch.sum(loss).to(x.dtype), dx


def jsd(x, y, labels, *, beta=0.5, ignore_index=-100, num_warps=4):
    """Liger generalised JSD forward (and the gradient over x), one program per row.

    Precision plan: the module docstring's. Returns ``(loss, dx)``: loss 0-d and dx, both in
    x's format.
    """
    return _launch(x, y, labels, beta, ignore_index, "exp", 1, num_warps)


def jsd_two_rows(x, y, labels, *, beta=0.5, ignore_index=-100, num_warps=8):
    """As :func:`jsd` with two rows per program (a [2, BLOCK] tile)."""
    return _launch(x, y, labels, beta, ignore_index, "exp", 2, num_warps)


def jsd_wide_block(x, y, labels, *, beta=0.5, ignore_index=-100, num_warps=8):
    """As :func:`jsd` with a BLOCK twice the row's power of two (more masked lanes), 8 warps."""
    return _launch(x, y, labels, beta, ignore_index, "exp", 1, num_warps, widen=2)


def jsd_exp2(x, y, labels, *, beta=0.5, ignore_index=-100, num_warps=4):
    """NOT a behaviour-preserving variant (not registered as one): every exp(z) as
    exp2(z·log2e); the rounding of z·log2e adds about |z|/2 ulp beyond exp's error model, which
    the fp32 outputs (dx for fp32 inputs) can show."""
    return _launch(x, y, labels, beta, ignore_index, "exp2", 1, num_warps)


def jsd_all_rows_divisor(x, y, labels, *, beta=0.5, ignore_index=-100, num_warps=4):
    """FAULTY (a changed divisor, cf. change pair 8): scaled by 1/(all rows) instead of
    1/(non-ignored rows). Kept in ``Operator.faulty`` only."""
    return _launch(x, y, labels, beta, ignore_index, "exp", 1, num_warps, fault_divisor=True)
