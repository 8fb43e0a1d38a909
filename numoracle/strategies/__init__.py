"""Hypothesis strategies and input-shift families (DESIGN §8)."""

from .families import FAMILIES as FAMILIES
from .families import fill as fill
