"""KL divergence forward after Liger-Kernel's precision plan (docs/operators.md, beyond the 13;
change pair 7).

Inputs y_pred (log-probabilities) and y_true (probabilities, or log-probabilities with
``log_target``), widened to fp32.  Per element, in fp32: y_true·(log(max(y_true, eps)) − y_pred),
or exp(y_true)·(y_true − y_pred) with ``log_target``.  ``reduction="none"`` stores that (fp32);
otherwise each program sums its row in fp32 and the host sums the row sums in fp32 and divides
by the row count ("batchmean") or the element count ("mean"); "sum" only sums.  One program
per row, the row walked in BLOCK-wide chunks.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ._common import as_rows, row_block

REDUCTIONS = ("batchmean", "sum", "mean", "none")


@triton.jit
def _kl_kernel(p_ptr, t_ptr, out_ptr, n_cols, EPS: tl.constexpr, LOG_TARGET: tl.constexpr,
               NONE: tl.constexpr, CLAMP: tl.constexpr, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    total = tl.zeros([], dtype=tl.float32)
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        mask = cols < n_cols
        y = tl.load(p_ptr + row * n_cols + cols, mask=mask, other=0.0).to(tl.float32)
        t = tl.load(t_ptr + row * n_cols + cols, mask=mask, other=0.0).to(tl.float32)
        if LOG_TARGET:
            loss = tl.exp(t) * (t - y)
        elif CLAMP:
            loss = t * (tl.log(tl.maximum(t, EPS)) - y)
        else:
            loss = t * (tl.log(t) - y)          # change pair 7's fault: 0 * -inf = NaN
        if NONE:
            tl.store(out_ptr + row * n_cols + cols, loss, mask=mask)
        else:
            total += tl.sum(tl.where(mask, loss, 0.0), axis=0)
    if not NONE:
        tl.store(out_ptr + row, total)


def _launch(y_pred, y_true, reduction, eps, log_target, block, num_warps, clamp, divisor_rows_only):
    if reduction not in REDUCTIONS:
        raise ValueError(f"reduction must be one of {REDUCTIONS}, got reduction={reduction!r}")
    if y_pred.shape != y_true.shape:
        raise ValueError(f"y_pred and y_true must have one shape, got {tuple(y_pred.shape)} and "
                         f"{tuple(y_true.shape)}")
    p2, t2 = as_rows(y_pred), as_rows(y_true)
    n_rows, n_cols = p2.shape
    none = reduction == "none"
    out = torch.empty((n_rows, n_cols) if none else (n_rows,), dtype=torch.float32, device=y_pred.device)
    _kl_kernel[(n_rows,)](p2, t2, out, n_cols, EPS=float(eps), LOG_TARGET=bool(log_target), NONE=none,
                          CLAMP=clamp, BLOCK=row_block(n_cols, block), num_warps=num_warps)
    if none:
        return out.reshape(y_pred.shape)
    total = out.sum()                                      # the host's fp32 sum of the row sums
    if reduction == "batchmean":
        return total / n_rows
    if reduction == "mean":
        return total / (n_rows if divisor_rows_only else n_rows * n_cols)
    return total


def kl_div(y_pred, y_true, *, reduction="batchmean", eps=1e-10, log_target=False, block=None, num_warps=4):
    """KL divergence forward; the plan is the module docstring's.  Returns the per-element loss
    (fp32) for "none", else a 0-d fp32 tensor.  BLOCK defaults to the next power of two ≥ the row."""
    return _launch(y_pred, y_true, reduction, eps, log_target, block, num_warps, True, False)


def kl_div_chunked(y_pred, y_true, *, reduction="batchmean", eps=1e-10, log_target=False, num_warps=2):
    """As :func:`kl_div`, the row walked in 32-wide chunks (partial sums added in chunk order)."""
    return _launch(y_pred, y_true, reduction, eps, log_target, 32, num_warps, True, False)


def kl_div_unclamped(y_pred, y_true, *, reduction="batchmean", eps=1e-10, log_target=False):
    """Change pair 7's fault: log(y_true) without the eps clamp (NaN where y_true = 0), and the
    'mean' reduction divided by the row count instead of the element count."""
    return _launch(y_pred, y_true, reduction, eps, log_target, None, 4, False, True)


def kl_div_one_warp(y_pred, y_true, *, reduction="batchmean", eps=1e-10, log_target=False):
    """As :func:`kl_div` with one warp per program."""
    return _launch(y_pred, y_true, reduction, eps, log_target, None, 1, True, False)
