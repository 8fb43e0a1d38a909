"""SwiGLU backward after Liger-Kernel's precision plan (docs/operators.md row 3).

Given dc (the gradient of c = silu(a)·b), a and b, all in one format. Precision plan (every
correct variant): a→fp32; σ = sigmoid(a) in fp32 (``tl.sigmoid``); silu = a·σ in fp32 (recomputed,
not reloaded); db = dc·silu (dc in its format times an fp32 value: promoted to fp32, the widening
exact); da = dc·(silu·(1 − σ) + σ)·b evaluated left to right in fp32 (dc and b promoted);
da stored in a's format, db in b's. For a ≲ −88 fp32 exp(−a) overflows and σ, silu are 0
(docs/facts.md).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ._common import as_rows, row_block


@triton.jit
def _swiglu_grads(dc, a, b, SIGMOID_FORM: tl.constexpr):
    a = a.to(tl.float32)
    if SIGMOID_FORM == "tl":
        sig = tl.sigmoid(a)
    else:
        sig = 1.0 / (1.0 + tl.exp(-a))
    silu = a * sig
    db = dc * silu
    da = dc * (silu * (1.0 - sig) + sig) * b
    return da, db


@triton.jit
def _swiglu_bwd_row_kernel(dc_ptr, a_ptr, b_ptr, da_ptr, db_ptr, n_cols,
                           SIGMOID_FORM: tl.constexpr, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        mask = cols < n_cols
        offs = row * n_cols + cols
        dc = tl.load(dc_ptr + offs, mask=mask, other=0.0)
        a = tl.load(a_ptr + offs, mask=mask, other=0.0)
        b = tl.load(b_ptr + offs, mask=mask, other=0.0)
        da, db = _swiglu_grads(dc, a, b, SIGMOID_FORM)
        tl.store(da_ptr + offs, da, mask=mask)
        tl.store(db_ptr + offs, db, mask=mask)


@triton.jit
def _swiglu_bwd_flat_kernel(dc_ptr, a_ptr, b_ptr, da_ptr, db_ptr, n_elements,
                            SIGMOID_FORM: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n_elements
    dc = tl.load(dc_ptr + offs, mask=mask, other=0.0)
    a = tl.load(a_ptr + offs, mask=mask, other=0.0)
    b = tl.load(b_ptr + offs, mask=mask, other=0.0)
    da, db = _swiglu_grads(dc, a, b, SIGMOID_FORM)
    tl.store(da_ptr + offs, da, mask=mask)
    tl.store(db_ptr + offs, db, mask=mask)


def _check(dc, a, b):
    if not (dc.shape == a.shape == b.shape):
        raise ValueError(f"dc, a and b must have one shape, got {tuple(dc.shape)}, "
                         f"{tuple(a.shape)} and {tuple(b.shape)}")


def _rows(dc, a, b, sigmoid_form, block, num_warps):
    _check(dc, a, b)
    dc2, a2, b2 = as_rows(dc), as_rows(a), as_rows(b)
    da, db = torch.empty_like(a2), torch.empty_like(b2)
    n_rows, n_cols = a2.shape
    _swiglu_bwd_row_kernel[(n_rows,)](dc2, a2, b2, da, db, n_cols, SIGMOID_FORM=sigmoid_form,
                                      BLOCK=row_block(n_cols, block), num_warps=num_warps)
    return da.reshape(a.shape), db.reshape(b.shape)


def swiglu_backward(dc, a, b, *, block=None, num_warps=4):
    """SwiGLU backward, one program per row: returns ``(da, db)`` in a's and b's formats.
    Precision plan: the module docstring's. The inputs are left untouched (upstream writes the
    gradients over a and b)."""
    return _rows(dc, a, b, "tl", block, num_warps)


def swiglu_backward_explicit_sigmoid(dc, a, b, *, block=None, num_warps=4):
    """As :func:`swiglu_backward` with σ written out as ``1.0 / (1.0 + tl.exp(-a))`` in fp32."""
    return _rows(dc, a, b, "explicit", block, num_warps)


def swiglu_backward_flat(dc, a, b, *, block=1024, num_warps=4):
    """As :func:`swiglu_backward`, elementwise over the flattened tensors, ``block`` elements
    a program."""
    _check(dc, a, b)
    dc1, a1, b1 = (t.contiguous().reshape(-1) for t in (dc, a, b))
    da, db = torch.empty_like(a1), torch.empty_like(b1)
    n = a1.numel()
    _swiglu_bwd_flat_kernel[(triton.cdiv(n, block),)](dc1, a1, b1, da, db, n, SIGMOID_FORM="tl",
                                                      BLOCK=block, num_warps=num_warps)
    return da.reshape(a.shape), db.reshape(b.shape)
