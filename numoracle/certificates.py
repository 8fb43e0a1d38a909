"""Finite-range certificates (docs/design.md §4.6).

Every rounding site checks that its enclosure [c - R, c + R] stays inside its
format's finite range, and every math call that its argument stays inside the
function's calibrated domain.  A site that may leave it taints the elements
that depend on it: those are reported ``uncertified`` (never silently accepted
or rejected), and the certificate names the site.
"""

from __future__ import annotations

import re

_COUNT = re.compile(r"(?<![:\w.])\d+(?![\w.])")


def site_kind(label: str) -> str:
    """A site label without its sizes ("fp32 sum over 96 ..." -> "fp32 sum over n ..."):
    a smaller case of the same failure has the same site, only the count changes.  Source
    positions ("(rms_norm:83)") are kept."""
    return _COUNT.sub("n", label)


class Certificate:
    """The sites of one evaluation and the policy applied to inputs.  ``sites``
    is a list of ``SiteRecord``, or computed on first use by ``compute()``
    (the compiled path leaves the per-site statistics out of its fused graph
    and fills them in from an eager run of the same program, on the same
    inputs, when the certificate is read)."""

    def __init__(self, sites=None, inputs: str = "finite", *, compute=None):
        self._sites = list(sites) if sites is not None else None
        self._compute = compute
        self.inputs = inputs

    @property
    def sites(self) -> list:
        if self._sites is None:
            self._sites = list(self._compute()) if self._compute is not None else []
            self._compute = None
        return self._sites

    def __eq__(self, other):
        return isinstance(other, Certificate) and self.to_dict() == other.to_dict()

    def __repr__(self):
        return f"Certificate({len(self.sites)} sites, holds={self.holds}, inputs={self.inputs!r})"

    @property
    def holds(self) -> bool:
        return all(s.violations == 0 for s in self.sites)

    @property
    def failing(self) -> list:
        return [s for s in self.sites if s.violations]

    def to_dict(self) -> dict:
        return {"holds": self.holds, "inputs": self.inputs,
                "sites": [s.to_dict() for s in self.sites]}

    def reasons(self) -> list:
        """Why elements are uncertified, one line per cause: each failing site with its
        kind (a range it may leave, a domain its argument may leave), its limit and the
        largest magnitude its enclosure reaches; non-finite inputs."""
        out = []
        for s in self.failing:
            if s.kind == "selection":
                # a choice the kernel did not store: values read at it depend on which index won
                out.append(f"{s.label}: another index may win where values are this close, and the kernel's "
                           f"choice is not an output ({s.violations} of {s.elements} rows); return it to judge "
                           f"values at the kernel's own choice")
                continue
            what = ("may leave its format's finite range" if s.kind == "range"
                    else "its argument may leave the function's calibrated domain")
            out.append(f"{s.label}: {what} ({s.limit}; enclosure up to {s.worst:.4g}, "
                       f"{s.violations} of {s.elements} elements)")
        if self.inputs != "finite":
            out.append(f"non-finite input(s): {self.inputs}")
        return out

    def reason_kinds(self) -> list:
        """The causes in a word each, for counting: 'range: <site>', 'domain: <site>',
        'non-finite input'."""
        # two sites of one kind on one line (x * x * w) are one cause: a case counts once
        kinds = list(dict.fromkeys(f"{s.kind}: {site_kind(s.label)}" for s in self.failing))
        if self.inputs != "finite":
            kinds.append("non-finite input")
        return kinds

    def summary(self) -> str:
        if self.holds:
            return f"certificate: holds at all {len(self.sites)} sites"
        parts = [f"{s.label} (selection: another index may win in {s.violations}/{s.elements} rows, and the "
                 f"kernel's choice is not an output)" if s.kind == "selection" else
                 f"{s.label} ({s.kind}: {s.limit}; {s.violations}/{s.elements} elements, worst {s.worst:.4g})"
                 for s in self.failing[:3]]
        more = "" if len(self.failing) <= 3 else f" and {len(self.failing) - 3} more"
        return "certificate fails at " + "; ".join(parts) + more
