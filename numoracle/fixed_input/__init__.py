"""The fixed-input mode (docs/design.md §4.2): sound with no probabilistic model.

An element's region is its centre ± the worst case of every error term,
``R = Σ|a_s| W_s + P_abs + |d|``: whatever values the roundings, the math library and
the reduction order take inside their bounds, a correct kernel's value before its
store lies inside.  The verdict is conditional only on the assumption profile.

The mode has a second role: a statistical reject is re-judged here before it is
reported (``confirmation``).  The statistical radius never exceeds the fixed one, so
the fixed-input rejects are a subset of the statistical ones: "confirmed" when some
remain, "statistical-only" (reported apart from counterexamples) when none do.
"""

from __future__ import annotations

NAME = "fixed"
CONFIRMED = "confirmed"
STATISTICAL_ONLY = "statistical-only"
# what an explanation says of each confirmation (tests/snapshots fix the wording)
CONFIRMATION_TEXT = {
    CONFIRMED: "Confirmed: the fixed-input mode (no zero-mean assumption) rejects too",
    STATISTICAL_ONLY: "Statistical-only: the fixed-input mode accepts; reported apart from confirmed "
                      "counterexamples",
}


def radius(pre, n_elements: int, p: float):
    """The worst-case radius of the value ``pre`` (a tracked tensor) before its store;
    ``n_elements`` and ``p`` do not enter it (they are the statistical mode's)."""
    return pre.radius()


def confirmation(judgements) -> str:
    """The fixed-input re-judgement of a statistical reject: ``CONFIRMED`` when some
    output still has a rejected element in this mode, else ``STATISTICAL_ONLY``."""
    return CONFIRMED if any(bool(o.fixed_rejected.any()) for o in judgements) else STATISTICAL_ONLY
