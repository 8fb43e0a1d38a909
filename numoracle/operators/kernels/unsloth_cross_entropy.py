"""Cross-entropy loss after Unsloth's precision plan (docs/operators.md row 10), forward and backward.

Forward, per row, all in fp32:

* every logit (the label's included) is loaded and widened to fp32, then, when set, scaled
  ``t·x`` (``logit_scale`` t) and softcapped ``s·tanh(x/s)`` (``softcap`` s, libdevice tanh);
* V ≤ ``chunk_size``: one program per row holds the whole row: c = max(x);
  lse = c + log(sum(exp(x − c))) (``tl.exp``; the ``exp2`` variant uses exp2((x − c)·log2e));
  loss = lse − x_y, or 0 when the label is −100 (``ignore_index``);
* V > ``chunk_size`` (Unsloth chunks above 65 536 classes): a program per (row, chunk) computes
  that chunk's lse_k the same way and chunk 0 stores −x_y; the host combines the chunks with
  ``torch.logsumexp`` over the fp32 [rows, chunks] tensor (max, exp, sum, log, add: fp32) and adds
  it to the loss (``loss += lse``), then zeroes the ignored rows.

Outputs: per-row loss (fp32) and lse (fp32). Padded lanes are set to −inf **after** the softcap
(s·tanh(−inf/s) would be −s, not −inf).

Backward (``cross_entropy_loss_backward``), per element, fp32: x transformed as above, keeping
p = tanh(x/s); y = exp(x − lse); y − 1 at the label; y·t for logit scaling; y·(1 − p·p) for the
softcap; dloss·y (dloss 0 on ignored rows) **written over the logits** in their format (the
launcher writes a new tensor and leaves the logits untouched).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ._common import tanh_libdevice

LOG2E = tl.constexpr(1.4426950408889634)
IGNORE_INDEX = -100
MAX_FUSED = 65536


@triton.jit
def _transform(x, LOGIT_SCALE: tl.constexpr, SOFTCAP: tl.constexpr):
    if LOGIT_SCALE != 0.0:
        x = LOGIT_SCALE * x
    if SOFTCAP != 0.0:
        x = SOFTCAP * tanh_libdevice(x / SOFTCAP)
    return x


@triton.jit
def _transform_lowp(x, LOGIT_SCALE: tl.constexpr, SOFTCAP: tl.constexpr):
    """FAULTY (change pair 11): the label logit scaled and softcapped in its storage format."""
    fmt = x.dtype
    if LOGIT_SCALE != 0.0:
        x = (LOGIT_SCALE * x).to(fmt)
    if SOFTCAP != 0.0:
        t = tanh_libdevice((x / SOFTCAP).to(fmt).to(tl.float32)).to(fmt)
        x = (SOFTCAP * t).to(fmt)
    return x.to(tl.float32)


@triton.jit
def _lse(x, AXIS: tl.constexpr, EXP_FORM: tl.constexpr):
    c = tl.max(x, axis=AXIS)
    if AXIS == 1:
        cb = c[:, None]
    else:
        cb = c
    if EXP_FORM == "exp":
        s = tl.sum(tl.exp(x - cb), axis=AXIS)
    else:
        s = tl.sum(tl.exp2((x - cb) * LOG2E), axis=AXIS)
    return c + tl.log(s)


@triton.jit
def _label_logit(x_ptr, label, LOGIT_SCALE: tl.constexpr, SOFTCAP: tl.constexpr,
                 FAULT_LABEL_LOWP: tl.constexpr):
    keep = label != -100
    safe = tl.where(keep, label, 0)
    if FAULT_LABEL_LOWP:
        xl = _transform_lowp(tl.load(x_ptr + safe, mask=keep, other=0.0), LOGIT_SCALE, SOFTCAP)
    else:
        xl = _transform(tl.load(x_ptr + safe, mask=keep, other=0.0).to(tl.float32), LOGIT_SCALE,
                        SOFTCAP)
    return xl


@triton.jit
def _ce_fwd_rows_kernel(x_ptr, y_ptr, loss_ptr, lse_ptr, n_rows, n_cols,
                        LOGIT_SCALE: tl.constexpr, SOFTCAP: tl.constexpr, EXP_FORM: tl.constexpr,
                        FAULT_LABEL_LOWP: tl.constexpr, ROWS: tl.constexpr, BLOCK: tl.constexpr):
    rows = tl.program_id(0).to(tl.int64) * ROWS + tl.arange(0, ROWS)
    cols = tl.arange(0, BLOCK)
    rmask = rows < n_rows
    mask = rmask[:, None] & (cols < n_cols)[None, :]
    x = tl.load(x_ptr + rows[:, None] * n_cols + cols[None, :], mask=mask, other=0.0)
    x = tl.where(mask, _transform(x.to(tl.float32), LOGIT_SCALE, SOFTCAP), -float("inf"))
    lse = _lse(x, 1, EXP_FORM)
    label = tl.load(y_ptr + rows, mask=rmask, other=-100)
    xl = _label_logit(x_ptr + rows * n_cols, label, LOGIT_SCALE, SOFTCAP, FAULT_LABEL_LOWP)
    loss = tl.where(label != -100, lse - xl, 0.0)
    tl.store(lse_ptr + rows, lse, mask=rmask)
    tl.store(loss_ptr + rows, loss, mask=rmask)


@triton.jit
def _ce_fwd_row_kernel(x_ptr, y_ptr, loss_ptr, lse_ptr, n_cols,
                       LOGIT_SCALE: tl.constexpr, SOFTCAP: tl.constexpr, EXP_FORM: tl.constexpr,
                       FAULT_LABEL_LOWP: tl.constexpr, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x_row = x_ptr + row * n_cols
    x = tl.load(x_row + cols, mask=mask, other=0.0).to(tl.float32)
    x = tl.where(mask, _transform(x, LOGIT_SCALE, SOFTCAP), -float("inf"))
    lse = _lse(x, 0, EXP_FORM)
    label = tl.load(y_ptr + row)
    if label != -100:
        loss = lse - _label_logit(x_row, label, LOGIT_SCALE, SOFTCAP, FAULT_LABEL_LOWP)
    else:
        loss = 0.0
    tl.store(lse_ptr + row, lse)
    tl.store(loss_ptr + row, loss)


@triton.jit
def _ce_fwd_chunk_kernel(x_ptr, y_ptr, loss_ptr, lse_ptr, n_cols, n_chunks,
                         LOGIT_SCALE: tl.constexpr, SOFTCAP: tl.constexpr,
                         EXP_FORM: tl.constexpr, FAULT_LABEL_LOWP: tl.constexpr,
                         BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    chunk = tl.program_id(1)
    cols = chunk * BLOCK + tl.arange(0, BLOCK)
    mask = cols < n_cols
    x_row = x_ptr + row * n_cols
    x = tl.load(x_row + cols, mask=mask, other=0.0).to(tl.float32)
    x = tl.where(mask, _transform(x, LOGIT_SCALE, SOFTCAP), -float("inf"))
    tl.store(lse_ptr + row * n_chunks + chunk, _lse(x, 0, EXP_FORM))
    if chunk == 0:
        label = tl.load(y_ptr + row)
        if label != -100:
            loss = -1.0 * _label_logit(x_row, label, LOGIT_SCALE, SOFTCAP, FAULT_LABEL_LOWP)
        else:
            loss = 0.0
        tl.store(loss_ptr + row, loss)


def _check(logits, labels, logit_scale, softcap, chunk_size):
    if logits.dim() != 2:
        raise ValueError(f"logits must be 2-D [rows, classes], got shape {tuple(logits.shape)}")
    if labels.shape != logits.shape[:1]:
        raise ValueError(f"labels must hold one label per row ({logits.shape[0]}), got shape "
                         f"{tuple(labels.shape)}")
    if softcap < 0 or logit_scale < 0:
        raise ValueError(f"softcap and logit_scale must be >= 0 (0 = off), got softcap={softcap}, "
                         f"logit_scale={logit_scale}")
    if chunk_size <= 0 or chunk_size & (chunk_size - 1):
        raise ValueError(f"chunk_size must be a positive power of two, got {chunk_size}")


def _launch(logits, labels, logit_scale, softcap, chunk_size, exp_form, rows, num_warps,
            fault=False, widen=1):
    _check(logits, labels, logit_scale, softcap, chunk_size)
    x2 = logits.contiguous()
    y1 = labels.contiguous()
    n_rows, n_cols = x2.shape
    loss = torch.empty(n_rows, dtype=torch.float32, device=x2.device)
    consts = dict(LOGIT_SCALE=float(logit_scale), SOFTCAP=float(softcap), EXP_FORM=exp_form,
                  FAULT_LABEL_LOWP=bool(fault), num_warps=num_warps)
    if n_cols <= chunk_size:
        lse = torch.empty(n_rows, dtype=torch.float32, device=x2.device)
        block = widen * triton.next_power_of_2(n_cols)
        if rows == 1:
            _ce_fwd_row_kernel[(n_rows,)](x2, y1, loss, lse, n_cols, BLOCK=block, **consts)
        else:
            _ce_fwd_rows_kernel[(triton.cdiv(n_rows, rows),)](x2, y1, loss, lse, n_rows, n_cols,
                                                              ROWS=rows, BLOCK=block, **consts)
        return loss, lse
    n_chunks = triton.cdiv(n_cols, chunk_size)
    lse_chunks = torch.empty((n_rows, n_chunks), dtype=torch.float32, device=x2.device)
    _ce_fwd_chunk_kernel[(n_rows, n_chunks)](x2, y1, loss, lse_chunks, n_cols, n_chunks,
                                             BLOCK=chunk_size, **consts)
    lse = torch.logsumexp(lse_chunks, dim=1)
    loss += lse
    loss.masked_fill_(y1 == IGNORE_INDEX, 0.0)
    return loss, lse


def cross_entropy_loss(logits, labels, *, logit_scale=0.0, softcap=0.0, chunk_size=MAX_FUSED,
                       num_warps=32):
    """Unsloth cross-entropy forward: returns ``(loss, lse)``, both fp32 of shape [rows].

    Precision plan: the module docstring's. ``logit_scale`` / ``softcap`` of 0 switch the
    transform off. Rows wider than ``chunk_size`` (a power of two; Unsloth's 65 536) take the
    chunked path.
    """
    return _launch(logits, labels, logit_scale, softcap, chunk_size, "exp", 1, num_warps)


def cross_entropy_loss_wide_block(logits, labels, *, logit_scale=0.0, softcap=0.0,
                                  chunk_size=MAX_FUSED, num_warps=16):
    """As :func:`cross_entropy_loss` with a BLOCK twice the row's power of two (more masked
    lanes, set to −inf after the transform) and 16 warps."""
    return _launch(logits, labels, logit_scale, softcap, chunk_size, "exp", 1, num_warps, widen=2)


def cross_entropy_loss_exp2(logits, labels, *, logit_scale=0.0, softcap=0.0,
                            chunk_size=MAX_FUSED, num_warps=32):
    """As :func:`cross_entropy_loss` with exp(x − c) computed as exp2((x − c)·log2e). Not
    registered as a behaviour-preserving variant: the rounding of (x − c)·log2e adds about
    |x − c|/2 ulp per term beyond exp's error model (the backward's fp32 outputs show it; the
    forward's lse averages it away in practice, but not by construction)."""
    return _launch(logits, labels, logit_scale, softcap, chunk_size, "exp2", 1, num_warps)


def cross_entropy_loss_two_rows(logits, labels, *, logit_scale=0.0, softcap=0.0,
                                chunk_size=MAX_FUSED, num_warps=16):
    """As :func:`cross_entropy_loss` with two rows per program (a [2, BLOCK] tile)."""
    return _launch(logits, labels, logit_scale, softcap, chunk_size, "exp", 2, num_warps)


def cross_entropy_loss_label_lowp(logits, labels, *, logit_scale=0.0, softcap=0.0,
                                  chunk_size=MAX_FUSED, num_warps=32):
    """FAULTY (change pair 11): the label logit is scaled / softcapped in the logits' format
    while the logsumexp uses fp32 logits. Registered in ``Operator.faulty`` only."""
    return _launch(logits, labels, logit_scale, softcap, chunk_size, "exp", 1, num_warps,
                   fault=True)


# ------------------------------------------------------------------------------- backward

@triton.jit
def _ce_bwd_kernel(dloss_ptr, x_ptr, y_ptr, lse_ptr, dx_ptr, n_cols,
                   LOGIT_SCALE: tl.constexpr, SOFTCAP: tl.constexpr, EXP_FORM: tl.constexpr,
                   BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = cols < n_cols
    label = tl.load(y_ptr + row)
    if label != -100:
        dloss = tl.load(dloss_ptr + row).to(tl.float32)
    else:
        dloss = 0.0
    x = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=0.0).to(tl.float32)
    if LOGIT_SCALE != 0.0:
        x = LOGIT_SCALE * x
    if SOFTCAP != 0.0:
        p = tanh_libdevice(x / SOFTCAP)
        x = SOFTCAP * p
    lse = tl.load(lse_ptr + row)
    if EXP_FORM == "exp":
        y = tl.exp(x - lse)
    else:
        y = tl.exp2((x - lse) * LOG2E)
    y = tl.where(cols == label, y - 1.0, y)
    if LOGIT_SCALE != 0.0:
        y = LOGIT_SCALE * y
    if SOFTCAP != 0.0:
        y = y * (1.0 - p * p)
    tl.store(dx_ptr + row * n_cols + cols, dloss * y, mask=mask)


@triton.jit
def _ce_bwd_flat_kernel(dloss_ptr, x_ptr, y_ptr, lse_ptr, dx_ptr, n_elements, n_cols,
                        LOGIT_SCALE: tl.constexpr, SOFTCAP: tl.constexpr, BLOCK: tl.constexpr):
    """The same element math over the flattened logits: each lane finds its row."""
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n_elements
    row = offs // n_cols
    col = offs % n_cols
    label = tl.load(y_ptr + row, mask=mask, other=-100)
    dloss = tl.load(dloss_ptr + row, mask=mask, other=0.0).to(tl.float32)
    dloss = tl.where(label != -100, dloss, 0.0)
    x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    if LOGIT_SCALE != 0.0:
        x = LOGIT_SCALE * x
    if SOFTCAP != 0.0:
        p = tanh_libdevice(x / SOFTCAP)
        x = SOFTCAP * p
    lse = tl.load(lse_ptr + row, mask=mask, other=0.0)
    y = tl.exp(x - lse)
    y = tl.where(col == label, y - 1.0, y)
    if LOGIT_SCALE != 0.0:
        y = LOGIT_SCALE * y
    if SOFTCAP != 0.0:
        y = y * (1.0 - p * p)
    tl.store(dx_ptr + offs, dloss * y, mask=mask)


def _bwd(dloss, logits, labels, lse, logit_scale, softcap, exp_form, block, num_warps):
    _check(logits, labels, logit_scale, softcap, 1)
    x2 = logits.contiguous()
    n_rows, n_cols = x2.shape
    if block is None:
        block = min(4096, triton.next_power_of_2(n_cols))
    dx = torch.empty_like(x2)
    _ce_bwd_kernel[(n_rows, triton.cdiv(n_cols, block))](
        dloss.contiguous(), x2, labels.contiguous(), lse.contiguous().to(torch.float32), dx,
        n_cols, LOGIT_SCALE=float(logit_scale), SOFTCAP=float(softcap), EXP_FORM=exp_form,
        BLOCK=block, num_warps=num_warps)
    return dx


def cross_entropy_loss_backward(dloss, logits, labels, lse, *, logit_scale=0.0, softcap=0.0,
                                block=None, num_warps=8):
    """Unsloth cross-entropy backward: the gradient over the logits, in their format.

    ``dloss`` (fp32, per row) and ``lse`` (fp32, from the forward). Precision plan: the module
    docstring's; a program per (row, BLOCK-wide block of classes).
    """
    return _bwd(dloss, logits, labels, lse, logit_scale, softcap, "exp", block, num_warps)


def cross_entropy_loss_backward_flat(dloss, logits, labels, lse, *, logit_scale=0.0, softcap=0.0,
                                     block=256, num_warps=4):
    """As :func:`cross_entropy_loss_backward`, a program per ``block`` elements of the flattened
    logits (each lane loads its row's label, dloss and lse)."""
    _check(logits, labels, logit_scale, softcap, 1)
    x2 = logits.contiguous()
    dx = torch.empty_like(x2)
    n = x2.numel()
    _ce_bwd_flat_kernel[(triton.cdiv(n, block),)](
        dloss.contiguous(), x2, labels.contiguous(), lse.contiguous().to(torch.float32), dx, n,
        x2.shape[1], LOGIT_SCALE=float(logit_scale), SOFTCAP=float(softcap), BLOCK=block,
        num_warps=num_warps)
    return dx


def cross_entropy_loss_backward_exp2(dloss, logits, labels, lse, *, logit_scale=0.0,
                                     softcap=0.0, block=None, num_warps=8):
    """NOT a behaviour-preserving variant (not registered as one): exp(x − lse) as
    exp2((x − lse)·log2e). The rounding of the product (x − lse)·log2e adds about |x − lse|/2 ulp
    to each fp32 gradient element, beyond exp's error model; numoracle rejects it against the
    exp-based reference for fp32 logits (e.g. lognormal logits, seed 304, 2×37)."""
    return _bwd(dloss, logits, labels, lse, logit_scale, softcap, "exp2", block, num_warps)


def cross_entropy_loss_backward_small_block(dloss, logits, labels, lse, *, logit_scale=0.0,
                                            softcap=0.0, num_warps=4):
    """As :func:`cross_entropy_loss_backward` with 32-wide class blocks (more programs)."""
    return _bwd(dloss, logits, labels, lse, logit_scale, softcap, "exp", 32, num_warps)


def cross_entropy_loss_backward_ignored_rows_kept(dloss, logits, labels, lse, *, logit_scale=0.0,
                                                  softcap=0.0, num_warps=8):
    """FAULTY (ignored rows not masked): rows labelled −100 get the gradient of class 0 instead
    of 0. Kept in ``Operator.faulty`` only."""
    kept = torch.where(labels == IGNORE_INDEX, torch.zeros_like(labels), labels)
    return cross_entropy_loss_backward(dloss, logits, kept, lse, logit_scale=logit_scale,
                                       softcap=softcap, num_warps=num_warps)
