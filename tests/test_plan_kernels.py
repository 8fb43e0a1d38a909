"""Small Triton kernels whose precision plans the plan tests read (no tests here).

Kept apart from the test modules so that the plan's compile helper process can import them
without a test module's set-up."""

import torch
import triton
import triton.language as tl
from triton.language.extra import libdevice

LOG2E = tl.constexpr(1.4426950408889634)


@triton.jit
def sum_squares_kernel(x_ptr, out_ptr, n_cols, ACC: tl.constexpr, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + row * n_cols + cols, mask=cols < n_cols, other=0.0)
    if ACC == "fp32":
        x = x.to(tl.float32)
    tl.store(out_ptr + row, tl.sum(x * x, axis=0))


def sum_squares(x, *, acc="fp32", num_warps=4):
    """Row sums of squares (fp32 out), squares and sum in fp32 or in x's format."""
    out = torch.empty(x.shape[0], dtype=torch.float32)
    sum_squares_kernel[(x.shape[0],)](x, out, x.shape[1], ACC=acc, BLOCK=triton.next_power_of_2(x.shape[1]),
                                      num_warps=num_warps)
    return out


@triton.jit
def chunked_sum_squares_kernel(x_ptr, out_ptr, n_cols, ACC: tl.constexpr, VECTOR: tl.constexpr,
                               CHUNK: tl.constexpr):
    row = tl.program_id(0)
    if VECTOR:
        # a loop-carried vector accumulator, reduced after the loop (Triton's layer-norm tutorial)
        if ACC == "fp32":
            acc = tl.zeros((CHUNK,), dtype=tl.float32)
        else:
            acc = tl.zeros((CHUNK,), dtype=tl.bfloat16)
        for start in range(0, n_cols, CHUNK):
            cols = start + tl.arange(0, CHUNK)
            x = tl.load(x_ptr + row * n_cols + cols, mask=cols < n_cols, other=0.0)
            if ACC == "fp32":
                x = x.to(tl.float32)
            acc += x * x
        s = tl.sum(acc, axis=0)
    else:
        # a scalar running sum of each chunk's reduction
        s = tl.zeros([], dtype=tl.float32)
        for start in range(0, n_cols, CHUNK):
            cols = start + tl.arange(0, CHUNK)
            x = tl.load(x_ptr + row * n_cols + cols, mask=cols < n_cols, other=0.0).to(tl.float32)
            s += tl.sum(x * x, axis=0)
    tl.store(out_ptr + row, s)


def chunked_sum_squares(x, *, acc="fp32", vector=True, chunk=64):
    """Row sums of squares (fp32 out) over CHUNK-wide chunks: a vector accumulator reduced after
    the loop, or a scalar running sum of the chunks' sums."""
    out = torch.empty(x.shape[0], dtype=torch.float32)
    chunked_sum_squares_kernel[(x.shape[0],)](x, out, x.shape[1], ACC=acc, VECTOR=vector, CHUNK=chunk)
    return out


@triton.jit
def scale_kernel(x_ptr, y_ptr, n, S: tl.constexpr, ROUND: tl.constexpr, EXP: tl.constexpr,
                 BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(x_ptr + offs, mask=m, other=0.0).to(tl.float32)
    if EXP == "exp":
        e = tl.exp(x)
    elif EXP == "exp2_log2e":
        e = tl.exp2(x * LOG2E)
    else:
        e = tl.exp2(x)
    v = e * S + 0.0
    if ROUND == "rtz":
        v = v.to(tl.bfloat16, fp_downcast_rounding="rtz")
    tl.store(y_ptr + offs, v, mask=m)


def scaled_exp(x, *, s=0.5, rounding="rtne", exp="exp"):
    y = torch.empty_like(x)
    n = x.numel()
    scale_kernel[(triton.cdiv(n, 128),)](x, y, n, S=s, ROUND=rounding, EXP=exp, BLOCK=128)
    return y


@triton.jit
def capped_kernel(x_ptr, y_ptr, n, WAY: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(x_ptr + offs, mask=m, other=0.0).to(tl.float32)
    if WAY == "tanh":
        t = libdevice.tanh(x)
    elif WAY == "sigmoid":
        t = 2 * tl.sigmoid(2 * x) - 1
    else:
        t = x
    tl.store(y_ptr + offs, (tl.exp(t) + t).to(tl.bfloat16), mask=m)


def capped_exp(x, *, way="tanh"):
    """exp(t) + t of t = tanh(x): through libdevice, built from a sigmoid, or with t = x."""
    y = torch.empty_like(x)
    capped_kernel[(triton.cdiv(x.numel(), 128),)](x, y, x.numel(), WAY=way, BLOCK=128)
    return y


@triton.jit
def dot_kernel(a_ptr, b_ptr, c_ptr, PREC: tl.constexpr):
    r = tl.arange(0, 16)
    a = tl.load(a_ptr + r[:, None] * 16 + r[None, :])
    b = tl.load(b_ptr + r[:, None] * 16 + r[None, :])
    tl.store(c_ptr + r[:, None] * 16 + r[None, :], tl.dot(a, b, input_precision=PREC))


def dot16(a, b, *, precision="tf32"):
    c = torch.empty((16, 16), dtype=torch.float32)
    dot_kernel[(1,)](a, b, c, PREC=precision)
    return c


@triton.jit
def widened_dot_kernel(a_ptr, b_ptr, c_ptr, PREC: tl.constexpr):
    r = tl.arange(0, 16)
    a = tl.load(a_ptr + r[:, None] * 16 + r[None, :]).to(tl.float32)
    b = tl.load(b_ptr + r[:, None] * 16 + r[None, :]).to(tl.float32)
    tl.store(c_ptr + r[:, None] * 16 + r[None, :], tl.dot(a, b, input_precision=PREC))


def widened_dot16(a, b, *, precision="tf32"):
    """tl.dot (inputPrecision=tf32 by default) of tiles loaded in their own format and widened to fp32."""
    c = torch.empty((16, 16), dtype=torch.float32)
    widened_dot_kernel[(1,)](a, b, c, PREC=precision)
    return c


@triton.autotune(configs=[triton.Config({"BLOCK": 64}, num_warps=1), triton.Config({"BLOCK": 128}, num_warps=4)],
                 key=["n"])
@triton.jit
def tuned_copy_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=offs < n).to(tl.float32) * 2.0, mask=offs < n)


def tuned_copy(x):
    y = torch.empty(x.shape, dtype=torch.float32)
    n = x.numel()
    tuned_copy_kernel[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)](x, y, n)
    return y


@triton.heuristics(values={"BLOCK": lambda args: triton.next_power_of_2(args["n"])})
@triton.jit
def heuristic_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) + 1.0, mask=offs < n)


def heuristic_add(x):
    y = torch.empty_like(x)
    heuristic_kernel[(1,)](x, y, x.numel())
    return y


@triton.jit
def partial_rows_kernel(x_ptr, part_ptr, n_rows, n_cols, ROWS: tl.constexpr, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for r in range(pid * ROWS, tl.minimum(pid * ROWS + ROWS, n_rows)):
        acc += tl.load(x_ptr + r * n_cols + cols, mask=cols < n_cols, other=0.0).to(tl.float32)
    tl.store(part_ptr + pid * n_cols + cols, acc, mask=cols < n_cols)


def column_sums(x, *, rows_per_program=2):
    """Column sums: per-program fp32 partial rows, summed on the host in fp32, cast to x's format."""
    n_rows, n_cols = x.shape
    progs = triton.cdiv(n_rows, rows_per_program)
    part = torch.zeros((progs, n_cols), dtype=torch.float32)
    partial_rows_kernel[(progs,)](x, part, n_rows, n_cols, ROWS=rows_per_program,
                                  BLOCK=triton.next_power_of_2(n_cols))
    return part.sum(dim=0).to(x.dtype)


@triton.jit
def fp8_dot_kernel(a_ptr, b_ptr, c_ptr, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    rm = tl.arange(0, BM)
    rn = tl.arange(0, BN)
    rk = tl.arange(0, BK)
    a = tl.load(a_ptr + rm[:, None] * BK + rk[None, :])
    b = tl.load(b_ptr + rk[:, None] * BN + rn[None, :])
    tl.store(c_ptr + rm[:, None] * BN + rn[None, :], tl.dot(a, b))


def fp8_dot(a, b):
    """C = A·B for e4m3 A [M, 32] and B [32, 64] in one tile (M = 16: mma.sync; M = 64: wgmma)."""
    c = torch.empty((a.shape[0], 64), dtype=torch.float32)
    fp8_dot_kernel[(1,)](a, b, c, BM=a.shape[0], BN=64, BK=32)
    return c


@triton.jit
def tiled_matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr,
                        INIT_FROM_C: tl.constexpr, bias_ptr=None, BIAS_RELU: tl.constexpr = False):
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.program_id(1) * BN + tl.arange(0, BN)
    cmask = (rm[:, None] < M) & (rn[None, :] < N)
    if INIT_FROM_C:
        acc = tl.load(c_ptr + rm[:, None] * N + rn[None, :], mask=cmask, other=0.0).to(tl.float32)
    else:
        acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k0 in range(0, K, BK):
        rk = k0 + tl.arange(0, BK)
        a = tl.load(a_ptr + rm[:, None] * K + rk[None, :], mask=(rm[:, None] < M) & (rk[None, :] < K), other=0.0)
        b = tl.load(b_ptr + rk[:, None] * N + rn[None, :], mask=(rk[:, None] < K) & (rn[None, :] < N), other=0.0)
        acc += tl.dot(a, b)
    if BIAS_RELU:
        bias = tl.load(bias_ptr + rn, mask=rn < N, other=0.0).to(tl.float32)
        acc = tl.maximum(acc + bias[None, :], 0.0)
    tl.store(c_ptr + rm[:, None] * N + rn[None, :], acc.to(c_ptr.dtype.element_ty), mask=cmask)


def tiled_matmul(a, b, *, init_from_c=False):
    """C = A·B over a loop of K tiles into an fp32 accumulator from zero (or, the case the skeleton
    leaves to its user, from C's own values), stored in A's format."""
    M, K = a.shape
    N = b.shape[1]
    c = torch.zeros((M, N), dtype=a.dtype)
    tiled_matmul_kernel[(triton.cdiv(M, 16), triton.cdiv(N, 16))](a, b, c, M, N, K, BM=16, BN=16, BK=16,
                                                                  INIT_FROM_C=init_from_c)
    return c


def linear_relu(a, b, bias):
    """A user's linear layer: the tiled matmul, then ``acc + bias`` and a ReLU.  With K = 1
    Triton specialises the argument, drops the loop and folds the bias add into the dot's
    accumulator input (docs/results/2026-12-06-h100-user-kernels-attention.md)."""
    M, K = a.shape
    N = b.shape[1]
    c = torch.empty((M, N), dtype=a.dtype)
    tiled_matmul_kernel[(triton.cdiv(M, 16), triton.cdiv(N, 16))](a, b, c, M, N, K, BM=16, BN=16, BK=16,
                                                                  INIT_FROM_C=False, bias_ptr=bias, BIAS_RELU=True)
    return c


@triton.jit
def split_k_kernel(a_ptr, b_ptr, c_ptr, M, N, K, K_PER: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr,
                   BK: tl.constexpr):
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.program_id(1) * BN + tl.arange(0, BN)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k0 in range(tl.program_id(2) * K_PER, (tl.program_id(2) + 1) * K_PER, BK):
        rk = k0 + tl.arange(0, BK)
        a = tl.load(a_ptr + rm[:, None] * K + rk[None, :], mask=(rm[:, None] < M) & (rk[None, :] < K), other=0.0)
        b = tl.load(b_ptr + rk[:, None] * N + rn[None, :], mask=(rk[:, None] < K) & (rn[None, :] < N), other=0.0)
        acc += tl.dot(a, b)
    tl.atomic_add(c_ptr + rm[:, None] * N + rn[None, :], acc, mask=(rm[:, None] < M) & (rn[None, :] < N))


def split_k_matmul(a, b, *, splits=2):
    """C = A·B in fp32, K split over ``splits`` programs whose partial tiles are added atomically."""
    M, K = a.shape
    N = b.shape[1]
    c = torch.zeros((M, N), dtype=torch.float32)
    k_per = triton.cdiv(triton.cdiv(K, splits), 16) * 16
    split_k_kernel[(triton.cdiv(M, 16), triton.cdiv(N, 16), triton.cdiv(K, k_per))](
        a, b, c, M, N, K, K_PER=k_per, BM=16, BN=16, BK=16)
    return c


@triton.jit
def split_row_kernel(x_ptr, out_ptr, n_cols, SQUARE: tl.constexpr, BLOCK: tl.constexpr):
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + tl.program_id(0) * n_cols + cols, mask=cols < n_cols, other=0.0).to(tl.float32)
    if SQUARE:
        x = x * x
    tl.atomic_add(out_ptr + tl.program_id(0), tl.sum(x, axis=0))


def split_row_sum(x, *, square=False, block=32):
    """Row sums in fp32: each program sums one BLOCK of a row's columns, the partials added atomically."""
    out = torch.zeros(x.shape[0], dtype=torch.float32)
    split_row_kernel[(x.shape[0], triton.cdiv(x.shape[1], block))](x, out, x.shape[1], SQUARE=square, BLOCK=block)
    return out


@triton.jit
def scan_kernel(x_ptr, y_ptr, n_cols, STORAGE: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + tl.program_id(0) * n_cols + offs, mask=offs < n_cols, other=0.0)
    if STORAGE:
        # the dtype keeps x's format: Triton 3.6's tl.cumsum widens bf16 to fp32 by itself
        y = tl.cumsum(x, axis=0, dtype=y_ptr.dtype.element_ty)
    else:
        y = tl.cumsum(x.to(tl.float32), axis=0)
    tl.store(y_ptr + tl.program_id(0) * n_cols + offs, y.to(y_ptr.dtype.element_ty), mask=offs < n_cols)


def scan(x, *, storage=False):
    """Each row's inclusive prefix sums (tl.cumsum) in fp32, or in x's own format (``storage``)."""
    y = torch.empty_like(x)
    scan_kernel[(x.shape[0],)](x, y, x.shape[1], STORAGE=storage, BLOCK=triton.next_power_of_2(x.shape[1]))
    return y


@triton.jit
def block_e2m1_kernel(x_ptr, q_ptr, s_ptr, SHIFT: tl.constexpr, RULE: tl.constexpr, TIES: tl.constexpr,
                      LOW: tl.constexpr):
    """One MXFP4 block of 32 per program, by hand: the exponent from amax's bits (the field at bit
    SHIFT: 23 is fp32's), 2^-E from bits, e2m1 codes (one per byte) by comparisons with the
    midpoints (the lowest one LOW: 0.25 is e2m1's), ties to even or away."""
    b = tl.program_id(0)
    offs = b * 32 + tl.arange(0, 32)
    y = tl.load(x_ptr + offs).to(tl.float32)
    bits = tl.max(tl.abs(y), axis=0).to(tl.int32, bitcast=True)
    e = ((bits >> SHIFT) & 0xFF) - 127 - 2
    if RULE == "ceil":
        e = e + ((bits & 0x7FFFFF) != 0).to(tl.int32)
    e = tl.minimum(tl.maximum(e, -127), 127)
    inv = tl.where(-e == -127, 0x00400000, (127 - e) << 23).to(tl.float32, bitcast=True)
    a = tl.abs(tl.clamp(y * inv, -6.0, 6.0))
    if TIES == "away":
        c = ((a >= LOW).to(tl.int32) + (a >= 0.75).to(tl.int32) + (a >= 1.25).to(tl.int32)
             + (a >= 1.75).to(tl.int32) + (a >= 2.5).to(tl.int32) + (a >= 3.5).to(tl.int32) + (a >= 5.0).to(tl.int32))
    else:
        c = ((a > LOW).to(tl.int32) + (a >= 0.75).to(tl.int32) + (a > 1.25).to(tl.int32)
             + (a >= 1.75).to(tl.int32) + (a > 2.5).to(tl.int32) + (a >= 3.5).to(tl.int32) + (a > 5.0).to(tl.int32))
    tl.store(q_ptr + offs, (c | tl.where(y < 0, 8, 0)).to(tl.uint8))
    tl.store(s_ptr + b, (e + 127).to(tl.uint8))


def block_e2m1(x, *, shift=23, rule="floor", ties="even", low=0.25):
    """(e2m1 codes one per byte, E8M0 scale bytes) of fp32 x [1, 32·n]."""
    q = torch.empty(x.shape, dtype=torch.uint8)
    s = torch.empty((x.shape[0], x.shape[1] // 32), dtype=torch.uint8)
    block_e2m1_kernel[(x.numel() // 32,)](x, q, s, SHIFT=shift, RULE=rule, TIES=ties, LOW=low)
    return q, s


@triton.jit
def pow2_scale_kernel(x_ptr, s_ptr, y_ptr, BITCAST: tl.constexpr):
    """x·2^(s − 127) for E8M0 bytes s, the power of two built from its bits ((e + 127) << 23,
    2^-127's subnormal pattern below, 2^127 above); BITCAST False converts that pattern by value
    instead."""
    offs = tl.arange(0, 32)
    e = tl.minimum(tl.load(s_ptr + offs).to(tl.int32) - 127, 127)
    bits = tl.where(e <= -127, 0x00400000, (e + 127) << 23)
    if BITCAST:
        scale = bits.to(tl.float32, bitcast=True)
    else:
        scale = bits.to(tl.float32)
    tl.store(y_ptr + offs, (tl.load(x_ptr + offs).to(tl.float32) * scale).to(tl.bfloat16))


def pow2_scaled(x, s, *, bitcast=True):
    """(x·2^(s − 127)) in bf16 for 32 bf16 values x and uint8 exponents s."""
    y = torch.empty(32, dtype=torch.bfloat16)
    pow2_scale_kernel[(1,)](x, s, y, BITCAST=bitcast)
    return y


@triton.jit
def uncompilable_kernel(x_ptr, y_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    # BLOCK is not a power of two: Triton's frontend rejects the arange when it compiles
    tl.store(y_ptr + offs, tl.load(x_ptr + offs) * 2.0)


def uncompilable(x, w, **params):
    """Launches a kernel that does not compile (an arange of 48)."""
    y = torch.empty_like(x)
    uncompilable_kernel[(1,)](x, y, BLOCK=48)
    return y


@triton.jit
def welford_norm_kernel(x_ptr, y_ptr, var_ptr, n_cols, DATA_COUNT: tl.constexpr, BLOCK: tl.constexpr):
    # each BLOCK-wide tile's mean and M2 combined into the running (n, mean, M2) (Chan et al.),
    # then y = (x - mean) / sqrt(var + 1e-5); DATA_COUNT: the count comes from the data (a sum
    # of the mask) rather than from the tile's size
    row = tl.program_id(0)
    n_a = 0.0
    mean = 0.0
    m2 = 0.0
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        mask = cols < n_cols
        x = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=0.0).to(tl.float32)
        if DATA_COUNT:
            n_b = tl.sum(mask.to(tl.int32), axis=0).to(tl.float32)
        else:
            n_b = tl.minimum(n_cols - start, BLOCK).to(tl.float32)
        mean_b = tl.sum(x, axis=0) / n_b
        d = tl.where(mask, x - mean_b, 0.0)
        m2_b = tl.sum(d * d, axis=0)
        n = n_a + n_b
        delta = mean_b - mean
        mean = mean + delta * (n_b / n)
        m2 = m2 + m2_b + delta * delta * (n_a * n_b / n)
        n_a = n
    var = m2 / n_a
    rstd = 1.0 / tl.sqrt(var + 1e-5)
    tl.store(var_ptr + row, var)
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        mask = cols < n_cols
        x = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=0.0).to(tl.float32)
        tl.store(y_ptr + row * n_cols + cols, ((x - mean) * rstd).to(y_ptr.dtype.element_ty), mask=mask)


def welford_norm(x, *, data_count=False, BLOCK=64):
    """Rows normalised by their Welford/Chan mean and variance over BLOCK-wide tiles: y in x's
    format and the variance in fp32."""
    y = torch.empty_like(x)
    var = torch.empty(x.shape[0], dtype=torch.float32)
    welford_norm_kernel[(x.shape[0],)](x, y, var, x.shape[1], DATA_COUNT=data_count, BLOCK=BLOCK)
    return y, var


def welford_norm_data_count(x, *, BLOCK=64):
    return welford_norm(x, data_count=True, BLOCK=BLOCK)
