"""Judging index outputs: a kernel's stored argmax, argmin or top-k indices against the
choices values inside the enclosures admit (``calculus.select``; docs/design.md §4.7).

In each mode the boxes are the source values' intervals in that mode (the statistical
radius inside the fixed one), narrowed to the values the source's format holds.  A choice
is rejected where no values in the boxes support it, with the index that certainly beats
it; rows with an uncertified source value are uncertified."""

from __future__ import annotations

import torch

from .. import fixed_input, statistical
from .. import formats as F
from ..calculus import select as S
from ..verdict.judgement import GivenParts, OutputJudgement

KIND = "index"


def is_selection(r) -> bool:
    return isinstance(r, S.Selection)


def source_elements(refs) -> int:
    """The source values every returned selection compares (each is judged through its
    interval, so each counts toward the statistical mode's union bound)."""
    return sum(r.source.c.expand(r.source.shape).numel() for r in refs if is_selection(r))


def _boxes(sel: S.Selection, n_elements: int, p: float) -> tuple:
    """({mode: (lo, hi)} of the keys [..., n] the selection compared, the uncertified rows
    [..., 1]: a source value the calculus cannot bound, or one tainted)."""
    x = sel.source
    shape = x.c.shape
    c = x.c.expand(shape).movedim(sel.axis, -1)
    fixed = fixed_input.radius(x, n_elements, p).expand(shape)
    stat = statistical.radius(x, n_elements, p, fixed=fixed).expand(shape)
    bad = ~F.finite(fixed) | ~F.finite(x.c.expand(shape))
    if x.taint is not None:
        bad = bad | x.taint.expand(shape)
    unc = bad.movedim(sel.axis, -1).any(-1, keepdim=True)
    out = {m: S.key_bounds(c, r.movedim(sel.axis, -1), x.fmt, sel.largest)
           for m, r in ((fixed_input.NAME, fixed), (statistical.NAME, stat))}
    return out, unc


class IndexJudgement:
    """A selection output's judgement in every mode of ``modes`` (``verdict.verdicts`` asks
    ``for_mode`` and ``any_flags``, as of a region's judgement)."""

    def __init__(self, name: str, sel: S.Selection, stored: torch.Tensor, modes: tuple, n_elements: int, p: float):
        self.name, self.sel, self.modes = name, sel, tuple(modes)
        boxes, unc = _boxes(sel, n_elements, p)
        chosen = sel.rows(stored)
        unc = unc.expand(chosen.shape)
        self._per_mode = []
        for m in self.modes:
            lo, hi = boxes[m]
            rejected, rival = S.judge_choice(lo, hi, chosen, sel.k, sel.ordered, sel.ties)
            rejected = rejected & ~unc
            self._per_mode.append((lo, hi, rejected, rival))
        self._fixed = None
        if fixed_input.NAME not in self.modes:
            lo, hi = boxes[fixed_input.NAME]
            self._fixed = S.judge_choice(lo, hi, chosen, sel.k, sel.ordered, sel.ties)[0] & ~unc
        self.chosen, self.unc = chosen, unc

    def any_flags(self) -> list:
        return [bool(r[2].any()) for r in self._per_mode] + [bool(self.unc.any())]

    def for_mode(self, k: int) -> OutputJudgement:
        sel = self.sel
        lo, hi, rejected, rival = self._per_mode[k]
        fixed = rejected if self.modes[k] == fixed_input.NAME else (
            self._fixed if self._fixed is not None else self._per_mode[self.modes.index(fixed_input.NAME)][2])
        n = lo.shape[-1]
        idx = self.chosen.clamp(0, n - 1)
        lo_c, hi_c = torch.gather(lo, -1, idx), torch.gather(hi, -1, idx)
        rival_lo = torch.gather(lo, -1, rival.clamp(min=0))
        if sel.k is not None and sel.ordered:
            # the chain's need at the place: a rival's lower bound, or the value the places
            # below forced up to it
            rival_lo = torch.maximum(rival_lo, lo_c)
        tiny = torch.finfo(torch.float64).tiny
        # how far the chosen value falls short of the index that beats it, in ulps of the source
        # format at the rival's value: what ranks a verdict's worst element (an index out of
        # range or repeated ranks first)
        gap = (rival_lo - hi_c) / F.ulp(rival_lo.abs().clamp(min=tiny), sel.source.fmt)
        # an accepted place: how near the best value not chosen comes to it (negative: the
        # margin), so that a verdict shows the most contested choice
        others = lo.scatter(-1, idx, torch.full_like(lo_c, -torch.inf)).amax(-1, keepdim=True)
        near = (others - hi_c) / F.ulp(torch.maximum(others.abs(), hi_c.abs()).clamp(min=tiny), sel.source.fmt)
        excess = torch.where(rejected, torch.where(rival >= 0, gap.clamp(min=0), torch.inf),
                             torch.nan_to_num(near.clamp(max=0), nan=-torch.inf))
        sign = 1.0 if sel.largest else -1.0
        shaped = sel.shaped
        kernel = shaped(self.chosen.double())
        parts = GivenParts(kernel_values=kernel, centre_values=shaped(sel.rows(sel.own).double()),
                           lo=shaped(sign * (lo_c if sel.largest else hi_c)),
                           hi=shaped(sign * (hi_c if sel.largest else lo_c)),
                           qlo=shaped(sign * (lo_c if sel.largest else hi_c)),
                           qhi=shaped(sign * (hi_c if sel.largest else lo_c)),
                           rejected_mask=shaped(rejected), uncertified_mask=shaped(self.unc),
                           special_mask=torch.zeros_like(shaped(rejected)), fixed_rejected_mask=shaped(fixed))
        detail = _Detail(self, lo, hi, rejected, rival, n)
        return OutputJudgement(name=self.name, fmt=sel.source.fmt, shape=kernel.shape, parts=parts, detail=detail,
                               kind=KIND, excess_ulp=shaped(excess))


def _num(x: float) -> str:
    return f"{x:.9g}"


class _Detail:
    """The explanation lines of one element of an index output (``OutputJudgement.detail``)."""

    def __init__(self, judged: IndexJudgement, lo, hi, rejected, rival, n: int):
        self.judged, self.lo, self.hi, self.rejected, self.rival, self.n = judged, lo, hi, rejected, rival, n

    def _value(self, row: tuple, i: int) -> str:
        """'value in [a, b]' (or 'value a' where the box is one value) of the source value at
        index i of a row, in the source's own sign."""
        sel = self.judged.sel
        lo, hi = float(self.lo[row + (i,)]), float(self.hi[row + (i,)])
        if not sel.largest:
            lo, hi = -hi, -lo
        return f"value {_num(lo)}" if lo == hi else f"value in [{_num(lo)}, {_num(hi)}]"

    def __call__(self, flat: int) -> list:
        j, sel = self.judged, self.judged.sel
        out_idx = tuple(int(k) for k in torch.unravel_index(torch.tensor(flat), sel.shape)) if sel.shape else ()
        row, m = sel.row_position(out_idx)
        pos = row + (m,)
        i = int(j.chosen[pos])
        own = int(sel.rows(sel.own)[pos])
        what = sel.label
        place = "" if sel.k is None else f", place {m} of {sel.k}"
        lines = [f"  chosen    = {what}{place}"]
        if not 0 <= i < self.n:
            lines.append(f"  kernel    = index {i}: outside 0..{self.n - 1}")
        else:
            lines.append(f"  kernel    = index {i}, {self._value(row, i)}")
        lines.append(f"  reference = index {own}, {self._value(row, own)}")
        if bool(j.unc[pos]):
            lines.append("  why       = a value of this row has no certified bound: not judged")
        elif bool(self.rejected[pos]):
            r = int(self.rival[pos])
            best = "smallest" if not sel.largest else "largest"
            if not 0 <= i < self.n:
                lines.append("  why       = no such index")
            elif r < 0:
                lines.append(f"  why       = index {i} is chosen twice in this row")
            elif sel.k is None:
                # in key terms (larger wins) the rival's lower bound reaches the chosen's upper one
                k_lo, k_hi = float(self.lo[row + (r,)]), float(self.hi[row + (i,)])
                sign = 1.0 if sel.largest else -1.0
                bound, side = ("at least", "above") if sel.largest else ("at most", "below")
                tie = k_lo == k_hi
                lines.append(f"  why       = index {r}'s value is {bound} {_num(sign * k_lo)}, "
                             f"{'equal to' if tie else side} index {i}'s {'at most' if sel.largest else 'at least'} "
                             f"{_num(sign * k_hi)}{', and comes first' if tie else ''}: index {i} cannot be the {best}")
            else:
                chosen = j.chosen[row].tolist()
                where = f"in place {chosen.index(r)}" if r in chosen else "left out"
                order = f" in place {m}" if sel.ordered else ""
                lines.append(f"  why       = index {r}, {where} ({self._value(row, r)}), certainly ranks above "
                             f"index {i}{order}: the top {sel.k} cannot be chosen so")
        if sel.k is None and 0 <= i < self.n and self.n > 1 and not bool(self.rejected[pos]) and not bool(j.unc[pos]):
            # the runner-up: the other index whose value can come nearest
            others = self.lo[row].clone()
            others[i] = -torch.inf
            r = int(others.argmax())
            lines.append(f"  runner-up = index {r}, {self._value(row, r)}")
        if sel.k is None and 0 <= i < self.n:
            ok = S.admissible_one(self.lo[row], self.hi[row], sel.ties)
            ids = torch.nonzero(ok).reshape(-1).tolist()
            shown = ", ".join(map(str, ids[:8])) + (", ..." if len(ids) > 8 else "")
            lines.append(f"  admissible = {len(ids)} of {self.n} indices: {shown}")
        return lines
