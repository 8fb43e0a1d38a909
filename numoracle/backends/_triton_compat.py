"""Version-dependent access to Triton internals, and the probe kernels.

Everything here that touches a Triton internal goes through a lookup that
tolerates its absence, so that :mod:`numoracle.backends.interpreter` works on
Triton 3.6 (the GPU machine) through the current release (3.9 when written).

The *probe kernels* at the bottom are tiny Triton kernels, written as plain
Python functions and wrapped in the interpreter's ``InterpretedFunction`` by
:func:`interpreted`, so that they run on the interpreter whatever
``TRITON_INTERPRET`` says.  :mod:`interpreter` launches them on the bare
interpreter to detect each defect, and again after the repairs.

Nothing here imports Triton when the module is imported: ``triton.jit``
decides at decoration time whether a function becomes an interpreted one, and
``triton.language``'s own ``@jit`` helpers (``tl.sum``, ``tl.max``,
``tl.cdiv`` ...) are decorated when ``triton.language`` is first imported --
so :func:`numoracle.backends.interpreter.install` must get to set
``TRITON_INTERPRET`` first.

Note: when the interpreter first rewrites a kernel it copies the names of
``triton.runtime.interpreter``'s globals that are missing from the kernel's
module into that module (``FunctionRewriter._compile_and_exec``).  That is why
the probe kernels live here, in a private module, and not in ``interpreter``.
"""

from __future__ import annotations

import importlib
import os
from types import ModuleType, SimpleNamespace
from typing import Any, Callable, Optional


def _optional_module(name: str) -> Optional[ModuleType]:
    try:
        return importlib.import_module(name)
    except Exception:  # pragma: no cover - depends on the installed Triton
        return None


# --------------------------------------------------------------------------
# Versions and modules (imported on first use)
# --------------------------------------------------------------------------

def triton_version() -> tuple:
    """``triton.__version__`` as a tuple of ints (``(3, 9, 0)``)."""
    import triton

    parts = []
    for piece in triton.__version__.split("+")[0].split("."):
        digits = "".join(ch for ch in piece if ch.isdigit())
        if not digits:
            break
        parts.append(int(digits))
    return tuple(parts)


def interpreter_module() -> ModuleType:
    """``triton.runtime.interpreter`` (importing it needs no GPU)."""
    return importlib.import_module("triton.runtime.interpreter")


def autotuner_class() -> Optional[type]:
    mod = _optional_module("triton.runtime.autotuner")
    return getattr(mod, "Autotuner", None) if mod is not None else None


def jit_function_class() -> Optional[type]:
    mod = _optional_module("triton.runtime.jit")
    return getattr(mod, "JITFunction", None) if mod is not None else None


def interpreted_function_class() -> Optional[type]:
    mod = _optional_module("triton.runtime.interpreter")
    return getattr(mod, "InterpretedFunction", None) if mod is not None else None


def is_constexpr(annotation: Any) -> bool:
    """Whether a kernel parameter's annotation is ``tl.constexpr`` (a string under
    ``from __future__ import annotations``, else the class)."""
    text = annotation if isinstance(annotation, str) else getattr(annotation, "__name__", str(annotation))
    return "constexpr" in str(text)


def libdevice_stub() -> Optional[ModuleType]:
    """The architecture-neutral stub module (``from triton.language.extra
    import libdevice``).  Its functions have ``...`` bodies: the GPU code
    generator swaps the module for the backend's own
    (``extra.cuda.libdevice`` on NVIDIA); the interpreter does not, so a call
    returns None."""
    return _optional_module("triton.language.extra.libdevice")


def libdevice_cuda() -> Optional[ModuleType]:
    """NVIDIA's libdevice wrappers (``tl.extra.cuda.libdevice``):
    ``@core.extern`` functions that call ``core.extern_elementwise`` with
    ``__nv_*`` symbols."""
    return _optional_module("triton.language.extra.cuda.libdevice")


def is_builtin(obj: Any) -> bool:
    import triton.language as tl

    check = getattr(tl.core, "is_builtin", None)
    if check is not None:
        return bool(check(obj))
    return bool(getattr(obj, "__triton_builtin__", False))  # pragma: no cover


def interpret_knob() -> Optional[bool]:
    """What Triton will decide for kernels decorated from now on.

    Triton >= 3.4 reads ``triton.knobs.runtime.interpret`` (the environment
    variable ``TRITON_INTERPRET`` unless a program set the knob); older ones
    read the environment variable at decoration time.  Returns None when
    neither can be read.
    """
    import triton

    knobs = getattr(triton, "knobs", None)
    runtime = getattr(knobs, "runtime", None) if knobs is not None else None
    if runtime is not None and hasattr(runtime, "interpret"):
        try:
            return bool(runtime.interpret)
        except Exception:  # pragma: no cover
            return None
    value = os.environ.get("TRITON_INTERPRET")  # pragma: no cover - old Triton
    return None if value is None else value.strip().lower() in ("1", "true", "on", "yes")


def interpreted(fn: Callable) -> Any:
    """Wrap a plain Python kernel function for the interpreter, whatever
    ``TRITON_INTERPRET`` says (``InterpretedFunction(fn)``)."""
    return interpreter_module().InterpretedFunction(fn)


def find_interpreted(kernel: Any, depth: int = 8) -> Any:
    """The ``InterpretedFunction`` a launcher (Autotuner, Heuristics, ...)
    wraps, or None when it wraps a compiled ``JITFunction``."""
    cls = interpreter_module().InterpretedFunction
    obj = kernel
    for _ in range(depth):
        if isinstance(obj, cls):
            return obj
        obj = getattr(obj, "fn", None)
        if obj is None:
            return None
    return None


# --------------------------------------------------------------------------
# Probe kernels (launched through `interpreted(...)`)
# --------------------------------------------------------------------------

_probes: Optional[SimpleNamespace] = None


def probe_kernels() -> SimpleNamespace:
    """The probe kernels, defined on first use (after ``TRITON_INTERPRET``
    was settled).  They reach ``tl`` and the libdevice modules through this
    module's globals, as kernels reach their module's globals."""
    global _probes, tl, ld_stub, ld_cuda
    if _probes is not None:
        return _probes
    import triton.language as tl  # noqa: F811 - a module global for the kernels below

    ld_stub = libdevice_stub()
    ld_cuda = libdevice_cuda()

    def probe_cast_kernel(x_ptr, o_ptr, N: tl.constexpr):
        """Cast the input to the output pointer's element type (``x.to(...)``)."""
        offs = tl.arange(0, N)
        x = tl.load(x_ptr + offs)
        tl.store(o_ptr + offs, x.to(o_ptr.dtype.element_ty))

    def probe_binary_kernel(a_ptr, b_ptr, mad_ptr, max_ptr, neg_ptr, N: tl.constexpr):
        """``a*b + a``, ``maximum(a, b)`` and ``-a`` in the operands' format."""
        offs = tl.arange(0, N)
        a = tl.load(a_ptr + offs)
        b = tl.load(b_ptr + offs)
        tl.store(mad_ptr + offs, a * b + a)
        tl.store(max_ptr + offs, tl.maximum(a, b))
        tl.store(neg_ptr + offs, -a)

    def probe_float_arg_kernel(x_ptr, o_ptr, eps, N: tl.constexpr):
        """``x + eps.to(tl.float32)`` with a Python float ``eps``."""
        offs = tl.arange(0, N)
        x = tl.load(x_ptr + offs)
        tl.store(o_ptr + offs, x + eps.to(tl.float32))

    def probe_bf16_constant_kernel(o_ptr, N: tl.constexpr):
        """A bf16 constant from a Python float (``builder.get_bf16``), stored as it is."""
        offs = tl.arange(0, N)
        tl.store(o_ptr + offs, tl.full((N, ), -1.5, tl.bfloat16))

    def probe_runtime_range_kernel(o_ptr, n):
        """Counts ``range(0, n, 2)`` over a runtime integer ``n`` (a chunked row loop)."""
        acc = tl.zeros((1, ), tl.int32)
        for _ in range(0, n, 2):
            acc += 1
        tl.store(o_ptr + tl.arange(0, 1), acc)

    def probe_libdevice_stub_kernel(x_ptr, tanh_ptr, erf_ptr, rsqrt_ptr, N: tl.constexpr):
        """tanh, erf, rsqrt through ``triton.language.extra.libdevice``."""
        offs = tl.arange(0, N)
        x = tl.load(x_ptr + offs)
        tl.store(tanh_ptr + offs, ld_stub.tanh(x))
        tl.store(erf_ptr + offs, ld_stub.erf(x))
        tl.store(rsqrt_ptr + offs, ld_stub.rsqrt(x))

    def probe_libdevice_cuda_kernel(x_ptr, tanh_ptr, erf_ptr, rsqrt_ptr, N: tl.constexpr):
        """tanh, erf, rsqrt through ``triton.language.extra.cuda.libdevice``."""
        offs = tl.arange(0, N)
        x = tl.load(x_ptr + offs)
        tl.store(tanh_ptr + offs, ld_cuda.tanh(x))
        tl.store(erf_ptr + offs, ld_cuda.erf(x))
        tl.store(rsqrt_ptr + offs, ld_cuda.rsqrt(x))

    def probe_tl_math_kernel(x_ptr, rsqrt_ptr, erf_ptr, exp_ptr, N: tl.constexpr):
        """``tl.math.rsqrt``, ``tl.math.erf`` and ``tl.exp`` (builtins)."""
        offs = tl.arange(0, N)
        x = tl.load(x_ptr + offs)
        tl.store(rsqrt_ptr + offs, tl.math.rsqrt(x))
        tl.store(erf_ptr + offs, tl.math.erf(x))
        tl.store(exp_ptr + offs, tl.exp(x))

    def probe_autotune_kernel(o_ptr, BLOCK: tl.constexpr):
        """Writes its ``BLOCK`` meta-parameter, so the chosen config is visible."""
        offs = tl.arange(0, 1)
        tl.store(o_ptr + offs, tl.full((1, ), BLOCK, tl.int32))

    def probe_atomic_add_kernel(x_ptr, o_ptr, N: tl.constexpr):
        """``tl.atomic_add`` of each input into its output (fp32)."""
        offs = tl.arange(0, N)
        tl.atomic_add(o_ptr + offs, tl.load(x_ptr + offs))

    def probe_dot_kernel(a_ptr, b_ptr, o_ptr, PREC: tl.constexpr):
        """``tl.dot`` of two 16x16 fp32 tiles with input precision ``PREC``."""
        r = tl.arange(0, 16)
        a = tl.load(a_ptr + r[:, None] * 16 + r[None, :])
        b = tl.load(b_ptr + r[:, None] * 16 + r[None, :])
        tl.store(o_ptr + r[:, None] * 16 + r[None, :], tl.dot(a, b, input_precision=PREC))

    def probe_argmax_kernel(x_ptr, o_ptr, N: tl.constexpr):
        """``tl.argmax`` and ``tl.argmin`` of N values with the fast tie break
        (``tie_break_left=False``)."""
        x = tl.load(x_ptr + tl.arange(0, N))
        tl.store(o_ptr, tl.argmax(x, 0, tie_break_left=False))
        tl.store(o_ptr + 1, tl.argmin(x, 0, tie_break_left=False))

    def probe_bounds_kernel(x_ptr, o_ptr, off):
        """Loads the element ``off`` elements from ``x_ptr`` (memory of another tensor)."""
        one = tl.arange(0, 1)
        tl.store(o_ptr + one, tl.load(x_ptr + off + one))

    _probes = SimpleNamespace(
        bounds=probe_bounds_kernel, cast=probe_cast_kernel, argmax=probe_argmax_kernel, binary=probe_binary_kernel, float_arg=probe_float_arg_kernel,
        bf16_constant=probe_bf16_constant_kernel, runtime_range=probe_runtime_range_kernel,
        atomic_add=probe_atomic_add_kernel, dot=probe_dot_kernel,
        libdevice_stub=probe_libdevice_stub_kernel if ld_stub is not None else None,
        libdevice_cuda=probe_libdevice_cuda_kernel if ld_cuda is not None else None,
        tl_math=probe_tl_math_kernel, autotune=probe_autotune_kernel)
    return _probes
