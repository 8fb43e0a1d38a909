"""Shared launch helpers and the libdevice look-up used by the kernels of this package."""

from __future__ import annotations

import torch
import triton
import triton.language as tl


def _find_libdevice():
    """Return the module whose ``tanh`` (and friends) reach the GPU's libdevice.

    Triton >= 3.0 exposes backend-neutral stubs at ``triton.language.extra.libdevice`` that the
    JIT swaps for the CUDA or HIP implementation when it compiles; ``triton.language.extra.cuda``
    holds the CUDA one directly. Triton 2.x kept these functions in ``tl.math``. Under
    ``TRITON_INTERPRET=1`` the stubs return None until ``numoracle.backends.interpreter.install()``
    repairs them, so kernels are looked up through this module attribute at call time.
    """
    try:
        from triton.language.extra import libdevice as found
        return found
    except ImportError:
        pass
    try:
        from triton.language.extra.cuda import libdevice as found
        return found
    except ImportError:
        return tl.math


libdevice = _find_libdevice()


@triton.jit
def tanh_libdevice(z):
    """tanh from libdevice (fp32 in, fp32 out)."""
    return libdevice.tanh(z)


@triton.jit
def tanh_sigmoid(z):
    """tanh(z) written as 2·sigmoid(2z) − 1 in fp32; needs no libdevice (runs on the interpreter)."""
    return 2.0 * tl.sigmoid(2.0 * z) - 1.0


def as_rows(t: torch.Tensor) -> torch.Tensor:
    """View ``t`` as a contiguous 2-D [rows, cols] tensor (leading dimensions flattened)."""
    if t.dim() == 0:
        raise ValueError("expected a tensor with at least one dimension, got a scalar")
    return t.contiguous().reshape(-1, t.shape[-1])


def row_block(n_cols: int, block: int | None) -> int:
    """BLOCK for a one-row-per-program kernel: ``block`` if given, else next_power_of_2(n_cols)."""
    if block is None:
        return triton.next_power_of_2(n_cols)
    if block <= 0 or block & (block - 1):
        raise ValueError(f"block must be a positive power of two, got block={block}")
    return block


def full_row_block(n_cols: int, block: int | None) -> int:
    """BLOCK for a kernel that holds a whole row at once; it must cover ``n_cols``."""
    b = row_block(n_cols, block)
    if b < n_cols:
        raise ValueError(f"block={block} is smaller than the row width {n_cols}; "
                         "use the chunked variant or leave block=None")
    return b
