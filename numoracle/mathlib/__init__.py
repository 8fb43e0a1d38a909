"""Math-library profiles: how far each kernel math call may be from the exact
function, in fp32 ulps of the exact result (docs/design.md §5).

A profile is a JSON file beside this module.  Each function maps to an error
model ``ulps(x) = min(a + b*|x|, cap)`` (``b`` is zero except where the error
grows with the argument, e.g. ``tl.exp = ex2.approx(x*log2 e)``, and ``cap``,
where given, the largest error anywhere in the function's domain), measured by
``numoracle calibrate`` or taken from documented bounds, and records where and
how it was obtained.  The calculus reads profiles; it never writes them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

from ..errors import InvalidArgument

# the dot accumulation models a profile may name (MathProfile.dot)
DOTS = ("nearest", "tensor_core")

# exp(-inf) = exp2(-inf) = +0 exactly: IEEE 754-2019 §9.2.1 for the recommended functions, and
# NVIDIA's expf/exp2f and ex2.approx document the same; a masked logit (tl.where(mask, x, -inf))
# takes this path in every softmax written with -inf.  rsqrt(+inf) = +0 and sqrt(+inf) = +inf
# exactly (IEEE 754-2019 §9.2.1 and §5.4.1; PTX's rsqrt.approx and sqrt.approx document the same):
# the rstd of a row whose sum of squares overflowed
DEFINED = {"exp": ((-float("inf"), 0.0),), "exp2": ((-float("inf"), 0.0),),
           "rsqrt": ((float("inf"), 0.0),), "sqrt": ((float("inf"), float("inf")),),
           "sqrt_rn": ((float("inf"), float("inf")),)}

# The functions a reference program may call, and the kernel call they stand for.
FUNCTION_NAMES = (
    "exp", "exp2", "log", "log2", "rsqrt", "sqrt", "sqrt_rn", "recip", "div", "div_rn",
    "sigmoid", "tanh", "erf", "sin", "cos",
)


@dataclass(frozen=True)
class ErrorModel:
    a: float                   # ulps at x = 0
    b: float = 0.0             # extra ulps per unit |x|
    cap: float | None = None   # never more ulps than this, whatever |x| (a growing error levels off)

    def __post_init__(self):
        if self.cap is not None and not (self.b and self.a <= self.cap):
            raise InvalidArgument(f"error model a={self.a}, b={self.b}, cap={self.cap}: a cap bounds a growing "
                                  f"error (b > 0) and lies at or above a.")

    def ulps(self, absx):
        if not self.b:
            return self.a
        line = self.a + self.b * absx
        if self.cap is None:
            return line
        if hasattr(line, "clamp"):                 # a tensor
            return line.clamp(max=self.cap)
        return line.clip(max=self.cap) if hasattr(line, "clip") else min(line, self.cap)   # an array, a number

    def to_dict(self) -> dict:
        return {"a": self.a, "b": self.b, **({"cap": self.cap} if self.cap is not None else {})}


@dataclass(frozen=True)
class MathProfile:
    name: str
    functions: dict
    ftz: bool = False                     # approximate functions flush subnormals
    provenance: dict = field(default_factory=dict)
    # the errors of functions whose values lie strictly inside (-1, 1) (sigmoid, tanh, erf)
    # were measured in ulps of values below 1, also where float64 rounds the exact value to
    # +-1 (calibrate.BELOW_ONE): the calculus may then count them so (2^-24 near 1)
    units_below_one: bool = False
    # fn -> ((x, f(x)), ...): arguments at which every kernel call of fn returns f(x) exactly
    # (exp(0) = 1), measured by ``numoracle calibrate`` or documented; there the calculus
    # gives the call no error at all
    exact: dict = field(default_factory=dict)
    # how tl.dot accumulates in fp32 (DOTS): "nearest", every addition rounded to nearest (the
    # interpreter's float32 matmul), or "tensor_core", the measured sm_90 tensor-core algorithm
    # (docs/design.md §4.4: blocks of products aligned to the largest exponent, truncated, the
    # block's sum rounded toward zero), which the calculus bounds beside the nearest one
    dot: str = "tensor_core"

    def __post_init__(self):
        if self.dot not in DOTS:
            raise InvalidArgument(f"math profile {self.name!r}: dot={self.dot!r}, expected one of {DOTS}.")

    def exact_points(self, fn: str) -> tuple:
        """The measured exact points of fn, and the values IEEE 754 defines on every library
        (``DEFINED``)."""
        return tuple(self.exact.get(fn, ())) + DEFINED.get(fn, ())

    def model(self, fn: str) -> ErrorModel:
        try:
            return self.functions[fn]
        except KeyError:
            raise InvalidArgument(
                f"math profile {self.name!r} has no error model for {fn!r}; it covers "
                f"{sorted(self.functions)}. Calibrate the function with "
                f"`numoracle calibrate` or choose another profile."
            ) from None

    def to_dict(self) -> dict:
        return {
            "name": self.name,
            "ftz": self.ftz,
            "units_below_one": self.units_below_one,
            "functions": {k: m.to_dict() for k, m in self.functions.items()},
            "exact": {k: [list(p) for p in v] for k, v in self.exact.items()},
            "dot": self.dot,
            "provenance": self.provenance,
        }


def from_dict(d: dict) -> MathProfile:
    try:
        fns = {k: ErrorModel(float(v["a"]), float(v.get("b", 0.0)), None if v.get("cap") is None else float(v["cap"]))
               for k, v in d["functions"].items()}
        exact = {k: tuple((float(x), float(fx)) for x, fx in v) for k, v in d.get("exact", {}).items()}
        unknown = sorted(set(exact) - set(fns))
        if unknown:
            raise ValueError(f"exact points for {unknown}, which have no error model")
        # a profile without "dot" (written before it existed) gets the tensor-core model, whose
        # bound contains the nearest one
        return MathProfile(str(d["name"]), fns, bool(d.get("ftz", False)), dict(d.get("provenance", {})),
                           bool(d.get("units_below_one", False)), exact, str(d.get("dot", "tensor_core")))
    except InvalidArgument:
        raise
    except (KeyError, TypeError, ValueError) as exc:
        raise InvalidArgument(
            f"malformed math profile: {exc!r}. Expected {{'name': str, 'ftz': bool, "
            f"'functions': {{fn: {{'a': ulps, 'b': ulps per |x|, optionally 'cap': most ulps}}}}, optionally "
            f"'exact': {{fn: [[x, f(x)], ...]}}}}."
        ) from None


_CACHE: dict[str, MathProfile] = {}


def load(name_or_path: str | Path) -> MathProfile:
    """A shipped profile by name (``interpreter``, ``h200``, ``cuda_documented``)
    or a profile file written by ``numoracle calibrate``."""
    key = str(name_or_path)
    if key in _CACHE:
        return _CACHE[key]
    p = Path(key)
    if p.suffix == ".json" and p.exists():
        text = p.read_text()
    else:
        try:
            text = resources.files(__package__).joinpath(f"{key}.json").read_text()
        except FileNotFoundError:
            shipped = sorted(x.name[:-5] for x in resources.files(__package__).iterdir() if x.name.endswith(".json"))
            raise InvalidArgument(
                f"unknown math profile {key!r}: expected one of {shipped} or a path to a "
                f"profile .json written by `numoracle calibrate`."
            ) from None
    prof = from_dict(json.loads(text))
    _CACHE[key] = prof
    return prof
