"""The reference-program language (DESIGN §3).

A reference program is plain Python over tracked tensors, annotated with the
format of every store, cast, accumulation and math call.  The same program
runs under several arithmetics, as mpmath runs one algorithm under several
contexts: the error calculus (``calculus.Tracked``: centre + error form) and
the emulator (``emulator.Emulated``: one concrete kernel-like execution).
The functions below dispatch on the tensor type.
"""

from __future__ import annotations

import functools
import inspect

from .errors import InvalidArgument

__all__ = [
    "reference", "Reference", "sum", "mean", "max", "min", "logsumexp", "matmul",
    "where", "maximum", "minimum", "clamp", "gather", "cat",
    "exp", "exp2", "log", "log2", "rsqrt", "sqrt", "sqrt_rn", "sigmoid", "tanh", "erf",
    "sin", "cos", "reciprocal", "div", "mul", "div_rn", "quantize_group", "quantize_mx", "quantize_nvfp4",
    "dequantize",
]


class Reference:
    """A precision-annotated reference program (made by ``@no.reference``)."""

    def __init__(self, fn):
        if not callable(fn):
            raise InvalidArgument(f"@reference decorates a function, got {fn!r}.")
        self.fn = fn
        self.name = getattr(fn, "__name__", "reference")
        sig = inspect.signature(fn)
        self.input_names = [p.name for p in sig.parameters.values()
                            if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        self.param_names = [p.name for p in sig.parameters.values() if p.kind is p.KEYWORD_ONLY]
        self.param_defaults = {p.name: p.default for p in sig.parameters.values()
                               if p.kind is p.KEYWORD_ONLY and p.default is not p.empty}
        functools.update_wrapper(self, fn)

    def __call__(self, *args, **params):
        return self.fn(*args, **params)

    def __repr__(self):
        return f"<reference {self.name}({', '.join(self.input_names)})>"


def reference(fn=None):
    """Mark a function as a reference program: ``@no.reference``."""
    if fn is None:
        return reference
    if isinstance(fn, Reference):
        return fn
    return Reference(fn)


def _impl(x):
    from .calculus.tracked import Tracked
    if isinstance(x, Tracked):
        from .calculus import ops
        return ops
    from .emulator import Emulated
    if isinstance(x, Emulated):
        from . import emulator
        return emulator
    raise InvalidArgument(
        f"expected a tracked tensor (an input of the reference program or a value derived from it), "
        f"got {type(x).__name__}. Reference programs run under numoracle.check or the emulator, "
        f"which pass tracked tensors in place of torch tensors.")


def _first(*xs):
    for x in xs:
        if not isinstance(x, (int, float, bool)) and not _is_bool_tensor(x) and not _is_cond(x):
            return x
    raise InvalidArgument("expected at least one tracked tensor among the arguments.")


def _is_bool_tensor(x):
    import torch
    return isinstance(x, torch.Tensor)


def _is_cond(x):
    from .calculus.tracked import Cond
    return isinstance(x, Cond)


# ---- reductions and products
def sum(x, axis=-1, keepdims=False, *, order="any", acc=None):
    """Sum along ``axis``, accumulating in ``acc`` (default: x's format) under the
    order model ``order``: "any", "sequential", "tree", or an int depth."""
    return _impl(x).sum(x, axis, keepdims, order, acc)


def mean(x, axis=-1, keepdims=False, *, order="any", acc=None):
    return _impl(x).mean(x, axis, keepdims, order, acc)


def max(x, axis=-1, keepdims=False):
    return _impl(x).max(x, axis, keepdims)


def min(x, axis=-1, keepdims=False):
    return _impl(x).min(x, axis, keepdims)


def logsumexp(x, axis=-1, keepdims=False, *, exp="exp2", order="any"):
    return _impl(x).logsumexp(x, axis, keepdims, exp, order)


def matmul(a, b, *, acc=None, order="any"):
    return _impl(a).matmul(a, b, acc, order)


# ---- selection
def where(cond, a, b):
    return _impl(_first(a, b)).where(cond, a, b)


def maximum(a, b):
    return _impl(_first(a, b)).maximum(a, b)


def minimum(a, b):
    return _impl(_first(a, b)).minimum(a, b)


def clamp(x, lo=None, hi=None):
    return _impl(x).clamp(x, lo, hi)


def gather(x, index, axis=-1):
    return _impl(x).gather(x, index, axis)


def cat(xs, axis=-1):
    xs = list(xs)
    return _impl(xs[0]).cat(xs, axis)


# ---- math-library calls: the kernel call each stands for is the profile entry
def _math(name, call=None):
    def f(x):
        return _impl(x).apply(x, name, call or name)
    f.__name__ = call or name
    f.__doc__ = f"Kernel math call ``{call or name}`` (exact {name} plus the profile's error)."
    return f


exp = _math("exp")
exp2 = _math("exp2")
log = _math("log")
log2 = _math("log2")
rsqrt = _math("rsqrt")
sqrt = _math("sqrt")
sqrt_rn = _math("sqrt", "sqrt_rn")
sigmoid = _math("sigmoid")
tanh = _math("tanh")
erf = _math("erf")
sin = _math("sin")
cos = _math("cos")


def reciprocal(x):
    """1 / x as the kernel's division (``div`` in the profile)."""
    return 1.0 / x


def div(a, b):
    """a / b with the kernel's default division (``div`` in the profile).  Either may be a
    float torch tensor computed beside the program, as a runtime argument of the kernel
    (exact in its dtype): ``no.div(loss, n)`` for a count n.  Write that rather than
    ``loss / n``: Python's operator with a torch tensor on one side is one that a compiled
    verdict cannot trace through, so it would be compiled in pieces."""
    return _binary(a, b, "__truediv__", "__rtruediv__")


def mul(a, b):
    """a * b; as ``div``, for a float torch tensor operand (a runtime argument)."""
    return _binary(a, b, "__mul__", "__rmul__")


def _binary(a, b, op: str, rop: str):
    import torch
    if not isinstance(a, (torch.Tensor, int, float)):
        return getattr(a, op)(b)
    if not isinstance(b, (torch.Tensor, int, float)):
        return getattr(b, rop)(a)
    raise InvalidArgument(f"expected a tracked tensor among the operands, got {type(a).__name__} "
                          f"and {type(b).__name__}: compute on plain values with torch itself.")


def div_rn(a, b):
    """tl.math.div_rn: a correctly rounded division."""
    return _impl(_first(a, b)).div_rn(a, b)


# ---- block-scaled quantizers (DESIGN §4.5)
def quantize_group(x, group, fmt="e4m3fn", scale_rule="fp32", *, fmax=None, eps=1e-10):
    """Per-token-group quantization of fp32 ``x`` along its last axis: returns
    an object with ``.codes`` and ``.scales`` (outputs judged in two steps:
    admissible scale, then codes conditioned on the kernel's stored scale) and
    ``.dequantized`` (codes·scale as a tracked value carrying the quantization
    error, for a computation downstream of the quantizer).  ``scale_rule`` is
    "fp32" (max(amax, eps)/fmax) or "ue8m0" (2^ceil(log2(max(amax/fmax, eps))));
    ``fmax`` defaults to 448 for e4m3fn and 224 for e4m3fnuz (vLLM)."""
    from .calculus.tracked import Tracked
    if not isinstance(x, Tracked):
        _impl(x)   # raises the usual message for non-tracked values
        raise InvalidArgument("quantize_group runs under numoracle.check (the error calculus); the "
                              "emulator has no quantizer yet.")
    from .calculus.quant import quantize_group as qg
    return qg(x, group, fmt, scale_rule, fmax=fmax, eps=eps)


def _calculus_only(x, who: str):
    from .calculus.tracked import Tracked
    if not isinstance(x, Tracked):
        _impl(x)   # raises the usual message for non-tracked values
        raise InvalidArgument(f"{who} runs under numoracle.check (the error calculus); the emulator has no "
                              "quantizer yet.")


def quantize_mx(x, fmt="e4m3fn", scale_rule="floor", *, block=32, packed=None):
    """MX (OCP Microscaling) quantization of fp32 ``x`` along its last axis, ``block``
    values per E8M0 scale: returns an object with ``.codes`` and ``.scales`` (outputs
    judged in two steps: admissible scale, then codes conditioned on the kernel's
    stored scale) and ``.dequantized`` (codes·scale as a tracked value carrying the
    quantization error, clamping included).  ``fmt``: "e4m3fn", "e5m2" or "e2m1";
    ``scale_rule``: "floor" (OCP: 2^(floor(log2 amax) − emax), the largest elements
    clamp) or "ceil" (2^ceil(log2(amax/fmax)), none clamps).  ``packed``: for e2m1,
    "low_first" or "high_first" (two codes per byte, which nibble holds the first),
    None for one code per byte."""
    _calculus_only(x, "quantize_mx")
    from .calculus.quant_mx import quantize_mx as qm
    return qm(x, fmt, scale_rule, block=block, packed=packed)


def quantize_nvfp4(x, *, tensor_scale=None, block=16, packed="low_first", eps=1e-10):
    """NVFP4 quantization of fp32 ``x`` along its last axis: e2m1 codes in blocks of 16,
    an e4m3 block scale RN(fl32(fl32(amax/6)/ts)) clamped to [2^-6, 448], and an fp32
    tensor scale ts = fl32(max(amax, eps)/2688) - or ``tensor_scale``, an fp32 input of
    the program.  Returns ``.codes``, ``.scales``, ``.tensor_scale`` (None when given)
    and ``.dequantized``; the block scales are judged conditioned on the kernel's
    stored tensor scale, the codes on both stored scales.  ``packed``: nibble order of
    the codes, or None for one code per byte."""
    _calculus_only(x, "quantize_nvfp4")
    from .calculus.quant_mx import quantize_nvfp4 as qn
    return qn(x, tensor_scale=tensor_scale, block=block, packed=packed, eps=eps)


def dequantize(codes, scales, block, *, tensor_scale=None):
    """Stored block-scaled values codes·scale (·tensor_scale) as fp32: codes [..., K],
    scales [..., K/block] (E8M0, e4m3 or fp32) repeated over their blocks; exact while
    the products stay normal (the inputs of a scaled matmul)."""
    _calculus_only(codes, "dequantize")
    from .calculus.quant_mx import dequantize as dq
    return dq(codes, scales, block, tensor_scale)
