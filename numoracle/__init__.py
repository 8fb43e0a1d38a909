"""numoracle: per-element acceptance regions for low-precision GPU kernels.

    import numoracle as no
    v = no.check(program, outputs=y, inputs=(x, w), params={...})
"""

from . import formats as formats
from .check import assert_accepted as assert_accepted
from .check import check as check
from .check import check_modes as check_modes
from .check import evaluate as evaluate
from .errors import InvalidArgument as InvalidArgument
from .errors import NumoracleError as NumoracleError
from .errors import OracleViolation as OracleViolation
from .errors import TensorsChanged as TensorsChanged
from .errors import OutOfBounds as OutOfBounds
from .errors import Uncertified as Uncertified
from .reference import (
    Reference as Reference, argmax as argmax, argmin as argmin, cat as cat, clamp as clamp, cos as cos, cumsum as cumsum, div as div, div_rn as div_rn,
    erf as erf, exp as exp, exp2 as exp2, full_like as full_like, gather as gather, launch as launch,
    ones_like as ones_like,
    zeros_like as zeros_like, log as log, log2 as log2,
    logsumexp as logsumexp, matmul as matmul, max as max, maximum as maximum, mean as mean,
    min as min, mul as mul, minimum as minimum, quantize_group as quantize_group, reciprocal as reciprocal,
    quantize_mx as quantize_mx, quantize_nvfp4 as quantize_nvfp4, dequantize as dequantize,
    reference as reference, rsqrt as rsqrt,
    sigmoid as sigmoid, sin as sin, sqrt as sqrt, sqrt_rn as sqrt_rn, sum as sum, tanh as tanh,
    topk as topk, where as where,
)
from .config import settings as settings
from .verdict.verdict import Verdict as Verdict

__version__ = "0.1.0"

__all__ = [
    "formats", "check", "check_modes", "evaluate", "assert_accepted", "Verdict", "reference", "Reference", "launch",
    "settings",
    "NumoracleError", "InvalidArgument", "OracleViolation", "Uncertified", "TensorsChanged", "OutOfBounds",
    "sum", "cumsum", "mean", "max", "min", "logsumexp", "matmul", "where", "maximum", "minimum", "clamp",
    "full_like", "zeros_like", "ones_like", "gather", "argmax", "argmin", "topk", "cat", "exp", "exp2", "log", "log2", "rsqrt", "sqrt", "sqrt_rn", "sigmoid", "tanh",
    "erf", "sin", "cos", "reciprocal", "div", "mul", "div_rn", "quantize_group", "quantize_mx",
    "quantize_nvfp4", "dequantize", "operators", "Operator", "Domain", "operator",
]

# the operator declaration (docs/design.md §3.1), from the registry package on first use
_FROM_OPERATORS = ("Operator", "Domain", "operator")


def __getattr__(name):
    # the operator registry imports Triton kernels: load it on first use
    if name == "operators":
        import importlib
        return importlib.import_module(__name__ + ".operators")
    if name in _FROM_OPERATORS:
        import importlib
        return getattr(importlib.import_module(__name__ + ".operators"), name)
    raise AttributeError(f"module 'numoracle' has no attribute {name!r}")
