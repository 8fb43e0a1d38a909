"""Reference programs of the operators' precision plans (docs/operators.md).

Each program states, in order, every rounding the upstream kernel performs:
widenings (exact), fp32 arithmetic, reductions with their order model, math
calls, early downcasts and the final store.
"""

from __future__ import annotations

import torch

import numoracle as no
from numoracle.formats import fp32


@no.reference
def rms_norm_llama(x, w, *, eps=1e-6, offset=0.0):
    """Liger/Unsloth Llama casting: x -> fp32, rstd in fp32, x*rstd rounded to
    x's format *before* the weight multiply, which runs in x's format."""
    xf = x.to(fp32)
    ms = no.mean(xf * xf, axis=-1, keepdims=True)
    r = no.rsqrt(ms + eps)
    wo = w + offset if offset else w
    return (xf * r).to(x.format) * wo


@no.reference
def rms_norm_gemma(x, w, *, eps=1e-6, offset=1.0):
    """Gemma casting: x and w -> fp32, everything in fp32, one rounding at the store."""
    xf = x.to(fp32)
    ms = no.mean(xf * xf, axis=-1, keepdims=True)
    r = no.rsqrt(ms + eps)
    return (xf * r * (w.to(fp32) + offset)).to(x.format)


@no.reference
def layer_norm(x, w, b, *, eps=1e-5):
    """Liger LayerNorm: fp32 statistics (two-pass variance), y stored in x's
    format; mean and rstd are stored in x's format too."""
    xf = x.to(fp32)
    mu = no.mean(xf, axis=-1, keepdims=True)
    d = xf - mu
    var = no.mean(d * d, axis=-1, keepdims=True)
    rstd = no.rsqrt(var + eps)
    y = d * rstd * w.to(fp32) + b.to(fp32)
    return y.to(x.format), mu.to(x.format), rstd.to(x.format)


@no.reference
def softmax(x):
    """Row softmax: x -> fp32, max-shifted exp, fp32 sum, division, stored in x's format."""
    xf = x.to(fp32)
    m = no.max(xf, axis=-1, keepdims=True)
    e = no.exp(xf - m)
    s = no.sum(e, axis=-1, keepdims=True)
    return (e / s).to(x.format)


@no.reference
def swiglu(a, b):
    """Liger SwiGLU: silu(a) in fp32, rounded to b's format, then x b in that format."""
    af = a.to(fp32)
    silu = af * no.sigmoid(af)
    return silu.to(b.format) * b


@no.reference
def cross_entropy_loss(logits, labels):
    """Per-row loss lse - x_y in fp32, with lse from an exp2-based online
    logsumexp (Liger's plan), every logit widened to fp32 first."""
    xf = logits.to(fp32)
    lse = no.logsumexp(xf, axis=-1, exp="exp2")
    return lse - no.gather(xf, labels, axis=-1)


@no.reference(outputs=("y", "rstd"))
def rms_norm(x, w, *, eps=1e-6, offset=0.0, casting="llama"):
    """Liger's RMSNorm forward in its three casting modes; outputs (y, rstd)
    with rstd kept in fp32 (llama, gemma) as the backward reloads it."""
    xf = x.to(fp32)
    if casting == "none":
        ms = no.sum(x * x, axis=-1, keepdims=True)      # squares and sum in x's format
        r = no.rsqrt(((ms.to(fp32) / x.shape[-1]).to(x.format) + eps).to(fp32)).to(x.format)
        return (x * r) * (w + offset if offset else w), r.squeeze(-1)
    ms = no.mean(xf * xf, axis=-1, keepdims=True)
    r = no.rsqrt(ms + eps)
    if casting == "gemma":
        return (xf * r * (w.to(fp32) + offset)).to(x.format), r.squeeze(-1)
    wo = (w + offset) if offset else w
    return (xf * r).to(x.format) * wo.to(x.format), r.squeeze(-1)


@no.reference
def layer_norm_fwd(x, w, b, *, eps=1e-5):
    """layer_norm with the statistics per row, as the kernel stores them."""
    y, mu, rstd = layer_norm.fn(x, w, b, eps=eps)
    return y, mu.squeeze(-1), rstd.squeeze(-1)


@no.reference(params={"approximate": ("tanh", "none")})
def geglu(a, b, *, approximate="tanh"):
    """Liger GeGLU: gelu(a) in fp32 (tanh form, or erf for approximate='none'),
    rounded to b's format, then x b in that format."""
    af = a.to(fp32)
    if approximate == "none":
        g = 0.5 * af * (1.0 + no.erf(af * 0.7071067811865476))
    else:
        z = 0.7978845608028654 * (af + 0.044715 * af * af * af)
        g = 0.5 * af * (1.0 + no.tanh(z))
    return g.to(b.format) * b


def kept_rows(keep):
    """The kernel's divisor for a "mean": the count of kept rows (at least 1), which Liger
    passes as a Python float, so an fp32 argument.  A torch tensor, not a Python number:
    reading it to the host would stall a GPU verdict and split its compiled trace."""
    return keep.sum().clamp(min=1).to(torch.float32)


@no.reference
def cross_entropy(logits, labels, *, ignore_index=-100, reduction="mean"):
    """Liger CE forward without smoothing: per-row lse - x_y in fp32 (divided by
    the non-ignored row count for 'mean'), 0 on ignored rows, stored in the
    logits' format."""
    xf = logits.to(fp32)
    keep = labels != ignore_index
    lse = no.logsumexp(xf, axis=-1, exp="exp2")
    loss = lse - no.gather(xf, torch.where(keep, labels, 0), axis=-1)
    if reduction == "mean":
        loss = no.div(loss, kept_rows(keep))
    return no.where(keep, loss, 0.0).to(logits.format)


@no.reference
def kl_div(y_pred, y_true, *, reduction="batchmean", eps=1e-10, log_target=False):
    """Liger KLDiv forward: y_pred (log-probabilities) and y_true widened to
    fp32; per element y_true*(log(max(y_true, eps)) - y_pred) (or
    exp(y_true)*(y_true - y_pred) with log_target) in fp32; 'none' stores
    that (fp32); otherwise each row is summed in fp32 in the kernel and the
    row sums are summed on the host in fp32, then divided by the row count
    ('batchmean') or the element count ('mean'); 'sum' sums over rows."""
    y = y_pred.to(fp32)
    t = y_true.to(fp32)
    if log_target:
        loss = no.exp(t) * (t - y)
    else:
        loss = t * (no.log(no.maximum(t, eps)) - y)
    if reduction == "none":
        return loss
    total = no.sum(no.sum(loss, axis=-1), axis=-1)
    rows, cols = y_pred.shape
    if reduction == "batchmean":
        return total / float(rows)
    if reduction == "mean":
        return total / float(rows * cols)
    return total


# ---- programs of numoracle's soundness campaign (numoracle.selftest.programs), no operator's

@no.reference
def masked_attention(q, k, v):
    """Attention of each query row over the key rows it may see (causal, aligned at the last
    key; key 0 always), the others -inf: logits from a dot, so with errors of their own, less
    their row's maximum, exp of -inf exactly 0 (the calculus's exact infinities)."""
    n, m = q.shape[-2], k.shape[-2]
    i, j = torch.arange(n).unsqueeze(1), torch.arange(m).unsqueeze(0)
    visible = (j <= i + (m - n)) | (j == 0)
    s = no.where(visible, no.matmul(q, k.transpose(-1, -2), acc=fp32) * 0.25, float("-inf"))
    p = no.exp(s - no.max(s, axis=-1, keepdims=True))
    o = no.matmul(p.to(v.format), v, acc=fp32)
    return (o / no.sum(p, axis=-1, keepdims=True)).to(q.format)
