"""Mutation testing of an operator's Triton kernels against numoracle and the
fixed-tolerance baselines (docs/design.md §10): AST mutants, equivalence by evidence,
the kill matrix and the tuned-tolerance frontier."""

from .engine import Campaign, Mutant, kill_table, plan_mutants, run_campaign
from .mutators import MUTATORS, Site, apply_site, enumerate_sites

__all__ = ["Campaign", "Mutant", "MUTATORS", "Site", "apply_site", "enumerate_sites", "kill_table",
           "plan_mutants", "run_campaign"]
