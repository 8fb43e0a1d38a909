"""The Triton kernel ``numoracle calibrate`` measures: one math call per
launch, selected by the constexpr ``CALL`` (the call's label as written in a
kernel).  Imported only after the backend is selected, so that on the
interpreter ``TRITON_INTERPRET`` is set before ``@triton.jit`` runs."""

from __future__ import annotations

import triton
import triton.language as tl

try:  # Triton >= 3.0: the backend-neutral stubs the GPU compiler swaps for CUDA's libdevice
    from triton.language.extra import libdevice
except ImportError:  # pragma: no cover - older layouts
    from triton.language.extra.cuda import libdevice

# label -> number of float32 operands
CALLS = {
    "tl.exp": 1, "tl.exp2": 1, "tl.log": 1, "tl.log2": 1, "tl.math.rsqrt": 1, "libdevice.rsqrt": 1,
    "tl.sqrt": 1, "tl.sqrt_rn": 1, "1.0 / x": 1, "x / y": 2, "tl.math.div_rn": 2, "tl.sigmoid": 1,
    "libdevice.tanh": 1, "tl.math.erf": 1, "libdevice.erf": 1, "tl.sin": 1, "tl.cos": 1,
}


@triton.jit
def math_call_kernel(x_ptr, y_ptr, out_ptr, n, CALL: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=1.0)
    y = tl.load(y_ptr + offs, mask=mask, other=1.0)
    if CALL == "tl.exp":
        r = tl.exp(x)
    elif CALL == "tl.exp2":
        r = tl.exp2(x)
    elif CALL == "tl.log":
        r = tl.log(x)
    elif CALL == "tl.log2":
        r = tl.log2(x)
    elif CALL == "tl.math.rsqrt":
        r = tl.math.rsqrt(x)
    elif CALL == "libdevice.rsqrt":
        r = libdevice.rsqrt(x)
    elif CALL == "tl.sqrt":
        r = tl.sqrt(x)
    elif CALL == "tl.sqrt_rn":
        r = tl.sqrt_rn(x)
    elif CALL == "1.0 / x":
        r = 1.0 / x
    elif CALL == "x / y":
        r = x / y
    elif CALL == "tl.math.div_rn":
        r = tl.math.div_rn(x, y)
    elif CALL == "tl.sigmoid":
        r = tl.sigmoid(x)
    elif CALL == "libdevice.tanh":
        r = libdevice.tanh(x)
    elif CALL == "tl.math.erf":
        r = tl.math.erf(x)
    elif CALL == "libdevice.erf":
        r = libdevice.erf(x)
    elif CALL == "tl.sin":
        r = tl.sin(x)
    else:
        r = tl.cos(x)
    tl.store(out_ptr + offs, r, mask=mask)
