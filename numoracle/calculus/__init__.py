"""The error calculus (docs/design.md §4): tracked tensors, error forms, propagation."""
