"""Capture a launcher's kernel launches and host steps without running any kernel.

The user's launcher (the Python function that allocates outputs and calls ``kernel[grid](...)``)
runs once on example inputs.  Every ``@triton.jit`` launch is recorded (its Python function,
arguments, constexprs and compile options) instead of executed, so no GPU and no interpreter is
needed; outputs of kernels hold whatever the allocator left there.  An autotuned kernel launches
one of its configurations (after its own pruning), chosen by index: a capture runs the launcher
under one choice, and :func:`capture` tells how many there were.

The torch operations the launcher performs on data between launches (a host sum of per-program
partial rows, a cast of the result, a GEMM done with ``torch.matmul``) are recorded as host
steps, since they are part of the precision plan too.  Storage identity (the address of a
tensor's storage, kept alive until the capture ends) links launches and host steps into a data
flow: which event last wrote the storage a later event reads.
"""

from __future__ import annotations

import contextlib
import inspect
import math
import os
import sys
from dataclasses import dataclass, field

import torch
from torch.overrides import TorchFunctionMode, resolve_name

from ..errors import InvalidArgument
from . import _triton as T

_HERE = os.path.dirname(os.path.abspath(__file__))


@dataclass
class Arg:
    """One argument of a launch: a pointer (tensor) or a scalar."""
    name: str
    kind: str                  # "pointer" | "scalar" | "constexpr"
    value: object = None       # scalars and constexprs
    storage: int | None = None
    dtype: str | None = None
    shape: tuple | None = None


@dataclass(eq=False)
class Launch:
    seq: int
    kernel: object             # the @triton.jit object (compiled or interpreted)
    name: str
    args: list                 # [Arg] in parameter order
    signature: dict
    constexprs: dict
    divisible: tuple           # parameter indices that get tt.divisibility=16
    options: dict              # compile options given at launch (num_warps, ...)
    grid: object
    stack: tuple               # launch site: ((file, line, function), ...) outermost first
    config: tuple | None = None   # (index, count) of an autotuned launch

    def key(self) -> tuple:
        """What makes two launches one compiled kernel."""
        cx = tuple(sorted((k, repr(v)) for k, v in self.constexprs.items()))
        return (id(self.kernel.fn), tuple(sorted(self.signature.items())), cx, self.divisible,
                tuple(sorted(self.options.items())))

    def arg(self, name: str) -> Arg:
        return next(a for a in self.args if a.name == name)


@dataclass(eq=False)
class HostStep:
    """A torch operation of the launcher on data (not on a fresh buffer)."""
    seq: int
    op: str                    # torch's name: "Tensor.to", "torch.sum", ...
    inputs: list               # storages of the tensor inputs
    input_dtypes: list
    output: int | None         # storage of the (first) tensor result
    out_dtype: str | None
    detail: dict
    stack: tuple


@dataclass
class Capture:
    launches: list = field(default_factory=list)
    host_steps: list = field(default_factory=list)
    inputs: dict = field(default_factory=dict)      # storage -> input index
    outputs: list = field(default_factory=list)     # [(storage, dtype, shape)] in return order
    configs: int = 1                                # most configurations any autotuned launch had
    error: str | None = None                        # the launcher raised after some launches
    _keep: list = field(default_factory=list, repr=False)

    def events(self) -> list:
        return sorted(self.launches + self.host_steps, key=lambda e: e.seq)

    def launch_values(self) -> dict:
        """The launches' constexprs and compile options ({name: value}, a list where launches
        differ): what a reference's ``no.launch()`` parameters read, as the runner records it."""
        from ..reference import note_launch_value
        found: dict = {}
        for launch in self.launches:
            declared = {name for name, is_cx, *_ in T.parameters(launch.kernel) if is_cx}
            for name, value in launch.constexprs.items():
                if name in declared:            # not an integer argument specialized to a constant
                    note_launch_value(found, name, value)
            for name, value in launch.options.items():
                note_launch_value(found, name, value)
        return found


def storage_of(t: torch.Tensor) -> int:
    return t.untyped_storage().data_ptr()


def _dtype(t) -> str:
    return str(t.dtype).replace("torch.", "")


def _stack() -> tuple:
    """Frames of the launcher (outermost first), leaving out this package, Triton and torch."""
    frames = []
    f = sys._getframe(2)
    while f is not None:
        fn = os.path.abspath(f.f_code.co_filename)
        if not (fn.startswith(_HERE) or f"{os.sep}triton{os.sep}" in fn or f"{os.sep}torch{os.sep}" in fn):
            frames.append((f.f_code.co_filename, f.f_lineno, f.f_code.co_name))
        f = f.f_back
    return tuple(reversed(frames))


# --------------------------------------------------------------------------- launches

class _Recorder:
    def __init__(self, cap: Capture, config_index: int):
        self.cap = cap
        self.config_index = config_index
        self.seq = 0

    def next_seq(self) -> int:
        self.seq += 1
        return self.seq

    def launch(self, kernel, args, kwargs, grid, config=None):
        fn = T.python_function(kernel)
        options = {k: kwargs.pop(k) for k in list(kwargs) if k in T.OPTION_KEYS}
        for k in ("warmup", "stream", "device"):
            kwargs.pop(k, None)
        sig = inspect.signature(fn)
        try:
            bound = sig.bind(*args, **kwargs)
        except TypeError as exc:
            raise InvalidArgument(f"the launch of {fn.__name__} does not match its parameters: {exc}.") from None
        bound.apply_defaults()
        signature, constexprs, divisible, recorded = {}, {}, [], []
        for i, (name, is_cx, dns, dnsa, _default) in enumerate(T.parameters(kernel)):
            v = bound.arguments[name]
            if is_cx:
                import triton.language as tl
                v = v.value if isinstance(v, tl.constexpr) else v
                signature[name] = T.CONSTEXPR
                constexprs[name] = v
                recorded.append(Arg(name, "constexpr", value=v))
                continue
            ty, div, cval = T.arg_type(v, specialize=not dns, align=not dnsa)
            signature[name] = ty
            if ty == T.CONSTEXPR:
                constexprs[name] = cval
                recorded.append(Arg(name, "constexpr", value=cval))
                continue
            if div:
                divisible.append(i)
            if T.is_tensor_like(v):
                self.cap._keep.append(v)
                recorded.append(Arg(name, "pointer", storage=storage_of(v), dtype=_dtype(v),
                                    shape=tuple(v.shape)))
            else:
                recorded.append(Arg(name, "scalar", value=v))
        if callable(grid):
            # kernel[lambda meta: ...]: the grid Triton would launch, from the bound arguments and
            # the configuration's constexprs (the listing and the loop trip counts read it)
            try:
                grid = tuple(grid({**bound.arguments, **constexprs}))
            except Exception:          # noqa: BLE001 - a grid function this capture cannot call: kept as given
                pass
        self.cap.launches.append(Launch(self.next_seq(), kernel, fn.__name__, recorded, signature, constexprs,
                                        tuple(divisible), options, grid, _stack(), config))

    def autotuned(self, tuner, args, kwargs, grid=None):
        """An autotuned launch: its configurations after its own pruning, one chosen by index."""
        tuner.nargs = dict(zip(tuner.arg_names, args))
        try:
            configs = list(tuner.prune_configs(dict(kwargs))) if len(tuner.configs) > 1 else list(tuner.configs)
        except Exception:          # a pruning function that needs a GPU: every configuration
            configs = list(tuner.configs)
        finally:
            tuner.nargs = None
        self.cap.configs = max(self.cap.configs, len(configs))
        k = min(self.config_index, len(configs) - 1)
        cfg = configs[k]
        full = dict(kwargs, **cfg.all_kwargs())
        if cfg.pre_hook is not None:
            cfg.pre_hook({**dict(zip(tuner.arg_names, args)), **full})
        inner = tuner.fn
        self._dispatch(inner, args, full, grid, (k, len(configs)))

    def _dispatch(self, obj, args, kwargs, grid, config):
        cls = T.classes()
        if cls.autotuner is not None and isinstance(obj, cls.autotuner):
            return self.autotuned(obj, args, kwargs, grid)
        if cls.heuristics is not None and isinstance(obj, cls.heuristics):
            for v, heur in obj.values.items():
                kwargs[v] = heur({**dict(zip(obj.arg_names, args)), **kwargs})
            return self._dispatch(obj.fn, args, kwargs, grid, config)
        return self.launch(obj, list(args), dict(kwargs), grid, config)


@contextlib.contextmanager
def _launches_recorded(rec: _Recorder):
    """Every ``.run`` of a jit, interpreted or autotuned kernel records instead of running."""
    cls = T.classes()
    targets = [c for c in (cls.jit, cls.interpreted) if c is not None]
    saved = {c: c.__dict__.get("run") for c in targets}
    saved_tuner = cls.autotuner.__dict__.get("run") if cls.autotuner is not None else None

    def run(self, *args, grid=None, warmup=False, **kwargs):
        if warmup:
            return None
        rec.launch(self, list(args), dict(kwargs), grid)
        return None

    def run_tuned(self, *args, **kwargs):
        kwargs.pop("warmup", None)
        grid = kwargs.pop("grid", None)
        rec.autotuned(self, args, kwargs, grid)
        return None

    try:
        for c in targets:
            c.run = run
        if cls.autotuner is not None:
            cls.autotuner.run = run_tuned
        yield
    finally:
        for c, orig in saved.items():
            if orig is None:
                del c.run
            else:
                c.run = orig
        if cls.autotuner is not None:
            if saved_tuner is None:
                del cls.autotuner.run
            else:
                cls.autotuner.run = saved_tuner


# --------------------------------------------------------------------------- host steps

# Operations that move or view data without changing a value (the result, when it is a new
# storage, holds the input's values).
_LAYOUT = {"contiguous", "clone", "reshape", "view", "flatten", "t", "transpose", "permute", "expand",
           "__getitem__", "squeeze", "unsqueeze", "detach", "narrow", "select", "split", "chunk",
           "expand_as", "view_as", "reshape_as", "movedim", "unflatten", "cat", "stack", "index_select",
           "gather", "masked_fill", "where", "__setitem__", "requires_grad_", "cpu", "cuda", "numel",
           "dim", "size", "stride", "data_ptr", "untyped_storage", "element_size", "item", "tolist", "__len__",
           "__bool__", "__int__", "__float__", "__index__", "__format__", "__repr__", "is_contiguous",
           "storage_offset", "__get__", "shape", "dtype", "device", "is_floating_point", "__eq__", "__ne__",
           "__lt__", "__le__", "__gt__", "__ge__", "eq", "ne", "lt", "le", "gt", "ge", "any", "all", "abs",
           "neg", "__neg__", "clamp", "clamp_min", "clamp_max", "maximum", "minimum", "amax", "amin", "max", "min",
           "argmax", "argmin", "sign", "isfinite", "isnan", "isinf", "logical_and", "logical_or",
           "logical_not", "__and__", "__or__", "__invert__", "sort", "topk", "nonzero"}
# narrowing / widening conversions
# new buffers: their values are not data
_FACTORIES = {"zeros_like", "empty_like", "ones_like", "full_like", "new_zeros", "new_empty", "new_full",
              "new_ones", "zeros", "empty", "ones", "full", "empty_strided", "arange", "rand", "randn"}
_FILLS = {"fill_", "zero_"}
_CASTS = {"to", "float", "half", "bfloat16", "double", "type", "type_as", "copy_"}
_SUMS = {"sum", "mean", "cumsum", "nansum"}
_DOTS = {"matmul", "mm", "bmm", "addmm", "__matmul__", "baddbmm", "linear", "einsum", "dot", "mv"}
_ARITH = {"add", "sub", "mul", "div", "true_divide", "__add__", "__radd__", "__sub__", "__rsub__",
          "__mul__", "__rmul__", "__truediv__", "__rtruediv__", "__iadd__", "__isub__", "__imul__",
          "__itruediv__", "add_", "sub_", "mul_", "div_", "addcmul", "addcdiv", "lerp", "rsub", "pow",
          "__pow__", "square", "reciprocal"}
_MATH = {"exp", "exp2", "log", "log2", "log1p", "expm1", "rsqrt", "sqrt", "sigmoid", "tanh", "erf",
         "sin", "cos", "logsumexp", "softmax", "log_softmax"}


def host_kind(op: str) -> str | None:
    tail = op.rsplit(".", 1)[-1]
    if tail in _FACTORIES:
        return "factory"
    if tail in _FILLS:
        return "fill"
    if tail in _CASTS:
        return "cast"
    if tail in _SUMS:
        return "sum"
    if tail in _DOTS:
        return "dot"
    if tail in _ARITH:
        return "arith"
    if tail in _MATH:
        return "math"
    if tail in _LAYOUT:
        return "layout"
    return "other"


def _tensors(x):
    if isinstance(x, torch.Tensor):
        yield x
    elif isinstance(x, (list, tuple)):
        for y in x:
            yield from _tensors(y)
    elif isinstance(x, dict):
        for y in x.values():
            yield from _tensors(y)


class _HostRecorder(TorchFunctionMode):
    def __init__(self, rec: _Recorder):
        super().__init__()
        self.rec = rec
        self.tracked: set = set()

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        try:
            self._note(func, args, kwargs, out)
        except Exception:            # never let bookkeeping break the user's launcher
            pass
        return out

    def _note(self, func, args, kwargs, out):
        ins = [t for t in _tensors((args, kwargs)) if t.is_floating_point()]
        data = [t for t in ins if storage_of(t) in self.tracked]
        if not data:
            return
        outs = [t for t in _tensors(out) if isinstance(t, torch.Tensor)]
        try:
            op = resolve_name(func) or getattr(func, "__name__", str(func))
        except Exception:
            op = getattr(func, "__name__", str(func))
        kind = host_kind(op)
        if kind == "factory":
            return
        dst = None
        if op.endswith("copy_") and args:
            dst = args[0]
            outs = [dst]
        float_outs = [t for t in outs if t.is_floating_point()]
        cap = self.rec.cap
        for t in float_outs:
            cap._keep.append(t)
            self.tracked.add(storage_of(t))
        if kind == "layout" and all(storage_of(t) in {storage_of(i) for i in ins} for t in float_outs):
            return                       # a view: the storage (and its writer) is the same
        if not float_outs:
            return
        detail = {}
        if kind == "sum":
            src = data[0]
            dim = kwargs.get("dim", args[1] if len(args) > 1 and not isinstance(args[1], torch.dtype) else None)
            dims = [dim] if isinstance(dim, int) else (list(dim) if dim is not None else list(range(src.dim())))
            detail["n"] = int(math.prod(src.shape[d] for d in dims)) if src.dim() else 1
            detail["acc"] = _dtype(float_outs[0])
        if kind == "dot":
            detail["k"] = int(data[0].shape[-1]) if data[0].dim() else 1
        cap.host_steps.append(HostStep(self.rec.next_seq(), op, [storage_of(t) for t in ins],
                                       [_dtype(t) for t in ins], storage_of(float_outs[0]),
                                       _dtype(float_outs[0]), detail, _stack()))


# --------------------------------------------------------------------------- entry point

def capture(launcher, inputs, params, *, config: int = 0) -> Capture:
    """Run ``launcher(*inputs, **params)`` with every kernel launch recorded instead of run.
    ``config`` picks the configuration of autotuned kernels (an index into each one's pruned
    configurations, clamped to its count; ``Capture.configs`` tells the largest count)."""
    cap = Capture()
    rec = _Recorder(cap, config)
    host = _HostRecorder(rec)
    for i, x in enumerate(inputs):
        if isinstance(x, torch.Tensor):
            cap._keep.append(x)
            cap.inputs.setdefault(storage_of(x), i)
            if x.is_floating_point():
                host.tracked.add(storage_of(x))
    out = None
    with _launches_recorded(rec):
        _track_launch_outputs(rec, host)
        try:
            with host:
                out = launcher(*inputs, **params)
        except Exception as exc:          # noqa: BLE001 - reported with the launches made so far
            if not cap.launches:
                raise InvalidArgument(f"the kernel's launcher raised before launching any kernel: "
                                      f"{type(exc).__name__}: {exc}") from exc
            cap.error = f"{type(exc).__name__}: {exc}"
        finally:
            _untrack(rec)
    outs = list(out) if isinstance(out, (tuple, list)) else ([out] if out is not None else [])
    for t in outs:
        if isinstance(t, torch.Tensor):
            cap._keep.append(t)
            cap.outputs.append((storage_of(t), _dtype(t), tuple(t.shape)))
        else:
            cap.outputs.append((None, type(t).__name__, ()))
    return cap


def _track_launch_outputs(rec: _Recorder, host: _HostRecorder):
    """After each launch its pointer arguments hold data (the kernel may have written them)."""
    orig = rec.launch

    def launch(*a, **k):
        orig(*a, **k)
        for arg in rec.cap.launches[-1].args:
            if arg.kind == "pointer" and arg.dtype and arg.dtype.startswith(("float", "bfloat")):
                host.tracked.add(arg.storage)
    rec.launch = launch
    rec._orig_launch = orig


def _untrack(rec: _Recorder):
    if hasattr(rec, "_orig_launch"):
        rec.launch = rec._orig_launch
