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


def run_reference(program: Reference, inputs, params, profile, condensed=True, nonfinite="error",
                  traced=False, sanitise=True):
    """Evaluate a reference program under the calculus.  Returns (outputs, ctx,
    input policy); traced (under torch.compile), the policy is a bool tensor:
    whether any input was non-finite.  Traced without ``sanitise``, the inputs
    are used as given (no zeroing of non-finite values, no taint): only for a
    caller that judges eagerly whenever the policy flag is set."""
    ctx = Context(profile=profile, condensed=condensed, traced=traced)
    args = []
    names = program.input_names + [f"arg{i}" for i in range(len(program.input_names), len(inputs))]
    if len(inputs) != len(program.input_names):
        raise InvalidArgument(
            f"{program.name} takes {len(program.input_names)} inputs ({', '.join(program.input_names)}) "
            f"but {len(inputs)} were given; pass inputs=(...) in the program's order.")
    policy = "finite"
    any_bad = []
    for i, (name, x) in enumerate(zip(names, inputs)):
        v, fmt = _as_input(i, name, x)
        if fmt is None:
            args.append(v)
            continue
        bad = ~torch.isfinite(v)
        taint = None
        if traced:
            any_bad.append(bad.any())
            if sanitise:
                taint = bad
                v = torch.where(bad, torch.zeros_like(v), v)
        elif bool(bad.any()):
            if nonfinite == "error":
                where = tuple(int(k) for k in torch.nonzero(bad)[0])
                raise InvalidArgument(
                    f"input {name} has {int(bad.sum())} non-finite value(s) (first at index {where}); "
                    f"numoracle's regions assume finite inputs. Pass nonfinite='uncertified' to judge the "
                    f"other elements and report those that depend on them as uncertified.")
            taint = bad
            v = torch.where(bad, torch.zeros_like(v), v)
            policy = NONFINITE_POLICY_TEXT
        args.append(Tracked(v, fmt, FM.Form(), ctx, taint=taint))
    if traced:
        policy = torch.stack(any_bad).any() if any_bad else None
    unknown = set(params) - set(program.param_names)
    if unknown:
        raise InvalidArgument(
            f"unknown parameter(s) {sorted(unknown)} for {program.name}; it takes "
            f"{program.param_names or 'no keyword parameters'}.")
    out = program.fn(*args, **params)
    return _outputs_tuple(out), ctx, policy


NONFINITE_POLICY_TEXT = "non-finite inputs: dependent elements uncertified"


def check(program, outputs, inputs, params=None, *, mode="statistical", backend="interpreter",
          p=1e-6, profile=None, nonfinite="error", confirm=True) -> Verdict:
    """Judge kernel ``outputs`` against ``program`` on ``inputs``.  Never raises on
    a bad kernel: the verdict says accept, reject or uncertified."""
    return check_modes(program, outputs, inputs, params, modes=(mode,), backend=backend, p=p,
                       profile=profile, nonfinite=nonfinite, confirm=confirm)[mode]


def check_modes(program, outputs, inputs, params=None, *, modes=MODES, backend="interpreter",
                p=1e-6, profile=None, nonfinite="error", confirm=True) -> dict:
    """``check`` in several modes from one run of the reference program (the
    regions are the same; only the radius used differs): mode -> Verdict.

    A program, shape and parameter set judged repeatedly runs compiled
    (``numoracle.compiled``; NUMORACLE_COMPILE=auto|always|never): the same
    calculus, fused by torch.compile, with the same verdicts."""
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
    assumptions = for_backend(backend, profile)
    prof = load_profile(assumptions.math_profile)
    kernel_outs = _outputs_tuple(outputs)

    from . import compiled
    plan = compiled.plan_for(program, inputs, kernel_outs, params, prof, p, modes, nonfinite)
    if plan is not None and plan.ready:
        got = plan.run(inputs, kernel_outs)
        if got is not None:
            outs, cert, policy = got
            if plan.has_quantizer:
                assumptions = dataclasses.replace(
                    assumptions, implementation=tuple(assumptions.implementation) + QZ.Q.ASSUMPTIONS)
            return _verdicts(program, modes, p, confirm, assumptions, outs, cert,
                             (program, inputs, params, prof, nonfinite))

    refs, ctx, policy, decoded, names, regions = evaluate(program, inputs, kernel_outs, params, prof, p,
                                                          nonfinite)
    quant = {}
    if any(reg is None for reg in regions):
        quant = QZ.judge(refs, decoded, names)
        assumptions = dataclasses.replace(
            assumptions, implementation=tuple(assumptions.implementation) + QZ.Q.ASSUMPTIONS)
    outs = []
    for j, reg in enumerate(regions):
        if reg is None:
            outs.append(quant[j])
        else:
            rejected, special = judge_masks(reg.fmt, reg.centre, reg.fixed, reg.stat, reg.taint, decoded[j],
                                            modes)
            outs.append(Judged(names[j], reg.fmt, decoded[j], reg.centre, reg.fixed, reg.stat, reg.taint,
                               modes, rejected, special))
    if plan is not None and QZ.compiles(refs):
        plan.learn(ctx.sites, names, [r.fmt for r in refs], [reg is None for reg in regions], refs[0].c.device)
    return _verdicts(program, modes, p, confirm, assumptions, outs, Certificate(ctx.sites, inputs=policy),
                     (program, inputs, params, prof, nonfinite))


def evaluate(program, inputs, kernel_outs, params, prof, p, nonfinite, traced=False, sanitise=True):
    """Run the reference program and build each output's region: (refs, ctx,
    input policy, decoded kernel outputs, names, regions) with region None for
    a quantizer's outputs (judged in two steps by ``oracles.quantizer``)."""
    refs, ctx, policy = run_reference(program, inputs, params, prof, nonfinite=nonfinite, traced=traced,
                                      sanitise=sanitise)
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
        stored = tuple(getattr(r, "stored_shape", r.c.shape))     # packed fp4 codes: two per byte
        if tuple(y.shape) != stored:
            raise InvalidArgument(
                f"output {name} has shape {tuple(y.shape)} but {program.name} produces "
                f"{stored}; check the kernel's output or reshape it.")
        yv = F.decode(y, getattr(r, "layout", None) or fmt)
        if yv.device != r.c.device:
            yv = yv.to(r.c.device)
        decoded.append(yv)
        names.append(name)
        # a quantizer's outputs are judged below in two steps, once its group's scales are decoded
        regions.append(None if QZ.is_quant_output(r) else region_of(r, n_total, p))
    return refs, ctx, policy, decoded, names, regions


def judge_masks(fmt, centre, fixed, stat, taint, y, modes):
    """The rounding-interval check of stored values y in each of ``modes``:
    (rejected per mode, special), elements without a certificate excluded.
    Pure tensor code: the compiled path runs it inside its graph."""
    keep = ~taint
    rejected = []
    for m in modes:
        r = fixed if m == "fixed" else stat
        rejected.append(~RI.accepted_interval(centre - r, centre + r, y, fmt) & keep)
    return tuple(rejected), ~torch.isfinite(y) & keep


@dataclasses.dataclass
class Judged:
    """An output's judgement in every mode at once, before it is split into
    one ``OutputJudgement`` per mode.  The kernel output, the taint mask and
    the rejected masks are tensors, or functions that compute them when first
    asked for (the compiled path returns only the flags: a verdict asked for
    its status alone never writes a region or a mask).  The region (centre,
    fixed, stat, taint) is given, or ``lazy`` computes it when first needed."""
    name: str
    fmt: F.Format
    y: object                  # the decoded kernel output, or a function that decodes it
    centre: torch.Tensor | None
    fixed: torch.Tensor | None
    stat: torch.Tensor | None
    taint: object              # bool tensor, or a function that computes it
    modes: tuple
    rejected: tuple            # per mode: bool tensor, or a function that computes it
    special: object            # a bool tensor, or None: computed from the kernel output when asked for
    flags: list | None = None  # None, or [any rejected per mode..., any taint]
    lazy: object = None        # None, or a function -> (centre, fixed, stat, taint)
    shape: tuple | None = None

    def __post_init__(self):
        if self.shape is None:
            self.shape = tuple(self.centre.shape)

    def region(self) -> tuple:
        """(centre, fixed, stat), computed now if it was left for later."""
        if self.lazy is not None:
            self.centre, self.fixed, self.stat, self.taint = self.lazy()
            self.lazy = None
        return self.centre, self.fixed, self.stat

    def kernel(self) -> torch.Tensor:
        if callable(self.y):
            self.y = self.y()
        return self.y

    def taint_mask(self) -> torch.Tensor:
        self.region()
        if callable(self.taint):
            self.taint = self.taint()
        return self.taint

    def rejected_mask(self, k: int) -> torch.Tensor:
        r = self.rejected[k]
        if callable(r):
            r = r()
            self.rejected = self.rejected[:k] + (r,) + self.rejected[k + 1:]
        return r

    def special_mask(self) -> torch.Tensor:
        if self.special is None:
            self.special = ~torch.isfinite(self.kernel()) & ~self.taint_mask()
        return self.special

    def any_flags(self) -> list:
        if self.flags is None:
            return [bool(r.any()) for r in self.rejected] + [bool(self.taint.any())]
        return list(self.flags)

    def fixed_rejected(self):
        """Rejected in the fixed-input mode.  The statistical interval lies inside the fixed
        one (its radius is the smaller), so these are a subset of the statistical rejects:
        a verdict computes them only when it needs them (to confirm a reject)."""
        if "fixed" in self.modes:
            return self.rejected_mask(self.modes.index("fixed"))
        centre, fixed, stat = self.region()
        return judge_masks(self.fmt, centre, fixed, stat, self.taint_mask(), self.kernel(), ("fixed",))[0][0]

    def for_mode(self, k: int, mode: str) -> OutputJudgement:
        fmt = self.fmt

        def bounds():
            centre, fixed, stat = self.region()
            r = fixed if mode == "fixed" else stat
            lo, hi = centre - r, centre + r
            return (lo, hi) + tuple(RI.bounds(lo, hi, fmt))
        return OutputJudgement(self.name, fmt, self.kernel, lambda: self.region()[0], None, None, None, None,
                               lambda: self.rejected_mask(k), self.taint_mask, self.special_mask,
                               self.fixed_rejected, bounds=bounds, shape=self.shape)


def _verdicts(program, modes, p, confirm, assumptions, outs, cert, explainer) -> dict:
    flags = [o.any_flags() if isinstance(o, Judged) else None for o in outs]
    verdicts = {}
    for k, m in enumerate(modes):
        judgements, rej, unc = [], False, False
        for o, f in zip(outs, flags):
            if isinstance(o, Judged):
                judgements.append(o.for_mode(k, m))
                rej, unc = rej or f[k], unc or f[-1]
            else:                                   # a quantizer output, judged in its own terms
                judgements.append(o)
                o_rej, o_unc = o.flags if o.flags is not None else (bool(o.rejected.any()),
                                                                    bool(o.uncertified.any()))
                rej, unc = rej or o_rej, unc or o_unc
        status = "reject" if rej else "uncertified" if unc else "accept"
        v = Verdict(status, program.name, m, p, judgements, cert, assumptions)
        if m == "statistical" and status == "reject" and confirm:
            fixed_rejects = any(bool(o.fixed_rejected.any()) for o in judgements)
            v.confirmation = "confirmed" if fixed_rejects else "statistical-only"
        v._explainer = explainer
        verdicts[m] = v
    return verdicts


def assert_accepted(program, outputs, inputs, params=None, *, uncertified="raise", **kw) -> Verdict:
    """``check`` that raises ``OracleViolation`` on a reject (and ``Uncertified``
    on an uncertified verdict unless ``uncertified='ignore'``)."""
    v = check(program, outputs, inputs, params, **kw)
    if v.status == "reject":
        raise OracleViolation(v.explain(), v)
    if v.status == "uncertified" and uncertified == "raise":
        raise Uncertified(v.explain(), v)
    return v
