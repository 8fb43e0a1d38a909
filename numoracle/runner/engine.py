"""The fuzzing loop: Hypothesis draws cases, each is judged, ``target()``
steers toward the edge of the acceptance region, and the first finding - a
confirmed reject, NaN/inf where the reference is finite, a kernel error, a
timeout or a crash - is shrunk (Hypothesis on the structure, then
``shrink.minimize`` on the elements, keeping its failure class) and saved to the
corpus.  If it cannot be saved, the result still holds it, with the reason.

Kernels run in the supervised worker process (``runner.worker``) when
``isolate`` (default ``settings.isolate``) and the kernel can be named there;
the result says where they ran, and the worker's memory, case by case.

Budgets: ``max_examples`` (Hypothesis's count), ``seconds`` (wall clock for
the search; shrinking has its own ``shrink_seconds``).  The exit reason says
which one ended the run, or that a counterexample or Ctrl-C did.  With a
``database`` directory the run resumes: Hypothesis replays the failures it
saved there before drawing new cases.
"""

from __future__ import annotations

import signal
import sys
import time

from hypothesis import HealthCheck, Phase, given, seed as hseed, settings, target
from hypothesis.database import DirectoryBasedExampleDatabase
from hypothesis.reporting import with_reporter

from .. import backends
from ..strategies.cases import cases as cases_strategy
from .execute import UserInterrupt, judge, run_case
from .kernels import resolve
from .outcomes import MemoryWatch, RunResult
from .shrink import input_roles, minimize


class _BudgetSpent(BaseException):
    """Raised inside the Hypothesis test once the time budget is spent; a
    BaseException so Hypothesis passes it through instead of shrinking it."""


class _Counterexample(Exception):
    def __init__(self, outcome):
        super().__init__(f"{outcome.status}: {outcome.case!r}")
        self.outcome = outcome


class Progress:
    """A live line on stderr: cases, cases/s, rejects, uncertified, errors."""

    def __init__(self, label: str, stream=None, every: float = 0.5):
        self.label, self.stream, self.every = label, stream or sys.stderr, every
        self._last = 0.0
        self.tty = hasattr(self.stream, "isatty") and self.stream.isatty()
        if not self.tty:
            self.every = max(every, 10.0)

    def update(self, result: RunResult, force: bool = False, note: str = "") -> None:
        now = time.time()
        if not force and now - self._last < self.every:
            return
        self._last = now
        t = result.totals
        el = now - result.started
        line = (f"[{self.label}] {t.cases} cases {t.cases / el if el > 0 else 0:.1f}/s  rejects {t.reject}"
                f"  statistical-only {t.statistical_only}  uncertified {t.uncertified}  errors {t.error}"
                f"  nan {t.nan}  timeouts {t.timeout}  crashes {t.crash}  {el:.0f}s{('  ' + note) if note else ''}")
        if self.tty:
            self.stream.write("\r\x1b[2K" + line)
        else:
            self.stream.write(line + "\n")
        self.stream.flush()

    def done(self) -> None:
        if self.tty:
            self.stream.write("\n")
            self.stream.flush()


def _interrupt_reason(exc: BaseException) -> str:
    return "terminated" if isinstance(exc, UserInterrupt) and exc.signum == signal.SIGTERM else "interrupted"


def _to_stderr(value) -> None:
    print(value, file=sys.stderr)


def fuzz(op, kernel="correct", *, backend="interpreter", mode="statistical", max_examples=100,
         seconds=None, strategy=None, explicit=(), seed=None, derandomize=False, database=None,
         timeout=60.0, isolate=None, shrink=True, shrink_seconds=30.0, corpus=None, expect="accept",
         progress=None, stop_on_first=True) -> RunResult:
    """Fuzz ``kernel`` of operator ``op`` and return a :class:`RunResult`.

    ``strategy``: a ``cases(...)`` strategy (default ``cases(op)``);
    ``explicit``: cases judged first (``check`` passes one per input group);
    ``corpus``: a directory to save the shrunk finding in;
    ``isolate``: run the kernel in the supervised worker process (default ``settings.isolate``)."""
    from .. import operators
    from ..config import settings as _settings
    from .worker import recipe_of
    backend = backends.select(backend)
    device = backend.device
    op = operators.resolve(op)
    kfn, kspec = resolve(op, kernel)
    isolate = _settings.default.isolate if isolate is None else bool(isolate)
    strategy = strategy if strategy is not None else cases_strategy(op)
    result = RunResult(op.name, kspec, backend.name, mode)
    if isolate and recipe_of(kfn) is None:
        isolate = False
        result.isolation = ("in-process: the kernel cannot be imported by name in a worker process (define it at "
                            "the top level of a module other than __main__)")
    elif isolate:
        result.isolation = "worker"
    kw = dict(backend=backend, mode=mode, timeout=timeout, device=device, isolate=isolate)
    memory = MemoryWatch()
    memo: dict = {}
    times = result.times
    # the end of the last case's body: what passes until the next one is Hypothesis's
    clock = {"last": None}
    state = {"phase": "search", "deadline": None if seconds is None else time.time() + seconds,
             "found": None, "shrink_deadline": None}
    if progress is True:
        progress = Progress(f"{op.name}/{kspec}")

    def evaluate_case(case):
        if case in memo:
            return memo[case]
        out = run_case(op, kfn, case, times=times if state["phase"] == "search" else None, **kw)
        out.inputs = tuple(out.inputs)
        memo[case] = out
        if len(memo) > 256:                 # keep only what the shrink replay may ask again
            memo.pop(next(iter(memo)))
        return out

    def body(case):
        if state["phase"] == "search":
            t0 = time.perf_counter()
            if clock["last"] is not None:
                times.add("draw", t0 - clock["last"])
            try:
                return search(case, t0)
            finally:
                clock["last"] = time.perf_counter()
        return shrinking(case)

    def search(case, t0):
        if state["deadline"] is not None and time.time() > state["deadline"]:
            raise _BudgetSpent()
        phases = dict(times.seconds)
        try:
            out = evaluate_case(case)
            result.record(out, case.group)
            leak = memory.add(out.rss_mb)
            if leak:
                result.warnings.append(leak)
                if progress:
                    progress.stream.write(("\n" if progress.tty else "") + f"warning: {leak}\n")
            if out.status == "statistical_only" and len(result.statistical_only) < 20:
                result.statistical_only.append(out)
            if out.status in ("error", "nan", "timeout", "crash") and len(result.errors) < 20:
                result.errors.append(out)
            if progress:
                progress.update(result)
            if out.score is not None:
                target(out.score, label="excess/width")
            if out.is_finding and stop_on_first:
                state["found"] = (out.status, out.failure_class)
                state["phase"] = "shrink"
                state["shrink_deadline"] = time.time() + shrink_seconds
                raise _Counterexample(out)
            if out.status == "reject" and len(result.other_rejects) < 20:
                result.other_rejects.append(out)
        finally:
            # the body's time that no phase of the case took: the engine's own
            inner = sum(times.seconds[k] - phases[k] for k in phases)
            times.add("bookkeeping", time.perf_counter() - t0 - inner)

    def shrinking(case):
        # shrinking (Hypothesis's, on the structure): the same status and failure class only;
        # past its budget, only cases already seen can fail again, so the final
        # replay of the shrunk example still fails and nothing new is run.
        if case not in memo and time.time() > state["shrink_deadline"]:
            return
        out = evaluate_case(case)
        result.shrink_evaluations += 1
        if progress:
            progress.update(result, note="shrinking")
        if (out.status, out.failure_class) == state["found"]:
            raise _Counterexample(out)

    phases = [Phase.explicit, Phase.reuse, Phase.generate, Phase.target]
    if shrink:
        phases.append(Phase.shrink)
    db = DirectoryBasedExampleDatabase(str(database)) if database else None
    s = settings(max_examples=max(1, int(max_examples)), deadline=None, derandomize=derandomize, database=db,
                 phases=phases, suppress_health_check=list(HealthCheck), print_blob=False,
                 report_multiple_bugs=False)
    body._hypothesis_internal_add_digest = f"numoracle:{op.name}:{kspec}:{mode}".encode()
    test = given(strategy)(body)
    for c in reversed(list(explicit)):
        from hypothesis import example
        test = example(c)(test)
    if seed is not None and not derandomize:
        test = hseed(seed)(test)          # inside settings(): outside it the database goes unused
    test = s(test)

    found = None
    clock["last"] = time.perf_counter()
    try:
        # Hypothesis's own reports (a seed to reproduce a run that stopped early) go to stderr:
        # stdout is the caller's (``numoracle fuzz --json`` prints one JSON document there)
        with with_reporter(_to_stderr):
            test()
        result.exit_reason = "examples exhausted"
    except _Counterexample as exc:
        found = exc.outcome
        result.exit_reason = "first counterexample"
    except _BudgetSpent:
        result.exit_reason = "time budget"
    except KeyboardInterrupt as exc:
        result.exit_reason = _interrupt_reason(exc)
    except BaseException as exc:       # Hypothesis wraps errors from explicit examples
        inner = getattr(exc, "exceptions", None)
        hit = [e for e in (inner or []) if isinstance(e, _Counterexample)]
        if not hit:
            raise
        found = hit[0].outcome
        result.exit_reason = "first counterexample"
    result.elapsed = time.time() - result.started
    if state["phase"] == "search" and clock["last"] is not None:
        times.add("draw", time.perf_counter() - clock["last"])     # Hypothesis after the last case
    elif state["shrink_deadline"] is not None:
        times.add("shrink", time.time() - state["shrink_deadline"] + shrink_seconds)
    result.memory = memory.summary()
    if found is not None:
        result.counterexample = found
        result.shrunk_from = found.case
        if shrink:
            t0 = time.time()
            if progress:
                progress.update(result, force=True, note="shrinking elements")
            roles = input_roles(op, found.case.fmt)
            cfg = found.case.config

            def evaluate(inputs):
                return judge(op, kfn, inputs, found.params, cfg, case=found.case, **kw)
            try:
                best, used = minimize(evaluate, found, roles=roles, cols_multiple_of=op.domain.cols_multiple_of,
                                      min_rows=op.domain.rows[0], min_cols=op.domain.cols[0],
                                      seconds=shrink_seconds)
            except KeyboardInterrupt as exc:  # an interrupt while shrinking keeps what was found
                best, used = found, 0
                result.exit_reason = _interrupt_reason(exc)
            result.counterexample = best
            result.shrink_evaluations += used
            result.shrink_seconds = time.time() - t0
            times.add("shrink", result.shrink_seconds)
        if corpus is not None:
            from .. import corpus as C
            try:
                result.saved = str(C.save(corpus, op, kspec, result.counterexample, backend=backend.name, mode=mode,
                                          expect=expect, kernel=kfn, kernel_config=dict(found.case.config)))
            except Exception as exc:  # noqa: BLE001 - the finding stays in the result, with why it was not saved
                result.save_error = f"could not save the case to {corpus}: {type(exc).__name__}: {exc}"
            if result.saved and result.counterexample.verdict is not None:
                result.counterexample.verdict.replay = result.saved
    if progress:
        progress.update(result, force=True)
        progress.done()
    return result
