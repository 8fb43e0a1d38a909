"""Atomics: the repair of defect ``atomic_fadd_ftz``."""

from __future__ import annotations

import numpy as np

from ._state import STATE as state
from ._state import language, runtime

_MIN_NORMAL = np.float32(2.0 ** -126)
_F32 = np.dtype(np.float32)


def _flush(v: np.ndarray) -> np.ndarray:
    """fp32 subnormals replaced by a zero of their sign."""
    return np.where(np.abs(v) < _MIN_NORMAL, v * np.float32(0.0), v).astype(np.float32)


def repair_atomic_fadd_ftz() -> None:
    """Defect ``atomic_fadd_ftz``: on an NVIDIA GPU an fp32 ``tl.atomic_add`` flushes subnormal
    inputs and results to zero (measured on an H100, docs/results/2026-12-06-h100-atomic-flush.md;
    ``tl.dot`` and plain fp32 arithmetic keep them); the interpreter adds exactly as numpy does.
    Detected by atomic adds of a subnormal, into a subnormal, and to a subnormal result.
    Repair: an fp32 add's lanes are applied one after another as the GPU's atomics are (in lane
    order, one of the orders a GPU may take), each reading memory, flushing the value read and
    the value added, adding in fp32 and storing the flushed sum; the call returns the values
    read, as ``atomic_rmw`` does.  Other atomics are upstream's."""
    rt = runtime()
    B = rt.InterpreterBuilder
    orig = B.create_atomic_rmw
    fadd = rt._ir.ATOMIC_OP.FADD
    tl = language()

    def create_atomic_rmw(self, rmwOp, ptr, val, mask, sem, scope):
        if rmwOp != fadd or val.dtype.scalar != tl.float32:
            return orig(self, rmwOp, ptr, val, mask, sem, scope)
        ptrs, vals, keep = np.asarray(ptr.data), np.asarray(val.data, dtype=np.float32), np.asarray(mask.data)
        shape = np.broadcast_shapes(ptrs.shape, vals.shape, keep.shape)
        # writeable copies: Triton 3.6's load and store take no read-only (broadcast) view
        ptrs, vals, keep = (np.array(np.broadcast_to(a, shape)).reshape(-1) for a in (ptrs, vals, keep))
        old = np.zeros(vals.shape, dtype=np.float32)
        one, zero = np.ones(1, dtype=bool), np.zeros(1, dtype=np.float32)
        for i in np.flatnonzero(keep):
            p = ptrs[i:i + 1]
            # a numpy dtype, not the type np.float32: Triton 3.6's binding takes no other
            cur = np.asarray(rt._interpreter.load(p, one, zero, _F32), dtype=np.float32)
            old[i] = cur[0]
            new = _flush(_flush(cur) + _flush(vals[i:i + 1]))
            rt._interpreter.store(p, new, one)
        return rt.TensorHandle(old.reshape(shape), val.dtype.scalar)

    state.patcher.set(B, "create_atomic_rmw", create_atomic_rmw)
