"""The microscaling interpreter repair (numoracle/backends/interpreter/dot_scaled.py): tl.dot_scaled's
fp8 operands, shown wrong on the bare interpreter and exact after install()."""

import contextlib
import importlib
import os

import ml_dtypes
import numpy as np
import pytest

os.environ.setdefault("TRITON_INTERPRET", "1")  # before any kernel is decorated

interp = importlib.import_module("numoracle.backends.interpreter")

import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402
from triton.runtime import interpreter as ti  # noqa: E402

pytestmark = pytest.mark.skipif(not hasattr(ti.InterpreterBuilder, "create_dot_scaled"),
                                reason=f"Triton {triton.__version__}'s interpreter has no tl.dot_scaled")


@contextlib.contextmanager
def state(installed: bool):
    was = interp.is_installed()
    (interp.install if installed else interp.uninstall)()
    try:
        yield
    finally:
        (interp.install if was else interp.uninstall)()


@triton.jit
def _widen_kernel(a_ptr, b_ptr, s_ptr, o_ptr, FMT: tl.constexpr):
    """C = dot_scaled(A, B) with A [16, 32] holding 16 codes in column 0 and B selecting it."""
    m = tl.arange(0, 16)
    k = tl.arange(0, 32)
    a = tl.load(a_ptr + m[:, None] * 32 + k[None, :])
    b = tl.load(b_ptr + m[None, :] * 32 + k[:, None])
    s = tl.load(s_ptr + m[:, None] + tl.arange(0, 1)[None, :])
    tl.store(o_ptr + m[:, None] * 16 + m[None, :], tl.dot_scaled(a, s, FMT, b, s, FMT))


def _widened(fmt: str) -> tuple:
    """(codes, what tl.dot_scaled widens them to, their exact values) for every finite code."""
    dtype, one, mdt = {"e5m2": (torch.float8_e5m2, 0x3C, ml_dtypes.float8_e5m2),
                       "e4m3": (torch.float8_e4m3fn, 0x38, ml_dtypes.float8_e4m3fn)}[fmt]
    codes = np.arange(256, dtype=np.uint8)
    exact = codes.view(mdt).astype(np.float32)
    codes, exact = codes[np.isfinite(exact)], exact[np.isfinite(exact)]
    got = []
    kernel = interp.as_interpreted(_widen_kernel)
    for start in range(0, codes.size, 16):
        chunk = codes[start:start + 16]
        a = torch.zeros((16, 32), dtype=torch.uint8)
        a[:chunk.size, 0] = torch.from_numpy(chunk)
        b = torch.zeros((16, 32), dtype=torch.uint8)
        b[:, 0] = one
        out = torch.empty((16, 16))
        kernel[(1, )](a.view(dtype), b.view(dtype), torch.full((16,), 127, dtype=torch.uint8), out, fmt)
        got.append(out[:chunk.size, 0].numpy())
    return codes, np.concatenate(got), exact


def test_bare_dot_scaled_loses_e5m2_subnormals():
    with state(installed=False):
        codes, got, exact = _widened("e5m2")
    wrong = codes[got != exact]
    assert {0x01, 0x02, 0x03, 0x81, 0x82, 0x83} <= set(wrong.tolist())
    assert set(wrong.tolist()) <= {0x01, 0x02, 0x03, 0x81, 0x82, 0x83}     # only the subnormals
    assert interp.status()["dot_scaled_fp8"]["present_on_bare"]
    assert "e5m2 0x01" in interp.probe_details()["dot_scaled_fp8"]["bare"]


@pytest.mark.parametrize("fmt", ["e5m2", "e4m3"])
def test_repaired_dot_scaled_widens_every_fp8_code_exactly(fmt):
    with state(installed=True):
        codes, got, exact = _widened(fmt)
        assert interp.status()["dot_scaled_fp8"]["repaired"]
    assert np.array_equal(got, exact)


def test_uninstall_restores_the_interpreters_own_decoder():
    with state(installed=False):
        original = ti.__dict__.get("_mxfp_value_handle_to_float32")
    with state(installed=True):
        assert ti._mxfp_value_handle_to_float32 is not original
    with state(installed=False):
        assert ti._mxfp_value_handle_to_float32 is original
