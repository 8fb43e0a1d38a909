"""Index outputs: the argmax, argmin and top-k of tracked values (docs/design.md §4.7).

A kernel that picks indices compares the values it holds, each of them somewhere in its
enclosure.  Which index it picks is therefore not one number: in a near tie several are
right.  A choice is *admissible* when some values, one inside each enclosure, make it the
right choice; for boxes that is decided exactly from their bounds (``judge_choice``), so a
verdict never rejects a choice a correct kernel can make, and rejects every choice no
values in the boxes support.

In the reference program a choice is a ``Selection``.  Values computed from it (a gathered
logit, a routing weight) depend on which admissible index the kernel took.  Where the
kernel stores its choice, the verdict re-runs the program with the kernel's indices in
place of the reference's own (``Context.forced``), so those values are judged at the
indices the kernel used.  A choice the kernel does not store is the reference's own, and
values computed from it are uncertified in rows where another index is admissible (a
``selection`` site of the certificate).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch

from .. import formats as F
from ..errors import InvalidArgument, LanguageMisuse
from .tracked import Tracked, _ax

Tensor = torch.Tensor
TIES = ("first", "any")


@dataclass(eq=False, kw_only=True)
class Selection:
    """The indices a reference program chose along ``axis`` of ``source``: one per row
    (``k`` None: argmax or argmin, the axis dropped unless ``keepdims``) or k of them
    (top-k, the axis kept with size k).  ``index``: the indices that the rest of the
    program reads (the kernel's own, where the verdict forced them; else ``own``);
    ``own``: the reference's choice from the rounded centres (``own_choice``); ``taint``:
    the rows holding a value that is not certified (``taint_of_reading`` adds, for the
    reference's own choice, the rows where another index is admissible)."""
    source: Tracked
    axis: int
    k: int | None
    largest: bool
    ordered: bool
    ties: str
    keepdims: bool
    ordinal: int
    own: Tensor
    index: Tensor
    taint: Tensor | None
    label: str
    forced: bool = False
    read: bool = False        # whether the program read values at the choice (no.gather)
    recorded: bool = False    # whether its selection site is in the certificate

    @property
    def shape(self):
        return tuple(self.index.shape)

    @property
    def ndim(self) -> int:
        return self.index.ndim

    def __repr__(self):
        what = "argmax" if self.k is None and self.largest else "argmin" if self.k is None else f"top-{self.k}"
        return f"Selection({what} along axis {self.axis} of {self.source.fmt} {tuple(self.source.shape)})"

    def __bool__(self):
        raise LanguageMisuse(f"a selection ({self!r}) was used as a Python bool: the indices a kernel picks are "
                             f"per row; read the values at them with no.gather(x, idx).")

    def rows(self, index: Tensor) -> Tensor:
        """``index`` (of this selection's shape) as [..., k], the axis last."""
        return Selection.rows_of(index, self.axis, self.k, self.keepdims)

    @staticmethod
    def rows_of(index: Tensor, axis: int, k, keepdims: bool) -> Tensor:
        if k is None and not keepdims:
            index = index.unsqueeze(axis)
        return index.movedim(axis, -1)

    def taint_of_reading(self) -> Tensor | None:
        """The taint of values read at this choice (``no.gather``): the rows with a value
        that is not certified, and, where the choice is the reference's own (not the
        kernel's, which a verdict reads from its outputs), the rows where another index is
        admissible, whose selection site the certificate then records."""
        x = self.source
        ctx = x.ctx
        # the flags live on the context's entry for this choice (``squeeze`` makes copies)
        canon = ctx.selections[self.ordinal]
        self.read = canon.read = True
        if self.forced:
            return self.taint
        c = x.c.expand(x.c.shape).movedim(self.axis, -1)
        lo, hi = key_bounds(c, x.radius().expand(x.c.shape).movedim(self.axis, -1), x.fmt, self.largest)
        more = alternatives(lo, hi, self.rows(self.own), self.k, self.ordered, self.ties)
        if not canon.recorded:
            canon.recorded = True
            ctx.record(self.label, "selection", str(x.fmt), "one admissible choice per row", ~more.reshape(-1),
                       more.reshape(-1).double())
        more = self.shaped(more.expand(self.rows(self.own).shape))
        return more if self.taint is None else self.taint | more

    def squeeze(self, axis: int) -> "Selection":
        """An argmax or argmin kept with ``keepdims=True``, its axis of size one dropped (what
        ``.squeeze(axis)`` of the indices gives)."""
        if self.k is not None or not self.keepdims or _ax(axis, len(self.shape)) != self.axis:
            raise InvalidArgument(f"{self!r}.squeeze({axis}): only an argmax or argmin kept with keepdims=True "
                                  f"drops its own axis ({self.axis}); pass keepdims=False instead.")
        out = dataclasses.replace(self, keepdims=False)
        out.own, out.index = self.own.squeeze(self.axis), self.index.squeeze(self.axis)
        out.taint = None if self.taint is None else self.taint.squeeze(self.axis)
        return out

    def row_position(self, at: tuple) -> tuple:
        """(row, place) in ``rows``' layout of the element at index ``at`` of this selection."""
        if self.k is None and not self.keepdims:
            return tuple(at), 0
        at = list(at)
        m = at.pop(self.axis)
        return tuple(at), m

    def shaped(self, rows: Tensor) -> Tensor:
        """The inverse of ``rows``."""
        out = rows.movedim(-1, self.axis)
        return out if self.k is not None or self.keepdims else out.squeeze(self.axis)


def choose(x: Tracked, k: int | None, axis: int, largest: bool, ordered: bool, ties: str,
           keepdims: bool) -> Selection:
    """The selection of ``k`` indices (None: one, argmax/argmin) of x along ``axis``."""
    if not isinstance(x, Tracked):
        raise InvalidArgument(f"argmax/argmin/topk of a {type(x).__name__}: expected a tracked tensor (a value of "
                              f"the reference program).")
    ctx = x.ctx
    if x.ndim == 0:
        raise InvalidArgument("argmax/argmin/topk of a 0-d tracked tensor: expected at least one axis to choose along.")
    if isinstance(axis, bool) or not isinstance(axis, int) or not -x.ndim <= axis < x.ndim:
        raise InvalidArgument(f"axis={axis!r}: expected an int axis of the {x.ndim}-d value {x.shape}.")
    axis = _ax(axis, x.ndim)
    n = x.c.shape[axis]
    if ties not in TIES:
        raise InvalidArgument(f"ties={ties!r}: expected 'first' (the lowest index among equal values wins, as "
                              f"torch.argmax and tl.argmax do) or 'any' (the kernel does not promise which).")
    if k is not None:
        if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= n:
            raise InvalidArgument(f"topk k={k!r}: expected an int from 1 to the axis' size {n}.")
    c = x.c.expand(x.c.shape).movedim(axis, -1)
    own = own_choice(c, x.fmt, largest, k)
    row_taint = None if x.taint is None else x.taint.expand(x.c.shape).movedim(axis, -1).any(-1, keepdim=True)
    ordinal = len(ctx.selections)
    forced = ctx.forced.get(ordinal) if ctx.forced else None
    what = ("argmax" if largest else "argmin") if k is None else f"top-{k}" + ("" if largest else " smallest")
    label = ctx.label(f"{what} of {ctx.count(n)} {x.fmt} values")
    index = own
    if forced is not None:
        # the kernel's stored choice (``Context.forced``), judged on its own by the verdict; an
        # index out of range reads the reference's own choice instead
        forced = forced.to(c.device).long()
        if k is None and forced.ndim == x.ndim - 1:
            # stored without the axis (kept here, then squeezed by the program)
            forced = forced.unsqueeze(axis)
        forced = forced.movedim(axis, -1)
        index = torch.where((forced >= 0) & (forced < n), forced, own)
    sel = Selection(source=x, axis=axis, k=k, largest=largest, ordered=ordered, ties=ties, keepdims=keepdims,
                    ordinal=ordinal, own=None, index=None, taint=None, label=label, forced=forced is not None)
    sel.own, sel.index = sel.shaped(own), sel.shaped(index)
    sel.taint = None if row_taint is None else sel.shaped(row_taint.expand(index.shape))
    ctx.selections.append(sel)
    return sel


def key_bounds(c: Tensor, radius: Tensor, fmt: F.Format, largest: bool) -> tuple:
    """(lo, hi) of the values a choice compares (the axis last), as keys the larger of which
    wins (negated for a smallest-first choice): the enclosure c ± radius narrowed to the
    values of ``fmt`` it holds, [RN(c - radius), RN(c + radius)] (rounding is monotone, so a
    held value inside the enclosure lies inside these; past the range, a format without
    infinities saturates, as Triton's conversions do).  A bound that is not a number is
    unbounded."""
    overflow = "inf" if fmt.has_inf else "saturate"
    lo, hi = F.round(c - radius, fmt, "rne", overflow), F.round(c + radius, fmt, "rne", overflow)
    lo = torch.where(torch.isnan(lo), -torch.inf, lo)
    hi = torch.where(torch.isnan(hi), torch.inf, hi)
    return (lo, hi) if largest else (-hi, -lo)


def own_choice(c: Tensor, fmt: F.Format, largest: bool, k: int | None) -> Tensor:
    """The reference's own choice [..., k]: the choice a kernel holding the rounded centres
    makes (RN(c) lies in every enclosure around c, so this choice is admissible); the first
    of equal values, as torch.argmax; top-k in order of value."""
    v = F.round(c, fmt)
    key = v if largest else -v
    if k is None:
        return key.argmax(-1, keepdim=True)
    # a stable sort keeps equal values in index order
    return torch.sort(key, dim=-1, descending=True, stable=True).indices[..., :k]


def admissible_one(lo: Tensor, hi: Tensor, ties: str) -> Tensor:
    """[..., n]: whether each index can be the argmax (largest key) of values in the boxes
    [lo, hi]: its upper bound reaches every other's lower bound, strictly those before it
    under ties='first' (where the lowest index among equal values wins)."""
    neg = torch.full_like(lo[..., :1], -torch.inf)
    # the largest lower bound before and after each index
    before = torch.cat([neg, lo[..., :-1]], -1).cummax(-1).values
    after = torch.cat([lo[..., 1:], neg], -1).flip(-1).cummax(-1).values.flip(-1)
    ok = hi >= after
    return ok & ((hi > before) if ties == "first" else (hi >= before))


def judge_choice(lo: Tensor, hi: Tensor, chosen: Tensor, k: int | None, ordered: bool, ties: str) -> tuple:
    """Whether a kernel's choice is admissible, per chosen position: (rejected [..., k],
    rival [..., k]).  ``chosen``: the stored indices [..., k] (k = 1 for argmax/argmin), the
    boxes [lo, hi] of the keys [..., n].  A position is rejected when its index is out of
    range or repeats an earlier one of its row, or when no values in the boxes support it:
    argmax — another index's lower bound beats its upper bound; a top-k set — a value left
    out is certainly larger; an ordered top-k — the values from this position down cannot be
    in order above what was left out.  ``rival``: for a rejected position, the index whose
    lower bound beats it (-1 where none is one index: out of range, repeated)."""
    n = lo.shape[-1]
    valid = (chosen >= 0) & (chosen < n)
    idx = torch.where(valid, chosen, torch.zeros_like(chosen))
    if idx.shape[-1] > 1:
        same = idx.unsqueeze(-1) == idx.unsqueeze(-2)
        earlier = torch.ones(same.shape[-2:], dtype=torch.bool, device=idx.device).tril(-1)
        valid &= ~(same & earlier & valid.unsqueeze(-2)).any(-1)
    hi_c = torch.gather(hi, -1, idx)
    lo_c = torch.gather(lo, -1, idx)
    if k is None:
        ok = torch.gather(admissible_one(lo, hi, ties), -1, idx)
        # what certainly wins over the chosen index: a larger lower bound, or under ties='first'
        # an equal one earlier in the row
        beats = lo > hi_c
        if ties == "first":
            beats |= (lo == hi_c) & (torch.arange(n, device=lo.device) < idx)
        rival = torch.where(beats, lo, torch.full_like(lo, -torch.inf)).argmax(-1, keepdim=True)
        return ~ok | ~valid, torch.where(~ok & valid, rival, torch.full_like(rival, -1))
    # the largest lower bound among the indices left out
    left = lo.scatter(-1, idx, torch.full_like(lo_c, -torch.inf)).max(-1, keepdim=True)
    if ordered:
        # the lowest values the chain can take from the last place up, and the index that
        # sets each (a left-out value, or a chosen one further down)
        t, t_idx = left.values, left.indices
        need, by = torch.empty_like(lo_c), torch.empty_like(idx)
        for m in range(lo_c.shape[-1] - 1, -1, -1):
            own = lo_c[..., m:m + 1] > t
            t, t_idx = torch.where(own, lo_c[..., m:m + 1], t), torch.where(own, idx[..., m:m + 1], t_idx)
            need[..., m:m + 1], by[..., m:m + 1] = t, t_idx
            # past a failing place the chain goes on from its upper bound, so that one place
            # out of order is blamed once
            t = torch.minimum(t, hi_c[..., m:m + 1])
        bad, rival = need > hi_c, by
    else:
        bad, rival = hi_c < left.values, left.indices.expand(hi_c.shape)
    return bad | ~valid, torch.where(bad & valid, rival, torch.full_like(rival, -1))


def alternatives(lo: Tensor, hi: Tensor, own: Tensor, k: int | None, ordered: bool, ties: str) -> Tensor:
    """[..., 1]: whether a row admits a choice other than ``own`` (then values computed from
    the reference's own choice need not be the kernel's).  Exact for argmax and a top-k set;
    for an ordered top-k also any overlap of two chosen boxes (an order that may differ)."""
    if k is None:
        return admissible_one(lo, hi, ties).sum(-1, keepdim=True) > 1
    # j can be in an admissible top-k set iff fewer than k lower bounds certainly beat its
    # upper bound, i.e. hi_j reaches the k-th largest lower bound
    kth = lo.topk(k, -1).values[..., k - 1:k]
    more = (hi >= kth).sum(-1, keepdim=True) > k
    if ordered and k > 1:
        lo_c, hi_c = torch.gather(lo, -1, own), torch.gather(hi, -1, own)
        # a later chosen box reaching an earlier one's lower bound: their order may swap
        later_hi = torch.cat([hi_c[..., 1:], torch.full_like(hi_c[..., :1], -torch.inf)], -1)
        later_hi = later_hi.flip(-1).cummax(-1).values.flip(-1)
        more |= (later_hi >= lo_c).any(-1, keepdim=True)
    return more
