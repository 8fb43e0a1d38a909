"""Format-aware element strategies (docs/design.md §8).

Hypothesis's own ``floats`` stops at 16/32/64-bit IEEE formats.  Here every
format numoracle knows is reachable value by value: formats of at most 16
bits are enumerated once (every encoding decoded exactly by
``formats.from_bits``), and a draw is an index into that table, ordered so
that Hypothesis shrinks toward 0, then small magnitudes, positives first.
Subnormals, the largest finite value, the fnuz and e8m0 oddities are all
plain entries of the table.
"""

from __future__ import annotations

import functools
import math

import numpy as np
import torch
from hypothesis import strategies as st

from .. import formats as F
from ..errors import InvalidArgument
from ._lazy import Lazy


@functools.lru_cache(maxsize=None)
def _table(name: str) -> tuple:
    """Every finite value of a format of <= 16 bits (and its infinities and
    NaN flags), sorted by (|x|, sign) so index 0 is the simplest value."""
    fmt = F.by_name(name)
    vals = F.from_bits(torch.arange(1 << fmt.bits, dtype=torch.int64), fmt)
    # every finite encoding is a distinct value (-0.0 and +0.0 included)
    finite = vals[torch.isfinite(vals)].numpy()
    order = np.lexsort((np.signbit(finite), np.abs(finite)))
    ordered = finite[order].tolist()
    return tuple(ordered), bool(torch.isinf(vals).any()), bool(torch.isnan(vals).any())


def values(fmt) -> tuple:
    """Every finite value of ``fmt`` (a format of at most 16 bits), simplest first."""
    fmt = F.by_name(fmt)
    if fmt.bits > 16:
        raise InvalidArgument(f"values({fmt.name!r}): {fmt.name} has {fmt.bits}-bit encodings, too many to "
                              f"enumerate; use floats({fmt.name!r}) to draw from it.")
    return _table(fmt.name)[0]


def floats(fmt, *, min_value=None, max_value=None, allow_nan=False, allow_infinity=False,
           allow_subnormal=True):
    """Values of ``fmt`` (any numoracle format name or Format) as Python floats,
    each exactly representable in ``fmt``.  For formats of at most 16 bits every
    representable value is reachable, subnormals and the largest finite value
    included; fp32 and fp64 draw through Hypothesis's IEEE floats."""
    kwargs = {k: v for k, v in dict(min_value=min_value, max_value=max_value, allow_nan=allow_nan,
                                     allow_infinity=allow_infinity, allow_subnormal=allow_subnormal).items()
              if v != {"allow_nan": False, "allow_infinity": False, "allow_subnormal": True}.get(k)}

    def build():
        try:
            f = F.by_name(fmt)
        except InvalidArgument as exc:
            raise InvalidArgument(f"floats(fmt={fmt!r}): {exc}") from None
        for name, b in (("min_value", min_value), ("max_value", max_value)):
            if b is not None and not isinstance(b, (int, float)):
                raise InvalidArgument(f"floats({f.name!r}, {name}={b!r}): expected a number or None.")
        lo = -math.inf if min_value is None else float(min_value)
        hi = math.inf if max_value is None else float(max_value)
        if lo > hi:
            raise InvalidArgument(f"floats({f.name!r}, min_value={min_value!r}, max_value={max_value!r}): "
                                  f"min_value must not exceed max_value.")
        if f.bits <= 16:
            table, has_inf, has_nan = _table(f.name)
            keep = [v for v in table if lo <= v <= hi and (allow_subnormal or v == 0 or abs(v) >= f.min_normal)]
            specials = []
            if allow_infinity and has_inf:
                specials += [x for x in (math.inf, -math.inf) if lo <= x <= hi]
            if allow_nan and has_nan:
                specials.append(math.nan)
            if not keep and not specials:
                raise InvalidArgument(f"floats({f.name!r}, min_value={min_value!r}, max_value={max_value!r}): "
                                      f"no finite {f.name} value lies in that range.")
            base = st.sampled_from(keep) if keep else st.nothing()
            return st.one_of(base, st.sampled_from(specials)) if specials else base
        if f.name in ("fp32", "tf32"):
            s = st.floats(min_value=min_value, max_value=max_value, allow_nan=allow_nan,
                          allow_infinity=allow_infinity, allow_subnormal=allow_subnormal, width=32)
            if f.name == "tf32":   # 10 explicit significand bits: round the drawn fp32 value
                s = s.map(lambda v: float(F.round(torch.tensor([v], dtype=torch.float64), F.tf32)[0]))
            return s
        return st.floats(min_value=min_value, max_value=max_value, allow_nan=allow_nan,
                         allow_infinity=allow_infinity, allow_subnormal=allow_subnormal)

    return Lazy("floats", (fmt,), kwargs, build)


def bits(fmt):
    """Raw encodings of ``fmt`` (ints in [0, 2**bits)), every pattern reachable,
    NaN patterns included: for kernels that take e2m1/e8m0 as raw bytes."""
    def build():
        f = F.by_name(fmt)
        if f.bits > 32:
            raise InvalidArgument(f"bits({f.name!r}): use floats() for 64-bit formats.")
        return st.integers(0, (1 << f.bits) - 1)
    return Lazy("bits", (fmt,), {}, build)
