"""Choosing a kernel: a registered name of the operator, or the user's own
``package.module:function`` (importable from the current directory).  Here, below the runner
and the plan reader, so that both (and ``no.check``'s plan line) can name kernels without an
import cycle; ``numoracle.runner.kernels`` re-exports it."""

from __future__ import annotations

import importlib
import os
import sys
import traceback

from ..errors import InvalidArgument, NotImportable


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
    if pick and not all(i.strip().isdigit() for i in pick.split(",")):
        raise InvalidArgument(f"--kernel {spec!r}: the third field {pick!r} must be output indices, e.g. "
                              f"{mod}:{fn}:0 or {mod}:{fn}:0,2 (the outputs the operator judges).")
    module = _import(spec, mod, cwd)
    try:
        f = getattr(module, fn)
    except AttributeError as exc:
        raise InvalidArgument(f"--kernel {spec!r}: cannot import it ({exc}); expected package.module:function "
                              f"importable from the current directory ({cwd}).") from None
    if not callable(f):
        raise InvalidArgument(f"--kernel {spec!r}: {mod}.{fn} is a {type(f).__name__}, not a callable kernel.")
    from .operator import pick_outputs
    return pick_outputs(f, pick or None)


def _import(spec: str, mod: str, cwd: str, label: str | None = None, expected: str = "package.module:function"):
    """The user's module ``mod``; whatever its import raises (a syntax error, an exception or
    sys.exit in its own code, a dependency it lacks) is an InvalidArgument naming the file and
    line, not a traceback.  ``label`` names what was given (default: the --kernel flag)."""
    label = label or f"--kernel {spec!r}"
    try:
        return importlib.import_module(mod)
    except SyntaxError as exc:
        raise InvalidArgument(f"{label}: {exc.filename}:{exc.lineno}: {type(exc).__name__}: {exc.msg}; "
                              f"fix the module's syntax.") from None
    except ImportError as exc:
        missing = getattr(exc, "name", None)
        if missing and mod != missing and not mod.startswith(missing + "."):
            raise NotImportable(f"{label}: {mod} imports {missing!r}, which cannot be imported "
                                  f"({exc}){_where(exc)}; install it or fix the import.") from None
        raise NotImportable(f"{label}: cannot import it ({exc}); expected {expected} "
                            f"importable from the current directory ({cwd}).") from None
    except (Exception, SystemExit) as exc:
        what = f"SystemExit({exc.code!r})" if isinstance(exc, SystemExit) else f"{type(exc).__name__}: {exc}"
        raise InvalidArgument(f"{label}: importing {mod} raised {what}{_where(exc)}, in the module's own "
                              f"code before any kernel ran; fix the module so that importing it succeeds.") from None


def _where(exc) -> str:
    """' at FILE:LINE': the deepest frame of the import that is not the import machinery's."""
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if not f.filename.startswith("<frozen")
              and f.filename != __file__]
    return f" at {frames[-1].filename}:{frames[-1].lineno}" if frames else ""


def resolve(op, spec):
    """(callable, spec string) for ``--kernel``: a registered kernel name
    (``correct``, a variant, or ``faulty:NAME`` / a faulty kernel's name), an
    import spec, or a callable (its module:qualname is recorded)."""
    if callable(spec):
        name = f"{getattr(spec, '__module__', '?')}:{getattr(spec, '__qualname__', getattr(spec, '__name__', '?'))}"
        _takes_the_arguments(op, spec, f"kernel {name}")
        return spec, name
    if not isinstance(spec, str):
        raise InvalidArgument(f"kernel={spec!r}: expected a kernel name, package.module:function, or a callable.")
    if spec in op.kernel_specs:
        return op.kernels[spec], spec
    plain = spec.removeprefix("faulty:")
    if plain in getattr(op, "faulty", {}) and (spec.startswith("faulty:") or ":" not in spec):
        return op.faulty_kernel(plain), f"faulty:{plain}"
    if is_import_spec(spec):
        f = import_kernel(spec)
        _takes_the_arguments(op, f, f"--kernel {spec!r}")
        return f, spec
    raise InvalidArgument(f"--kernel {spec!r}: {op.name} has kernels {sorted(op.kernel_specs)} and faulty "
                          f"kernels {sorted(getattr(op, 'faulty', {}))}; or give package.module:function "
                          f"for your own.")


def _takes_the_arguments(op, f, label: str) -> None:
    """Refuse, before any case runs, a kernel that cannot be called the way every case calls
    it: the reference's inputs by position, its parameters by keyword.  (Otherwise each case
    is the kernel's TypeError, and a search shrinks it as if it were a finding.)"""
    import inspect
    ref = getattr(op, "reference", None)
    if ref is None:
        return
    try:
        sig = inspect.signature(f)
    except (TypeError, ValueError):          # a builtin or extension callable: nothing to read
        return
    try:
        # a no.launch() parameter is read from the launch, never passed to the kernel; one with a
        # default that the domain does not vary is passed only where a case's example gives it
        # (a block size only the reference's loop uses need not be the kernel's keyword)
        ref_sig = inspect.signature(ref.fn)
        passed = [p for p in ref.param_names if p not in ref.launch_params
                  and (ref_sig.parameters[p].default is inspect.Parameter.empty or p in op.domain.params)]
        sig.bind(*ref.input_names, **dict.fromkeys(passed))
    except TypeError as exc:
        raise InvalidArgument(f"{label}: {getattr(f, '__name__', 'the kernel')}{sig} cannot be called as "
                              f"{op.name}'s kernels are, {op.kernel_signature()} ({exc}); give it the "
                              f"reference's inputs in order and its parameters as keywords "
                              f"(numoracle ops {op.name} shows the signature).") from None
