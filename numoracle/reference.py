"""The reference-program language (docs/design.md §3).

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

from .errors import InvalidArgument, LanguageMisuse

__all__ = [
    "reference", "Reference", "launch", "sum", "cumsum", "mean", "max", "min", "logsumexp", "matmul",
    "where", "maximum", "minimum", "clamp", "gather", "cat", "full_like", "zeros_like", "ones_like",
    "exp", "exp2", "log", "log2", "rsqrt", "sqrt", "sqrt_rn", "sigmoid", "tanh", "erf",
    "sin", "cos", "reciprocal", "div", "mul", "div_rn", "quantize_group", "quantize_mx", "quantize_nvfp4",
    "dequantize",
]


class LaunchValue:
    """The default of a reference keyword parameter read from the kernel's launch (``no.launch``)."""

    __slots__ = ("default",)
    MISSING = object()

    def __init__(self, default=MISSING):
        self.default = default

    def __repr__(self):
        return "no.launch()" if self.default is LaunchValue.MISSING else f"no.launch({self.default!r})"


def launch(default=LaunchValue.MISSING):
    """``def ref(x, *, BLOCK=no.launch())``: the parameter takes the kernel launch configuration's
    value of its name, a constexpr (``BLOCK``) or compile option (``num_warps``), as the launches
    that made the judged outputs had it (docs/design.md §3: the runner records them;
    ``check(..., launch={...})`` gives them by hand; ``params`` win; else ``default``)."""
    return LaunchValue(default)


_PLAIN = (int, float, bool, str, type(None))


def note_launch_value(found: dict, name: str, value) -> None:
    """Add one launch's ``value`` of ``name`` to ``found`` ({name: value}), the form
    ``Reference.with_launch`` reads: a plain value (a ``tl.constexpr`` unwrapped, anything else
    by its repr), or the list of the different values several launches gave."""
    if hasattr(value, "value"):                   # tl.constexpr
        value = value.value
    if not isinstance(value, _PLAIN):
        value = repr(value)
    if name not in found:
        found[name] = value
    elif isinstance(found[name], list):
        if value not in found[name]:
            found[name].append(value)
    elif found[name] != value:
        found[name] = [found[name], value]


class Reference:
    """A precision-annotated reference program (made by ``@no.reference``).  Its outputs'
    names (``output_names``) are the ones given to the decorator, else those the program
    returns (``return y, rstd``, or ``y.to(...)``), position by position, else ``y`` for one
    output and ``out0``, ``out1``, ... for several."""

    def __init__(self, fn, outputs=None, params=None):
        if not callable(fn):
            raise InvalidArgument(f"@reference decorates a function, got {fn!r}.")
        self.fn = fn
        self.name = getattr(fn, "__name__", "reference")
        sig = inspect.signature(fn)
        self.input_names = [p.name for p in sig.parameters.values()
                            if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        self.param_names = [p.name for p in sig.parameters.values() if p.kind is p.KEYWORD_ONLY]
        self.param_defaults = {p.name: p.default for p in sig.parameters.values()
                               if p.kind is p.KEYWORD_ONLY and p.default is not p.empty
                               and not isinstance(p.default, LaunchValue)}
        # name -> LaunchValue: parameters read from the kernel's launch configuration
        self.launch_params = {p.name: p.default for p in sig.parameters.values()
                              if p.kind is p.KEYWORD_ONLY and isinstance(p.default, LaunchValue)}
        if outputs is not None:
            if isinstance(outputs, str):
                outputs = (outputs,)
            outputs = tuple(outputs)
            if not outputs or not all(isinstance(o, str) and o.isidentifier() for o in outputs) or \
                    len(set(outputs)) != len(outputs):
                raise InvalidArgument(f"@reference(outputs={outputs!r}): expected distinct names, one per output.")
        self.output_names = outputs if outputs is not None else _returned_names(fn)
        # name -> the values a parameter may take (an operator's domain adds its own)
        self.param_choices = {}
        self.declare_choices(params or {})
        functools.update_wrapper(self, fn)

    def declare_choices(self, choices: dict) -> None:
        """Record the values each named parameter may take (``check_params`` holds strings
        and booleans to them; numbers need only the type)."""
        for name, values in choices.items():
            if name not in self.param_names:
                raise InvalidArgument(f"{self.name}: no keyword parameter {name!r} to declare choices for; it "
                                      f"takes {self.param_names or 'none'}.")
            self.param_choices[name] = tuple(values)

    def check_params(self, params: dict) -> dict:
        """``params`` if every name is one of the program's keyword parameters and every value
        fits it: one of its declared choices where those are strings or booleans (a value
        outside them would take some else-branch of the program and judge the wrong plan),
        else of the type of its choices or default.  Raises InvalidArgument saying what fits."""
        if not isinstance(params, dict):
            raise InvalidArgument(f"params={params!r}: expected a dict of {self.name}'s keyword parameters "
                                  f"({self.param_names or 'it takes none'}).")
        unknown = set(params) - set(self.param_names)
        if unknown:
            raise InvalidArgument(
                f"unknown parameter(s) {sorted(unknown)} for {self.name}; it takes "
                f"{self.param_names or 'no keyword parameters'}.")
        for name, value in params.items():
            choices = self.param_choices.get(name, ())
            if choices and all(isinstance(c, (str, bool)) or c is None for c in choices):
                if value not in choices or type(value) is not type(next(c for c in choices if c == value)):
                    raise InvalidArgument(f"parameter {name}={value!r} of {self.name}: expected one of "
                                          f"{list(choices)}.")
                continue
            like = choices[0] if choices else self.param_defaults.get(name)
            if like is None or isinstance(value, torch_tensor_type()):
                continue
            if isinstance(like, bool) != isinstance(value, bool) or (
                    isinstance(like, (int, float)) and not isinstance(value, (int, float))) or (
                    isinstance(like, str) and not isinstance(value, str)):
                raise InvalidArgument(f"parameter {name}={value!r} of {self.name}: expected a "
                                      f"{type(like).__name__} (like {like!r}).")
        return params

    def with_launch(self, params: dict, launch) -> dict:
        """``params`` with each launch parameter they lack taken from ``launch`` ({name: value};
        a list: the launches gave several values), else from its default; raises saying how."""
        out, launch = dict(params), dict(launch or {})
        for name, lv in self.launch_params.items():
            if name in out:
                continue
            if isinstance(launch.get(name), list):
                raise InvalidArgument(f"{self.name} reads {name} from the kernel's launch (no.launch()), and its "
                                      f"launches gave several values {launch[name]}; give the one this output was "
                                      f"computed with: params={{{name!r}: ...}}.")
            if name in launch:
                out[name] = launch[name]
            elif lv.default is not LaunchValue.MISSING:
                out[name] = lv.default
            else:
                raise InvalidArgument(
                    f"{self.name} reads {name} from the kernel's launch (no.launch()), but no launch gave it "
                    f"(launch values: {sorted(launch) or 'none recorded'}). Judge the outputs through their kernel "
                    f"(the runner records its launches), give launch={{{name!r}: ...}} (or params=) to check, or a "
                    f"default: {name}=no.launch(DEFAULT).")
        return out

    def __call__(self, *args, **params):
        return self.fn(*args, **params)

    def __repr__(self):
        return f"<reference {self.name}({', '.join(self.input_names)})>"

    def names_of(self, n: int) -> list:
        """The names of n outputs: ``output_names`` where it has n, else the defaults."""
        if self.output_names is not None and len(self.output_names) == n:
            return list(self.output_names)
        return ["y"] if n == 1 else [f"out{j}" for j in range(n)]


def _returned_names(fn):
    """The names a function's return statements give its outputs, or None: a name, or the
    name a method chain starts from (``y.to(fp32)``, ``r.squeeze(-1)``), position by
    position where every return agrees; positions without one are ``out<j>``."""
    import ast
    import textwrap
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(fn)))
    except (OSError, TypeError, SyntaxError, IndentationError):
        return None
    defs = [n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    if not defs:
        return None

    glob = getattr(fn, "__globals__", {})

    def base(e):
        # a method chain's receiver (y.to(fp32), r.squeeze(-1)[0]); not a function's result
        # (f(x), no.where(...): the name is a module's or a function's)
        while True:
            if isinstance(e, ast.Call):
                if not isinstance(e.func, ast.Attribute):
                    return None
                e = e.func.value
            elif isinstance(e, (ast.Attribute, ast.Subscript)):
                e = e.value
            else:
                break
        if not isinstance(e, ast.Name):
            return None
        bound = glob.get(e.id)
        return None if inspect.ismodule(bound) or callable(bound) else e.id

    def returns(node):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.Return) and child.value is not None:
                yield child.value
            elif not isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
                yield from returns(child)

    found = None
    for value in returns(defs[0]):
        elts = value.elts if isinstance(value, ast.Tuple) else [value]
        names = [base(e) for e in elts]
        if found is None:
            found = names
        elif len(found) != len(names):
            return None
        else:
            found = [a if a == b else None for a, b in zip(found, names)]
    if not found:
        return None
    if len(found) == 1:
        return (found[0] or "y",)
    out = [n if n is not None else f"out{j}" for j, n in enumerate(found)]
    return tuple(out) if len(set(out)) == len(out) else None


def torch_tensor_type():
    import torch
    return torch.Tensor


def reference(fn=None, *, outputs=None, params=None):
    """Mark a function as a reference program: ``@no.reference``, or
    ``@no.reference(outputs=("y", "rstd"), params={"casting": ("llama", "gemma")})`` to name
    its outputs and declare the values a parameter may take."""
    if fn is None:
        return lambda f: reference(f, outputs=outputs, params=params)
    if isinstance(fn, Reference):
        if outputs is None and params is None:
            return fn
        return Reference(fn.fn, outputs if outputs is not None else fn.output_names, params)
    return Reference(fn, outputs, params)


# Other arithmetics of the language (the emulator's concrete kernel-like execution)
# register themselves here: tensor type -> module implementing the functions below.
_ARITHMETICS: dict = {}


def register_arithmetic(tensor_type: type, implementation) -> None:
    """Run the language's functions on values of ``tensor_type`` with ``implementation``
    (a module defining sum, mean, ..., apply, div_rn, like ``numoracle.calculus.ops``)."""
    _ARITHMETICS[tensor_type] = implementation


def _impl(x):
    from .calculus.tracked import Tracked
    if isinstance(x, Tracked):
        from .calculus import ops
        return ops
    for tensor_type, implementation in _ARITHMETICS.items():
        if isinstance(x, tensor_type):
            return implementation
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


# torch's keyword spellings, which the language spells differently
_TORCH_KEYWORDS = {"dim": "axis", "keepdim": "keepdims", "dtype": "acc", "out": None, "input": None}


def _torch_keywords(fn: str, kw: dict) -> None:
    """Raise for keywords the function does not take, pointing from torch's spelling to ours."""
    if not kw:
        return
    hints = []
    for k in kw:
        ours = _TORCH_KEYWORDS.get(k)
        if ours == "acc":
            hints.append(f"{k}= -> acc= (the accumulation format; or cast with x.to(fmt) first)")
        elif ours:
            hints.append(f"{k}= -> {ours}=")
        else:
            hints.append(f"{k}= is not a keyword of no.{fn}")
    raise LanguageMisuse(f"no.{fn}() got keyword(s) {sorted(kw)}: " + "; ".join(hints)
                          + f" (torch's spellings differ: no.{fn}(x, axis=-1, keepdims=True)).")


# ---- reductions and products
def sum(x, axis=-1, keepdims=False, *, order="any", acc=None, ftz=False, **torch_style):
    """Sum along ``axis``, accumulating in ``acc`` (default: x's format) under the
    order model ``order``: "any", "sequential", "tree", or an int depth.  ``ftz=True``:
    the additions may flush subnormal terms and results to zero, as fp32 atomic adds do
    on NVIDIA GPUs (a row split over programs whose partials ``tl.atomic_add`` sums)."""
    _torch_keywords("sum", torch_style)
    return _impl(x).sum(x, axis, keepdims, order, acc, ftz)


def cumsum(x, axis=-1, *, order="any", acc=None, **torch_style):
    """Inclusive prefix sums along ``axis`` (``tl.cumsum``), accumulating in ``acc``
    (default: x's format): element j is the sum of the terms up to it under the order model
    ``order`` ("any", the default, covers every scan tree; "sequential", "tree", or an int
    depth claim more about the kernel)."""
    _torch_keywords("cumsum", torch_style)
    return _impl(x).cumsum(x, axis, order, acc)


def mean(x, axis=-1, keepdims=False, *, order="any", acc=None, **torch_style):
    """``sum(x, axis, order=order, acc=acc)`` divided by the length n of ``axis``: the
    quotient's rounding plus the library division's error, which also covers a kernel that
    multiplies by a rounded 1/n instead of dividing."""
    _torch_keywords("mean", torch_style)
    return _impl(x).mean(x, axis, keepdims, order, acc)


def max(x, axis=-1, keepdims=False, **torch_style):
    """The largest value along ``axis`` (``tl.max``): exact, no rounding site.  For the
    elementwise maximum of two values use ``maximum``."""
    _torch_keywords("max", torch_style)
    _not_elementwise("max", "maximum", axis)
    return _impl(x).max(x, axis, keepdims)


def min(x, axis=-1, keepdims=False, **torch_style):
    """The smallest value along ``axis`` (``tl.min``): exact.  Elementwise: ``minimum``."""
    _torch_keywords("min", torch_style)
    _not_elementwise("min", "minimum", axis)
    return _impl(x).min(x, axis, keepdims)


def _not_elementwise(fn: str, elementwise: str, axis) -> None:
    # no.max(x, 0.0) reads as Python's max(x, 0.0) but would reduce along axis 0.0
    if not isinstance(axis, int) or isinstance(axis, bool):
        raise LanguageMisuse(f"no.{fn}(x, {axis!r}): the second argument of no.{fn} is the axis it "
                              f"reduces along (an int); for the elementwise {fn} of two values write "
                              f"no.{elementwise}(x, {axis!r}).")


def argmax(x, axis=-1, keepdims=False, *, ties="first", **torch_style):
    """The index of the largest value along ``axis`` (``tl.argmax``, ``torch.argmax``): an
    index output.  A kernel's stored index is accepted when values inside the enclosures
    make it the largest: in a near tie, any index that can win.  ``ties="first"``: among
    equal values the lowest index wins, as torch.argmax and tl.argmax promise; ``"any"``: the
    kernel does not promise which.  Read the values at the chosen indices with
    ``no.gather(x, idx)``: the verdict judges them at the kernel's stored indices
    (docs/design.md §4.7)."""
    _torch_keywords("argmax", torch_style)
    _not_elementwise("argmax", "maximum", axis)
    return _impl(x).argmax(x, axis, keepdims, ties)


def argmin(x, axis=-1, keepdims=False, *, ties="first", **torch_style):
    """The index of the smallest value along ``axis`` (``tl.argmin``): ``argmax``'s rules."""
    _torch_keywords("argmin", torch_style)
    _not_elementwise("argmin", "minimum", axis)
    return _impl(x).argmin(x, axis, keepdims, ties)


def topk(x, k, axis=-1, *, largest=True, sorted=True, **torch_style):
    """``(values, indices)`` of the k largest values along ``axis`` (the smallest where
    ``largest=False``), as ``torch.topk``; ``sorted=True``: in order of value.  The indices
    are an index output, accepted when values inside the enclosures make them the top k
    (in that order where sorted; the order among equal values is not promised); the values
    are judged at the kernel's stored indices (docs/design.md §4.7)."""
    _torch_keywords("topk", torch_style)
    return _impl(x).topk(x, k, axis, largest, sorted)


def logsumexp(x, axis=-1, keepdims=False, *, exp="exp2", order="any", **torch_style):
    """``m + log(sum(e))`` along ``axis`` with m the row maximum, in x's format, the sum under
    ``order``; ``e`` is ``exp2((x - m) * log2(e))`` (``exp="exp2"``, as Liger's kernels
    compute it) or ``exp(x - m)`` (``exp="exp"``).  Write the steps out instead where a
    kernel computes it another way (an online maximum, another base)."""
    _torch_keywords("logsumexp", torch_style)
    return _impl(x).logsumexp(x, axis, keepdims, exp, order)


def matmul(a, b, *, acc=None, order="any", ftz=False, input_precision="ieee"):
    """``a @ b`` for a of shape [..., M, K] and b of shape [..., K, N] (batch dimensions
    broadcast as in ``torch.matmul``; one program's heads, say), as ``tl.dot``: products
    exact where both formats are narrow enough for ``acc`` (bf16, fp16, fp8 into fp32),
    otherwise each rounded; accumulated in ``acc`` (default fp32) under ``order`` over K
    ("any" also covers a K loop that adds each tile's dot into an accumulator, and split-K).
    One operand may be a float torch tensor computed beside the program (a constant matrix),
    exact in its dtype's format.  ``ftz=True``: the accumulation may flush subnormal products
    and partial sums to zero, as split-K's fp32 ``tl.atomic_add`` of the partial tiles does on
    NVIDIA GPUs (``tl.dot`` itself keeps them).  ``input_precision="tf32"``: the dot reads fp32
    operands as TF32, as ``tl.dot`` does by default on fp32 (an H100 drops their low 13 bits; the
    interpreter keeps fp32); say it where the kernel's dot does, ``"ieee"`` (the default) where it
    keeps fp32.  The result is in ``acc``: round it to the stored format with ``.to``."""
    return _impl(_first(a, b)).matmul(a, b, acc, order, ftz=ftz, input_precision=input_precision)


# ---- selection
def where(cond, a, b):
    """``tl.where``: a where ``cond`` holds, else b, per element; ``cond`` a comparison of
    tracked values (``x > 0``, combined with ``&``, ``|``, ``~``) or a boolean torch tensor.
    Where the comparison is decided the element is the selected branch, with that branch's
    certificate only; where the kernel's values may compare the other way it may be either,
    and its region covers both."""
    return _impl(_first(a, b)).where(cond, a, b)


def maximum(a, b):
    """Elementwise maximum of two values (``tl.maximum``), exact: ``where(a >= b, a, b)``."""
    return _impl(_first(a, b)).maximum(a, b)


def minimum(a, b):
    """Elementwise minimum of two values (``tl.minimum``), exact: ``where(a <= b, a, b)``."""
    return _impl(_first(a, b)).minimum(a, b)


def clamp(x, lo=None, hi=None):
    """``minimum(maximum(x, lo), hi)``, either bound optional; exact."""
    return _impl(x).clamp(x, lo, hi)


def full_like(x, value, fmt=None):
    """A constant tensor of x's shape in ``fmt`` (default: x's format), as ``tl.full``: the
    constant rounded once to the format, exact from there on, independent of x's values."""
    return _impl(x).full_like(x, value, fmt)


def zeros_like(x, fmt=None):
    """``full_like(x, 0.0, fmt)``."""
    return full_like(x, 0.0, fmt)


def ones_like(x, fmt=None):
    """``full_like(x, 1.0, fmt)``."""
    return full_like(x, 1.0, fmt)


def gather(x, index, axis=-1):
    """The elements of x at ``index`` (an integer torch tensor, or the indices of
    ``no.argmax``/``no.topk``) along ``axis``, as a kernel's indexed load (a label's logit,
    say): exact.  An index with one dimension fewer than x picks one element per row."""
    return _impl(x).gather(x, index, axis)


def cat(xs, axis=-1):
    """The tracked tensors ``xs`` joined along ``axis``; parts in different formats are first
    converted to their common promoted format."""
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


# ---- block-scaled quantizers (docs/design.md §4.5)
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
