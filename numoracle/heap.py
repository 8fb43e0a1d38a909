"""The CPU heap an eager verdict allocates from (settings field ``keep_cpu_memory``).

An eager verdict on the CPU makes and frees on the order of a hundred float64 tensors of
the judged size.  glibc's malloc serves a block above its mmap threshold (128 KiB at
first, raised as such blocks are freed) with a fresh mapping and gives freed heap memory
back to the system past its trim threshold, so the next verdict page-faults every page
in again: a 32x2048 verdict took 4,000-7,300 minor page faults and 1.5-3x the time of
one without them (docs/results/2026-12-02-cpu-heap.md).  Raising both
thresholds keeps freed blocks for reuse.  This is a process-wide malloc setting, made
once and never undone; other C libraries are left as they are.
"""

from __future__ import annotations

import ctypes
import platform
import threading

# mallopt's parameters (malloc.h)
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
# glibc's largest mmap threshold on a 64-bit system (DEFAULT_MMAP_THRESHOLD_MAX, 4 MiB *
# sizeof(long)): blocks up to it come from the heap; trimming waits for this much free memory
MMAP_THRESHOLD = 32 << 20
TRIM_THRESHOLD = 256 << 20

_lock = threading.Lock()
_state: list = []          # [True] once set, [False] where it cannot be (not glibc)


def keep_freed_memory() -> bool:
    """Raise glibc malloc's mmap and trim thresholds, once per process; whether they are
    raised (False where the C library is not glibc or refuses)."""
    with _lock:
        if not _state:
            _state.append(_set())
        return _state[0]


def _set() -> bool:
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return False
    try:
        libc = ctypes.CDLL(None)
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    # mallopt returns 1 on success
    return bool(mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)) & bool(mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD))


def prepare(settings, tensors) -> None:
    """Before an eager verdict: keep freed memory when the settings ask for it and any of
    the verdict's tensors is on the CPU."""
    if settings.keep_cpu_memory and not _state and any(
            getattr(t, "device", None) is not None and t.device.type == "cpu" for t in tensors):
        keep_freed_memory()
