"""The plan check as one line of a verdict's assumptions, computed once per compiled plan.

A verdict says what it assumed; one assumption is that the reference's precision plan is the
kernel's.  :func:`assumption` runs :func:`numoracle.plan.check_plan` the first time it sees a
(reference, kernel, input signature, parameters, target) and returns the same line after that:
the compiled plan depends on those, not on the input values, and a check costs 0.1-1.5 s
(about 5 s more the first time in a process in interpreter mode, which starts the compile helper
process).
"""

from __future__ import annotations

import threading

import torch

from ..errors import InvalidArgument

_CACHE: dict = {}
_LOCK = threading.Lock()
# objects a key names by identity, kept alive so that their id is not reused (one entry an object)
_KEEP: dict = {}


def assumption(op, kernel="correct", inputs=(), params=None, *, arch=None, profile="h200",
               config: int = 0, kernel_kwargs=None) -> str | None:
    """One line for a verdict's assumptions: the plan check of ``kernel`` against ``op``'s
    reference on inputs like ``inputs``, or why it was not made.

    Arguments are :func:`numoracle.plan.check_plan`'s: ``op`` an operator, its registered name or
    a reference program; ``kernel`` a registered kernel name (``"correct"``, a variant,
    ``"faulty:NAME"``), ``package.module:function`` or a callable launcher (with a reference
    program, a callable); ``inputs`` and ``params`` one call's inputs and keyword parameters;
    ``kernel_kwargs`` keyword arguments for the kernel only (a runner case's kernel config),
    not for the reference.  The launcher runs (its launches recorded, not executed) on copies
    of ``inputs`` with their strides and 16-byte alignment, so host code that works in place
    leaves the caller's tensors alone.

    Returns

    * ``"precision plan checked against the compiled kernel (cuda sm90): no disagreement"``, or
      ``"...: N disagreement(s), first: <message>"`` (``PlanReport.assumption()``);
    * ``"precision plan not checked: <why>"`` when the check could not be made: a kernel that does
      not compile for the target (the compiler's cause), a launcher that raised before any
      Triton launch, a reference the calculus cannot run on these inputs, any other error of the
      capture, compilation, reading or check (``SystemExit`` from a launcher included).  It
      never raises for those, only for the user's interrupt (``KeyboardInterrupt``);
    * ``None`` when the launcher launched no Triton kernel (a torch function, say): there is no
      compiled plan to check and nothing to say.

    Raises :class:`numoracle.errors.InvalidArgument` only for arguments that name nothing (an
    unknown operator or kernel name), as ``check_plan`` does.

    Cached per (reference, kernel, signature of ``inputs``, ``params``, ``arch``, ``profile``,
    ``config``), for the life of the process: the signature of a tensor is its dtype, shape,
    strides, device type and whether its address is 16-byte aligned (what Triton specializes
    on); of a Python scalar its type and value.  A launcher whose launches depend on input
    values is checked on the first inputs of each signature.  Thread-safe: concurrent calls
    with one key run the check once.  ``assumption.cache_clear()`` empties the cache.
    """
    from . import _resolve
    params = dict(params or {})
    kernel_kwargs = dict(kernel_kwargs or {})
    ref, fn, name = _resolve(op, kernel)        # names that name nothing raise here
    key = (_ident(ref), _ident(fn), _signature(inputs), _frozen(params), arch, _ident(profile), config,
           _frozen(kernel_kwargs))
    with _LOCK:
        entry = _CACHE.get(key)
        if entry is None:
            entry = _CACHE[key] = [threading.Lock(), False, None]
    with entry[0]:
        if not entry[1]:
            if kernel_kwargs:
                fn = _bound(fn, kernel_kwargs)
            entry[2] = _line(ref, fn, name, [_copy(x) for x in inputs], params, arch, profile, config)
            entry[1] = True
        return entry[2]


def _cache_clear() -> None:
    with _LOCK:
        _CACHE.clear()
        _KEEP.clear()


assumption.cache_clear = _cache_clear


def _bound(fn, kwargs: dict):
    """``fn`` with the kernel-only keyword arguments ``kwargs`` bound."""
    def launcher(*a, **k):
        return fn(*a, **k, **kwargs)
    launcher.__name__ = getattr(fn, "__name__", "kernel")
    return launcher


def _copy(x):
    """A copy of tensor ``x`` with its shape, strides and address modulo 16 (what Triton
    specializes on); ``x`` itself where no such copy can be made (overlapping strides)."""
    if isinstance(x, (tuple, list)):
        return type(x)(_copy(v) for v in x)
    if not isinstance(x, torch.Tensor):
        return x
    try:
        k = (x.data_ptr() % 16) // max(1, x.element_size())
        extent = 1 + sum((n - 1) * st for n, st in zip(x.shape, x.stride())) if x.numel() else 0
        buf = torch.empty(k + extent, dtype=x.dtype, device=x.device)
        out = buf.as_strided(tuple(x.shape), tuple(x.stride()), k)
        with torch.no_grad():
            out.copy_(x)
        return out
    except Exception:                         # noqa: BLE001 - a stride-0 view, a tensor subclass
        return x


def _line(ref, fn, name, inputs, params, arch, profile, config) -> str | None:
    from .check import check
    from .extract import extract_plan
    from .reference import reference_plan
    try:
        kplan = extract_plan(fn, inputs, params, arch=arch, config=config)
    except InvalidArgument as exc:
        # a kernel that does not compile for the target, a launcher that raised before launching
        return f"precision plan not checked: {exc}"
    except KeyboardInterrupt:
        raise
    except BaseException as exc:              # noqa: BLE001 - an assumption line must not end a run
        return f"precision plan not checked: reading the kernel's plan failed ({type(exc).__name__}: {exc})"
    if not kplan.capture.launches:
        return None                          # no Triton kernel: no compiled plan to check
    try:
        rplan = reference_plan(ref, inputs, params, profile=profile, launch=kplan.capture.launch_values())
    except Exception as exc:                  # noqa: BLE001
        return f"precision plan not checked: the reference's plan could not be read ({type(exc).__name__}: {exc})"
    try:
        return check(kplan, rplan, kernel_name=name).assumption()
    except Exception as exc:                  # noqa: BLE001
        return f"precision plan not checked: the check failed ({type(exc).__name__}: {exc})"


def _ident(x):
    """A cache key part for an object: itself when hashable and plain, else its identity."""
    if x is None or isinstance(x, (str, int, float, bool)):
        return x
    from .. import operators
    if isinstance(x, operators.Operator):
        return ("operator", x.name, id(x.reference))
    _KEEP[id(x)] = x
    return ("object", id(x))


def _signature(inputs) -> tuple:
    out = []
    for x in inputs:
        if isinstance(x, torch.Tensor):
            out.append(("tensor", str(x.dtype), tuple(x.shape), tuple(x.stride()), x.device.type,
                        x.data_ptr() % 16 == 0))
        elif x is None or isinstance(x, (bool, int, float, str)):
            out.append((type(x).__name__, x))
        elif isinstance(x, (tuple, list)):
            out.append(("seq", _signature(x)))
        else:
            out.append((type(x).__name__, repr(x)[:200]))
    return tuple(out)


def _frozen(params: dict) -> tuple:
    return tuple(sorted((k, repr(v)) for k, v in params.items()))


def annotate(verdicts: dict, op, kernel, inputs, params=None, *, kernel_kwargs=None) -> dict:
    """``verdicts`` (mode -> Verdict) with the plan check's line in their assumptions
    (``Assumptions.plan``), when there is one (see :func:`assumption`).  Never raises but for
    the user's interrupt: a kernel it cannot name or check gives a 'not checked' line."""
    import dataclasses
    try:
        line = assumption(op, kernel, inputs, params, kernel_kwargs=kernel_kwargs)
    except KeyboardInterrupt:
        raise
    except BaseException as exc:              # noqa: BLE001 - an unknown kernel name: still a verdict
        line = f"precision plan not checked: {type(exc).__name__}: {exc}"
    if line is None:
        return verdicts
    for v in verdicts.values():
        if v.assumptions is not None:
            v.assumptions = dataclasses.replace(v.assumptions, plan=line)
    return verdicts
