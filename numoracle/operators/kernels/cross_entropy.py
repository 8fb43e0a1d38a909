"""Cross-entropy loss and its gradient after Liger-Kernel's precision plan (docs/operators.md row 6).

One program per row, the row walked in BLOCK-wide chunks; every logits load widened to fp32.

Precision plan (``cross_entropy``), all in fp32:

* each loaded logit x (and x_y) passes through the softcap s·tanh(x/s) when ``softcap`` is set
  (libdevice ``tanh``, or 2·sigmoid(2z) − 1 with ``softcap_tanh="sigmoid"``);
* online max and sum over the chunks, in order: m' = max(m, max(chunk));
  d = d·exp2((m − m')·log2e) + sum(exp2((x − m')·log2e)), log2e an fp32 constant;
* lse = m + log(d); loss = lse − x_y; with label smoothing ε (eps = ε/V, fp32 division):
  loss = loss·(1 − ε) + (sum over chunks of sum(−eps·x) + ε·lse); with z-loss:
  loss = loss + z·lse·lse; for ``reduction="mean"``: loss = loss / n, n the non-ignored row count
  (counted on the host, passed as an fp32 scalar, 1 when every row is ignored);
* gradient, per chunk: p = exp2((x − m)·log2e) / d; g = p + (2z·lse)·p (z-loss only);
  g = g − eps (smoothing only); at the label g − (1 − ε), computed here in fp32 and stored once
  (the corrected form of change pair 1); g / n for "mean"; times (1 − t·t), t = tanh(x/s), with
  softcap; one rounding to the logits' format at the store.

ε, z and s are compile-time constants: (1 − ε) and 2z are folded in float64, then used as fp32.
The per-row loss is **stored in the logits' format**; rows whose label is ``ignore_index`` get
loss 0 and an all-zero gradient row. The upstream writes the gradient over the logits; this
launcher writes it into a new tensor and leaves the logits untouched. Class weights are not
supported.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ._common import as_rows, row_block, tanh_libdevice, tanh_sigmoid

LOG2E = tl.constexpr(1.4426950408889634)
REDUCTIONS = ("mean", "sum", "none")


@triton.jit
def _tanh(z, TANH_FORM: tl.constexpr):
    if TANH_FORM == "libdevice":
        return tanh_libdevice(z)
    else:
        return tanh_sigmoid(z)


@triton.jit
def _capped(x, SOFTCAP: tl.constexpr, TANH_FORM: tl.constexpr):
    """softcap·tanh(x/softcap) in fp32 (identity when SOFTCAP is 0)."""
    if SOFTCAP != 0.0:
        x = SOFTCAP * _tanh(x / SOFTCAP, TANH_FORM)
    return x


@triton.jit
def _ce_kernel(x_ptr, y_ptr, loss_ptr, grad_ptr, n_cols, ignore_index, n_kept,
               LABEL_SMOOTHING: tl.constexpr, Z_LOSS: tl.constexpr, SOFTCAP: tl.constexpr,
               TANH_FORM: tl.constexpr, MEAN: tl.constexpr, TWO_PASS: tl.constexpr,
               BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    x_row = x_ptr + row * n_cols
    g_row = grad_ptr + row * n_cols
    y = tl.load(y_ptr + row)
    if y == ignore_index:
        for start in range(0, n_cols, BLOCK):
            cols = start + tl.arange(0, BLOCK)
            tl.store(g_row + cols, tl.zeros([BLOCK], dtype=tl.float32), mask=cols < n_cols)
        tl.store(loss_ptr + row, 0.0)
        return

    eps = LABEL_SMOOTHING / n_cols
    smooth = tl.zeros([], dtype=tl.float32)
    m = tl.full([], -float("inf"), dtype=tl.float32)
    d = tl.zeros([], dtype=tl.float32)
    # Pass 1: online max and sum (exp2 form), or, for TWO_PASS, the max alone.
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        mask = cols < n_cols
        x = tl.load(x_row + cols, mask=mask, other=0.0).to(tl.float32)
        # Mask after the softcap: s·tanh(−inf/s) would be −s, not −inf.
        x = tl.where(mask, _capped(x, SOFTCAP, TANH_FORM), -float("inf"))
        if LABEL_SMOOTHING > 0.0:
            smooth += tl.sum(tl.where(mask, -eps * x, 0.0), axis=0)
        m_new = tl.maximum(m, tl.max(x, axis=0))
        if not TWO_PASS:
            d = d * tl.exp2((m - m_new) * LOG2E) + tl.sum(tl.exp2((x - m_new) * LOG2E), axis=0)
        m = m_new
    if TWO_PASS:
        # Pass 1b: the plain sum of tl.exp(x − m) against the final max.
        for start in range(0, n_cols, BLOCK):
            cols = start + tl.arange(0, BLOCK)
            mask = cols < n_cols
            x = tl.load(x_row + cols, mask=mask, other=0.0).to(tl.float32)
            x = tl.where(mask, _capped(x, SOFTCAP, TANH_FORM), -float("inf"))
            d += tl.sum(tl.exp(x - m), axis=0)
    lse = m + tl.log(d)

    # Pass 2: gradient, the label's entry included, in fp32 and stored once.
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        mask = cols < n_cols
        x = tl.load(x_row + cols, mask=mask, other=0.0).to(tl.float32)
        if SOFTCAP != 0.0:
            t = _tanh(x / SOFTCAP, TANH_FORM)
            x = SOFTCAP * t
        if TWO_PASS:
            g = tl.exp(x - m) / d
        else:
            g = tl.exp2((x - m) * LOG2E) / d
        if Z_LOSS != 0.0:
            g = g + (2.0 * Z_LOSS * lse) * g
        if LABEL_SMOOTHING > 0.0:
            g = g - eps
        g = tl.where(cols == y, g - (1.0 - LABEL_SMOOTHING), g)
        if MEAN:
            g = g / n_kept
        if SOFTCAP != 0.0:
            g = g * (1.0 - t * t)
        tl.store(g_row + cols, g, mask=mask)

    x_y = _capped(tl.load(x_row + y).to(tl.float32), SOFTCAP, TANH_FORM)
    loss = lse - x_y
    if LABEL_SMOOTHING > 0.0:
        loss = loss * (1.0 - LABEL_SMOOTHING) + (smooth + LABEL_SMOOTHING * lse)
    if Z_LOSS != 0.0:
        loss = loss + Z_LOSS * lse * lse
    if MEAN:
        loss = loss / n_kept
    tl.store(loss_ptr + row, loss)


def _launch(logits, labels, ignore_index, label_smoothing, reduction, softcap, z_loss_scale,
            softcap_tanh, block, num_warps, two_pass):
    if reduction not in REDUCTIONS:
        raise ValueError(f"reduction must be one of {REDUCTIONS}, got reduction={reduction!r}")
    if not 0.0 <= label_smoothing <= 1.0:
        raise ValueError(f"label_smoothing must lie in [0, 1], got {label_smoothing}")
    if softcap is not None and not softcap > 0.0:
        raise ValueError(f"softcap must be None or positive, got softcap={softcap}")
    if softcap_tanh not in ("libdevice", "sigmoid"):
        raise ValueError(f"softcap_tanh must be 'libdevice' or 'sigmoid', got {softcap_tanh!r}")
    x2 = as_rows(logits)
    y1 = labels.contiguous().reshape(-1)
    n_rows, n_cols = x2.shape
    if y1.numel() != n_rows:
        raise ValueError(f"labels must hold one label per row ({n_rows}), got {y1.numel()}")
    # Change pair 8: divide only for "mean", and never by zero.
    n_kept = max(int((y1 != ignore_index).sum().item()), 1)
    loss = torch.empty(n_rows, dtype=logits.dtype, device=logits.device)
    grad = torch.empty_like(x2)
    if block is None:
        block = min(32768, triton.next_power_of_2(n_cols))
    _ce_kernel[(n_rows,)](
        x2, y1, loss, grad, n_cols, int(ignore_index), float(n_kept),
        LABEL_SMOOTHING=float(label_smoothing), Z_LOSS=float(z_loss_scale),
        SOFTCAP=0.0 if softcap is None else float(softcap), TANH_FORM=softcap_tanh,
        MEAN=reduction == "mean", TWO_PASS=two_pass,
        BLOCK=row_block(n_cols, block), num_warps=num_warps)
    return loss.reshape(logits.shape[:-1]), grad.reshape(logits.shape)


def cross_entropy(logits, labels, *, ignore_index=-100, label_smoothing=0.0, reduction="mean",
                  softcap=None, z_loss_scale=0.0, softcap_tanh="libdevice", block=None,
                  num_warps=32):
    """Cross-entropy over the last dimension with online max/sum and exp2 exponentials.

    Precision plan: the module docstring's. Returns ``(loss_per_row, grad)``: loss of shape
    logits.shape[:-1] in the logits' format (already divided by the non-ignored count for
    "mean"; sum it for the reduced loss) and the gradient of the reduced loss with respect to
    the logits, in the logits' format and shape. BLOCK defaults to min(32768, next_power_of_2(V)).
    """
    return _launch(logits, labels, ignore_index, label_smoothing, reduction, softcap,
                   z_loss_scale, softcap_tanh, block, num_warps, two_pass=False)


def cross_entropy_two_pass(logits, labels, *, ignore_index=-100, label_smoothing=0.0,
                           reduction="mean", softcap=None, z_loss_scale=0.0,
                           softcap_tanh="libdevice", block=None, num_warps=32):
    """As :func:`cross_entropy`, but the max is found first (pass 1) and d = sum(exp(x − m)) with
    ``tl.exp`` against that max (pass 1b); the gradient uses p = exp(x − m) / d (``tl.exp``)."""
    return _launch(logits, labels, ignore_index, label_smoothing, reduction, softcap,
                   z_loss_scale, softcap_tanh, block, num_warps, two_pass=True)


def cross_entropy_one_warp(logits, labels, *, ignore_index=-100, label_smoothing=0.0, reduction="mean",
                           softcap=None, z_loss_scale=0.0, softcap_tanh="libdevice"):
    """As :func:`cross_entropy` with one warp per program (BLOCK still covers the row: one chunk)."""
    return _launch(logits, labels, ignore_index, label_smoothing, reduction, softcap, z_loss_scale,
                   softcap_tanh, None, 1, two_pass=False)
