"""Everything in ``numoracle.plan`` that depends on Triton's version, in one place.

The rest of the package reads Triton IR as text and never touches Triton's objects.  What is
here: finding Triton's kernel classes (compiled, interpreted, autotuned, heuristic), building a
launch's signature from its arguments (our own rules, following Triton 3.9's
``create_function_from_signature`` / ``native_specialize_impl``), and compiling one
specialization to TTIR and TTGIR for an NVIDIA target without a GPU.

Written against Triton 3.9; the spots where Triton 3.6 may differ are marked "3.6:" (see
docs/plan.md for what was verified where).
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass

from ..backends._triton_compat import is_constexpr
from ..errors import InvalidArgument

# torch dtype name -> Triton's canonical element type name (Triton 3.9 ``_utils``).
_DTYPES = {
    "bool": "u1", "float8_e4m3fn": "fp8e4nv", "float8_e5m2": "fp8e5", "float8_e4m3fnuz": "fp8e4b8",
    "float8_e5m2fnuz": "fp8e5b16", "float16": "fp16", "bfloat16": "bf16", "float32": "fp32",
    "float64": "fp64", "int8": "i8", "int16": "i16", "int32": "i32", "int64": "i64", "uint8": "u8",
    "uint16": "u16", "uint32": "u32", "uint64": "u64",
}
DEFAULT_ARCH = 90          # the H200 the project measures on; ``--arch`` picks another


def version() -> str:
    import triton
    return triton.__version__


@dataclass(frozen=True)
class Classes:
    jit: type
    interpreted: type | None
    autotuner: type | None
    heuristics: type | None


def classes() -> Classes:
    from triton.runtime.jit import JITFunction
    try:
        from triton.runtime.interpreter import InterpretedFunction
    except ImportError:  # pragma: no cover - every 3.x has it
        InterpretedFunction = None
    try:
        from triton.runtime.autotuner import Autotuner, Heuristics
    except ImportError:  # pragma: no cover
        Autotuner = Heuristics = None
    return Classes(JITFunction, InterpretedFunction, Autotuner, Heuristics)


def jit_function(obj, depth: int = 16):
    """The ``@triton.jit`` object a module attribute stands for: the object itself, or the one an
    ``@triton.autotune`` / ``@triton.heuristics`` wrapper (or a chain of them) wraps, following
    their ``.fn``; the object unchanged when no ``JITFunction`` is found (the compiler then says
    what it is)."""
    from ..backends._triton_compat import jit_function_class
    jit = jit_function_class()
    cur = obj
    for _ in range(depth):
        if jit is None or isinstance(cur, jit):
            return cur
        nxt = getattr(cur, "fn", None)
        if nxt is None or inspect.isfunction(nxt):
            return obj
        cur = nxt
    return obj


def python_function(kernel):
    """The plain Python function of a compiled or interpreted ``@triton.jit`` kernel."""
    fn = getattr(kernel, "fn", None)
    if not inspect.isfunction(fn):
        raise InvalidArgument(f"{kernel!r} is not a @triton.jit function (it has no Python function "
                              f"to compile); expected the object @triton.jit returns.")
    return fn


# --------------------------------------------------------------------------- signature

CONSTEXPR = "constexpr"


def is_tensor_like(v) -> bool:
    return hasattr(v, "data_ptr") and hasattr(v, "dtype")


def dtype_name(dtype) -> str:
    name = str(dtype).split(".")[-1]
    if name not in _DTYPES:
        raise InvalidArgument(f"a kernel argument of dtype {dtype} has no Triton element type; "
                              f"expected one of {sorted(_DTYPES)}.")
    return _DTYPES[name]


def arg_type(value, *, specialize: bool, align: bool):
    """(type string, divisible-by-16, constexpr value or None) of one runtime argument, as
    Triton 3.9 specializes it: tensors are pointers (16-byte aligned ones get
    ``tt.divisibility``), an int equal to 1 becomes the constant 1, ints divisible by 16 get
    ``tt.divisibility``, floats are fp32, None is a constant."""
    import triton.language as tl
    if isinstance(value, tl.constexpr):
        return CONSTEXPR, False, value.value
    if isinstance(value, tl.dtype):
        return CONSTEXPR, False, value
    if value is None:
        return CONSTEXPR, False, None
    if is_tensor_like(value):
        return "*" + dtype_name(value.dtype), align and value.data_ptr() % 16 == 0, None
    if isinstance(value, bool):
        return "u1", False, None           # 3.6: "i1"; both parse
    if isinstance(value, int):
        if specialize and value == 1:
            return CONSTEXPR, False, 1
        if -2 ** 31 <= value < 2 ** 31:
            ty = "i32"
        elif 0 <= value < 2 ** 64 and value >= 2 ** 63:
            ty = "u64"
        else:
            ty = "i64"
        return ty, specialize and align and value % 16 == 0, None
    if isinstance(value, float):
        return "fp32", False, None
    raise InvalidArgument(f"cannot read the Triton type of a kernel argument of type {type(value).__name__} "
                          f"({value!r:.60}); numoracle plan handles tensors, ints, floats, bools, None and "
                          f"constexprs.")


def parameters(jit_fn):
    """[(name, is_constexpr, do_not_specialize, do_not_specialize_on_alignment, default)]"""
    fn = jit_fn.fn if hasattr(jit_fn, "fn") else jit_fn
    sig = inspect.signature(fn)
    dns = set(getattr(jit_fn, "do_not_specialize", None) or ())
    dnsa = set(getattr(jit_fn, "do_not_specialize_on_alignment", None) or ())
    out = []
    for i, p in enumerate(sig.parameters.values()):
        is_cx = is_constexpr(p.annotation)
        out.append((p.name, is_cx, i in dns or p.name in dns, i in dnsa or p.name in dnsa,
                    p.default))
    return out


# launch keywords that are compile options, not kernel arguments
OPTION_KEYS = ("num_warps", "num_stages", "num_ctas", "maxnreg", "enable_fp_fusion", "debug",
               "launch_cooperative_grid", "launch_pdl", "ir_override", "extern_libs",
               "instrumentation_mode", "sanitize_overflow", "default_dot_input_precision",
               "max_num_imprecise_acc_default")


# --------------------------------------------------------------------------- targets

def target(arch=None):
    """GPUTarget for an NVIDIA architecture (``90`` for Hopper) or, with ``arch="device"``, the
    GPU at hand (an error without one)."""
    from triton.backends.compiler import GPUTarget
    if arch == "device":
        import torch
        if not torch.cuda.is_available():
            raise InvalidArgument("--arch device needs a CUDA device; without one give an architecture "
                                  "number such as 90 (Hopper) or 80 (Ampere).")
        from triton.runtime.driver import driver
        return driver.active.get_current_target()
    arch = DEFAULT_ARCH if arch is None else int(arch)
    return GPUTarget("cuda", arch, 32)


# --------------------------------------------------------------------------- compile

def compile_ir(jit_fn, signature: dict, constexprs: dict, divisible: tuple, options: dict, tgt) -> dict:
    """TTIR and TTGIR (text) of one specialization, and the compile options in force.

    The backend's own stages are run up to TTGIR (a tenth of a second), so no PTX assembler
    runs; where that private path is not available the public ``triton.compile`` runs the
    whole pipeline (about a second) and its ``asm`` is read."""
    import warnings

    from triton.compiler import ASTSource

    attrs = {(i,): [["tt.divisibility", 16]] for i in divisible}
    src = ASTSource(fn=jit_fn, signature=signature, constexprs=constexprs, attrs=attrs)
    with warnings.catch_warnings():
        # Triton 3.9 warns once that the FP-fusion default will change; the plan states the
        # setting in force instead
        warnings.simplefilter("ignore", UserWarning)
        try:
            return _staged(src, options, tgt)
        except (TypeError, AttributeError, KeyError):   # 3.6: other stage signatures
            import triton
            k = triton.compile(src, target=tgt, options=options)
            opts = getattr(k, "metadata", None)
            return {"ttir": k.asm["ttir"], "ttgir": k.asm.get("ttgir", ""),
                    "options": _options_dict(opts._asdict() if hasattr(opts, "_asdict") else {})}


def _options_dict(d: dict) -> dict:
    keys = ("num_warps", "num_stages", "num_ctas", "enable_fp_fusion", "default_dot_input_precision",
            "max_num_imprecise_acc_default", "arch", "enable_reflect_ftz")
    return {k: d[k] for k in keys if k in d}


def _staged(src, options: dict, tgt) -> dict:
    from triton._C.libtriton import ir
    from triton.compiler.compiler import make_backend
    backend = make_backend(tgt)
    opts = backend.parse_options(dict(options))
    context = ir.context()
    ir.load_dialects(context)
    backend.load_dialects(context)
    codegen_fns = backend.get_codegen_implementation(opts)
    module_map = backend.get_module_map()
    params = inspect.signature(src.make_ir).parameters
    if "target" in params:
        module = src.make_ir(tgt, opts, codegen_fns, module_map, context)
    else:                                   # 3.6: make_ir(options, codegen_fns, module_map, context)
        module = src.make_ir(opts, codegen_fns, module_map, context)
    stages: dict = {}
    backend.add_stages(stages, opts, src.language)
    metadata = {"hash": src.hash(), "target": tgt, **opts.__dict__}
    out = {}
    for ext in ("ttir", "ttgir"):
        module = stages[ext](module, metadata)
        out[ext] = str(module)
    out["options"] = _options_dict(opts.__dict__)
    return out
