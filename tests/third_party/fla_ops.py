"""flash-linear-attention's row-wise Triton kernels as numoracle operators, with reference
programs written from the library's sources (fla-core 0.6.0: ``fla/modules/norm/layernorm.py``,
``l2norm.py``, ``fla/modules/activations/ops.py``, ``fla/ops/utils/softmax.py``,
``logsumexp.py``) and their Triton IR.  Judge one with, from the repository root::

    numoracle check tests.third_party.fla_ops:rms_norm_op --backend interpreter

What each kernel does to a value, as read from its source (every kernel loads its inputs and
widens them to fp32 with ``.to(tl.float32)`` unless said otherwise):

* layer_norm_fwd (``layer_norm_fwd_kernel`` for D <= 512, a tile of BT rows per program with
  BT autotuned; ``layer_norm_fwd_kernel_row`` above, one row per program): x (+ residual, an
  fp32 add; the sum stored in the residual's format), mean = sum(x) / D, var =
  sum((x - mean)^2) / D, rstd = ``1 / tl.sqrt(var + eps)`` (a square root and a division,
  not rsqrt), y = (x - mean)·rstd·w + b in fp32, stored in x's format; mean and rstd stored
  in fp32.  RMSNorm: no mean, var = sum(x^2) / D, y = x·rstd·w.  The tile size changes only
  which rows a program holds, not the order of a row's reduction.
* layer_norm_bwd: x̂ = (x - mean)·rstd recomputed from x and the stored fp32 mean and rstd;
  wdy = dy·w; c1 = sum(x̂·wdy) / D, c2 = sum(wdy) / D; dx = (wdy - (x̂·c1 + c2))·rstd in x's
  format; dw = sum over rows of dy·x̂ (per program in fp32, then the programs' partial sums
  added by torch in fp32) rounded to w's format; db likewise from dy.  RMSNorm: c2 absent.
* l2norm_fwd: rstd = 1 / tl.sqrt(sum(x^2) + eps) (eps added to the sum, not the mean),
  y = x·rstd in x's format, rstd in fp32.  l2norm_bwd uses the *stored* y (x's format):
  dx = dy·rstd - sum(dy·y)·y·rstd.
* activations: sigmoid, swish x·sigmoid(x), swiglu x·sigmoid(x)·y, logsigmoid
  (min(0, x) - log(1 + exp(-|x|))) / temperature, each in fp32 and rounded once at the store.
* softmax_fwd: x is **not** widened on load; ``tl.max`` of a 16-bit row promotes it to fp32
  (Triton's ``max`` widens sub-32-bit floats), so x - max is an fp32 subtraction; exp, sum
  and the division in fp32; the output is fp32 (the launcher's default dtype).
* logsumexp_fwd: x·scale (fp32, the scale a runtime fp32 argument) when a scale is given,
  m = max, log(sum(exp(x - m))) + m in fp32, one fp32 output per row (torch's logsumexp of
  the single block it reduces is the identity).
"""

from __future__ import annotations

import torch

import numoracle as no
from numoracle.formats import fp32
from numoracle.strategies import fill

_K = "tests.third_party.fla_kernels:"
FORMATS = ("bf16", "fp16", "fp32")


# ---------------------------------------------------------------------------------- references

@no.reference(outputs=("y", "mean", "rstd"))
def layer_norm(x, w, b, *, eps=1e-5, affine=True):
    xf = x.to(fp32)
    mean = no.mean(xf, axis=-1, keepdims=True)
    xbar = xf - mean
    var = no.mean(xbar * xbar, axis=-1, keepdims=True)
    rstd = 1.0 / no.sqrt(var + eps)
    y = xbar * rstd
    if affine:
        y = y * w.to(fp32) + b.to(fp32)
    return y.to(x.format), mean.squeeze(-1), rstd.squeeze(-1)


@no.reference(outputs=("y", "mean", "rstd", "residual_out"))
def layer_norm_residual(x, residual, w, b, *, eps=1e-5, affine=True):
    h = x.to(fp32) + residual.to(fp32)
    mean = no.mean(h, axis=-1, keepdims=True)
    hbar = h - mean
    var = no.mean(hbar * hbar, axis=-1, keepdims=True)
    rstd = 1.0 / no.sqrt(var + eps)
    y = hbar * rstd
    if affine:
        y = y * w.to(fp32) + b.to(fp32)
    return y.to(x.format), mean.squeeze(-1), rstd.squeeze(-1), h.to(residual.format)


@no.reference(outputs=("y", "rstd"))
def rms_norm(x, w, *, eps=1e-5, affine=True):
    xf = x.to(fp32)
    var = no.mean(xf * xf, axis=-1, keepdims=True)
    rstd = 1.0 / no.sqrt(var + eps)
    y = xf * rstd
    if affine:
        y = y * w.to(fp32)
    return y.to(x.format), rstd.squeeze(-1)


@no.reference(outputs=("y", "rstd", "residual_out"))
def rms_norm_residual(x, residual, w, *, eps=1e-5, affine=True):
    h = x.to(fp32) + residual.to(fp32)
    var = no.mean(h * h, axis=-1, keepdims=True)
    rstd = 1.0 / no.sqrt(var + eps)
    y = h * rstd
    if affine:
        y = y * w.to(fp32)
    return y.to(x.format), rstd.squeeze(-1), h.to(residual.format)


@no.reference(outputs=("dx", "dw", "db"))
def layer_norm_backward(x, w, b, dy, *, eps=1e-5):
    xf, dyf = x.to(fp32), dy.to(fp32)
    mean = no.mean(xf, axis=-1, keepdims=True)       # the forward's fp32 mean and rstd, read back
    xbar = xf - mean
    rstd = 1.0 / no.sqrt(no.mean(xbar * xbar, axis=-1, keepdims=True) + eps)
    xhat = xbar * rstd          # x - mean recomputed: the same fp32 value, so the same tracked one
    wdy = dyf * w.to(fp32)
    c1 = no.mean(xhat * wdy, axis=-1, keepdims=True)
    c2 = no.mean(wdy, axis=-1, keepdims=True)
    dx = (wdy - (xhat * c1 + c2)) * rstd
    return dx.to(x.format), no.sum(dyf * xhat, axis=0).to(w.format), no.sum(dyf, axis=0).to(b.format)


@no.reference(outputs=("dx", "dw"))
def rms_norm_backward(x, w, dy, *, eps=1e-5):
    xf, dyf = x.to(fp32), dy.to(fp32)
    rstd = 1.0 / no.sqrt(no.mean(xf * xf, axis=-1, keepdims=True) + eps)
    xhat = xf * rstd
    wdy = dyf * w.to(fp32)
    dx = (wdy - xhat * no.mean(xhat * wdy, axis=-1, keepdims=True)) * rstd
    return dx.to(x.format), no.sum(dyf * xhat, axis=0).to(w.format)


@no.reference(outputs=("y", "rstd"))
def l2norm(x, *, eps=1e-6):
    xf = x.to(fp32)
    rstd = 1.0 / no.sqrt(no.sum(xf * xf, axis=-1, keepdims=True) + eps)
    return (xf * rstd).to(x.format), rstd.squeeze(-1)


@no.reference(outputs=("dx",))
def l2norm_backward(x, dy, *, eps=1e-6):
    xf, dyf = x.to(fp32), dy.to(fp32)
    rstd = 1.0 / no.sqrt(no.sum(xf * xf, axis=-1, keepdims=True) + eps)
    y = (xf * rstd).to(x.format).to(fp32)            # the forward's stored y, read back
    dx = dyf * rstd - no.sum(dyf * y, axis=-1, keepdims=True) * y * rstd
    return dx.to(x.format)


@no.reference
def sigmoid(x):
    return no.sigmoid(x.to(fp32)).to(x.format)


@no.reference
def swish(x):
    xf = x.to(fp32)
    return (xf * no.sigmoid(xf)).to(x.format)


@no.reference
def swiglu(x, y):
    xf = x.to(fp32)
    return (xf * no.sigmoid(xf) * y.to(fp32)).to(x.format)


@no.reference
def logsigmoid(x, *, temperature=1.0):
    xf = x.to(fp32)
    z = 1.0 + no.exp(-abs(xf))
    return ((no.minimum(0.0, xf) - no.log(z)) / temperature).to(x.format)


@no.reference
def softmax(x):
    xf = x.to(fp32)                                  # tl.max widens; x - max is fp32
    e = no.exp(xf - no.max(xf, axis=-1, keepdims=True))
    return e / no.sum(e, axis=-1, keepdims=True)


@no.reference
def logsumexp(x, *, scale=None):
    xf = x.to(fp32)
    if scale is not None:
        xf = xf * scale
    m = no.max(xf, axis=-1, keepdims=True)
    return (no.log(no.sum(no.exp(xf - m), axis=-1, keepdims=True)) + m).squeeze(-1)


# ------------------------------------------------------------------------------- example inputs

def _rows(seed, dtype, family, rows, cols):
    return fill((rows, cols), family, seed, dtype=dtype)


def _affine(seed, dtype, cols, mean):
    return (mean + 0.1 * fill((cols,), "normal", seed, dtype=torch.float32)).to(dtype)


def _ex_x(seed, dtype, family, rows, cols):
    return (_rows(seed, dtype, family, rows, cols),), {}


def _ex_xy(seed, dtype, family, rows, cols):
    return (_rows(seed, dtype, family, rows, cols), _rows(seed + 1, dtype, family, rows, cols)), {}


def _ex_xwb(seed, dtype, family, rows, cols):
    return (_rows(seed, dtype, family, rows, cols), _affine(seed + 2, dtype, cols, 1.0),
            _affine(seed + 3, dtype, cols, 0.0)), {}


def _ex_xrwb(seed, dtype, family, rows, cols):
    return (_rows(seed, dtype, family, rows, cols), _rows(seed + 1, dtype, family, rows, cols),
            _affine(seed + 2, dtype, cols, 1.0), _affine(seed + 3, dtype, cols, 0.0)), {}


def _ex_xw(seed, dtype, family, rows, cols):
    return (_rows(seed, dtype, family, rows, cols), _affine(seed + 2, dtype, cols, 1.0)), {}


def _ex_xrw(seed, dtype, family, rows, cols):
    return (_rows(seed, dtype, family, rows, cols), _rows(seed + 1, dtype, family, rows, cols),
            _affine(seed + 2, dtype, cols, 1.0)), {}


def _ex_xwbdy(seed, dtype, family, rows, cols):
    (x, w, b), _ = _ex_xwb(seed, dtype, family, rows, cols)
    return (x, w, b, fill((rows, cols), "normal", seed + 4, dtype=dtype)), {}


def _ex_xwdy(seed, dtype, family, rows, cols):
    (x, w), _ = _ex_xw(seed, dtype, family, rows, cols)
    return (x, w, fill((rows, cols), "normal", seed + 4, dtype=dtype)), {}


def _ex_xdy(seed, dtype, family, rows, cols):
    return (_rows(seed, dtype, family, rows, cols), fill((rows, cols), "normal", seed + 4, dtype=dtype)), {}


# ---------------------------------------------------------------------------------- operators

# D up to 1024 reaches both layer-norm kernels (the tile kernel up to 512, the row kernel above)
_NORM = dict(rows=(1, 64), cols=(1, 1024), formats=FORMATS)
_AFFINE = {"eps": (1e-5, 1e-6), "affine": (True, False)}


def _op(name, reference, kernel, example, **domain):
    return no.Operator(f"fla_{name}", reference, {"correct": _K + kernel}, example,
                       domain=no.Domain(**{**_NORM, **domain}), source="fla")


layer_norm_op = _op("layer_norm", layer_norm, "layer_norm", _ex_xwb, params=_AFFINE)
layer_norm_residual_op = _op("layer_norm_residual", layer_norm_residual, "layer_norm_residual", _ex_xrwb,
                             params=_AFFINE)
rms_norm_op = _op("rms_norm", rms_norm, "rms_norm", _ex_xw, params=_AFFINE)
rms_norm_residual_op = _op("rms_norm_residual", rms_norm_residual, "rms_norm_residual", _ex_xrw, params=_AFFINE)
layer_norm_backward_op = _op("layer_norm_backward", layer_norm_backward, "layer_norm_backward", _ex_xwbdy,
                             params={"eps": (1e-5,)})
rms_norm_backward_op = _op("rms_norm_backward", rms_norm_backward, "rms_norm_backward", _ex_xwdy,
                           params={"eps": (1e-5,)})
l2norm_op = _op("l2norm", l2norm, "l2norm", _ex_x, params={"eps": (1e-6,)})
l2norm_backward_op = _op("l2norm_backward", l2norm_backward, "l2norm_backward", _ex_xdy, params={"eps": (1e-6,)})
sigmoid_op = _op("sigmoid", sigmoid, "sigmoid", _ex_x)
swish_op = _op("swish", swish, "swish", _ex_x)
swiglu_op = _op("swiglu", swiglu, "swiglu", _ex_xy)
logsigmoid_op = _op("logsigmoid", logsigmoid, "logsigmoid", _ex_x, params={"temperature": (1.0, 3.0)})
softmax_op = _op("softmax", softmax, "softmax", _ex_x)
logsumexp_op = _op("logsumexp", logsumexp, "logsumexp", _ex_x, params={"scale": (None, 0.08838834764831845)})

OPERATORS = (layer_norm_op, layer_norm_residual_op, rms_norm_op, rms_norm_residual_op, layer_norm_backward_op,
             rms_norm_backward_op, l2norm_op, l2norm_backward_op, sigmoid_op, swish_op, swiglu_op, logsigmoid_op, softmax_op,
             logsumexp_op)
