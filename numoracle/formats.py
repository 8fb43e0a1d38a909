"""Floating-point formats as data, and exact rounding into them.

Every function here is pure and vectorised over float64 torch tensors.  All
arithmetic is exact: each format narrower than fp64 has at most 24
significand bits, so scaling by powers of two, rounding to an integer and
scaling back never loses a bit in float64.  (fp64 itself is the identity
format: a float64 input is already one of its values.)

Two facts about library casts, which `round` does not depend on:

* torch (2.11 and 2.13, CPU and CUDA) and ml_dtypes up to 0.6 convert a float64 to
  fp16, bf16 and every fp8 format *through float32*, so they round twice:
  ``1 + 2**-8 + 2**-40`` becomes 1.0 in bf16 where a single rounding gives
  ``1 + 2**-7`` (ml_dtypes 0.7 rounds once).  `round` always rounds once.  To
  reproduce such a cast bit for bit, use ``round(round(x, fp32), fmt, overflow="torch")``.
* What a cast does beyond the finite range is version-specific: torch 2.11
  turns e4m3fn values above 464 (and infinities) into NaN, torch 2.13 (CPU)
  clamps them to ±448.  ``overflow="torch"`` therefore asks the installed
  torch, once per format.

Where numoracle rounds by casts (below), a float64 is first rounded *to odd* in
float32 and only then cast to the narrower format: every library rounds a float32
once, and that second rounding of a value rounded to odd is the single rounding of
the original.
"""

from __future__ import annotations

import builtins
import functools
import math
from dataclasses import dataclass

import torch

from numoracle.errors import InvalidArgument, NumoracleError

__all__ = [
    "MODES", "OVERFLOWS", "Format", "ALL", "fp64", "fp32", "tf32", "fp16", "bf16", "e4m3fn", "e5m2",
    "e4m3fnuz", "e2m1", "e8m0", "by_name", "from_dtype", "of", "round", "ulp",
    "next_up", "next_down", "rounding_cell", "is_representable", "to_bits",
    "from_bits", "decode", "encode", "PACK_ORDERS", "Packed", "pack", "unpack",
]

MODES = ("rne", "rna", "rtz", "up", "down")
OVERFLOWS = ("inf", "saturate", "nan", "torch")


@dataclass(frozen=True, repr=False)
class Format:
    """A binary floating-point format: ``precision`` significand bits
    (implicit bit included), exponents from ``emin`` up, largest finite value
    ``max_finite``.  ``bits`` is the width of the encoding `to_bits` uses
    (tf32: 19, although it travels in fp32 storage; e2m1: 4, one value per
    byte)."""

    name: str
    precision: int
    emin: int
    max_finite: float
    has_inf: bool
    has_nan: bool
    subnormals: bool
    signed: bool
    bits: int
    torch_dtype: torch.dtype | None

    def __repr__(self) -> str:
        return self.name

    @property
    def u(self) -> float:
        """Unit roundoff 2**-precision: round-to-nearest has relative error at
        most u/(1+u), directed modes less than 2u.  For e8m0 (precision 1)
        this is 1/2, which is still a correct bound: the nearest power of two
        is within a factor 4/3 of x, the one above within a factor 2."""
        return 2.0 ** -self.precision

    @property
    def min_normal(self) -> float:
        return 2.0 ** self.emin

    @property
    def min_subnormal(self) -> float:
        """Smallest positive value (the normal one where there are no subnormals)."""
        return 2.0 ** (self.emin - self.precision + 1) if self.subnormals else self.min_normal

    @property
    def emax(self) -> int:
        return math.frexp(self.max_finite)[1] - 1

    @property
    def storage_dtype(self) -> torch.dtype:
        """The dtype `encode` returns: raw bits in uint8 for e2m1 and e8m0
        (one value per byte, the way kernels pass MX scales and unpacked fp4)."""
        if self.name in ("e2m1", "e8m0"):
            return torch.uint8
        return torch.float32 if self.name == "tf32" else self.torch_dtype


fp64 = Format("fp64", 53, -1022, 1.7976931348623157e308, True, True, True, True, 64, torch.float64)
fp32 = Format("fp32", 24, -126, (2 - 2.0**-23) * 2.0**127, True, True, True, True, 32, torch.float32)
tf32 = Format("tf32", 11, -126, (2 - 2.0**-10) * 2.0**127, True, True, True, True, 19, None)
fp16 = Format("fp16", 11, -14, 65504.0, True, True, True, True, 16, torch.float16)
bf16 = Format("bf16", 8, -126, (2 - 2.0**-7) * 2.0**127, True, True, True, True, 16, torch.bfloat16)
e4m3fn = Format("e4m3fn", 4, -6, 448.0, False, True, True, True, 8, torch.float8_e4m3fn)
e5m2 = Format("e5m2", 3, -14, 57344.0, True, True, True, True, 8, torch.float8_e5m2)
e4m3fnuz = Format("e4m3fnuz", 4, -7, 240.0, False, True, True, True, 8, torch.float8_e4m3fnuz)
# torch's float4_e2m1fn_x2 packs two values per byte, so it is no per-element dtype.
e2m1 = Format("e2m1", 2, 0, 6.0, False, False, True, True, 4, None)
e8m0 = Format("e8m0", 1, -127, 2.0**127, False, True, False, False, 8,
              getattr(torch, "float8_e8m0fnu", None))

ALL = (fp64, fp32, tf32, fp16, bf16, e4m3fn, e5m2, e4m3fnuz, e2m1, e8m0)

_ALIASES = {
    "fp64": fp64, "float64": fp64, "double": fp64, "f64": fp64,
    "fp32": fp32, "float32": fp32, "float": fp32, "f32": fp32,
    "tf32": tf32, "tensorfloat32": tf32,
    "fp16": fp16, "float16": fp16, "half": fp16, "f16": fp16,
    "bf16": bf16, "bfloat16": bf16,
    "e4m3fn": e4m3fn, "float8_e4m3fn": e4m3fn, "fp8_e4m3fn": e4m3fn,
    "e5m2": e5m2, "float8_e5m2": e5m2, "fp8_e5m2": e5m2,
    "e4m3fnuz": e4m3fnuz, "float8_e4m3fnuz": e4m3fnuz, "fp8_e4m3fnuz": e4m3fnuz,
    "e2m1": e2m1, "e2m1fn": e2m1, "float4_e2m1fn": e2m1, "float4_e2m1fn_x2": e2m1, "fp4": e2m1,
    "e8m0": e8m0, "e8m0fnu": e8m0, "ue8m0": e8m0, "float8_e8m0fnu": e8m0,
}


def by_name(name: str | Format) -> Format:
    """The format called `name` ("bf16", "bfloat16", "torch.float8_e4m3fn", ...)."""
    if isinstance(name, Format):
        return name
    key = str(name).lower().removeprefix("torch.")
    if key not in _ALIASES:
        raise InvalidArgument(
            f"by_name({name!r}): no such format. Expected one of "
            f"{', '.join(f.name for f in ALL)} (or an alias such as 'bfloat16', "
            "'float8_e4m3fn'). Note 'e4m3' is ambiguous: say 'e4m3fn' (OCP, NVIDIA) "
            "or 'e4m3fnuz' (AMD).")
    return _ALIASES[key]


def from_dtype(dtype: torch.dtype) -> Format:
    """The format whose values a torch dtype holds."""
    for fmt in ALL:
        if fmt.torch_dtype is not None and fmt.torch_dtype == dtype:
            return fmt
    if dtype == getattr(torch, "float4_e2m1fn_x2", None):
        return e2m1
    if dtype == torch.uint8:
        raise InvalidArgument(
            "from_dtype(torch.uint8): raw bytes carry no format. Say which one, e.g. "
            "numoracle.formats.e2m1 or numoracle.formats.e8m0 (decode(t, fmt=...)).")
    raise InvalidArgument(
        f"from_dtype({dtype}): not a floating-point format numoracle knows. Expected "
        f"one of {', '.join(str(f.torch_dtype) for f in ALL if f.torch_dtype)}; "
        "for other dtypes convert first (t.double()).")


def of(t: torch.Tensor) -> Format:
    """The format of tensor `t`, from its dtype."""
    if not isinstance(t, torch.Tensor):
        raise InvalidArgument(f"of() expects a torch.Tensor, got {type(t).__name__}; "
                              "for a dtype use from_dtype(), for a name by_name().")
    return from_dtype(t.dtype)


# -- encoding layouts -------------------------------------------------------
# (exponent bits, rule for the top exponent, canonical positive NaN pattern).
# The NaN patterns are the ones torch and ml_dtypes produce for float("nan").
_LAYOUT = {
    "fp32": (8, "ieee", 0x7FC00000), "tf32": (8, "ieee", 0x3FE00),
    "fp16": (5, "ieee", 0x7E00), "bf16": (8, "ieee", 0x7FC0),
    "e4m3fn": (4, "fn", 0x7F), "e5m2": (5, "ieee", 0x7F),
    "e4m3fnuz": (4, "fnuz", 0x80), "e2m1": (2, "none", None), "e8m0": (8, "e8m0", 0xFF),
}


def _bias(fmt: Format) -> int:
    return 1 - fmt.emin if fmt.subnormals else -fmt.emin


def _has_neg_zero(fmt: Format) -> bool:
    return fmt.signed and _LAYOUT.get(fmt.name, (0, ""))[1] != "fnuz"


# -- argument checks ----------------------------------------------------------

def _fmt(fmt) -> Format:
    if isinstance(fmt, (str, Format)):
        return by_name(fmt)
    raise InvalidArgument(f"fmt={fmt!r} is not a Format; pass e.g. numoracle.formats.bf16 "
                          "or a name such as 'bf16'.")


def _f64(x, arg: str = "x") -> torch.Tensor:
    if isinstance(x, torch.Tensor):
        if x.dtype.is_floating_point:
            return x.to(torch.float64)  # widening to float64 is exact
        raise InvalidArgument(
            f"{arg} is a {x.dtype} tensor; expected floating-point values. Convert with "
            f"{arg}.double(), or if these are bit patterns, use from_bits({arg}, fmt).")
    return torch.as_tensor(x, dtype=torch.float64)


def _choice(value, allowed, arg: str):
    if value not in allowed:
        raise InvalidArgument(f"{arg}={value!r} is not allowed; expected one of "
                              f"{', '.join(map(repr, allowed))}.")
    return value


# -- exact powers of two and grids ------------------------------------------

def _exp2i(n: torch.Tensor) -> torch.Tensor:
    """2**n exactly for int64 n in [-1074, 2046]: a product of two normal
    powers built from their bit patterns, so it reaches fp64's subnormals."""
    h = n >> 1                      # floor(n / 2): an arithmetic shift, not an integer division
    def pw(k):
        return ((k + 1023) << 52).view(torch.float64)
    return pw(h) * pw(n - h)


def _grid_exp(a: torch.Tensor, fmt: Format) -> torch.Tensor:
    """Exponent of the spacing of fmt's grid at |a| (finite a): subnormals share
    the grid of the lowest binade, and zero lies on it too."""
    # floor(log2 a) from the float64 exponent bits (-1023 for zero and float64 subnormals,
    # which lie below every format's emin): int64 throughout, which Inductor's C++ vectorises
    # (it fails to compile frexp's int32 exponent widened to int64) and which on a GPU costs a
    # few integer instructions where frexp calls ilogb (checked on the H200, eager and
    # compiled: scripts/cuda_rounding_check.py)
    e = ((a.view(torch.int64) >> 52) & 0x7FF) - 1023
    return e.clamp(min=fmt.emin) - (fmt.precision - 1)


def _round_half_away(s: torch.Tensor) -> torch.Tensor:
    # floor(|s| + 0.5) would round 0.49999999999999994 + 0.5 up to 1.
    a = s.abs()
    whole = torch.floor(a)
    return torch.copysign(whole + (a - whole >= 0.5), s)  # a - whole is exact


_ROUNDERS = {
    "rne": torch.round,  # halves to even
    "rna": _round_half_away,
    "rtz": torch.trunc,
    "up": torch.ceil,
    "down": torch.floor,
}


def _overflow_target(mode: str, overflow: str, positive: bool) -> str:
    """Where a finite value beyond the range goes: 'max', 'inf' or 'nan'.
    Under "inf" this is IEEE 754 §7.4: nearest modes and the mode that rounds
    away from zero on that side overflow to infinity, the others to max."""
    if overflow == "saturate":
        return "max"
    if overflow == "nan":
        return "nan"
    away = "up" if positive else "down"
    return "inf" if mode in ("rne", "rna", away) else "max"


@functools.cache
def _torch_overflow(fmt: Format) -> str:
    """The overflow rule of the installed torch's cast to fmt, found by casting
    probes that are exact in float32 (so torch's detour through float32 does
    not blur them) and matching them against our three rules."""
    if fmt.name in ("fp64", "fp32", "tf32"):
        return "inf"  # IEEE, and torch has no tf32 dtype to ask
    if fmt.torch_dtype is None:
        raise InvalidArgument(
            f"overflow='torch' for {fmt}: torch has no cast to {fmt} (its "
            "float4_e2m1fn_x2 cannot be a .to() target). Choose overflow='saturate' "
            "(what ml_dtypes does), 'inf' or 'nan'.")
    top = fmt.max_finite + 2.0 ** (fmt.emax - fmt.precision)  # threshold at the top
    gap = 2.0 ** (math.frexp(top)[1] - 25)  # float32 spacing at the threshold
    probe = torch.tensor([fmt.max_finite, top - gap, top, top + gap, 2 * top, math.inf],
                         dtype=torch.float64)
    if fmt.signed:
        probe = torch.cat([probe, -probe])
    probe = probe[round(probe, fp32) == probe]
    got = probe.to(fmt.torch_dtype).to(torch.float64)
    for rule in ("inf", "saturate", "nan"):
        want = round(probe, fmt, "rne", rule)
        if torch.equal(want.isnan(), got.isnan()) and bool((want == got)[~got.isnan()].all()):
            return rule
    raise NumoracleError(
        f"torch {torch.__version__} casts {probe.tolist()} to {fmt} as {got.tolist()}, "
        "which matches none of the overflow rules 'inf', 'saturate', 'nan'. Pass one "
        "of those explicitly.")


# -- rounding -----------------------------------------------------------------

_FAST_RNE = ("fp32", "fp16", "bf16")


def _rne_fast(x: torch.Tensor, fmt: Format) -> torch.Tensor:
    """RNE with IEEE overflow to fp32/fp16/bf16 through torch casts, without
    a grid (so that compiled code vectorises it).  float64 -> float32 is one
    correct rounding; for the 16-bit formats two exact formulations, the
    cheaper one where x is computed (``_bitcasts_cheap``): ``_rne_by_odd``
    or ``_rne_by_magic``."""
    if fmt.name == "fp32":
        return x.to(torch.float32).to(torch.float64)
    if _bitcasts_cheap(x):
        return _rne_by_odd(x, fmt)
    return _rne_by_magic(x, fmt)


def _bitcasts_cheap(x: torch.Tensor) -> bool:
    """Whether viewing float32 values as int32 is cheap where x is computed:
    eagerly, and in compiled GPU code; not in Inductor's C++, which moves each
    element through memory for it, so that there the 16-bit roundings take
    ``_rne_by_magic``, which has no bit views (compiled, 2^20 values: 1.85 ms
    against 4.80 ms by odd, benchmarks/rounding_paths.py;
    docs/results/2026-12-03-magic-rounding.md).  Eagerly rounding by odd is
    the cheaper (10^6 values: 8 ms, 49 ms by magic, which is many launches)."""
    return x.device.type != "cpu" or not torch.compiler.is_compiling()


def rounds_by_magic(x: torch.Tensor, fmt: Format) -> bool:
    """Whether a 16-bit rounding or value test of x to fmt is, where x is computed, the
    rounding by magic (``_rne_by_magic``: compiled CPU code, where bit views are dear and
    torch 2.11 folds 16-bit round trips) rather than casts."""
    return fmt.name in ("fp16", "bf16") and not _bitcasts_cheap(x)


def finite(x: torch.Tensor) -> torch.Tensor:
    """``torch.isfinite(x)`` of a floating tensor.  Compiled for the CPU it is ``x - x == 0``
    (inf - inf and NaN - NaN are NaN): two vector operations, where Inductor's C++ for
    ``isfinite`` compares x with itself and |x| with infinity and combines the two masks (five).
    Elsewhere torch's one operation."""
    if x.device.type == "cpu" and torch.compiler.is_compiling():
        return (x - x) == 0
    return torch.isfinite(x)


def expm1(t: torch.Tensor) -> torch.Tensor:
    """``torch.expm1(t)`` of a float64 tensor, t >= 0.  Compiled for the CPU, Inductor writes
    expm1 as ``exp(t) - 1``, which cancels: off by up to 100% for t below 2^-40 and by 1e-11 at
    the t = d * log1p(2^-24) of an fp32 sum's gamma (docs/results/2026-12-06-inductor-expm1.md).
    There it is Kahan's ``(w - 1) / log(w) * t``, w = exp(t), accurate to a few units of the
    last place wherever exp and log are (Higham, "Accuracy and Stability of Numerical
    Algorithms", 2nd ed., §1.14.1); t itself where w rounds to 1, w where it overflows.
    Elsewhere torch's one operation."""
    if t.device.type == "cpu" and torch.compiler.is_compiling():
        w = torch.exp(t)
        return torch.where(w == 1, t, torch.where(w == math.inf, w, (w - 1) / torch.log(w) * t))
    return torch.expm1(t)


def _rne_by_odd(x: torch.Tensor, fmt: Format) -> torch.Tensor:
    """RNE to fp16/bf16: x is first rounded to *odd* in float32 (toward zero,
    then the last significand bit set where that was inexact).  float32 has
    at least two more bits than fp16 or bf16 on every binade (subnormals
    included), and a value rounded to odd with two extra bits rounds to
    nearest-even as x itself would (Boldo and Melquiond, "Emulation of FMA
    and correctly rounded sums: proved algorithms using rounding to odd",
    IEEE TC 2008): the second, RNE cast is the correct rounding of x.  The
    float32 midpoints and overflow threshold of the 16-bit format are
    float32 values, which rounding to odd never reaches from an inexact x.
    Past float32's range the first cast gives inf and toward zero
    max_float32, which overflows both formats."""
    return _to_odd_fp32(x).to(fmt.torch_dtype).to(torch.float64)


def _magic_unsigned_zero(x: torch.Tensor, fmt: Format) -> torch.Tensor:
    """RNE of x to fmt's precision, with fmt's subnormal spacing below its normals and an
    unbounded exponent above (``_magic_covers(fmt)``; finite x, |x| < 2^970), in float64
    arithmetic alone, a zero result +0 whatever x's sign: with q fmt's spacing in x's binade,
    x + S for S = 1.5 * 2^52 q lies in [2^52 q, 2^53 q), where float64's spacing is q, so the
    sum rounds x to a multiple of q, ties to the even multiple (S is one), and subtracting S
    again is exact.  x's binade is ``_ufp(x)``; below fmt's normals q is its smallest
    subnormal."""
    q = torch.clamp(_ufp(x) * 2.0 ** (1 - fmt.precision), min=fmt.min_subnormal)
    s = q * (1.5 * 2.0 ** 52)
    return (x + s) - s


def _magic(x: torch.Tensor, fmt: Format) -> torch.Tensor:
    """``_magic_unsigned_zero`` with a zero result taking x's sign."""
    y = _magic_unsigned_zero(x, fmt)
    # a zero result takes x's sign (x * 0): copysign is a library call in Inductor's C++, which
    # spills every live vector register around it
    return torch.where(y == 0, x * 0.0, y)


def round_within_range(x: torch.Tensor, fmt) -> torch.Tensor:
    """RNE of x to fmt, for |x| <= max_finite only (larger values give anything) and with
    a zero result +0 whatever x's sign: ``_magic_unsigned_zero`` alone, without the clamp,
    the sign of a zero and the overflow rule that other values need, 7 operations against 17
    (below the normals it rounds at fmt's subnormal spacing).  Formats that it does not cover
    go through ``round``."""
    fmt = _fmt(fmt)
    if not _magic_covers(fmt):
        return round(x, fmt)
    return _magic_unsigned_zero(x, fmt)


def _ufp(x: torch.Tensor) -> torch.Tensor:
    """2^floor(log2 |x|) (0 for 0) for |x| < 2^970, without bit views (which Inductor's C++
    moves through memory): with q = (2^52 + 1) x, |q - (1 - 2^-53) q| (Rump, "Ultimately fast
    accurate summation", SIAM J. Sci. Comput. 2009, Algorithm 3.5).  It needs both products
    rounded: Inductor compiles without floating-point contraction (``COMPILE_OPTIONS``)."""
    q = x * (2.0 ** 52 + 1)
    return (q - q * (1 - 2.0 ** -53)).abs()


def _magic_covers(fmt: Format) -> bool:
    """Whether ``_magic`` rounds to fmt: a signed format with subnormals, at most float32's
    significand, finite values below 2^900 (where ``_round_rest`` clamps x)."""
    return fmt.signed and fmt.subnormals and fmt.precision <= 24 and fmt.max_finite < 2.0 ** 900


def _rne_by_magic(x: torch.Tensor, fmt: Format, overflow: str = "inf") -> torch.Tensor:
    """RNE to a format ``_magic`` covers, with an overflow rule ("inf", "saturate" or
    "nan"), in a few operations and one mask: a clamped x (infinities included) overflows
    as a finite one does, and ``_magic`` rounds with an unbounded exponent, so the rounded
    value alone says whether it overflows (the tie at the threshold goes to the even
    neighbour, past the range for fp16 and bf16, to 448 for e4m3fn).  Inductor's C++ spends
    more on converting masks than on arithmetic: ``torch.isfinite`` and a masked ``where``
    per rule made this 7x slower (docs/results/2026-12-03-magic-rounding.md)."""
    y = _magic(x.clamp(-2.0 ** 900, 2.0 ** 900), fmt)            # NaN stays NaN
    m = fmt.max_finite
    if overflow == "saturate":
        y = y.clamp(-m, m)
    elif overflow == "inf" and fmt.has_inf:
        y = torch.where(y.abs() > m, y * math.inf, y)
    else:                                    # "nan", or IEEE overflow where there is no infinity
        y = torch.where(y.abs() > m, math.nan, y)
    return y if _has_neg_zero(fmt) else y + 0.0


def rne_bound(x: torch.Tensor, fmt, side: str, overflow: str = "inf") -> torch.Tensor:
    """A stand-in for ``round(x, fmt, "rne", overflow)`` as one side of a comparison with values
    of fmt (the rounding-interval check's ``y >= RN(lo)``, ``y <= RN(hi)``): for every value v
    of fmt, infinities included, ``v >= b`` (side "lo") or ``v <= b`` (side "hi") is the same as
    with the rounding.  Where a 16-bit rounding is compiled for the CPU (``_rne_by_magic``) that
    drops what no such comparison sees (``_rne_bound_by_magic``); elsewhere it is the rounding."""
    fmt = _fmt(fmt)
    x = _f64(x)
    if overflow == "inf" and rounds_by_magic(x, fmt):
        return _rne_bound_by_magic(x, fmt, side)
    return round(x, fmt, "rne", overflow)


def _rne_bound_by_magic(x: torch.Tensor, fmt: Format, side: str) -> torch.Tensor:
    """``_rne_by_magic`` less the sign of a zero (+0 and -0 compare equal) and less the overflow
    on the side comparisons see alike: past +max_finite, RN(hi) is +inf and ``v <= RN(hi)``
    holds for every v, as it does for any value above max_finite, but past -max_finite RN(hi)
    is -inf, which only -inf is at or below; the mirror for lo.  13 operations against 18."""
    y = _magic_unsigned_zero(x.clamp(-2.0 ** 900, 2.0 ** 900), fmt)      # NaN stays NaN
    m = fmt.max_finite
    if side == "lo":
        return torch.where(y < -m, -math.inf, y)
    return torch.where(y > m, math.inf, y)


def _to_odd_fp32(x: torch.Tensor) -> torch.Tensor:
    """x rounded to odd in float32 (a float32 tensor): toward zero, then the last
    significand bit set where that was inexact; NaN stays NaN."""
    t = x.to(torch.float32)
    td = t.to(torch.float64)
    # as int32 a float32 is sign and magnitude: minus one steps the magnitude toward zero
    bits = t.view(torch.int32) - (td.abs() > x.abs()).to(torch.int32)
    return (bits | (td != x).to(torch.int32)).view(torch.float32)


# How a rounding that is not the 16-bit fast path is computed where x is (``_how``):
# - "casts" (fp8 through float32 rounded to odd and torch's casts; float32 up and down by bit
#   views of the nearest float32): eagerly on the CPU;
# - "magic" (``_rne_by_magic`` for RNE to fp8 and fp4, and with saturation to the 16-bit formats
#   and fp32; the casts for float32 up and down): compiled for the CPU, where Inductor's C++ runs
#   fp8 casts slowly and the grid slower still;
# - "grid" (an exact power-of-two scaling and a rounding to an integer): other devices, where
#   the casts were no faster.
# All exact (tests/test_formats.py, tests/test_compiled.py; on a GPU scripts/cuda_rounding_check.py);
# measurements: docs/results/2026-12-03-magic-rounding.md
_CAST_DEVICES = frozenset({"cpu"})
_CAST_FP8 = ("e4m3fn", "e5m2")


def _rne_fp8_unbounded(x: torch.Tensor, fmt: Format) -> torch.Tensor:
    """RNE to e4m3fn/e5m2 through float32 rounded to odd (see ``_rne_fast``: float32
    has more than two extra bits), finite x only, with ±inf where the rounding with an
    unbounded exponent exceeds max_finite (``round`` applies the overflow rule to
    that): the casts' own overflow rules (NaN, saturation, inf) differ between torch
    and Triton, so overflow is decided on x.  At the threshold, max_finite plus half
    a top-binade ulp, the tie goes to max_finite when its significand is even
    (e4m3fn's 448), past the range otherwise (e5m2's 57344)."""
    # back through float32 (exact): Triton 3.6 has no fp8 -> float64 conversion
    y = _to_odd_fp32(x).to(fmt.torch_dtype).to(torch.float32).to(torch.float64)
    thr = overflow_threshold(fmt)
    m = fmt.max_finite
    odd_max = (m / 2.0 ** (math.frexp(m)[1] - fmt.precision)) % 2 == 1
    a = x.abs()
    over = (a >= thr) if odd_max else (a > thr)
    return torch.where(over, torch.copysign(torch.full_like(x, math.inf), x), y)


def _directed_fp32(x: torch.Tensor, mode: str) -> torch.Tensor:
    """Rounding up or down to float32 with IEEE overflow (up: +inf past the top,
    -max_finite below the bottom; down the mirror): the nearest float32 value, moved
    one step toward x where it lies on x's wrong side."""
    t = x.to(torch.float32)
    td = t.to(torch.float64)
    up = mode == "up"
    step = (td < x) if up else (td > x)                  # False for NaN and infinities
    # as int32 sign and magnitude: +1 moves away from zero, -1 toward it; from a zero,
    # the smallest subnormal on the side of the step
    away = (t > 0) if up else (t < 0)
    moved = (t.view(torch.int32) + torch.where(away, 1, -1).to(torch.int32)).view(torch.float32)
    moved = torch.where(t == 0, fp32.min_subnormal if up else -fp32.min_subnormal, moved)
    return torch.where(step, moved, t).to(torch.float64)


def overflow_threshold(fmt: Format) -> float:
    """The magnitude from which RNE overflows: max_finite plus half a top-binade ulp
    (a tie there rounds to the even neighbour, the power of two past the range, where
    max_finite's significand is odd).  Every |x| below it rounds to at most max_finite."""
    return fmt.max_finite + 2.0 ** (math.frexp(fmt.max_finite)[1] - 1 - fmt.precision)


def representable(x: torch.Tensor, fmt) -> torch.Tensor:
    """Whether each float64 value is a value of fmt (infinities of formats that
    have them included): ``round(x, fmt) == x``, cheaper for fp32/bf16/fp16."""
    fmt = _fmt(fmt)
    if fmt.precision == 53:
        return ~torch.isnan(x)
    if fmt.name in _FAST_RNE:                       # casts: see round()
        if rounds_by_magic(x, fmt):
            # compiled for the CPU: Inductor's C++ in torch 2.11 folds a float32 -> 16-bit ->
            # float32 round trip into the value itself, emulate_precision_casts or not
            # (docs/results/2026-12-05-torch211-lowp-round-trip.md), which made every product
            # of two bf16 values "exact"; the rounding by magic has no 16-bit casts
            return _rne_by_magic(x, fmt) == x
        t = x.to(torch.float32)
        exact = t.to(torch.float64) == x
        if fmt.name != "fp32":
            exact = exact & (t.to(fmt.torch_dtype).to(torch.float32) == t)
        return exact
    return round(x, fmt) == x


def _value_spacing(af: torch.Tensor, fmt: Format) -> tuple:
    """fmt's spacing at finite magnitudes af that are values of fmt (fp32, bf16,
    fp16), and af's float32 bits.  Measured against rounding the interval's ends
    by casts, testing intervals against a value's rounding cell built from this
    was slower on both the H200 (rms_norm at 1e8: 2.92 against 2.14 ms) and the
    CPU, and was removed."""
    # such values are float32 values (their casts are exact, whatever rounding a cast does):
    # 2**floor(log2 af) is af with its float32 significand cleared (0 below float32's normals,
    # where fmt's spacing is its smallest anyway).  int32, cheaper than the grid's int64
    b = af.to(torch.float32).view(torch.int32)
    lead = (b & 0x7F800000).view(torch.float32).to(torch.float64)
    return torch.where(af < fmt.min_normal, fmt.min_subnormal, lead * 2.0 ** (1 - fmt.precision)), b


def round_scalar(v: float, fmt) -> float:
    """A Python float rounded to nearest (ties to even) in fmt, IEEE overflow,
    without tensors: constants of a reference program are rounded this way, so
    that a traced program (``numoracle.verdict.compiled``) sees plain numbers.  fmt must
    be an IEEE-like format with infinities and subnormals (fp64, fp32, fp16,
    bf16); others take ``round``."""
    fmt = _fmt(fmt)
    v = float(v)
    if not (fmt.has_inf and fmt.subnormals):
        return float(round(torch.tensor(v, dtype=torch.float64), fmt))
    if v == 0 or v != v or v in (math.inf, -math.inf) or fmt.precision >= 53:
        return v
    a = abs(v)
    if a >= overflow_threshold(fmt):
        return math.copysign(math.inf, v)
    e = math.frexp(a)[1] - 1                       # 2**e <= a < 2**(e+1)
    q = max(e, fmt.emin) - (fmt.precision - 1)     # the grid spacing is 2**q
    r = math.ldexp(builtins.round(math.ldexp(a, -q)), q)   # round(): ties to even, exact here
    return math.copysign(r, v)


def round(x, fmt, mode: str = "rne", overflow: str = "inf") -> torch.Tensor:
    """x rounded once, exactly, to fmt.

    mode: "rne" (nearest, ties to even), "rna" (nearest, ties away from zero),
    "rtz", "up", "down".  A value overflows when its rounding with an
    unbounded exponent exceeds max_finite (for rne: |x| at or beyond
    max_finite + half a top-binade ulp, depending on the tie).  Then
    overflow="inf" follows IEEE 754 (nearest → ±inf, directed modes → ±inf or
    ±max_finite), giving NaN where fmt has no infinity; "saturate" clamps to
    ±max_finite (infinite inputs too; the rule of PTX ``satfinite`` and OCP
    MX); "nan" gives NaN (infinite inputs too); "torch" uses whichever of
    these the installed torch's ``.to(dtype)`` follows (it does not round
    through float32 as torch does; see the module docstring).

    NaN in the result can mean "no value of fmt" (e2m1 has no NaN).  Zero
    results carry the sign of x, except in e4m3fnuz, which has one zero.

    e8m0 holds only 2**-127..2**127: x ≤ 0 and NaN give NaN; "rne"/"rna" give
    the nearest power of two by value, a tie 1.5·2**k going up to 2**(k+1)
    (as torch and ml_dtypes do); "up" is the power of two at or above x (the
    UE8M0 scale rule), "down"/"rtz" the one at or below.  Below 2**-127 the
    nearest modes and "up" give 2**-127; "down"/"rtz" give NaN, or 2**-127
    under "saturate".
    """
    fmt = _fmt(fmt)
    x = _f64(x)
    _choice(mode, MODES, "mode")
    _choice(overflow, OVERFLOWS, "overflow")
    if overflow == "torch":
        overflow = _torch_overflow(fmt)
    # casts, on every device: compiled, they round as eager casts do under
    # numoracle.verdict.compiled.inductor.COMPILE_OPTIONS (scripts/cuda_rounding_check.py, on the H200 too)
    if mode == "rne" and overflow == "inf" and fmt.name in _FAST_RNE:
        return _rne_fast(x, fmt)
    return _round_by(x, fmt, mode, overflow, _how(x))


def _how(x: torch.Tensor) -> str:
    """How ``_round_by`` rounds x where it is computed (see ``_CAST_DEVICES``)."""
    if x.device.type not in _CAST_DEVICES:
        return "grid"
    return "casts" if _bitcasts_cheap(x) else "magic"


def _round_by(x: torch.Tensor, fmt: Format, mode: str, overflow: str, how: str) -> torch.Tensor:
    """``round`` (overflow rule resolved, not the 16-bit fast path) the way ``how`` says
    where there is such a path for fmt and mode, or by the grid."""
    if how != "grid" and fmt.name == "fp32" and overflow == "inf" and mode in ("up", "down"):
        return _directed_fp32(x, mode)
    return _round_rest(x, fmt, mode, overflow, how)


def _round_rest(x: torch.Tensor, fmt: Format, mode: str, overflow: str, how: str = "grid") -> torch.Tensor:
    """``round`` with an unbounded exponent by the grid (an exact power-of-two scaling and
    a rounding to an integer) or for RNE to fp8 by casts (``how`` "casts"), then the overflow
    rule; or, for RNE to a format ``_magic`` covers with ``how`` "magic", ``_rne_by_magic``."""
    if mode == "rne" and how == "magic" and _magic_covers(fmt):
        return _rne_by_magic(x, fmt, overflow)
    finite = torch.isfinite(x)
    if fmt.precision == 53:
        y = x.clone()
    elif mode == "rne" and how == "casts" and fmt.name in _CAST_FP8:
        y = torch.where(finite, _rne_fp8_unbounded(x, fmt), x)
    else:
        xf = torch.where(finite, x, 0.0)
        q = _grid_exp(xf.abs(), fmt)
        y = _ROUNDERS[mode](xf * _exp2i(-q)) * _exp2i(q)
        y = torch.where(finite, y, x)
    m = fmt.max_finite
    for sign in (1.0, -1.0):
        beyond = (sign * y > m) & finite
        target = _overflow_target(mode, overflow, sign > 0)
        y = torch.where(beyond, {"max": sign * m, "inf": sign * math.inf,
                                 "nan": math.nan}[target], y)
        if overflow != "inf":
            y = torch.where(x == sign * math.inf, sign * m if overflow == "saturate" else math.nan, y)
    if not fmt.has_inf:
        # |y| == inf, not isinf: Inductor's C++ runs isinf one element at a time
        y = torch.where(y.abs() == math.inf, math.nan, y)
    if fmt.signed and not _has_neg_zero(fmt):
        y = y + 0.0  # -0 + 0 is +0 under round-to-nearest
    if not fmt.signed:
        tiny = (y == 0) & (x > 0)
        floor_like = mode in ("rtz", "down") and overflow != "saturate"
        y = torch.where(tiny, math.nan if floor_like else fmt.min_normal, y)
        y = torch.where(x > 0, y, math.nan)
    return y


def is_representable(x, fmt) -> torch.Tensor:
    """Whether each value of x is a value of fmt (NaN and ±inf where fmt has
    them; -0.0 counts as the zero of e4m3fnuz)."""
    fmt = _fmt(fmt)
    x = _f64(x)
    finite = torch.isfinite(x)
    same = (round(torch.where(finite, x, 0.0), fmt, "rne", "nan") == x) & finite
    return same | (x.isnan() & fmt.has_nan) | (x.isinf() & fmt.has_inf)


def ulp(x, fmt) -> torch.Tensor:
    """Spacing of fmt's values at |x|: 2**(e - precision + 1) for |x| in
    [2**e, 2**(e+1)), never below the spacing at emin (min_subnormal, or the
    normal spacing in e8m0).  Beyond max_finite it is the spacing the top
    binades would have; inf for ±inf, NaN for NaN."""
    fmt = _fmt(fmt)
    a = _f64(x).abs()
    finite = torch.isfinite(a)
    u = _exp2i(_grid_exp(torch.where(finite, a, 0.0), fmt))
    return torch.where(finite, u, a)


def ulp_scalar(v: float, fmt) -> float:
    """``ulp`` of one Python float, without tensors (a verdict's worst element reads its excess
    in ulps this way: one element's tensor arithmetic was a hundred small operations)."""
    fmt = _fmt(fmt)
    a = abs(float(v))
    if math.isnan(a) or a == math.inf:
        return a
    # floor(log2 a) for normal a; 0 and float64 subnormals lie below every format's emin
    e = math.frexp(a)[1] - 1 if a >= 2.0 ** -1022 else -1023
    return math.ldexp(1.0, max(e, fmt.emin) - (fmt.precision - 1))


def power_of_two(x: torch.Tensor) -> torch.Tensor:
    """Whether each |x| is a power of two (False for 0, inf and NaN)."""
    mant, _ = torch.frexp(x)
    return mant.abs() == 0.5


def _step_up(v: torch.Tensor, fmt: Format) -> torch.Tensor:
    """The next value above v on fmt's grid with unbounded exponent (finite v
    on the grid).  Below a power of two the spacing halves, except at and
    under min_normal, where subnormals keep it."""
    a = v.abs()
    u = ulp(a, fmt)
    halves = power_of_two(a) & (a > fmt.min_normal)
    return torch.where(v >= 0, v + u, -(a - torch.where(halves, u / 2, u)))


def next_up(x, fmt) -> torch.Tensor:
    """The least finite value of fmt above x; ±inf-free formats give NaN
    above max_finite, others inf.  next_up(-inf) is -max_finite,
    next_up(-min_subnormal) is -0.0 (+0.0 in e4m3fnuz)."""
    fmt = _fmt(fmt)
    x = _f64(x)
    at = round(x, fmt, "up", "inf")
    y = torch.where(at == x, _step_up(torch.where(at == x, x, 0.0), fmt), at)
    y = torch.where(y > fmt.max_finite, math.inf if fmt.has_inf else math.nan, y)
    y = torch.where(x == -math.inf, -fmt.max_finite, y)
    y = torch.where(x == math.inf, x, y)
    if not fmt.signed:
        y = torch.where(x < fmt.min_normal, fmt.min_normal, y)
    elif not _has_neg_zero(fmt):
        y = y + 0.0
    return y


def next_down(x, fmt) -> torch.Tensor:
    """The greatest finite value of fmt below x (mirror of `next_up`); NaN
    where there is none (below e8m0's 2**-127)."""
    fmt = _fmt(fmt)
    x = _f64(x)
    if fmt.signed:
        y = -next_up(-x, fmt)
        return y + 0.0 if not _has_neg_zero(fmt) else y
    at = round(x, fmt, "down", "inf")
    y = torch.where(at == x, x / 2, at)  # e8m0's values are the powers of two
    y = torch.where(y < fmt.min_normal, math.nan, y)
    return torch.where(x > fmt.max_finite, fmt.max_finite, y)


def rounding_cell(y, fmt, mode: str = "rne", overflow: str = "inf"):
    """The float64 inputs x with ``round(x, fmt, mode, overflow) == y``, as
    ``(lo, hi, lo_closed, hi_closed)``.

    For formats narrower than fp64 these are exactly the real numbers that
    round to y (the endpoints are float64 values).  Nearest modes bound the
    cell by midpoints, closed where the tie goes to y; the cell of
    ±max_finite ends at the overflow threshold, or at ±inf where overflow
    lands on max_finite.  ±0 share one cell.  For fp64 a finite cell is
    just [y, y].  y that is no value of fmt, or that no input reaches (inf
    under "saturate"), gives NaN bounds and False closures.
    """
    fmt = _fmt(fmt)
    y = _f64(y, "y")
    _choice(mode, MODES, "mode")
    _choice(overflow, OVERFLOWS, "overflow")
    if overflow == "torch":
        overflow = _torch_overflow(fmt)
    lo, hi, lo_c, hi_c = _grid_cell(torch.where(torch.isfinite(y), y, 0.0), fmt, mode)
    # x beyond ±max_finite overflows past the far end of ±max's grid cell.
    m = torch.full_like(y, fmt.max_finite)
    _, top, _, top_c = _grid_cell(m, fmt, mode)
    bottom, _, bottom_c, _ = _grid_cell(-m, fmt, mode)
    inf = torch.full_like(y, math.inf)
    true = torch.ones_like(top_c)
    for s, edge, edge_c in ((1.0, top, top_c), (-1.0, bottom, bottom_c)):
        target = _overflow_target(mode, overflow, s > 0)
        # max's cell reaches out to the overflow; inf's cell starts where it does.
        if target == "max":
            far, far_c = s * inf, true & (overflow == "saturate")
        else:
            far, far_c = edge, edge_c
        if target == "inf":
            near, near_c = edge, ~edge_c
        else:
            near, near_c = s * inf, true  # only an infinite input stays infinite
        at_max, at_inf = y == s * fmt.max_finite, y == s * math.inf
        if s > 0:
            hi, hi_c = torch.where(at_max, far, hi), torch.where(at_max, far_c, hi_c)
            lo, lo_c = torch.where(at_inf, near, lo), torch.where(at_inf, near_c, lo_c)
            hi, hi_c = torch.where(at_inf, inf, hi), torch.where(at_inf, true, hi_c)
        else:
            lo, lo_c = torch.where(at_max, far, lo), torch.where(at_max, far_c, lo_c)
            hi, hi_c = torch.where(at_inf, near, hi), torch.where(at_inf, near_c, hi_c)
            lo, lo_c = torch.where(at_inf, -inf, lo), torch.where(at_inf, true, lo_c)
    if not fmt.signed and (mode in ("rne", "rna", "up") or overflow == "saturate"):
        # Every positive x under 2**-127 lands on it.
        bottom = y == fmt.min_normal
        lo = torch.where(bottom, 0.0, lo)
        lo_c = torch.where(bottom, False, lo_c)
    reached = is_representable(y, fmt) & ~y.isnan()
    if fmt.has_inf and overflow != "inf":
        reached &= ~y.isinf()
    nan = torch.full_like(y, math.nan)
    return (torch.where(reached, lo, nan), torch.where(reached, hi, nan),
            lo_c & reached, hi_c & reached)


def _grid_cell(y: torch.Tensor, fmt: Format, mode: str):
    """Cell of finite y on fmt's grid with unbounded exponent (no overflow)."""
    if fmt.precision == 53:
        true = torch.ones_like(y, dtype=torch.bool)
        return y, y, true, true
    up = _step_up(y, fmt)
    down = -_step_up(-y, fmt)
    if mode in ("rne", "rna"):
        lo, hi = (down + y) / 2, (y + up) / 2
        if mode == "rne":
            # A tie rounds to the even one of its two neighbours, on the grid of
            # the smaller-magnitude neighbour (the binade the tie lies in).
            def even(nbr):
                q = ulp(torch.minimum(y.abs(), nbr.abs()), fmt)
                return torch.remainder(y.abs() / q, 2) == 0
            return lo, hi, even(down), even(up)
        return lo, hi, y > 0, y < 0  # ties go away from zero
    closed_at_y = torch.ones_like(y, dtype=torch.bool)
    if mode == "up":
        return down, y, ~closed_at_y, closed_at_y
    if mode == "down":
        return y, up, closed_at_y, ~closed_at_y
    lo = torch.where(y > 0, y, down)
    hi = torch.where(y < 0, y, up)
    return lo, hi, y > 0, y < 0


# -- bit patterns ---------------------------------------------------------------

def to_bits(x, fmt) -> torch.Tensor:
    """The encoding of each value as an int64 (fp64: the signed int64 view).
    NaN becomes the canonical pattern that torch and ml_dtypes produce, with
    x's sign where fmt has signed NaNs.  Raises InvalidArgument unless every
    value is representable."""
    fmt = _fmt(fmt)
    x = _f64(x)
    _require_representable(x, fmt, "to_bits")
    if fmt is fp64:
        bits = x.view(torch.int64)
        return torch.where(x.isnan(), torch.where(x.signbit(), -0x8000000000000000 | 0x7FF8 << 48,
                                                  0x7FF8 << 48), bits)
    ebits, rule, nan_bits = _LAYOUT[fmt.name]
    mbits = fmt.precision - 1
    a = torch.where(torch.isfinite(x), x.abs(), 0.0)
    _, e = torch.frexp(a)
    normal = a >= fmt.min_normal
    binade = torch.where(normal, e.to(torch.int64) - 1, fmt.emin)
    mant = a * _exp2i(mbits - binade)
    mant = torch.where(normal, mant - 2 ** mbits, mant).to(torch.int64)
    expo = torch.where(normal, binade + _bias(fmt), 0)
    out = (expo << mbits) | mant
    if rule == "ieee":
        out = torch.where(x.isinf(), ((1 << ebits) - 1) << mbits, out)
    sign = (x.signbit() & (x != 0) | x.signbit() & _has_neg_zero(fmt)).to(torch.int64)
    if fmt.signed:
        out = out | sign << (fmt.bits - 1)
    if nan_bits is not None:
        nan = nan_bits | (sign << (fmt.bits - 1) if rule in ("ieee", "fn") else 0)
        out = torch.where(x.isnan(), nan, out)
    return out


def from_bits(bits, fmt) -> torch.Tensor:
    """The float64 value of each encoding (inverse of `to_bits`)."""
    fmt = _fmt(fmt)
    if not isinstance(bits, torch.Tensor):
        bits = torch.as_tensor(bits)
    if bits.dtype.is_floating_point or bits.dtype == torch.bool or bits.dtype.is_complex:
        raise InvalidArgument(f"from_bits expects an integer tensor of bit patterns, got "
                              f"{bits.dtype}; for values use decode() or round().")
    fits = bits.dtype == torch.uint8 and fmt.bits == 8     # every uint8 is an 8-bit pattern: no check
    b = bits.to(torch.int64)
    if fmt is fp64:
        return b.view(torch.float64).clone()
    if not fits and bool(((b < 0) | (b >= 1 << fmt.bits)).any()):
        bad = b[(b < 0) | (b >= 1 << fmt.bits)][0].item()
        raise InvalidArgument(f"from_bits: pattern {bad} does not fit {fmt}'s {fmt.bits} "
                              f"bits; expected 0 <= bits < {1 << fmt.bits}.")
    ebits, rule, _ = _LAYOUT[fmt.name]
    mbits = fmt.precision - 1
    expo = (b >> mbits) & ((1 << ebits) - 1)
    mant = (b & ((1 << mbits) - 1)).to(torch.float64)
    sub = (expo == 0) & fmt.subnormals
    sig = torch.where(sub, mant, mant + 2 ** mbits)
    val = sig * _exp2i(torch.where(sub, 1, expo) - _bias(fmt) - mbits)
    negative = ((b >> (fmt.bits - 1)) & 1).bool() if fmt.signed else torch.zeros_like(b, dtype=torch.bool)
    val = torch.where(negative, -val, val)
    top = (1 << ebits) - 1
    if rule == "ieee":
        val = torch.where(expo == top, torch.where(mant == 0, val.sign() * math.inf, math.nan), val)
        val = torch.where((expo == top) & (mant != 0) & negative, -math.nan, val)
    elif rule == "fn":
        val = torch.where((expo == top) & (mant == 2 ** mbits - 1), torch.where(negative, -math.nan, math.nan), val)
    elif rule == "fnuz":
        val = torch.where(b == 1 << (fmt.bits - 1), math.nan, val)
    elif rule == "e8m0":
        val = torch.where(b == 0xFF, math.nan, val)
    return val


def _require_representable(x: torch.Tensor, fmt: Format, who: str) -> None:
    ok = is_representable(x, fmt)
    if not bool(ok.all()):
        bad = x[~ok]
        raise InvalidArgument(
            f"{who}: {bad.numel()} of {x.numel()} values are not values of {fmt} "
            f"(first: {bad[0].item()!r}). Round them first: round(x, {fmt.name}).")


# -- tensors ------------------------------------------------------------------

def decode(t: torch.Tensor, fmt: Format | Packed | None = None) -> torch.Tensor:
    """The exact float64 values held by `t`.  A uint8 tensor is raw encodings,
    one per byte, and needs `fmt` (e2m1, e8m0 or another format of ≤ 8 bits),
    or a `Packed` layout (two 4-bit codes per byte: the result has twice as many
    values along the last axis).  A float4_e2m1fn_x2 tensor is e2m1 packed
    "low_first", the layout torch defines for that dtype."""
    if not isinstance(t, torch.Tensor):
        raise InvalidArgument(f"decode expects a torch.Tensor, got {type(t).__name__}.")
    if isinstance(fmt, Packed):
        return _decode_packed(t, fmt)
    if t.dtype == torch.uint8:
        if fmt is None:
            raise InvalidArgument(
                "decode: a uint8 tensor holds raw bits of an unknown format; pass "
                "fmt=numoracle.formats.e2m1 or fmt=numoracle.formats.e8m0 (or another "
                "8-bit format) to say which.")
        fmt = _fmt(fmt)
        if fmt.bits > 8:
            raise InvalidArgument(f"decode: uint8 holds at most 8 bits but {fmt} has "
                                  f"{fmt.bits}; pass a tensor of dtype {fmt.storage_dtype}.")
        return from_bits(t, fmt)
    if not t.dtype.is_floating_point:
        raise InvalidArgument(f"decode: a {t.dtype} tensor holds no format's values; for "
                              "bit patterns use from_bits(bits, fmt).")
    if t.dtype == getattr(torch, "float4_e2m1fn_x2", None):
        if fmt is not None and _fmt(fmt) is not e2m1:
            raise InvalidArgument(f"decode: a float4_e2m1fn_x2 tensor holds e2m1 values, not {fmt}.")
        return decode(t.view(torch.uint8), Packed(e2m1, "low_first"))
    own = from_dtype(t.dtype)
    fmt = own if fmt is None else _fmt(fmt)
    if own.bits == 8:
        x = from_bits(t.view(torch.uint8), own)  # independent of torch's fp8 casts
    else:
        x = t.to(torch.float64)
    if fmt is not own:
        if not (fmt is tf32 and own is fp32):
            raise InvalidArgument(f"decode: tensor of dtype {t.dtype} holds {own} values, "
                                  f"not {fmt}; drop fmt= or pass fmt={own.name}.")
        _require_representable(x, fmt, "decode")
    return x


def encode(x, fmt) -> torch.Tensor:
    """A tensor in fmt's storage dtype (`Format.storage_dtype`) holding exactly
    the values x (for a `Packed` layout: uint8, two codes per byte along the
    last axis).  Raises InvalidArgument if any value is not in fmt."""
    if isinstance(fmt, Packed):
        x = _f64(x)
        _require_representable(x, fmt.fmt, "encode")
        return pack(to_bits(x, fmt.fmt), fmt.order)
    fmt = _fmt(fmt)
    x = _f64(x)
    _require_representable(x, fmt, "encode")
    if fmt.storage_dtype == torch.uint8 or fmt.bits == 8:
        raw = to_bits(x, fmt).to(torch.uint8)
        return raw if fmt.storage_dtype == torch.uint8 else raw.view(fmt.storage_dtype)
    return x.to(fmt.storage_dtype)  # exact: every value is representable



# -- packed sub-byte storage ------------------------------------------------------

PACK_ORDERS = ("low_first", "high_first")


@dataclass(frozen=True)
class Packed:
    """A storage layout, not a format: two codes of the 4-bit format ``fmt`` per
    byte along the last axis.  ``order`` says which nibble holds the first of
    each pair: "low_first" puts element 2i in bits 0-3 and 2i+1 in bits 4-7 (the
    layout of torch.float4_e2m1fn_x2 and of Triton's ``tl.dot_scaled`` operands);
    "high_first" the reverse.  Nothing in the bytes tells the two apart, so a
    reference program that stores packed codes names its order."""

    fmt: Format
    order: str = "low_first"

    def __post_init__(self):
        if not isinstance(self.fmt, Format) or self.fmt.bits != 4:
            raise InvalidArgument(f"Packed({self.fmt!r}): packing holds two 4-bit codes per byte; "
                                  f"use a 4-bit format such as numoracle.formats.e2m1.")
        _choice(self.order, PACK_ORDERS, "order")

    def __repr__(self) -> str:
        return f"{self.fmt.name}x2({self.order})"

    def stored_shape(self, shape) -> tuple:
        """The shape of the bytes holding values of ``shape`` (its last axis even)."""
        shape = tuple(shape)
        if not shape or shape[-1] % 2:
            raise InvalidArgument(f"{self!r}: the last axis must have an even length to pack two codes per "
                                  f"byte, got shape {shape}; pad it to an even length.")
        return shape[:-1] + (shape[-1] // 2,)


def pack(bits, order: str = "low_first") -> torch.Tensor:
    """4-bit codes (integers in [0, 16), last axis even) packed two per byte (uint8)."""
    _choice(order, PACK_ORDERS, "order")
    b = torch.as_tensor(bits).to(torch.int64)
    if b.ndim == 0 or b.shape[-1] % 2:
        raise InvalidArgument(f"pack: the last axis must have an even length, got shape {tuple(b.shape)}.")
    if bool(((b < 0) | (b > 15)).any()):
        raise InvalidArgument("pack: codes must be 4-bit patterns in [0, 16).")
    first, second = b[..., 0::2], b[..., 1::2]
    lo, hi = (first, second) if order == "low_first" else (second, first)
    return (lo | (hi << 4)).to(torch.uint8)


def unpack(packed, order: str = "low_first") -> torch.Tensor:
    """The 4-bit codes (int64, twice as many along the last axis) of packed bytes."""
    _choice(order, PACK_ORDERS, "order")
    if not isinstance(packed, torch.Tensor) or packed.element_size() != 1 or packed.dtype.is_complex:
        raise InvalidArgument("unpack expects a tensor of bytes (uint8 or float4_e2m1fn_x2).")
    if packed.ndim == 0:
        raise InvalidArgument("unpack expects at least one axis of bytes, got a scalar.")
    b = packed.contiguous().view(torch.uint8).to(torch.int64)
    lo, hi = b & 0xF, b >> 4
    first, second = (lo, hi) if order == "low_first" else (hi, lo)
    return torch.stack([first, second], dim=-1).reshape(*b.shape[:-1], 2 * b.shape[-1])


def _decode_packed(t: torch.Tensor, layout: Packed) -> torch.Tensor:
    if not isinstance(t, torch.Tensor) or t.element_size() != 1 or t.dtype not in (
            torch.uint8, getattr(torch, "float4_e2m1fn_x2", torch.uint8)):
        raise InvalidArgument(f"decode with {layout!r} expects packed bytes (uint8 or float4_e2m1fn_x2), "
                              f"got {getattr(t, 'dtype', type(t).__name__)}.")
    return from_bits(unpack(t, layout.order), layout.fmt)
