"""Minimal campaign runs for the baseline, stress and mutation studies: run a
kernel over cases drawn from the named input groups, keep the outputs, and
judge each run with numoracle and every baseline *on the same outputs*.

This is deliberately small (no shrinking, no corpus); the fuzzing runner lives
in ``numoracle.runner``.  A kernel exception or a non-finite output where the
reference is finite is a recorded outcome, never the end of a campaign.
"""

from __future__ import annotations

import hashlib
import math
import traceback
import warnings
from dataclasses import dataclass, field

import torch

from .check import check
from .errors import InvalidArgument
from .oracles.baselines import Observed, default_baselines, observe, required_atol
from .families import GROUPS

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


def log_grid(n: int = 20, lo: float = 1e-6, hi: float = 1.0) -> list:
    """n values spaced evenly in log10 from lo to hi (both included)."""
    if n == 1:
        return [hi]
    a, b = math.log10(lo), math.log10(hi)
    return [10 ** (a + (b - a) * i / (n - 1)) for i in range(n)]


DEFAULT_RTOLS = tuple(log_grid(20))
DEFAULT_ATOLS = tuple(log_grid(20))


@dataclass(frozen=True)
class Case:
    """One reproducible input: the operator's ``example`` at this seed, group, dtype and
    shape; ``params`` fill what the example leaves open."""
    op: str
    group: str
    seed: int
    dtype: str = "bf16"
    rows: int = 4
    cols: int = 96
    params: tuple = ()          # sorted (name, value) pairs

    def build(self, op, device="cpu"):
        inputs, params = op.example(self.seed, dtype=DTYPES[self.dtype], family=self.group,
                                    rows=self.rows, cols=self.cols)
        # the example's own parameters are tied to its inputs and win (operators.Domain)
        params = {**dict(self.params), **dict(params)}
        return tuple(t.to(device) for t in inputs), params

    def to_dict(self) -> dict:
        return {"op": self.op, "group": self.group, "seed": self.seed, "dtype": self.dtype,
                "rows": self.rows, "cols": self.cols, "params": dict(self.params)}


def fit_shape(op, rows: int, cols: int):
    """(rows, cols) moved into the operator's domain: cols a multiple of ``cols_multiple_of``
    and of every integer choice of a parameter named ``group*`` (a quantizer's group size
    splits the columns, so each choice must divide them)."""
    d = op.domain
    rows = min(max(rows, d.rows[0]), d.rows[1])
    m = max(int(d.cols_multiple_of), 1)
    for name, vals in d.params.items():
        if name.startswith("group"):
            for v in vals:
                if isinstance(v, int) and not isinstance(v, bool) and v > 0:
                    m = m * v // math.gcd(m, v)
    cols = max(cols, d.cols[0])
    cols = ((cols + m - 1) // m) * m
    if cols > d.cols[1]:
        cols = (d.cols[1] // m) * m
    return rows, cols


def make_cases(op, groups=None, per_group=3, dtype="bf16", rows=4, cols=96, seed=0) -> list:
    """``per_group`` cases in each input group; the operator's parameter choices
    (``op.domain.params``) cycle over the cases so each choice is exercised."""
    groups = list(GROUPS) if groups is None else list(groups)
    for g in groups:
        if g not in GROUPS:
            raise InvalidArgument(f"input group {g!r}: expected one of {sorted(GROUPS)}.")
    if dtype not in DTYPES:
        raise InvalidArgument(f"dtype={dtype!r}: expected one of {sorted(DTYPES)}.")
    if dtype not in op.domain.formats:
        raise InvalidArgument(f"{op.name} accepts formats {op.domain.formats}, not {dtype!r}.")
    rows, cols = fit_shape(op, rows, cols)
    choices = op.domain.params
    cases = []
    for gi, g in enumerate(groups):
        for i in range(per_group):
            k = gi * per_group + i
            params = tuple(sorted((name, vals[k % len(vals)]) for name, vals in choices.items()))
            cases.append(Case(op.name, g, seed + 1000 * gi + i, dtype, rows, cols, params))
    return cases


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


def execute(fn, inputs, params):
    """Run a kernel on clones of the inputs; returns (outputs list, error text)."""
    try:
        with warnings.catch_warnings():       # overflow warnings of a broken kernel on the interpreter
            warnings.simplefilter("ignore", RuntimeWarning)
            out = fn(*[t.clone() for t in inputs], **params)
        return [o for o in _as_list(out)], ""
    except Exception as exc:              # a kernel failure is an outcome
        tb = traceback.format_exception_only(type(exc), exc)
        return None, "".join(tb).strip()[:400]


def judge(op, case, inputs, params, outputs, kernel_name, baselines, rtols=DEFAULT_RTOLS,
          backend="interpreter", keep=False) -> Run:
    """Judge ``outputs`` of one run with numoracle and ``baselines``."""
    run = Run(case, kernel_name, "ok", digest(outputs))
    try:
        v = check(op.reference, tuple(outputs) if len(outputs) > 1 else outputs[0], inputs, params,
                  backend=backend, nonfinite="uncertified")
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
               keep=False, reuse=None) -> list:
    """Run ``fn`` on every case and judge it.  ``reuse`` maps (case, digest) of earlier runs
    to their Run: an output bit-identical to a judged one reuses its judgement."""
    from .backends import resolve
    dev = resolve(backend).device
    runs = []
    for case in cases:
        inputs, params = case.build(op, dev)
        outs, err = execute(fn, inputs, params)
        if outs is None:
            runs.append(Run(case, kernel_name, "crash", error=err))
            continue
        d = digest(outs)
        prev = reuse.get((case, d)) if reuse else None
        if prev is not None:
            r = Run(case, kernel_name, prev.outcome, d, prev.error, prev.numoracle, prev.confirmed,
                    prev.n_rejected, dict(prev.baselines), list(prev.need))
            runs.append(r)
            continue
        runs.append(judge(op, case, inputs, params, outs, kernel_name, baselines, rtols, backend, keep))
    return runs


def calibrate(op, *, dtype="bf16", rows=4, cols=96, n=8, seed=10_000, backend="interpreter",
              margin=2.0):
    """Fit the tuned tolerance on ``n`` calibration-group runs of the correct kernel
    (seeds disjoint from campaign seeds)."""
    from .backends import resolve
    from .oracles.baselines import TunedTolerance
    dev = resolve(backend).device
    cases = make_cases(op, ["calibration"], n, dtype, rows, cols, seed)
    obs, errors = [], []
    fn = op.kernels["correct"]
    for case in cases:
        inputs, params = case.build(op, dev)
        outs, err = execute(fn, inputs, params)
        if outs is None:           # an invalid case (the example does not fit these params)
            errors.append(f"{case}: {err}")
            continue
        v = check(op.reference, tuple(outs) if len(outs) > 1 else outs[0], inputs, params,
                  backend=backend, nonfinite="uncertified")
        obs.append(observe(op.name, v, inputs, params, op.reference))
    if not obs:
        raise InvalidArgument(f"{op.name}'s correct kernel failed on every calibration case; "
                              f"first: {errors[0]}")
    return TunedTolerance.fit(obs, margin=margin)


def oracles_for(op, *, dtype="bf16", rows=4, cols=96, backend="interpreter", k_ulp=2.0, n_cal=8):
    """The baselines for one operator: the fixed ones plus the tolerance tuned on its
    calibration group."""
    tuned = calibrate(op, dtype=dtype, rows=rows, cols=cols, n=n_cal, backend=backend)
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
