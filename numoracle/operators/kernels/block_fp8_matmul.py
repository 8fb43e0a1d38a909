"""Block-scaled fp8 matmul C = (A·As) @ (B·Bs)ᵀ, after vLLM's ``w8a8_block_fp8_matmul``
(docs/operators.md row 13).

A: e4m3 [M, K] with per-token-group scales As [M, K/group_k] (fp32); B: e4m3 [N, K] with
group_n × group_k block scales Bs [ceil(N/group_n), K/group_k] (fp32). Precision plan: per K
tile of BLOCK_K columns, ``acc += tl.dot(a, b) · a_scale · b_scale`` in fp32 — the dot's products
of e4m3 values are exact in fp32 and accumulate in fp32; the scales are applied **inside** the K
loop, each tile's dot multiplied by its group's A scale then B scale (two fp32 roundings, the
add may be contracted with the last multiply); one rounding at the store to ``out`` (bf16, fp16
or fp32). The scale of a tile is read at group ``(k · BLOCK_K) // group_k``: correct only when
BLOCK_K divides group_k (change pair 13), so the launcher clamps BLOCK_K to the group size.

Behaviour-preserving variants: other BLOCK_M/BLOCK_N/num_warps, BLOCK_K a smaller divisor of
group_k (more, narrower tiles: each scaled separately), and split-K (programs over K ranges
write fp32 partials, summed in fp32 on the host before the one store rounding). Faulty versions
at the end of the module.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

OUT = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


@triton.jit
def _block_fp8_matmul_kernel(a_ptr, b_ptr, c_ptr, as_ptr, bs_ptr, M, N, K, k_tiles_per_split,
                             stride_am, stride_ak, stride_bn, stride_bk, stride_cs, stride_cm,
                             stride_cn, stride_asm, stride_ask, stride_bsn, stride_bsk,
                             GROUP_N: tl.constexpr, GROUP_K: tl.constexpr, BLOCK_M: tl.constexpr,
                             BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, FAULT: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    pid_k = tl.program_id(2)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    m_ok = offs_m < M
    n_ok = offs_n < N
    n_kgroups = K // GROUP_K
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    first = pid_k * k_tiles_per_split
    last = tl.minimum(first + k_tiles_per_split, tl.cdiv(K, BLOCK_K))
    for kt in range(first, last):
        ks = kt * BLOCK_K + offs_k
        k_ok = ks < K
        a = tl.load(a_ptr + offs_m[:, None] * stride_am + ks[None, :] * stride_ak,
                    mask=m_ok[:, None] & k_ok[None, :], other=0.0)
        b = tl.load(b_ptr + ks[:, None] * stride_bk + offs_n[None, :] * stride_bn,
                    mask=k_ok[:, None] & n_ok[None, :], other=0.0)
        kg = (kt * BLOCK_K) // GROUP_K
        a_rows = offs_m
        if FAULT == "row0_scale":
            a_rows = offs_m * 0
        b_kg = kg
        if FAULT == "next_b_scale_block":
            b_kg = tl.minimum(kg + 1, n_kgroups - 1)
        a_s = tl.load(as_ptr + a_rows * stride_asm + kg * stride_ask, mask=m_ok, other=0.0)
        b_s = tl.load(bs_ptr + (offs_n // GROUP_N) * stride_bsn + b_kg * stride_bsk, mask=n_ok, other=0.0)
        acc += tl.dot(a, b) * a_s[:, None] * b_s[None, :]
    c = acc.to(c_ptr.dtype.element_ty)
    tl.store(c_ptr + pid_k * stride_cs + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn, c,
             mask=m_ok[:, None] & n_ok[None, :])


def _check(a, b, a_s, b_s, group_n, group_k, out):
    if out not in OUT:
        raise ValueError(f"out must be one of {sorted(OUT)}, got out={out!r}")
    if a.dtype != torch.float8_e4m3fn or b.dtype != torch.float8_e4m3fn:
        raise ValueError(f"a and b must be float8_e4m3fn, got {a.dtype} and {b.dtype}")
    M, K = a.shape
    N = b.shape[0]
    if b.shape[1] != K or K % group_k:
        raise ValueError(f"a [M, K] and b [N, K] must share K, a multiple of group_k={group_k}; "
                         f"got a {tuple(a.shape)}, b {tuple(b.shape)}")
    if tuple(a_s.shape) != (M, K // group_k):
        raise ValueError(f"a_s must have shape {(M, K // group_k)}, got {tuple(a_s.shape)}")
    if tuple(b_s.shape) != (triton.cdiv(N, group_n), K // group_k):
        raise ValueError(f"b_s must have shape {(triton.cdiv(N, group_n), K // group_k)}, "
                         f"got {tuple(b_s.shape)}")


def _launch(a, b, a_s, b_s, group_n, group_k, out, *, block_m=16, block_n=None, block_k=None,
            split_k=1, num_warps=4, fault="none"):
    _check(a, b, a_s, b_s, group_n, group_k, out)
    M, K = a.shape
    N = b.shape[0]
    block_n = block_n or group_n
    # BLOCK_K must divide the group (pair 13): clamp it, unless the fault is the point
    block_k = block_k or group_k
    if fault != "bk_over_group":
        block_k = min(block_k, group_k)
    k_tiles = triton.cdiv(K, block_k)
    per_split = triton.cdiv(k_tiles, split_k)
    if split_k == 1:
        c = torch.empty((1, M, N), dtype=OUT[out], device=a.device)
    else:
        c = torch.empty((split_k, M, N), dtype=torch.float32, device=a.device)
    grid = (triton.cdiv(M, block_m), triton.cdiv(N, block_n), split_k)
    if M and N:
        _block_fp8_matmul_kernel[grid](
            a, b, c, a_s, b_s, M, N, K, per_split,
            a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1), c.stride(2),
            a_s.stride(0), a_s.stride(1), b_s.stride(0), b_s.stride(1),
            GROUP_N=group_n, GROUP_K=group_k, BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k,
            FAULT=fault, num_warps=num_warps)
    if split_k == 1:
        return c[0]
    return c.sum(dim=0, dtype=torch.float32).to(OUT[out])


def block_fp8_matmul(a, b, a_s, b_s, *, group_n=128, group_k=128, out="bf16"):
    """C = (a·a_s) @ (b·b_s)ᵀ with the module's precision plan; BLOCK_M 16, BLOCK_N = group_n,
    BLOCK_K = group_k, num_warps 4. Returns C [M, N] in ``out``."""
    return _launch(a, b, a_s, b_s, group_n, group_k, out)


def block_fp8_matmul_small_tiles(a, b, a_s, b_s, *, group_n=128, group_k=128, out="bf16"):
    """As :func:`block_fp8_matmul` with BLOCK_M 32, BLOCK_N 16, BLOCK_K = group_k/2 (each
    half-group tile scaled separately; at least 32, the smallest fp8 K tile of NVIDIA's tl.dot)
    and num_warps 2."""
    return _launch(a, b, a_s, b_s, group_n, group_k, out, block_m=32, block_n=16,
                   block_k=max(group_k // 2, 32), num_warps=2)


def block_fp8_matmul_split_k(a, b, a_s, b_s, *, group_n=128, group_k=128, out="bf16"):
    """As :func:`block_fp8_matmul` with split-K = 2: fp32 partials per K half, summed in fp32 on the
    host, one rounding to ``out``."""
    return _launch(a, b, a_s, b_s, group_n, group_k, out, split_k=2)


# ------------------------------------------------------------------------------ faulty versions

def block_fp8_matmul_bk_over_group(a, b, a_s, b_s, *, group_n=128, group_k=128, out="bf16"):
    """FAULTY (change pair 13): BLOCK_K = 2·group_k with the scale index (k·BLOCK_K)//group_k:
    each tile applies its first group's scales to both groups."""
    return _launch(a, b, a_s, b_s, group_n, group_k, out, block_k=2 * group_k, fault="bk_over_group")


def block_fp8_matmul_row0_scale(a, b, a_s, b_s, *, group_n=128, group_k=128, out="bf16"):
    """FAULTY: every row uses row 0's A scales (a broadcast scalar load)."""
    return _launch(a, b, a_s, b_s, group_n, group_k, out, fault="row0_scale")


def block_fp8_matmul_wrong_scale_block(a, b, a_s, b_s, *, group_n=128, group_k=128, out="bf16"):
    """FAULTY: the B scale is read from the next K group (off-by-one scale-block index)."""
    return _launch(a, b, a_s, b_s, group_n, group_k, out, fault="next_b_scale_block")
