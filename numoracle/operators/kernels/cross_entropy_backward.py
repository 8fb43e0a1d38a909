"""Cross-entropy backward after Liger-Kernel's precision plan (docs/operators.md row 6).

Liger computes the gradient of the reduced loss in the forward pass and writes it over the
logits, in their format; the backward then multiplies that stored gradient by grad_output
(one scalar for "mean"/"sum", one value per row for "none") and stores it again. Precision plan:

* forward part (:mod:`.cross_entropy`'s kernels, no smoothing / z-loss / softcap): logits
  widened to fp32; p = exp2((x − m)·log2e)/d; at the label p − 1, computed in fp32 and stored
  once (change pair 1, corrected); divided by the non-ignored row count for "mean" (change
  pair 8); ignored rows 0; **rounded to the logits' format**;
* backward part: the stored gradient widened to fp32, × grad_output (widened; per row for
  "none", change pair 9), one rounding to the logits' format.

The upstream writes in place and skips the multiply when grad_output is 1; these launchers write
new tensors and always multiply (by 1.0 exactly when grad_output is 1).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ._common import as_rows, row_block
from .cross_entropy import LOG2E, REDUCTIONS, cross_entropy, cross_entropy_two_pass


@triton.jit
def _scale_rows_kernel(g_ptr, go_ptr, out_ptr, n_cols, PER_ROW: tl.constexpr,
                       BLOCK: tl.constexpr):
    """out[row] = g[row]·go[row] (PER_ROW) or g[row]·go[0], in fp32, stored in out's format."""
    row = tl.program_id(0).to(tl.int64)
    if PER_ROW:
        go = tl.load(go_ptr + row).to(tl.float32)
    else:
        go = tl.load(go_ptr).to(tl.float32)
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        mask = cols < n_cols
        g = tl.load(g_ptr + row * n_cols + cols, mask=mask, other=0.0).to(tl.float32)
        tl.store(out_ptr + row * n_cols + cols, g * go, mask=mask)


@triton.jit
def _scale_flat_kernel(g_ptr, go_ptr, out_ptr, n_elements, n_cols, PER_ROW: tl.constexpr,
                       BLOCK: tl.constexpr):
    """As _scale_rows_kernel over the flattened gradient, each element finding its row."""
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n_elements
    if PER_ROW:
        go = tl.load(go_ptr + offs // n_cols, mask=mask, other=0.0).to(tl.float32)
    else:
        go = tl.load(go_ptr).to(tl.float32)
    g = tl.load(g_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    tl.store(out_ptr + offs, g * go, mask=mask)


@triton.jit
def _ce_grad_rounded_label_kernel(x_ptr, y_ptr, g_ptr, n_cols, ignore_index, n_kept,
                                  MEAN: tl.constexpr, BLOCK: tl.constexpr):
    """FAULTY (change pair 1): softmax/n stored for every class in the logits' format, then the
    label's entry reloaded from that rounded value and −1/n added to it."""
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    g_row = g_ptr + row * n_cols
    y = tl.load(y_ptr + row)
    if y == ignore_index:
        tl.store(g_row + cols, tl.zeros([BLOCK], dtype=tl.float32), mask=mask)
    else:
        x = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=-float("inf")).to(tl.float32)
        m = tl.max(x, axis=0)
        e = tl.exp2((x - m) * LOG2E)
        g = e / tl.sum(e, axis=0)
        if MEAN:
            g = g / n_kept
        tl.store(g_row + cols, g, mask=mask)
        tl.debug_barrier()
        g_y = tl.load(g_row + y).to(tl.float32)
        if MEAN:
            g_y = g_y + (-1.0 / n_kept)
        else:
            g_y = g_y - 1.0
        tl.store(g_row + y, g_y)


def _check(logits, labels, grad_output, reduction):
    if reduction not in REDUCTIONS:
        raise ValueError(f"reduction must be one of {REDUCTIONS}, got reduction={reduction!r}")
    n_rows = as_rows(logits).shape[0]
    want = n_rows if reduction == "none" else 1
    if grad_output.numel() != want:
        raise ValueError(f"grad_output must hold {want} value(s) for reduction={reduction!r} "
                         f"(the loss has {'one per row' if want > 1 else 'one value'}), "
                         f"got shape {tuple(grad_output.shape)}")


def _scale(grad, grad_output, reduction, per_row, flat, num_warps):
    g2 = as_rows(grad)
    out = torch.empty_like(g2)
    n_rows, n_cols = g2.shape
    go = grad_output.contiguous().reshape(-1)
    per_row = per_row and reduction == "none"
    if flat:
        n = g2.numel()
        _scale_flat_kernel[(triton.cdiv(n, 1024),)](g2, go, out, n, n_cols, PER_ROW=per_row,
                                                    BLOCK=1024, num_warps=num_warps)
    else:
        _scale_rows_kernel[(n_rows,)](g2, go, out, n_cols, PER_ROW=per_row,
                                      BLOCK=row_block(n_cols, min(4096, triton.next_power_of_2(n_cols))),
                                      num_warps=num_warps)
    return out.reshape(grad.shape)


def cross_entropy_backward(logits, labels, grad_output, *, ignore_index=-100, reduction="mean",
                           num_warps=4):
    """Gradient of the reduced cross-entropy with respect to the logits, times grad_output.

    Precision plan: the module docstring's. ``grad_output`` has one value for "mean"/"sum"
    (any shape with one element) and one per row for "none". Returns the gradient in the
    logits' format and shape."""
    _check(logits, labels, grad_output, reduction)
    _, grad = cross_entropy(logits, labels, ignore_index=ignore_index, reduction=reduction)
    return _scale(grad, grad_output, reduction, True, False, num_warps)


def cross_entropy_backward_two_pass(logits, labels, grad_output, *, ignore_index=-100,
                                    reduction="mean", num_warps=4):
    """As :func:`cross_entropy_backward` with the forward part from
    :func:`.cross_entropy.cross_entropy_two_pass` walked in 64-wide chunks (max first, then
    d = sum of ``tl.exp(x − m)``, p = ``tl.exp(x − m)``/d) and the scale applied elementwise
    over the flattened gradient."""
    _check(logits, labels, grad_output, reduction)
    _, grad = cross_entropy_two_pass(logits, labels, ignore_index=ignore_index,
                                     reduction=reduction, block=64)
    return _scale(grad, grad_output, reduction, True, True, num_warps)


def cross_entropy_backward_one_warp(logits, labels, grad_output, *, ignore_index=-100,
                                    reduction="mean"):
    """As :func:`cross_entropy_backward` launched with ``num_warps=1`` in both kernels (another
    reduction tree for the row sum d on a GPU)."""
    _check(logits, labels, grad_output, reduction)
    _, grad = cross_entropy(logits, labels, ignore_index=ignore_index, reduction=reduction,
                            num_warps=1)
    return _scale(grad, grad_output, reduction, True, False, 1)


def cross_entropy_backward_rounded_label(logits, labels, grad_output, *, ignore_index=-100,
                                         reduction="mean", num_warps=4):
    """FAULTY (change pair 1): the true-class gradient from the rounded softmax/n minus 1/n."""
    _check(logits, labels, grad_output, reduction)
    x2 = as_rows(logits)
    y1 = labels.contiguous().reshape(-1)
    n_rows, n_cols = x2.shape
    n_kept = max(int((y1 != ignore_index).sum().item()), 1)
    grad = torch.empty_like(x2)
    _ce_grad_rounded_label_kernel[(n_rows,)](x2, y1, grad, n_cols, int(ignore_index),
                                             float(n_kept), MEAN=reduction == "mean",
                                             BLOCK=triton.next_power_of_2(n_cols),
                                             num_warps=num_warps)
    return _scale(grad.reshape(logits.shape), grad_output, reduction, True, False, num_warps)


def cross_entropy_backward_row0_scale(logits, labels, grad_output, *, ignore_index=-100,
                                      reduction="mean", num_warps=4):
    """FAULTY (change pair 9): every row scaled by grad_output[0], also for reduction='none'."""
    _check(logits, labels, grad_output, reduction)
    _, grad = cross_entropy(logits, labels, ignore_index=ignore_index, reduction=reduction)
    return _scale(grad, grad_output, reduction, False, False, num_warps)


def cross_entropy_backward_sum_divided(logits, labels, grad_output, *, ignore_index=-100,
                                       reduction="mean", num_warps=4):
    """FAULTY (change pair 8, gradient side): the gradient divided by the non-ignored row count
    for reduction='sum' too, as when the divisor is applied whatever the reduction."""
    _check(logits, labels, grad_output, reduction)
    fwd_reduction = "mean" if reduction == "sum" else reduction
    _, grad = cross_entropy(logits, labels, ignore_index=ignore_index, reduction=fwd_reduction)
    return _scale(grad, grad_output, reduction, True, False, num_warps)
