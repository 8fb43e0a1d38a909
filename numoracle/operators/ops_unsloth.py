"""Unsloth's operators (docs/operators.md rows 9-11): rms_layernorm, cross_entropy_loss, geglu_exact,
geglu_approx, and their backward passes, each with its reference program, correct kernel,
behaviour-preserving variants, domain, example inputs and the faulty kernels of the change pairs
that concern it (5, 11, 12).

Examples cycle the keyword parameters through the domain's choices by seed, so a sweep over
consecutive seeds covers every choice.
"""

from __future__ import annotations

import torch

import numoracle as no
from numoracle.formats import fp32
from numoracle.operators import REGISTRY, Domain, Operator, _register
from numoracle.operators.ops_liger import IGNORE_INDEX, example_labels
from numoracle.families import fill

_K = "numoracle.operators.kernels."
INV_SQRT_2 = 0.7071067811865476
SQRT_2_OVER_PI = 0.7978845608028654
INV_SQRT_2PI = 0.3989422804014327


# ---------------------------------------------------------------------------------- references

@no.reference(outputs=("y", "rstd"))
def rms_layernorm(x, w, *, eps=1e-6, gemma=False):
    """Unsloth RMS LayerNorm forward: outputs (y in x's format, rstd in fp32 per row).

    x→fp32; var = sum(x·x)/n; rstd = rsqrt(var + eps), fp32.  Llama: x·rstd rounded to w's
    format, then × w in w's format; Gemma: x·rstd·(w + 1) in fp32; y stored in x's format."""
    xf = x.to(fp32)
    var = no.mean(xf * xf, axis=-1, keepdims=True)
    r = no.rsqrt(var + eps)
    if gemma:
        y = xf * r * (w.to(fp32) + 1.0)
    else:
        y = (xf * r).to(w.format) * w
    return y.to(x.format), r.squeeze(-1)


@no.reference
def rms_layernorm_backward(dy, x, w, rstd, *, gemma=False):
    """Unsloth RMS LayerNorm backward, dX only, all fp32, stored in x's format.

    x̂ = x·rstd; dyw = dy·w (or dy·(w + 1) for Gemma); s = sum(dyw·x̂);
    dx = (rstd/n)·(n·dyw − x̂·s).  rstd is the forward's fp32 value (an exact input here)."""
    dyf, xf, wf = dy.to(fp32), x.to(fp32), w.to(fp32)
    r = rstd.to(fp32).unsqueeze(-1)
    n = float(x.shape[-1])
    xh = xf * r
    dyw = dyf * (wf + 1.0) if gemma else dyf * wf
    s = no.sum(dyw * xh, axis=-1, keepdims=True)
    dx = (r / n) * (n * dyw - xh * s)
    return dx.to(x.format)


def _transform(xf, logit_scale, softcap):
    if logit_scale:
        xf = logit_scale * xf
    if softcap:
        xf = softcap * no.tanh(xf / softcap)
    return xf


@no.reference(outputs=("loss", "lse"))
def cross_entropy_loss(logits, labels, *, logit_scale=0.0, softcap=0.0, chunk_size=65536):
    """Unsloth cross-entropy forward: outputs (loss, lse), fp32 per row.

    Every logit, the label's included, →fp32 then t·x (logit_scale t) and s·tanh(x/s) (softcap s)
    in fp32.  lse = c + log(sum(exp(x − c))), c the row max; above ``chunk_size`` classes one lse
    per chunk, combined on the host by an fp32 logsumexp over the chunks.  loss = lse − x_y, or 0
    where the label is −100."""
    xf = _transform(logits.to(fp32), logit_scale, softcap)
    n = xf.shape[-1]
    if n > chunk_size:
        parts = [no.logsumexp(xf[:, s:s + chunk_size], axis=-1, keepdims=True, exp="exp")
                 for s in range(0, n, chunk_size)]
        lse = no.logsumexp(no.cat(parts, axis=-1), axis=-1, exp="exp")
    else:
        lse = no.logsumexp(xf, axis=-1, exp="exp")
    keep = labels != IGNORE_INDEX
    loss = lse - no.gather(xf, torch.where(keep, labels, 0), axis=-1)
    return no.where(keep, loss, 0.0), lse


@no.reference
def cross_entropy_loss_backward(dloss, logits, labels, lse, *, logit_scale=0.0, softcap=0.0):
    """Unsloth cross-entropy backward, written over the logits in their format.

    x→fp32, t·x, p = tanh(x/s), x = s·p; y = exp(x − lse) (lse: the forward's fp32 value, an
    exact input); y − 1 at the label; y·t; y·(1 − p·p); dloss·y, dloss 0 on ignored rows."""
    xf = logits.to(fp32)
    if logit_scale:
        xf = logit_scale * xf
    if softcap:
        p = no.tanh(xf / softcap)
        xf = softcap * p
    y = no.exp(xf - lse.to(fp32).unsqueeze(-1))
    cols = torch.arange(logits.shape[-1], device=labels.device)
    y = no.where(cols[None, :] == labels[:, None], y - 1.0, y)
    if logit_scale:
        y = logit_scale * y
    if softcap:
        y = y * (1.0 - p * p)
    keep = (labels != IGNORE_INDEX)[:, None]
    d = no.where(keep, dloss.to(fp32).unsqueeze(-1) * y, 0.0)
    return d.to(logits.format)


@no.reference
def geglu_exact(e, g):
    """Unsloth exact GeGLU: f = 0.5·e·(erf((1/√2)·e) + 1) in fp32, rounded to g's format, × g."""
    ef = e.to(fp32)
    f = 0.5 * ef * (no.erf(INV_SQRT_2 * ef) + 1.0)
    return f.to(g.format) * g


@no.reference
def geglu_approx(e, g):
    """Unsloth tanh GeGLU: f = 0.5·e·(tanh(√(2/π)·e·(1 + 0.044715·e·e)) + 1) in fp32, rounded to
    g's format, × g."""
    ef = e.to(fp32)
    f = 0.5 * ef * (no.tanh(SQRT_2_OVER_PI * ef * (1.0 + 0.044715 * ef * ef)) + 1.0)
    return f.to(g.format) * g


@no.reference(outputs=("h", "df", "de"))
def geglu_exact_backward(dh, e, g):
    """Unsloth exact GeGLU backward: (h, df, de) each stored once in the inputs' format; fp32 math:
    fp = 0.5·(erf(e/√2) + 1); f = fp·e; h = f·g; df = dh·f; de = (dh·g)·(fp + e·exp(−e²/2)/√(2π))."""
    dhf, ef, gf = dh.to(fp32), e.to(fp32), g.to(fp32)
    fp = 0.5 * (no.erf(INV_SQRT_2 * ef) + 1.0)
    f = fp * ef
    dfde = fp + INV_SQRT_2PI * ef * no.exp(-0.5 * ef * ef)
    return (f * gf).to(g.format), (dhf * f).to(g.format), ((dhf * gf) * dfde).to(e.format)


@no.reference(outputs=("h", "df", "de"))
def geglu_approx_backward(dh, e, g):
    """Unsloth tanh GeGLU backward: (h, df, de); a = √(2/π)·e; b = a·0.044715·e·e;
    T = 1 + tanh(a + b); T2 = 0.5·T; df/de = T2 + (−T2·(T − 2)·(a + 3b)); f = T2·e; fp32 math,
    each output stored once."""
    dhf, ef, gf = dh.to(fp32), e.to(fp32), g.to(fp32)
    a = SQRT_2_OVER_PI * ef
    b = a * 0.044715 * ef * ef
    T = 1.0 + no.tanh(a + b)
    T2 = 0.5 * T
    dfde = T2 + (-T2) * (T - 2.0) * (a + 3.0 * b)
    f = T2 * ef
    return (f * gf).to(g.format), (dhf * f).to(g.format), ((dhf * gf) * dfde).to(e.format)


# ---------------------------------------------------------------------------------- examples

def _pick(choices, seed, salt=0):
    return choices[(seed // (1 + salt)) % len(choices)]


def _ex_rms(seed, dtype, family, rows, cols):
    x = fill((rows, cols), family, seed, dtype=dtype)
    w = (fill((cols,), "normal", seed + 1, dtype=torch.float32) * 0.1 + 1.0).to(dtype)
    gemma = _pick((False, True), seed)
    if gemma:   # Gemma weights are stored as (scale - 1): centred on 0
        w = (w.float() - 1.0).to(dtype)
    return (x, w), {"eps": 1e-6, "gemma": gemma}


def _rstd_fp32(x, eps):
    """rstd per row as the forward stores it (fp32): rsqrt(mean(x²) + eps) in float64, rounded
    once; any fp32 value is an exact input of the backward reference."""
    xd = x.double()
    return torch.rsqrt((xd * xd).mean(-1) + eps).float()


def _ex_rms_bwd(seed, dtype, family, rows, cols):
    (x, w), p = _ex_rms(seed, dtype, family, rows, cols)
    dy = fill((rows, cols), family, seed + 2, dtype=dtype)
    return (dy, x, w, _rstd_fp32(x, 1e-6)), {"gemma": p["gemma"]}


CE_TRANSFORMS = ((0.0, 0.0), (0.0, 30.0), (0.5, 0.0), (0.5, 30.0))
CE_CHUNKS = (65536, 32)


def _ex_ce(seed, dtype, family, rows, cols):
    logits = fill((rows, cols), family, seed, dtype=dtype)
    scale, cap = _pick(CE_TRANSFORMS, seed)
    chunk = _pick(CE_CHUNKS, seed, salt=len(CE_TRANSFORMS) - 1)
    return (logits, example_labels(seed, rows, cols)), {"logit_scale": scale, "softcap": cap,
                                                 "chunk_size": chunk}


def _ex_ce_bwd(seed, dtype, family, rows, cols):
    (logits, labels), p = _ex_ce(seed, dtype, family, rows, cols)
    x = logits.double()
    if p["logit_scale"]:
        x = float(torch.tensor(p["logit_scale"], dtype=torch.float32)) * x
    if p["softcap"]:
        x = p["softcap"] * torch.tanh(x / p["softcap"])
    lse = torch.logsumexp(x, -1).float()
    dloss = (fill((rows,), "uniform", seed + 5, dtype=torch.float32).abs() + 0.5)
    return (dloss, logits, labels, lse), {"logit_scale": p["logit_scale"], "softcap": p["softcap"]}


def _ex_geglu(seed, dtype, family, rows, cols):
    return (fill((rows, cols), family, seed, dtype=dtype),
            fill((rows, cols), family, seed + 7, dtype=dtype)), {}


def _ex_geglu_bwd(seed, dtype, family, rows, cols):
    (e, g), _ = _ex_geglu(seed, dtype, family, rows, cols)
    return (fill((rows, cols), family, seed + 3, dtype=dtype), e, g), {}


# ---------------------------------------------------------------------------------- registration

_RMS = _K + "unsloth_rms_layernorm:"
_CE = _K + "unsloth_cross_entropy:"
_GG = _K + "unsloth_geglu:"

_register(Operator(
    "rms_layernorm", rms_layernorm, {
        "correct": _RMS + "rms_layernorm", "1oversqrt": _RMS + "rms_layernorm_1oversqrt",
        "two_rows": _RMS + "rms_layernorm_two_rows", "wide_block": _RMS + "rms_layernorm_wide_block"},
    _ex_rms, backward=True,
    domain=Domain(params={"gemma": (False, True), "eps": (1e-6,)}),
    faulty={"fp32_multiply": _RMS + "rms_layernorm_fp32_multiply"}, source='unsloth'))

_register(Operator(
    "rms_layernorm_backward", rms_layernorm_backward, {
        "correct": _RMS + "rms_layernorm_backward",
        "two_rows": _RMS + "rms_layernorm_backward_two_rows",
        "four_rows": _RMS + "rms_layernorm_backward_four_rows"},
    _ex_rms_bwd, backward=True, domain=Domain(params={"gemma": (False, True)}),
    faulty={"no_offset": _RMS + "rms_layernorm_backward_no_offset"}, source='unsloth'))

_register(Operator(
    "cross_entropy_loss", cross_entropy_loss, {
        "correct": _CE + "cross_entropy_loss", "wide_block": _CE + "cross_entropy_loss_wide_block",
        "two_rows": _CE + "cross_entropy_loss_two_rows"},
    _ex_ce, backward=True,
    domain=Domain(cols=(2, 512), params={"logit_scale": (0.0, 0.5), "softcap": (0.0, 30.0),
                                         "chunk_size": CE_CHUNKS}),
    faulty={"label_lowp": _CE + "cross_entropy_loss_label_lowp"}, source='unsloth'))

_register(Operator(
    "cross_entropy_loss_backward", cross_entropy_loss_backward, {
        "correct": _CE + "cross_entropy_loss_backward",
        "flat": _CE + "cross_entropy_loss_backward_flat",
        "small_block": _CE + "cross_entropy_loss_backward_small_block"},
    _ex_ce_bwd, backward=True,
    domain=Domain(cols=(2, 512), params={"logit_scale": (0.0, 0.5), "softcap": (0.0, 30.0)}),
    faulty={"ignored_rows_kept": _CE + "cross_entropy_loss_backward_ignored_rows_kept"}, source='unsloth'))

_register(Operator(
    "geglu_exact", geglu_exact, {
        "correct": _GG + "geglu_exact", "rows": _GG + "geglu_exact_rows",
        "small_block": _GG + "geglu_exact_small_block"},
    _ex_geglu, backward=True, faulty={"tanh_form": _GG + "geglu_approx"}, source='unsloth'))

_register(Operator(
    "geglu_approx", geglu_approx, {
        "correct": _GG + "geglu_approx", "rows": _GG + "geglu_approx_rows",
        "small_block": _GG + "geglu_approx_small_block"},
    _ex_geglu, backward=True, faulty={"erf_form": _GG + "geglu_exact"}, source='unsloth'))

_register(Operator(
    "geglu_exact_backward", geglu_exact_backward, {
        "correct": _GG + "geglu_exact_backward",
        "small_block": _GG + "geglu_exact_backward_small_block",
        "rows": _GG + "geglu_exact_backward_rows"},
    _ex_geglu_bwd, backward=True, faulty={"tanh_form": _GG + "geglu_approx_backward"}, source='unsloth'))

_register(Operator(
    "geglu_approx_backward", geglu_approx_backward, {
        "correct": _GG + "geglu_approx_backward",
        "small_block": _GG + "geglu_approx_backward_small_block",
        "rows": _GG + "geglu_approx_backward_rows"},
    _ex_geglu_bwd, backward=True, faulty={"erf_form": _GG + "geglu_exact_backward"}, source='unsloth'))

assert all(n in REGISTRY for n in ("rms_layernorm", "cross_entropy_loss", "geglu_exact"))
