"""Choosing a kernel: a registered name of the operator, or the user's own
``package.module:function`` (importable from the current directory).  Here, below the runner
and the plan reader, so that both (and ``no.check``'s plan line) can name kernels without an
import cycle; ``numoracle.runner.kernels`` re-exports it."""

from __future__ import annotations

import importlib
import os
import sys

from ..errors import InvalidArgument


def is_import_spec(spec: str) -> bool:
    return ":" in spec and not spec.startswith("faulty:")


def import_kernel(spec: str):
    """``package.module:function[:output indices]`` -> callable.  The current
    directory is put on ``sys.path`` first, so a user's module next to their
    tests is found the way ``python -m`` would find it."""
    mod, _, rest = spec.partition(":")
    fn, _, pick = rest.partition(":")
    if not mod or not fn:
        raise InvalidArgument(f"--kernel {spec!r}: expected package.module:function (or a registered kernel name).")
    cwd = os.getcwd()
    if cwd not in sys.path:
        sys.path.insert(0, cwd)
    try:
        f = getattr(importlib.import_module(mod), fn)
    except (ImportError, AttributeError) as exc:
        raise InvalidArgument(f"--kernel {spec!r}: cannot import it ({exc}); expected package.module:function "
                              f"importable from the current directory ({cwd}).") from None
    if not callable(f):
        raise InvalidArgument(f"--kernel {spec!r}: {mod}.{fn} is a {type(f).__name__}, not a callable kernel.")
    from .operator import pick_outputs
    return pick_outputs(f, pick or None)


def resolve(op, spec):
    """(callable, spec string) for ``--kernel``: a registered kernel name
    (``correct``, a variant, or ``faulty:NAME`` / a faulty kernel's name), an
    import spec, or a callable (its module:qualname is recorded)."""
    if callable(spec):
        name = f"{getattr(spec, '__module__', '?')}:{getattr(spec, '__qualname__', getattr(spec, '__name__', '?'))}"
        return spec, name
    if not isinstance(spec, str):
        raise InvalidArgument(f"kernel={spec!r}: expected a kernel name, package.module:function, or a callable.")
    if spec in op.kernel_specs:
        return op.kernels[spec], spec
    plain = spec.removeprefix("faulty:")
    if plain in getattr(op, "faulty", {}) and (spec.startswith("faulty:") or ":" not in spec):
        return op.faulty_kernel(plain), f"faulty:{plain}"
    if is_import_spec(spec):
        return import_kernel(spec), spec
    raise InvalidArgument(f"--kernel {spec!r}: {op.name} has kernels {sorted(op.kernel_specs)} and faulty "
                          f"kernels {sorted(getattr(op, 'faulty', {}))}; or give package.module:function "
                          f"for your own.")
