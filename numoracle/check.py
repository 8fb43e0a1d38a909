"""``check``, ``check_modes`` and ``assert_accepted``: the public entry points of a verdict
(docs/design.md §3).  A thin layer over the verdict core (``numoracle.verdict``): run the
reference program under the error calculus on the kernel's inputs, build each output's
acceptance region, judge the stored outputs; compiled when a signature repeats
(``numoracle.verdict.compiled``).  ``check`` never raises on a bad kernel;
``assert_accepted`` raises ``OracleViolation`` (and ``Uncertified``)."""

from __future__ import annotations

import dataclasses

from . import config
from . import backends
from .certificates import Certificate
from .errors import InvalidArgument, OracleViolation, Uncertified
from .oracles import quantizer as QZ
from .reference import Reference, reference
from .verdict import compiled
from .verdict.evaluation import NONFINITE_POLICIES, ReferenceRun, evaluate, outputs_list
from .verdict.judgement import RegionJudgement, RegionTensors
from .verdict.regions import MODES
from .verdict.verdict import Verdict, verdicts


def check(program, outputs, inputs, params=None, *, mode="statistical", backend="interpreter",
          p=None, profile=None, nonfinite=None, confirm=True, settings=None) -> Verdict:
    """Judge kernel ``outputs`` against ``program`` on ``inputs``.  Never raises on a bad
    kernel: the verdict says accept, reject or uncertified.  ``p`` and ``nonfinite``
    default to the settings' (``numoracle.settings``)."""
    return check_modes(program, outputs, inputs, params, modes=(mode,), backend=backend, p=p,
                       profile=profile, nonfinite=nonfinite, confirm=confirm, settings=settings)[mode]


def check_modes(program, outputs, inputs, params=None, *, modes=MODES, backend="interpreter",
                p=None, profile=None, nonfinite=None, confirm=True, settings=None) -> dict:
    """``check`` in several modes from one run of the reference program (the regions are the
    same; only the radius used differs): mode -> Verdict."""
    s = config.resolve(settings)
    p = s.p if p is None else config.settings(s, p=p).p
    nonfinite = s.nonfinite if nonfinite is None else nonfinite
    modes = tuple(modes)
    if not isinstance(program, Reference):
        if callable(program):
            program = reference(program)
        else:
            raise InvalidArgument(f"program must be a @no.reference function, got {program!r}.")
    for m in modes or (None,):
        if m not in MODES:
            raise InvalidArgument(f"mode={m!r}: expected 'statistical' or 'fixed' (fixed-input).")
    if nonfinite not in NONFINITE_POLICIES:
        raise InvalidArgument(f"nonfinite={nonfinite!r}: expected one of {NONFINITE_POLICIES}.")
    if not isinstance(inputs, (tuple, list)):
        inputs = (inputs,)
    params = dict(params or {})
    backend = backends.resolve(backend, profile=profile)
    assumptions = backend.assumptions()
    prof = backend.profile()
    kernel_outs = outputs_list(outputs)
    rerun = ReferenceRun(program=program, inputs=tuple(inputs), params=params, profile=prof, nonfinite=nonfinite)

    plan = compiled.plan_for(program, inputs, kernel_outs, params, prof, p, modes, nonfinite, s)
    if plan is not None and plan.ready:
        got = plan.run(inputs, kernel_outs)
        if got is not None:
            outs, cert, _ = got
            if plan.has_quantizer:
                assumptions = _with_quantizer(assumptions)
            return verdicts(program.name, modes, p, confirm, assumptions, outs, cert, rerun)

    ev = evaluate(program, inputs, kernel_outs, params, prof, p, nonfinite)
    quant = {}
    if any(reg is None for reg in ev.regions):
        quant = QZ.judge(ev.refs, ev.decoded, ev.names)
        assumptions = _with_quantizer(assumptions)
    outs = []
    for j, reg in enumerate(ev.regions):
        if reg is None:
            outs.append(quant[j])
            continue
        tensors = RegionTensors(centre=reg.centre, fixed=reg.fixed, stat=reg.stat, taint=reg.taint)
        y = ev.decoded[j]
        outs.append(RegionJudgement(name=ev.names[j], fmt=reg.fmt, shape=reg.centre.shape, modes=modes,
                                    device=reg.centre.device, kernel=lambda y=y: y, region=lambda t=tensors: t))
    if plan is not None:
        plan.learn(ev.ctx.sites, ev.names, [r.fmt for r in ev.refs], [reg is None for reg in ev.regions],
                   ev.refs[0].c.device)
    return verdicts(program.name, modes, p, confirm, assumptions, outs,
                    Certificate(ev.ctx.sites, inputs=ev.policy), rerun)


def _with_quantizer(assumptions):
    return dataclasses.replace(assumptions,
                               implementation=tuple(assumptions.implementation) + QZ.Q.ASSUMPTIONS)


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
