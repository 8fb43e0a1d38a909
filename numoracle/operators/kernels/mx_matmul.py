"""Scaled matmul on MX operands, C = (A·2^Ea) @ (B·2^Eb)ᵀ (docs/design.md §4.5).

A: MXFP8 codes [M, K] (float8_e4m3fn or float8_e5m2) with E8M0 scales [M, K/32]; B: MXFP8
codes [N, K] or MXFP4 codes packed two per byte along K [N, K/2] (float4_e2m1fn_x2, the
first of each pair in the low nibble) with E8M0 scales [N, K/32].  Precision plan
(dequantize-then-dot): per K tile, each code is widened to fp32, multiplied by its
block's 2^E (exact while normal), rounded to bf16 (exact: a code has at most 4
significant bits; only values below bf16's normals round), and the tile's bf16 ``tl.dot``
accumulates exact products in fp32; one rounding at the store to ``out``.  This is what
``tl.dot_scaled`` does where the GPU has no microscaling tensor cores (Triton upcasts to
bf16, e.g. on sm_90), so the ``dot_scaled`` variant follows the same plan — except for the
scale byte 0 (2^-127), which that emulation reads as 0 (``dot_scaled_refusal``).

Behaviour-preserving variants: other tiles and num_warps; the scales applied after the
dot of each 32-wide K block (the block's dot of codes is exact up to fp32 rounding of its
sum, and a power-of-two scale commutes with that rounding); ``tl.dot_scaled``; split-K
(fp32 partials summed on the host before the one store rounding).  Faulty versions at the
end of the module.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

OUT = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
FORMATS = {torch.float8_e4m3fn: "e4m3", torch.float8_e5m2: "e5m2", torch.float4_e2m1fn_x2: "e2m1"}
SCALE_BLOCK = 32


@triton.jit
def _e2m1_value(c):
    """fp32 value of e2m1 nibbles c (int32): 0, .5, 1, 1.5, 2, 3, 4, 6 and their negatives."""
    mag = c & 7
    e = mag >> 1
    m = mag & 1
    normal = ((e + 126) << 23 | (m << 22)).to(tl.float32, bitcast=True)   # 2^(e-1)·(1 + m/2)
    v = tl.where(e == 0, m.to(tl.float32) * 0.5, normal)
    return tl.where((c & 8) != 0, -v, v)


@triton.jit
def _e8m0_value(b, BIAS: tl.constexpr):
    """2^(b - BIAS) as fp32 for E8M0 bytes b (int32; 255, NaN, is not produced by quantizers)."""
    e = b - BIAS
    return tl.where(e <= -127, 0x00400000, (e + 127) << 23).to(tl.float32, bitcast=True)


@triton.jit
def _codes_tile(ptr, rows, ks, row_ok, k_ok, stride_r, FMT: tl.constexpr, LOW_FIRST: tl.constexpr,
                TRANSPOSED: tl.constexpr):
    """Codes of ``rows`` × ``ks`` as fp32 ([R, BK], or [BK, R] when TRANSPOSED); for e2m1 the
    byte of column k is k // 2, its nibble k % 2 (low first unless told otherwise)."""
    if FMT == "e2m1":
        byte_k = ks // 2
        if TRANSPOSED:
            raw = tl.load(ptr + rows[None, :] * stride_r + byte_k[:, None], mask=k_ok[:, None] & row_ok[None, :],
                          other=0).to(tl.int32)
            odd = (ks % 2)[:, None]
        else:
            raw = tl.load(ptr + rows[:, None] * stride_r + byte_k[None, :], mask=row_ok[:, None] & k_ok[None, :],
                          other=0).to(tl.int32)
            odd = (ks % 2)[None, :]
        if LOW_FIRST:
            high = odd == 1
        else:
            high = odd == 0
        tile = _e2m1_value(tl.where(high, raw >> 4, raw & 0xF))
    elif TRANSPOSED:
        tile = tl.load(ptr + rows[None, :] * stride_r + ks[:, None], mask=k_ok[:, None] & row_ok[None, :],
                       other=0.0).to(tl.float32)
    else:
        tile = tl.load(ptr + rows[:, None] * stride_r + ks[None, :], mask=row_ok[:, None] & k_ok[None, :],
                       other=0.0).to(tl.float32)
    # one return: the compiler types every return of a function alike, even under a
    # constexpr branch, and the two layouts differ
    return tile


@triton.jit
def _mx_matmul_kernel(a_ptr, as_ptr, b_ptr, bs_ptr, c_ptr, M, N, K, k_tiles_per_split,
                      stride_am, stride_asm, stride_bn, stride_bsn, stride_cs, stride_cm,
                      A_FMT: tl.constexpr, B_FMT: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                      BLOCK_K: tl.constexpr, SB: tl.constexpr, MODE: tl.constexpr, LOW_FIRST: tl.constexpr,
                      SCALE_DIV: tl.constexpr, BIAS: tl.constexpr):
    """MODE "dequant": codes·2^E to bf16, then tl.dot; "after": tl.dot of the codes of one
    SB-wide K block, then ·2^Ea·2^Eb (BLOCK_K == SB).  SCALE_DIV and BIAS are SB and 127
    except in faulty kernels."""
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    pid_k = tl.program_id(2)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    m_ok = offs_m < M
    n_ok = offs_n < N
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    first = pid_k * k_tiles_per_split
    last = tl.minimum(first + k_tiles_per_split, tl.cdiv(K, BLOCK_K))
    for kt in range(first, last):
        ks = kt * BLOCK_K + tl.arange(0, BLOCK_K)
        k_ok = ks < K
        a = _codes_tile(a_ptr, offs_m, ks, m_ok, k_ok, stride_am, A_FMT, LOW_FIRST, False)
        b = _codes_tile(b_ptr, offs_n, ks, n_ok, k_ok, stride_bn, B_FMT, LOW_FIRST, True)
        if MODE == "after":
            kb = (kt * BLOCK_K) // SCALE_DIV
            sa = _e8m0_value(tl.load(as_ptr + offs_m * stride_asm + kb, mask=m_ok, other=127).to(tl.int32), BIAS)
            sb = _e8m0_value(tl.load(bs_ptr + offs_n * stride_bsn + kb, mask=n_ok, other=127).to(tl.int32), BIAS)
            acc += tl.dot(a.to(tl.bfloat16), b.to(tl.bfloat16)) * sa[:, None] * sb[None, :]
        else:
            kb = ks // SCALE_DIV
            sa = tl.load(as_ptr + offs_m[:, None] * stride_asm + kb[None, :], mask=m_ok[:, None] & k_ok[None, :],
                         other=127).to(tl.int32)
            sb = tl.load(bs_ptr + offs_n[None, :] * stride_bsn + kb[:, None], mask=k_ok[:, None] & n_ok[None, :],
                         other=127).to(tl.int32)
            a = (a * _e8m0_value(sa, BIAS)).to(tl.bfloat16)
            b = (b * _e8m0_value(sb, BIAS)).to(tl.bfloat16)
            acc += tl.dot(a, b)
    tl.store(c_ptr + pid_k * stride_cs + offs_m[:, None] * stride_cm + offs_n[None, :],
             acc.to(c_ptr.dtype.element_ty), mask=m_ok[:, None] & n_ok[None, :])


@triton.jit
def _mx_dot_scaled_kernel(a_ptr, as_ptr, b_ptr, bs_ptr, c_ptr, M, N, K, stride_am, stride_asm, stride_bn,
                          stride_bsn, stride_cm, A_FMT: tl.constexpr, B_FMT: tl.constexpr, BLOCK_M: tl.constexpr,
                          BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, B_BYTES: tl.constexpr, SB: tl.constexpr):
    """The same product by ``tl.dot_scaled`` (M, N multiples of the tiles, K of BLOCK_K;
    B_BYTES: B's bytes per K tile, BLOCK_K/2 when packed)."""
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_s = tl.arange(0, BLOCK_K // SB)
    ka = tl.arange(0, BLOCK_K)
    kb = tl.arange(0, B_BYTES)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for kt in range(0, tl.cdiv(K, BLOCK_K)):
        a = tl.load(a_ptr + offs_m[:, None] * stride_am + (kt * BLOCK_K + ka)[None, :])
        b = tl.load(b_ptr + offs_n[None, :] * stride_bn + (kt * B_BYTES + kb)[:, None])
        sa = tl.load(as_ptr + offs_m[:, None] * stride_asm + (kt * (BLOCK_K // SB) + offs_s)[None, :])
        sb = tl.load(bs_ptr + offs_n[:, None] * stride_bsn + (kt * (BLOCK_K // SB) + offs_s)[None, :])
        acc = tl.dot_scaled(a, sa, A_FMT, b, sb, B_FMT, acc)
    tl.store(c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :], acc.to(c_ptr.dtype.element_ty))


def _check(a, a_s, b, b_s, block_size, out):
    if out not in OUT:
        raise ValueError(f"out must be one of {sorted(OUT)}, got out={out!r}")
    if block_size != SCALE_BLOCK:
        raise ValueError(f"MX blocks are {SCALE_BLOCK} values, got block_size={block_size}")
    if a.dtype not in (torch.float8_e4m3fn, torch.float8_e5m2):
        raise ValueError(f"a must be MXFP8 codes (float8_e4m3fn or float8_e5m2), got {a.dtype}")
    if b.dtype not in FORMATS:
        raise ValueError(f"b must be float8_e4m3fn, float8_e5m2 or float4_e2m1fn_x2 codes, got {b.dtype}")
    M, K = a.shape
    N = b.shape[0]
    kb = b.shape[1] * (2 if b.dtype == torch.float4_e2m1fn_x2 else 1)
    if kb != K or K % SCALE_BLOCK:
        raise ValueError(f"a [M, K] and b [N, K] (packed: [N, K/2]) must share K, a multiple of {SCALE_BLOCK}; "
                         f"got a {tuple(a.shape)}, b {tuple(b.shape)} ({b.dtype})")
    for name, s, rows in (("a_s", a_s, M), ("b_s", b_s, N)):
        if tuple(s.shape) != (rows, K // SCALE_BLOCK) or s.element_size() != 1:
            raise ValueError(f"{name} must be E8M0 bytes of shape {(rows, K // SCALE_BLOCK)}, got "
                             f"{tuple(s.shape)} {s.dtype}")


def _bytes(t):
    return t.contiguous().view(torch.uint8) if t.dtype in (torch.float4_e2m1fn_x2, torch.float8_e8m0fnu) \
        else t.contiguous()


def _launch(a, a_s, b, b_s, block_size, out, *, block_m=16, block_n=16, block_k=64, split_k=1, num_warps=4,
            mode="dequant", low_first=True, scale_div=SCALE_BLOCK, bias=127):
    _check(a, a_s, b, b_s, block_size, out)
    M, K = a.shape
    N = b.shape[0]
    if mode == "after":
        block_k = SCALE_BLOCK
    k_tiles = triton.cdiv(K, block_k)
    per_split = triton.cdiv(k_tiles, split_k)
    dtype = OUT[out] if split_k == 1 else torch.float32
    c = torch.empty((split_k, M, N), dtype=dtype, device=a.device)
    av, asv, bv, bsv = _bytes(a), _bytes(a_s), _bytes(b), _bytes(b_s)
    if M and N:
        grid = (triton.cdiv(M, block_m), triton.cdiv(N, block_n), split_k)
        _mx_matmul_kernel[grid](av, asv, bv, bsv, c, M, N, K, per_split, av.stride(0), asv.stride(0), bv.stride(0),
                                bsv.stride(0), c.stride(0), c.stride(1), A_FMT=FORMATS[a.dtype],
                                B_FMT=FORMATS[b.dtype], BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k,
                                SB=SCALE_BLOCK, MODE=mode, LOW_FIRST=low_first, SCALE_DIV=scale_div, BIAS=bias,
                                num_warps=num_warps)
    if split_k == 1:
        return c[0]
    return c.sum(dim=0, dtype=torch.float32).to(OUT[out])


def mx_matmul(a, a_s, b, b_s, *, block_size=32, out="bf16"):
    """C = (a·2^a_s) @ (b·2^b_s)ᵀ by dequantize-then-dot (BLOCK 16×16×64, num_warps 4).
    Returns C [M, N] in ``out``."""
    return _launch(a, a_s, b, b_s, block_size, out)


def mx_matmul_wide_tiles(a, a_s, b, b_s, *, block_size=32, out="bf16"):
    """As :func:`mx_matmul` with BLOCK 32×32×128, num_warps 8."""
    return _launch(a, a_s, b, b_s, block_size, out, block_m=32, block_n=32, block_k=128, num_warps=8)


def mx_matmul_scale_after_dot(a, a_s, b, b_s, *, block_size=32, out="bf16"):
    """As :func:`mx_matmul`, the codes of each 32-wide K block dotted first, then scaled."""
    return _launch(a, a_s, b, b_s, block_size, out, mode="after")


def mx_matmul_split_k(a, a_s, b, b_s, *, block_size=32, out="bf16"):
    """As :func:`mx_matmul` with split-K = 2 (fp32 partials summed on the host)."""
    return _launch(a, a_s, b, b_s, block_size, out, split_k=2)


def mx_matmul_dot_scaled(a, a_s, b, b_s, *, block_size=32, out="bf16"):
    """As :func:`mx_matmul` by ``tl.dot_scaled`` (tiles 16×16×64; inputs padded to the tiles).
    Raises NotImplementedError for the inputs ``dot_scaled_refusal`` names."""
    _check(a, a_s, b, b_s, block_size, out)
    cap = torch.cuda.get_device_capability(a.device) if a.device.type == "cuda" else None
    why = dot_scaled_refusal(a.device.type, cap, a, a_s, b, b_s)
    if why:
        raise NotImplementedError(why)
    return _dot_scaled_launch(a, a_s, b, b_s, out)


def dot_scaled_refusal(device_type: str, capability, a, a_s, b, b_s) -> str:
    """Why the ``dot_scaled`` variant cannot compute C on these operands, or "".  Where a CUDA
    GPU has no microscaling tensor cores (compute capability below 10: sm_90), Triton
    emulates ``tl.dot_scaled`` in bf16 and turns the E8M0 byte 0, which stands for 2^-127,
    into a scale of 0: a block with that scale adds 0 instead of its products (measured on
    an H100 and an H200 with Triton 3.6, docs/results/2026-12-05-h100-dot-scaled-scale-zero.md).
    No rescaling of the operands avoids it (a row's block scale is shared by every column),
    so the variant refuses a block with scale byte 0 and a nonzero code there, rather than
    return another product; a block of zeros (what a quantizer may give an all-zero block)
    adds 0 either way."""
    if device_type != "cuda" or capability is None or capability[0] >= 10:
        return ""
    zero = [name for name, codes, s in (("a", a, a_s), ("b", b, b_s)) if _nonzero_block_at_scale_0(codes, s)]
    if not zero:
        return ""
    return (f"{' and '.join(zero)} hold nonzero codes in a block with the E8M0 scale byte 0 (2^-127), which "
            f"tl.dot_scaled's bf16 emulation on compute capability {capability[0]}.{capability[1]} reads as a "
            f"scale of 0; use the dequantize-then-dot kernel (mx_matmul) for such scales, or a GPU with "
            f"microscaling tensor cores")


def _nonzero_block_at_scale_0(codes, scales) -> bool:
    """Whether a SCALE_BLOCK-wide block with scale byte 0 holds a nonzero code (codes [R, K] of
    one byte each, or e2m1 packed two to a byte [R, K/2]; either sign of zero is zero)."""
    raw = codes.contiguous().view(torch.uint8)
    mask = 0x77 if codes.dtype == torch.float4_e2m1fn_x2 else 0x7F
    per_block = raw.shape[1] // scales.shape[1]
    nonzero = ((raw & mask) != 0).reshape(raw.shape[0], scales.shape[1], per_block).any(-1)
    return bool((nonzero & (scales.view(torch.uint8) == 0)).any())


def _dot_scaled_launch(a, a_s, b, b_s, out):
    M, K = a.shape
    N = b.shape[0]
    bm, bn, bk = 16, 16, 64
    Mp, Np, Kp = triton.cdiv(M, bm) * bm, triton.cdiv(N, bn) * bn, triton.cdiv(K, bk) * bk
    packed = b.dtype == torch.float4_e2m1fn_x2

    def pad(t, rows, cols):
        out_t = torch.zeros((rows, cols), dtype=torch.uint8, device=t.device)
        raw = t.contiguous().view(torch.uint8)
        out_t[:raw.shape[0], :raw.shape[1]] = raw
        return out_t

    # zero codes and 2^-127 scales in the padding contribute exact zeros (read as a scale of 0
    # on sm_90, still zeros)
    ap = pad(a, Mp, Kp).view(a.dtype)
    bp = pad(b, Np, Kp // 2 if packed else Kp)
    bp = bp if packed else bp.view(b.dtype)
    asp, bsp = pad(a_s, Mp, Kp // SCALE_BLOCK), pad(b_s, Np, Kp // SCALE_BLOCK)
    c = torch.empty((Mp, Np), dtype=OUT[out], device=a.device)
    fmts = {torch.float8_e4m3fn: "e4m3", torch.float8_e5m2: "e5m2"}
    _mx_dot_scaled_kernel[(Mp // bm, Np // bn)](ap, asp, bp, bsp, c, Mp, Np, Kp, ap.stride(0), asp.stride(0),
                                                bp.stride(0), bsp.stride(0), c.stride(0), A_FMT=fmts[a.dtype],
                                                B_FMT="e2m1" if packed else fmts[b.dtype], BLOCK_M=bm, BLOCK_N=bn,
                                                BLOCK_K=bk, B_BYTES=bk // 2 if packed else bk, SB=SCALE_BLOCK)
    return c[:M, :N]


# ------------------------------------------------------------------------------ faulty versions

def mx_matmul_scale_block64(a, a_s, b, b_s, *, block_size=32, out="bf16"):
    """FAULTY (a block of the wrong size): the scale of K index k read at k // 64."""
    return _launch(a, a_s, b, b_s, block_size, out, scale_div=64)


def mx_matmul_nibble_swapped(a, a_s, b, b_s, *, block_size=32, out="bf16"):
    """FAULTY: packed e2m1 codes unpacked high nibble first (identical to the kernel on MXFP8)."""
    return _launch(a, a_s, b, b_s, block_size, out, low_first=False)


def mx_matmul_scale_bias(a, a_s, b, b_s, *, block_size=32, out="bf16"):
    """FAULTY: E8M0 bytes decoded with bias 128 instead of 127 (every scale halved)."""
    return _launch(a, a_s, b, b_s, block_size, out, bias=128)


def dot_scaled_supported(backend: str) -> tuple[bool, str]:
    """(whether :func:`mx_matmul_dot_scaled` can run on ``backend``, why not).  Triton's
    interpreter runs ``tl.dot_scaled`` from 3.9 on (3.6's has no ``create_dot_scaled``); on
    NVIDIA GPUs without microscaling tensor cores (sm_90) Triton emulates it by upcasting
    to bf16, and the variant refuses the scales that emulation misreads (``dot_scaled_refusal``)."""
    if backend != "interpreter":
        return True, ""
    from triton.runtime import interpreter as I
    if hasattr(I.InterpreterBuilder, "create_dot_scaled"):
        return True, ""
    import triton
    return False, (f"Triton {triton.__version__}'s interpreter has no tl.dot_scaled "
                   "(InterpreterBuilder.create_dot_scaled)")
