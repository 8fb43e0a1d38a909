"""libdevice and ``tl.math``: the repairs of defects ``libdevice`` and ``tl_math``."""

from __future__ import annotations

import inspect
import math
from typing import Any, Callable, Dict, Optional

import numpy as np

from .. import _triton_compat as compat
from ._state import STATE as state
from ._state import runtime


def _special(name: str):
    try:
        import scipy.special as sp

        return getattr(sp, name)
    except Exception:  # pragma: no cover - scipy is a dependency
        fallback = {"erf": math.erf, "erfc": math.erfc, "gammaln": math.lgamma, "gamma": math.gamma}
        if name not in fallback:
            raise
        return np.vectorize(fallback[name], otypes=[np.float64])


def _round_half_away(x):
    return np.copysign(np.floor(np.abs(x) + 0.5), x)


_LIBDEVICE_UNARY: Dict[str, Callable] = {
    "tanh": np.tanh, "sinh": np.sinh, "cosh": np.cosh, "asinh": np.arcsinh, "acosh": np.arccosh,
    "atanh": np.arctanh, "sin": np.sin, "cos": np.cos, "tan": np.tan, "asin": np.arcsin,
    "acos": np.arccos, "atan": np.arctan, "sinpi": lambda x: np.sin(np.pi * x),
    "cospi": lambda x: np.cos(np.pi * x), "exp": np.exp, "exp2": np.exp2,
    "exp10": lambda x: np.power(10.0, x), "expm1": np.expm1, "log": np.log, "log2": np.log2,
    "log10": np.log10, "log1p": np.log1p, "sqrt": np.sqrt, "rsqrt": lambda x: 1.0 / np.sqrt(x),
    "cbrt": np.cbrt, "rcbrt": lambda x: 1.0 / np.cbrt(x), "rcp": lambda x: 1.0 / x,
    "erf": lambda x: _special("erf")(x), "erfc": lambda x: _special("erfc")(x),
    "erfinv": lambda x: _special("erfinv")(x), "erfcinv": lambda x: _special("erfcinv")(x),
    "erfcx": lambda x: _special("erfcx")(x), "lgamma": lambda x: _special("gammaln")(x),
    "tgamma": lambda x: _special("gamma")(x), "normcdf": lambda x: _special("ndtr")(x),
    "normcdfinv": lambda x: _special("ndtri")(x), "floor": np.floor, "ceil": np.ceil,
    "trunc": np.trunc, "round": _round_half_away, "rint": np.rint, "nearbyint": np.rint,
    "fabs": np.abs, "abs": np.abs,
    "saturate": lambda x: np.where(np.isnan(x), 0.0, np.clip(x, 0.0, 1.0)),
    "isnan": lambda x: np.isnan(x), "isinf": lambda x: np.isinf(x),
    "isfinite": lambda x: np.isfinite(x), "finite": lambda x: np.isfinite(x),
    "signbit": lambda x: np.signbit(x),
}
_LIBDEVICE_BINARY: Dict[str, Callable] = {
    "pow": np.power, "powi": np.power, "atan2": np.arctan2, "fmod": np.fmod, "fmin": np.fmin,
    "fmax": np.fmax, "hypot": np.hypot, "copysign": np.copysign,
    "fdim": lambda x, y: np.where(x > y, x - y, 0.0), "remainder": lambda x, y: np.remainder(x, y),
    "div": np.divide, "divide": np.divide, "add": np.add, "sub": np.subtract, "mul": np.multiply,
}
_LIBDEVICE_BINARY["ldexp"] = lambda x, n: np.ldexp(x, np.asarray(n).astype(np.int32))
_LIBDEVICE_TERNARY: Dict[str, Callable] = {"fma": None}  # handled exactly below


def _libdevice_name_candidates(symbol: str) -> list:
    """``__nv_fast_fdividef`` -> ``fast_fdividef``, ``fdividef``, ``fdivide``,
    ``dividef``, ``divide`` ...: drop the prefix, ``fast_``, ``_rn``, a leading
    f/d (``fsqrt_rn``) and a trailing f/d (``tanhf``), least change first."""
    name = symbol[5:] if symbol.startswith("__nv_") else symbol
    out = [name]
    for c in list(out):
        if c.startswith("fast_"):
            out.append(c[5:])
    for c in list(out):
        if c.endswith("_rn"):
            out.append(c[:-3])
    for c in list(out):
        if c[-1:] in ("f", "d"):
            out.append(c[:-1])
    for c in list(out):
        if c[:1] in ("f", "d"):
            out.append(c[1:])
    seen, ordered = set(), []
    for c in out:
        if c and c not in seen:
            seen.add(c)
            ordered.append(c)
    return ordered


def _libdevice_fn(symbol: str, nargs: int):
    """``(name, function)`` for a libdevice symbol, or None if unsupported."""
    table = {1: _LIBDEVICE_UNARY, 2: _LIBDEVICE_BINARY, 3: _LIBDEVICE_TERNARY}.get(nargs, {})
    for c in _libdevice_name_candidates(symbol):
        if c in table:
            return c, table[c]
    return None


def _eval_libdevice(symbol: str, args: list, ret_ty) -> Optional[np.ndarray]:
    """Evaluate a libdevice call in float64 and round to the result type."""
    rt = runtime()
    found = _libdevice_fn(symbol, len(args))
    if found is None:
        return None
    name, fn = found
    out_np = rt._get_np_dtype(ret_ty)
    arrays = np.broadcast_arrays(*[np.asarray(a) for a in args])
    with np.errstate(all="ignore"):
        if name == "fma":
            if out_np == np.float32 and hasattr(rt._interpreter, "fma_fp32"):
                res = rt._interpreter.fma_fp32(*[a.astype(np.float32) for a in arrays])
            elif out_np == np.float64 and hasattr(rt._interpreter, "fma_fp64"):
                res = rt._interpreter.fma_fp64(*[a.astype(np.float64) for a in arrays])
            else:  # pragma: no cover
                res = np.asarray(arrays[0], np.float64) * arrays[1] + arrays[2]
        else:
            x64 = [a.astype(np.float64) if a.dtype.kind == "f" else a for a in arrays]
            res = fn(*x64)
    res = np.asarray(res)
    if res.dtype == np.bool_:
        res = res.astype(np.int32)
    with np.errstate(all="ignore"):
        return res.astype(out_np)


class _DictAttrs:
    """Attribute access onto a dict, so the interpreter's patch scope can
    patch (and restore) names in a kernel's module globals."""

    def __init__(self, d: dict) -> None:
        object.__setattr__(self, "_d", d)

    def __getattr__(self, name: str) -> Any:
        try:
            return self._d[name]
        except KeyError:
            raise AttributeError(name) from None

    def __setattr__(self, name: str, value: Any) -> None:
        self._d[name] = value

    def __delattr__(self, name: str) -> None:
        del self._d[name]


def _patch_libdevice_modules(fn: Callable, scope: Any) -> None:
    """While an interpreted kernel runs, make libdevice functions callable:
    the NVIDIA wrappers get the interpreter's semantic (as the interpreter
    does for ``tl``/``tl.math`` builtins), and the stub module's names -- and
    stub functions imported by name into the kernel's module
    (``from triton.language.extra.libdevice import tanh``) -- point at them,
    which is what Triton's GPU code generator does when it maps
    ``triton.language.extra.libdevice`` to the backend's module."""
    rt = runtime()
    cuda, stub = compat.libdevice_cuda(), compat.libdevice_stub()
    if cuda is None or not hasattr(scope, "set_attr"):
        return
    rt._patch_builtin(cuda, rt.interpreter_builder, scope)
    if stub is None:
        return
    for name in dir(stub):
        if name.startswith("_") or not callable(getattr(stub, name, None)):
            continue
        member = getattr(cuda, name, None)
        if member is not None and getattr(getattr(stub, name), "__module__", "") == stub.__name__:
            scope.set_attr(stub, name, member)
    fn_globals = getattr(fn, "__globals__", None)
    if not isinstance(fn_globals, dict):
        return
    view = _DictAttrs(fn_globals)
    for name, value in list(fn_globals.items()):
        if inspect.isfunction(value) and value.__module__ == stub.__name__ and hasattr(cuda, value.__name__):
            state.globals_patched.setdefault((id(fn_globals), name), (fn_globals, name, value))
            scope.set_attr(view, name, getattr(cuda, value.__name__))


def repair_libdevice() -> None:
    """Defect ``libdevice``: ``triton.language.extra.libdevice.tanh`` (the
    stub module with ``...`` bodies that the GPU compiler swaps for the
    backend's) returns None in the interpreter, and
    ``tl.extra.cuda.libdevice.tanh`` raises ("`_semantic` argument must be
    provided") because the interpreter patches only ``tl``/``tl.math``
    builtins, and ``InterpreterBuilder.create_extern_elementwise`` raises
    NotImplementedError.  Detected by launching tanh/erf/rsqrt through each
    module path the installed Triton has.  Repair: wrap
    ``interpreter._patch_lang`` so that, for the duration of each launch, the
    cuda module's builtins get the interpreter's semantic and the stub's
    names point at them (restored with the interpreter's own patch scope);
    ``create_extern_elementwise`` evaluates the ``__nv_*`` symbol in float64
    (numpy / scipy.special) and rounds to the result type."""
    rt = runtime()
    B = rt.InterpreterBuilder
    orig_extern = B.create_extern_elementwise
    orig_patch_lang = rt._patch_lang

    def create_extern_elementwise(self, libName, libPath, symbol, argList, retType, isPure):
        ret_ty = retType.scalar if hasattr(retType, "scalar") else retType
        out = _eval_libdevice(symbol, [a.data for a in argList], ret_ty)
        if out is None:
            return orig_extern(self, libName, libPath, symbol, argList, retType, isPure)
        return rt.TensorHandle(out, ret_ty)

    def _patch_lang(fn):
        scope = orig_patch_lang(fn)
        if scope is not None:
            try:
                _patch_libdevice_modules(fn, scope)
            except Exception:  # noqa: BLE001 - an unknown Triton layout: leave the launch as upstream has it
                pass
        return scope

    # Record the modules' current functions so uninstall() restores them even
    # if a device-function call (InterpretedFunction.__call__, which never
    # restores its patch scope) left them patched.
    for module in (compat.libdevice_stub(), compat.libdevice_cuda()):
        if module is not None:
            for name, value in list(vars(module).items()):
                if callable(value) and not name.startswith("_"):
                    state.patcher.set(module, name, value)
    state.patcher.set(B, "create_extern_elementwise", create_extern_elementwise)
    state.patcher.set(rt, "_patch_lang", _patch_lang)


def repair_tl_math() -> None:
    """Defect ``tl_math``: a ``tl.math`` builtin the kernels use
    (``rsqrt``, ``erf``, ``exp``) missing from the ``InterpreterBuilder``.
    Detected by launching ``tl.math.rsqrt``/``tl.math.erf``/``tl.exp``.
    Present on no Triton from 3.6 to 3.9; the repair adds whichever
    ``create_*`` method is missing (float64 evaluation, rounded)."""
    rt = runtime()
    B = rt.InterpreterBuilder

    def _unary(symbol):
        def method(self, arg):
            return rt.TensorHandle(_eval_libdevice(symbol, [arg.data], arg.dtype.scalar), arg.dtype.scalar)

        return method

    for meth, sym in (("create_rsqrt", "rsqrt"), ("create_erf", "erf"), ("create_exp", "exp"),
                      ("create_log", "log"), ("create_sqrt", "sqrt")):
        if not hasattr(B, meth):
            state.patcher.set(B, meth, _unary(sym))


