"""GeGLU forward c = gelu(a)·b after Liger-Kernel (row 4) and Unsloth (row 11) precision plans.

Precision plan: a→fp32; gelu(a) in fp32, evaluated left to right as written:

* ``approximate="tanh"``: z = √(2/π)·(a + 0.044715·(a·a·a)), t = tanh(z) from libdevice,
  g = 0.5·a·(1 + t), with √(2/π) = 0.7978845608028654 as an fp32 constant;
* ``approximate="none"``: g = 0.5·a·(1 + erf(a·(1/√2))) with ``tl.math.erf`` (a core Triton op,
  not libdevice) and 1/√2 = 0.7071067811865476 as an fp32 constant;

then **g rounded to b's format and multiplied by b in b's format**; stored in b's format.
For a ≲ −5 (tanh form) fp32 tanh(z) rounds to −1, so g is 0 rather than a tiny negative value.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ._common import as_rows, full_row_block, tanh_libdevice, tanh_sigmoid

SQRT_2_OVER_PI = tl.constexpr(0.7978845608028654)
GELU_CUBIC = tl.constexpr(0.044715)
INV_SQRT_2 = tl.constexpr(0.7071067811865476)


@triton.jit
def _gelu(a, FORM: tl.constexpr):
    if FORM == "erf":
        g = 0.5 * a * (1.0 + tl.math.erf(a * INV_SQRT_2))
    else:
        z = SQRT_2_OVER_PI * (a + GELU_CUBIC * (a * a * a))
        if FORM == "tanh":
            t = tanh_libdevice(z)
        else:
            t = tanh_sigmoid(z)
        g = 0.5 * a * (1.0 + t)
    return g


@triton.jit
def _geglu_row_kernel(a_ptr, b_ptr, c_ptr, n_cols, FORM: tl.constexpr, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    offs = row * n_cols + cols
    a = tl.load(a_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    b = tl.load(b_ptr + offs, mask=mask, other=0.0)
    tl.store(c_ptr + offs, _gelu(a, FORM).to(b.dtype) * b, mask=mask)


def _launch(a, b, form, block, num_warps):
    if a.shape != b.shape:
        raise ValueError(f"a and b must have the same shape, got {tuple(a.shape)} and "
                         f"{tuple(b.shape)}")
    a2, b2 = as_rows(a), as_rows(b)
    c = torch.empty_like(b2)
    n_rows, n_cols = b2.shape
    _geglu_row_kernel[(n_rows,)](a2, b2, c, n_cols, FORM=form,
                                 BLOCK=full_row_block(n_cols, block), num_warps=num_warps)
    return c.reshape(b.shape)


def geglu(a, b, approximate="tanh", *, block=None, num_warps=4):
    """c = gelu(a)·b, one program per row.

    Precision plan: the module docstring's; ``approximate`` is ``"tanh"`` (libdevice ``tanh``;
    needs a GPU, or the interpreter repaired by ``numoracle.backends.interpreter.install()``)
    or ``"none"`` (``tl.math.erf``). Returns c in b's format and shape.
    """
    if approximate not in ("tanh", "none"):
        raise ValueError(f"approximate must be 'tanh' or 'none', got approximate={approximate!r}")
    return _launch(a, b, "tanh" if approximate == "tanh" else "erf", block, num_warps)


def geglu_sigmoid_form(a, b, *, block=None, num_warps=4):
    """As ``geglu(a, b, "tanh")`` with tanh(z) evaluated as 2·sigmoid(2z) − 1 in fp32
    (``tl.sigmoid``, so fp32 ``exp``); needs no libdevice."""
    return _launch(a, b, "sigmoid", block, num_warps)


def geglu_one_warp(a, b, approximate="tanh", *, block=None):
    """As :func:`geglu` with one warp per program (the row's lanes split over 32 threads)."""
    return geglu(a, b, approximate, block=block, num_warps=1)


def geglu_wide_block(a, b, approximate="tanh", *, num_warps=8):
    """As :func:`geglu` with a BLOCK twice the row's next power of two (more masked lanes)."""
    n = a.shape[-1]
    return geglu(a, b, approximate, block=2 * triton.next_power_of_2(n), num_warps=num_warps)
