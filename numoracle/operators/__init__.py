"""The operator registry: ``no.operators.names()``, ``no.operators.get(name)``,
``no.operators.resolve(op)``.

An operator (``Operator``, docs/design.md §3.1) bundles a reference program, kernels
(``"correct"`` plus behaviour-preserving variants; each takes the reference's inputs as
torch tensors plus ``**params`` and returns the outputs the reference returns), its input
domain and an ``example(seed, ...)``.  The built-in ones are registered below and by the
``ops_*`` modules; yours are found by object, by ``package.module:attribute``, by
``register``, or through the entry-point group ``numoracle.operators`` that a package can
publish them in (each entry point names an Operator, or a module or list of them).
Kernels import Triton lazily.
"""

from __future__ import annotations

import torch

from ..errors import InvalidArgument
from ..families import fill
from . import references as R


from .operator import UPSTREAM_KERNELS as UPSTREAM_KERNELS
from .operator import Domain as Domain
from .operator import Operator as Operator
from .operator import load_kernel as load_kernel
from .operator import operator as operator
from .operator import pick_outputs as pick_outputs

_K = "numoracle.operators.kernels."


def _rows(seed, dtype, family, rows, cols, k=0):
    return fill((rows, cols), family, seed, scale_exp=k, dtype=dtype)


def _weight(seed, dtype, cols, mean=1.0):
    return (fill((cols,), "normal", seed, dtype=torch.float32) * 0.1 + mean).to(dtype)


def _ex_rms(seed, dtype, family, rows, cols):
    return (_rows(seed, dtype, family, rows, cols), _weight(seed + 1, dtype, cols)), {"eps": 1e-6}


def _ex_ln(seed, dtype, family, rows, cols):
    return ((_rows(seed, dtype, family, rows, cols), _weight(seed + 1, dtype, cols),
             _weight(seed + 2, dtype, cols, mean=0.0)), {"eps": 1e-5})


def _ex_x(seed, dtype, family, rows, cols):
    return (_rows(seed, dtype, family, rows, cols),), {}


def _ex_ab(seed, dtype, family, rows, cols):
    return (_rows(seed, dtype, family, rows, cols), _rows(seed + 7, dtype, family, rows, cols)), {}


def _ex_ce(seed, dtype, family, rows, cols):
    labels = torch.randint(0, cols, (rows,), generator=torch.Generator().manual_seed(seed))
    return (_rows(seed, dtype, family, rows, cols), labels), {}


REGISTRY: dict[str, Operator] = {}


def _register(op: Operator) -> None:
    REGISTRY[op.name] = op


_register(Operator("rms_norm", R.rms_norm, {
    "correct": _K + "rms_norm:rms_norm", "1oversqrt": _K + "rms_norm:rms_norm_1oversqrt",
    "two_rows": _K + "rms_norm:rms_norm_two_rows", "chunked": _K + "rms_norm:rms_norm_chunked"}, _ex_rms,
    domain=Domain(params={"casting": ("llama", "gemma", "none"), "offset": (0.0, 1.0)}),
    faulty={"offset_dropped": _K + "faulty_forward:rms_norm_offset_dropped",
            "unrounded_multiply": _K + "faulty_forward:rms_norm_unrounded_multiply"}, source='liger'))
_register(Operator("layer_norm", R.layer_norm_fwd, {
    "correct": _K + "layer_norm:layer_norm", "1oversqrt": _K + "layer_norm:layer_norm_1oversqrt",
    "chunked": _K + "layer_norm:layer_norm_chunked"}, _ex_ln,
    faulty={"padded_variance": _K + "faulty_forward:layer_norm_padded_variance"}, source='liger'))
_register(Operator("softmax", R.softmax, {
    "correct": _K + "softmax:softmax", "exp2": _K + "softmax:softmax_exp2",
    "one_warp": _K + "softmax:softmax_one_warp"}, _ex_x, source='liger'))
_register(Operator("swiglu", R.swiglu, {
    "correct": _K + "swiglu:swiglu", "explicit_sigmoid": _K + "swiglu:swiglu_explicit_sigmoid",
    "flat": _K + "swiglu:swiglu_flat"}, _ex_ab, source='liger'))
# geglu_sigmoid_form (tanh as 2*sigmoid(2z) - 1) is not registered as a variant: on the
# H200 it was rejected (confirmed) for fp32 outputs, because the approximate exp inside
# sigmoid loses tanh's relative accuracy near 0 - a different precision plan, not a
# behaviour-preserving change.
_register(Operator("geglu", R.geglu, {
    "correct": _K + "geglu:geglu", "one_warp": _K + "geglu:geglu_one_warp",
    "wide_block": _K + "geglu:geglu_wide_block"}, _ex_ab, source='liger'))
_register(Operator("cross_entropy", R.cross_entropy, {
    "correct": _K + "cross_entropy:cross_entropy:0",
    "two_pass": _K + "cross_entropy:cross_entropy_two_pass:0",
    "one_warp": _K + "cross_entropy:cross_entropy_one_warp:0"}, _ex_ce,
    domain=Domain(params={"reduction": ("mean", "sum", "none")}),
    faulty={"always_divides": _K + "faulty_forward:cross_entropy_always_divides:0",
            "storage_format": _K + "faulty_forward:cross_entropy_storage_format:0"}, source='liger'))


def _ex_kl(seed, dtype, family, rows, cols):
    logits_p = fill((rows, cols), family, seed, dtype=torch.float32)
    logits_t = fill((rows, cols), family, seed + 5, dtype=torch.float32)
    # log-probabilities below the format's range (format_boundary logits) are kept at its edge,
    # not stored as -inf: numoracle refuses non-finite inputs, and the edge is what the group tests
    y_pred = torch.log_softmax(logits_p.double(), dim=-1).clamp(min=-torch.finfo(dtype).max).to(dtype)
    y_true = torch.softmax(logits_t.double(), dim=-1).to(dtype)
    return (y_pred, y_true), {}


_register(Operator("kl_div", R.kl_div, {
    "correct": _K + "kl_div:kl_div", "chunked": _K + "kl_div:kl_div_chunked",
    "one_warp": _K + "kl_div:kl_div_one_warp"}, _ex_kl,
    domain=Domain(formats=("bf16", "fp32"), params={"reduction": ("batchmean", "sum", "mean", "none")}),
    faulty={"no_eps_clamp": _K + "kl_div:kl_div_unclamped"}, source='liger'))


# Further operators register themselves from their own modules (one per source
# library / family), so the registry file does not grow with every operator.
_EXTENSIONS = ("ops_liger", "ops_unsloth", "ops_vllm", "ops_backward", "upstream_liger", "ops_mx")


def _load_extensions() -> None:
    import importlib.util
    for name in _EXTENSIONS:
        if importlib.util.find_spec(f"{__name__}.{name}") is not None:
            importlib.import_module(f"{__name__}.{name}")


_load_extensions()


ENTRY_POINT_GROUP = "numoracle.operators"
_entry_points_loaded = []


def _operators_in(obj) -> list:
    if isinstance(obj, Operator):
        return [obj]
    if isinstance(obj, (list, tuple)):
        return [o for o in obj if isinstance(o, Operator)]
    if hasattr(obj, "__dict__"):             # a module
        return [o for o in vars(obj).values() if isinstance(o, Operator)]
    return []


def _load_entry_points() -> None:
    """Register the operators that installed packages publish (once per process)."""
    if _entry_points_loaded:
        return
    _entry_points_loaded.append(True)
    from importlib.metadata import entry_points
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        try:
            found = _operators_in(ep.load())
        except Exception as exc:             # a broken plug-in must not break the registry
            import warnings
            warnings.warn(f"numoracle: the operators of entry point {ep.name!r} ({ep.value}) cannot be loaded: "
                          f"{type(exc).__name__}: {exc}", RuntimeWarning, stacklevel=2)
            continue
        for op in found:
            if op.name not in REGISTRY:
                op._spec = f"{ep.value}" if ":" in ep.value and len(found) == 1 else op.name
                REGISTRY[op.name] = op


def register(op: Operator) -> Operator:
    """Make ``op`` known by its name in this process (``get``, the CLI's OP)."""
    if not isinstance(op, Operator):
        raise InvalidArgument(f"register({op!r}): expected a numoracle.Operator.")
    REGISTRY[op.name] = op
    return op


def names() -> list[str]:
    _load_entry_points()
    return sorted(REGISTRY)


def get(name: str) -> Operator:
    if name not in REGISTRY:
        _load_entry_points()
    try:
        return REGISTRY[name]
    except KeyError:
        raise InvalidArgument(f"unknown operator {name!r}; registered: {names()}, or give package.module:attribute "
                              f"naming your own numoracle.Operator.") from None


def resolve(op) -> Operator:
    """The Operator ``op`` names: an Operator as it is, a registered (or published) name, or
    ``package.module:attribute`` importable from the current directory."""
    if isinstance(op, Operator):
        return op
    if not isinstance(op, str) or not op:
        raise InvalidArgument(f"operator {op!r}: expected a numoracle.Operator, a registered name or "
                              f"package.module:attribute.")
    if ":" not in op:
        return get(op)
    mod, _, attr = op.partition(":")
    import os
    import sys
    cwd = os.getcwd()
    if cwd not in sys.path:
        sys.path.insert(0, cwd)
    from .choose import _import
    module = _import(op, mod, cwd, label=f"operator {op!r}", expected="package.module:attribute")
    try:
        obj = getattr(module, attr)
    except AttributeError:
        raise InvalidArgument(f"operator {op!r}: {mod} has no attribute {attr!r}; expected package.module:attribute "
                              f"naming a numoracle.Operator.") from None
    if callable(obj) and not isinstance(obj, Operator):
        obj = obj()
    if not isinstance(obj, Operator):
        raise InvalidArgument(f"operator {op!r}: {mod}.{attr} is a {type(obj).__name__}, not a numoracle.Operator.")
    obj._spec = op
    return obj
