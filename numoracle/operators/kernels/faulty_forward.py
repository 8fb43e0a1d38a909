"""Faulty forward kernels re-creating upstream change pairs (docs/operators.md,
"Historical change pairs"): each differs from our correct kernel of the same
precision plan by the one fault the upstream fix removed.  They are registered
under ``Operator.faulty``, never as kernels, and serve the replays, the
planted-fault tests and the baselines' comparisons.

* pair 3  ``layer_norm_padded_variance``: the variance sums (x − mean)² over the
  padded lanes too (masked loads give 0, each padded lane adds mean²) — wrong
  whenever the row length is not a power of two.
* pair 4  ``rms_norm_offset_dropped``: the (offset + w) of Gemma's RMSNorm uses w alone.
* pair 5  ``rms_norm_unrounded_multiply``: Llama casting, but x·rstd is multiplied
  by w in fp32 instead of being rounded to x's format first.
* pair 8  ``cross_entropy_always_divides``: the loss is divided by the non-ignored
  count for every reduction, not only for "mean".
* pair 10 ``cross_entropy_storage_format``: the softmax normaliser computed in the
  logits' format: x − max and exp(x − max) rounded to the logits' format and summed there.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from . import cross_entropy as _ce
from . import rms_norm as _rms
from ._common import as_rows, full_row_block


@triton.jit
def _layer_norm_padded_kernel(x_ptr, w_ptr, b_ptr, y_ptr, mean_ptr, rstd_ptr, n_cols,
                              EPS: tl.constexpr, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=0.0).to(tl.float32)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    b = tl.load(b_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    mean = tl.sum(x, axis=0) / n_cols
    xc = x - mean                      # the fault: padded lanes hold -mean, not 0
    var = tl.sum(xc * xc, axis=0) / n_cols
    rstd = tl.math.rsqrt(var + EPS)
    tl.store(mean_ptr + row, mean)
    tl.store(rstd_ptr + row, rstd)
    tl.store(y_ptr + row * n_cols + cols, xc * rstd * w + b, mask=mask)


def layer_norm_padded_variance(x, w, b, *, eps=1e-5, block=None, num_warps=4):
    """Change pair 3's fault: LayerNorm whose variance includes the padded lanes."""
    x2 = as_rows(x)
    n_rows, n_cols = x2.shape
    y = torch.empty_like(x2)
    mean = torch.empty(n_rows, dtype=x.dtype, device=x.device)
    rstd = torch.empty(n_rows, dtype=x.dtype, device=x.device)
    _layer_norm_padded_kernel[(n_rows,)](x2, w.contiguous(), b.contiguous(), y, mean, rstd, n_cols,
                                         EPS=float(eps), BLOCK=full_row_block(n_cols, block),
                                         num_warps=num_warps)
    lead = x.shape[:-1]
    return y.reshape(x.shape), mean.reshape(lead), rstd.reshape(lead)


def rms_norm_offset_dropped(x, w, *, eps=1e-6, offset=0.0, casting="llama", block=None, num_warps=4):
    """Change pair 4's fault: the offset of (offset + w) is ignored."""
    return _rms._launch(x, w, eps, 0.0, casting, "rsqrt", block, num_warps, "row")


def rms_norm_unrounded_multiply(x, w, *, eps=1e-6, offset=0.0, casting="llama", block=None, num_warps=4):
    """Change pair 5's fault: for Llama casting, x·rstd·(offset + w) all in fp32 with one
    rounding at the store (Gemma's plan), instead of rounding x·rstd to x's format first."""
    return _rms._launch(x, w, eps, offset, "gemma" if casting == "llama" else casting, "rsqrt",
                        block, num_warps, "row")


def cross_entropy_always_divides(logits, labels, *, ignore_index=-100, reduction="mean", **kw):
    """Change pair 8's fault: the per-row loss divided by the non-ignored count whatever the
    reduction."""
    return _ce.cross_entropy(logits, labels, ignore_index=ignore_index, reduction="mean", **kw)


@triton.jit
def _ce_storage_kernel(x_ptr, y_ptr, loss_ptr, n_cols, ignore_index, n_kept,
                       MEAN: tl.constexpr, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    label = tl.load(y_ptr + row)
    if label == ignore_index:
        tl.store(loss_ptr + row, 0.0)
        return
    x = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=-float("inf"))
    m = tl.max(x, axis=0)
    z = x - m                                               # rounded to the logits' format
    p = tl.exp(z.to(tl.float32)).to(x_ptr.dtype.element_ty)  # and so is every exponential
    d = tl.sum(tl.where(mask, p, 0.0).to(x_ptr.dtype.element_ty), axis=0)
    lse = m.to(tl.float32) + tl.log(d.to(tl.float32))
    loss = lse - tl.load(x_ptr + row * n_cols + label).to(tl.float32)
    if MEAN:
        loss = loss / n_kept
    tl.store(loss_ptr + row, loss)


def cross_entropy_storage_format(logits, labels, *, ignore_index=-100, reduction="mean", block=None,
                                 num_warps=4, **_unused):
    """Change pair 10's fault: the softmax normaliser in the logits' format (no fp32 widening
    before the subtraction, the exponential and the sum).  Returns ``(loss_per_row, None)`` in
    the shape of :func:`cross_entropy`'s outputs; only the loss is judged."""
    x2 = as_rows(logits)
    y1 = labels.contiguous().reshape(-1)
    n_rows, n_cols = x2.shape
    n_kept = max(int((y1 != ignore_index).sum().item()), 1)
    loss = torch.empty(n_rows, dtype=logits.dtype, device=logits.device)
    _ce_storage_kernel[(n_rows,)](x2, y1, loss, n_cols, int(ignore_index), float(n_kept),
                                  MEAN=reduction == "mean", BLOCK=full_row_block(n_cols, block),
                                  num_warps=num_warps)
    return loss.reshape(logits.shape[:-1]), None
