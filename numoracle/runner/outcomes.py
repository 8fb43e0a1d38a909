"""What one case came to, and what a run came to.

An outcome is one of ``STATUSES``: the verdict's three (a statistical reject
the fixed-input mode does not confirm is ``statistical_only``, reported apart
from counterexamples, docs/design.md §4.2), or what went wrong with the kernel itself:
``error`` (it raised, or returned outputs of the wrong structure), ``nan``
(NaN/inf where the reference is certainly finite), ``timeout`` (no return
within the per-case limit), ``crash`` (the worker process running it died: a signal or an
exit code).  None of them ends a run; each is a finding, shrunk and saved like a reject.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field, replace

import torch

from ..certificates import site_kind

STATUSES = ("accept", "reject", "statistical_only", "uncertified", "error", "nan", "timeout", "crash")
FINDINGS = ("reject", "error", "nan", "timeout", "crash")
EXIT_REASONS = ("examples exhausted", "time budget", "first counterexample", "interrupted", "terminated")
# a run's exit code: 0 nothing found, 1 a finding, 2 a usage error (the CLI's); an interrupted
# run ends with the shell's code for its signal, whatever it found
EXIT_CODES = {"interrupted": 130, "terminated": 143}


def raised(exc: BaseException) -> tuple:
    """(the exception to report, where it was raised as file:line) for a kernel's failure.
    Triton's interpreter re-raises what a kernel raises as InterpreterError(repr(...)):
    numoracle's own error in the chain (an OutOfBounds) is reported as itself, at the kernel
    line it names (``where``), else at the innermost frame."""
    import os
    import traceback
    from ..errors import NumoracleError
    seen, e = set(), exc
    while e is not None and id(e) not in seen:
        if isinstance(e, NumoracleError):
            exc = e
            break
        seen.add(id(e))
        e = e.__cause__ or e.__context__
    where = getattr(exc, "where", "")
    if not where:
        frames = traceback.extract_tb(exc.__traceback__)
        where = f"{os.path.basename(frames[-1].filename)}:{frames[-1].lineno}" if frames else ""
    return exc, where


@dataclass
class Execution:
    """One kernel call: its outputs (as the kernel returned them), or why there are none."""
    status: str                  # "ok" | "error" | "timeout" | "crash"
    outputs: object = None
    error: str = ""              # "ExceptionType: message", or how the worker process died
    error_type: str = ""         # the exception's class name, or the signal ("SIGSEGV") / exit code
    traceback: str = ""          # the end of its traceback (a crash: of the worker's faulthandler dump)
    seconds: float = 0.0
    origin: str = ""             # file:line where the kernel raised
    where: str = "in-process"    # "in-process" | "worker"
    rss_mb: float | None = None  # resident memory of the process that ran it, after the call
    # the launch configuration the call used ({name: value}, runner.launches), for the
    # reference's no.launch() parameters
    launch: dict | None = None
    # of ``seconds``, the time spent starting the worker process before the call (its imports,
    # the child's backend set-up): on a run's first call, and after a crash or a hang
    start_seconds: float = 0.0
    # of ``seconds``, Triton's compile steps (``launches.compiling``) and how many there were
    compile_seconds: float = 0.0
    compiles: int = 0

    @property
    def ok(self) -> bool:
        return self.status == "ok"


@dataclass
class Outcome:
    status: str
    case: object = None                 # strategies.Case (None for hand-made inputs)
    verdict: object = None              # numoracle Verdict (None for error / timeout)
    error: str | None = None
    seconds: float = 0.0
    score: float | None = None          # worst |kernel - centre| / half-width, the target() value
    excess_ulps: float | None = None    # the worst element's excess in its output's ulps, the other target()
    # what shrinking keeps: (output, kind, dominant site) of a reject or NaN; ("error", type,
    # file:line), ("crash", signal or exit code), ("timeout",) of a kernel that returned nothing
    failure_class: tuple | None = None
    # why an uncertified verdict is (certificate.reason_kinds(): 'range: <site>', 'domain: ...')
    uncertified_reasons: tuple = ()
    # its first uncertified element and the input rows' ranges there (explain.uncertified_example)
    uncertified_example: dict | None = None
    inputs: tuple = field(default=(), repr=False)
    params: dict = field(default_factory=dict, repr=False)
    outputs: object = field(default=None, repr=False)
    traceback: str = field(default="", repr=False)   # the kernel's (an error) or the worker's dump (a crash)
    rss_mb: float | None = None         # resident memory of the process that ran the kernel, after it
    launch: dict | None = field(default=None, repr=False)   # the launch values the verdict read

    @property
    def is_counterexample(self) -> bool:
        return self.status == "reject"

    def light(self) -> Outcome:
        """This outcome without its tensors (verdict, inputs, outputs): what a run keeps of a
        case it may be asked again.  A verdict holds float64 regions of every output element,
        about 35 times a bf16 case's inputs, so a run that kept whole outcomes of the cases it
        had judged grew by megabytes a case."""
        return replace(self, verdict=None, inputs=(), outputs=None)

    @property
    def is_finding(self) -> bool:
        return self.status in FINDINGS

    @property
    def reference_refused(self) -> bool:
        """The kernel ran, but the reference refused the drawn inputs (errors.ReferenceRefused):
        the operator's domain or example builder is at fault, not the kernel."""
        return tuple((self.failure_class or ())[:2]) == ("error", "reference")

    def shapes(self) -> str:
        """The input tensors' shapes, "[1, 3] x [3]": what a finding was shrunk to."""
        return " x ".join(str(list(x.shape)) for x in self.inputs or () if hasattr(x, "shape"))

    def explain(self) -> str:
        """What went wrong, for a person: the verdict's explanation, or the kernel's failure."""
        if self.verdict is not None and self.status in ("reject", "nan", "statistical_only", "uncertified"):
            return self.verdict.explain()
        head = {"error": "The kernel failed", "timeout": "The kernel did not return",
                "crash": "The kernel's process died"}.get(self.status, self.status)
        if self.reference_refused:
            head = "The reference could not run"
        elif self.failure_class and tuple(self.failure_class[:2]) in (("error", "outputs"), ("error", "judging")):
            head = "The kernel's outputs could not be judged"
        lines = [head + f": {self.error}"]
        if self.failure_class:
            lines.append(f"failure class: {list(self.failure_class)}")
        if self.traceback:
            lines.append(self.traceback.rstrip())
        return "\n".join(lines)

    def summary(self) -> dict:
        d = {"status": self.status, "seconds": round(self.seconds, 4)}
        if self.case is not None:
            d["case"] = self.case.to_dict()
        if self.verdict is not None:
            v = self.verdict
            d.update(rejected=v.n_rejected, uncertified=v.n_uncertified, confirmation=v.confirmation)
        if self.error:
            d["error"] = self.error
        if self.score is not None:
            d["score"] = self.score
        if self.failure_class:
            d["failure_class"] = list(self.failure_class)
        if self.uncertified_reasons:
            d["uncertified_reasons"] = list(self.uncertified_reasons)
        if self.uncertified_example:
            d["uncertified_example"] = self.uncertified_example
        return d


def excess_ulps(verdict) -> float | None:
    """How far the worst element lies outside its interval, in ulps of its output's format
    (negative: inside), for ``target()``; None without a finite figure."""
    if verdict is None:
        return None
    try:
        w = verdict.worst()
    except Exception:  # noqa: BLE001 - a statistic; never let it hide the verdict
        return None
    if w is None or w[2] != w[2] or abs(w[2]) == float("inf"):
        return None
    o, i, excess = w
    if bool(o.uncertified.reshape(-1)[i]) or bool(o.special.reshape(-1)[i]):
        return None                  # not judged, or NaN/inf: no distance in ulps to speak of
    return max(-1e6, min(1e6, float(excess)))


def boundary_score(verdict) -> float | None:
    """How close the kernel came to the edge of its acceptance region, the
    worst element's: in [0, 1] inside the accepted storage interval [qlo, qhi]
    (|kernel - centre| over the centre's distance to the bound on that side),
    1 + (distance outside) / (interval width) beyond it.  Hypothesis
    ``target()`` maximises it, steering the search toward the boundary."""
    best = None
    for o in verdict.outputs:
        if o.numel == 0 or o.kind == "index":
            # an index has no distance to a bound (its rejects rank by excess_ulp)
            continue
        k, c, qlo, qhi = o.kernel, o.centre, o.qlo, o.qhi
        tiny = torch.finfo(torch.float64).tiny
        width = torch.clamp(qhi - qlo, min=tiny)
        inside = (k >= qlo) & (k <= qhi)
        up = torch.clamp(qhi - c, min=tiny)
        down = torch.clamp(c - qlo, min=tiny)
        s_in = torch.where(k >= c, (k - c) / up, (c - k) / down).clamp(0, 1)
        s_out = 1 + torch.maximum(k - qhi, qlo - k) / width
        score = torch.where(inside, s_in, s_out)
        ok = torch.isfinite(score) & ~o.uncertified
        if bool(ok.any()):
            m = float(score[ok].max())
            best = m if best is None else max(best, m)
    if best is None or not math.isfinite(best):
        return None
    return min(best, 1e6)


def failure_class(verdict) -> tuple | None:
    """(output, kind, dominant site) of a reject, from the verdict's worst
    element and its width attribution: what the shrinker must preserve."""
    if verdict.status != "reject":
        return None
    w = verdict.worst()
    if w is None:
        return None
    o, i, _ = w
    special = bool(o.special.reshape(-1)[i])
    kind = "non-finite" if special else "outside"
    site = ""
    if verdict.reference_run is not None:
        from ..verdict.explain import attribution
        try:
            shares = attribution(verdict, o.name, i)
        except Exception:  # attribution is an explanation aid; never let it hide the reject
            shares = []
        if shares:
            site = site_kind(shares[0][0])
    return (o.name, kind, site)


def failure_key(outcome) -> tuple:
    """What a shrunk case keeps of the finding it shrinks (``same_failure``): its status and
    failure class, but of a reject's class only the output and the kind.  The class's third
    part, the site with the largest share of the worst element's width, describes the region
    there and moves with the shape (a log-softmax's exp and its row sum trade places as the
    row shortens), so a shrinker held to it stalled: docs/results/2026-12-06-shrink-failure-key.md."""
    fc = outcome.failure_class
    if fc is not None and outcome.status == "reject":
        fc = tuple(fc[:2])
    return (outcome.status, None if fc is None else tuple(fc))


def same_failure(a, b) -> bool:
    """Whether outcome ``a`` fails the way ``b`` does, for shrinking (``failure_key``)."""
    return failure_key(a) == failure_key(b)


@dataclass
class GroupStats:
    cases: int = 0
    accept: int = 0
    reject: int = 0
    statistical_only: int = 0
    uncertified: int = 0
    error: int = 0
    nan: int = 0
    timeout: int = 0
    crash: int = 0

    def add(self, status: str) -> None:
        self.cases += 1
        setattr(self, status, getattr(self, status) + 1)

    def to_dict(self) -> dict:
        return dict(self.__dict__)


@dataclass
class RunResult:
    """What a run came to: statistics per input-shift group, the exit reason,
    the (shrunk, confirmed) counterexample and where it was saved, and the
    findings that are not counterexamples."""
    op: str
    kernel: str
    backend: str
    mode: str
    exit_reason: str = "examples exhausted"
    groups: dict = field(default_factory=dict)          # group -> GroupStats
    counterexample: Outcome | None = None
    shrunk_from: object = None                          # the case before element-level shrinking
    saved: str | None = None
    statistical_only: list = field(default_factory=list)
    errors: list = field(default_factory=list)          # error / nan / timeout outcomes (first few)
    other_rejects: list = field(default_factory=list)   # rejects of another failure class
    started: float = field(default_factory=time.time)
    elapsed: float = 0.0
    shrink_seconds: float = 0.0
    shrink_evaluations: int = 0
    # group -> {why a verdict was uncertified -> cases}
    uncertified_reasons: dict = field(default_factory=dict)
    # group -> {reason -> the first uncertified case's element and input ranges}
    uncertified_examples: dict = field(default_factory=dict)
    # group -> {a case's reasons together, in program order -> cases}: which sites fail in the
    # same cases (a domain failure and the range checks after it are one cause)
    uncertified_causes: dict = field(default_factory=dict)
    # group -> {those reasons -> the first such case's element and input ranges}
    uncertified_cause_examples: dict = field(default_factory=dict)
    save_error: str | None = None                       # why the finding could not be saved
    isolation: str = "in-process"                       # where kernels ran: "worker" | "in-process (why)"
    memory: dict = field(default_factory=dict)          # MemoryWatch.summary()
    warnings: list = field(default_factory=list)
    seed: int | None = None                             # the search's seed (None: derandomized)
    hypothesis_report: list = field(default_factory=list)   # what Hypothesis reported (falsifying example)
    # where a case's time went: phase -> seconds over the search's cases (Breakdown.PHASES)
    times: "Breakdown" = field(default_factory=lambda: Breakdown())

    def record(self, out: Outcome, group: str) -> None:
        self.groups.setdefault(group, GroupStats()).add(out.status)
        if out.status == "uncertified":
            why = self.uncertified_reasons.setdefault(group, {})
            ex = self.uncertified_examples.setdefault(group, {})
            reasons = tuple(out.uncertified_reasons or ("no finite bound",))
            causes = self.uncertified_causes.setdefault(group, {})
            causes[reasons] = causes.get(reasons, 0) + 1
            if out.uncertified_example:
                self.uncertified_cause_examples.setdefault(group, {}).setdefault(reasons, out.uncertified_example)
            for r in reasons:
                why[r] = why.get(r, 0) + 1
                if out.uncertified_example and r not in ex:
                    ex[r] = {**out.uncertified_example, **({"case": out.case.to_dict()} if out.case is not None else {})}

    def causes(self, group: str) -> list:
        """(the sites an uncertified case of ``group`` fails at, in program order; cases), the
        most frequent first."""
        return sorted(self.uncertified_causes.get(group, {}).items(), key=lambda kv: (-kv[1], kv[0]))

    @property
    def totals(self) -> GroupStats:
        t = GroupStats()
        for g in self.groups.values():
            for k, v in g.__dict__.items():
                setattr(t, k, getattr(t, k) + v)
        return t

    @property
    def cases_per_second(self) -> float:
        n = self.totals.cases
        return n / self.elapsed if self.elapsed > 0 else 0.0

    @property
    def found(self) -> bool:
        t = self.totals
        return self.counterexample is not None or bool(t.reject or t.error or t.nan or t.timeout or t.crash)

    def exit_code(self) -> int:
        """0 nothing found, 1 a finding; 130 / 143 for a run ended by SIGINT / SIGTERM."""
        if self.exit_reason in EXIT_CODES:
            return EXIT_CODES[self.exit_reason]
        return 1 if self.found else 0

    def to_dict(self) -> dict:
        t = self.totals
        ce = self.counterexample
        return {
            "op": self.op, "kernel": self.kernel, "backend": self.backend, "mode": self.mode,
            "exit_reason": self.exit_reason, "seed": self.seed, "seconds": round(self.elapsed, 2),
            "cases_per_second": round(self.cases_per_second, 3),
            "totals": t.to_dict(), "groups": {g: s.to_dict() for g, s in sorted(self.groups.items())},
            "counterexample": None if ce is None else {
                **ce.summary(), "shrunk_from": None if self.shrunk_from is None else self.shrunk_from.to_dict(),
                "shape": [list(t.shape) for t in ce.inputs if isinstance(t, torch.Tensor)],
                "verdict": ce.verdict.to_dict() if ce.verdict is not None else None,
                "explanation": ce.explain() if ce.verdict is None else None},
            "saved": self.saved, "save_error": self.save_error, "isolation": self.isolation,
            "memory": self.memory, "warnings": list(self.warnings),
            "shrink": {"seconds": round(self.shrink_seconds, 2), "evaluations": self.shrink_evaluations},
            "breakdown": self.times.to_dict(t.cases),
            "uncertified_reasons": {g: dict(sorted(r.items(), key=lambda kv: -kv[1]))
                                    for g, r in sorted(self.uncertified_reasons.items())},
            "uncertified_examples": {g: dict(sorted(e.items())) for g, e in sorted(self.uncertified_examples.items())},
            "uncertified_causes": {g: [{"sites": list(k), "cases": n,
                                        "example": self.uncertified_cause_examples.get(g, {}).get(k)}
                                       for k, n in self.causes(g)]
                                   for g in sorted(self.uncertified_causes)},
            "statistical_only": [o.summary() for o in self.statistical_only],
            "errors": [o.summary() for o in self.errors],
            "other_rejects": [o.summary() for o in self.other_rejects],
        }


class Breakdown:
    """Where a fuzzing run's time went, per phase, summed over the search's cases:

    - ``draw``: Hypothesis (drawing the case, its engine's bookkeeping between cases);
    - ``inputs``: making the case's tensors (``Case.materialize``);
    - ``worker_start``: starting the supervised worker process (its imports, the child's
      backend set-up), once a run and again after each crash or hang;
    - ``compile``: Triton making specializations of the kernel the process had not launched
      before (compiling them, or loading them from its on-disk cache): the cost of the kernel's
      own variety of shapes and formats, high in a short run, falling as the cache fills;
    - ``kernel``: running the kernel, its compiles apart (in the worker process too: the round
      trip);
    - ``verdict``: ``check`` of the outputs;
    - ``outcome``: classifying the verdict (failure class, boundary score, reasons);
    - ``bookkeeping``: the engine's own per-case work (recording, memory watch, progress);
    - ``shrink``: shrinking a finding (its evaluations included), after the search.

    ``compiles`` counts the compile steps.  ``to_dict`` gives the seconds, the milliseconds per
    case and each phase's share."""

    PHASES = ("draw", "inputs", "worker_start", "compile", "kernel", "verdict", "outcome", "bookkeeping",
              "shrink")

    def __init__(self):
        self.seconds = dict.fromkeys(self.PHASES, 0.0)
        self.compiles = 0

    def add(self, phase: str, seconds: float) -> None:
        self.seconds[phase] = self.seconds.get(phase, 0.0) + seconds

    def to_dict(self, cases: int) -> dict:
        search = sum(v for k, v in self.seconds.items() if k != "shrink")
        return {"cases": cases, "compiles": self.compiles,
                "seconds": {k: round(v, 4) for k, v in self.seconds.items()},
                "ms_per_case": {k: round(1e3 * v / cases, 3) if cases else None
                                for k, v in self.seconds.items() if k != "shrink"},
                "share": {k: round(v / search, 4) if search > 0 else None
                          for k, v in self.seconds.items() if k != "shrink"}}


def compile_note(breakdown: dict) -> str | None:
    """The run summary's line when Triton's compile steps took a tenth of the search or more
    (``Breakdown.to_dict``'s form): why the run was slow, and that it is the kernel's."""
    seconds = breakdown.get("seconds") or {}
    search = sum(v for k, v in seconds.items() if k != "shrink")
    spent, n = seconds.get("compile", 0.0), breakdown.get("compiles", 0)
    if not n or search <= 0 or spent < 0.1 * search:
        return None
    return (f"compile: Triton compiled (or loaded from its cache) {n} specialization{'s' if n > 1 else ''} of "
            f"the kernel in {spent:.1f} s, {spent / search:.0%} of the search: the kernel's own shapes and "
            f"formats, which Triton's on-disk cache keeps for later runs")


class MemoryWatch:
    """Resident memory of the process running kernels, case by case: growth over the run
    and a warning when it grows with nearly every case (a kernel that leaks)."""

    WINDOW = 20          # cases looked at
    GROWING = 0.8        # the share of them after which memory was higher than before by STEP_MB
    MIN_MB = 32.0        # and by at least this much over the window
    # a case "grows" memory by at least half the rate MIN_MB needs: a run's warm-up (caches,
    # the allocator's arenas) grows by one large step and many of a page or two, which is no leak
    STEP_MB = MIN_MB / WINDOW / 2

    def __init__(self):
        self.samples: list = []
        self.warned = False

    def add(self, mb: float | None) -> str | None:
        """Record one case's figure; a warning the first time memory looks like it leaks."""
        if mb is None:
            return None
        self.samples.append(float(mb))
        w = self.samples[-(self.WINDOW + 1):]
        if self.warned or len(w) <= self.WINDOW:
            return None
        ups = sum(b - a >= self.STEP_MB for a, b in zip(w, w[1:]))
        if ups >= self.GROWING * self.WINDOW and w[-1] - w[0] >= self.MIN_MB:
            self.warned = True
            return (f"memory grows with every case: {w[0]:.0f} -> {w[-1]:.0f} MiB over the last {self.WINDOW} "
                    f"cases (+{(w[-1] - w[0]) / self.WINDOW:.1f} MiB per case); the kernel may leak")
        return None

    def summary(self) -> dict:
        if not self.samples:
            return {}
        s = self.samples
        return {"start_mb": round(s[0], 1), "end_mb": round(s[-1], 1), "peak_mb": round(max(s), 1),
                "growth_mb": round(s[-1] - s[0], 1), "cases": len(s),
                "growth_per_case_mb": round((s[-1] - s[0]) / max(1, len(s) - 1), 3), "leak_warning": self.warned}
