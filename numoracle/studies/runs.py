"""Kernel runs for the baseline, stress and mutation studies: a kernel over cases
(``numoracle.strategies`` draws them), each run once (``runner.execute``) and judged by
numoracle and every baseline *on the same outputs*, against one evaluation of the
reference per case (``numoracle.evaluate``), which every kernel and mutant run on that
case shares.

No shrinking, no corpus (the fuzzing runner has those).  A kernel exception or a
non-finite output where the reference is finite is a recorded outcome, never the end
of a study.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass, field

import torch

from ..check import evaluate
from ..errors import InvalidArgument
from ..oracles.baselines import Observed, default_baselines, observe, required_atol
from ..runner.execute import execute
from ..strategies import Case, group_cases

def log_grid(n: int = 20, lo: float = 1e-6, hi: float = 1.0) -> list:
    """n values spaced evenly in log10 from lo to hi (both included)."""
    if n == 1:
        return [hi]
    a, b = math.log10(lo), math.log10(hi)
    return [10 ** (a + (b - a) * i / (n - 1)) for i in range(n)]


DEFAULT_RTOLS = tuple(log_grid(20))
DEFAULT_ATOLS = tuple(log_grid(20))


def _as_list(out):
    if isinstance(out, (tuple, list)):
        return list(out)
    return [out]


def digest(outputs) -> str:
    """A hash of the outputs' raw bits (bit-identical outputs ⇔ equal digests)."""
    h = hashlib.sha1()
    for t in outputs:
        t = t.detach().contiguous().cpu().reshape(-1) if t.dim() == 0 else t.detach().contiguous().cpu()
        h.update(str(t.dtype).encode())
        h.update(str(tuple(t.shape)).encode())
        h.update(t.view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    return h.hexdigest()


@dataclass
class Run:
    """One kernel run and every oracle's judgement of it."""
    case: Case
    kernel: str
    outcome: str                       # "ok" | "crash" | "nonfinite"
    digest: str = ""
    error: str = ""
    numoracle: str = ""                # accept | reject | uncertified
    confirmed: bool = False            # reject confirmed in fixed-input mode
    n_rejected: int = 0
    baselines: dict = field(default_factory=dict)      # name -> BaselineResult
    need: list = field(default_factory=list)           # required atol per grid rtol
    observed: Observed | None = field(default=None, repr=False)
    outputs: list | None = field(default=None, repr=False)

    @property
    def numoracle_kill(self) -> bool:
        return self.numoracle == "reject" and self.confirmed

    def fails(self, name: str) -> bool:
        if self.outcome != "ok":
            return True
        if name == "numoracle":
            return self.numoracle_kill
        return not self.baselines[name].ok

    def to_dict(self) -> dict:
        return {"case": self.case.to_dict(), "kernel": self.kernel, "outcome": self.outcome,
                "error": self.error, "numoracle": self.numoracle, "confirmed": self.confirmed,
                "rejected": self.n_rejected,
                "baselines": {k: v.to_dict() for k, v in self.baselines.items()}}


def _evaluation(op, case, inputs, params, backend, evaluations, launch=None):
    """The reference evaluated on this case's inputs, once per case where ``evaluations``
    ((case, launch values the reference reads) -> Evaluation) is shared between kernels: a
    reference with ``no.launch()`` parameters is evaluated once per launch configuration."""
    read = tuple(sorted((k, repr(v)) for k, v in (launch or {}).items() if k in op.reference.launch_params))
    key = (case, read)
    if evaluations is not None and key in evaluations:
        return evaluations[key]
    ev = evaluate(op.reference, inputs, params, backend=backend, nonfinite="uncertified", launch=launch)
    if evaluations is not None:
        evaluations[key] = ev
    return ev


def judge(op, case, inputs, params, outputs, kernel_name, baselines, rtols=DEFAULT_RTOLS,
          backend="interpreter", keep=False, evaluations=None, launch=None) -> Run:
    """Judge ``outputs`` of one run with numoracle and ``baselines``; ``launch``: the run's
    launch values (``Execution.launch``)."""
    run = Run(case, kernel_name, "ok", digest(outputs))
    try:
        v = _evaluation(op, case, inputs, params, backend, evaluations, launch).check(
            tuple(outputs) if len(outputs) > 1 else outputs[0])
    except InvalidArgument as exc:        # wrong dtype/shape from a broken kernel
        run.outcome, run.error = "crash", f"outputs not judgeable: {exc}"[:400]
        return run
    run.numoracle, run.n_rejected = v.status, v.n_rejected
    run.confirmed = v.confirmation == "confirmed"
    if any(bool((~torch.isfinite(o.kernel) & torch.isfinite(o.centre)).any()) for o in v.outputs):
        run.outcome = "nonfinite"
    obs = observe(op.name, v, inputs, params, op.reference)
    for b in baselines:
        run.baselines[b.name] = b.judge(obs)
    run.need = required_atol(obs, rtols)
    if keep:
        run.observed, run.outputs = obs, outputs
    return run


def run_kernel(op, fn, kernel_name, cases, baselines, *, backend="interpreter", rtols=DEFAULT_RTOLS,
               keep=False, reuse=None, evaluations=None) -> list:
    """Run ``fn`` on every case and judge it.  ``reuse`` maps (case, digest) of earlier runs
    to their Run: an output bit-identical to a judged one reuses its judgement;
    ``evaluations`` (case -> Evaluation, filled as it goes) shares the reference's
    evaluation of each case between kernels."""
    from ..backends import resolve
    dev = resolve(backend).device
    runs = []
    for case in cases:
        inputs, params = case.materialize(dev, op)
        ran = execute(fn, inputs, params)
        if not ran.ok:
            runs.append(Run(case, kernel_name, "crash", error=ran.error[:400]))
            continue
        outs = _as_list(ran.outputs)
        d = digest(outs)
        prev = reuse.get((case, d)) if reuse else None
        if prev is not None:
            r = Run(case, kernel_name, prev.outcome, d, prev.error, prev.numoracle, prev.confirmed,
                    prev.n_rejected, dict(prev.baselines), list(prev.need))
            runs.append(r)
            continue
        runs.append(judge(op, case, inputs, params, outs, kernel_name, baselines, rtols, backend, keep,
                          evaluations, {**dict(case.config), **(ran.launch or {})}))
    return runs


def calibrate(op, *, dtype="bf16", rows=4, cols=96, n=8, seed=10_000, backend="interpreter",
              margin=2.0, params=None):
    """Fit the tuned tolerance on ``n`` calibration-group runs of the correct kernel
    (seeds disjoint from campaign seeds; ``params`` fixed as in the runs it is compared with)."""
    from ..backends import resolve
    from ..oracles.baselines import TunedTolerance
    dev = resolve(backend).device
    cases = group_cases(op, ["calibration"], n, dtype, rows, cols, seed, params=params)
    obs, errors = [], []
    fn = op.kernels["correct"]
    for case in cases:
        inputs, params = case.materialize(dev, op)
        ran = execute(fn, inputs, params)
        if not ran.ok:             # an invalid case (the example does not fit these params)
            errors.append(f"{case}: {ran.error}")
            continue
        v = evaluate(op.reference, inputs, params, backend=backend, nonfinite="uncertified",
                     launch=ran.launch).check(ran.outputs)
        obs.append(observe(op.name, v, inputs, params, op.reference))
    if not obs:
        raise InvalidArgument(f"{op.name}'s correct kernel failed on every calibration case; "
                              f"first: {errors[0]}")
    return TunedTolerance.fit(obs, margin=margin)


def oracles_for(op, *, dtype="bf16", rows=4, cols=96, backend="interpreter", k_ulp=2.0, n_cal=8, params=None):
    """The baselines for one operator: the fixed ones plus the tolerance tuned on its
    calibration group."""
    tuned = calibrate(op, dtype=dtype, rows=rows, cols=cols, n=n_cal, backend=backend, params=params)
    return default_baselines(tuned, k_ulp)


def grid_fails(runs, atols=DEFAULT_ATOLS):
    """For runs judged with the grid's rtols: a [n_atol][n_rtol] table of bools, True where
    the configuration (atol, rtol) fails at least one run."""
    fails = [[False] * len(runs[0].need if runs and runs[0].need else DEFAULT_RTOLS) for _ in atols]
    for r in runs:
        need = r.need if r.outcome == "ok" else [math.inf] * len(fails[0])
        for i, a in enumerate(atols):
            row = fails[i]
            for k, nk in enumerate(need):
                if a < nk:
                    row[k] = True
    return fails
