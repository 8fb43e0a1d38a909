"""Verdicts: accept / reject / uncertified, with per-element masks and an explanation of
the worst element (docs/design.md §3), and how a verdict is made from its outputs'
judgements in each mode (``verdicts``)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from .. import fixed_input
from .. import formats as F


@dataclass(kw_only=True)
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
    # how to run the reference again (evaluation.ReferenceRun): the explanation's attribution
    reference_run: object = field(default=None, repr=False)
    # the outputs' device where the verdict was computed elsewhere (a small verdict of GPU
    # tensors runs on the CPU: settings.cpu_verdict_max_elements): the masks go back there
    device: object = field(default=None, repr=False)

    @property
    def accepted(self) -> bool:
        return self.status == "accept"

    def _home(self, masks) -> list:
        return masks if self.device is None else [m.to(self.device) for m in masks]

    @property
    def rejected(self):
        """Per output, the bool mask of rejected elements, on the outputs' device."""
        return self._home([o.rejected for o in self.outputs])

    @property
    def uncertified(self):
        """Per output, the bool mask of elements without a certificate, on the outputs' device."""
        return self._home([o.uncertified for o in self.outputs])

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
            if o.kind == "index":
                # an index has no ulps of its own: its rejects rank by how far the chosen value
                # falls short, in the source's ulps; accepted ones by how near another value comes
                # (a negative margin: after every value output's element)
                rej = o.rejected
                score = torch.where(rej, torch.nan_to_num(o.excess_ulp, nan=float("inf"), posinf=float("inf")),
                                    torch.where(o.uncertified, -float("inf"), o.excess_ulp.clamp(max=0) - 1.0))
                i = int(torch.argmax(score.reshape(-1)))
                # the excess: outside by so many ulps, or (negative) the margin to the runner-up,
                # which a search's target() then drives toward a tie
                cand = (int(bool(rej.any())), float(score.reshape(-1)[i]), o, i, float(o.excess_ulp.reshape(-1)[i]))
                if best is None or cand[:2] > best[:2]:
                    best = cand
                continue
            if bool(o.rejected.any()):
                excess = _excess(o.kernel, o.centre, o.lo, o.hi, o.fmt)
                score = torch.where(o.rejected, torch.nan_to_num(excess, nan=float("inf"), posinf=float("inf")),
                                    torch.full_like(excess, -float("inf")))
                kind = 1
            else:
                excess = None
                half = (o.hi - o.lo) / 2
                dev = (o.kernel - o.centre).abs() / torch.where(half > 0, half, torch.ones_like(half))
                score = torch.where(o.uncertified | ~torch.isfinite(dev), torch.full_like(dev, -float("inf")), dev)
                kind = 0
            i = int(torch.argmax(score.reshape(-1)))
            if excess is None:
                # nothing rejected: the choice does not depend on the excess, so it is read at the
                # chosen element only, in Python floats (for every element, its two ulp passes
                # were most of this time; on one element's tensors, a hundred small operations)
                idx = _unravel(i, score.shape)
                e = _excess_scalar(*(_element(t, idx) for t in (o.kernel, o.centre, o.lo, o.hi)), o.fmt)
            else:
                e = float(excess.reshape(-1)[i])
            cand = (kind, float(score.reshape(-1)[i]), o, i, e)
            if best is None or cand[:2] > best[:2]:
                best = cand
        if best is None:
            return None
        return best[2], best[3], best[4]

    def explain(self) -> str:
        from .explain import explain
        text = explain(self)
        w = self.worst()
        if w is None or w[0].detail is None or w[0].kind == "index":
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
            "outputs": [{"name": o.name, "format": "index" if o.kind == "index" else str(o.fmt),
                         "shape": list(o.kernel.shape),
                         "rejected": int(o.rejected.sum()), "uncertified": int(o.uncertified.sum())}
                        for o in self.outputs],
            "worst": worst,
            "certificate": self.certificate.to_dict(),
            "assumptions": self.assumptions.to_dict(),
            "replay": self.replay,
        }


def _unravel(i: int, shape) -> tuple:
    """The index of flat element i of a tensor of ``shape`` (row-major)."""
    idx = []
    for n in reversed(tuple(shape)):
        i, k = divmod(i, n)
        idx.append(k)
    return tuple(reversed(idx))


def _element(t, idx) -> float:
    """t's element at ``idx`` (an index of the shape t broadcasts to), as a Python float: no
    copy of a broadcast or non-contiguous t."""
    idx = idx[len(idx) - t.ndim:] if t.ndim else ()
    return float(t[tuple(0 if n == 1 else k for k, n in zip(idx, t.shape))])


def _excess(kernel, centre, lo, hi, fmt):
    """How far each kernel value lies outside [lo, hi], in ulps of the larger of the kernel's
    value and the bound it passed (negative: inside): a kernel that stored 0 where the region is
    near 5 is off by 5's ulps, not by the smallest subnormal's."""
    k = torch.where(torch.isfinite(kernel), kernel, centre).abs()

    def ulp_beside(bound):
        return F.ulp(torch.where(torch.isfinite(bound), torch.maximum(k, bound.abs()), k), fmt)
    return torch.maximum((kernel - hi) / ulp_beside(hi), (lo - kernel) / ulp_beside(lo))


def _excess_scalar(kernel: float, centre: float, lo: float, hi: float, fmt) -> float:
    """``_excess`` of one element, in Python floats (NaN where either side is)."""
    k = abs(kernel if math.isfinite(kernel) else centre)

    def ulp_beside(bound):
        return F.ulp_scalar(max(k, abs(bound)) if math.isfinite(bound) else k, fmt)
    above, below = (kernel - hi) / ulp_beside(hi), (lo - kernel) / ulp_beside(lo)
    return math.nan if math.isnan(above) or math.isnan(below) else max(above, below)


def verdicts(program_name: str, modes, p: float, confirm: bool, assumptions, outs, certificate,
             reference_run=None) -> dict:
    """mode -> Verdict from each output's judgement (``RegionJudgement``, an index output's
    ``IndexJudgement``, or an ``OutputJudgement`` of a quantizer output, which is the same in
    every mode).  A
    statistical reject is confirmed (or not) in the fixed-input mode."""
    # judged in every mode (a region's, an index output's) or the same in all (a quantizer's)
    per_mode = [hasattr(o, "for_mode") for o in outs]
    flags = [o.any_flags() if pm else None for o, pm in zip(outs, per_mode)]
    out = {}
    for k, m in enumerate(modes):
        judgements, rej, unc = [], False, False
        for o, f, pm in zip(outs, flags, per_mode):
            if pm:
                judgements.append(o.for_mode(k))
                rej, unc = rej or f[k], unc or f[-1]
            else:
                judgements.append(o)
                o_rej, o_unc = o.any_flags()
                rej, unc = rej or o_rej, unc or o_unc
        status = "reject" if rej else "uncertified" if unc else "accept"
        v = Verdict(status=status, program=program_name, mode=m, p=p, outputs=judgements, certificate=certificate,
                    assumptions=assumptions, reference_run=reference_run)
        if m == "statistical" and status == "reject" and confirm:
            v.confirmation = fixed_input.confirmation(judgements)
        out[m] = v
    return out
