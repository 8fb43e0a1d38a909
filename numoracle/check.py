"""The public entry points of a verdict (docs/design.md §3): ``check``, ``check_modes``,
``assert_accepted``, and ``evaluate`` (the reference evaluated once, any number of
candidate outputs judged against it).  A thin layer over the verdict core
(``numoracle.verdict``): run the reference program under the error calculus on the
kernel's inputs, build each output's acceptance region, judge the stored outputs;
compiled when a signature repeats (``numoracle.verdict.compiled``).  Nothing here raises
on a bad kernel but ``assert_accepted``, which raises ``OracleViolation`` (and
``Uncertified``)."""

from __future__ import annotations

from . import backends, config
from .errors import InvalidArgument, OracleViolation, Uncertified
from .oracles import quantizer as quantizer_oracle
from .reference import Reference, reference
from .verdict import compiled
from .verdict import evaluation
from .verdict.regions import MODES
from .verdict.verdict import Verdict, verdicts


def _program(program) -> Reference:
    if isinstance(program, Reference):
        return program
    if callable(program):
        return reference(program)
    raise InvalidArgument(f"program must be a @no.reference function, got {program!r}.")


def _options(settings, p, nonfinite):
    """(settings, p, nonfinite) with the settings' defaults filled in, validated."""
    s = config.resolve(settings)
    p = s.p if p is None else config.settings(s, p=p).p
    nonfinite = s.nonfinite if nonfinite is None else nonfinite
    if nonfinite not in evaluation.NONFINITE_POLICIES:
        raise InvalidArgument(f"nonfinite={nonfinite!r}: expected one of {evaluation.NONFINITE_POLICIES}.")
    return s, p, nonfinite


def _inputs(inputs) -> tuple:
    return tuple(inputs) if isinstance(inputs, (tuple, list)) else (inputs,)


def evaluate(program, inputs, params=None, *, backend="interpreter", profile=None, p=None, nonfinite=None,
             settings=None) -> evaluation.Evaluation:
    """The reference program evaluated once on ``inputs``: its regions, against which
    ``.judge(outputs)`` (both modes) and ``.check(outputs, mode)`` judge any number of
    candidate kernel outputs (a kernel and its mutants, several tolerances' candidates)
    without running the calculus again.  Always eager."""
    program = _program(program)
    _, p, nonfinite = _options(settings, p, nonfinite)
    inputs, params = _inputs(inputs), dict(params or {})
    backend = backends.resolve(backend, profile=profile)
    prof = backend.profile()
    ev = evaluation.evaluate(program, inputs, params, prof, p, nonfinite)
    ev.p = p
    ev.assumptions = backend.assumptions()
    ev.reference_run = evaluation.ReferenceRun(program=program, inputs=inputs, params=params, profile=prof,
                                      nonfinite=nonfinite)
    return ev


def check(program, outputs, inputs, params=None, *, mode="statistical", backend="interpreter",
          p=None, profile=None, nonfinite=None, confirm=True, settings=None, kernel=None) -> Verdict:
    """Judge kernel ``outputs`` against ``program`` on ``inputs``.  Never raises on a bad
    kernel: the verdict says accept, reject or uncertified.  ``p`` and ``nonfinite``
    default to the settings' (``numoracle.settings``).  ``kernel``: the launcher that made
    ``outputs`` (``kernel(*inputs, **params)``); with ``settings.plan_check`` on, the
    verdict's assumptions carry its plan check (``numoracle.plan.assumption``, once per input
    signature; docs/plan.md)."""
    return check_modes(program, outputs, inputs, params, modes=(mode,), backend=backend, p=p,
                       profile=profile, nonfinite=nonfinite, confirm=confirm, settings=settings,
                       kernel=kernel)[mode]


def check_modes(program, outputs, inputs, params=None, *, modes=MODES, backend="interpreter",
                p=None, profile=None, nonfinite=None, confirm=True, settings=None, kernel=None) -> dict:
    """``check`` in several modes from one run of the reference program (the regions are the
    same; only the radius used differs): mode -> Verdict."""
    s, p, nonfinite = _options(settings, p, nonfinite)
    result = _check_modes(program, outputs, inputs, params, modes, backend, p, profile, nonfinite, confirm, s)
    if kernel is not None and s.plan_check:
        from .plan.assume import annotate
        annotate(result, _program(program), kernel, _inputs(inputs), params)
    return result


def _check_modes(program, outputs, inputs, params, modes, backend, p, profile, nonfinite, confirm, s) -> dict:
    program = _program(program)
    modes = tuple(modes)
    for m in modes or (None,):
        if m not in MODES:
            raise InvalidArgument(f"mode={m!r}: expected 'statistical' or 'fixed' (fixed-input).")
    inputs, params = _inputs(inputs), dict(params or {})
    backend = backends.resolve(backend, profile=profile)
    prof = backend.profile()
    kernel_outs = evaluation.outputs_list(outputs)

    plan = compiled.plan_for(program, inputs, kernel_outs, params, prof, p, modes, nonfinite, s)
    if plan is not None and plan.ready:
        got = plan.run(inputs, kernel_outs)
        if got is not None:
            outs, cert, _ = got
            assumptions = backend.assumptions()
            if plan.has_quantizer:
                assumptions = quantizer_oracle.with_assumptions(assumptions)
            rerun = evaluation.ReferenceRun(program=program, inputs=inputs, params=params, profile=prof, nonfinite=nonfinite)
            return verdicts(program.name, modes, p, confirm, assumptions, outs, cert, rerun)

    ev = evaluate(program, inputs, params, backend=backend, p=p, nonfinite=nonfinite, settings=s)
    result = ev.judge(kernel_outs, modes, confirm)
    # MX and NVFP4 outputs stay eager: their compiled judgement has not been compared with this one
    if plan is not None and quantizer_oracle.compiles(ev.refs):
        plan.learn(ev.ctx.sites, ev.names, [r.fmt for r in ev.refs], [reg is None for reg in ev.regions],
                   ev.refs[0].c.device)
    return result


def assert_accepted(program, outputs, inputs, params=None, *, uncertified="raise", **kw) -> Verdict:
    """``check`` that raises ``OracleViolation`` on a reject (and ``Uncertified`` on an
    uncertified verdict unless ``uncertified='ignore'``)."""
    if uncertified not in ("raise", "ignore"):
        raise InvalidArgument(f"uncertified={uncertified!r}: expected 'raise' (an uncertified verdict raises "
                              f"numoracle.Uncertified) or 'ignore'.")
    v = check(program, outputs, inputs, params, **kw)
    if v.status == "reject":
        raise OracleViolation(v.explain(), v)
    if v.status == "uncertified" and uncertified == "raise":
        raise Uncertified(v.explain(), v)
    return v
