"""numoracle's profiles ``ci``, ``dev`` and ``long``, as Hypothesis settings profiles.

Each profile has two halves of one name: Hypothesis's (``hypothesis.settings.register_profile``:
how many examples, whether the search is derandomized, the example database) and numoracle's
(``numoracle.settings.register_profile``: the shape caps and time budget of a property test,
fields Hypothesis has no place for).  Select one as any Hypothesis profile is selected,
``pytest --hypothesis-profile dev`` or ``hypothesis.settings.load_profile("dev")``; a property
test then runs under Hypothesis's loaded profile and numoracle's profile of the same name
(numoracle's current settings where it has none)::

    ci     10 examples, derandomized, no database (Hypothesis's own ci profile, which
           Hypothesis loads itself under CI), at most 8 x 256, no time budget
    dev    100 examples, database on, at most 32 x 512, 300 s
    long   100,000 examples, database on, the domain's shapes, 3600 s

Without a profile (Hypothesis's ``default``) a property test runs Hypothesis's defaults - 100
random examples, the example database in ``.hypothesis/examples`` - on numoracle's default
settings (at most 8 x 256, no time budget).

A project may register its own profiles of these names (in its conftest.py, after this module
registered numoracle's at the plugin's import); Hypothesis's and numoracle's are separate, so
overriding one half keeps the other.
"""

from __future__ import annotations

NAMES = ("ci", "dev", "long")

# numoracle's half of each profile
NUMORACLE = {
    "ci": {"max_rows": 8, "max_cols": 256, "time_budget": 0.0, "shrink_seconds": 10.0},
    "dev": {"max_rows": 32, "max_cols": 512, "time_budget": 300.0, "shrink_seconds": 30.0},
    "long": {"max_rows": None, "max_cols": None, "time_budget": 3600.0, "shrink_seconds": 120.0},
}


def register() -> None:
    """Register both halves of ``ci``, ``dev`` and ``long`` (again: the same values)."""
    from hypothesis import settings as hsettings
    from hypothesis.errors import InvalidArgument

    from .config import settings
    try:
        ci = hsettings.get_profile("ci")      # Hypothesis's own (6.100+), loaded by it under CI
    except InvalidArgument:
        ci = hsettings(derandomize=True, database=None, print_blob=True)
    # deadline=None everywhere: a case's time is the kernel's (Triton's interpreter, a first
    # compilation), bounded by numoracle's kernel_timeout, not a property of the test
    hsettings.register_profile("ci", hsettings(ci, max_examples=10, deadline=None))
    # dev and long from Hypothesis's defaults, not from whatever profile is loaded: under CI
    # Hypothesis loads its own ci profile (derandomized, no database) before this runs
    base = hsettings.get_profile("default")
    hsettings.register_profile("dev", hsettings(base, max_examples=100, deadline=None))
    hsettings.register_profile("long", hsettings(base, max_examples=100_000, deadline=None))
    for name, fields in NUMORACLE.items():
        settings.register_profile(name, **fields)


def current():
    """(Hypothesis's settings, numoracle's settings) a property test runs under now: Hypothesis's
    loaded profile, and numoracle's profile of the same name, else numoracle's current settings."""
    from hypothesis import settings as hsettings

    from .config import _PROFILES
    from .config import current as ncurrent
    name = hsettings.get_current_profile_name()
    return hsettings.default, (_PROFILES[name] if name in _PROFILES and name != "default" else ncurrent())


__all__ = ["NAMES", "NUMORACLE", "current", "register"]
