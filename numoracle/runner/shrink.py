"""Element-level shrinking of a counterexample (docs/design.md §9).

Hypothesis has already shrunk the *structure* (shape, group, scale, seed, ...)
of the failing case; what is left is a concrete tensor whose values came from
a seed.  This pass works on the tensors themselves, in the order that makes a
case easiest to read:

1. rows: keep one row (those holding rejected elements first), else delete
   chunks of rows (delta debugging);
2. columns: the same over columns, in whole groups of ``cols_multiple_of`` so
   the shape stays in the operator's domain;
3. values: whole tensors, then chunks, then single elements, toward 0, +-1,
   the nearest power of two, fewer significand bits and fewer distinct values.

Every candidate is re-run (kernel and verdict) and kept only if it fails the
*same way*: the same status (a confirmed ``reject``, ``nan``, a kernel ``error``,
``timeout`` or ``crash``) with the same failure class - for a reject, output, kind
and dominant site; for an error, the exception's type and the line it was raised
at; for a crash, the signal - so the shrinker never drifts from the bug it was
given to another one (the Hypothesis shrinker's rule).
A candidate the kernel or the reference cannot run (a label now out of range)
simply does not fail the same way.  Budgets in evaluations and seconds keep a
slow backend from stalling a run; the best case so far is always valid.
"""

from __future__ import annotations

import math
import time

import torch

from .. import formats as F
from .outcomes import same_failure


_FP4X2 = getattr(torch, "float4_e2m1fn_x2", None)


def _packed(t) -> bool:
    """A tensor of e2m1 pairs, two columns a byte (torch's float4_e2m1fn_x2)."""
    return isinstance(t, torch.Tensor) and _FP4X2 is not None and t.dtype == _FP4X2


def input_roles(op, fmt: str, inputs=None) -> list:
    """Per input, per dimension: "rows", "cols", "groups" (cols / cols_multiple_of),
    "cols_packed" (cols stored two a byte) or None, found by building the operator's
    example at two distinct sizes; with ``inputs`` (the case being shrunk), reconciled
    with that case's own shapes, which may differ from the example's (an operand the
    case stores packed, or of another rank): a dimension whose size does not fit its
    role is left alone."""
    dom = op.domain
    m = dom.cols_multiple_of
    r0 = min(max(3, dom.rows[0]), dom.rows[1])
    c0 = None
    for k in range(max(1, -(-dom.cols[0] // m)), dom.cols[1] // m + 1):
        c = k * m
        if c != r0 and (m == 1 or k != r0) and c >= 5:
            c0 = c
            break
    if c0 is None:
        c0 = max(m, dom.cols[1] - dom.cols[1] % m)
    dtype = F.by_name(fmt).torch_dtype
    example, _ = op.example(0, dtype, "calibration", r0, c0)
    roles = []
    for t in example:
        rs = []
        for d in (t.shape if isinstance(t, torch.Tensor) else ()):
            rs.append("rows" if d == r0 else "cols" if d == c0 else "groups" if m > 1 and d == c0 // m else None)
        roles.append(rs)
    return roles if inputs is None else _reconciled(roles, inputs, m)


def _reconciled(roles: list, inputs, m: int) -> list:
    sizes: dict = {}
    for t, rs in zip(inputs, roles):
        if isinstance(t, torch.Tensor) and t.ndim == len(rs) and not _packed(t):
            for d, r in zip(t.shape, rs):
                if r is not None:
                    sizes.setdefault(r, []).append(int(d))
    size = {r: max(set(v), key=v.count) for r, v in sizes.items()}   # the size most inputs agree on
    out = []
    for t, rs in zip(inputs, roles):
        if not isinstance(t, torch.Tensor) or t.ndim != len(rs):
            out.append([None] * (t.ndim if isinstance(t, torch.Tensor) else 0))
            continue
        new = []
        for dim, (d, r) in enumerate(zip(t.shape, rs)):
            if r is None or r not in size:
                new.append(None)
            elif _packed(t):
                # a byte holds two columns: whole groups of an even size can be taken
                ok = r == "cols" and dim == t.ndim - 1 and 2 * d == size[r] and m % 2 == 0
                new.append("cols_packed" if ok else r if r == "rows" and d == size[r] else None)
            else:
                new.append(r if d == size[r] else None)
        out.append(new)
    return out


def _take(inputs, roles, role: str, keep: list, m: int = 1):
    out = []
    for t, rs in zip(inputs, roles):
        if not isinstance(t, torch.Tensor):
            out.append(t)
            continue
        for dim, r in enumerate(rs):
            if r == role or (role == "cols" and r in ("groups", "cols_packed")):
                if role == "cols" and r == "cols":
                    idx = [g * m + j for g in keep for j in range(m)]
                elif r == "cols_packed":
                    idx = [g * (m // 2) + j for g in keep for j in range(m // 2)]
                else:
                    idx = keep
                t = t.index_select(dim, torch.tensor(idx, dtype=torch.long, device=t.device))
        out.append(t.contiguous())
    return tuple(out)


def _axis_size(inputs, roles, role: str):
    for t, rs in zip(inputs, roles):
        for dim, r in enumerate(rs):
            if r == role:
                return t.shape[dim]
    return None


def _rejected_indices(outcome, role_size: int, axis: int) -> list:
    """Indices along an axis (0: rows, -1: cols) holding rejected elements,
    the worst element's first."""
    v = outcome.verdict
    if v is None:
        return []
    found = []
    w = v.worst()
    if w is not None:
        o, i, _ = w
        if o.kernel.ndim >= 1 and o.kernel.shape[axis] == role_size:
            idx = torch.unravel_index(torch.tensor(i), o.kernel.shape)
            found.append(int(idx[axis]))
    for o in v.outputs:
        if o.kernel.ndim >= 1 and o.kernel.shape[axis] == role_size and bool(o.rejected.any()):
            dims = [d for d in range(o.kernel.ndim) if d != (axis % o.kernel.ndim)]
            hit = o.rejected.any(dim=dims) if dims else o.rejected
            found += [int(k) for k in torch.nonzero(hit).reshape(-1)]
    seen, out = set(), []
    for k in found:
        if k not in seen:
            seen.add(k)
            out.append(k)
    return out


class _Budget:
    def __init__(self, seconds: float, evaluations: int):
        self.deadline = time.perf_counter() + seconds
        self.left = evaluations
        self.used = 0

    @property
    def spent(self) -> bool:
        return self.left <= 0 or time.perf_counter() > self.deadline


class _Shrinker:
    def __init__(self, evaluate, outcome, roles, budget):
        self.evaluate, self.best, self.roles, self.budget = evaluate, outcome, roles, budget
        self.target = outcome

    def attempt(self, inputs) -> bool:
        if self.budget.spent:
            return False
        self.budget.left -= 1
        self.budget.used += 1
        try:
            out = self.evaluate(inputs)
        except Exception:
            return False
        if same_failure(out, self.target):
            self.best = out
            return True
        return False

    def axis(self, role: str, axis: int, unit: int, lo: int) -> None:
        n = _axis_size(self.best.inputs, self.roles, role)
        if n is None or self.budget.spent:
            return
        units = n // unit
        min_units = max(1, -(-lo // unit))
        first = [k // unit for k in _rejected_indices(self.best, n, axis)]
        _ddmin(units, min_units, first,
               lambda keep: self.attempt(_take(self.best.inputs, self.roles, role, keep, unit)), self.budget)

    def replace(self, j: int, flat_idx, value_of):
        """Try input j with the elements ``flat_idx`` set to ``value_of(old)``:
        True if kept, False if not, None if that changes nothing (the elements
        are already that simple: callers stop trying less simple values)."""
        inputs = self.best.inputs
        t = inputs[j]
        fmt = F.of(t)
        v = F.decode(t, fmt)
        shape = v.shape                  # a packed tensor decodes to twice its columns
        v = v.reshape(-1)
        new = v.clone()
        for i in flat_idx:
            new[i] = value_of(float(v[i]))
        new = F.round(new, fmt)
        if bool(torch.equal(new, v)) and torch.equal(new.signbit(), v.signbit()):
            return None
        cand = list(inputs)
        if _packed(t):
            cand[j] = F.encode(new.reshape(shape), F.Packed(F.e2m1, "low_first")).view(t.dtype).to(t.device)
        else:
            cand[j] = F.encode(new.reshape(t.shape), fmt).to(t.device)
        return self.attempt(tuple(cand))

    def values(self) -> None:
        for j, t in enumerate(self.best.inputs):
            if not isinstance(t, torch.Tensor) or not t.dtype.is_floating_point or t.numel() == 0:
                continue
            n = 2 * t.numel() if _packed(t) else t.numel()
            # whole tensor: one value for all (0, 1, the most common value)
            common = float(torch.mode(F.decode(self.best.inputs[j]).reshape(-1)).values)
            for val in (0.0, 1.0, common):
                if self.budget.spent:
                    return
                if self.replace(j, range(n), lambda old, val=val: val) is not False:
                    break
            # chunks (halves, quarters, ...) toward 0, then toward +-1 keeping signs
            size = n // 2
            while size >= 1 and not self.budget.spent:
                for s in range(0, n, size):
                    idx = range(s, min(n, s + size))
                    if self.replace(j, idx, lambda old: 0.0) is False:
                        self.replace(j, idx, lambda old: math.copysign(1.0, old) if old else old)
                size //= 2
                if size and n // size > 64:     # element by element only for small tensors
                    break
            if n > 64:
                continue
            for i in range(n):
                for simpler in (lambda old: 0.0, lambda old: math.copysign(1.0, old), _pow2,
                                lambda old: _fewer_bits(old, 2), lambda old: _fewer_bits(old, 4)):
                    if self.budget.spent:
                        return
                    if self.replace(j, [i], simpler) is not False:
                        break


def minimize(evaluate, outcome, *, roles, cols_multiple_of=1, min_rows=1, min_cols=1, seconds=30.0,
             evaluations=400):
    """Shrink ``outcome`` (a finding with a ``failure_class``) element by element.
    ``evaluate(inputs) -> Outcome``.  Returns (best outcome, evaluations used)."""
    budget = _Budget(seconds, evaluations)
    sh = _Shrinker(evaluate, outcome, roles, budget)
    m = max(1, cols_multiple_of)
    # simpler values can make fewer rows/columns fail the same way: go round
    # again while a round made progress
    for _ in range(3):
        before = sh.best
        sh.axis("rows", 0, 1, min_rows)
        sh.axis("cols", -1, m, min_cols)
        sh.values()
        if sh.best is before or budget.spent:
            break
    return sh.best, budget.used


def _ddmin(n: int, min_keep: int, first: list, try_keep, budget) -> None:
    """Delete chunks of indices while the failure persists; ``try_keep``
    re-indexes from the current best, so kept sets are positions in it."""
    if n <= min_keep:
        return
    if min_keep <= 1:
        tried = set()
        for i in first[:6]:
            if i in tried or i >= n:
                continue
            tried.add(i)
            if budget.spent:
                return
            if try_keep([i]):
                return
    cur = n
    k = 2
    while cur > min_keep and not budget.spent:
        chunk = max(1, math.ceil(cur / k))
        removed = False
        for s in range(0, cur, chunk):
            keep = [i for i in range(cur) if not s <= i < s + chunk]
            if len(keep) < min_keep or not keep:
                continue
            if try_keep(keep):
                cur = len(keep)
                removed = True
                break
        if removed:
            k = max(2, k - 1)
        elif chunk == 1:
            return
        else:
            k = min(cur, 2 * k)


def _pow2(v: float) -> float:
    if v == 0 or not math.isfinite(v):
        return v
    return math.copysign(2.0 ** round(math.log2(abs(v))), v)


def _fewer_bits(v: float, bits: int) -> float:
    if v == 0 or not math.isfinite(v):
        return v
    e = math.floor(math.log2(abs(v)))
    q = 2.0 ** (e - bits + 1)
    return round(v / q) * q
