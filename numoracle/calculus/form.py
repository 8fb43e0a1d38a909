"""The error form of a tracked tensor (docs/design.md §4):

    e = sum_s a_s * eps_s  +  p  +  d

- ``shared``: symbol key -> ``Term(coef, s)``.  ``eps_s`` is a tensor of
  independent variables in [-1, 1]; ``s.shape`` is the symbol's *extent* aligned
  to this tensor (size 1 along axes the symbol is shared over, e.g. a row
  statistic has extent [R, 1]).  ``coef`` broadcasts to the tensor's shape.
  ``s`` (0 <= s <= 1) is the square root of the symbol's variance proxy, so an
  element's worst-case contribution is |coef| and its statistical one
  (coef * s)^2.  One key is one set of variables: two paths to the same key add
  their coefficients with sign.
- ``private``: element-local errors condensed per element into ``Entry(abs, var)``
  (worst case sum |c_k| u_k and variance proxy sum c_k^2 u_k^2).  Each entry
  carries ``prov``, the keys of the variables it is made of, so that an entry and
  a symbol built from the same roundings are never treated as independent.
- ``det``: label -> non-negative magnitude of deterministic terms (math-library
  errors, remainders, underflow), never treated as random.

Statistical soundness rule for dependence: terms whose provenance overlaps are
combined by adding their standard deviations (a sum of dependent sub-Gaussians
with proxies s1^2, s2^2 is (s1+s2)^2-sub-Gaussian, by Hölder); independent
terms add variances.  ``stat_sigma2`` applies it with a union-find over keys.

When ``condensed`` (the default) all private entries merge into one and all
deterministic terms into one label, so memory stays a small constant per
element; the explanation re-runs the program uncondensed to attribute width to
sites.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

Tensor = torch.Tensor

PRIVATE = "private rounding"
DET = "deterministic"


@dataclass
class Term:
    coef: Tensor
    s: Tensor


@dataclass
class Entry:
    abs: Tensor
    var: Tensor
    prov: frozenset
    label: str


@dataclass
class Form:
    shared: dict = field(default_factory=dict)    # key -> Term
    private: list = field(default_factory=list)   # [Entry]
    det: dict = field(default_factory=dict)       # label -> Tensor

    def is_zero(self) -> bool:
        return not self.shared and not self.private and not self.det


def merge_entry(a: Entry, b: Entry, label: str) -> Entry:
    if a.prov & b.prov:
        var = (a.var.sqrt() + b.var.sqrt()).square()
    else:
        var = a.var + b.var
    return Entry(a.abs + b.abs, var, a.prov | b.prov, label)


def normalise(entries: list, det: dict, condensed: bool) -> tuple[list, dict]:
    """Merge entries by label (one label when condensed)."""
    out: dict[str, Entry] = {}
    for e in entries:
        label = PRIVATE if condensed else e.label
        e = Entry(e.abs, e.var, e.prov, label)
        out[label] = e if label not in out else merge_entry(out[label], e, label)
    if condensed and len(det) > 1:
        total = None
        for v in det.values():
            total = v if total is None else total + v
        det = {DET: total}
    return list(out.values()), det


def scale(f: Form, g) -> Form:
    """The form of g * x for an exact multiplier g (tensor or float)."""
    if isinstance(g, (int, float)):
        if g == 1:
            return f
        ag = abs(g)
        g2 = g * g
    else:
        ag = g.abs()
        g2 = g * g
    return Form(
        {k: Term(t.coef * g, t.s) for k, t in f.shared.items()},
        [Entry(e.abs * ag, e.var * g2, e.prov, e.label) for e in f.private],
        {k: v * ag for k, v in f.det.items()},
    )


def add(f1: Form, f2: Form, condensed: bool) -> Form:
    shared = dict(f1.shared)
    for k, t in f2.shared.items():
        if k in shared:
            shared[k] = Term(shared[k].coef + t.coef, shared[k].s)
        else:
            shared[k] = t
    det = dict(f1.det)
    for k, v in f2.det.items():
        det[k] = det[k] + v if k in det else v
    private, det = normalise(f1.private + f2.private, det, condensed)
    return Form(shared, private, det)


def add_det(f: Form, label: str, mag: Tensor, condensed: bool) -> Form:
    det = dict(f.det)
    key = DET if condensed else label
    det[key] = det[key] + mag if key in det else mag
    return Form(f.shared, f.private, det)


def add_private(f: Form, entry: Entry, condensed: bool) -> Form:
    private, det = normalise(f.private + [entry], f.det, condensed)
    return Form(f.shared, private, det)


def masked(f: Form, keep: Tensor) -> Form:
    """The form with every term zeroed where ``keep`` is false (elements whose
    value became exactly known).  A select, not a product: a term that is infinite or NaN
    there (sqrt's slope at an exact 0) is dropped too."""
    def z(v):
        return torch.where(keep, v, 0.0)
    return Form(
        {key: Term(z(t.coef), t.s) for key, t in f.shared.items()},
        [Entry(z(e.abs), z(e.var), e.prov, e.label) for e in f.private],
        {key: z(v) for key, v in f.det.items()},
    )


def fixed_radius(f: Form, like: Tensor) -> Tensor:
    """Worst-case radius: sum |a_s| + P_abs + |d| (docs/design.md §4.2, fixed-input)."""
    r = torch.zeros_like(like, dtype=torch.float64)
    for t in f.shared.values():
        r = r + t.coef.abs()
    for e in f.private:
        r = r + e.abs
    for v in f.det.values():
        r = r + v
    return r


def det_total(f: Form, like: Tensor) -> Tensor:
    r = torch.zeros_like(like, dtype=torch.float64)
    for v in f.det.values():
        r = r + v
    return r


def _clusters(items: list[tuple[object, frozenset]]) -> list[list[int]]:
    """Group item indices whose provenance sets overlap (transitively)."""
    parent = list(range(len(items)))

    def find(i):
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    owner: dict = {}
    for i, (_, prov) in enumerate(items):
        for key in prov:
            j = owner.setdefault(key, i)
            ri, rj = find(i), find(j)
            if ri != rj:
                parent[ri] = rj
    groups: dict[int, list[int]] = {}
    for i in range(len(items)):
        groups.setdefault(find(i), []).append(i)
    return list(groups.values())


def _random_terms(f: Form, provs: dict) -> list:
    """Per random term of f: (label, provenance, sigma, variance), the last two as functions
    (a cluster of one term needs its variance alone, not a square root squared again)."""
    terms = []
    for k, t in f.shared.items():
        prov, label = provs[k]
        terms.append((label, prov, lambda t=t: (t.coef * t.s).abs(), lambda t=t: (t.coef * t.s).square()))
    for e in f.private:
        terms.append((e.label, e.prov, lambda e=e: e.var.sqrt(), lambda e=e: e.var))
    return terms


def _term_clusters(terms: list) -> list[list[int]]:
    return _clusters([(None, prov) for _, prov, _, _ in terms])


def stat_sigmas(f: Form, provs: dict) -> list[tuple[str, Tensor, int]]:
    """Per item (label, sigma, cluster id).  provs: symbol key -> (prov, label)."""
    terms = _random_terms(f, provs)
    return [(terms[i][0], terms[i][2](), cid) for cid, group in enumerate(_term_clusters(terms)) for i in group]


def stat_sigma2(f: Form, provs: dict, like: Tensor) -> Tensor:
    """Variance proxy of the random part: clusters of dependent terms add
    standard deviations, clusters add variances.  A cluster of one term adds its
    variance as it is: a square root squared again is a vector square root an
    element in a compiled verdict (the slowest operation of rms_norm's), and one more
    rounding."""
    terms = _random_terms(f, provs)
    v = torch.zeros_like(like, dtype=torch.float64)
    for group in _term_clusters(terms):
        if len(group) == 1:
            v = v + terms[group[0]][3]()
            continue
        s = terms[group[0]][2]()
        for i in group[1:]:
            s = s + terms[i][2]()
        v = v + s.square()
    return v
