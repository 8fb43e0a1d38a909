"""Memory bounds: the repair of defect ``out_of_bounds``.

The interpreter loads and stores through raw host addresses: a lane whose address lies
outside every tensor the kernel was given reads whatever host memory is there, and a store
there corrupts the heap (the process may abort much later, far from the kernel).  On a GPU
the same access reads or overwrites a neighbouring allocation or faults, depending on where
it lands: a bug either way, and one that output comparisons see only by luck.  The repair
checks every active lane of every load, store and atomic against the storages of the
launch's tensor arguments and raises :class:`numoracle.errors.OutOfBounds` before memory
is touched, naming the access, the kernel's line and the nearest tensor argument."""

from __future__ import annotations

import os
import sys

import numpy as np

from ...errors import OutOfBounds
from ._state import STATE as state
from ._state import runtime

# an integer argument this large may be a raw address (``t.data_ptr()`` passed as an int):
# memory the check cannot attribute, so such a launch is not checked
_ADDRESS_LIKE = 1 << 32

# frames under numoracle/backends are the repairs', not the kernel's
_OURS = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep


class _Launch:
    """The tensor arguments of the launch running now: sorted storage ranges and names."""

    def __init__(self, named: list, unchecked: str | None) -> None:
        named.sort(key=lambda r: r[0])
        self.starts = np.array([r[0] for r in named], dtype=np.uint64)
        self.ends = np.array([r[1] for r in named], dtype=np.uint64)
        self.names = [r[2] for r in named]
        self.unchecked = unchecked


def _collect(arg, name: str, out: list) -> str | None:
    """Append (start, end, description) for each tensor in ``arg``; the reason to skip the
    launch's check when an argument may be a raw address."""
    if isinstance(arg, (tuple, list)):
        why = None
        for i, a in enumerate(arg):
            why = _collect(a, f"{name}[{i}]", out) or why
        return why
    base = getattr(arg, "base", None)
    if base is not None and hasattr(base, "data_ptr") and not hasattr(arg, "untyped_storage"):
        arg = base                               # a TensorWrapper or a TensorDescriptor's base
    if hasattr(arg, "untyped_storage"):
        st = arg.untyped_storage()
        start = st.data_ptr()
        if st.nbytes() and start:
            out.append((start, start + st.nbytes(), f"{name} ({str(arg.dtype).replace('torch.', '')}, "
                                                    f"{tuple(arg.shape)}, {st.nbytes()} bytes)"))
        return None
    if isinstance(arg, int) and not isinstance(arg, bool) and abs(arg) >= _ADDRESS_LIKE:
        return f"integer argument {name} = {arg:#x} may be an address"
    return None


def _kernel_line() -> str:
    """file:line of the innermost frame outside Triton, numpy and numoracle's backends: the
    kernel's."""
    f = sys._getframe(2)
    while f is not None:
        path = f.f_code.co_filename
        if not (path.startswith(_OURS) or f"{os.sep}triton{os.sep}" in path or f"{os.sep}numpy{os.sep}" in path):
            return f"{os.path.basename(path)}:{f.f_lineno}"
        f = f.f_back
    return "an unknown line"


def _check(what: str, ptrs, mask, elsize: int) -> None:
    launch = state.bounds
    if launch is None or launch.unchecked:
        return
    p = np.asarray(ptrs).astype(np.uint64, copy=False)
    active = np.ones(p.shape, dtype=bool) if mask is None else np.broadcast_to(np.asarray(mask, dtype=bool), p.shape)
    if not active.any():
        return
    k = np.searchsorted(launch.starts, p, side="right").astype(np.int64) - 1
    inside = k >= 0
    if launch.ends.size:
        inside &= p + np.uint64(elsize) <= launch.ends[np.where(inside, k, 0)]
    bad = active & ~inside
    if not bad.any():
        return
    lane = tuple(int(i) for i in np.argwhere(bad)[0])
    first, j = int(p[lane]), int(k[lane])
    if j >= 0:
        past = first - int(launch.ends[j])
        near = (f"{past} bytes past the end of {launch.names[j]}" if past else
                f"right after the end of {launch.names[j]}")
    elif launch.names:
        near = f"{int(launch.starts[0]) - first} bytes before {launch.names[0]}"
    else:
        near = "and the kernel was given no tensor"
    where = _kernel_line()
    raise OutOfBounds(f"out-of-bounds {what} at {where}: {int(bad.sum())} of {int(active.sum())} active "
                      f"lanes address memory outside every tensor argument (the first, lane {lane} at {first:#x}, "
                      f"is {near}); on a GPU such an access reads or corrupts another allocation, or faults", where=where)


def _elsize(ptrs) -> int:
    ty = ptrs.get_element_ty()
    return max(1, ty.primitive_bitwidth // 8)


def repair_out_of_bounds() -> None:
    """Defect ``out_of_bounds`` (this module's docstring).  Detected by a load, on the bare
    interpreter, of an element of a tensor the kernel was not given.  Repair: the launch's
    tensor arguments are recorded as the interpreter copies them to the host, and each
    load, store and atomic checks its active lanes first."""
    rt = runtime()
    B, G = rt.InterpreterBuilder, rt.GridExecutor
    init_args, load, store = G._init_args_hst, B.create_masked_load, B.create_masked_store
    cas, rmw = B.create_atomic_cas, B.create_atomic_rmw

    def _init_args_hst(self, args_dev, kwargs):
        args_hst, kwargs_hst = init_args(self, args_dev, kwargs)
        named, why = [], None
        arg_names = list(getattr(self, "arg_names", ()) or ())
        for i, a in enumerate(args_hst):
            why = _collect(a, arg_names[i] if i < len(arg_names) else f"argument {i}", named) or why
        for key, a in kwargs_hst.items():
            why = _collect(a, key, named) or why
        state.bounds = _Launch(named, why)
        return args_hst, kwargs_hst

    def create_masked_load(self, ptrs, mask, *rest, **kw):
        _check("load", ptrs.data, mask.data, _elsize(ptrs))
        return load(self, ptrs, mask, *rest, **kw)

    def create_masked_store(self, ptrs, value, mask, *rest, **kw):
        _check("store", ptrs.data, mask.data, _elsize(ptrs))
        return store(self, ptrs, value, mask, *rest, **kw)

    def create_atomic_cas(self, ptr, cmp, val, *rest, **kw):
        _check("atomic compare-and-swap", ptr.data, None, _elsize(ptr))
        return cas(self, ptr, cmp, val, *rest, **kw)

    def create_atomic_rmw(self, rmwOp, ptr, val, mask, *rest, **kw):
        _check("atomic", ptr.data, mask.data, _elsize(ptr))
        return rmw(self, rmwOp, ptr, val, mask, *rest, **kw)

    state.patcher.set(G, "_init_args_hst", _init_args_hst)
    state.patcher.set(B, "create_masked_load", create_masked_load)
    state.patcher.set(B, "create_masked_store", create_masked_store)
    state.patcher.set(B, "create_atomic_cas", create_atomic_cas)
    state.patcher.set(B, "create_atomic_rmw", create_atomic_rmw)
