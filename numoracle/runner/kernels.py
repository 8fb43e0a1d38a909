"""Choosing a kernel (``numoracle.operators.choose``, where the plan reader can reach it too)."""

from ..operators.choose import import_kernel, is_import_spec, resolve

__all__ = ["import_kernel", "is_import_spec", "resolve"]
