"""``numoracle plan``: a kernel's precision plan read from its compiled Triton IR, checked against
a reference program's sites (docs/plan.md).

    from numoracle.plan import check_plan
    report = check_plan("rms_norm", "correct", *operators.get("rms_norm").example(0))
    report.ok, print(report.explain())

* :func:`extract_plan` runs a launcher once with its launches captured (nothing executes),
  compiles each launch for an NVIDIA target on the CPU and reads its sites;
* :func:`reference_plan` runs a reference program once under the calculus and reads its sites;
* :func:`check_plan` compares the two, output by output, and returns a :class:`PlanReport`;
* :func:`assumption` is the check as one line of a verdict's assumptions, cached per compiled
  plan (kernel, input signature, parameters), never raising for a kernel it cannot check;
* :func:`skeleton` writes a reference program that follows a kernel's plan site by site, and
  :func:`compare_centre` compares its exact centre with the float64 function the user means.
"""

from __future__ import annotations

from ..errors import InvalidArgument
from .assume import assumption
from .check import Disagreement, PlanReport, check
from .extract import KernelPlan, extract_plan
from .reference import ReferencePlan, reference_plan

__all__ = ["check_plan", "assumption", "extract_plan", "reference_plan", "KernelPlan", "ReferencePlan", "PlanReport",
           "Disagreement", "skeleton", "compare_centre"]


def _resolve(op_or_reference, kernel):
    """(reference, kernel callable, kernel name) from an operator (or its name) or a reference."""
    from .. import operators
    from ..reference import Reference
    op = None
    if isinstance(op_or_reference, str):
        op = operators.get(op_or_reference)
    elif isinstance(op_or_reference, operators.Operator):
        op = op_or_reference
    if op is not None:
        from ..operators.choose import resolve
        fn, name = resolve(op, kernel if kernel is not None else "correct")
        return op.reference, fn, name
    if isinstance(op_or_reference, Reference) or callable(op_or_reference):
        if not callable(kernel):
            raise InvalidArgument(f"kernel={kernel!r}: with a reference program (not an operator) give the "
                                  f"kernel as a callable (the launcher taking the reference's inputs).")
        return op_or_reference, kernel, getattr(kernel, "__name__", "kernel")
    raise InvalidArgument(f"expected an operator, its registered name or a reference program, got "
                          f"{type(op_or_reference).__name__}.")


def check_plan(op_or_reference, kernel, inputs, params=None, *, arch=None, profile="h200",
               config: int = 0) -> PlanReport:
    """Check a reference program's precision plan against a kernel's compiled plan.

    ``op_or_reference``: an operator (or its registered name) -- then ``kernel`` is a registered
    kernel name (``"correct"``, a variant, ``"faulty:NAME"``), ``package.module:function`` or a
    callable -- or a reference program with ``kernel`` a callable.  ``inputs``/``params`` are
    one example (the kernel launches once on them; nothing runs: the launches are compiled for
    NVIDIA ``arch``, default 90, on the CPU).  Never raises on a disagreement: the report says
    ``ok`` or lists them."""
    ref, fn, name = _resolve(op_or_reference, kernel)
    kplan = extract_plan(fn, inputs, params or {}, arch=arch, config=config)
    rplan = reference_plan(ref, inputs, params or {}, profile=profile, launch=kplan.capture.launch_values())
    return check(kplan, rplan, kernel_name=name)


def skeleton(*args, **kwargs):
    from ._skeleton import skeleton as _skeleton
    return _skeleton(*args, **kwargs)


def compare_centre(*args, **kwargs):
    from ._skeleton import compare_centre as _compare
    return _compare(*args, **kwargs)

