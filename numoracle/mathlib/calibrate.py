"""``numoracle calibrate``: measure the math library of a backend and write a
math-library profile (docs/design.md §5).

For each profile function (``exp``, ``exp2``, ``log``, ``log2``, ``rsqrt``,
``sqrt``, ``sqrt_rn``, ``div``, ``div_rn``, ``sigmoid``, ``tanh``, ``erf``,
``sin``, ``cos``) every kernel call that stands for it (``tl.exp`` and
``tl.exp2(x * log2e)``, the exp2 form a kernel may use instead, with its
fp32-rounded product; ``tl.math.rsqrt`` and ``libdevice.rsqrt``; ``1.0 / x``
and ``x / y`` ...) is launched as a Triton kernel on the chosen backend over

* edge cases: powers of two and their fp32 neighbours, subnormals, +-0, the
  overflow / underflow thresholds with 64 fp32 neighbours either side, the
  domain boundaries, inputs with exact results (``log2(2^k)``,
  ``sqrt(4^k)``), inputs whose exact result lies within a hair of a rounding
  tie (``sqrt``, division), the fp32 values nearest ``k*pi/2`` (sin, cos);
* a dense sweep: fp32 bit patterns evenly spaced over the domain (every
  binade equally, subnormals included);
* uniform random inputs over the range where the function is used;
* then every fp32 neighbour (+-samples/512) of the 32 inputs with the largest
  errors (``--refine``): errors cluster, and this finds maxima that random
  sampling misses (on the interpreter it finds numpy's documented float32
  maxima, 2.52 ulp for exp and 3.83 for log, which 2^22 random inputs miss).

Each result is compared with the exact value.  The error unit is the one the
calculus uses (``calculus.tracked._library_error``): the fp32 ulp of the
binade of the *exact* value (2^-149 below 2^-126).  Under flush-to-zero the
calculus also allows an absolute 2^-126, so the measured excess over that is
what the ulp model must cover.

Exact values, fast and checked
------------------------------
The exact value comes from a float64 evaluation (numpy / scipy); a float64
libm result is within a few float64 ulps, i.e. within 2^-50 relative, far
inside the 2^-40 the measurement needs (an error of 2^-40 relative moves a
measured fp32 ulp error by at most 2^-16 ulp).  That is *checked*, not
assumed: on every call the 256 inputs with the largest measured errors, 256
random inputs and up to 512 edge cases are re-evaluated with mpmath at 113
bits; a float64 value more than 2^-40 (relative) away is replaced by mpmath's,
and if more than 1% of the checked values are, mpmath is used for all inputs
of that call.  Measured errors within 2^-12 ulp of 0.5 (where "correctly
rounded or not" is decided) are recomputed with mpmath.

The model
---------
``ulps(x) = min(a + b*|x|, cap)``.  ``b`` and ``cap`` are fitted only for
``exp`` and ``sigmoid`` (``tl.exp`` is ``ex2.approx(x*log2 e)`` on NVIDIA,
whose error grows with |x| -- about |x| ulps up to |x| = 64, then level:
the rounding of x*log2 e is a fixed fraction of its ulp):
(a, b >= 0) is the line above every measured point with the smallest bound
at |x| = ``TYPICAL_X`` (a linear programme on per-bin maxima, each bin's
point moved to its smallest |x|, which is conservative because b >= 0), and
``cap`` the largest measured error, which bounds the far end the line
overshoots.  The arguments kernels pass most lie near 0 (a stable softmax's
x - max, a gate's sigmoid): a line fitted for the middle of the range gave
them 20x the measured error (docs/results/2026-12-07-exp-fit.md).  Other
functions: a = the maximum.  The profile's bound is the fit times
(1 + margin), rounded up to 1/64 ulp.  A function is written as
correctly rounded (a = 0.5, which the calculus treats as one rounding) only
when every measured error is <= 0.5 ulp *and* the call is correctly rounded
by specification (``tl.sqrt_rn``, ``tl.math.div_rn``; on the interpreter also
``tl.sqrt`` and ``/``, which numpy evaluates with IEEE float32 operations).

Flush-to-zero
-------------
Per function the run records whether subnormal inputs behave as zero and
whether subnormal results are flushed; the profile's ``ftz`` is true when any
function flushes.  Points the calculus treats as outside the domain under FTZ
(subnormal arguments of rsqrt, log, log2 and division) are left out; any
other point no ulp model can cover (e.g. ``sqrt`` of a subnormal flushed to
0) is reported as *uncovered* with examples, and the exit status is 1.

Usage::

    numoracle calibrate --backend interpreter --out interp.json
    numoracle calibrate --backend gpu --out h200.json --samples 4194304
"""

from __future__ import annotations

import datetime as _dt
import math
import platform
import time
import warnings
from dataclasses import dataclass
from typing import Callable

import numpy as np

from ..errors import InvalidArgument
from . import FUNCTION_NAMES, ErrorModel, from_dict

MIN_NORMAL = 2.0**-126
MIN_SUB = 2.0**-149
FLT_MAX = float(np.finfo(np.float32).max)
EXP_LIMIT = 88.72          # calculus.functions.FP32_EXP_LIMIT
EXP2_LIMIT = 127.99        # calculus.functions.FP32_EXP2_LIMIT
SINCOS_LIMIT = 1e5
REF_TOL = 2.0**-40         # required relative accuracy of the float64 reference
TIE_BAND = 2.0**-12        # errors this close to 0.5 ulp are recomputed with mpmath
MP_PREC = 113
GROWING = ("exp", "sigmoid")            # functions fitted with min(a + b|x|, cap)
TYPICAL_X = 1.0                         # where the growing line is made tightest
# Profile functions whose subnormal arguments the calculus treats as outside the domain under
# FTZ (calculus.tracked._FTZ_POLES, where division is "reciprocal"): calibrate leaves exactly
# those points out, so that a function flushing other arguments shows up as *uncovered*.
_CALCULUS_TO_PROFILE = {"reciprocal": ("div", "recip", "div_rn"), "sqrt": ("sqrt", "sqrt_rn")}


def _ftz_poles() -> tuple:
    try:
        from ..calculus.tracked import _FTZ_FLUSH_ABS, _FTZ_POLES
    except ImportError:  # pragma: no cover
        _FTZ_POLES, _FTZ_FLUSH_ABS = ("rsqrt", "log", "log2", "reciprocal"), {}
    out = []
    # poles leave the domain; flushes of functions finite at 0 get an absolute term: either
    # way the calculus covers subnormal arguments apart from the ulp bound
    for name in tuple(_FTZ_POLES) + tuple(_FTZ_FLUSH_ABS):
        out.extend(_CALCULUS_TO_PROFILE.get(name, (name,)))
    return tuple(out)


FTZ_POLES = _ftz_poles()
CR_BY_SPEC = {"interpreter": ("sqrt_rn", "div_rn", "sqrt", "div", "recip"), "gpu": ("sqrt_rn", "div_rn")}
ALIASES = {"reciprocal": "recip"}


# --------------------------------------------------------------------------
# fp32 helpers
# --------------------------------------------------------------------------

def _f32(values) -> np.ndarray:
    with np.errstate(over="ignore", invalid="ignore"):
        return np.asarray(values, dtype=np.float64).astype(np.float32)


def _ordered_to_f32(k: np.ndarray) -> np.ndarray:
    """Integers in value order -> float32 (0 -> +0.0, -1 -> -min subnormal)."""
    k = np.asarray(k, dtype=np.int64)
    bits = np.where(k >= 0, k, (-k) | 0x80000000).astype(np.uint32)
    return bits.view(np.float32)


def _f32_to_ordered(x) -> np.ndarray:
    b = _f32(x).view(np.uint32).astype(np.int64)
    return np.where(b & 0x80000000, -(b & 0x7FFFFFFF), b)


def _neighbours(values, k: int) -> np.ndarray:
    """Each fp32 value with its k neighbours either side."""
    o = _f32_to_ordered(values)
    steps = np.arange(-k, k + 1, dtype=np.int64)
    out = _ordered_to_f32((o[:, None] + steps[None, :]).reshape(-1))
    return out[np.isfinite(out)]


def _sweep(lo: float, hi: float, n: int) -> np.ndarray:
    """n fp32 values evenly spaced in bit-pattern order over [lo, hi]."""
    a, b = int(_f32_to_ordered([lo])[0]), int(_f32_to_ordered([hi])[0])
    return _ordered_to_f32(np.unique(np.linspace(a, b, n).round().astype(np.int64)))


def _pow2(kmin: int, kmax: int, signs=(1.0,)) -> np.ndarray:
    p = np.exp2(np.arange(kmin, kmax + 1, dtype=np.float64))
    return np.concatenate([_neighbours(s * p, 1) for s in signs])


# Functions whose exact values lie strictly inside (-1, 1): their unit is the ulp of a value
# below 1 even where the float64 reference rounds the exact value to +-1 (a saturated tanh),
# as the calculus counts them (calculus.functions strict_bound, MathProfile.units_below_one).
BELOW_ONE = ("sigmoid", "tanh", "erf")
_BELOW_ONE_MAX = 1.0 - 2.0 ** -24          # the largest fp32 value below 1


def ulp_of_exact(v64: np.ndarray, key: str | None = None) -> np.ndarray:
    """fp32 ulp of the binade of each exact value (2^-149 below 2^-126): the
    unit of the calculus's library-error bound; for ``key`` in BELOW_ONE, of the
    binade below 1 where |v64| is 1."""
    a = np.abs(v64)
    if key in BELOW_ONE:
        a = np.minimum(a, _BELOW_ONE_MAX)
    _, e = np.frexp(a)
    u = np.ldexp(1.0, (e - 24).astype(np.int64))
    return np.where((a < MIN_NORMAL) | (a == 0), MIN_SUB, u)


def _subnormals(n: int = 40) -> np.ndarray:
    k = np.unique(np.concatenate([np.arange(1, 9), np.geomspace(1, 0x7FFFFF, n).round(), [0x7FFFFF, 0x400000]]))
    return _ordered_to_f32(k.astype(np.int64))


def _near_ties(rng, n: int, kind: str) -> tuple:
    """Inputs whose exact sqrt / quotient lies within a hair of a midpoint
    between two fp32 values (the hard cases of correct rounding)."""
    q = _f32(rng.uniform(1.0, 2.0, n) * np.exp2(rng.integers(-20, 21, n)))
    mid = q.astype(np.float64) + ulp_of_exact(q.astype(np.float64)) / 2
    if kind == "sqrt":
        return (_f32(mid * mid),)
    y = _f32(rng.uniform(1.0, 2.0, n) * np.exp2(rng.integers(-20, 21, n)))
    return _f32(mid * y.astype(np.float64)), y


# --------------------------------------------------------------------------
# The functions
# --------------------------------------------------------------------------

def _erf64(x):
    try:
        from scipy.special import erf
    except ImportError:  # the GPU machine may have no scipy: math.erf is as accurate, only slower
        return np.vectorize(math.erf, otypes=[np.float64])(x)
    return erf(x)


@dataclass(frozen=True)
class Spec:
    key: str
    calls: tuple                      # kernel call labels (see _calibrate_kernels.CALLS)
    ref64: Callable                   # float64 reference (x) or (x, y)
    mp: Callable                      # mpmath reference on mpf
    domain: Callable                  # calculus domain (without FTZ), on float64 x (and y)
    inputs: Callable                  # (rng, n) -> (edges tuple-of-arrays, sweep, random)
    arity: int = 1


def _unary_inputs(edges: Callable, sweep: tuple, rand: Callable):
    def make(rng, n):
        e = _f32(edges(rng))
        s = _sweep(sweep[0], sweep[1], max(2, n // 2))
        r = _f32(rand(rng, max(1, n - n // 2)))
        return (e,), (s,), (r,)
    return make


def _exp_edges(rng):
    th = [math.log(FLT_MAX), math.log(MIN_NORMAL), math.log(MIN_SUB), EXP_LIMIT, 0.0]
    return np.concatenate([_neighbours(th, 64), _pow2(-149, 6, (1.0, -1.0)), np.arange(-104, 89.0),
                           _subnormals(), -_subnormals(), [0.0, -0.0]])


def _exp2_edges(rng):
    ints = np.arange(-150, 128.0)
    return np.concatenate([_neighbours(ints, 2), ints + 0.5, _neighbours([EXP2_LIMIT, 0.0], 64),
                           _pow2(-149, 6, (1.0, -1.0)), _subnormals(), -_subnormals()])


def _log_edges(rng):
    return np.concatenate([_neighbours([1.0], 256), _pow2(-149, 127), _neighbours([math.e, 10.0, FLT_MAX], 8),
                           _subnormals(), rng.uniform(0.5, 2.0, 4096)])


def _sqrt_edges(rng):
    return np.concatenate([_pow2(-149, 127), _subnormals(), _near_ties(rng, 4096, "sqrt")[0],
                           _neighbours([FLT_MAX, 1.0, 4.0], 8)])


def _recip_edges(rng):
    base = np.concatenate([_pow2(-149, 127), _subnormals(), _neighbours([FLT_MAX, 3.0, 10.0], 8),
                           _neighbours([2.0**126, 2.0**127, 2.0**-127], 16)])
    m = 1.0 / _near_ties(rng, 2048, "sqrt")[0].astype(np.float64) ** 0.5   # quotients near ties of 1/x
    return np.concatenate([base, -base, _f32(m)])


def _sigmoid_edges(rng):
    th = [-EXP_LIMIT, -math.log(FLT_MAX), -math.log(MIN_NORMAL), 16.635532, -16.635532, 0.0, 88.0, 104.0]
    return np.concatenate([_neighbours(th, 64), _pow2(-149, 6, (1.0, -1.0)), np.arange(-88, 105.0),
                           _subnormals(), -_subnormals()])


def _tanh_edges(rng):
    return np.concatenate([_pow2(-149, 7, (1.0, -1.0)), _subnormals(), -_subnormals(),
                           _neighbours([0.55, 0.6, 9.0, 9.1, 10.0, -9.0, 20.0, FLT_MAX, -FLT_MAX], 16)])


def _erf_edges(rng):
    return np.concatenate([_pow2(-149, 7, (1.0, -1.0)), _subnormals(), -_subnormals(),
                           _neighbours([0.84375, 1.25, 2.857, 3.9, 4.0, 6.0, 10.0, -3.9, FLT_MAX], 16)])


def _sincos_edges(rng):
    k = np.concatenate([np.arange(-2000, 2001), np.unique(np.geomspace(2001, SINCOS_LIMIT / (math.pi / 2) - 1,
                                                                      2000).round())])
    near = _neighbours(k * (math.pi / 2), 2)
    near = near[np.abs(near) <= SINCOS_LIMIT]
    return np.concatenate([near, _pow2(-149, 16, (1.0, -1.0)), _subnormals(), -_subnormals()])


def _div_inputs(rng, n):
    ex, ey = _near_ties(rng, 4096, "div")
    sub = np.concatenate([_subnormals(), _pow2(-149, -120)])
    # subnormal numerators over small divisors have normal quotients: a divider that flushes
    # its inputs gives 0 there, which no ulp model covers
    edges_x = np.concatenate([ex, np.ones(sub.size), sub, sub, _pow2(-126, 127), np.full(255, 3.0)])
    edges_y = np.concatenate([ey, sub, np.full(sub.size, 3.0), np.full(sub.size, 2.0**-20), np.full(254, 3.0),
                              _pow2(-126, 127)])
    m = min(edges_x.size, edges_y.size)
    half = max(1, n // 2)
    sx = rng.standard_normal(half) * np.exp2(rng.uniform(-126, 127, half))
    sy = rng.standard_normal(half) * np.exp2(rng.uniform(-126, 127, half))
    rest = max(1, n - half)
    rx = rng.uniform(-1, 1, rest) * np.exp2(rng.uniform(-100, 100, rest))
    ry = rng.uniform(-1, 1, rest) * np.exp2(rng.uniform(-100, 100, rest))
    return (_f32(edges_x[:m]), _f32(edges_y[:m])), (_f32(sx), _f32(sy)), (_f32(rx), _f32(ry))


def _mp():
    import mpmath

    return mpmath


def _recip_or_div(x, y=None):
    return 1.0 / x if y is None else x / y


SPECS = {
    "exp": Spec("exp", ("tl.exp", "tl.exp2(x * log2e)"), np.exp, lambda m, x: m.exp(x), lambda x: x <= EXP_LIMIT,
                _unary_inputs(_exp_edges, (-104.0, EXP_LIMIT), lambda r, n: r.uniform(-104.0, EXP_LIMIT, n))),
    "exp2": Spec("exp2", ("tl.exp2",), np.exp2, lambda m, x: m.power(2, x), lambda x: x <= EXP2_LIMIT,
                 _unary_inputs(_exp2_edges, (-150.0, EXP2_LIMIT), lambda r, n: r.uniform(-150.0, EXP2_LIMIT, n))),
    "log": Spec("log", ("tl.log",), np.log, lambda m, x: m.log(x), lambda x: x > 0,
                _unary_inputs(_log_edges, (MIN_SUB, FLT_MAX), lambda r, n: np.exp(r.uniform(-85, 88, n)))),
    "log2": Spec("log2", ("tl.log2",), np.log2, lambda m, x: m.log(x, 2), lambda x: x > 0,
                 _unary_inputs(_log_edges, (MIN_SUB, FLT_MAX), lambda r, n: np.exp(r.uniform(-85, 88, n)))),
    "rsqrt": Spec("rsqrt", ("tl.math.rsqrt", "libdevice.rsqrt"), lambda x: 1.0 / np.sqrt(x),
                  lambda m, x: 1 / m.sqrt(x), lambda x: x > 0,
                  _unary_inputs(_sqrt_edges, (MIN_SUB, FLT_MAX), lambda r, n: np.exp(r.uniform(-85, 88, n)))),
    "sqrt": Spec("sqrt", ("tl.sqrt",), np.sqrt, lambda m, x: m.sqrt(x), lambda x: x > 0,
                 _unary_inputs(_sqrt_edges, (MIN_SUB, FLT_MAX), lambda r, n: r.uniform(1.0, 4.0, n))),
    "sqrt_rn": Spec("sqrt_rn", ("tl.sqrt_rn",), np.sqrt, lambda m, x: m.sqrt(x), lambda x: x > 0,
                    _unary_inputs(_sqrt_edges, (MIN_SUB, FLT_MAX), lambda r, n: r.uniform(1.0, 4.0, n))),
    "recip": Spec("recip", ("1.0 / x",), _recip_or_div, None, None, None),
    "div": Spec("div", ("x / y",), _recip_or_div, None, None, None),
    "div_rn": Spec("div_rn", ("tl.math.div_rn",), _recip_or_div, lambda m, x, y: x / y,
                   lambda x, y: (y != 0), _div_inputs, arity=2),
    "sigmoid": Spec("sigmoid", ("tl.sigmoid",), lambda x: 1.0 / (1.0 + np.exp(-x)),
                    lambda m, x: 1 / (1 + m.exp(-x)), lambda x: x >= -EXP_LIMIT,
                    _unary_inputs(_sigmoid_edges, (-EXP_LIMIT, 104.0), lambda r, n: r.uniform(-EXP_LIMIT, 30.0, n))),
    "tanh": Spec("tanh", ("libdevice.tanh",), np.tanh, lambda m, x: m.tanh(x), lambda x: np.isfinite(x),
                 _unary_inputs(_tanh_edges, (-20.0, 20.0), lambda r, n: r.uniform(-10.0, 10.0, n))),
    "erf": Spec("erf", ("tl.math.erf", "libdevice.erf"), _erf64, lambda m, x: m.erf(x), lambda x: np.isfinite(x),
                _unary_inputs(_erf_edges, (-10.0, 10.0), lambda r, n: r.uniform(-5.0, 5.0, n))),
    "sin": Spec("sin", ("tl.sin",), np.sin, lambda m, x: m.sin(x), lambda x: np.abs(x) <= SINCOS_LIMIT,
                _unary_inputs(_sincos_edges, (-SINCOS_LIMIT, SINCOS_LIMIT), lambda r, n: r.uniform(-100, 100, n))),
    "cos": Spec("cos", ("tl.cos",), np.cos, lambda m, x: m.cos(x), lambda x: np.abs(x) <= SINCOS_LIMIT,
                _unary_inputs(_sincos_edges, (-SINCOS_LIMIT, SINCOS_LIMIT), lambda r, n: r.uniform(-100, 100, n))),
}


def _call_spec(key: str, call: str) -> Spec:
    """The spec a call is measured with (``recip`` is division's unary call, ``div`` its binary one)."""
    if key in ("div", "recip"):
        if call == "1.0 / x":
            return Spec("recip", (call,), lambda x: 1.0 / x, lambda m, x: 1 / x, lambda x: x != 0,
                        _unary_inputs(_recip_edges, (-FLT_MAX, FLT_MAX),
                                      lambda r, n: r.choice([-1.0, 1.0], n) * np.exp(r.uniform(-87, 88, n))))
        return Spec("div", (call,), lambda x, y: x / y, lambda m, x, y: x / y, lambda x, y: y != 0,
                    _div_inputs, arity=2)
    return SPECS[key]


# --------------------------------------------------------------------------
# Running kernels
# --------------------------------------------------------------------------

class Runner:
    def __init__(self, backend: str):
        import torch

        from .. import backends

        self.backend = backends.select(backend).name
        self.device = backends.resolve(self.backend).device
        from . import _calibrate_kernels as K

        self.K = K
        self.torch = torch
        self.block = 1024 if self.backend == "gpu" else 16384

    def __call__(self, call: str, x: np.ndarray, y: np.ndarray | None = None) -> np.ndarray:
        torch = self.torch
        n = x.size
        if n == 0:
            return np.zeros(0, np.float32)
        xt = torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32)).to(self.device)
        yt = xt if y is None else torch.from_numpy(np.ascontiguousarray(y, dtype=np.float32)).to(self.device)
        out = torch.empty(n, dtype=torch.float32, device=self.device)
        grid = ((n + self.block - 1) // self.block, )
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore", RuntimeWarning)
            self.K.math_call_kernel[grid](xt, yt, out, n, CALL=self.K.CODES[call], BLOCK=self.block)
        if self.device == "cuda":
            torch.cuda.synchronize()
        return out.cpu().numpy()

    def device_name(self) -> str:
        if self.backend == "gpu":
            return self.torch.cuda.get_device_name(0)
        return f"CPU ({platform.processor() or platform.machine()}), Triton interpreter with numoracle repairs"


# --------------------------------------------------------------------------
# Exact values
# --------------------------------------------------------------------------

def _mp_values(spec: Spec, args: tuple, idx: np.ndarray) -> np.ndarray:
    """mpmath values (as float64, rounded once) at the given indices."""
    m = _mp()
    out = np.empty(idx.size, dtype=np.float64)
    with m.workprec(MP_PREC):
        for j, i in enumerate(idx):
            v = spec.mp(m, *[m.mpf(float(a[i])) for a in args])
            out[j] = float(v)
    return out


def _mp_ulp_errors(spec: Spec, args: tuple, got: np.ndarray, idx: np.ndarray, slack: float) -> np.ndarray:
    """Errors in ulps computed entirely with mpmath (for errors near 0.5)."""
    m = _mp()
    out = np.empty(idx.size, dtype=np.float64)
    with m.workprec(MP_PREC):
        for j, i in enumerate(idx):
            v = spec.mp(m, *[m.mpf(float(a[i])) for a in args])
            ulp = float(ulp_of_exact(np.array([float(v)]), spec.key)[0])
            err = abs(m.mpf(float(got[i])) - v) - slack
            out[j] = float(max(err, 0) / ulp)
    return out


def _reference(spec: Spec, args: tuple, rng) -> tuple:
    """float64 exact values, checked against mpmath; returns (ref, report)."""
    with np.errstate(all="ignore"):
        ref = np.asarray(spec.ref64(*[a.astype(np.float64) for a in args]), dtype=np.float64)
    return ref, {}


def _check_reference(spec: Spec, args: tuple, ref: np.ndarray, check_idx: np.ndarray) -> dict:
    mpv = _mp_values(spec, args, check_idx)
    with np.errstate(all="ignore"):
        dev = np.where(mpv == 0, np.where(ref[check_idx] == 0, 0.0, np.inf),
                       np.abs(ref[check_idx] - mpv) / np.abs(mpv))
    dev = np.where(np.isnan(dev), 0.0, dev)
    bad = dev > REF_TOL
    ref[check_idx[bad]] = mpv[bad]
    rep = {"checked_with_mpmath": int(check_idx.size), "max_rel_deviation": float(dev.max()) if dev.size else 0.0,
           "replaced_by_mpmath": int(bad.sum()), "all_mpmath": False}
    if check_idx.size and bad.sum() > 0.01 * check_idx.size:
        allidx = np.arange(ref.size)
        ref[:] = _mp_values(spec, args, allidx)
        rep["all_mpmath"] = True
    return rep


# --------------------------------------------------------------------------
# Measuring one call
# --------------------------------------------------------------------------

def _ftz_behaviour(run: Runner, key: str, call: str, spec: Spec) -> dict:
    """Do subnormal inputs act as zero? Are subnormal results flushed?"""
    subs = _subnormals(12)
    out = {"inputs": None, "outputs": None}
    if spec.arity == 1:
        probe = run(call, np.concatenate([subs, [0.0]]).astype(np.float32))
        at_sub, at_zero = probe[:-1], probe[-1]
        with np.errstate(all="ignore"):
            exact = np.asarray(spec.ref64(subs.astype(np.float64)), dtype=np.float64)
            zero_exact = np.asarray(spec.ref64(np.zeros(1)), dtype=np.float64)[0]
        informative = np.isfinite(exact) & (_f32(exact) != _f32([zero_exact])[0])
        if informative.any():
            same = (at_sub[informative].view(np.uint32) == np.float32(at_zero).view(np.uint32)) | \
                   (np.isnan(at_sub[informative]) & np.isnan(at_zero))
            out["inputs"] = bool(same.all())
    else:
        # 2^-30 / subnormal is finite (< 2^120) unless the divisor is flushed to zero
        x = np.full(subs.size, 2.0**-30, np.float32)
        probe = run(call, x, subs)
        out["inputs"] = bool(np.isinf(probe).all())
    # subnormal results
    cases = {"exp": [-90.0, -95.0, -100.0], "exp2": [-130.0, -140.0, -145.0], "sigmoid": [-87.5, -88.0, -88.5],
             "sin": list(subs[-4:]), "tanh": list(subs[-4:]), "erf": list(subs[-6:-2])}
    if key in cases:
        xs = np.array(cases[key], dtype=np.float32)
        got = run(call, xs)
        with np.errstate(all="ignore"):
            ex = np.asarray(spec.ref64(xs.astype(np.float64)))
        sub = (np.abs(ex) < MIN_NORMAL) & (np.abs(ex) >= MIN_SUB)
        if sub.any():
            out["outputs"] = bool((got[sub] == 0).all())
    elif key in ("div", "recip", "div_rn"):
        x = np.array([2.0**-120, 2.0**-125, 1.0], dtype=np.float32)
        y = np.array([2.0**10, 2.0**5, 2.0**127], dtype=np.float32)
        got = run(call, x, y) if spec.arity == 2 else run(call, np.array([2.0**127, 2.0**126.5], np.float32))
        out["outputs"] = bool((got == 0).all())
    return out


def _refine_points(spec: Spec, x: np.ndarray, got: np.ndarray, ftz: bool, k: int, radius: int) -> np.ndarray:
    """The fp32 neighbours (+-radius) of the k inputs with the largest float64-measured errors."""
    x64 = x.astype(np.float64)
    with np.errstate(all="ignore"):
        ref = np.asarray(spec.ref64(x64), dtype=np.float64)
        ok = np.asarray(spec.domain(x64), dtype=bool) & np.isfinite(ref) & (np.abs(ref) <= FLT_MAX)
        if ftz:
            ok &= np.abs(x64) >= MIN_NORMAL
        err = np.abs(got.astype(np.float64) - ref) / ulp_of_exact(ref, spec.key)
    err = np.where(ok & np.isfinite(err), err, -1.0)
    top = np.argsort(err)[-k:]
    top = top[err[top] >= 0]
    if top.size == 0:
        return np.zeros(0, np.float32)
    o = _f32_to_ordered(x[top])
    steps = np.arange(-radius, radius + 1, dtype=np.int64)
    pts = _ordered_to_f32(np.unique((o[:, None] + steps[None, :]).reshape(-1)))
    return pts[np.isfinite(pts)]


# Candidate exact points (x, f(x)): arguments whose exact result is an fp32 value that a math
# library plausibly returns exactly (IEEE special cases, e.g. exp(+-0) = 1, cos(+-0) = 1).  A
# point enters a profile only where every kernel call of the function returns f(x) bit for bit,
# for +0 and -0 alike where x is 0 (the calculus cannot tell them apart).
EXACT_CANDIDATES = {
    "exp": ((0.0, 1.0),), "exp2": ((0.0, 1.0), (1.0, 2.0), (-1.0, 0.5)),
    "log": ((1.0, 0.0),), "log2": ((1.0, 0.0), (2.0, 1.0), (0.5, -1.0)),
    "rsqrt": ((1.0, 1.0), (4.0, 0.5)), "sqrt": ((0.0, 0.0), (1.0, 1.0), (4.0, 2.0)),
    "sqrt_rn": ((0.0, 0.0), (1.0, 1.0), (4.0, 2.0)),
    "sigmoid": ((0.0, 0.5),), "tanh": ((0.0, 0.0),), "erf": ((0.0, 0.0),),
    "sin": ((0.0, 0.0),), "cos": ((0.0, 1.0),),
}


def exact_points(run: Runner, key: str, copies: int = 4096) -> list:
    """The candidate points of ``key`` at which every one of its kernel calls returns the
    exact value, on ``copies`` lanes each (all must agree), [[x, f(x)], ...]."""
    found = []
    for x, fx in EXACT_CANDIDATES.get(key, ()):
        ok = True
        for call in SPECS[key].calls:
            for arg in ((x, -x) if x == 0 else (x,)):
                got = run(call, np.full(copies, arg, np.float32))
                ok = ok and bool(np.all(got == np.float32(fx)))
        if ok:
            found.append([x, fx])
    return found


def measure_call(run: Runner, key: str, call: str, n: int, seed: int, ftz: bool, refine: int = 32) -> dict:
    spec = _call_spec(key, call)
    rng = np.random.default_rng(seed)
    edges, sweep, rand = spec.inputs(rng, n)
    classes = np.concatenate([np.full(edges[0].size, 0), np.full(sweep[0].size, 1), np.full(rand[0].size, 2)])
    args = tuple(np.concatenate([e, s, r]).astype(np.float32) for e, s, r in zip(edges, sweep, rand))
    t0 = time.time()
    got = run(call, *args)
    if spec.arity == 1 and refine:
        # errors cluster: look at every fp32 neighbour around the worst inputs found so far
        extra = _refine_points(spec, args[0], got, ftz, refine, max(64, n // (16 * refine)))
        got = np.concatenate([got, run(call, extra)])
        args = (np.concatenate([args[0], extra]), )
        classes = np.concatenate([classes, np.full(extra.size, 3)])
    t_kernel = time.time() - t0
    a64 = [a.astype(np.float64) for a in args]
    with np.errstate(all="ignore"):
        ref = np.asarray(spec.ref64(*a64), dtype=np.float64)
        domain = np.asarray(spec.domain(*a64), dtype=bool) & np.all([np.isfinite(a) for a in args], axis=0)
    pole = np.zeros_like(domain)
    if ftz and key in _ftz_poles():
        d = args[-1].astype(np.float64)
        pole = np.abs(d) < MIN_NORMAL
    in_range = np.isfinite(ref) & (np.abs(ref) <= FLT_MAX)
    valid = domain & ~pole & in_range
    slack = MIN_NORMAL if ftz else 0.0

    def errors(refv, idx=None):
        g = got.astype(np.float64) if idx is None else got[idx].astype(np.float64)
        rv = refv if idx is None else refv[idx]
        with np.errstate(all="ignore"):
            e = np.maximum(np.abs(g - rv) - slack, 0.0) / ulp_of_exact(rv, key)
        return np.where(np.isnan(e), np.inf, e)

    err = errors(ref)
    err[~valid] = 0.0
    # check the float64 reference where it matters most, plus random and edge points
    vidx = np.flatnonzero(valid)
    top = vidx[np.argsort(err[vidx])[-256:]] if vidx.size else vidx
    rnd = rng.choice(vidx, size=min(256, vidx.size), replace=False) if vidx.size else vidx
    edg = vidx[classes[vidx] == 0]
    edg = edg[rng.permutation(edg.size)[:512]]
    check_idx = np.unique(np.concatenate([top, rnd, edg]))
    ref_report = _check_reference(spec, args, ref, check_idx)
    err = errors(ref)
    err[~valid] = 0.0
    close = np.flatnonzero(valid & (np.abs(err - 0.5) <= TIE_BAND))
    if close.size:
        close = close[:20000]
        err[close] = _mp_ulp_errors(spec, args, got, close, slack)
    ref_report["tie_cases_recomputed_with_mpmath"] = int(close.size)
    # points no ulp model can cover: non-finite results for finite in-range exact values,
    # and (under FTZ) subnormal arguments flushed to zero with an error far beyond any ulp bound
    nonfinite = valid & ~np.isfinite(got)
    # (a subnormal argument with an error beyond any plausible ulp bound: the flush made it)
    ftz_flushed = valid & np.isfinite(got) & (np.abs(args[0]) < MIN_NORMAL) & (err > 64) if ftz else \
        np.zeros_like(valid)
    uncovered = nonfinite | ftz_flushed
    used = valid & ~uncovered
    xabs = np.abs(args[0].astype(np.float64))
    res = {
        "call": call, "function": key, "samples": int(got.size), "edge": int(edges[0].size),
        "sweep": int(sweep[0].size), "random": int(rand[0].size), "refine": int((classes == 3).sum()),
        "in_domain": int(used.sum()),
        "max_ulp": float(err[used].max()) if used.any() else 0.0,
        "max_ulp_by_class": {c: float(err[used & (classes == i)].max()) if (used & (classes == i)).any() else 0.0
                             for i, c in enumerate(("edge", "sweep", "random", "refine"))},
        "reference": ref_report, "kernel_seconds": round(t_kernel, 3),
    }
    if used.any():
        i = int(np.flatnonzero(used)[np.argmax(err[used])])
        res["worst"] = {"x": [float(a[i]) for a in args], "got": float(got[i]), "exact": float(ref[i])}
    if uncovered.any():
        idx = np.flatnonzero(uncovered)[:5]
        res["uncovered"] = {"count": int(uncovered.sum()), "nonfinite": int(nonfinite.sum()),
                            "ftz_flushed_arguments": int(ftz_flushed.sum()),
                            "examples": [{"x": [float(a[i]) for a in args], "got": float(got[i]),
                                          "exact": float(ref[i])} for i in idx]}
    res["_points"] = (xabs[used], err[used])
    return res


# --------------------------------------------------------------------------
# Fitting
# --------------------------------------------------------------------------

def _round_up(v: float, step: float = 1 / 64) -> float:
    return math.ceil(v / step - 1e-9) * step


def _upper_hull(xs: np.ndarray, rs: np.ndarray) -> list:
    """Vertices of the upper convex hull of points sorted by x (monotone chain)."""
    hull: list = []
    for p in zip(xs.tolist(), rs.tolist()):
        while len(hull) >= 2:
            (x1, y1), (x2, y2) = hull[-2], hull[-1]
            if (x2 - x1) * (p[1] - y1) - (y2 - y1) * (p[0] - x1) >= 0:   # hull[-1] lies on or below
                hull.pop()
            else:
                break
        hull.append(p)
    return hull


def _best_line(xs: np.ndarray, rs: np.ndarray, c: float) -> tuple:
    """The linear programme min a + b*c s.t. a + b*x_k >= r_k, a, b >= 0, solved
    exactly: an optimum is a vertex of the feasible (a, b) polygon -- a line
    through an edge of the upper hull with slope >= 0 and a >= 0, the
    horizontal line at max r, or the line through the origin -- and each of
    those covers every point."""
    best = (max(float(rs.max()), 0.0), 0.0)
    pos = xs > 0
    if not np.any(rs[~pos] > 0) and pos.any():             # through the origin (a = 0)
        b0 = max(float(np.max(rs[pos] / xs[pos])), 0.0)
        if b0 * c < best[0]:
            best = (0.0, b0)
    hull = _upper_hull(xs, rs)
    for (x1, y1), (x2, y2) in zip(hull, hull[1:]):
        slope = (y2 - y1) / (x2 - x1)
        if slope < 0:
            continue
        a = y1 - slope * x1
        if a < 0:
            continue
        if a + slope * c < best[0] + best[1] * c:
            best = (a, slope)
    return best


def fit_linear(xabs: np.ndarray, err: np.ndarray, bins: int = 2048) -> tuple:
    """(a, b) >= 0 with a + b*|x| >= every err, minimising the bound at
    |x| = TYPICAL_X."""
    if err.size == 0:
        return 0.0, 0.0
    xmax = float(xabs.max())
    if xmax == 0:
        return float(err.max()), 0.0
    edges = np.linspace(0.0, xmax, bins + 1)
    k = np.clip(np.searchsorted(edges, xabs, side="right") - 1, 0, bins - 1)
    bmax = np.full(bins, -np.inf)
    np.maximum.at(bmax, k, err)
    keep = np.isfinite(bmax)
    xs, rs = edges[:-1][keep], bmax[keep]
    a, b = _best_line(xs, rs, TYPICAL_X)
    # guard against solver tolerance: lift a until every point is covered
    a += max(0.0, float(np.max(err - (a + b * xabs))))
    return a, b


def fit_function(key: str, points: list, backend: str, margin: float) -> dict:
    xabs = np.concatenate([p[0] for p in points]) if points else np.zeros(0)
    err = np.concatenate([p[1] for p in points]) if points else np.zeros(0)
    mx = float(err.max()) if err.size else 0.0
    if key in CR_BY_SPEC.get(backend, ()) and mx <= 0.5:
        return {"max_ulp": mx, "fit": {"a": 0.5, "b": 0.0}, "bound": {"a": 0.5, "b": 0.0},
                "note": "correctly rounded (by specification, and every measured error <= 0.5 ulp)"}
    if key in GROWING:
        a, b = fit_linear(xabs, err)
    else:
        a, b = mx, 0.0
    ba, bb = _round_up(a * (1 + margin)), (_round_up(b * (1 + margin), 1 / 1024) if b else 0.0)
    if ba <= 0.5 and bb == 0:
        ba = _round_up(0.5 * (1 + margin))  # never claim correct rounding without a specification
    fit, bound = {"a": a, "b": b}, {"a": ba, "b": bb}
    cap = _round_up(mx * (1 + margin)) if bb else None
    if cap is not None and ba + bb * float(xabs.max()) > cap:   # the line overshoots: level it off there
        fit["cap"], bound["cap"] = mx, cap
    model = ErrorModel(bound["a"], bound["b"], bound.get("cap"))
    assert err.size == 0 or bool(np.all(err <= np.asarray(model.ulps(xabs)) + 1e-12)), key
    out = {"max_ulp": mx, "fit": fit, "bound": bound}
    if b:
        out["max_ulp_vs_bound_at_max_x"] = {"max_abs_x": float(xabs.max()),
                                            "bound": float(model.ulps(float(xabs.max())))}
    return out


# --------------------------------------------------------------------------
# The command
# --------------------------------------------------------------------------

def _versions() -> dict:
    import torch
    import triton

    return {"torch": torch.__version__, "triton": triton.__version__, "python": platform.python_version(),
            "numpy": np.__version__}


def calibrate(backend: str = "interpreter", functions=None, samples: int = 1 << 20, seed: int = 0,
              margin: float = 0.25, name: str | None = None, base: str | None = None, log=None,
              refine: int = 32, note: str | None = None) -> tuple:
    """Measure and fit; returns (profile dict, report dict, uncovered count)."""
    keys = list(FUNCTION_NAMES) if not functions else [ALIASES.get(f, f) for f in functions]
    unknown = [k for k in keys if k not in SPECS]
    if unknown:
        raise InvalidArgument(f"--functions {unknown}: unknown; expected some of {list(FUNCTION_NAMES)} "
                              f"(or 'reciprocal' for div).")
    if samples < 16:
        raise InvalidArgument(f"--samples {samples}: expected at least 16 per call.")
    run = Runner(backend)
    t0 = time.time()
    ftz_obs = {}
    for key in keys:
        for call in SPECS[key].calls:
            ftz_obs[call] = _ftz_behaviour(run, key, call, _call_spec(key, call))
    ftz = any(v for o in ftz_obs.values() for v in o.values())
    report, funcs, uncovered = {}, {}, 0
    for k_i, key in enumerate(keys):
        calls, points = {}, []
        for c_i, call in enumerate(SPECS[key].calls):
            res = measure_call(run, key, call, samples, seed + 1000 * k_i + c_i, ftz, refine)
            points.append(res.pop("_points"))
            res["ftz"] = ftz_obs[call]
            uncovered += res.get("uncovered", {}).get("count", 0)
            calls[call] = res
            if log:
                log(f"  {call:18s} {res['samples']:9d} samples, max {res['max_ulp']:.4g} ulp"
                    + (f", {res['uncovered']['count']} UNCOVERED" if "uncovered" in res else ""))
        fitted = fit_function(key, points, run.backend, margin)
        fitted["calls"] = calls
        fitted["exact"] = exact_points(run, key)
        fitted["samples"] = sum(c["samples"] for c in calls.values())
        report[key] = fitted
        funcs[key] = fitted["bound"]
        if log:
            b = fitted["bound"]
            log(f"{key:8s} max {fitted['max_ulp']:.4g} ulp -> bound {b['a']:g}" + (f" + {b['b']:g}|x|" if b['b'] else "")
                + (f", at most {b['cap']:g}" if "cap" in b else ""))
    inherited, inherited_exact = {}, {}
    base_below_one = False
    if base:
        from . import load

        bp = load(base)
        for k, m in bp.functions.items():
            if k not in funcs:
                funcs[k] = m.to_dict()
                inherited[k] = bp.name
                if bp.exact_points(k):
                    inherited_exact[k] = [list(q) for q in bp.exact_points(k)]
        ftz = ftz or bp.ftz
        base_below_one = bp.units_below_one
    # measured here, these functions' errors are in ulps below 1 (BELOW_ONE); inherited ones only
    # if the base says so
    below_one = all(k not in inherited or base_below_one for k in BELOW_ONE)
    prov = {
        "device": run.device_name(), "backend": run.backend, **_versions(),
        "date": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "margin": margin, "seed": seed, "samples_per_call": samples, "refine_worst": refine,
        "samples": {k: report[k]["samples"] for k in report},
        "ftz_observed": ftz_obs,
        "method": "numoracle calibrate: edge cases + dense fp32 bit-pattern sweep + uniform random inputs per "
                  "kernel call; error in fp32 ulps of the exact value's binade (for sigmoid, tanh and erf, "
                  "whose values lie inside (-1, 1), the binade below 1 where float64 rounds them to +-1) "
                  "against float64 references checked with mpmath (113 bits); bound = fit x (1 + margin), "
                  "rounded up to 1/64 ulp",
        "seconds": round(time.time() - t0, 1),
        "status": "measured",
    }
    if inherited:
        prov["inherited_from_base"] = inherited
    if note:
        prov["note"] = note
    if not name:   # "NVIDIA H200" -> "h200"; the interpreter -> "interpreter"
        name = run.backend if run.backend == "interpreter" else \
            (prov["device"].split()[-1].lower() if prov["device"].split() else "gpu")
    exact = {**inherited_exact, **{k: v["exact"] for k, v in report.items() if v.get("exact")}}
    # tl.dot's accumulation is not measured here: the interpreter's is float32 matmul (to nearest),
    # a GPU's the tensor-core model (docs/design.md §4.4)
    profile = {"name": name, "ftz": bool(ftz), "dot": "nearest" if run.backend == "interpreter" else "tensor_core",
               "units_below_one": below_one,
               "functions": {k: funcs[k] for k in FUNCTION_NAMES if k in funcs},
               "exact": {k: exact[k] for k in FUNCTION_NAMES if k in exact}, "provenance": prov,
               "measurements": {k: {kk: vv for kk, vv in v.items()} for k, v in report.items()}}
    from_dict(profile)  # the loader must read what we write
    return profile, report, uncovered
