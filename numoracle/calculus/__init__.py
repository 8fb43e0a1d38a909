"""The error calculus (DESIGN §4): tracked tensors, error forms, propagation."""
