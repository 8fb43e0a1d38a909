"""Small Triton kernels for the interpreter backend's tests and for
``scripts/gpu_interpreter_parity.py`` (which runs them on a GPU too).

Import this module only after ``TRITON_INTERPRET`` is decided: ``triton.jit``
makes interpreted functions only when it is set at decoration time (on the
CPU, call ``numoracle.backends.interpreter.install()`` first, or use
``install``'s ``as_interpreted``).  Every kernel here also compiles for an
NVIDIA GPU with Triton 3.6+.
"""

import triton
import triton.language as tl
from triton.language.extra import libdevice  # the stub the GPU compiler maps to the backend's module
from triton.language.extra.libdevice import tanh as libdevice_tanh  # a stub function imported by name

try:  # NVIDIA's wrappers, the other path kernels use (absent on exotic builds)
    from triton.language.extra.cuda import libdevice as cuda_libdevice
except Exception:  # pragma: no cover
    cuda_libdevice = None


@triton.jit
def cast_store_kernel(x_ptr, o_ptr, n, BLOCK: tl.constexpr):
    """``o = x.to(o.dtype)``: a store through a cast to the output format."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(x_ptr + offs, mask=m)
    tl.store(o_ptr + offs, x.to(o_ptr.dtype.element_ty), mask=m)


@triton.jit
def mad_kernel(a_ptr, b_ptr, o_ptr, n, BLOCK: tl.constexpr):
    """``a*b + a`` in the operands' format (bf16 or fp16)."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    a = tl.load(a_ptr + offs, mask=m)
    b = tl.load(b_ptr + offs, mask=m)
    tl.store(o_ptr + offs, a * b + a, mask=m)


@triton.jit
def half_ops_kernel(a_ptr, b_ptr, div_ptr, max_ptr, lt_ptr, neg_ptr, i32_ptr, n, BLOCK: tl.constexpr):
    """Other elementwise ops on half-precision operands: ``a / b``,
    ``maximum(a, b)``, ``a < b``, ``-a``, ``a.to(int32)``."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    a = tl.load(a_ptr + offs, mask=m)
    b = tl.load(b_ptr + offs, mask=m)
    tl.store(div_ptr + offs, a / b, mask=m)
    tl.store(max_ptr + offs, tl.maximum(a, b), mask=m)
    tl.store(lt_ptr + offs, (a < b).to(tl.int32), mask=m)
    tl.store(neg_ptr + offs, -a, mask=m)
    tl.store(i32_ptr + offs, a.to(tl.int32), mask=m)


@triton.jit
def row_reduce_kernel(x_ptr, sum_ptr, max_ptr, N: tl.constexpr):
    """``tl.sum`` and ``tl.max`` over one row of N values (in their format)."""
    offs = tl.arange(0, N)
    x = tl.load(x_ptr + offs)
    tl.store(sum_ptr, tl.sum(x, axis=0))
    tl.store(max_ptr, tl.max(x, axis=0))


@triton.jit
def dot_kernel(a_ptr, b_ptr, c_ptr, M: tl.constexpr, N: tl.constexpr, K: tl.constexpr):
    """``c = tl.dot(a, b)`` (fp32 accumulation) for row-major M x K, K x N."""
    rm = tl.arange(0, M)
    rn = tl.arange(0, N)
    rk = tl.arange(0, K)
    a = tl.load(a_ptr + rm[:, None] * K + rk[None, :])
    b = tl.load(b_ptr + rk[:, None] * N + rn[None, :])
    c = tl.dot(a, b)
    tl.store(c_ptr + rm[:, None] * N + rn[None, :], c)


@triton.jit
def bf16_constant_kernel(x_ptr, o_ptr, n, OFFSET: tl.constexpr, BLOCK: tl.constexpr):
    """``(OFFSET + x) * 0.5`` on bf16 ``x``: float literals meeting a bf16 tensor become bf16
    constants (rms_norm's ``offset + w``)."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(x_ptr + offs, mask=m)
    tl.store(o_ptr + offs, (OFFSET + x) * 0.5, mask=m)


@triton.jit
def chunked_sum_kernel(x_ptr, o_ptr, n, BLOCK: tl.constexpr):
    """The sum of n fp32 values in BLOCK-wide chunks, the loop over a runtime ``n``."""
    acc = tl.zeros((BLOCK, ), tl.float32)
    for start in range(0, n, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        acc += tl.load(x_ptr + offs, mask=offs < n, other=0.0)
    tl.store(o_ptr + tl.arange(0, 1), tl.sum(acc, axis=0))


@triton.jit
def eps_kernel(x_ptr, o_ptr, eps, n, BLOCK: tl.constexpr):
    """``x + eps.to(tl.float32)`` with a Python float ``eps`` (Liger's idiom)."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(x_ptr + offs, mask=m)
    tl.store(o_ptr + offs, x + eps.to(tl.float32), mask=m)


@triton.jit
def libdevice_kernel(x_ptr, tanh_ptr, erf_ptr, rsqrt_ptr, n, BLOCK: tl.constexpr):
    """tanh, erf, rsqrt through ``triton.language.extra.libdevice``."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(x_ptr + offs, mask=m, other=1.0)
    tl.store(tanh_ptr + offs, libdevice.tanh(x), mask=m)
    tl.store(erf_ptr + offs, libdevice.erf(x), mask=m)
    tl.store(rsqrt_ptr + offs, libdevice.rsqrt(x), mask=m)


@triton.jit
def cuda_libdevice_kernel(x_ptr, tanh_ptr, erf_ptr, rsqrt_ptr, n, BLOCK: tl.constexpr):
    """tanh, erf, rsqrt through ``triton.language.extra.cuda.libdevice``."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(x_ptr + offs, mask=m, other=1.0)
    tl.store(tanh_ptr + offs, cuda_libdevice.tanh(x), mask=m)
    tl.store(erf_ptr + offs, cuda_libdevice.erf(x), mask=m)
    tl.store(rsqrt_ptr + offs, cuda_libdevice.rsqrt(x), mask=m)


@triton.jit
def libdevice_by_name_kernel(x_ptr, tanh_ptr, n, BLOCK: tl.constexpr):
    """``tanh`` imported by name from ``triton.language.extra.libdevice``."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(x_ptr + offs, mask=m, other=0.0)
    tl.store(tanh_ptr + offs, libdevice_tanh(x), mask=m)


@triton.jit
def tl_math_kernel(x_ptr, rsqrt_ptr, erf_ptr, n, BLOCK: tl.constexpr):
    """``tl.math.rsqrt`` and ``tl.math.erf`` (builtins, not libdevice)."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(x_ptr + offs, mask=m, other=1.0)
    tl.store(rsqrt_ptr + offs, tl.math.rsqrt(x), mask=m)
    tl.store(erf_ptr + offs, tl.math.erf(x), mask=m)


@triton.autotune(configs=[triton.Config({"BLOCK": 16}), triton.Config({"BLOCK": 32}),
                          triton.Config({"BLOCK": 64})], key=["n"])
@triton.jit
def autotuned_scale_kernel(x_ptr, o_ptr, block_ptr, scale, n, BLOCK: tl.constexpr):
    """``o = x * scale``; every program also records the BLOCK it ran with."""
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(x_ptr + offs, mask=m)
    tl.store(o_ptr + offs, x * scale, mask=m)
    tl.store(block_ptr + tl.arange(0, 1), tl.full((1, ), BLOCK, tl.int32))


def plain_copy_kernel(x_ptr, o_ptr, n, BLOCK: tl.constexpr):
    """Undecorated: the tests jit it themselves (e.g. as a compiled JITFunction)."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(o_ptr + offs, tl.load(x_ptr + offs, mask=m), mask=m)


@triton.jit
def parity_kernel(x_ptr, a_ptr, b_ptr, t_ptr, p_ptr,
                  bf16_ptr, fp16_ptr, e4m3_ptr, e5m2_ptr,
                  mad_ptr, mul_ptr, add_ptr, eps_ptr,
                  tanh_ptr, erf_ptr, rsqrt_ptr, tl_rsqrt_ptr,
                  eps, n, BLOCK: tl.constexpr):
    """Everything the GPU/interpreter parity run compares, in one launch.

    * ``x`` (fp32) stored as bf16, fp16, e4m3 (``float8e4nv``) and e5m2
      (``float8e5``): ties, saturation, specials, random values;
    * ``a``, ``b`` (bf16): ``a*b + a`` (the GPU contracts it into one FMA),
      ``a*b``, ``a + b``;
    * ``x + eps.to(tl.float32)`` with a Python float ``eps``;
    * libdevice ``tanh``/``erf`` of ``t`` and ``rsqrt`` of ``p`` (fp32), and
      ``tl.math.rsqrt(p)``.
    """
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(x_ptr + offs, mask=m)
    tl.store(bf16_ptr + offs, x.to(tl.bfloat16), mask=m)
    tl.store(fp16_ptr + offs, x.to(tl.float16), mask=m)
    tl.store(e4m3_ptr + offs, x.to(tl.float8e4nv), mask=m)
    tl.store(e5m2_ptr + offs, x.to(tl.float8e5), mask=m)
    a = tl.load(a_ptr + offs, mask=m)
    b = tl.load(b_ptr + offs, mask=m)
    tl.store(mad_ptr + offs, a * b + a, mask=m)
    tl.store(mul_ptr + offs, a * b, mask=m)
    tl.store(add_ptr + offs, a + b, mask=m)
    tl.store(eps_ptr + offs, x + eps.to(tl.float32), mask=m)
    t = tl.load(t_ptr + offs, mask=m, other=0.0)
    p = tl.load(p_ptr + offs, mask=m, other=1.0)
    tl.store(tanh_ptr + offs, libdevice.tanh(t), mask=m)
    tl.store(erf_ptr + offs, libdevice.erf(t), mask=m)
    tl.store(rsqrt_ptr + offs, libdevice.rsqrt(p), mask=m)
    tl.store(tl_rsqrt_ptr + offs, tl.math.rsqrt(p), mask=m)


@triton.jit
def choose_kernel(x_ptr, o_ptr, N: tl.constexpr, LEFT: tl.constexpr):
    x = tl.load(x_ptr + tl.arange(0, N))
    tl.store(o_ptr, tl.argmax(x, 0, tie_break_left=LEFT))
    tl.store(o_ptr + 1, tl.argmin(x, 0, tie_break_left=LEFT))
