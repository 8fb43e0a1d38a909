"""MXFP8, MXFP4 and NVFP4 quantizers (docs/design.md §4.5; the precision plans of
``numoracle.calculus.quant_mx``).

MX (blocks of 32 along the last axis): amax = max|y| over the block (fp32, exact); the
shared exponent E from the exponent bits of amax (OCP "floor" rule: floor(log2 amax) −
emax_elem) or of the fp32 quotient amax / fmax (round-up "ceil" rule: ceil(log2 d),
subnormal d included), clamped to [−127, 127]; y / 2^E is computed as y·2^-E
with 2^-E built from its bits (one correctly rounded operation; no division by the
subnormal 2^-127 of a zero block); codes RN-even of clamp(y / 2^E, ±fmax):
e4m3 / e5m2 by the saturating cast (``cvt.rn.satfinite``), e2m1 by comparisons with the
grid's midpoints (``<`` or ``<=`` picks the even neighbour of each tie: Triton has no fp4
cast).  Scales are stored as E8M0 bytes E + 127; e2m1 codes two per byte, the first of
each pair in the low nibble (``tl.dot_scaled``'s layout), unless the kernel is told
otherwise.

NVFP4 (blocks of 16): one kernel reads the tensor's amax (a first kernel's per-row maxima,
reduced on the host: a max is exact), ts = max(amax, eps) / 2688 in fp32; per block
S = e4m3(clamp(fl32(amax / 6) / ts, 2^-6, 448)) (the saturating cast), codes RN-even e2m1
of clamp(y / fl32(ts·S), ±6).  Outputs: packed codes, e4m3 block scales, the tensor scale
(fp32, shape (1,)).

Behaviour-preserving variants: other tiles of blocks per program and num_warps, one row
per program, the packing by a reshape and split of the code tile instead of two strided
loads, and the E8M0 exponent from fp32 ``log2``/``floor``/``ceil`` instead of the bits.
Faulty versions are at the end of the module.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

FORMATS = {"e4m3fn": torch.float8_e4m3fn, "e5m2": torch.float8_e5m2}
MAX = {"e4m3fn": 448.0, "e5m2": 57344.0, "e2m1": 6.0}
# where round-to-nearest leaves the range: the max plus half its spacing
OVERFLOW = {"e4m3fn": 464.0, "e5m2": 61440.0, "e2m1": 7.0}
EMAX = {"e4m3fn": 8, "e5m2": 15, "e2m1": 2}
MX_BLOCK = 32
NV_BLOCK = 16


# ------------------------------------------------------------------------------ jit helpers

@triton.jit
def _mx_exponent(amax, FMAX: tl.constexpr, EMAX: tl.constexpr, RULE: tl.constexpr, VIA_LOG2: tl.constexpr):
    """The E8M0 exponent (int32 in [-127, 127]) of blocks with fp32 amax."""
    if VIA_LOG2:
        if RULE == "floor":
            e = tl.floor(tl.log2(amax)) - EMAX
        else:
            e = tl.ceil(tl.log2(amax / FMAX))
        # log2(0) = -inf: clamp in fp32 before the conversion to an integer
        e = tl.minimum(tl.maximum(e, -127.0), 127.0).to(tl.int32)
    else:
        if RULE == "floor":
            bits = amax.to(tl.int32, bitcast=True)
            e = ((bits >> 23) & 0xFF) - 127 - EMAX        # zero and subnormal amax clamp below
        else:
            bits = (amax / FMAX).to(tl.int32, bitcast=True)
            field = (bits >> 23) & 0xFF
            mant = bits & 0x7FFFFF
            # ceil(log2 d): the exponent, plus one unless d is a power of two; a subnormal d is
            # above 2^-127 (-126) exactly when its significand exceeds 2^22
            e = tl.where(field == 0, tl.where(mant > 0x400000, -126, -127), field - 127 + (mant != 0).to(tl.int32))
        e = tl.minimum(tl.maximum(e, -127), 127)
    return e


@triton.jit
def _pow2(e):
    """2^e as fp32 from its bits, e an int32 in [-127, 127] (2^-127 is a subnormal)."""
    return tl.where(e == -127, 0x00400000, (e + 127) << 23).to(tl.float32, bitcast=True)


@triton.jit
def _e2m1_code(t, TIES_AWAY: tl.constexpr):
    """The e2m1 code (int32 nibble: sign bit 8, magnitude code 0..7 for 0, .5, 1, 1.5, 2,
    3, 4, 6) of fp32 t, |t| <= 6 or saturating: counts the midpoints at or below |t|.  A
    tie goes to the even code (strict > at 0.25, 1.25, 2.5, 5; >= at 0.75, 1.75, 3.5),
    or away from zero with TIES_AWAY."""
    a = tl.abs(t)
    if TIES_AWAY:
        c = ((a >= 0.25).to(tl.int32) + (a >= 0.75).to(tl.int32) + (a >= 1.25).to(tl.int32)
             + (a >= 1.75).to(tl.int32) + (a >= 2.5).to(tl.int32) + (a >= 3.5).to(tl.int32)
             + (a >= 5.0).to(tl.int32))
    else:
        c = ((a > 0.25).to(tl.int32) + (a >= 0.75).to(tl.int32) + (a > 1.25).to(tl.int32)
             + (a >= 1.75).to(tl.int32) + (a > 2.5).to(tl.int32) + (a >= 3.5).to(tl.int32)
             + (a > 5.0).to(tl.int32))
    return c | tl.where(t < 0, 8, 0)


@triton.jit
def _pack_pair(first, second, LOW_FIRST: tl.constexpr):
    """Two e2m1 codes in one byte (uint8): the first in the low nibble, or the high one."""
    if LOW_FIRST:
        byte = first | (second << 4)
    else:
        byte = second | (first << 4)
    return byte.to(tl.uint8)


# ------------------------------------------------------------------------------ MX kernels

@triton.jit
def _mx_quant_kernel(y_ptr, q_ptr, s_ptr, n_cols, n_blocks, q_row_stride, s_row_stride,
                     BLOCK: tl.constexpr, BPP: tl.constexpr, FMAX: tl.constexpr, OVER: tl.constexpr,
                     EMAX: tl.constexpr, RULE: tl.constexpr, VIA_LOG2: tl.constexpr, FP4: tl.constexpr,
                     LOW_FIRST: tl.constexpr,
                     PACK_BY_SPLIT: tl.constexpr, FAULT: tl.constexpr):
    """BPP consecutive blocks of one row per program: a [BPP, BLOCK] tile (FP4: its even and
    odd columns as two [BPP, BLOCK/2] tiles, or the whole tile split after rounding)."""
    row = tl.program_id(0).to(tl.int64)
    blocks = tl.program_id(1) * BPP + tl.arange(0, BPP)
    b_ok = blocks < n_blocks
    if FP4 and not PACK_BY_SPLIT:
        half = tl.arange(0, BLOCK // 2)
        offs = row * n_cols + blocks[:, None] * BLOCK + 2 * half[None, :]
        y0 = tl.load(y_ptr + offs, mask=b_ok[:, None], other=0.0).to(tl.float32)
        y1 = tl.load(y_ptr + offs + 1, mask=b_ok[:, None], other=0.0).to(tl.float32)
        amax = tl.maximum(tl.max(tl.abs(y0), axis=1), tl.max(tl.abs(y1), axis=1))
    else:
        cols = tl.arange(0, BLOCK)
        offs = row * n_cols + blocks[:, None] * BLOCK + cols[None, :]
        y = tl.load(y_ptr + offs, mask=b_ok[:, None], other=0.0).to(tl.float32)
        amax = tl.max(tl.abs(y), axis=1)
    if FAULT == "wrong_rounding":
        # ceil where the rule floors, floor where it ceils
        if RULE == "floor":
            e = tl.minimum(tl.maximum(tl.ceil(tl.log2(amax)) - EMAX, -127.0), 127.0).to(tl.int32)
        else:
            e = tl.minimum(tl.maximum(tl.floor(tl.log2(amax / FMAX)), -127.0), 127.0).to(tl.int32)
    else:
        e = _mx_exponent(amax, FMAX, EMAX, RULE, VIA_LOG2)
    # y·2^-E: the correctly rounded y / 2^E, without dividing by the subnormal 2^-127 of a
    # zero block (which a GPU division could flush, giving 0/0)
    inv = _pow2(-e)[:, None]
    tl.store(s_ptr + row * s_row_stride + blocks, (e + 127).to(tl.uint8), mask=b_ok)
    if FP4:
        if PACK_BY_SPLIT:
            c = _e2m1_code(tl.clamp(y * inv, -FMAX, FMAX), FAULT == "ties_away")
            c0, c1 = tl.split(tl.reshape(c, (BPP, BLOCK // 2, 2)))
        else:
            c0 = _e2m1_code(tl.clamp(y0 * inv, -FMAX, FMAX), FAULT == "ties_away")
            c1 = _e2m1_code(tl.clamp(y1 * inv, -FMAX, FMAX), FAULT == "ties_away")
        boffs = row * q_row_stride + blocks[:, None] * (BLOCK // 2) + tl.arange(0, BLOCK // 2)[None, :]
        tl.store(q_ptr + boffs, _pack_pair(c0, c1, LOW_FIRST != (FAULT == "nibble_swapped")), mask=b_ok[:, None])
    else:
        t = y * inv
        if FAULT == "nan_on_overflow":
            # torch's cast rule on CUDA instead of saturation: past the top of the range, NaN
            t = tl.where(tl.abs(t) > OVER, float("nan"), tl.clamp(t, -FMAX, FMAX))
        else:
            t = tl.clamp(t, -FMAX, FMAX)
        tl.store(q_ptr + row * q_row_stride + blocks[:, None] * BLOCK + cols[None, :],
                 t.to(q_ptr.dtype.element_ty), mask=b_ok[:, None])


@triton.jit
def _mx_quant_wide_kernel(y_ptr, q_ptr, s_ptr, n_cols, n_blocks, q_row_stride, s_row_stride,
                          BLOCK: tl.constexpr, WIDE: tl.constexpr, FMAX: tl.constexpr, OVER: tl.constexpr,
                          EMAX: tl.constexpr, RULE: tl.constexpr, FP4: tl.constexpr):
    """FAULTY (a block of the wrong size): one amax over WIDE consecutive blocks, its scale
    stored for each of them."""
    row = tl.program_id(0).to(tl.int64)
    blocks = tl.program_id(1) * WIDE + tl.arange(0, WIDE)
    b_ok = blocks < n_blocks
    cols = tl.arange(0, BLOCK)
    y = tl.load(y_ptr + row * n_cols + blocks[:, None] * BLOCK + cols[None, :], mask=b_ok[:, None],
                other=0.0).to(tl.float32)
    amax = tl.max(tl.max(tl.abs(y), axis=1), axis=0)
    e = _mx_exponent(amax, FMAX, EMAX, RULE, False)
    tl.store(s_ptr + row * s_row_stride + blocks, (tl.zeros((WIDE,), tl.int32) + e + 127).to(tl.uint8), mask=b_ok)
    t = tl.clamp(y * _pow2(-e), -FMAX, FMAX)
    if FP4:
        c0, c1 = tl.split(tl.reshape(_e2m1_code(t, False), (WIDE, BLOCK // 2, 2)))
        boffs = row * q_row_stride + blocks[:, None] * (BLOCK // 2) + tl.arange(0, BLOCK // 2)[None, :]
        tl.store(q_ptr + boffs, _pack_pair(c0, c1, True), mask=b_ok[:, None])
    else:
        tl.store(q_ptr + row * q_row_stride + blocks[:, None] * BLOCK + cols[None, :],
                 t.to(q_ptr.dtype.element_ty), mask=b_ok[:, None])


# ------------------------------------------------------------------------------ NVFP4 kernels

@triton.jit
def _row_amax_kernel(y_ptr, out_ptr, n_cols, BLOCK: tl.constexpr):
    """max|y| of one row (fp32), in chunks of BLOCK."""
    row = tl.program_id(0).to(tl.int64)
    acc = tl.zeros((BLOCK,), tl.float32)
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        y = tl.load(y_ptr + row * n_cols + cols, mask=cols < n_cols, other=0.0).to(tl.float32)
        acc = tl.maximum(acc, tl.abs(y))
    tl.store(out_ptr + row, tl.max(acc, axis=0))


@triton.jit
def _nvfp4_kernel(y_ptr, amax_ptr, q_ptr, s_ptr, ts_ptr, n_cols, n_blocks, q_row_stride, s_row_stride,
                  EPS: tl.constexpr, BLOCK: tl.constexpr, BPP: tl.constexpr, LOW_FIRST: tl.constexpr,
                  FAULT: tl.constexpr):
    """BPP consecutive blocks of one row per program; every program derives the tensor
    scale from the tensor's amax, program (0, 0) stores it."""
    row = tl.program_id(0).to(tl.int64)
    blocks = tl.program_id(1) * BPP + tl.arange(0, BPP)
    b_ok = blocks < n_blocks
    ts = tl.maximum(tl.load(amax_ptr), EPS) / 2688.0
    if (tl.program_id(0) == 0) & (tl.program_id(1) == 0):
        tl.store(ts_ptr, ts)
    cols = tl.arange(0, BLOCK)
    y = tl.load(y_ptr + row * n_cols + blocks[:, None] * BLOCK + cols[None, :], mask=b_ok[:, None],
                other=0.0).to(tl.float32)
    amax = tl.max(tl.abs(y), axis=1)
    if FAULT == "tensor_scale_dropped":
        r = amax / 6.0
    else:
        r = (amax / 6.0) / ts
    r = tl.clamp(r, 0.015625, 448.0)
    s8 = r.to(tl.float8e4nv)
    if FAULT == "scale_truncated":
        # toward zero: one e4m3 code down where the nearest one lies above r
        down = (s8.to(tl.uint8, bitcast=True) - 1).to(tl.uint8).to(tl.float8e4nv, bitcast=True)
        s8 = tl.where(s8.to(tl.float32) > r, down, s8)
    tl.store(s_ptr + row * s_row_stride + blocks, s8, mask=b_ok)
    if FAULT == "tensor_scale_dropped":
        total = s8.to(tl.float32)
    elif FAULT == "tensor_scale_twice":
        total = ts * s8.to(tl.float32) * ts
    else:
        total = ts * s8.to(tl.float32)
    c = _e2m1_code(tl.clamp(y / total[:, None], -6.0, 6.0), FAULT == "ties_away")
    c0, c1 = tl.split(tl.reshape(c, (BPP, BLOCK // 2, 2)))
    boffs = row * q_row_stride + blocks[:, None] * (BLOCK // 2) + tl.arange(0, BLOCK // 2)[None, :]
    tl.store(q_ptr + boffs, _pack_pair(c0, c1, LOW_FIRST != (FAULT == "nibble_swapped")), mask=b_ok[:, None])


@triton.jit
def _nvfp4_wide_kernel(y_ptr, amax_ptr, q_ptr, s_ptr, ts_ptr, n_cols, n_blocks, q_row_stride, s_row_stride,
                       EPS: tl.constexpr, BLOCK: tl.constexpr, WIDE: tl.constexpr):
    """FAULTY (a block of the wrong size): one block scale from the amax of WIDE blocks."""
    row = tl.program_id(0).to(tl.int64)
    blocks = tl.program_id(1) * WIDE + tl.arange(0, WIDE)
    b_ok = blocks < n_blocks
    ts = tl.maximum(tl.load(amax_ptr), EPS) / 2688.0
    if (tl.program_id(0) == 0) & (tl.program_id(1) == 0):
        tl.store(ts_ptr, ts)
    cols = tl.arange(0, BLOCK)
    y = tl.load(y_ptr + row * n_cols + blocks[:, None] * BLOCK + cols[None, :], mask=b_ok[:, None],
                other=0.0).to(tl.float32)
    amax = tl.max(tl.max(tl.abs(y), axis=1), axis=0)
    s8 = tl.clamp((amax / 6.0) / ts, 0.015625, 448.0).to(tl.float8e4nv)
    tl.store(s_ptr + row * s_row_stride + blocks, (tl.zeros((WIDE,), tl.float32) + s8.to(tl.float32)).to(tl.float8e4nv),
             mask=b_ok)
    c = _e2m1_code(tl.clamp(y / (ts * s8.to(tl.float32)), -6.0, 6.0), False)
    c0, c1 = tl.split(tl.reshape(c, (WIDE, BLOCK // 2, 2)))
    boffs = row * q_row_stride + blocks[:, None] * (BLOCK // 2) + tl.arange(0, BLOCK // 2)[None, :]
    tl.store(q_ptr + boffs, _pack_pair(c0, c1, True), mask=b_ok[:, None])


# ------------------------------------------------------------------------------ launchers

def _rows(x: torch.Tensor, block: int):
    if x.dtype not in (torch.bfloat16, torch.float16, torch.float32):
        raise ValueError(f"x must be bf16, fp16 or fp32, got {x.dtype}")
    if x.dim() == 0 or x.shape[-1] % block:
        raise ValueError(f"the last dimension ({tuple(x.shape)}) must be a multiple of the block size {block}")
    return x.contiguous().reshape(-1, x.shape[-1])


def _order(nibble_order: str) -> bool:
    if nibble_order not in ("low_first", "high_first"):
        raise ValueError(f"nibble_order must be 'low_first' or 'high_first', got {nibble_order!r}")
    return nibble_order == "low_first"


def _launch_mx(x, fmt, scale_rule, block_size, *, nibble_order="low_first", bpp=1, num_warps=4, per_row=False,
               via_log2=False, pack_by_split=False, fault="none", wide=1):
    if fmt not in MAX:
        raise ValueError(f"fmt must be one of {sorted(MAX)}, got {fmt!r}")
    if scale_rule not in ("floor", "ceil"):
        raise ValueError(f"scale_rule must be 'floor' or 'ceil', got {scale_rule!r}")
    x2 = _rows(x, block_size)
    rows, n_cols = x2.shape
    nb = n_cols // block_size
    fp4 = fmt == "e2m1"
    q = torch.empty((rows, n_cols // 2) if fp4 else (rows, n_cols), dtype=torch.uint8 if fp4 else FORMATS[fmt],
                    device=x.device)
    s = torch.empty((rows, nb), dtype=torch.uint8, device=x.device)
    if rows and nb:
        common = dict(BLOCK=block_size, FMAX=MAX[fmt], OVER=OVERFLOW[fmt], EMAX=EMAX[fmt], RULE=scale_rule, FP4=fp4)
        if wide > 1:
            _mx_quant_wide_kernel[(rows, triton.cdiv(nb, wide))](x2, q, s, n_cols, nb, q.stride(0), s.stride(0),
                                                                 WIDE=wide, **common, num_warps=num_warps)
        else:
            if per_row:
                bpp = triton.next_power_of_2(nb)
            _mx_quant_kernel[(rows, triton.cdiv(nb, bpp))](
                x2, q, s, n_cols, nb, q.stride(0), s.stride(0), BPP=bpp, VIA_LOG2=via_log2,
                LOW_FIRST=_order(nibble_order), PACK_BY_SPLIT=pack_by_split, FAULT=fault, **common,
                num_warps=num_warps)
    lead = tuple(x.shape[:-1])
    return q.reshape(lead + (q.shape[-1],)), s.view(torch.float8_e8m0fnu).reshape(lead + (nb,))


def _launch_nvfp4(x, block_size, nibble_order, eps, *, bpp=1, num_warps=4, per_row=False, fault="none", wide=1):
    x2 = _rows(x, block_size)
    rows, n_cols = x2.shape
    nb = n_cols // block_size
    q = torch.empty((rows, n_cols // 2), dtype=torch.uint8, device=x.device)
    s = torch.empty((rows, nb), dtype=torch.float8_e4m3fn, device=x.device)
    ts = torch.zeros((1,), dtype=torch.float32, device=x.device)
    if rows and nb:
        row_amax = torch.empty((rows,), dtype=torch.float32, device=x.device)
        _row_amax_kernel[(rows,)](x2, row_amax, n_cols, BLOCK=min(triton.next_power_of_2(n_cols), 1024))
        amax = row_amax.max().reshape(1)           # a max is exact in any order
        if wide > 1:
            _nvfp4_wide_kernel[(rows, triton.cdiv(nb, wide))](x2, amax, q, s, ts, n_cols, nb, q.stride(0),
                                                              s.stride(0), EPS=float(eps), BLOCK=block_size,
                                                              WIDE=wide, num_warps=num_warps)
        else:
            if per_row:
                bpp = triton.next_power_of_2(nb)
            _nvfp4_kernel[(rows, triton.cdiv(nb, bpp))](x2, amax, q, s, ts, n_cols, nb, q.stride(0), s.stride(0),
                                                        EPS=float(eps), BLOCK=block_size, BPP=bpp,
                                                        LOW_FIRST=_order(nibble_order), FAULT=fault,
                                                        num_warps=num_warps)
    lead = tuple(x.shape[:-1])
    return q.reshape(lead + (q.shape[-1],)), s.reshape(lead + (nb,)), ts


# ------------------------------------------------------------------------------ MXFP8

def mxfp8_quant(x, *, fmt="e4m3fn", scale_rule="floor", block_size=32):
    """MXFP8 quantization, one block per program (num_warps 4). Returns ``(codes, scales)``:
    codes in ``fmt`` with x's shape, scales float8_e8m0fnu of shape x.shape[:-1] + (K/32,)."""
    return _launch_mx(x, fmt, scale_rule, block_size)


def mxfp8_quant_tiles(x, *, fmt="e4m3fn", scale_rule="floor", block_size=32):
    """As :func:`mxfp8_quant`, four blocks per program (num_warps 2)."""
    return _launch_mx(x, fmt, scale_rule, block_size, bpp=4, num_warps=2)


def mxfp8_quant_rows(x, *, fmt="e4m3fn", scale_rule="floor", block_size=32):
    """As :func:`mxfp8_quant`, one row per program (all its blocks as one tile, num_warps 8)."""
    return _launch_mx(x, fmt, scale_rule, block_size, per_row=True, num_warps=8)


def mxfp8_quant_log2(x, *, fmt="e4m3fn", scale_rule="floor", block_size=32):
    """As :func:`mxfp8_quant`, the exponent from fp32 log2 and floor/ceil instead of its bits."""
    return _launch_mx(x, fmt, scale_rule, block_size, via_log2=True)


# ------------------------------------------------------------------------------ MXFP4

def mxfp4_quant(x, *, scale_rule="floor", block_size=32, nibble_order="low_first"):
    """MXFP4 quantization, one block per program, even and odd columns loaded apart (num_warps
    4). Returns ``(codes, scales)``: codes packed two per byte (uint8, x.shape[:-1] + (K/2,)),
    scales float8_e8m0fnu (x.shape[:-1] + (K/32,))."""
    return _launch_mx(x, "e2m1", scale_rule, block_size, nibble_order=nibble_order)


def mxfp4_quant_split(x, *, scale_rule="floor", block_size=32, nibble_order="low_first"):
    """As :func:`mxfp4_quant`, two blocks per program, the code tile paired by reshape and split."""
    return _launch_mx(x, "e2m1", scale_rule, block_size, nibble_order=nibble_order, bpp=2, pack_by_split=True)


def mxfp4_quant_rows(x, *, scale_rule="floor", block_size=32, nibble_order="low_first"):
    """As :func:`mxfp4_quant`, one row per program (num_warps 8)."""
    return _launch_mx(x, "e2m1", scale_rule, block_size, nibble_order=nibble_order, per_row=True, num_warps=8)


def mxfp4_quant_log2(x, *, scale_rule="floor", block_size=32, nibble_order="low_first"):
    """As :func:`mxfp4_quant`, the exponent from fp32 log2 and floor/ceil."""
    return _launch_mx(x, "e2m1", scale_rule, block_size, nibble_order=nibble_order, via_log2=True)


# ------------------------------------------------------------------------------ NVFP4

def nvfp4_quant(x, *, block_size=16, nibble_order="low_first", eps=1e-10):
    """NVFP4 quantization, one block per program (num_warps 4). Returns ``(codes, scales,
    tensor_scale)``: packed e2m1 codes (uint8, x.shape[:-1] + (K/2,)), e4m3 block scales
    (x.shape[:-1] + (K/16,)), the fp32 tensor scale (shape (1,))."""
    return _launch_nvfp4(x, block_size, nibble_order, eps)


def nvfp4_quant_tiles(x, *, block_size=16, nibble_order="low_first", eps=1e-10):
    """As :func:`nvfp4_quant`, four blocks per program (num_warps 2)."""
    return _launch_nvfp4(x, block_size, nibble_order, eps, bpp=4, num_warps=2)


def nvfp4_quant_rows(x, *, block_size=16, nibble_order="low_first", eps=1e-10):
    """As :func:`nvfp4_quant`, one row per program (num_warps 8)."""
    return _launch_nvfp4(x, block_size, nibble_order, eps, per_row=True, num_warps=8)


# ------------------------------------------------------------------------------ faulty versions

def mxfp8_quant_wrong_rounding(x, *, fmt="e4m3fn", scale_rule="floor", block_size=32):
    """FAULTY: the exponent rounded the other way (ceil(log2 amax) for the OCP floor rule,
    floor(log2(amax/fmax)) for the round-up rule)."""
    return _launch_mx(x, fmt, scale_rule, block_size, fault="wrong_rounding")


def mxfp8_quant_nan_on_overflow(x, *, fmt="e4m3fn", scale_rule="floor", block_size=32):
    """FAULTY: elements past the range become NaN (torch's CUDA cast rule) instead of
    saturating; under the OCP floor rule the block's largest elements do pass fmax."""
    return _launch_mx(x, fmt, scale_rule, block_size, fault="nan_on_overflow")


def mxfp8_quant_block64(x, *, fmt="e4m3fn", scale_rule="floor", block_size=32):
    """FAULTY: one scale per 64 values (stored for both blocks of 32)."""
    return _launch_mx(x, fmt, scale_rule, block_size, wide=2)


def mxfp4_quant_ties_away(x, *, scale_rule="floor", block_size=32, nibble_order="low_first"):
    """FAULTY: e2m1 ties rounded away from zero."""
    return _launch_mx(x, "e2m1", scale_rule, block_size, nibble_order=nibble_order, fault="ties_away")


def mxfp4_quant_nibble_swapped(x, *, scale_rule="floor", block_size=32, nibble_order="low_first"):
    """FAULTY: the nibble order swapped in packing."""
    return _launch_mx(x, "e2m1", scale_rule, block_size, nibble_order=nibble_order, fault="nibble_swapped")


def mxfp4_quant_wrong_rounding(x, *, scale_rule="floor", block_size=32, nibble_order="low_first"):
    """FAULTY: the exponent rounded the other way (see :func:`mxfp8_quant_wrong_rounding`)."""
    return _launch_mx(x, "e2m1", scale_rule, block_size, nibble_order=nibble_order, fault="wrong_rounding")


def mxfp4_quant_block64(x, *, scale_rule="floor", block_size=32, nibble_order="low_first"):
    """FAULTY: one scale per 64 values (stored for both blocks of 32)."""
    return _launch_mx(x, "e2m1", scale_rule, block_size, wide=2)


def nvfp4_quant_tensor_scale_twice(x, *, block_size=16, nibble_order="low_first", eps=1e-10):
    """FAULTY: codes divided by ts·S·ts (the tensor scale applied twice)."""
    return _launch_nvfp4(x, block_size, nibble_order, eps, fault="tensor_scale_twice")


def nvfp4_quant_tensor_scale_dropped(x, *, block_size=16, nibble_order="low_first", eps=1e-10):
    """FAULTY: the tensor scale applied nowhere (block scale e4m3(amax/6), codes y/S); the
    tensor scale is still returned."""
    return _launch_nvfp4(x, block_size, nibble_order, eps, fault="tensor_scale_dropped")


def nvfp4_quant_ties_away(x, *, block_size=16, nibble_order="low_first", eps=1e-10):
    """FAULTY: e2m1 ties rounded away from zero."""
    return _launch_nvfp4(x, block_size, nibble_order, eps, fault="ties_away")


def nvfp4_quant_nibble_swapped(x, *, block_size=16, nibble_order="low_first", eps=1e-10):
    """FAULTY: the nibble order swapped in packing."""
    return _launch_nvfp4(x, block_size, nibble_order, eps, fault="nibble_swapped")


def nvfp4_quant_scale_truncated(x, *, block_size=16, nibble_order="low_first", eps=1e-10):
    """FAULTY: the block scale rounded toward zero in e4m3 instead of to nearest."""
    return _launch_nvfp4(x, block_size, nibble_order, eps, fault="scale_truncated")


def nvfp4_quant_block32(x, *, block_size=16, nibble_order="low_first", eps=1e-10):
    """FAULTY: one block scale per 32 values (MX's block size), stored for both blocks of 16."""
    return _launch_nvfp4(x, block_size, nibble_order, eps, wide=2)
