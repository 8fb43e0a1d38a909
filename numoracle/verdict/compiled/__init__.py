"""The compiled verdict: the error calculus fused by ``torch.compile``.

Run eagerly, a verdict makes on the order of a hundred full-size float64 passes (each
form term, rounding and range check is its own torch operation).  The calculus has no
element-wise Python: its Python structure depends only on the program, the shapes, the
formats and the parameters.  So a program judged repeatedly on one *signature* (those,
plus the mode, p, math profile, input policy and compile settings) is traced once and
compiled into a few fused loops (C++ on the CPU, Triton kernels on a GPU).

The compiled function is the same code as the eager path (``evaluation.evaluate`` with
``Context.traced`` set: every data-dependent shortcut takes its general path, which
computes the same values) plus the rounding-interval check.  The first call of a
signature is always eager: the certificate's site labels (which name reference-program
lines) come from it.  The first compiled call is compared with the same code run eagerly
(``compare``); whatever fails to compile or to compare is judged eagerly, with one
warning per signature.

When a signature compiles is the settings' ``compile`` policy (``numoracle.config``): a
verdict returns its flags alone (its status), its regions, masks and explanation being
computed when first asked for (``Plan``); on CUDA the flags function replays as a CUDA
graph (``graphs``); an accepted verdict holds the caller's tensors (``holding``).
"""

from __future__ import annotations

import threading

from .inductor import can_compile
from .plan import Plan, struct

_lock = threading.Lock()
_plans: dict = {}
_kind_seconds: dict = {}     # a kind of signature -> seconds of its eager verdicts so far


def clear() -> None:
    """Forget every plan (and its compiled function)."""
    with _lock:
        _plans.clear()
        _kind_seconds.clear()


def spent(plan, seconds: float) -> None:
    """Count an eager verdict's time against its signature's kind (``plan_for``)."""
    with _lock:
        if plan.kind_key is not None:
            _kind_seconds[plan.kind_key] = _kind_seconds.get(plan.kind_key, 0.0) + seconds


def plans() -> list:
    """The plans made so far (for tests and benchmarks)."""
    with _lock:
        return list(_plans.values())


def _tensor_key(t):
    return (tuple(t.shape), tuple(t.stride()), t.dtype, t.device.type, t.device.index)


def _kind_key(t):
    """A tensor's part of a signature's kind: what a trace with symbolic sizes still fixes
    (torch specialises sizes 0 and 1; a non-contiguous layout indexes differently)."""
    return (t.ndim, tuple(d <= 1 for d in t.shape), t.is_contiguous(), t.dtype, t.device.type, t.device.index)


def _param_key(params: dict):
    from ... import formats as F
    items = []
    for k, v in sorted(params.items()):
        if isinstance(v, (bool, int, float, str, type(None))):
            items.append((k, type(v).__name__, v))
        elif isinstance(v, F.Format):
            items.append((k, "fmt", v.name))
        else:
            return None             # tensors, lists, objects: not part of a static signature
    return tuple(items)


def plan_for(program, inputs, outputs, params, prof, p, modes, nonfinite, settings):
    """The plan of this call's signature (counting the call), or None when the settings or
    the arguments keep it eager."""
    if settings.compile == "never" or not modes:
        return None
    structs, tensors = [], []
    for x in list(inputs) + list(outputs):
        st = struct(x)
        if st is None:
            return None
        structs.append(st[0])
        tensors += st[1]
    pk = _param_key(params)
    if pk is None:
        return None
    common = (program, getattr(prof, "name", id(prof)), float(p), tuple(modes), nonfinite, len(inputs),
              tuple((s[0], None if s[1] is None else s[1].name) for s in structs), pk, settings)
    key = common + (tuple(_tensor_key(t) for t in tensors),)
    judged = sum(t.numel() for t in tensors)
    device = tensors[0].device.type if tensors else "cpu"
    with _lock:
        plan = _plans.get(key)
        if plan is None:
            plan = _plans[key] = Plan(program, params, prof, p, tuple(modes), nonfinite, structs,
                                      len(inputs), settings, device, judged)
        plan.calls += 1
        if not plan.ready and settings.compile_shapes_after > 0 and tensors:
            # the signature's kind: once its eager verdicts have taken compile_shapes_after seconds,
            # one plan traced with symbolic sizes serves all its shapes (from the next eager run on,
            # which teaches it the sites)
            kkey = plan.kind_key = common + ("kind", tuple(_kind_key(t) for t in tensors))
            kind = _plans.get(kkey)
            if kind is None and _kind_seconds.get(kkey, 0.0) >= settings.compile_shapes_after:
                kind = _plans[kkey] = Plan(program, params, prof, p, tuple(modes), nonfinite, structs,
                                           len(inputs), settings, device, judged, symbolic=True)
            if kind is not None:
                kind.calls += 1
                plan.kind = kind
                if kind.ready:
                    plan = kind
    # whether torch.compile can be used is asked only of a plan about to compile: importing
    # Inductor (and Dynamo, sympy) costs seconds, which a process whose signatures stay eager
    # (compile='auto' below compile_min_elements: a stream of small shapes) never pays
    if plan.ready and not can_compile():
        return None
    return plan


__all__ = ["Plan", "clear", "plan_for", "plans", "spent"]
