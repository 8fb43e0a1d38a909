"""The Triton kernel ``numoracle calibrate`` measures: one math call per
launch, selected by the constexpr ``CALL`` (the index of the call's label in
``CALLS``).  Imported only after the backend is selected, so that on the
interpreter ``TRITON_INTERPRET`` is set before ``@triton.jit`` runs."""

from __future__ import annotations

import triton
import triton.language as tl

try:  # Triton >= 3.0: the backend-neutral stubs the GPU compiler swaps for CUDA's libdevice
    from triton.language.extra import libdevice
except ImportError:  # pragma: no cover - older layouts
    from triton.language.extra.cuda import libdevice

# label -> number of float32 operands; the kernel takes the label's index as the constexpr CALL
# (an int: constexpr strings with spaces or slashes are avoided for older Triton releases)
CALLS = {
    "tl.exp": 1, "tl.exp2": 1, "tl.log": 1, "tl.log2": 1, "tl.math.rsqrt": 1, "libdevice.rsqrt": 1,
    "tl.sqrt": 1, "tl.sqrt_rn": 1, "1.0 / x": 1, "x / y": 2, "tl.math.div_rn": 2, "tl.sigmoid": 1,
    "libdevice.tanh": 1, "tl.math.erf": 1, "libdevice.erf": 1, "tl.sin": 1, "tl.cos": 1,
    "tl.exp2(x * log2e)": 1,
}
CODES = {label: i for i, label in enumerate(CALLS)}
# how kernels that use exp2 write log2 e: a Python float the multiply rounds to fp32
LOG2E = tl.constexpr(1.4426950408889634)


@triton.jit
def math_call_kernel(x_ptr, y_ptr, out_ptr, n, CALL: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=1.0)
    y = tl.load(y_ptr + offs, mask=mask, other=1.0)
    if CALL == 0:  # tl.exp
        r = tl.exp(x)
    elif CALL == 1:  # tl.exp2
        r = tl.exp2(x)
    elif CALL == 2:  # tl.log
        r = tl.log(x)
    elif CALL == 3:  # tl.log2
        r = tl.log2(x)
    elif CALL == 4:  # tl.math.rsqrt
        r = tl.math.rsqrt(x)
    elif CALL == 5:  # libdevice.rsqrt
        r = libdevice.rsqrt(x)
    elif CALL == 6:  # tl.sqrt
        r = tl.sqrt(x)
    elif CALL == 7:  # tl.sqrt_rn
        r = tl.sqrt_rn(x)
    elif CALL == 8:  # 1.0 / x
        r = 1.0 / x
    elif CALL == 9:  # x / y
        r = x / y
    elif CALL == 10:  # tl.math.div_rn
        r = tl.math.div_rn(x, y)
    elif CALL == 11:  # tl.sigmoid
        r = tl.sigmoid(x)
    elif CALL == 12:  # libdevice.tanh
        r = libdevice.tanh(x)
    elif CALL == 13:  # tl.math.erf
        r = tl.math.erf(x)
    elif CALL == 14:  # libdevice.erf
        r = libdevice.erf(x)
    elif CALL == 15:  # tl.sin
        r = tl.sin(x)
    elif CALL == 16:  # tl.cos
        r = tl.cos(x)
    else:  # tl.exp2(x * log2e): exp written as exp2 of an fp32-rounded product
        r = tl.exp2(x * LOG2E)
    tl.store(out_ptr + offs, r, mask=mask)
