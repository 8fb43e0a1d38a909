"""Hypothesis strategies and input-shift families (docs/design.md §8).

- ``floats(fmt)`` / ``bits(fmt)`` / ``values(fmt)``: elements of any numoracle
  format (bf16, fp16, fp8 e4m3fn / e5m2 / e4m3fnuz, fp4 e2m1, e8m0, ...), every
  representable value reachable;
- ``cases(op, ...)``: whole cases of an operator (:class:`Case`), structure
  drawn by Hypothesis, bulk filled from the seed;
- ``fill``, ``FAMILIES``, ``GROUPS``, ``group``: the input families and the
  named input-shift groups (``calibration`` first); ``ADVERSARIAL_GROUPS``: groups
  for soundness searches (subnormals, format boundaries, cancellation, ...);
  ``soundness_cases(op, ...)``: what the soundness search draws (``SOUNDNESS_GROUPS``).
"""

from .cases import SOUNDNESS_GROUPS as SOUNDNESS_GROUPS
from .cases import SPECIALS as SPECIALS
from .cases import Case as Case
from .cases import cases as cases
from .cases import explicit_cases as explicit_cases
from .cases import group_cases as group_cases
from .cases import soundness_cases as soundness_cases
from .cases import sweep_cases as sweep_cases
from .elements import bits as bits
from .elements import floats as floats
from .elements import values as values
from ..families import ADVERSARIAL_GROUPS as ADVERSARIAL_GROUPS
from ..families import FAMILIES as FAMILIES
from ..families import GROUPS as GROUPS
from ..families import Group as Group
from ..families import fill as fill
from ..families import group as group

__all__ = ["Case", "cases", "explicit_cases", "group_cases", "sweep_cases", "soundness_cases", "SPECIALS",
           "SOUNDNESS_GROUPS", "floats", "bits", "values",
           "FAMILIES", "GROUPS", "ADVERSARIAL_GROUPS", "Group", "fill", "group"]
