"""``tl.dot_scaled`` (microscaling): the repair of defect ``dot_scaled_fp8``, and its
probe (kept here with its probe kernel).

========================  ==================================================
defect (``status()`` key) what the bare interpreter does / what install does
========================  ==================================================
``dot_scaled_fp8``        ``tl.dot_scaled`` widens fp8 operands through
                          float16 with the interpreter's own converter, which
                          loses e5m2 subnormals (codes 0x01, 0x02 give 0,
                          0x03 gives 2^-15; found on Triton 3.9 by a probe of
                          every subnormal code); a GPU widens them exactly.
                          Repaired: fp8 operands are decoded by their bits
                          (ml_dtypes, exact), the rest as before.
========================  ==================================================

What the interpreter's ``tl.dot_scaled`` still does differently: it scales each operand
in fp32 and multiplies with numpy's float32 matmul, where a GPU without microscaling
tensor cores (sm_90) rounds the scaled operands to bf16 first (values below bf16's
normals, under 2^-126, differ) and accumulates in its own order; a reference program
that rounds the dequantized operands to bf16 and sums in any order admits both.
E2M1 operands are unpacked low nibble first, as Triton documents, on both.
"""

from __future__ import annotations


import numpy as np

from .. import _triton_compat as _compat

DEFECT = "dot_scaled_fp8"

# probe codes: every e5m2 / e4m3 subnormal and a few normals, both signs (16 per format)
_PROBE_CODES = np.array([0x01, 0x02, 0x03, 0x04, 0x07, 0x3C, 0x41, 0x7B,
                         0x81, 0x82, 0x83, 0x84, 0x87, 0xBC, 0xC1, 0xFB], dtype=np.uint8)
_kernel = None


def _probe_kernel():
    """tl.dot_scaled of a [16, 32] operand whose column 0 holds the probe codes with a
    selector (code 1.0 in row 0): C[:, 0] is the codes' widened values."""
    global _kernel, tl
    if _kernel is None:
        import triton.language as tl  # noqa: F811 - a module global for the kernel below

        def probe_dot_scaled_kernel(a_ptr, b_ptr, s_ptr, o_ptr, FMT: tl.constexpr):
            m = tl.arange(0, 16)
            k = tl.arange(0, 32)
            a = tl.load(a_ptr + m[:, None] * 32 + k[None, :])
            b = tl.load(b_ptr + m[None, :] * 32 + k[:, None])
            s = tl.load(s_ptr + m[:, None] + tl.arange(0, 1)[None, :])
            c = tl.dot_scaled(a, s, FMT, b, s, FMT)
            tl.store(o_ptr + m[:, None] * 16 + m[None, :], c)

        _kernel = probe_dot_scaled_kernel
    return _kernel


def _exact(codes: np.ndarray, fmt: str) -> np.ndarray:
    import ml_dtypes

    dtype = {"e4m3": ml_dtypes.float8_e4m3fn, "e5m2": ml_dtypes.float8_e5m2}[fmt]
    return codes.view(dtype).astype(np.float32)


def probe_dot_scaled_fp8() -> tuple:
    """(present, detail) on the interpreter as it currently is."""
    import torch

    if not hasattr(_compat.interpreter_module().InterpreterBuilder, "create_dot_scaled"):
        return False, "this interpreter has no tl.dot_scaled"
    bad = []
    for fmt, dtype, one in (("e5m2", torch.float8_e5m2, 0x3C), ("e4m3", torch.float8_e4m3fn, 0x38)):
        a = torch.zeros((16, 32), dtype=torch.uint8)
        a[:, 0] = torch.from_numpy(_PROBE_CODES)
        b = torch.zeros((16, 32), dtype=torch.uint8)
        b[:, 0] = one
        s = torch.full((16,), 127, dtype=torch.uint8)
        out = torch.full((16, 16), float("nan"))
        try:
            _compat.interpreted(_probe_kernel())[(1, )](a.view(dtype), b.view(dtype), s, out, fmt)
        except Exception as exc:  # noqa: BLE001 - a probe reports, it does not raise
            return True, f"tl.dot_scaled({fmt}) raised {type(exc).__name__}: {exc}"[:300]
        got, want = out[:, 0].numpy(), _exact(_PROBE_CODES, fmt)
        wrong = got != want
        bad += [f"{fmt} 0x{c:02X}: {float(g)!r} (exact {float(w)!r})" for c, g, w in
                zip(_PROBE_CODES[wrong], got[wrong], want[wrong])]
    if bad:
        return True, f"tl.dot_scaled widens {len(bad)} of 32 fp8 probe codes wrongly: " + "; ".join(bad[:4])
    return False, "tl.dot_scaled widens every fp8 probe code exactly"


def repair_dot_scaled_fp8() -> None:
    """Decode fp8 operands of tl.dot_scaled by their bits (recorded for uninstall)."""
    from ._state import STATE as state
    rt = _compat.interpreter_module()
    original = getattr(rt, "_mxfp_value_handle_to_float32", None)
    if original is None:      # another Triton's layout: the probe keeps reporting the defect
        return
    import triton.language as tl

    names = {tl.float8e5: "e5m2", tl.float8e4nv: "e4m3"}

    def mxfp_value_to_float32(value_handle):
        fmt = names.get(value_handle.dtype)
        if fmt is None:
            return original(value_handle)
        return _exact(np.ascontiguousarray(value_handle.data).view(np.uint8), fmt)

    mxfp_value_to_float32.__doc__ = ("numoracle: fp8 operands of tl.dot_scaled decoded exactly "
                                     "(numoracle.backends.interpreter.dot_scaled).")
    state.patcher.set(rt, "_mxfp_value_handle_to_float32", mxfp_value_to_float32)
