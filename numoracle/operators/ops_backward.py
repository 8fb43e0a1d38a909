"""Backward passes of the Liger operators (docs/operators.md rows 1-4 and 6), each registered as
its own operator: reference program, correct kernel, behaviour-preserving variants, domain,
example inputs, and the faulty kernels of the change pairs that concern a backward pass.

A host-side reduction over rows (dW = the fp32 sum of per-program fp32 partial rows, then one
cast) is modelled as an fp32 sum over axis 0 under the "any" order model, which covers every
split of the rows into programs and every order of the host's sum; then the cast.
"""

from __future__ import annotations

import torch

import numoracle as no
from numoracle.errors import InvalidArgument
from numoracle.formats import fp32
from numoracle.operators import REGISTRY, Domain, Operator, _register
from numoracle.operators.references import kept_rows
from numoracle.families import fill

_K = "numoracle.operators.kernels."
LOG2E = 1.4426950408889634
SQRT_2_OVER_PI = 0.7978845608028654
GELU_CUBIC = 0.044715
GELU_CUBIC_3 = 0.134145      # 3 x 0.044715, one constant as the kernel folds it


# ---------------------------------------------------------------------------------- references

def _host_sum(part):
    """fp32 partial rows summed over axis 0 in fp32, in any order and any split into programs."""
    return no.sum(part, axis=0, order="any")


@no.reference
def rms_norm_backward(dy, x, w, rstd, *, offset=0.0, casting="llama"):
    """Liger RMSNorm backward (llama / gemma casting): outputs (dx in x's format, dw in w's).

    rstd is the forward's fp32 rstd per row (an exact input here).  m = dy·w_eff with
    w_eff = offset + w in w's format (llama) or in fp32 (gemma); c = sum(m·x)/n;
    dx = rstd·m − (rstd·rstd·rstd·c)·x in fp32; dW = host sum of dy·x̂, x̂ = x·rstd rounded to
    x's format first for llama (the value the forward multiplied w by)."""
    if casting not in ("llama", "gemma"):
        raise InvalidArgument(f"rms_norm_backward models casting='llama' or 'gemma', got "
                              f"casting={casting!r} (the 'none' mode keeps rstd in x's format and "
                              f"has no backward plan here).")
    xf, dyf = x.to(fp32), dy.to(fp32)
    r = rstd.to(fp32).unsqueeze(-1)
    if casting == "gemma":
        w_eff = w.to(fp32) + offset
    else:
        w_eff = (w + offset if offset else w).to(fp32)
    m = dyf * w_eff
    c = no.mean(m * xf, axis=-1, keepdims=True)
    dx = r * m - (r * r * r * c) * xf
    xhat = xf * r
    if casting == "llama":
        xhat = xhat.to(x.format).to(fp32)
    dw = _host_sum(dyf * xhat)
    return dx.to(x.format), dw.to(w.format)


@no.reference(outputs=("dx", "dw", "db"))
def layer_norm_backward(dy, x, w, mean, rstd):
    """Liger LayerNorm backward: outputs (dx in x's format, dw and db in w's format).

    mean and rstd are the forward's statistics stored in x's format (exact inputs here),
    widened to fp32.  x̂ = (x − mean)·rstd; wdy = w·dy; c1 = sum(x̂·wdy)/n; c2 = sum(wdy)/n;
    dx = (wdy − (x̂·c1 + c2))·rstd in fp32; dW, dB = host sums of dy·x̂ and dy."""
    xf, dyf, wf = x.to(fp32), dy.to(fp32), w.to(fp32)
    mu = mean.to(fp32).unsqueeze(-1)
    r = rstd.to(fp32).unsqueeze(-1)
    xhat = (xf - mu) * r
    wdy = wf * dyf
    c1 = no.mean(xhat * wdy, axis=-1, keepdims=True)
    c2 = no.mean(wdy, axis=-1, keepdims=True)
    dx = (wdy - (xhat * c1 + c2)) * r
    return dx.to(x.format), _host_sum(dyf * xhat).to(w.format), _host_sum(dyf).to(w.format)


@no.reference
def swiglu_backward(dc, a, b):
    """Liger SwiGLU backward: outputs (da in a's format, db in b's).  σ = sigmoid(a) and
    silu = a·σ recomputed in fp32; db = dc·silu; da = dc·(silu·(1 − σ) + σ)·b left to right;
    dc and b enter the fp32 products by promotion (an exact widening)."""
    af = a.to(fp32)
    sig = no.sigmoid(af)
    silu = af * sig
    dcf = dc.to(fp32)
    db = dcf * silu
    da = dcf * (silu * (1.0 - sig) + sig) * b.to(fp32)
    return da.to(a.format), db.to(b.format)


@no.reference
def geglu_backward(dc, a, b):
    """Liger GeGLU (tanh) backward, the corrected form: gelu(a) in fp32 rounded to dc's format
    and back before db = dc·gelu; da = (dc·b in the input format)·(term1 + term2) with the
    tanh-gelu derivative in fp32; outputs (da in a's format, db in b's)."""
    af = a.to(fp32)
    z = SQRT_2_OVER_PI * (af + GELU_CUBIC * (af * af * af))
    t = no.tanh(z)
    g = (0.5 * af * (1.0 + t)).to(dc.format).to(fp32)
    db = dc.to(fp32) * g
    term1 = 0.5 * (1.0 + t)
    term2 = 0.5 * af * (1.0 - t * t) * (SQRT_2_OVER_PI * (1.0 + GELU_CUBIC_3 * af * af))
    da = (dc * b) * (term1 + term2)
    return da.to(a.format), db.to(b.format)


@no.reference(params={"reduction": ("mean", "sum", "none")})
def cross_entropy_backward(logits, labels, grad_output, *, ignore_index=-100, reduction="mean"):
    """Liger CE gradient with respect to the logits, times grad_output (no smoothing, z-loss or
    softcap).  p = exp2((x − m)·log2e)/d in fp32 (m the row max, d the row sum); at the label
    p − 1 in fp32 (the corrected change pair 1); / the non-ignored count for "mean" only, never
    0 (change pair 8); ignored rows 0; rounded to the logits' format (written over the logits);
    then widened, × grad_output (per row for "none", change pair 9) in fp32 and rounded again."""
    xf = logits.to(fp32)
    m = no.max(xf, axis=-1, keepdims=True)
    e = no.exp2((xf - m) * LOG2E)
    p = e / no.sum(e, axis=-1, keepdims=True)
    classes = torch.arange(xf.shape[-1], device=labels.device)
    g = no.where(classes[None, :] == labels[:, None], p - 1.0, p)
    keep = labels != ignore_index
    if reduction == "mean":
        g = no.div(g, kept_rows(keep))
    g = no.where(keep[:, None], g, 0.0).to(logits.format)
    go = grad_output.to(fp32).reshape(-1, 1)
    return (g.to(fp32) * go).to(logits.format)


# ---------------------------------------------------------------------------------- examples

def _rstd_fp32(x, eps):
    """rstd per row as the forward stores it (fp32), from the same x: rsqrt(mean(x²) + eps)
    evaluated in float64 and rounded once to fp32 (within an ulp or two of the kernel's)."""
    xd = x.double()
    return torch.rsqrt((xd * xd).mean(-1) + eps).float()


def _ex_rms_bwd(seed, dtype, family, rows, cols):
    x = fill((rows, cols), family, seed, dtype=dtype)
    w = (fill((cols,), "normal", seed + 1, dtype=torch.float32) * 0.1 + 1.0).to(dtype)
    dy = fill((rows, cols), family, seed + 2, dtype=dtype)
    casting, offset = (("llama", 0.0), ("gemma", 1.0), ("llama", 1.0), ("gemma", 0.0))[seed % 4]
    return (dy, x, w, _rstd_fp32(x, 1e-6)), {"offset": offset, "casting": casting}


def _ex_ln_bwd(seed, dtype, family, rows, cols):
    """dy, x, w and the forward's statistics: mean and rstd = rsqrt(var + eps) of the same x
    (two-pass variance) in float64, rounded once to x's format, as the forward stores them."""
    x = fill((rows, cols), family, seed, dtype=dtype)
    w = (fill((cols,), "normal", seed + 1, dtype=torch.float32) * 0.1 + 1.0).to(dtype)
    dy = fill((rows, cols), family, seed + 2, dtype=dtype)
    xd = x.double()
    mu = xd.mean(-1)
    var = ((xd - mu[:, None]) ** 2).mean(-1)
    return (dy, x, w, mu.to(dtype), torch.rsqrt(var + 1e-5).to(dtype)), {}


def _ex_glu_bwd(seed, dtype, family, rows, cols):
    """dc, a, b: the upstream gradient and the forward's two inputs, each drawn from ``family``."""
    return tuple(fill((rows, cols), family, seed + k, dtype=dtype) for k in (0, 7, 13)), {}


def _ex_ce_bwd(seed, dtype, family, rows, cols):
    """logits from ``family``; labels uniform over the classes, except that about 20% of the
    rows are ignored (-100) and about 30% are confident (label = the row's argmax, raised by a
    margin of 0, 2, 4 or 7 so that softmax at the label approaches 1); grad_output one value
    for "mean"/"sum" (1.0 on even seeds, else drawn) and one per row for "none"; the reduction
    cycles with the seed."""
    logits = fill((rows, cols), family, seed, dtype=dtype)
    gen = torch.Generator().manual_seed(seed)
    labels = torch.randint(0, cols, (rows,), generator=gen)
    u = torch.rand(rows, generator=gen)
    top = logits.float().argmax(-1)
    labels = torch.where(u < 0.5, top, labels)
    # confident rows: the label's logit raised 0, 2, 4 or 7 above the row max (p up to ~0.99)
    margin = torch.tensor((0.0, 2.0, 4.0, 7.0))[torch.randint(0, 4, (rows,), generator=gen)]
    lf = logits.float()
    rows_idx = torch.arange(rows)
    lf[rows_idx, top] = torch.where(u < 0.5, lf[rows_idx, top] + margin, lf[rows_idx, top])
    logits = lf.to(dtype)
    labels = torch.where(u < 0.2, torch.full_like(labels, -100), labels)
    reduction = ("mean", "sum", "none")[seed % 3]
    if reduction == "none":
        go = fill((rows,), "normal", seed + 3, dtype=dtype)
    elif seed % 2 == 0:
        go = torch.ones((), dtype=dtype)
    else:
        go = fill((1,), "normal", seed + 3, dtype=dtype).reshape(())
    return (logits, labels, go), {"ignore_index": -100, "reduction": reduction}


# ---------------------------------------------------------------------------------- registration

_register(Operator(
    "rms_norm_backward", rms_norm_backward, {
        "correct": _K + "rms_norm:rms_norm_backward",
        "one_program": _K + "rms_norm_backward:rms_norm_backward_one_program",
        "two_row_tiles": _K + "rms_norm_backward:rms_norm_backward_two_row_tiles"},
    _ex_rms_bwd, backward=True,
    domain=Domain(params={"casting": ("llama", "gemma"), "offset": (0.0, 1.0)}),
    faulty={"bf16_dw_sum": _K + "rms_norm_backward:rms_norm_backward_bf16_dw"}, source='liger'))

_register(Operator(
    "layer_norm_backward", layer_norm_backward, {
        "correct": _K + "layer_norm_backward:layer_norm_backward",
        "one_program": _K + "layer_norm_backward:layer_norm_backward_one_program",
        "chunked": _K + "layer_norm_backward:layer_norm_backward_chunked"},
    _ex_ln_bwd, backward=True,
    faulty={"fp16_as_bf16": _K + "layer_norm_backward:layer_norm_backward_fp16_as_bf16"}, source='liger'))

_register(Operator(
    "swiglu_backward", swiglu_backward, {
        "correct": _K + "swiglu_backward:swiglu_backward",
        "explicit_sigmoid": _K + "swiglu_backward:swiglu_backward_explicit_sigmoid",
        "flat": _K + "swiglu_backward:swiglu_backward_flat"},
    _ex_glu_bwd, backward=True, source='liger'))

_register(Operator(
    "geglu_backward", geglu_backward, {
        "correct": _K + "geglu_backward:geglu_backward",
        "chunked": _K + "geglu_backward:geglu_backward_chunked",
        "flat": _K + "geglu_backward:geglu_backward_flat"},
    _ex_glu_bwd, backward=True,
    faulty={"unrounded_gelu": _K + "geglu_backward:geglu_backward_unrounded_gelu"}, source='liger'))

_register(Operator(
    "cross_entropy_backward", cross_entropy_backward, {
        "correct": _K + "cross_entropy_backward:cross_entropy_backward",
        "two_pass": _K + "cross_entropy_backward:cross_entropy_backward_two_pass",
        "one_warp": _K + "cross_entropy_backward:cross_entropy_backward_one_warp"},
    _ex_ce_bwd, backward=True,
    # reduction is not a domain choice: grad_output's shape follows it (one value, or one per
    # row for "none"), so the example draws it with the seed (mean, sum, none in turn) and
    # builds a matching grad_output; a campaign overriding it would mismatch the two.
    domain=Domain(params={"ignore_index": (-100,)}),
    faulty={"rounded_label_grad": _K + "cross_entropy_backward:cross_entropy_backward_rounded_label",
            "row0_grad_output": _K + "cross_entropy_backward:cross_entropy_backward_row0_scale",
            "sum_divided": _K + "cross_entropy_backward:cross_entropy_backward_sum_divided"}, source='liger'))

for _fwd in ("rms_norm", "layer_norm", "swiglu", "geglu", "cross_entropy"):
    if _fwd in REGISTRY:
        REGISTRY[_fwd].backward = True
