"""Hypothesis strategies and input-shift families (DESIGN §8)."""

from .families import FAMILIES as FAMILIES
from .families import GROUPS as GROUPS
from .families import Group as Group
from .families import fill as fill
from .families import group as group
