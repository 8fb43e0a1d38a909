"""Fused linear + cross-entropy after Liger-Kernel's precision plan (docs/operators.md row 7).

x [BT, H], W [V, H], labels [BT] (−100 = ignored). Rows are processed in chunks of
``chunk = next_power_of_2(ceil(BT / ceil(V / H)))`` (Liger's rule, so the logits of a chunk take
about as much memory as x). For each chunk, in order:

* logits = x_c·Wᵀ: a GEMM in x's format with fp32 accumulation (``tl.dot``; IEEE fp32 for fp32
  inputs, no TF32), **one rounding to x's format** at the store;
* the Liger cross-entropy kernel (``kernels.cross_entropy``: logits widened to fp32, exp2-based
  online max/sum, loss = lse − x_y, for "mean" divided by the non-ignored count of the whole
  batch) writes the per-row loss in **fp32** and the gradient of the logits in x's format;
* grad_x_c = grad_logits_c·W: GEMM, fp32 accumulation, rounded once to x's format;
* grad_W = grad_W + grad_logits_cᵀ·x_c: the previous grad_W (W's format, or fp32 with
  ``accum_fp32``) widened, added to the fp32 accumulator and rounded once (an addmm epilogue).

The loss is the fp32 host sum (``torch.sum``) of the per-row losses. Returns
``(loss, grad_x, grad_W)``: loss 0-d fp32, grad_x in x's format, grad_W in W's format.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .cross_entropy import _ce_kernel


@triton.jit
def _mm_kernel(a_ptr, b_ptr, c_ptr, M, N, K, s_am, s_ak, s_bk, s_bn, s_cm, s_cn,
               ACCUMULATE: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    """c = a·b (+ c when ACCUMULATE) with fp32 accumulation over K tiles, one store rounding."""
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.program_id(1) * BN + tl.arange(0, BN)
    acc = tl.zeros([BM, BN], dtype=tl.float32)
    for k0 in range(0, K, BK):
        rk = k0 + tl.arange(0, BK)
        a = tl.load(a_ptr + rm[:, None] * s_am + rk[None, :] * s_ak,
                    mask=(rm[:, None] < M) & (rk[None, :] < K), other=0.0)
        b = tl.load(b_ptr + rk[:, None] * s_bk + rn[None, :] * s_bn,
                    mask=(rk[:, None] < K) & (rn[None, :] < N), other=0.0)
        acc += tl.dot(a, b, input_precision="ieee")
    cmask = (rm[:, None] < M) & (rn[None, :] < N)
    c_offs = rm[:, None] * s_cm + rn[None, :] * s_cn
    if ACCUMULATE:
        acc = tl.load(c_ptr + c_offs, mask=cmask, other=0.0).to(tl.float32) + acc
    tl.store(c_ptr + c_offs, acc, mask=cmask)


def _mm(a, b, c, accumulate, tiles, num_warps):
    """c[M, N] = a[M, K]·b[K, N] (+ c) for strided views a, b, c."""
    M, K = a.shape
    N = b.shape[1]
    BM, BN, BK = tiles
    _mm_kernel[(triton.cdiv(M, BM), triton.cdiv(N, BN))](
        a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1),
        c.stride(0), c.stride(1), ACCUMULATE=accumulate, BM=BM, BN=BN, BK=BK,
        num_warps=num_warps)


def chunk_rows(bt: int, v: int, h: int) -> int:
    """Liger's row-chunk size: next_power_of_2(ceil(BT / ceil(V / H)))."""
    return triton.next_power_of_2(triton.cdiv(bt, triton.cdiv(v, h)))


def _launch(x, w, labels, ignore_index, reduction, accum_fp32, tiles, two_pass, num_warps,
            fault_chunk_count=False):
    if reduction not in ("mean", "sum"):
        raise ValueError(f"reduction must be 'mean' or 'sum', got reduction={reduction!r}")
    if x.dim() != 2 or w.dim() != 2 or w.shape[1] != x.shape[1]:
        raise ValueError(f"x must be [BT, H] and W [V, H] with the same H, got {tuple(x.shape)} "
                         f"and {tuple(w.shape)}")
    if labels.shape != x.shape[:1]:
        raise ValueError(f"labels must hold one label per row ({x.shape[0]}), got shape "
                         f"{tuple(labels.shape)}")
    x, w, labels = x.contiguous(), w.contiguous(), labels.contiguous()
    bt, h = x.shape
    v = w.shape[0]
    chunk = chunk_rows(bt, v, h)
    n_kept = float(max(int((labels != ignore_index).sum().item()), 1))
    loss_rows = torch.zeros(bt, dtype=torch.float32, device=x.device)
    grad_x = torch.empty_like(x)
    grad_w = torch.zeros(w.shape, dtype=torch.float32 if accum_fp32 else w.dtype, device=x.device)
    for start in range(0, bt, chunk):
        end = min(start + chunk, bt)
        xc, yc = x[start:end], labels[start:end]
        logits = torch.empty((end - start, v), dtype=x.dtype, device=x.device)
        _mm(xc, w.t(), logits, False, tiles, num_warps)
        grad_logits = torch.empty_like(logits)
        if fault_chunk_count:
            n_kept = float(max(int((yc != ignore_index).sum().item()), 1))
        _ce_kernel[(end - start,)](
            logits, yc, loss_rows[start:end], grad_logits, v, int(ignore_index), n_kept,
            LABEL_SMOOTHING=0.0, Z_LOSS=0.0, SOFTCAP=0.0, TANH_FORM="libdevice",
            MEAN=reduction == "mean", TWO_PASS=two_pass,
            BLOCK=min(32768, triton.next_power_of_2(v)), num_warps=num_warps)
        _mm(grad_logits, w, grad_x[start:end], False, tiles, num_warps)
        _mm(grad_logits.t(), xc, grad_w, start > 0, tiles, num_warps)
    return torch.sum(loss_rows), grad_x, grad_w.to(w.dtype)


def fused_linear_cross_entropy(x, w, labels, *, ignore_index=-100, reduction="mean",
                               accum_fp32=False, num_warps=4):
    """Liger fused linear cross-entropy, forward with the gradients of x and W.

    Precision plan: the module docstring's; 16×16×16 GEMM tiles. Returns
    ``(loss, grad_x, grad_W)``.
    """
    return _launch(x, w, labels, ignore_index, reduction, accum_fp32, (16, 16, 16), False,
                   num_warps)


def fused_linear_cross_entropy_big_tiles(x, w, labels, *, ignore_index=-100, reduction="mean",
                                         accum_fp32=False, num_warps=8):
    """As :func:`fused_linear_cross_entropy` with 16×64×32 GEMM tiles (another K order)."""
    return _launch(x, w, labels, ignore_index, reduction, accum_fp32, (16, 64, 32), False,
                   num_warps)


def fused_linear_cross_entropy_two_pass(x, w, labels, *, ignore_index=-100, reduction="mean",
                                        accum_fp32=False, num_warps=4):
    """As :func:`fused_linear_cross_entropy` with the cross-entropy kernel's two-pass form
    (max first, then ``tl.exp`` sums and probabilities)."""
    return _launch(x, w, labels, ignore_index, reduction, accum_fp32, (16, 16, 16), True,
                   num_warps)


def fused_linear_cross_entropy_chunk_count(x, w, labels, *, ignore_index=-100, reduction="mean",
                                           accum_fp32=False, num_warps=4):
    """FAULTY (a changed divisor): for "mean", each chunk divides by its own non-ignored count
    instead of the whole batch's. Kept in ``Operator.faulty`` only."""
    return _launch(x, w, labels, ignore_index, reduction, accum_fp32, (16, 16, 16), False,
                   num_warps, fault_chunk_count=True)
