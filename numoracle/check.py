"""The public entry points of a verdict (docs/design.md §3): ``check``, ``check_modes``,
``assert_accepted``, and ``evaluate`` (the reference evaluated once, any number of
candidate outputs judged against it).  A thin layer over the verdict core
(``numoracle.verdict``): run the reference program under the error calculus on the
kernel's inputs, build each output's acceptance region, judge the stored outputs;
compiled when a signature repeats (``numoracle.verdict.compiled``).  Nothing here raises
on a bad kernel but ``assert_accepted``, which raises ``OracleViolation`` (and
``Uncertified``)."""

from __future__ import annotations

import numbers
import time
from collections.abc import Mapping

import torch

from . import backends, config, heap
from . import formats as F
from .errors import InvalidArgument, OracleViolation, Uncertified
from .oracles import quantizer as quantizer_oracle
from .oracles import selection as selection_oracle
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
    if p is not None and (isinstance(p, (bool, str)) or not isinstance(p, numbers.Real)):
        # the settings parse text (environment variables); an argument is a number
        raise InvalidArgument(f"p={p!r}: a {type(p).__name__}; expected a number strictly between 0 and 1, the "
                              f"false-alarm budget (default 1e-6), e.g. p=1e-6.")
    p = s.p if p is None else config.settings(s, p=p).p
    nonfinite = s.nonfinite if nonfinite is None else nonfinite
    if nonfinite not in evaluation.NONFINITE_POLICIES:
        raise InvalidArgument(f"nonfinite={nonfinite!r}: expected one of {evaluation.NONFINITE_POLICIES}.")
    return s, p, nonfinite


def _shown(x) -> str:
    """A short one-line repr (a dict of tensors would print them whole, over many lines)."""
    text = " ".join(repr(x).split())
    return text if len(text) <= 80 else text[:77] + "..."


def _is_pair(x) -> bool:
    return isinstance(x, tuple) and len(x) == 2 and isinstance(x[1], F.Format)


def _inputs(inputs) -> tuple:
    """The inputs as a tuple: a tuple or list of them, or one tensor (or raw-bits pair) alone."""
    if isinstance(inputs, (tuple, list)) and not _is_pair(inputs):
        return tuple(inputs)
    if isinstance(inputs, torch.Tensor) or _is_pair(inputs):
        return (inputs,)
    raise InvalidArgument(f"inputs={_shown(inputs)}: a {type(inputs).__name__}; expected the program's inputs as a "
                          f"tuple of torch tensors in its order (a (uint8 tensor, Format) pair for raw bits), "
                          f"e.g. inputs=(x, w).")


def _params(params) -> dict:
    """The keyword parameters as a dict (None: the program's defaults)."""
    if params is None:
        return {}
    if not isinstance(params, Mapping) or not all(isinstance(k, str) for k in params):
        raise InvalidArgument(f"params={_shown(params)}: a {type(params).__name__}; expected a dict of the program's "
                              f"keyword parameters by name, e.g. params={{'eps': 1e-6}}, or None for its defaults.")
    return dict(params)


def evaluate(program, inputs, params=None, *, backend="interpreter", profile=None, p=None, nonfinite=None,
             settings=None, launch=None) -> evaluation.Evaluation:
    """The reference program evaluated once on ``inputs``: its regions, against which
    ``.judge(outputs)`` (both modes) and ``.check(outputs, mode)`` judge any number of
    candidate kernel outputs (a kernel and its mutants, several tolerances' candidates)
    without running the calculus again.  Always eager.  ``launch``: the kernel's launch
    configuration ({name: value}) for the program's ``no.launch()`` parameters."""
    program = _program(program)
    s, p, nonfinite = _options(settings, p, nonfinite)
    inputs, params = _inputs(inputs), program.with_launch(_params(params), launch)
    backend = backends.resolve(backend, profile=profile)
    prof = backend.profile()
    heap.prepare(s, [_tensor_of(x) for x in inputs])
    ev = evaluation.evaluate(program, inputs, params, prof, p, nonfinite)
    ev.p = p
    ev.assumptions = backend.assumptions()
    ev.reference_run = evaluation.ReferenceRun(program=program, inputs=inputs, params=params, profile=prof,
                                      nonfinite=nonfinite)
    return ev


def check(program, outputs, inputs, params=None, *, mode="statistical", backend="interpreter",
          p=None, profile=None, nonfinite=None, confirm=True, settings=None, kernel=None, launch=None) -> Verdict:
    """Judge kernel ``outputs`` against ``program`` on ``inputs``.  Never raises on a bad
    kernel's values: the verdict says accept, reject or uncertified.  Outputs that cannot be
    judged at all (a count, shape or dtype other than the reference gives) raise
    ``InvalidArgument`` naming what was expected.  ``p`` and ``nonfinite``
    default to the settings' (``numoracle.settings``).  ``kernel``: the launcher that made
    ``outputs`` (``kernel(*inputs, **params)``); with ``settings.plan_check`` on, the
    verdict's assumptions carry its plan check (``numoracle.plan.assumption``, once per input
    signature; docs/plan.md).  ``launch``: the launch configuration the outputs were
    computed with ({name: value}: constexprs, num_warps, ...), for the program's
    ``no.launch()`` parameters (the runner passes what it recorded)."""
    return check_modes(program, outputs, inputs, params, modes=(mode,), backend=backend, p=p,
                       profile=profile, nonfinite=nonfinite, confirm=confirm, settings=settings,
                       kernel=kernel, launch=launch)[mode]


def check_modes(program, outputs, inputs, params=None, *, modes=MODES, backend="interpreter",
                p=None, profile=None, nonfinite=None, confirm=True, settings=None, kernel=None,
                launch=None) -> dict:
    """``check`` in several modes from one run of the reference program (the regions are the
    same; only the radius used differs): mode -> Verdict."""
    s, p, nonfinite = _options(settings, p, nonfinite)
    given = _params(params)
    result = _check_modes(program, outputs, inputs, _program(program).with_launch(given, launch), modes, backend,
                          p, profile, nonfinite, confirm, s)
    if kernel is not None and s.plan_check:
        from .plan.assume import annotate
        annotate(result, _program(program), kernel, _inputs(inputs), given)
    return result


def _check_modes(program, outputs, inputs, params, modes, backend, p, profile, nonfinite, confirm, s) -> dict:
    program = _program(program)
    modes = tuple(modes)
    for m in modes or (None,):
        if m not in MODES:
            raise InvalidArgument(f"mode={m!r}: expected 'statistical' or 'fixed' (fixed-input).")
    inputs, params = _inputs(inputs), _params(params)
    backend = backends.resolve(backend, profile=profile)
    prof = backend.profile()
    kernel_outs = evaluation.outputs_list(outputs)
    home = _accelerator_home(inputs, kernel_outs, s)
    if home is not None:
        inputs, kernel_outs = _on_cpu(inputs), _on_cpu(kernel_outs)
    result = _judged(program, inputs, kernel_outs, params, modes, backend, prof, p, nonfinite, confirm, s)
    if home is not None:
        for v in result.values():
            v.device = home
    return result


def _tensor_of(x):
    return x[0] if _is_pair(x) else x


def _accelerator_home(inputs, outputs, s):
    """The device (a GPU: any but the CPU) of a verdict small enough to compute on the CPU
    (``settings.cpu_verdict_max_elements``), else None.  Only when every tensor is on that
    one device: anything else is judged where it is (and a wrong device is reported there)."""
    tensors = [_tensor_of(x) for x in list(inputs) + list(outputs)]
    if not tensors or not all(isinstance(t, torch.Tensor) for t in tensors):
        return None
    device = tensors[0].device
    if device.type == "cpu" or any(t.device != device for t in tensors):
        return None
    return device if sum(t.numel() for t in tensors) <= s.cpu_verdict_max_elements else None


def _on_cpu(xs) -> list:
    return [(x[0].cpu(), x[1]) if _is_pair(x) else x.cpu() for x in xs]


def _judged(program, inputs, kernel_outs, params, modes, backend, prof, p, nonfinite, confirm, s) -> dict:
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

    t0 = time.perf_counter()
    ev = evaluate(program, inputs, params, backend=backend, p=p, nonfinite=nonfinite, settings=s)
    result = ev.judge(kernel_outs, modes, confirm)
    if plan is not None:
        compiled.spent(plan, time.perf_counter() - t0)
    # MX and NVFP4 outputs stay eager: their compiled judgement has not been compared with this
    # one; so do index outputs, whose judgement re-runs the program with the kernel's choice
    if plan is not None and quantizer_oracle.compiles(ev.refs) and \
            not any(selection_oracle.is_selection(r) for r in ev.refs):
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
