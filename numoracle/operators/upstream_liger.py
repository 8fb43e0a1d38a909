"""Liger-Kernel's own Triton kernels (PyPI ``liger-kernel``, the optional extra
``liger``) as the ``"liger"`` kernel of our matching operators, and the
``kl_div`` operator with a reference written from Liger's precision plan.

Registered only when ``liger_kernel`` is importable.  Every adapter clones
its inputs (several Liger kernels work in place: RMSNorm with ``in_place``,
cross_entropy writes the gradient over the logits, rope rotates q and k) and
returns the outputs in the order of our reference program.  Liger's modules
are imported on first call, so that on the interpreter ``TRITON_INTERPRET`` is
set before Liger decorates its kernels.

Known differences between Liger 0.8.5 and docs/operators.md (findings,
see tests/test_liger.py):

* ``layer_norm``: Liger stores Mean and RSTD in **fp32**; docs/operators.md (and
  our reference) store them in x's format.  ``y`` is computed the same way.
* ``jsd``: Liger returns the summed loss cast to the input's format (bf16
  for bf16 inputs); the registered reference does the same since 16a34d1.
* ``cross_entropy``: only reduction='none' can be judged per row (Liger
  returns the host sum of the per-row losses for 'mean'/'sum').

Liger's bf16 softmax loads bf16 but ``tl.max`` promotes to fp32, so the
shift, exp, sum and division run in fp32, as our reference says.
"""

from __future__ import annotations

import importlib.util

import torch

from . import REGISTRY

AVAILABLE = importlib.util.find_spec("liger_kernel") is not None
VERSION = None
if AVAILABLE:
    try:
        from importlib.metadata import version as _version

        VERSION = _version("liger-kernel")
    except Exception:  # pragma: no cover
        VERSION = "unknown"


def _c(t):
    return t.clone() if isinstance(t, torch.Tensor) else t


# --------------------------------------------------------------------------
# Adapters: our reference's inputs/params in, our reference's outputs out
# --------------------------------------------------------------------------

def liger_rms_norm(x, w, *, eps=1e-6, offset=0.0, casting="llama"):
    from liger_kernel.ops.rms_norm import rms_norm_forward

    if casting == "llama" and offset and x.dtype != torch.float32:
        # a finding: Liger 0.8.5 pins the offset to fp32 (offset.to(tl.float32)), so under llama
        # casting offset + w, and the weight multiply with it, run in fp32; docs/operators.md's
        # llama plan adds in w's format and multiplies in x's format (alike for offset 0 only)
        raise NotImplementedError("Liger 0.8.5's llama casting adds a non-zero offset to w and multiplies "
                                  "in fp32, not in x's format: another plan than rms_norm's reference")
    y, _x, rstd, *_ = rms_norm_forward(_c(x), _c(w), eps, offset, casting, None)
    return y, rstd


def liger_layer_norm(x, w, b, *, eps=1e-5):
    from liger_kernel.ops.layer_norm import layer_norm_forward

    if x.dtype != torch.float32:
        # a finding, not a defect of the adapter: Liger 0.8.5 keeps Mean and RSTD in fp32 where
        # docs/operators.md's plan stores them in x's format (the backward reloads them); its y is
        # judged by tests/test_liger.py on its own
        raise NotImplementedError("Liger 0.8.5's layer_norm stores mean/rstd in fp32, not in x's "
                                  f"format ({x.dtype}): another plan than layer_norm's reference")
    y, _x, mean, rstd, *_ = layer_norm_forward(_c(x), _c(w), _c(b), eps)
    return y, mean, rstd


def liger_swiglu(a, b):
    from liger_kernel.ops.swiglu import swiglu_forward

    return swiglu_forward(_c(a), _c(b))[2]


def liger_geglu(a, b, *, approximate="tanh"):
    if approximate != "tanh":
        raise NotImplementedError(f"Liger's geglu kernel implements the tanh form only, not approximate={approximate!r}")
    from liger_kernel.ops.geglu import geglu_forward

    return geglu_forward(_c(a), _c(b))[2]


def liger_softmax(x):
    from liger_kernel.ops.softmax import _softmax_forward

    return _softmax_forward(_c(x))[0]


def liger_cross_entropy(logits, labels, *, ignore_index=-100, reduction="mean"):
    """Per-row losses in the logits' format (our reference's output).  Only
    reduction='none' exposes them: for 'mean'/'sum' Liger's kernel writes the
    per-row losses (divided by the non-ignored count for 'mean') to a buffer
    the host then sums into one scalar, which our per-row reference does not
    describe."""
    if reduction != "none":
        raise NotImplementedError(f"the liger cross_entropy adapter judges per-row losses: reduction='none' only, "
                         f"not {reduction!r} (Liger returns the host sum of the per-row losses for it)")
    from liger_kernel.ops.cross_entropy import cross_entropy_forward

    loss, *_ = cross_entropy_forward(_c(logits), _c(labels), None, ignore_index, 0.0, 0.0, reduction, None, False)
    return loss


def liger_rope(q, k, cos, sin):
    """Our rope operator's layout: q [B, T, Hq, D], k [B, T, Hk, D]; Liger's
    ``rope_forward`` takes the logical [B, H, T, D] view of the same storage,
    rotates in place and returns that view."""
    from liger_kernel.ops.rope import rope_forward

    qo, ko, *_ = rope_forward(_c(q).transpose(1, 2), _c(k).transpose(1, 2), _c(cos), _c(sin))
    return qo.transpose(1, 2).contiguous(), ko.transpose(1, 2).contiguous()


def liger_jsd(x, y, labels, *, beta=0.5, ignore_index=-100):
    """Our jsd operator's outputs (loss, dx).  Liger returns the loss cast to
    the input's format (fp32 host sum, then ``.to(input.dtype)``)."""
    from liger_kernel.ops.jsd import jsd_forward

    loss, dx = jsd_forward(_c(x), _c(y), _c(labels), beta, ignore_index, True)
    return loss, dx


def liger_kl_div(y_pred, y_true, *, reduction="batchmean", eps=1e-10, log_target=False):
    from liger_kernel.ops.kl_div import kldiv_forward_triton

    return kldiv_forward_triton(_c(y_pred), _c(y_true), log_target, reduction, eps)


# --------------------------------------------------------------------------
# Registration
# --------------------------------------------------------------------------

_M = __name__ + ":"
ADAPTERS = {
    "rms_norm": _M + "liger_rms_norm",
    "layer_norm": _M + "liger_layer_norm",
    "swiglu": _M + "liger_swiglu",
    "geglu": _M + "liger_geglu",
    "cross_entropy": _M + "liger_cross_entropy",
    "softmax": _M + "liger_softmax",
    "rope": _M + "liger_rope",          # attached when ops_liger registered the operator
    "jsd": _M + "liger_jsd",
    "kl_div": _M + "liger_kl_div",
}


def _attach(name: str, spec: str) -> bool:
    op = REGISTRY.get(name)
    if op is None:
        return False
    op.attach("liger", spec)
    op._kernels = None
    return True


ATTACHED: list = []
if AVAILABLE:
    for _name, _spec in ADAPTERS.items():
        if _attach(_name, _spec):
            ATTACHED.append(_name)
