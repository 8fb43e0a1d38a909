"""Rotary position embedding after Liger-Kernel's precision plan (docs/operators.md row 5).

Layout: q [B, T, Hq, D], k [B, T, Hk, D] (contiguous), cos and sin [1 or B, T, D] with the usual
cos = cat(freqs, freqs) halves, of which only the first half (D/2 values) is read.

Precision plan (rotate-half): q and k are loaded and **converted to cos/sin's format**
(exact when that is wider, a rounding when it is narrower); in that format
y1 = x1·cos − x2·sin and y2 = x2·cos + x1·sin (each product and the sum rounded to that format:
fp32 cos/sin → fp32 math, bf16 cos/sin → bf16 math); one conversion to q's (k's) format at the
store. Liger writes in place; these launchers write into copies and return ``(q_out, k_out)``.
"""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def _rotate(x_ptr, offs1, half, mask, cos, sin):
    x1 = tl.load(x_ptr + offs1, mask=mask, other=0.0).to(cos.dtype)
    x2 = tl.load(x_ptr + offs1 + half, mask=mask, other=0.0).to(cos.dtype)
    tl.store(x_ptr + offs1, x1 * cos - x2 * sin, mask=mask)
    tl.store(x_ptr + offs1 + half, x2 * cos + x1 * sin, mask=mask)


@triton.jit
def _rope_token_kernel(q_ptr, k_ptr, cos_ptr, sin_ptr, seq_len, cos_batch, n_qh, n_kh, head_dim,
                       HQ_BLOCK: tl.constexpr, HK_BLOCK: tl.constexpr, HALF_BLOCK: tl.constexpr):
    """One program per (batch, token): all q heads, then all k heads, as [heads, D/2] tiles."""
    pid = tl.program_id(0).to(tl.int64)
    half = head_dim // 2
    if cos_batch == 1:
        cos_row = pid % seq_len
    else:
        cos_row = pid
    d = tl.arange(0, HALF_BLOCK)
    dmask = d < half
    cos = tl.load(cos_ptr + cos_row * head_dim + d, mask=dmask, other=0.0)[None, :]
    sin = tl.load(sin_ptr + cos_row * head_dim + d, mask=dmask, other=0.0)[None, :]
    hq = tl.arange(0, HQ_BLOCK)
    _rotate(q_ptr + pid * n_qh * head_dim, hq[:, None] * head_dim + d[None, :], half,
            (hq < n_qh)[:, None] & dmask[None, :], cos, sin)
    hk = tl.arange(0, HK_BLOCK)
    _rotate(k_ptr + pid * n_kh * head_dim, hk[:, None] * head_dim + d[None, :], half,
            (hk < n_kh)[:, None] & dmask[None, :], cos, sin)


@triton.jit
def _rope_head_kernel(x_ptr, cos_ptr, sin_ptr, seq_len, cos_batch, n_h, head_dim,
                      HALF_BLOCK: tl.constexpr):
    """One program per (batch, token, head) of one tensor."""
    pid = tl.program_id(0).to(tl.int64)
    head = tl.program_id(1).to(tl.int64)
    half = head_dim // 2
    if cos_batch == 1:
        cos_row = pid % seq_len
    else:
        cos_row = pid
    d = tl.arange(0, HALF_BLOCK)
    dmask = d < half
    cos = tl.load(cos_ptr + cos_row * head_dim + d, mask=dmask, other=0.0)
    sin = tl.load(sin_ptr + cos_row * head_dim + d, mask=dmask, other=0.0)
    _rotate(x_ptr + (pid * n_h + head) * head_dim, d, half, dmask, cos, sin)


def _check(q, k, cos, sin):
    if q.dim() != 4 or k.dim() != 4:
        raise ValueError(f"q and k must be 4-D [batch, seq, heads, head_dim], got {tuple(q.shape)} "
                         f"and {tuple(k.shape)}")
    b, t, _, d = q.shape
    if k.shape[0] != b or k.shape[1] != t or k.shape[3] != d:
        raise ValueError(f"k must share q's batch, seq and head_dim, got q {tuple(q.shape)}, "
                         f"k {tuple(k.shape)}")
    if d % 2:
        raise ValueError(f"head_dim must be even for rotate-half, got {d}")
    for name, c in (("cos", cos), ("sin", sin)):
        if c.dim() != 3 or c.shape[0] not in (1, b) or c.shape[1] != t or c.shape[2] != d:
            raise ValueError(f"{name} must have shape (1 or {b}, {t}, {d}), got {tuple(c.shape)}")
    if cos.dtype != sin.dtype:
        raise ValueError(f"cos and sin must share a dtype, got {cos.dtype} and {sin.dtype}")


def _prepare(q, k, cos, sin):
    _check(q, k, cos, sin)
    return q.contiguous().clone(), k.contiguous().clone(), cos.contiguous(), sin.contiguous()


def rope(q, k, cos, sin, *, num_warps=4):
    """RoPE forward, one program per (batch, token) rotating every q and k head.

    Precision plan: the module docstring's. Returns ``(q_out, k_out)`` in q's and k's formats.
    """
    q, k, cos, sin = _prepare(q, k, cos, sin)
    b, t, nq, d = q.shape
    _rope_token_kernel[(b * t,)](q, k, cos, sin, t, cos.shape[0], nq, k.shape[2], d,
                                 HQ_BLOCK=triton.next_power_of_2(nq),
                                 HK_BLOCK=triton.next_power_of_2(k.shape[2]),
                                 HALF_BLOCK=triton.next_power_of_2(d // 2), num_warps=num_warps)
    return q, k


def rope_per_head(q, k, cos, sin, *, num_warps=1):
    """As :func:`rope` with one program per (batch, token, head), q and k in two launches."""
    q, k, cos, sin = _prepare(q, k, cos, sin)
    b, t, nq, d = q.shape
    for x in (q, k):
        _rope_head_kernel[(b * t, x.shape[2])](x, cos, sin, t, cos.shape[0], x.shape[2], d,
                                               HALF_BLOCK=triton.next_power_of_2(d // 2),
                                               num_warps=num_warps)
    return q, k


def rope_wide_tiles(q, k, cos, sin, *, num_warps=8):
    """As :func:`rope` with head and head_dim tiles twice as wide as needed (more masked lanes)
    and 8 warps."""
    q, k, cos, sin = _prepare(q, k, cos, sin)
    b, t, nq, d = q.shape
    _rope_token_kernel[(b * t,)](q, k, cos, sin, t, cos.shape[0], nq, k.shape[2], d,
                                 HQ_BLOCK=2 * triton.next_power_of_2(nq),
                                 HK_BLOCK=2 * triton.next_power_of_2(k.shape[2]),
                                 HALF_BLOCK=2 * triton.next_power_of_2(d // 2), num_warps=num_warps)
    return q, k


def rope_math_in_q_format(q, k, cos, sin, *, num_warps=4):
    """FAULTY (a downcast moved earlier): cos and sin rounded to q's format, so the rotation of
    bf16 q with fp32 cos/sin runs in bf16 instead of fp32. Kept in ``Operator.faulty`` only."""
    return rope(q, k, cos.to(q.dtype), sin.to(q.dtype), num_warps=num_warps)
