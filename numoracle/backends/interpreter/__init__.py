"""A GPU-faithful Triton interpreter (docs/design.md §7, backend ``interpreter``).

CI has no GPU, so kernels run on CPU tensors through Triton's interpreter
(``TRITON_INTERPRET=1``), which does not compute what an NVIDIA GPU computes.
:func:`install` repairs the interpreter in place so that interpreted kernels
follow the GPU's numerical semantics:

========================  ==================================================
defect (``status()`` key) what the bare interpreter does / what install does
========================  ==================================================
``bf16_casts``            fp32->bf16 casts truncate (and mangle bf16
                          subnormals both ways); repaired: round to nearest
                          even (``cvt.rn.bf16.f32``), exact widening.
``fp16_casts``            probed; numpy's ``astype(float16)`` is already RNE
                          (absent on 3.6-3.9).
``fp8_casts``             fp32->e4m3/e5m2 round ties away, wrap values above
                          the range, turn NaN into numbers, and e4m3/e5m2 NaN
                          and inf codes widen to numbers; repaired: RNE with
                          saturation to the largest finite value as
                          ``cvt.rn.satfinite.{e4m3,e5m2}x2.f32`` does (+-inf
                          saturates; NaN gives 0x7F as in NVIDIA's reference
                          ``__nv_cvt_float_to_fp8``), exact widening.
``bf16_arithmetic``       bf16 tensors are numpy uint16 arrays and arithmetic
                          runs on the bit patterns (garbage); repaired: each
                          operation is evaluated in fp32 and rounded once (RNE)
                          to bf16 (also unary math, comparisons, min/max,
                          fma, clamp, sum/min/max reductions, scans, dot).
``fp16_arithmetic``       probed; numpy evaluates float16 ops in float32 and
                          rounds once, as wanted (absent on 3.6-3.9).
``float_scalar_args``     Python float kernel arguments stay Python floats,
                          so ``eps.to(tl.float32)`` raises AttributeError;
                          repaired: passed as fp32 scalar tensors, as on GPU.
``bf16_constants``        a Python float meeting a bf16 tensor (``x * 1.5``,
                          ``tl.full(..., 1.5, tl.bfloat16)``) raises
                          AttributeError (Triton 3.6's builder has no
                          ``get_bf16``); repaired: a bf16 constant, the value
                          rounded RNE to fp32, then to bf16.
``runtime_range``         a runtime integer used as an index
                          (``range(0, n_cols, BLOCK)``) raises TypeError on
                          Triton 3.6 with numpy 2.4 (``int()`` of a
                          one-element array); repaired: read from its element.
``atomic_fadd_ftz``       an fp32 ``tl.atomic_add`` keeps subnormals, where
                          the GPU's flushes subnormal inputs and results to
                          zero; repaired: lanes applied in order, each
                          flushing what it reads, adds and stores.
``libdevice``             ``libdevice.tanh`` etc. return None (stub module)
                          or raise (``tl.extra.cuda.libdevice``); repaired:
                          ``__nv_*`` symbols evaluated in float64 with numpy /
                          scipy and rounded to the result format (so within
                          ~0.5 ulp: more accurate than the GPU's libdevice).
``tl_math``               probed (``tl.math.rsqrt``/``erf``, ``tl.exp``);
                          these builtins work upstream on 3.6-3.9.
``dot_scaled_fp8``        ``tl.dot_scaled`` widens fp8 operands through
                          float16, losing e5m2 subnormals; repaired:
                          decoded by their bits (``dot_scaled``).
``dot_split_precisions``  ``tl.dot(..., input_precision="bf16x3")`` or
                          ``"bf16x6"``, which the NVIDIA backend compiles,
                          raises (the interpreter's options leave them out);
                          repaired: admitted, computed as the interpreter's
                          float32 matmul, as "tf32" and "tf32x3" are.
``argmax_fast_ties``      ``tl.argmax``/``tl.argmin`` with
                          ``tie_break_left=False`` (Triton's fast tie break,
                          which promises no index among equal values) take
                          the first, as with ``True``; repaired: the last
                          (what a left-to-right fold of the fast combine
                          gives), so that a reference promising the first
                          meets the difference on the CPU too.
``out_of_bounds``         a load, store or atomic whose address lies outside
                          every tensor the kernel was given reads or writes
                          whatever host memory is there (a store corrupts the
                          heap; the process may abort later); repaired: raises
                          ``numoracle.OutOfBounds`` before memory is touched,
                          naming the kernel's line and the nearest tensor
                          (module ``bounds``).
``autotune``              ``triton.autotune`` benchmarks, which needs a GPU
                          driver; repaired: an interpreted autotuned kernel
                          runs one chosen config (see below), no benchmark.
========================  ==================================================

Every defect is *detected*, not assumed: :func:`install` launches a tiny
probe kernel for each on the bare interpreter and applies only the repairs
whose defect is present (``install(force=True)`` applies them all), then
re-runs the probes to confirm the repair.  :func:`status` reports
``{defect: {"present_on_bare": bool, "repaired": bool}}``;
:func:`probe_details` says what each probe saw.  :func:`uninstall` restores
every patched attribute.

What the repaired interpreter still does differently from the GPU: it never
contracts ``a*b + c`` into one FMA (the GPU does, by default, in fp32 and in
bf16: see docs/facts.md), numpy's float32 functions replace the GPU's approximate
ones, and reductions run in numpy's order.

``TRITON_INTERPRET``
--------------------
``triton.jit`` decides *when a kernel is decorated* whether it becomes an
interpreted function, from ``triton.knobs.runtime.interpret`` (the
environment variable unless a program set the knob).  :func:`install`
therefore sets ``os.environ["TRITON_INTERPRET"] = "1"`` when the variable is
unset, and warns when the variable or the knob says otherwise (it then
leaves them alone: the process asked for compiled kernels).  This module
does not import Triton until it is used, so ``import
numoracle.backends.interpreter; install()`` comes first.  If
``triton.language`` was imported before (by other code), its own ``@jit``
helpers (``tl.sum``, ``tl.max``, ``tl.cdiv`` ...) are compiled
``JITFunction`` objects that an interpreted kernel cannot call: install()
detects that, rebinds them as interpreted functions, and warns once.
Kernels *you* decorated before that are compiled too and are not
interpreted: call :func:`install` before importing the modules that define
kernels, or set ``TRITON_INTERPRET=1`` in the environment, or convert a
kernel with :func:`as_interpreted`.  The repairs themselves patch the
interpreter's classes and apply whatever the variable says.
:func:`uninstall` leaves the environment variable as it is.

Autotuned kernels
-----------------
An interpreted ``@triton.autotune`` kernel runs one config: the first, or the
one chosen by :func:`set_autotune_config` / ``install(autotune_config=...)``
or by the setting ``autotune_config`` (``numoracle.settings``; environment variable
``NUMORACLE_AUTOTUNE_CONFIG``): an index such as ``1``, or ``BLOCK_SIZE=128,num_warps=4``
to match ``Config.all_kwargs()``.

The package: one module per kind of repair (``casts``, ``arithmetic``, ``reductions``,
``dot``, ``dot_scaled``, ``atomics``, ``bounds``, ``libdevice``, ``autotune``), the ``probes`` that detect each defect, the numpy
``rounding`` the repairs store with (built on ``numoracle.formats.round``), and all of
their state in ``_state``.
"""

from __future__ import annotations

import inspect
import os
import warnings
from typing import Any, Dict

from .. import _triton_compat as compat
from ._state import STATE as state
from ._state import language, runtime
from .arithmetic import (repair_bf16_arithmetic, repair_bf16_constants, repair_float_scalar_args,
                         repair_fp16_arithmetic, repair_runtime_range)
from .atomics import repair_atomic_fadd_ftz
from .bounds import repair_out_of_bounds
from .autotune import repair_autotune
from .autotune import set_autotune_config as set_autotune_config
from .casts import repair_bf16_casts, repair_fp8_casts, repair_fp16_casts
from .dot import repair_dot_split_precisions
from .dot_scaled import repair_dot_scaled_fp8
from .reductions import repair_argmax_fast_ties
from .libdevice import repair_libdevice, repair_tl_math
from .probes import DEFECTS as DEFECTS
from .probes import bare_probes, run_probes
from .rounding import bf16_bits_to_f32 as bf16_bits_to_f32
from .rounding import fp8_bits_to_f32 as fp8_bits_to_f32
from .rounding import rne_bf16_bits as rne_bf16_bits
from .rounding import rne_fp8_bits as rne_fp8_bits
from .rounding import rne_fp16 as rne_fp16
from .rounding import round_fma as round_fma
from .rounding import rtz_bf16_bits as rtz_bf16_bits

__all__ = [
    "DEFECTS", "install", "uninstall", "is_installed", "status", "probe_details", "set_autotune_config",
    "as_interpreted", "rne_bf16_bits", "rtz_bf16_bits", "bf16_bits_to_f32", "rne_fp16", "rne_fp8_bits",
    "fp8_bits_to_f32", "round_fma",
]

# the repair of each defect, in the order install() applies them
REPAIRS = {
    "bf16_casts": repair_bf16_casts,
    "fp16_casts": repair_fp16_casts,
    "fp8_casts": repair_fp8_casts,
    "bf16_arithmetic": repair_bf16_arithmetic,
    "fp16_arithmetic": repair_fp16_arithmetic,
    "float_scalar_args": repair_float_scalar_args,
    "bf16_constants": repair_bf16_constants,
    "runtime_range": repair_runtime_range,
    "atomic_fadd_ftz": repair_atomic_fadd_ftz,
    "libdevice": repair_libdevice,
    "tl_math": repair_tl_math,
    "autotune": repair_autotune,
    "dot_scaled_fp8": repair_dot_scaled_fp8,
    "dot_split_precisions": repair_dot_split_precisions,
    "argmax_fast_ties": repair_argmax_fast_ties,
    # last: it wraps the atomics the other repairs may have replaced
    "out_of_bounds": repair_out_of_bounds,
}


def _ensure_interpret_env() -> None:
    """Set ``TRITON_INTERPRET=1`` when unset; warn when Triton will decide
    otherwise for kernels decorated from now on."""
    value = os.environ.get("TRITON_INTERPRET")
    if value is None or value.strip() == "":
        os.environ["TRITON_INTERPRET"] = "1"
    elif value.strip().lower() not in ("1", "true", "on", "yes"):
        warnings.warn(f"TRITON_INTERPRET={value!r}: kernels decorated with triton.jit will be compiled for a GPU, "
                      "not interpreted; the interpreter repairs apply only to interpreted kernels",
                      RuntimeWarning, stacklevel=3)
        return
    if compat.interpret_knob() is False:
        warnings.warn("triton.knobs.runtime.interpret is False although TRITON_INTERPRET is set: a program set "
                      "the knob, so kernels decorated from now on are not interpreted", RuntimeWarning,
                      stacklevel=3)


def _rebind_language_jit() -> int:
    """Make ``triton.language``'s own ``@jit`` helpers interpreted.

    ``tl.sum``, ``tl.max``, ``tl.cdiv``, ``tl.softmax``, ``tl.rand`` ... are
    ``@jit`` functions decorated when ``triton.language`` is first imported.
    If that happened before ``TRITON_INTERPRET`` was set, they are compiled
    ``JITFunction`` objects, and calling one inside an interpreted kernel
    raises "Cannot call @triton.jit'd outside of the scope of a kernel".
    Rebind every such function found in a loaded ``triton.language*`` module
    (and the ``tl.tensor`` member functions that forward to them) to an
    ``InterpretedFunction`` of the same Python function.  Returns the number
    of functions rebound; :func:`uninstall` restores them."""
    import sys

    JITFunction = compat.jit_function_class()
    if JITFunction is None:  # pragma: no cover
        return 0
    rt = runtime()
    tl = language()
    converted: Dict[int, Any] = {}

    def interpreted_of(jit_fn):
        if id(jit_fn) not in converted:
            converted[id(jit_fn)] = rt.InterpretedFunction(jit_fn.fn)
        return converted[id(jit_fn)]

    def is_compiled(value):
        return isinstance(value, JITFunction) and not isinstance(value, rt.InterpretedFunction)

    for mod_name, module in list(sys.modules.items()):
        if module is None or not (mod_name == "triton.language" or mod_name.startswith("triton.language.")):
            continue
        for name, value in list(vars(module).items()):
            if is_compiled(value):
                state.patcher.set(module, name, interpreted_of(value))
    tensor_cls = tl.core.tensor
    for name, value in list(vars(tensor_cls).items()):
        target = value if is_compiled(value) else None
        if target is None and inspect.isfunction(value) and value.__closure__:
            for cell in value.__closure__:
                try:
                    contents = cell.cell_contents
                except ValueError:
                    continue
                if is_compiled(contents):
                    target = contents
        if target is not None:
            fn = interpreted_of(target)

            def member(*args, _fn=fn, **kwargs):
                return _fn(*args, **kwargs)

            member.__name__ = name
            member.__doc__ = f"Forwards to the interpreted {name} (numoracle)."
            state.patcher.set(tensor_cls, name, member)
    return len(converted)


def install(force: bool = False, autotune_config: Any = None, reprobe: bool = False) -> Dict[str, dict]:
    """Make interpreted Triton kernels compute what the GPU computes.

    Idempotent: a second call changes nothing (except ``autotune_config``,
    if given).  Probes each defect on the bare interpreter (once per
    process, or again with ``reprobe=True``), applies the repairs for the
    defects present (all of them with ``force=True``), re-probes to confirm,
    and returns :func:`status`.  Sets ``TRITON_INTERPRET=1`` if unset (see
    the module docstring)."""
    _ensure_interpret_env()
    if autotune_config is not None:
        set_autotune_config(autotune_config)
    if state.installed:
        return status()
    applied = []
    try:
        rebound = _rebind_language_jit() if compat.interpret_knob() else 0
        if rebound and not state.rebind_warned:
            state.rebind_warned = True
            warnings.warn(f"triton.language was imported before TRITON_INTERPRET was set: numoracle rebound its "
                          f"{rebound} @triton.jit helpers (tl.sum, tl.max, tl.cdiv, ...) as interpreted functions. "
                          "Kernels decorated before install() are compiled JITFunctions and will not run on the CPU: "
                          "import them after install(), set TRITON_INTERPRET=1 before importing triton, or convert "
                          "them with numoracle.backends.interpreter.as_interpreted()", RuntimeWarning, stacklevel=2)
        bare = bare_probes(reprobe=reprobe)
        for name in DEFECTS:
            if force or bare[name][0]:
                REPAIRS[name]()
                applied.append(name)
        state.installed = True
    except Exception:
        state.forget_repairs()
        raise
    after = run_probes()
    state.repaired.clear()
    state.after_details.clear()
    for name in DEFECTS:
        state.after_details[name] = after[name][1]
        state.repaired[name] = name in applied and not after[name][0]
        if name in applied and after[name][0]:
            warnings.warn(f"numoracle interpreter repair {name!r} did not take: {after[name][1]}",
                          RuntimeWarning, stacklevel=2)
    return status()


def uninstall() -> None:
    """Restore every attribute :func:`install` patched (the bare interpreter).
    ``TRITON_INTERPRET`` is left as it is."""
    state.forget_repairs()


def is_installed() -> bool:
    return state.installed


def status() -> Dict[str, dict]:
    """``{defect: {"present_on_bare": bool, "repaired": bool}}``.

    ``present_on_bare``: the probe kernel showed the defect on the bare
    interpreter (probed now if it has not been yet).  ``repaired``: install()
    applied the repair and the probe passes afterwards (False when the defect
    is absent and ``force`` was not given -- nothing to repair -- or after
    :func:`uninstall`).  With ``install(force=True)`` an absent defect's
    repair is applied too and reported as repaired when its probe passes."""
    if state.probe_cache is None and state.installed:  # pragma: no cover - cannot happen
        raise RuntimeError("installed without probes")
    bare = bare_probes()
    return {name: {"present_on_bare": bool(bare[name][0]), "repaired": bool(state.installed and state.repaired.get(name))}
            for name in DEFECTS}


def probe_details() -> Dict[str, dict]:
    """What each probe saw: ``{defect: {"bare": str, "after_install": str|None}}``."""
    bare = bare_probes()
    return {name: {"bare": bare[name][1], "after_install": state.after_details.get(name) if state.installed else None}
            for name in DEFECTS}


def as_interpreted(kernel: Any) -> Any:
    """An interpreted version of a kernel decorated while ``TRITON_INTERPRET``
    was unset: a ``JITFunction`` becomes an ``InterpretedFunction`` of the
    same Python function; an Autotuner/Heuristics wrapper is copied with its
    inner kernel converted.  Already interpreted kernels are returned as is."""
    import copy

    from triton.runtime.jit import JITFunction

    rt = runtime()
    if isinstance(kernel, rt.InterpretedFunction):
        return kernel
    if isinstance(kernel, JITFunction):
        return rt.InterpretedFunction(kernel.fn)
    inner = getattr(kernel, "fn", None)
    if inner is None:
        raise TypeError(f"not a Triton kernel: {kernel!r}")
    wrapper = copy.copy(kernel)
    wrapper.fn = as_interpreted(inner)
    return wrapper

