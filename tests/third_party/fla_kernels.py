"""Adapters from numoracle's kernel signature (the reference's inputs as torch tensors,
the parameters as keywords, the outputs in the reference's order) to the Python launchers
of flash-linear-attention (package ``fla-core``).  Only the launchers are called: every
number comes from the library's own Triton kernels.

Imported by numoracle after it has chosen the backend (the operators in ``fla_ops`` name
these functions by ``module:function``), so fla's ``@triton.jit`` kernels are decorated
for the interpreter on a machine without a GPU."""

from __future__ import annotations

import warnings


with warnings.catch_warnings():
    # fla warns that it found no GPU driver ("roll back to CPU"); its kernels still run
    # under Triton's interpreter, which is what is judged here
    warnings.simplefilter("ignore")
    from fla.modules.activations import ops as _act
    from fla.modules.norm import l2norm as _l2
    from fla.modules.norm import layernorm as _ln
    from fla.ops.utils import logsumexp as _lse
    from fla.ops.utils import softmax as _sm


def layer_norm(x, w, b, *, eps=1e-5, affine=True):
    y, mean, rstd, _ = _ln.layer_norm_fwd(x, w if affine else None, b if affine else None, eps=eps)
    return y, mean, rstd


def layer_norm_residual(x, residual, w, b, *, eps=1e-5, affine=True):
    y, mean, rstd, res_out = _ln.layer_norm_fwd(x, w if affine else None, b if affine else None, eps=eps,
                                                residual=residual)
    return y, mean, rstd, res_out


def rms_norm(x, w, *, eps=1e-5, affine=True):
    y, _, rstd, _ = _ln.layer_norm_fwd(x, w if affine else None, None, eps=eps, is_rms_norm=True)
    return y, rstd


def rms_norm_residual(x, residual, w, *, eps=1e-5, affine=True):
    y, _, rstd, res_out = _ln.layer_norm_fwd(x, w if affine else None, None, eps=eps, residual=residual,
                                             is_rms_norm=True)
    return y, rstd, res_out


def layer_norm_backward(x, w, b, dy, *, eps=1e-5):
    """The forward (for the mean and rstd it saves), then the backward: (dx, dw, db)."""
    _, mean, rstd, _ = _ln.layer_norm_fwd(x, w, b, eps=eps)
    dx, dw, db, _ = _ln.layer_norm_bwd(dy, x, w, b, mean=mean, rstd=rstd)
    return dx, dw, db


def rms_norm_backward(x, w, dy, *, eps=1e-5):
    """The forward (for the rstd it saves), then the backward: (dx, dw)."""
    _, _, rstd, _ = _ln.layer_norm_fwd(x, w, None, eps=eps, is_rms_norm=True)
    dx, dw, _, _ = _ln.layer_norm_bwd(dy, x, w, None, rstd=rstd, is_rms_norm=True)
    return dx, dw


def l2norm(x, *, eps=1e-6):
    return _l2.l2norm_fwd(x, eps=eps)


def l2norm_backward(x, dy, *, eps=1e-6):
    """The forward (for the y and rstd it saves), then the backward: dx."""
    y, rstd = _l2.l2norm_fwd(x, eps=eps)
    return _l2.l2norm_bwd(y, rstd, dy, eps=eps)


def sigmoid(x):
    return _act.sigmoid_fwd(x)


def swish(x):
    return _act.swish_fwd(x)


def logsigmoid(x, *, temperature=1.0):
    return _act.logsigmoid_fwd(x, temperature=temperature)


def swiglu(x, y):
    return _act.swiglu_fwd(x, y)


def softmax(x):
    return _sm.softmax_fwd(x)


def logsumexp(x, *, scale=None):
    return _lse.logsumexp_fwd(x, scale=scale)
