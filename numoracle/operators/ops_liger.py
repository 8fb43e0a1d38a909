"""Liger-Kernel's remaining forward operators (docs/operators.md rows 5, 7, 8): rope,
fused_linear_cross_entropy and jsd, each with its reference program, correct kernel,
behaviour-preserving variants, domain, example inputs and a planted faulty kernel.

Examples cycle the keyword parameters through the domain's choices by seed, so a sweep over
consecutive seeds covers every choice.
"""

from __future__ import annotations

import math

import torch

import numoracle as no
from numoracle.formats import fp32
from numoracle.operators import Domain, Operator, _register
from numoracle.operators.references import kept_rows
from numoracle.families import fill

_K = "numoracle.operators.kernels."
LOG2E = 1.4426950408889634
IGNORE_INDEX = -100


# ---------------------------------------------------------------------------------- references

@no.reference(outputs=("q", "k"))
def rope(q, k, cos, sin):
    """Liger RoPE (rotate-half) forward: q [B, T, Hq, D], k [B, T, Hk, D], cos/sin [1 or B, T, D]
    of which the first D/2 values are read.  x→cos's format; y1 = x1·cos − x2·sin,
    y2 = x2·cos + x1·sin in that format; stored in x's format.  Outputs (q_out, k_out)."""
    fmt = cos.format
    h = q.shape[-1] // 2
    c = cos[..., :h].unsqueeze(-2)
    s = sin[..., :h].unsqueeze(-2)

    def rotate(x):
        x1, x2 = x[..., :h].to(fmt), x[..., h:].to(fmt)
        return no.cat([x1 * c - x2 * s, x2 * c + x1 * s], axis=-1).to(x.format)
    return rotate(q), rotate(k)


@no.reference(outputs=("loss", "dx"))
def jsd(x, y, labels, *, beta=0.5, ignore_index=IGNORE_INDEX):
    """Liger generalised JSD over log-probabilities x = log Q (input), y = log P (target):
    outputs (loss: fp32 host sum of the per-element fp32 losses, cast to x's format as Liger
    returns it; dx in x's format).

    fp32 after widening; max-shifted exponentials exp(z − m)·exp(m); β = 0: loss = P·(y − x),
    dx = −P; β = 1: loss = Q·(x − y), dx = loss + Q; otherwise M = βP + (1 − β)Q,
    loss = βP·y + (1 − β)Q·x − M·log M, dx = (1 − β)Q·(x − log M); all times 1/n (n non-ignored
    rows, 1/n rounded once to fp32); ignored rows 0."""
    xf, yf = x.to(fp32), y.to(fp32)
    keep = labels != ignore_index
    scale = (1.0 / kept_rows(keep).double()).to(torch.float32)    # 1/n rounded once to fp32
    if beta == 0.0:
        m = no.max(yf, axis=-1, keepdims=True)
        p = no.exp(yf - m) * no.exp(m)
        loss, dx = p * (yf - xf), -p
    elif beta == 1.0:
        m = no.max(xf, axis=-1, keepdims=True)
        q = no.exp(xf - m) * no.exp(m)
        loss = q * (xf - yf)
        dx = loss + q
    else:
        m = no.maximum(no.max(xf, axis=-1, keepdims=True), no.max(yf, axis=-1, keepdims=True))
        em = no.exp(m)
        q = no.exp(xf - m) * em
        p = no.exp(yf - m) * em
        bp = beta * p
        oq = (1.0 - beta) * q
        mix = bp + oq
        log_mix = no.log(mix)
        loss = bp * yf + oq * xf - mix * log_mix
        dx = oq * (xf - log_mix)
    k2 = keep[:, None]
    loss = no.where(k2, no.mul(loss, scale), 0.0)
    dx = no.where(k2, no.mul(dx, scale), 0.0)
    n = loss.shape[0] * loss.shape[1]
    return no.sum(loss.reshape(n), axis=-1).to(x.format), dx.to(x.format)


def _next_pow2(n: int) -> int:
    return 1 << max(0, (n - 1).bit_length())


def flce_chunk_rows(bt: int, v: int, h: int) -> int:
    """Liger's row-chunk size of fused_linear_cross_entropy: next_pow2(ceil(BT / ceil(V / H)))."""
    return _next_pow2(math.ceil(bt / math.ceil(v / h)))


@no.reference(outputs=("loss", "grad_input", "grad_weight"))
def fused_linear_cross_entropy(x, w, labels, *, ignore_index=IGNORE_INDEX, reduction="mean",
                               accum_fp32=False):
    """Liger fused linear + cross-entropy: outputs (loss 0-d fp32, grad_x in x's format,
    grad_W in W's format).

    Row chunks of Liger's size; per chunk: logits = x_c·Wᵀ (fp32 accumulation, rounded to x's
    format); the Liger CE kernel on the logits (fp32: m = max, e = exp2((x − m)·log2e), d = sum e,
    lse = m + log d, loss = lse − x_y, gradient e/d − [label], both /n for "mean", n the batch's
    non-ignored count; ignored rows 0; loss fp32, gradient rounded to x's format);
    grad_x_c = g·W (fp32 accumulation, rounded); grad_W = (grad_W + gᵀ·x_c) rounded to the
    accumulator's format (W's, or fp32 with accum_fp32) each chunk; loss = fp32 sum of the rows."""
    bt, h = x.shape
    v = w.shape[0]
    chunk = flce_chunk_rows(bt, v, h)
    keep = labels != ignore_index
    n = kept_rows(keep)
    acc_fmt = fp32 if accum_fp32 else w.format
    cols = torch.arange(v, device=labels.device)
    wt = w.T
    losses, grads_x, gw = [], [], None
    for start in range(0, bt, chunk):
        end = min(start + chunk, bt)
        xc, yc, kc = x[start:end], labels[start:end], keep[start:end]
        xf = no.matmul(xc, wt, acc=fp32).to(x.format).to(fp32)
        m = no.max(xf, axis=-1, keepdims=True)
        e = no.exp2((xf - m) * LOG2E)
        d = no.sum(e, axis=-1, keepdims=True)
        lse = m + no.log(d)
        loss = lse.squeeze(-1) - no.gather(xf, torch.where(kc, yc, 0), axis=-1)
        g = e / d
        g = no.where(cols[None, :] == yc[:, None], g - 1.0, g)
        if reduction == "mean":
            loss = no.div(loss, n)
            g = no.div(g, n)
        losses.append(no.where(kc, loss, 0.0))
        g = no.where(kc[:, None], g, 0.0).to(x.format)
        grads_x.append(no.matmul(g, w, acc=fp32).to(x.format))
        part = no.matmul(g.T, xc, acc=fp32)
        gw = (part if gw is None else gw.to(fp32) + part).to(acc_fmt)
    total = no.sum(no.cat(losses, axis=0), axis=-1)
    return total, no.cat(grads_x, axis=0), gw.to(w.format)


# ---------------------------------------------------------------------------------- examples

def _rope_tables(t, d, dtype):
    pos = torch.arange(t, dtype=torch.float64)
    inv_freq = 10000.0 ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    ang = pos[:, None] * inv_freq[None, :]
    emb = torch.cat([ang, ang], dim=-1)[None]
    return emb.cos().to(dtype), emb.sin().to(dtype)


def _ex_rope(seed, dtype, family, rows, cols):
    """q [2, rows, 4, D], k [2, rows, 2, D] with D = cols rounded down to even; cos/sin tables of
    Llama's rotary frequencies (base 10000) in fp32 (even seeds) or in q's format (odd seeds)."""
    d = max(2, cols - cols % 2)
    q = fill((2, rows, 4, d), family, seed, dtype=dtype)
    k = fill((2, rows, 2, d), family, seed + 1, dtype=dtype)
    cos, sin = _rope_tables(rows, d, torch.float32 if seed % 2 == 0 else dtype)
    return (q, k, cos, sin), {}


def example_labels(seed, rows, cols):
    """Class labels for a [rows, cols] logits example, one ignored row in every multi-row case."""
    g = torch.Generator().manual_seed(seed + 11)
    labels = torch.randint(0, cols, (rows,), generator=g)
    if rows > 1:                       # one ignored row in every multi-row case
        labels[int(torch.randint(0, rows, (1,), generator=g))] = IGNORE_INDEX
    return labels


def _log_probs(shape, family, seed, dtype):
    """log_softmax of the family's values, squeezed so that each row spans at most 60 (every
    log-probability stays above about −60 − log V: Liger's mixed-β loss has 0·log 0 = NaN once
    both fp32 exponentials underflow), then rounded to ``dtype``."""
    z = fill(shape, family, seed, dtype=torch.float32).double()
    span = (z.amax(-1, keepdim=True) - z.amin(-1, keepdim=True)).clamp(min=1.0)
    z = z * (60.0 / span).clamp(max=1.0)
    return torch.log_softmax(z, dim=-1).to(dtype)


JSD_BETAS = (0.5, 0.0, 1.0, 0.1)


def _ex_jsd(seed, dtype, family, rows, cols):
    x = _log_probs((rows, cols), family, seed, dtype)
    y = _log_probs((rows, cols), family, seed + 7, dtype)
    return (x, y, example_labels(seed, rows, cols)), {"beta": JSD_BETAS[seed % len(JSD_BETAS)]}


def _ex_flce(seed, dtype, family, rows, cols):
    """x [min(rows, 8), H], W [V, H] with V = min(cols, 128) and H = 32 or 64; W scaled by
    1/sqrt(H) as a trained head's; reduction and accumulator cycle by seed."""
    bt = max(1, min(rows, 8))
    v = max(2, min(cols, 128))
    h = (32, 64)[(seed // 2) % 2]
    x = fill((bt, h), family, seed, dtype=dtype)
    w = (fill((v, h), "normal", seed + 1, dtype=torch.float32) / math.sqrt(h)).to(dtype)
    params = {"reduction": ("mean", "sum")[seed % 2], "accum_fp32": (False, True)[(seed // 4) % 2]}
    return (x, w, example_labels(seed, bt, v)), params


# ---------------------------------------------------------------------------------- registration

_register(Operator(
    "rope", rope, {
        "correct": _K + "rope:rope", "per_head": _K + "rope:rope_per_head",
        "wide_tiles": _K + "rope:rope_wide_tiles"},
    _ex_rope, domain=Domain(rows=(1, 64), cols=(2, 256), cols_multiple_of=2),
    faulty={"math_in_q_format": _K + "rope:rope_math_in_q_format"}, source='liger'))

_register(Operator(
    "jsd", jsd, {
        "correct": _K + "jsd:jsd", "two_rows": _K + "jsd:jsd_two_rows", "wide_block": _K + "jsd:jsd_wide_block"},
    _ex_jsd, domain=Domain(cols=(2, 512), params={"beta": JSD_BETAS, "ignore_index": (IGNORE_INDEX,)}),
    faulty={"all_rows_divisor": _K + "jsd:jsd_all_rows_divisor"}, source='liger'))

_register(Operator(
    "fused_linear_cross_entropy", fused_linear_cross_entropy, {
        "correct": _K + "fused_linear_cross_entropy:fused_linear_cross_entropy",
        "big_tiles": _K + "fused_linear_cross_entropy:fused_linear_cross_entropy_big_tiles",
        "two_pass": _K + "fused_linear_cross_entropy:fused_linear_cross_entropy_two_pass"},
    _ex_flce, backward=True,            # its outputs include grad_x and grad_W
    domain=Domain(rows=(1, 8), cols=(2, 128),
                  params={"reduction": ("mean", "sum"), "accum_fp32": (False, True)}),
    faulty={"chunk_count": _K + "fused_linear_cross_entropy:fused_linear_cross_entropy_chunk_count"}, source='liger'))
