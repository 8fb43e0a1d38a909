"""``check`` and ``assert_accepted``: run a reference program under the error
calculus on the kernel's inputs, build each output's acceptance region, and
judge the stored outputs (DESIGN §2 data flow)."""

from __future__ import annotations

import dataclasses
from typing import Any

import torch

from . import formats as F
from .assumptions import for_backend
from .calculus import form as FM
from .calculus.tracked import Context, Tracked
from .certificates import Certificate
from .errors import InvalidArgument, OracleViolation, Uncertified
from .mathlib import load as load_profile
from .oracles import quantizer as QZ
from .oracles import rounding_interval as RI
from .reference import Reference, reference
from .region import MODES, region_of
from .verdict import OutputJudgement, Verdict

NONFINITE_POLICIES = ("error", "uncertified")


def _as_input(i: int, name: str, x: Any):
    """(float64 values, format) from a torch tensor or a (raw-bits tensor, format) pair."""
    fmt = None
    if isinstance(x, tuple) and len(x) == 2 and isinstance(x[1], F.Format):
        x, fmt = x
    if not isinstance(x, torch.Tensor):
        raise InvalidArgument(
            f"input {i} ({name}) is a {type(x).__name__}; expected a torch tensor (or a "
            f"(uint8 tensor, format) pair for e2m1/e8m0 raw bits). Convert it with torch.as_tensor "
            f"and give it the dtype the kernel reads.")
    if x.dtype in (torch.int8, torch.int16, torch.int32, torch.int64, torch.bool) and fmt is None:
        return x, None          # integer inputs (labels, indices) pass through untracked
    fmt = fmt or F.of(x)
    return F.decode(x, fmt), fmt


def _outputs_tuple(out):
    if isinstance(out, (tuple, list)):
        return list(out)
    return [out]


def run_reference(program: Reference, inputs, params, profile, condensed=True, nonfinite="error"):
    """Evaluate a reference program under the calculus.  Returns (outputs, ctx, input policy)."""
    ctx = Context(profile=profile, condensed=condensed)
    args = []
    names = program.input_names + [f"arg{i}" for i in range(len(program.input_names), len(inputs))]
    if len(inputs) != len(program.input_names):
        raise InvalidArgument(
            f"{program.name} takes {len(program.input_names)} inputs ({', '.join(program.input_names)}) "
            f"but {len(inputs)} were given; pass inputs=(...) in the program's order.")
    policy = "finite"
    for i, (name, x) in enumerate(zip(names, inputs)):
        v, fmt = _as_input(i, name, x)
        if fmt is None:
            args.append(v)
            continue
        bad = ~torch.isfinite(v)
        taint = None
        if bool(bad.any()):
            if nonfinite == "error":
                where = tuple(int(k) for k in torch.nonzero(bad)[0])
                raise InvalidArgument(
                    f"input {name} has {int(bad.sum())} non-finite value(s) (first at index {where}); "
                    f"numoracle's regions assume finite inputs. Pass nonfinite='uncertified' to judge the "
                    f"other elements and report those that depend on them as uncertified.")
            taint = bad
            v = torch.where(bad, torch.zeros_like(v), v)
            policy = "non-finite inputs: dependent elements uncertified"
        args.append(Tracked(v, fmt, FM.Form(), ctx, taint=taint))
    unknown = set(params) - set(program.param_names)
    if unknown:
        raise InvalidArgument(
            f"unknown parameter(s) {sorted(unknown)} for {program.name}; it takes "
            f"{program.param_names or 'no keyword parameters'}.")
    out = program.fn(*args, **params)
    return _outputs_tuple(out), ctx, policy


def check(program, outputs, inputs, params=None, *, mode="statistical", backend="interpreter",
          p=1e-6, profile=None, nonfinite="error", confirm=True) -> Verdict:
    """Judge kernel ``outputs`` against ``program`` on ``inputs``.  Never raises on
    a bad kernel: the verdict says accept, reject or uncertified."""
    return check_modes(program, outputs, inputs, params, modes=(mode,), backend=backend, p=p,
                       profile=profile, nonfinite=nonfinite, confirm=confirm)[mode]


def check_modes(program, outputs, inputs, params=None, *, modes=MODES, backend="interpreter",
                p=1e-6, profile=None, nonfinite="error", confirm=True) -> dict:
    """``check`` in several modes from one run of the reference program (the
    regions are the same; only the radius used differs): mode -> Verdict."""
    modes = tuple(modes)
    mode = modes[0] if modes else None
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
    assumptions = for_backend(backend, profile)
    prof = load_profile(assumptions.math_profile)

    refs, ctx, policy = run_reference(program, inputs, params, prof, nonfinite=nonfinite)
    kernel_outs = _outputs_tuple(outputs)
    if len(kernel_outs) != len(refs):
        raise InvalidArgument(
            f"{program.name} returns {len(refs)} output(s) but {len(kernel_outs)} were given; pass "
            f"outputs in the order the reference returns them.")
    for j, r in enumerate(refs):
        if not isinstance(r, Tracked) and not QZ.is_quant_output(r):
            raise InvalidArgument(f"{program.name} returned a {type(r).__name__} as output {j}; a reference "
                                  f"program must return tracked tensors derived from its inputs.")
    n_total = sum(r.c.numel() for r in refs)
    decoded, names, regions = [], [], []
    for j, (r, y) in enumerate(zip(refs, kernel_outs)):
        name = f"out{j}" if len(refs) > 1 else "y"
        fmt = r.fmt
        if isinstance(y, tuple) and len(y) == 2 and isinstance(y[1], F.Format):
            y, yfmt = y
        else:
            if not isinstance(y, torch.Tensor):
                raise InvalidArgument(f"output {name} is a {type(y).__name__}; expected a torch tensor.")
            yfmt = fmt if y.dtype == torch.uint8 and fmt.torch_dtype is None else F.of(y)
        if yfmt is not fmt:
            raise InvalidArgument(
                f"output {name} is {yfmt} but {program.name} stores it in {fmt}; check the kernel's "
                f"output dtype or the reference's final cast.")
        if tuple(y.shape) != tuple(r.c.shape):
            raise InvalidArgument(
                f"output {name} has shape {tuple(y.shape)} but {program.name} produces "
                f"{tuple(r.c.shape)}; check the kernel's output or reshape it.")
        yv = F.decode(y, fmt)
        if yv.device != r.c.device:
            yv = yv.to(r.c.device)
        decoded.append(yv)
        names.append(name)
        # a quantizer's outputs are judged below in two steps, once its group's scales are decoded
        regions.append(None if QZ.is_quant_output(r) else region_of(r, n_total, p))
    quant = {}
    if any(reg is None for reg in regions):
        quant = QZ.judge(refs, decoded, names)
        assumptions = dataclasses.replace(
            assumptions, implementation=tuple(assumptions.implementation) + QZ.Q.ASSUMPTIONS)
    cert = Certificate(ctx.sites, inputs=policy)
    verdicts = {}
    for m in modes:
        judgements = [quant[j] if reg is None else _judge(names[j], reg, decoded[j], m)
                      for j, reg in enumerate(regions)]
        status = _status(judgements)
        v = Verdict(status, program.name, m, p, judgements, cert, assumptions)
        if m == "statistical" and status == "reject" and confirm:
            fixed_rejects = any(bool(o.fixed_rejected.any()) for o in judgements)
            v.confirmation = "confirmed" if fixed_rejects else "statistical-only"
        v._explainer = (program, inputs, params, prof, nonfinite)
        verdicts[m] = v
    return verdicts


def _judge(name, reg, y, mode) -> OutputJudgement:
    fmt = reg.fmt
    results = {}
    for m in ("fixed", mode):
        lo, hi = reg.interval(m)
        qlo, qhi = RI.bounds(lo, hi, fmt)
        ok = RI.accepted(y, qlo, qhi)
        results[m] = (lo, hi, qlo, qhi, ok)
    lo, hi, qlo, qhi, ok = results[mode]
    unc = reg.taint
    special = ~torch.isfinite(y) & ~unc
    rejected = ~ok & ~unc
    fixed_rejected = ~results["fixed"][4] & ~unc
    return OutputJudgement(name, fmt, y, reg.centre, lo, hi, qlo, qhi, rejected, unc, special, fixed_rejected)


def _status(judgements) -> str:
    if any(bool(o.rejected.any()) for o in judgements):
        return "reject"
    if any(bool(o.uncertified.any()) for o in judgements):
        return "uncertified"
    return "accept"


def assert_accepted(program, outputs, inputs, params=None, *, uncertified="raise", **kw) -> Verdict:
    """``check`` that raises ``OracleViolation`` on a reject (and ``Uncertified``
    on an uncertified verdict unless ``uncertified='ignore'``)."""
    v = check(program, outputs, inputs, params, **kw)
    if v.status == "reject":
        raise OracleViolation(v.explain(), v)
    if v.status == "uncertified" and uncertified == "raise":
        raise Uncertified(v.explain(), v)
    return v
