"""Backends: where kernels run (docs/design.md §7).

``select(name)`` is the one rule the CLI, the pytest plugin and the API share:
"gpu" needs CUDA; "interpreter" runs Triton's interpreter on CPU tensors,
repaired by ``interpreter.install()`` so it computes what the GPU computes;
"auto" takes the GPU when there is one.
"""

from __future__ import annotations

import os

import torch

from ..errors import InvalidArgument

NAMES = ("interpreter", "gpu", "auto")


def select(name: str = "auto") -> str:
    """Resolve a backend name and prepare it; returns "interpreter" or "gpu"."""
    if name not in NAMES:
        raise InvalidArgument(f"backend={name!r}: expected one of {NAMES}.")
    if name == "auto":
        name = "gpu" if torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET") != "1" else "interpreter"
    if name == "gpu":
        if not torch.cuda.is_available():
            raise InvalidArgument("backend='gpu' but torch sees no CUDA device; use --backend interpreter "
                                  "to run kernels through Triton's interpreter on the CPU.")
        return "gpu"
    os.environ.setdefault("TRITON_INTERPRET", "1")
    from . import interpreter
    interpreter.install()
    return "interpreter"


def device(backend: str) -> str:
    return "cuda" if backend == "gpu" else "cpu"
