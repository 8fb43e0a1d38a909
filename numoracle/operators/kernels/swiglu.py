"""SwiGLU forward c = silu(a)·b after Liger-Kernel's precision plan (docs/operators.md row 3).

Precision plan: a→fp32; sigmoid(a) in fp32 (``tl.sigmoid``, i.e. 1/(1 + exp(−a)) with fp32
``exp``); silu = a·sigmoid(a) in fp32; **silu rounded to b's format, then multiplied by b in
b's format** (one rounding of the product); stored in b's format. For a ≲ −88 fp32 exp(−a)
overflows to inf and silu becomes −0 (docs/facts.md).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ._common import as_rows, full_row_block


@triton.jit
def _silu_times(a, b, SIGMOID_FORM: tl.constexpr):
    a = a.to(tl.float32)
    if SIGMOID_FORM == "tl":
        sig = tl.sigmoid(a)
    else:
        sig = 1.0 / (1.0 + tl.exp(-a))
    return (a * sig).to(b.dtype) * b


@triton.jit
def _swiglu_row_kernel(a_ptr, b_ptr, c_ptr, n_cols, SIGMOID_FORM: tl.constexpr,
                       BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    offs = row * n_cols + cols
    a = tl.load(a_ptr + offs, mask=mask, other=0.0)
    b = tl.load(b_ptr + offs, mask=mask, other=0.0)
    tl.store(c_ptr + offs, _silu_times(a, b, SIGMOID_FORM), mask=mask)


@triton.jit
def _swiglu_flat_kernel(a_ptr, b_ptr, c_ptr, n_elements, SIGMOID_FORM: tl.constexpr,
                        BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n_elements
    a = tl.load(a_ptr + offs, mask=mask, other=0.0)
    b = tl.load(b_ptr + offs, mask=mask, other=0.0)
    tl.store(c_ptr + offs, _silu_times(a, b, SIGMOID_FORM), mask=mask)


def _check(a, b):
    if a.shape != b.shape:
        raise ValueError(f"a and b must have the same shape, got {tuple(a.shape)} and "
                         f"{tuple(b.shape)}")


def _rows(a, b, sigmoid_form, block, num_warps):
    _check(a, b)
    a2, b2 = as_rows(a), as_rows(b)
    c = torch.empty_like(b2)
    n_rows, n_cols = b2.shape
    _swiglu_row_kernel[(n_rows,)](a2, b2, c, n_cols, SIGMOID_FORM=sigmoid_form,
                                  BLOCK=full_row_block(n_cols, block), num_warps=num_warps)
    return c.reshape(b.shape)


def swiglu(a, b, *, block=None, num_warps=4):
    """c = silu(a)·b, one program per row, sigmoid = ``tl.sigmoid``.

    Precision plan: the module docstring's. Returns c in b's format and shape.
    """
    return _rows(a, b, "tl", block, num_warps)


def swiglu_explicit_sigmoid(a, b, *, block=None, num_warps=4):
    """As :func:`swiglu` with sigmoid written out as ``1.0 / (1.0 + tl.exp(-a))`` in fp32."""
    return _rows(a, b, "explicit", block, num_warps)


def swiglu_flat(a, b, *, block=1024, num_warps=4):
    """As :func:`swiglu`, elementwise over the flattened tensors, ``block`` elements a program."""
    _check(a, b)
    a1, b1 = a.contiguous().reshape(-1), b.contiguous().reshape(-1)
    c = torch.empty_like(b1)
    n = b1.numel()
    _swiglu_flat_kernel[(triton.cdiv(n, block),)](a1, b1, c, n, SIGMOID_FORM="tl", BLOCK=block,
                                                  num_warps=num_warps)
    return c.reshape(b.shape)
