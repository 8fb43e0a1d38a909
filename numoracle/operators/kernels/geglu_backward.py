"""GeGLU backward (tanh form) after Liger-Kernel's corrected precision plan (docs/operators.md row 4,
change pair 6).

Given dc (the gradient of c = gelu(a)·b), a and b, all in one format. Precision plan (every
correct variant), evaluated left to right as written:

* a→fp32; z = √(2/π)·(a + 0.044715·(a·a·a)); t = tanh(z) (libdevice); g = 0.5·a·(1 + t), fp32;
* **g rounded to dc's format and widened back** (what the forward multiplied b by);
  db = dc·g in fp32 (dc widened), stored in b's format;
* the tanh-gelu derivative in fp32: term1 = 0.5·(1 + t); term2 = 0.5·a·(1 − t·t)·(√(2/π)·(1 +
  3·0.044715·a·a)) with 3·0.044715 folded into one fp32 constant; da = (dc·b)·(term1 + term2):
  dc·b is a product in the input format (one rounding to it, as upstream writes ``dc * b``
  on the loaded values), then promoted to fp32; stored in a's format.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ._common import as_rows, row_block, tanh_libdevice

SQRT_2_OVER_PI = tl.constexpr(0.7978845608028654)
GELU_CUBIC = tl.constexpr(0.044715)
GELU_CUBIC_3 = tl.constexpr(0.134145)


@triton.jit
def _geglu_grads(dc, a, b, ROUND_GELU: tl.constexpr):
    a = a.to(tl.float32)
    z = SQRT_2_OVER_PI * (a + GELU_CUBIC * (a * a * a))
    t = tanh_libdevice(z)
    g = 0.5 * a * (1.0 + t)
    if ROUND_GELU:
        g = g.to(dc.dtype).to(tl.float32)
    db = dc.to(tl.float32) * g
    term1 = 0.5 * (1.0 + t)
    term2 = 0.5 * a * (1.0 - t * t) * (SQRT_2_OVER_PI * (1.0 + GELU_CUBIC_3 * a * a))
    da = dc * b * (term1 + term2)
    return da, db


@triton.jit
def _geglu_bwd_row_kernel(dc_ptr, a_ptr, b_ptr, da_ptr, db_ptr, n_cols,
                          ROUND_GELU: tl.constexpr, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        mask = cols < n_cols
        offs = row * n_cols + cols
        dc = tl.load(dc_ptr + offs, mask=mask, other=0.0)
        a = tl.load(a_ptr + offs, mask=mask, other=0.0)
        b = tl.load(b_ptr + offs, mask=mask, other=0.0)
        da, db = _geglu_grads(dc, a, b, ROUND_GELU)
        tl.store(da_ptr + offs, da, mask=mask)
        tl.store(db_ptr + offs, db, mask=mask)


@triton.jit
def _geglu_bwd_flat_kernel(dc_ptr, a_ptr, b_ptr, da_ptr, db_ptr, n_elements,
                           ROUND_GELU: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n_elements
    dc = tl.load(dc_ptr + offs, mask=mask, other=0.0)
    a = tl.load(a_ptr + offs, mask=mask, other=0.0)
    b = tl.load(b_ptr + offs, mask=mask, other=0.0)
    da, db = _geglu_grads(dc, a, b, ROUND_GELU)
    tl.store(da_ptr + offs, da, mask=mask)
    tl.store(db_ptr + offs, db, mask=mask)


def _check(dc, a, b):
    if not (dc.shape == a.shape == b.shape):
        raise ValueError(f"dc, a and b must have one shape, got {tuple(dc.shape)}, "
                         f"{tuple(a.shape)} and {tuple(b.shape)}")
    if not (dc.dtype == a.dtype == b.dtype):
        raise ValueError(f"dc, a and b must have one dtype, got {dc.dtype}, {a.dtype}, {b.dtype}")


def _rows(dc, a, b, round_gelu, block, num_warps):
    _check(dc, a, b)
    dc2, a2, b2 = as_rows(dc), as_rows(a), as_rows(b)
    da, db = torch.empty_like(a2), torch.empty_like(b2)
    n_rows, n_cols = a2.shape
    _geglu_bwd_row_kernel[(n_rows,)](dc2, a2, b2, da, db, n_cols, ROUND_GELU=round_gelu,
                                     BLOCK=row_block(n_cols, block), num_warps=num_warps)
    return da.reshape(a.shape), db.reshape(b.shape)


def geglu_backward(dc, a, b, *, block=None, num_warps=4):
    """GeGLU (tanh) backward, one program per row: returns ``(da, db)``. Precision plan: the
    module docstring's (libdevice tanh: a GPU, or the interpreter repaired by
    ``numoracle.backends.interpreter.install()``)."""
    return _rows(dc, a, b, True, block, num_warps)


def geglu_backward_chunked(dc, a, b, *, block=32, num_warps=4):
    """As :func:`geglu_backward`, each row walked in ``block``-wide chunks."""
    return _rows(dc, a, b, True, block, num_warps)


def geglu_backward_flat(dc, a, b, *, block=1024, num_warps=4):
    """As :func:`geglu_backward`, elementwise over the flattened tensors, ``block`` a program."""
    _check(dc, a, b)
    dc1, a1, b1 = (t.contiguous().reshape(-1) for t in (dc, a, b))
    da, db = torch.empty_like(a1), torch.empty_like(b1)
    n = a1.numel()
    _geglu_bwd_flat_kernel[(triton.cdiv(n, block),)](dc1, a1, b1, da, db, n, ROUND_GELU=True,
                                                     BLOCK=block, num_warps=num_warps)
    return da.reshape(a.shape), db.reshape(b.shape)


def geglu_backward_unrounded_gelu(dc, a, b, *, block=None, num_warps=4):
    """FAULTY (change pair 6): db = dc·gelu(a) with the fp32 gelu(a), not the value rounded to
    the input format that the forward multiplied b by."""
    return _rows(dc, a, b, False, block, num_warps)
