"""The operator: reference, kernels, input domain and example inputs in one object, found
by ``numoracle check tests_user_op.ops:my_op`` from the project's directory.

Kernels are named by ``package.module:function`` strings, so that numoracle imports the
modules that define them only after it has chosen the backend (the interpreter must be set
up before ``@triton.jit`` runs)."""

import torch

import numoracle as no
from numoracle.strategies import fill

from .reference import add_rms_norm


def example(seed, dtype, family, rows, cols):
    """One case: x and residual from the input family, a weight near 1."""
    x = fill((rows, cols), family, seed, dtype=dtype)
    residual = fill((rows, cols), family, seed + 1, dtype=dtype)
    w = (1.0 + 0.1 * fill((cols,), "normal", seed + 2, dtype=torch.float32)).to(dtype)
    return (x, residual, w), {}


my_op = no.Operator(
    "add_rms_norm", add_rms_norm,
    kernels={"correct": "tests_user_op.kernels:add_rms_norm"},
    example=example,
    domain=no.Domain(rows=(1, 64), cols=(1, 1024), formats=("bf16", "fp16", "fp32"),
                     params={"eps": (1e-6, 1e-5), "offset": (0.0, 1.0)}),
    faulty={"padded_mean": "tests_user_op.kernels_faulty:add_rms_norm"},
    source="tests_user_op")
