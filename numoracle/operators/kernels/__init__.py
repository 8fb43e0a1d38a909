"""numoracle's own Triton kernels, one module per operator.

Each kernel implements the precision plan of a public library (see docs/operators.md); the plan is
stated exactly in the docstring of each launcher. Launchers take and return torch tensors and never
write into their inputs.
"""
