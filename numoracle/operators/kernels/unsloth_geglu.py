"""GeGLU h = gelu(e)·g after Unsloth's precision plans (docs/operators.md row 11), forward and backward.

Unsloth keeps two kernels, one per GELU form (change pair 12 was the wrong form for a model):

* exact: f = 0.5·e·(erf((1/√2)·e) + 1), ``tl.math.erf``;
* approx: f = 0.5·e·(tanh(√(2/π)·e·(1 + 0.044715·e·e)) + 1), libdevice ``tanh``;

each evaluated left to right in fp32 after e→fp32, **f rounded to g's format, then × g in g's
format**, stored in g's format. Constants (1/√2 = 0.7071067811865476, √(2/π) =
0.7978845608028654, 0.044715, 1/√(2π) = 0.3989422804014327) are fp32 literals. Unsloth launches
these elementwise over the flattened tensors, BLOCK = 1024 elements a program.

Backward (dh, e, g → h, df, de), all in fp32 after widening (dh, e and g→fp32):

* exact: fp = 0.5·(erf((1/√2)·e) + 1); f = fp·e; df/de = fp + (1/√(2π))·e·exp(−0.5·e·e);
* approx: a = √(2/π)·e; b = a·0.044715·e·e; T = 1 + tanh(a + b); T2 = 0.5·T;
  df/de = T2 + (−T2·(T − 2)·(a + 3b)); f = T2·e;

then h = f·g, df = dh·f, de = (dh·g)·df/de, each stored once in the input's format.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ._common import as_rows, full_row_block, tanh_libdevice

FORMS = ("exact", "approx")


@triton.jit
def _gelu(e, FORM: tl.constexpr):
    if FORM == "exact":
        f = 0.5 * e * (tl.math.erf(0.7071067811865476 * e) + 1.0)
    else:
        f = 0.5 * e * (tanh_libdevice(0.7978845608028654 * e * (1.0 + 0.044715 * e * e)) + 1.0)
    return f


@triton.jit
def _fwd_flat_kernel(e_ptr, g_ptr, h_ptr, n_elements, FORM: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n_elements
    e = tl.load(e_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    g = tl.load(g_ptr + offs, mask=mask, other=0.0)
    tl.store(h_ptr + offs, _gelu(e, FORM).to(g.dtype) * g, mask=mask)


@triton.jit
def _fwd_row_kernel(e_ptr, g_ptr, h_ptr, n_cols, FORM: tl.constexpr, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    offs = row * n_cols + cols
    e = tl.load(e_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    g = tl.load(g_ptr + offs, mask=mask, other=0.0)
    tl.store(h_ptr + offs, _gelu(e, FORM).to(g.dtype) * g, mask=mask)


def _check(e, g, form):
    if form not in FORMS:
        raise ValueError(f"form must be one of {FORMS}, got {form!r}")
    if e.shape != g.shape:
        raise ValueError(f"e and g must have the same shape, got {tuple(e.shape)} and "
                         f"{tuple(g.shape)}")


def _forward(e, g, form, mapping, block, num_warps):
    _check(e, g, form)
    e2, g2 = as_rows(e), as_rows(g)
    h = torch.empty_like(g2)
    if mapping == "flat":
        n = g2.numel()
        _fwd_flat_kernel[(triton.cdiv(n, block),)](e2, g2, h, n, FORM=form, BLOCK=block,
                                                   num_warps=num_warps)
    else:
        n_rows, n_cols = g2.shape
        _fwd_row_kernel[(n_rows,)](e2, g2, h, n_cols, FORM=form,
                                   BLOCK=full_row_block(n_cols, block), num_warps=num_warps)
    return h.reshape(g.shape)


def geglu_exact(e, g, *, block=1024, num_warps=4):
    """Unsloth exact-GELU GeGLU forward, elementwise, ``block`` elements a program.
    Precision plan: the module docstring's. Returns h in g's format and shape."""
    return _forward(e, g, "exact", "flat", block, num_warps)


def geglu_exact_rows(e, g, *, num_warps=4):
    """As :func:`geglu_exact`, one program per row."""
    return _forward(e, g, "exact", "row", None, num_warps)


def geglu_exact_small_block(e, g, *, num_warps=2):
    """As :func:`geglu_exact` with 128-element blocks and 2 warps."""
    return _forward(e, g, "exact", "flat", 128, num_warps)


def geglu_approx(e, g, *, block=1024, num_warps=4):
    """Unsloth tanh-GELU GeGLU forward, elementwise, ``block`` elements a program.
    Precision plan: the module docstring's. Returns h in g's format and shape."""
    return _forward(e, g, "approx", "flat", block, num_warps)


def geglu_approx_rows(e, g, *, num_warps=4):
    """As :func:`geglu_approx`, one program per row."""
    return _forward(e, g, "approx", "row", None, num_warps)


def geglu_approx_small_block(e, g, *, num_warps=2):
    """As :func:`geglu_approx` with 128-element blocks and 2 warps."""
    return _forward(e, g, "approx", "flat", 128, num_warps)


# ------------------------------------------------------------------------------- backward

@triton.jit
def _bwd_math(dh, e, g, FORM: tl.constexpr):
    """(h, df, de) in fp32 from fp32 dh, e, g (the module docstring's order of operations)."""
    if FORM == "exact":
        fp = 0.5 * (tl.math.erf(0.7071067811865476 * e) + 1.0)
        f = fp * e
        dfde = fp + 0.3989422804014327 * e * tl.exp(-0.5 * e * e)
    else:
        a = 0.7978845608028654 * e
        b = a * 0.044715 * e * e
        T = 1.0 + tanh_libdevice(a + b)
        T2 = 0.5 * T
        q2 = -T2 * (T - 2.0) * (a + 3.0 * b)
        dfde = T2 + q2
        f = T2 * e
    return f * g, dh * f, (dh * g) * dfde


@triton.jit
def _bwd_flat_kernel(dh_ptr, e_ptr, g_ptr, h_ptr, df_ptr, de_ptr, n_elements, FORM: tl.constexpr,
                     BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n_elements
    dh = tl.load(dh_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    e = tl.load(e_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    g = tl.load(g_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    h, df, de = _bwd_math(dh, e, g, FORM)
    tl.store(h_ptr + offs, h, mask=mask)
    tl.store(df_ptr + offs, df, mask=mask)
    tl.store(de_ptr + offs, de, mask=mask)


@triton.jit
def _bwd_row_kernel(dh_ptr, e_ptr, g_ptr, h_ptr, df_ptr, de_ptr, n_cols, FORM: tl.constexpr,
                    BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    offs = row * n_cols + cols
    dh = tl.load(dh_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    e = tl.load(e_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    g = tl.load(g_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    h, df, de = _bwd_math(dh, e, g, FORM)
    tl.store(h_ptr + offs, h, mask=mask)
    tl.store(df_ptr + offs, df, mask=mask)
    tl.store(de_ptr + offs, de, mask=mask)


def _backward(dh, e, g, form, block, num_warps, mapping="flat"):
    _check(e, g, form)
    if dh.shape != g.shape:
        raise ValueError(f"dh must have g's shape {tuple(g.shape)}, got {tuple(dh.shape)}")
    dh2, e2, g2 = as_rows(dh), as_rows(e), as_rows(g)
    h, df, de = torch.empty_like(g2), torch.empty_like(g2), torch.empty_like(e2)
    if mapping == "flat":
        n = g2.numel()
        _bwd_flat_kernel[(triton.cdiv(n, block),)](dh2, e2, g2, h, df, de, n, FORM=form,
                                                   BLOCK=block, num_warps=num_warps)
    else:
        n_rows, n_cols = g2.shape
        _bwd_row_kernel[(n_rows,)](dh2, e2, g2, h, df, de, n_cols, FORM=form,
                                   BLOCK=full_row_block(n_cols, block), num_warps=num_warps)
    return h.reshape(g.shape), df.reshape(g.shape), de.reshape(e.shape)


def geglu_exact_backward(dh, e, g, *, block=1024, num_warps=4):
    """Unsloth exact GeGLU backward: returns ``(h, df, de)`` (Unsloth stores them over dh, e, g):
    h = gelu(e)·g, df = dh·gelu(e) (the gradient for g), de = dh·g·gelu'(e)."""
    return _backward(dh, e, g, "exact", block, num_warps)


def geglu_exact_backward_small_block(dh, e, g, *, num_warps=2):
    """As :func:`geglu_exact_backward` with 128-element blocks."""
    return _backward(dh, e, g, "exact", 128, num_warps)


def geglu_exact_backward_rows(dh, e, g, *, num_warps=4):
    """As :func:`geglu_exact_backward`, one program per row."""
    return _backward(dh, e, g, "exact", None, num_warps, mapping="row")


def geglu_approx_backward(dh, e, g, *, block=1024, num_warps=4):
    """Unsloth tanh-GELU GeGLU backward: returns ``(h, df, de)`` as
    :func:`geglu_exact_backward`."""
    return _backward(dh, e, g, "approx", block, num_warps)


def geglu_approx_backward_small_block(dh, e, g, *, num_warps=2):
    """As :func:`geglu_approx_backward` with 128-element blocks."""
    return _backward(dh, e, g, "approx", 128, num_warps)


def geglu_approx_backward_rows(dh, e, g, *, num_warps=4):
    """As :func:`geglu_approx_backward`, one program per row."""
    return _backward(dh, e, g, "approx", None, num_warps, mapping="row")
