"""Running a reference program under the error calculus on the kernel's inputs, and
building each output's acceptance region (docs/design.md §2): the first half of a
verdict, shared by the eager and the compiled path.  Nothing here raises on a bad
kernel; malformed arguments raise ``InvalidArgument``."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

import torch

from .. import formats as F
from ..calculus import form as FM
from ..calculus.tracked import Context, Tracked, any_of
from ..errors import InvalidArgument, LanguageMisuse, ReferenceRefused
from ..oracles import quantizer as QZ
from ..oracles import selection as SEL
from .regions import Region, region_of

NONFINITE_POLICIES = ("error", "uncertified")
NONFINITE_POLICY_TEXT = "non-finite inputs: dependent elements uncertified"


def as_input(i: int, name: str, x: Any):
    """(float64 values, format) from a torch tensor or a (raw-bits tensor, format) pair;
    (tensor, None) for an integer input (labels, indices), which stays untracked."""
    fmt = None
    if isinstance(x, tuple) and len(x) == 2 and isinstance(x[1], F.Format):
        x, fmt = x
    if not isinstance(x, torch.Tensor):
        raise InvalidArgument(
            f"input {i} ({name}) is a {type(x).__name__}; expected a torch tensor (or a "
            f"(uint8 tensor, format) pair for e2m1/e8m0 raw bits). Convert it with torch.as_tensor "
            f"and give it the dtype the kernel reads.")
    _check_tensor(f"input {i} ({name})", x)
    if x.numel() == 0:
        # an empty reduction has no value (mean of nothing): nothing to judge either
        raise InvalidArgument(f"input {i} ({name}) has shape {tuple(x.shape)}: no elements; numoracle judges "
                              f"cases of at least one row and one column. Give a non-empty case.")
    if x.dtype in (torch.int8, torch.int16, torch.int32, torch.int64, torch.bool) and fmt is None:
        return x, None
    fmt = fmt or F.of(x)
    return F.decode(x, fmt), fmt


def _check_tensor(what: str, t: torch.Tensor) -> None:
    """A tensor whose values can be read: not on the meta device (shapes without data)."""
    if t.device.type == "meta":
        raise InvalidArgument(f"{what} is on the meta device: a shape without values; expected a CPU or CUDA "
                              f"tensor holding the values the kernel read or wrote.")


def _described(names, inputs) -> str:
    """'x bf16[2, 8], w int32[8]': what was given, for an error message."""
    out = []
    for name, x in zip(names, inputs):
        if isinstance(x, tuple) and len(x) == 2 and isinstance(x[1], F.Format):
            out.append(f"{name} {x[1]} raw bits{list(x[0].shape)}")
        elif isinstance(x, torch.Tensor):
            out.append(f"{name} {str(x.dtype).removeprefix('torch.')}{list(x.shape)} on {x.device}")
        else:
            out.append(f"{name} {type(x).__name__}")
    return ", ".join(out)


# what a reference program raises when its inputs are not the ones it was written for (an
# integer tensor where a format is read, shapes that do not broadcast, an index out of range)
_BAD_INPUT_ERRORS = (TypeError, ValueError, RuntimeError, IndexError, AttributeError, ZeroDivisionError,
                     NotImplementedError)


def check_params(program, params) -> None:
    """``Reference.check_params``, and no NaN among the numbers (it would make every value it
    touches NaN): what a verdict holds its parameters to."""
    program.check_params(params)
    for k, v in params.items():
        if isinstance(v, float) and math.isnan(v):
            raise InvalidArgument(f"parameter {k}=nan of {program.name}: expected a number; a NaN parameter makes "
                                  f"every value it touches NaN.")


def outputs_list(out) -> list:
    """A kernel's or a program's outputs as a list (one output may be returned bare)."""
    if isinstance(out, (tuple, list)):
        return list(out)
    return [out]


def run_reference(program, inputs, params, profile, condensed=True, nonfinite="error",
                  traced=False, sanitise=True, symbolic=False, forced=None):
    """Evaluate a reference program under the calculus.  Returns (outputs, ctx, input
    policy); traced (under torch.compile), the policy is a bool tensor: whether any input
    was non-finite.  Traced without ``sanitise``, the inputs are used as given (no zeroing
    of non-finite values, no taint): only for a caller that judges eagerly whenever the
    policy flag is set.  ``forced``: {selection ordinal: the kernel's stored indices}, read in
    place of the reference's own choices (``calculus.select``)."""
    ctx = Context(profile=profile, condensed=condensed, traced=traced, symbolic=symbolic, forced=dict(forced or {}))
    args = []
    names = program.input_names + [f"arg{i}" for i in range(len(program.input_names), len(inputs))]
    if len(inputs) != len(program.input_names):
        raise InvalidArgument(
            f"{program.name} takes {len(program.input_names)} inputs ({', '.join(program.input_names)}) "
            f"but {len(inputs)} were given; pass inputs=(...) in the program's order.")
    policy = "finite"
    any_bad = []
    for i, (name, x) in enumerate(zip(names, inputs)):
        v, fmt = as_input(i, name, x)
        if fmt is None:
            args.append(v)
            continue
        bad = ~F.finite(v)
        taint = None
        if traced:
            any_bad.append(any_of(bad))
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
        args.append(Tracked(v, fmt, FM.Form(), ctx, taint=taint, known=True))
    if traced:
        policy = any_of(torch.stack(any_bad)) if any_bad else None
        return outputs_list(program.fn(*args, **params)), ctx, policy
    check_params(program, params)
    devices = {x.device for x in (y[0] if isinstance(y, tuple) else y for y in inputs)}
    if len(devices) > 1:
        raise InvalidArgument(f"{program.name}'s inputs are on several devices ({_described(names, inputs)}); "
                              f"put every input on the device the kernel ran on.")
    try:
        out = program.fn(*args, **params)
    except LanguageMisuse as exc:
        # the program's own misuse of the language, whose message names the fix; or an input
        # that should have passed untracked (labels, indices) given a floating-point dtype,
        # which made it a tracked tensor: say what was given, so that both readings are seen
        raise type(exc)(f"{exc} ({program.name} ran on {_described(names, inputs)}: an integer input such as "
                        f"labels or indices given in a floating-point dtype becomes a tracked tensor and meets "
                        f"this too; pass it as integers.)") from None
    except _BAD_INPUT_ERRORS as exc:
        detail = " ".join(str(exc).split()).rstrip(".")
        detail = detail if len(detail) <= 200 else detail[:197] + "..."
        ints = [n for n, a in zip(names, args) if not isinstance(a, Tracked)]
        hint = (f"integer input(s) {', '.join(ints)} pass untracked, as labels do: one that holds values needs "
                f"the kernel's floating-point dtype, one that holds labels or indices must hold valid ones; "
                if ints else "")
        raise ReferenceRefused(
            f"{program.name} cannot run on the inputs given ({_described(names, inputs)}; params {params!r}): "
            f"{type(exc).__name__}: {detail}. Expected the inputs {program.name} is written for: {hint}every "
            f"input that holds values needs a floating-point format, and the shapes must fit together. If they "
            f"do, the program itself raised (the exception is chained).") from exc
    return outputs_list(out), ctx, policy


@dataclass(kw_only=True)
class Evaluation:
    """A reference program's run on one call's inputs: its outputs (tracked tensors or
    quantizer outputs), their names and regions (None for a quantizer's outputs, which
    ``oracles.quantizer`` judges in two steps, conditioned on the kernel's scales).  The
    regions depend on the inputs alone: ``judge`` judges any number of kernel outputs
    against one evaluation (``numoracle.evaluate`` makes one)."""
    program: object
    refs: list
    ctx: Context
    policy: object           # the input policy text; traced, a bool tensor (any non-finite input)
    names: list
    regions: list            # Region or None per output
    p: float = 1e-6
    assumptions: object = None
    reference_run: object = None     # ReferenceRun: how to evaluate it again (the explanation)

    def judge(self, outputs, modes=("statistical", "fixed"), confirm: bool = True) -> dict:
        """mode -> Verdict of the kernel ``outputs`` (a tensor, a (raw bits, format) pair, or
        a tuple of them in the program's order).  Never raises on a bad kernel."""
        modes = tuple(modes)
        decoded = decode_outputs(self, outputs_list(outputs))
        if any(SEL.is_selection(r) for r in self.refs):
            return self._judge_choices(decoded, modes, confirm)
        return self._judge_with(decoded, modes, confirm)

    def _judge_choices(self, decoded, modes, confirm) -> dict:
        """``judge`` of a program with index outputs: the program runs again with the kernel's
        stored indices in place of its own choices (what the kernel's other outputs were
        computed from), and every output is judged against that run."""
        if not any(sel.read for sel in self.ctx.selections):
            # nothing was read at a choice: the kernel's indices would change nothing of this run
            return self._judge_with(decoded, modes, confirm)
        run = self.reference_run
        if run is None:
            raise InvalidArgument(f"{self.program.name} returns indices (argmax/top-k): judging them re-runs the "
                                  f"program with the kernel's choice, which needs the evaluation made by "
                                  f"numoracle.evaluate or numoracle.check.")
        forced = {r.ordinal: y for r, y in zip(self.refs, decoded) if SEL.is_selection(r)}
        again = evaluate(self.program, run.inputs, run.params, run.profile, self.p, run.nonfinite, forced=forced)
        again.assumptions, again.reference_run = self.assumptions, dataclasses.replace(run, forced=forced)
        return again._judge_with(decoded, modes, confirm)

    def _judge_with(self, decoded, modes, confirm) -> dict:
        from .judgement import RegionJudgement, RegionTensors
        from .verdict import verdicts
        assumptions = self.assumptions
        quant = {}
        if any(QZ.is_quant_output(r) for r in self.refs):
            quant = QZ.judge(self.refs, decoded, self.names)
            assumptions = QZ.with_assumptions(assumptions)
        n_total = sum(_elements(r) for r in self.refs)
        outs = []
        for j, (reg, y) in enumerate(zip(self.regions, decoded)):
            r = self.refs[j]
            if SEL.is_selection(r):
                outs.append(SEL.IndexJudgement(self.names[j], r, y, modes, n_total, self.p))
            elif reg is None:
                outs.append(quant[j])
            else:
                tensors = RegionTensors(centre=reg.centre, fixed=reg.fixed, stat=reg.stat, taint=reg.taint)
                outs.append(RegionJudgement(name=self.names[j], fmt=reg.fmt, shape=reg.centre.shape, modes=modes,
                                            device=reg.centre.device, kernel=lambda y=y: y,
                                            region=lambda t=tensors: t))
        return verdicts(self.program.name, modes, self.p, confirm, assumptions, outs, self.certificate(),
                        self.reference_run)

    def certificate(self):
        """The finite-range certificate of the reference's run on these inputs (what every
        verdict of this evaluation carries)."""
        from ..certificates import Certificate
        return Certificate(self.ctx.sites, inputs=self.policy)

    def check(self, outputs, mode: str = "statistical", confirm: bool = True):
        """The Verdict of kernel ``outputs`` in one mode."""
        return self.judge(outputs, (mode,), confirm)[mode]


def output_names(program, n: int) -> list:
    """The names of a program's n outputs, as the program names them (``Reference.names_of``)."""
    return program.names_of(n)


def _elements(r) -> int:
    """What an output adds to the statistical mode's element count: its elements; for an
    index output the values it was chosen among (each is judged through its interval)."""
    if SEL.is_selection(r):
        return SEL.source_elements([r])
    return r.c.numel()


def evaluate(program, inputs, params, prof, p, nonfinite, traced=False, sanitise=True,
             symbolic=False, forced=None) -> Evaluation:
    """Run the reference program and build each output's region (``symbolic``: traced with
    symbolic sizes, see ``Context.symbolic``; ``forced``: the kernel's stored indices, see
    ``run_reference``).  Index and quantizer outputs have no region (None): they are judged
    against the kernel's stored values."""
    refs, ctx, policy = run_reference(program, inputs, params, prof, nonfinite=nonfinite, traced=traced,
                                      sanitise=sanitise, symbolic=symbolic, forced=forced)
    for j, r in enumerate(refs):
        if not isinstance(r, Tracked) and not QZ.is_quant_output(r) and not SEL.is_selection(r):
            raise InvalidArgument(f"{program.name} returned a {type(r).__name__} as output {j}; a reference "
                                  f"program must return tracked tensors derived from its inputs (or the indices "
                                  f"of no.argmax, no.argmin, no.topk).")
    n_total = sum(_elements(r) for r in refs)
    regions = [None if QZ.is_quant_output(r) or SEL.is_selection(r) else region_of(r, n_total, p) for r in refs]
    return Evaluation(program=program, refs=refs, ctx=ctx, policy=policy,
                      names=output_names(program, len(refs)), regions=regions)


def decode_outputs(ev: Evaluation, kernel_outs) -> list:
    """The kernel's outputs as exact float64 values on the reference's device, after
    checking that they are the outputs the program produces (count, format, shape)."""
    program, refs = ev.program, ev.refs
    if any(y is None for y in kernel_outs):
        # a launcher written for a kernel that works in place returns nothing
        raise InvalidArgument(
            f"the outputs given for {program.name} are None ({len(kernel_outs)} given, {len(refs)} expected: "
            f"{', '.join(ev.names)}); numoracle judges what the kernel's launcher returns. A kernel that writes "
            f"in place is judged through a launcher that returns the tensors it wrote, in the reference's "
            f"output order (e.g. `return x`).")
    if len(kernel_outs) != len(refs):
        raise InvalidArgument(
            f"{program.name} returns {len(refs)} output(s) but {len(kernel_outs)} were given; pass "
            f"outputs in the order the reference returns them.")
    decoded = []
    for name, r, y in zip(ev.names, refs, kernel_outs):
        if SEL.is_selection(r):
            decoded.append(_decode_indices(program, name, r, y))
            continue
        fmt = r.fmt
        if isinstance(y, tuple) and len(y) == 2 and isinstance(y[1], F.Format):
            y, yfmt = y
        else:
            if not isinstance(y, torch.Tensor):
                raise InvalidArgument(f"output {name} is a {type(y).__name__}; expected a torch tensor.")
            if y.dtype == torch.uint8 and fmt.torch_dtype is None:
                yfmt = fmt
            elif not y.is_floating_point():
                raise InvalidArgument(
                    f"output {name} is {str(y.dtype).replace('torch.', '')} but {program.name} stores it in {fmt}; "
                    f"check the kernel's output dtype or the reference's final cast.")
            else:
                yfmt = F.of(y)
        if isinstance(y, torch.Tensor):
            _check_tensor(f"output {name}", y)
        if yfmt is not fmt:
            raise InvalidArgument(
                f"output {name} is {yfmt} but {program.name} stores it in {fmt}; check the kernel's "
                f"output dtype or the reference's final cast.")
        # a quantizer output may be stored packed (two fp4 codes per byte); a tracked value is
        # not asked with getattr, whose miss raises the language's misuse error (a graph
        # break in a compiled verdict: the plan would no longer trace whole)
        packed = not isinstance(r, Tracked)
        stored = tuple(r.stored_shape) if packed else tuple(r.c.shape)
        if tuple(y.shape) != stored:
            raise InvalidArgument(
                f"output {name} has shape {tuple(y.shape)} but {program.name} produces "
                f"{stored}; check the kernel's output or reshape it.")
        yv = F.decode(y, (r.layout if packed else None) or fmt)
        if yv.device != r.c.device:
            yv = yv.to(r.c.device)
        decoded.append(yv)
    return decoded


_INDEX_DTYPES = (torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8)


def _decode_indices(program, name, sel, y) -> torch.Tensor:
    """A kernel's stored indices (int64, on the reference's device), after checking that
    they are the index output the program produces."""
    if not isinstance(y, torch.Tensor) or y.dtype not in _INDEX_DTYPES:
        given = str(y.dtype).removeprefix("torch.") if isinstance(y, torch.Tensor) else type(y).__name__
        raise InvalidArgument(f"output {name} is {given} but {program.name} returns indices there ({sel!r}); "
                              f"expected an integer tensor (int32 or int64) holding the indices the kernel chose.")
    _check_tensor(f"output {name}", y)
    if tuple(y.shape) != tuple(sel.shape):
        raise InvalidArgument(f"output {name} has shape {tuple(y.shape)} but {program.name} produces "
                              f"{tuple(sel.shape)} indices ({sel!r}); check the kernel's output or reshape it.")
    return y.to(sel.index.device).long()


@dataclass(frozen=True, kw_only=True)
class ReferenceRun:
    """How to evaluate a verdict's reference program again (the explanation re-runs it
    uncondensed, to attribute width to sites)."""
    program: object
    inputs: tuple
    params: dict
    profile: object
    nonfinite: str
    forced: dict | None = None    # the kernel's stored indices (a program with index outputs)

    def rerun(self, condensed: bool = False):
        """(outputs, ctx, input policy) of another run of the program on the same inputs."""
        return run_reference(self.program, self.inputs, self.params, self.profile, condensed=condensed,
                             nonfinite=self.nonfinite, forced=self.forced)


__all__ = ["NONFINITE_POLICIES", "NONFINITE_POLICY_TEXT", "Evaluation", "ReferenceRun", "Region",
           "as_input", "check_params", "decode_outputs", "evaluate", "output_names", "outputs_list", "run_reference"]
