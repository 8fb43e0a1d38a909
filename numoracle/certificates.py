"""Finite-range certificates (DESIGN §4.6).

Every rounding site checks that its enclosure [c - R, c + R] stays inside its
format's finite range, and every math call that its argument stays inside the
function's calibrated domain.  A site that may leave it taints the elements
that depend on it: those are reported ``uncertified`` (never silently accepted
or rejected), and the certificate names the site.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Certificate:
    sites: list = field(default_factory=list)       # [SiteRecord]
    inputs: str = "finite"                          # the policy applied to inputs

    @property
    def holds(self) -> bool:
        return all(s.violations == 0 for s in self.sites)

    @property
    def failing(self) -> list:
        return [s for s in self.sites if s.violations]

    def to_dict(self) -> dict:
        return {"holds": self.holds, "inputs": self.inputs,
                "sites": [s.to_dict() for s in self.sites]}

    def summary(self) -> str:
        if self.holds:
            return f"certificate: holds at all {len(self.sites)} sites"
        parts = [f"{s.label} ({s.kind}: {s.limit}; {s.violations}/{s.elements} elements, worst {s.worst:.4g})"
                 for s in self.failing[:3]]
        more = "" if len(self.failing) <= 3 else f" and {len(self.failing) - 3} more"
        return "certificate fails at " + "; ".join(parts) + more
