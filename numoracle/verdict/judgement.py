"""Judging stored outputs against their regions: the rounding-interval check per mode
(``judge_masks``), an output's judgement in every mode (``RegionJudgement``) and in one
(``OutputJudgement``, what a ``Verdict`` holds).

A judgement's tensors are computed when first read: a verdict asked only for its status
never writes a mask (the compiled path returns its flags alone).  What computes them is
an object with one method per tensor (``Parts``); each property of a judgement caches
the method's result, so every field has one meaning."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Protocol

import torch

from .. import formats as F
from ..oracles import rounding_interval as RI


def judge_masks(fmt, centre, fixed, stat, taint, y, modes):
    """The rounding-interval check of stored values y in each of ``modes``: (rejected per
    mode, special), elements without a certificate excluded.  Pure tensor code: the
    compiled path runs it inside its graph."""
    keep = ~taint
    rejected = []
    for m in modes:
        r = fixed if m == "fixed" else stat
        rejected.append(~RI.accepted_interval(centre - r, centre + r, y, fmt) & keep)
    # special: NaN or an infinity where the region holds a finite value (an exact infinity's
    # region holds only itself: the same infinity is not special, the other one is rejected)
    return tuple(rejected), ~torch.isfinite(y) & keep & (y != centre)


class Parts(Protocol):
    """What an ``OutputJudgement``'s tensors are computed from (all float64 / bool, of the
    output's shape): the stored values (exact), the reference before the store, the bounds
    (lo, hi: the pre-store interval in the judgement's mode; qlo, qhi: the storage values
    accepted), the rejected, uncertified and special masks (special: NaN/inf where a
    finite value is certain), and the fixed-input mode's rejects."""

    def kernel(self) -> torch.Tensor: ...
    def centre(self) -> torch.Tensor: ...
    def bounds(self) -> tuple: ...
    def rejected(self) -> torch.Tensor: ...
    def uncertified(self) -> torch.Tensor: ...
    def special(self) -> torch.Tensor: ...
    def fixed_rejected(self) -> torch.Tensor: ...


@dataclass(frozen=True, kw_only=True)
class GivenParts:
    """Parts already computed (a quantizer output judged eagerly)."""
    kernel_values: torch.Tensor
    centre_values: torch.Tensor
    lo: torch.Tensor
    hi: torch.Tensor
    qlo: torch.Tensor
    qhi: torch.Tensor
    rejected_mask: torch.Tensor
    uncertified_mask: torch.Tensor
    special_mask: torch.Tensor
    fixed_rejected_mask: torch.Tensor

    def kernel(self): return self.kernel_values
    def centre(self): return self.centre_values
    def bounds(self): return self.lo, self.hi, self.qlo, self.qhi
    def rejected(self): return self.rejected_mask
    def uncertified(self): return self.uncertified_mask
    def special(self): return self.special_mask
    def fixed_rejected(self): return self.fixed_rejected_mask


def _cached(method: str):
    """A property computing ``parts.<method>()`` once."""
    def get(self):
        cache = self._cache
        if method not in cache:
            cache[method] = getattr(self._parts, method)()
        return cache[method]
    get.__name__ = method
    return property(get)


class OutputJudgement:
    """One output tensor's judgement in one mode.

    ``flags``: (any rejected, any uncertified) when known without reading the masks (a
    compiled verdict's flags), else None.  ``detail``: None, or a function from a flat
    index to extra explanation lines (quantizer outputs name their group, scale and
    interval).  ``kind``: "value", or "index" for the indices a kernel chose (argmax, top-k:
    ``oracles.selection``), whose kernel and centre are indices, whose bounds are the chosen
    element's value in the source's format ``fmt``, and whose ``excess_ulp`` ranks rejects."""

    def __init__(self, *, name: str, fmt: F.Format, shape, parts: Parts, flags: tuple | None = None,
                 detail: Callable | None = None, kind: str = "value", excess_ulp: torch.Tensor | None = None):
        self.name = name
        self.kind = kind
        self.excess_ulp = excess_ulp
        self.fmt = fmt
        self.shape = tuple(shape)
        self.flags = flags
        self.detail = detail
        self._parts = parts
        self._cache: dict = {}

    kernel = _cached("kernel")
    centre = _cached("centre")
    rejected = _cached("rejected")
    uncertified = _cached("uncertified")
    special = _cached("special")
    fixed_rejected = _cached("fixed_rejected")
    _bounds = _cached("bounds")
    lo = property(lambda self: self._bounds[0])
    hi = property(lambda self: self._bounds[1])
    qlo = property(lambda self: self._bounds[2])
    qhi = property(lambda self: self._bounds[3])

    def __repr__(self):
        return f"OutputJudgement({self.name}, {self.fmt}, shape={self.shape})"

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    def any_flags(self) -> tuple:
        """(any rejected, any uncertified), from the flags where known."""
        if self.flags is not None:
            return tuple(self.flags)
        return bool(self.rejected.any()), bool(self.uncertified.any())


@dataclass(kw_only=True)
class RegionTensors:
    """An output's region as tensors: centre, fixed-input and statistical radii, taint."""
    centre: torch.Tensor
    fixed: torch.Tensor
    stat: torch.Tensor
    taint: torch.Tensor


class RegionJudgement:
    """An output's region and its rounding-interval judgement in every mode of ``modes``,
    before it is split into one ``OutputJudgement`` per mode.

    ``kernel()`` decodes the stored values; ``region()`` gives the ``RegionTensors``
    (computed when first needed by a compiled verdict), on ``device``.  ``flags``: per mode
    any rejected, then any uncertified, when known without the masks (a compiled
    verdict's); a mode whose flag is False has an all-False rejected mask, made without a
    pass."""

    def __init__(self, *, name: str, fmt: F.Format, shape, modes: tuple, device,
                 kernel: Callable[[], torch.Tensor], region: Callable[[], RegionTensors],
                 flags: list | None = None):
        self.name, self.fmt, self.shape, self.modes = name, fmt, tuple(shape), tuple(modes)
        self.device = device
        self._kernel, self._region, self.flags = kernel, region, flags
        self._cache: dict = {}

    def _once(self, key, compute):
        if key not in self._cache:
            self._cache[key] = compute()
        return self._cache[key]

    def region(self) -> RegionTensors:
        return self._once("region", self._region)

    def kernel(self) -> torch.Tensor:
        return self._once("kernel", self._kernel)

    def taint(self) -> torch.Tensor:
        return self.region().taint

    def _masks(self, modes) -> tuple:
        r = self.region()
        return judge_masks(self.fmt, r.centre, r.fixed, r.stat, r.taint, self.kernel(), modes)

    def rejected(self, k: int) -> torch.Tensor:
        """The rejected mask in mode ``modes[k]``."""
        def compute():
            if self.flags is not None and not self.flags[k]:
                return torch.zeros(self.shape, dtype=torch.bool, device=self.device)
            return self._masks((self.modes[k],))[0][0]
        return self._once(("rejected", k), compute)

    def special(self) -> torch.Tensor:
        return self._once("special", lambda: ~torch.isfinite(self.kernel()) & ~self.taint()
                          & (self.kernel() != self.region().centre))

    def any_flags(self) -> list:
        """Per mode any rejected, then any uncertified."""
        if self.flags is None:
            self.flags = [bool(self.rejected(k).any()) for k in range(len(self.modes))] + [bool(self.taint().any())]
        return list(self.flags)

    def fixed_rejected(self) -> torch.Tensor:
        """Rejected in the fixed-input mode.  The statistical interval lies inside the fixed
        one (its radius is the smaller), so these are a subset of the statistical rejects:
        a verdict computes them only when it needs them (to confirm a reject)."""
        if "fixed" in self.modes:
            return self.rejected(self.modes.index("fixed"))
        return self._once("fixed_rejected", lambda: self._masks(("fixed",))[0][0])

    def bounds(self, mode: str) -> tuple:
        """(lo, hi, qlo, qhi) in ``mode``: the pre-store interval and the storage values
        accepted."""
        r = self.region()
        radius = r.fixed if mode == "fixed" else r.stat
        lo, hi = r.centre - radius, r.centre + radius
        return (lo, hi) + tuple(RI.bounds(lo, hi, self.fmt))

    def for_mode(self, k: int) -> OutputJudgement:
        flags = self.flags
        return OutputJudgement(name=self.name, fmt=self.fmt, shape=self.shape, parts=_ModeParts(self, k),
                               flags=None if flags is None else (flags[k], flags[-1]))


class _ModeParts:
    """A ``RegionJudgement``'s tensors in one of its modes."""

    def __init__(self, judged: RegionJudgement, k: int):
        self.judged, self.k = judged, k

    def kernel(self): return self.judged.kernel()
    def centre(self): return self.judged.region().centre
    def bounds(self): return self.judged.bounds(self.judged.modes[self.k])
    def rejected(self): return self.judged.rejected(self.k)
    def uncertified(self): return self.judged.taint()
    def special(self): return self.judged.special()
    def fixed_rejected(self): return self.judged.fixed_rejected()
