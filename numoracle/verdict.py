"""Verdicts: accept / reject / uncertified, with per-element masks and an
explanation of the worst element (docs/design.md §3, docs/contributing.md)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from . import formats as F


def _on_first_use(slot: str):
    """A property whose value is stored in ``slot`` as a tensor, or as a function
    that computes it the first time it is read."""
    def get(self):
        v = getattr(self, slot)
        if callable(v):
            v = v()
            setattr(self, slot, v)
        return v
    return property(get)


class OutputJudgement:
    """One output tensor's judgement (all tensors float64 / bool, output shape).

    ``kernel`` (the stored values, exact), ``rejected``, ``uncertified``, ``special`` (rejected because of NaN/inf
    where a finite value is certain) and ``fixed_rejected`` (rejected in the
    fixed-input mode) are tensors or functions that compute them on first use;
    ``lo, hi`` (the pre-store interval in the verdict's mode) and ``qlo, qhi``
    (the storage values accepted) are given, or computed on first use by
    ``bounds()`` -> (lo, hi, qlo, qhi): a verdict that is only asked for its
    status never materialises them."""

    def __init__(self, name, fmt, kernel, centre, lo, hi, qlo, qhi, rejected, uncertified, special,
                 fixed_rejected, detail=None, *, bounds=None, shape=None, flags=None):
        self.name = name
        self.fmt: F.Format = fmt
        self._kernel = kernel
        self._centre = centre             # reference before the store (or a function computing it)
        self.shape = tuple(shape) if shape is not None else tuple(centre.shape)
        # (any rejected, any uncertified) when known without reading the masks (a compiled verdict's flags)
        self.flags = flags
        self._bounds = (lo, hi, qlo, qhi) if lo is not None else (lambda: tuple(bounds()))
        self._rejected = rejected
        self._uncertified = uncertified
        self._special = special
        self._fixed_rejected = fixed_rejected
        # optional: flat index -> extra explanation lines (quantizer outputs name their group, scale, interval)
        self.detail = detail

    kernel = _on_first_use("_kernel")
    centre = _on_first_use("_centre")
    rejected = _on_first_use("_rejected")
    uncertified = _on_first_use("_uncertified")
    special = _on_first_use("_special")
    fixed_rejected = _on_first_use("_fixed_rejected")
    _all_bounds = _on_first_use("_bounds")
    lo = property(lambda self: self._all_bounds[0])
    hi = property(lambda self: self._all_bounds[1])
    qlo = property(lambda self: self._all_bounds[2])
    qhi = property(lambda self: self._all_bounds[3])

    def __repr__(self):
        return f"OutputJudgement({self.name}, {self.fmt}, shape={self.shape})"

    @property
    def numel(self) -> int:
        return math.prod(self.shape)


@dataclass
class Verdict:
    status: str                       # "accept" | "reject" | "uncertified"
    program: str
    mode: str
    p: float
    outputs: list
    certificate: object
    assumptions: object
    confirmation: str | None = None   # statistical rejects: "confirmed" | "statistical-only"
    replay: str | None = None         # set by the runner when a case is saved
    _explainer: object = field(default=None, repr=False)

    @property
    def accepted(self) -> bool:
        return self.status == "accept"

    @property
    def rejected(self):
        """Per output, the bool mask of rejected elements."""
        return [o.rejected for o in self.outputs]

    @property
    def uncertified(self):
        return [o.uncertified for o in self.outputs]

    @property
    def n_elements(self) -> int:
        return sum(o.numel for o in self.outputs)

    @property
    def n_rejected(self) -> int:
        return sum(int(o.rejected.sum()) for o in self.outputs)

    @property
    def n_uncertified(self) -> int:
        return sum(int(o.uncertified.sum()) for o in self.outputs)

    def worst(self):
        """(output, flat index, excess in output ulps) of the worst element:
        the largest excess among rejected elements, else the element closest to
        its bounds (largest |kernel - centre| / radius)."""
        best = None
        for o in self.outputs:
            if o.numel == 0:
                continue
            ulp = F.ulp(torch.where(torch.isfinite(o.kernel), o.kernel, o.centre).abs(), o.fmt)
            above = (o.kernel - o.hi) / ulp
            below = (o.lo - o.kernel) / ulp
            excess = torch.maximum(above, below)
            if bool(o.rejected.any()):
                score = torch.where(o.rejected, torch.nan_to_num(excess, nan=float("inf"), posinf=float("inf")),
                                    torch.full_like(excess, -float("inf")))
                kind = 1
            else:
                half = (o.hi - o.lo) / 2
                dev = (o.kernel - o.centre).abs() / torch.where(half > 0, half, torch.ones_like(half))
                score = torch.where(o.uncertified | ~torch.isfinite(dev), torch.full_like(dev, -float("inf")), dev)
                kind = 0
            i = int(torch.argmax(score.reshape(-1)))
            cand = (kind, float(score.reshape(-1)[i]), o, i, float(excess.reshape(-1)[i]))
            if best is None or cand[:2] > best[:2]:
                best = cand
        if best is None:
            return None
        return best[2], best[3], best[4]

    def explain(self) -> str:
        from .explain import explain
        text = explain(self)
        w = self.worst()
        if w is None or w[0].detail is None:
            return text
        lines = text.split("\n")
        at = next((k for k, line in enumerate(lines) if line.startswith("Assumptions:")), len(lines))
        return "\n".join(lines[:at] + list(w[0].detail(w[1])) + lines[at:])

    def __str__(self):
        return self.explain()

    def to_dict(self) -> dict:
        w = self.worst()
        worst = None
        if w is not None:
            o, i, excess = w
            idx = tuple(int(k) for k in torch.unravel_index(torch.tensor(i), o.kernel.shape)) if o.kernel.ndim else ()
            worst = {"output": o.name, "index": list(idx), "kernel": float(o.kernel.reshape(-1)[i]),
                     "centre": float(o.centre.reshape(-1)[i]), "lo": float(o.lo.reshape(-1)[i]),
                     "hi": float(o.hi.reshape(-1)[i]), "excess_ulp": excess if excess == excess else None}
        return {
            "status": self.status, "program": self.program, "mode": self.mode, "p": self.p,
            "confirmation": self.confirmation,
            "elements": self.n_elements, "rejected": self.n_rejected, "uncertified": self.n_uncertified,
            "special_rejected": sum(int(o.special.sum()) for o in self.outputs),
            "outputs": [{"name": o.name, "format": str(o.fmt), "shape": list(o.kernel.shape),
                         "rejected": int(o.rejected.sum()), "uncertified": int(o.uncertified.sum())}
                        for o in self.outputs],
            "worst": worst,
            "certificate": self.certificate.to_dict(),
            "assumptions": self.assumptions.to_dict(),
            "replay": self.replay,
        }
