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
the search, run as Hypothesis runs of ``ROUND_EXAMPLES`` cases; shrinking has its own
``shrink_seconds``).  The exit reason says
which one ended the run, or that a counterexample or Ctrl-C / SIGTERM did.  A run
interrupted while it shrinks a finding (Hypothesis's shrink or the element shrink) keeps
the finding as shrunk so far, reports and saves it, and still ends interrupted (130 / 143).
Every case is a safe point where an interrupt swallowed elsewhere is raised again
(``execute.check_interrupt``).  With a ``database`` the run resumes: the findings kept
there for the operator, kernel and mode are judged before any case is drawn
(``runner.findings``; the search itself runs without Hypothesis's database, whose Pareto
front of targets cost as much as the rest of Hypothesis's time).
"""

from __future__ import annotations

import contextlib
import random
import signal
import sys
import time
from collections import Counter

from hypothesis import HealthCheck, Phase, event, given, seed as hseed, settings, target
from hypothesis.database import DirectoryBasedExampleDatabase, ExampleDatabase

from .. import backends
from ..strategies.cases import cases as cases_strategy
from .findings import Findings
from .execute import UserInterrupt, check_interrupt, interrupt_reported, judge, pending_interrupt, run_case
from .kernels import resolve
from .outcomes import MemoryWatch, RunResult, failure_key, same_failure
from .shrink import input_roles, minimize


# Hypothesis spends at most half of a run of 1000 or more examples on target() passes, in
# turns with generating new cases; a round of this many keeps that share and its turns.
ROUND_EXAMPLES = 1000


def _round_seed(seed, k: int):
    """Round k's seed: the run's own for the first (a short run is seeded as before), then
    one drawn from it, so that the run's seed reproduces every round."""
    if seed is None or k == 0:
        return seed
    return random.Random(f"{seed}:{k}").getrandbits(64)


class _BudgetSpent(BaseException):
    """Raised inside the Hypothesis test once the time budget is spent: Hypothesis has no
    wall-clock budget of its own, and a BaseException passes through it as a stop, not a
    failure (nothing is shrunk, saved to the database or reported; the run seeds itself, so
    Hypothesis prints no '@seed(...)' hint either).  Its argument: Hypothesis's engine, whose
    statistics are reported for it (``_note_budget_statistics``)."""


class _Counterexample(Exception):
    def __init__(self, outcome):
        super().__init__(f"{outcome.status}: {outcome.case!r}")
        self.outcome = outcome


def _found(outcome):
    """Raise the finding from one place: Hypothesis tells failures apart by where they are
    raised, and the search's and the shrinker's must be the same one (else it reports the
    shrink as flaky and keeps neither its statistics nor its database entry)."""
    raise _Counterexample(outcome)


class Progress:
    """A live line for a person on a terminal: cases, rejects, uncertified, cases/s and the
    time left of the budget.  Written to ``stream`` (stderr) only when it is a terminal: piped
    or redirected, a run prints no progress at all."""

    def __init__(self, label: str, stream=None, every: float = 0.5, deadline: float | None = None):
        self.label, self.stream, self.every, self.deadline = label, stream or sys.stderr, every, deadline
        self._last = 0.0
        self.tty = bool(getattr(self.stream, "isatty", None) and self.stream.isatty())
        self.shown = False

    def line(self, result: RunResult, now: float | None = None, note: str = "") -> str:
        now = time.time() if now is None else now
        t = result.totals
        el = now - result.started
        rate = t.cases / el if el > 0 else 0.0
        parts = [f"[{self.label}] {t.cases} cases", f"{t.reject} rejects", f"{t.uncertified} uncertified",
                 f"{rate:.1f} cases/s"]
        bad = t.error + t.nan + t.timeout + t.crash
        if bad:
            parts.append(f"{bad} kernel failures")
        if t.statistical_only:
            parts.append(f"{t.statistical_only} statistical-only")
        if self.deadline is not None:
            parts.append(f"{max(0.0, self.deadline - now):.0f}s left")
        else:
            parts.append(f"{el:.0f}s")
        if note:
            parts.append(note)
        return ", ".join(parts[:2]) + ", " + ", ".join(parts[2:])

    def update(self, result: RunResult, force: bool = False, note: str = "") -> None:
        if not self.tty:
            return
        now = time.time()
        if not force and now - self._last < self.every:
            return
        self._last = now
        self.stream.write("\r\x1b[2K" + self.line(result, now, note))
        self.stream.flush()
        self.shown = True

    def warn(self, text: str) -> None:
        """A warning on its own line (after the progress line, which goes on below it)."""
        self.stream.write(("\n" if self.shown else "") + f"warning: {text}\n")
        self.stream.flush()
        self.shown = False

    def done(self) -> None:
        if self.tty and self.shown:
            self.stream.write("\n")
            self.stream.flush()
            self.shown = False


def _own_lines_dropped(notes: list) -> list:
    """Hypothesis's notes without the explain phase's list of lines run only by failing cases
    where every line is numoracle's own (the engine raising the finding): it names no line of
    the user's kernel or test."""
    import os
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    out, i = [], 0
    while i < len(notes):
        if notes[i].strip() == "Explanation:":
            j = i + 1
            while j < len(notes) and notes[j].startswith("    "):
                j += 1
            paths = [n.strip() for n in notes[i + 1:j] if not n.strip().endswith(":")]
            if paths and all(p.startswith(here) for p in paths):
                i = j
                continue
        out.append(notes[i])
        i += 1
    return [n for n in out if n.strip()]


def _note_budget_statistics(exc: BaseException, seconds, result, events: Counter) -> None:
    """The search's statistics for ``--hypothesis-show-statistics`` when the time budget ended
    it.  Hypothesis reports them when its engine stops on its own limits; the budget stops it by
    an exception, past which it does not.  So they are reported here: the engine's own record
    (every phase that ran, its events and targets) from the engine the stop was raised in
    (``exc.args[0]``, ``_engine_runner``), else one made of the run's own counts and events.
    Nothing where no one collects statistics (outside a test run with the option)."""
    from hypothesis.statistics import collector, note_statistics
    if collector.value is None:
        return
    stats, targets = None, {}
    runner = exc.args[0] if exc.args else None
    if runner is not None:
        stats = dict(getattr(runner, "statistics", None) or {})
        targets = dict(getattr(runner, "best_observed_targets", None) or {})
    if not any(k.endswith("-phase") for k in stats or {}):
        n, elapsed = result.totals.cases, time.time() - result.started
        each = elapsed / n if n else 0.0
        cases = [{"status": "valid", "runtime": each, "drawtime": 0.0, "gctime": 0.0, "events": []}
                 for _ in range(n)]
        for text, k in events.items():        # k cases had this event: as many entries carry it
            for c in cases[:k]:
                c["events"].append(text)
        stats = {"generate-phase": {"duration-seconds": elapsed, "test-cases": cases,
                                    "distinct-failures": 0, "shrinks-successful": 0}}
    if targets:
        stats["targets"] = targets
    stats["stopped-because"] = (f"numoracle's time budget of {seconds:g} s was spent" if seconds else
                                "numoracle's time budget was spent")
    note_statistics(stats)


def _engine_runner():
    """Hypothesis's engine (its ConjectureRunner) running the test that calls this, or None:
    found on the stack while the test runs (Hypothesis trims its own frames from the traceback
    of what the test raises).  Its statistics of the phase in progress are written when the
    stop has passed through that phase."""
    try:
        from hypothesis.internal.conjecture.engine import ConjectureRunner
    except ImportError:
        return None
    f = sys._getframe(1)
    while f is not None:
        for key in ("self", "runner"):
            if isinstance(f.f_locals.get(key), ConjectureRunner):
                return f.f_locals[key]
        f = f.f_back
    return None


def _interrupt_reason(exc: BaseException) -> str:
    return "terminated" if isinstance(exc, UserInterrupt) and exc.signum == signal.SIGTERM else "interrupted"


def _size(outcome) -> int:
    """How many elements a finding's inputs hold: of two failing cases, the smaller is the
    better shrunk."""
    return sum(int(t.numel()) for t in (outcome.inputs or ()) if hasattr(t, "numel"))


def fuzz(op, kernel="correct", *, backend="interpreter", mode="statistical", max_examples=100,
         seconds=None, strategy=None, explicit=(), seed=None, derandomize=False, database=None,
         timeout=60.0, isolate=None, shrink=True, shrink_seconds=30.0, corpus=None, expect="accept",
         progress=None, stop_on_first=True, hypothesis_settings=None) -> RunResult:
    """Fuzz ``kernel`` of operator ``op`` and return a :class:`RunResult`.

    ``strategy``: a ``cases(...)`` strategy (default ``cases(op)``);
    ``explicit``: cases judged first (``check`` passes one per input group);
    ``corpus``: a directory to save the shrunk finding in;
    ``isolate``: run the kernel in the supervised worker process (default ``settings.isolate``);
    ``database``: a directory, a Hypothesis ``ExampleDatabase``, or None for none: the findings
    kept there for this operator, kernel and mode are judged first, and the run's finding is
    kept there (``runner.findings``);
    ``hypothesis_settings``: the Hypothesis settings the search inherits the rest from (phases,
    health checks, verbosity, print_blob; default the loaded profile's, ``settings.default``).

    Statistics as in any Hypothesis test: ``event()`` per input group, status and uncertified
    reason; ``target()`` on the excess over the region (in its width and in output ulps).
    What Hypothesis reports (the falsifying example, the explain phase's notes) is kept in
    ``result.hypothesis_report``, not printed."""
    from .. import operators
    from ..config import settings as _settings
    from . import worker
    from .worker import recipe_of
    if isinstance(kernel, str) and (_settings.default.isolate if isolate is None else isolate):
        # a kernel named by a string runs in the worker: its zygote imports while this process
        # selects the backend and builds the run (the interpreter's probes alone take a second);
        # a zygote that cannot start is started again, and its failure reported, by the first call
        with contextlib.suppress(RuntimeError, OSError):
            worker.shared(backends.resolve(backend)).prestart()
    backend = backends.select(backend)
    device = backend.device
    op = operators.resolve(op)
    op.require_example()
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
    # "best": the finding as shrunk so far (the first confirmed one, then each smaller case that
    # fails the same way), what an interrupt while shrinking keeps
    state = {"phase": "search", "deadline": None if seconds is None else time.time() + seconds,
             "found": None, "shrink_deadline": None, "best": None}
    if progress is True:
        progress = Progress(f"{op.name}/{kspec}", deadline=state["deadline"])
    elif progress is False:
        progress = None

    def evaluate_case(case):
        if case in memo:
            return memo[case]
        out = run_case(op, kfn, case, times=times if state["phase"] == "search" else None, **kw)
        out.inputs = tuple(out.inputs)
        # a finding is kept whole (shrinking replays it and keeps the smallest), and a statistical-only
        # reject (the run reports it); of the rest only the status and the targets are read again
        memo[case] = out if out.is_finding or out.status == "statistical_only" else out.light()
        if len(memo) > 256:                 # keep only what the shrink replay may ask again
            memo.pop(next(iter(memo)))
        return out

    events = Counter()          # the search's events, kept for statistics Hypothesis may not report

    def note_event(text):
        event(text)
        events[text] += 1

    def body(case):
        check_interrupt()          # a safe point: an interrupt swallowed since the last case ends here
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
            raise _BudgetSpent(_engine_runner())
        phases = dict(times.seconds)
        try:
            out = evaluate_case(case)
            if not out.is_finding:
                findings.passed(case)
            result.record(out, case.group)
            note_event(f"group: {case.group}")
            note_event(f"status: {out.status}")
            for why in (out.uncertified_reasons or (("no finite bound",) if out.status == "uncertified" else ())):
                note_event(f"uncertified: {why}")
            leak = memory.add(out.rss_mb)
            if leak:
                result.warnings.append(leak)
                if progress:
                    progress.warn(leak)
            if out.status == "statistical_only" and len(result.statistical_only) < 20:
                result.statistical_only.append(out)
            if out.status in ("error", "nan", "timeout", "crash") and len(result.errors) < 20:
                result.errors.append(out)
            if progress:
                progress.update(result)
            if out.score is not None:
                target(out.score, label="excess/width")
            if out.excess_ulps is not None:
                target(out.excess_ulps, label="excess in ulps")
            if out.is_finding and stop_on_first:
                state["found"] = failure_key(out)
                state["best"] = out
                state["phase"] = "shrink"
                state["shrink_deadline"] = time.time() + shrink_seconds
                _found(out)
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
        if failure_key(out) == state["found"]:
            if state["best"] is None or _size(out) <= _size(state["best"]):
                state["best"] = out
            _found(out)

    parent = hypothesis_settings if hypothesis_settings is not None else settings.default
    phases = [p for p in parent.phases if p is not Phase.shrink or shrink]
    if isinstance(database, ExampleDatabase) or database is None:
        db = database
    else:
        db = DirectoryBasedExampleDatabase(str(database))
    findings = Findings(db, op.name, kspec, mode, getattr(op, "domain", None))
    # replayed as explicit examples when the phases reuse saved examples, as Hypothesis would
    replay, bad = findings.load() if Phase.reuse in phases else ([], [])
    result.warnings += bad
    if replay and Phase.explicit not in phases:
        phases.insert(0, Phase.explicit)
    # Health checks stay on, but two: too_slow - a case's data is a few integers, but each one
    # runs a kernel (the interpreter, a first compilation) and a verdict, seconds where Hypothesis
    # expects milliseconds, which is the work, not a slow strategy; and differing_executors, which
    # the same body run from several call sites (the CLI, a property test, the distributed
    # executor's units) would trip with nothing wrong.
    def make_test(examples, round_seed, first):
        s = settings(parent, max_examples=examples, deadline=None, derandomize=derandomize,
                     database=None, phases=phases,
                     suppress_health_check=sorted({*parent.suppress_health_check, HealthCheck.too_slow,
                                                   HealthCheck.differing_executors}, key=lambda h: h.value),
                     # one finding is all the run keeps (stop_on_first): a second bug is the next run's
                     report_multiple_bugs=False)
        test = given(strategy)(body)
        from hypothesis import example
        # the saved findings first, then the caller's explicit cases (the first round's)
        for c in reversed([*replay, *explicit] if first else []):
            test = example(c)(test)
        if round_seed is not None and not derandomize:
            test = hseed(round_seed)(test)    # inside settings(): outside it the database goes unused
        return s(test)

    body._hypothesis_internal_add_digest = f"numoracle:{op.name}:{kspec}:{mode}".encode()
    if seed is None and not derandomize:
        # a seed of our own: a run that Hypothesis seeds itself reports "You can reproduce this
        # failure by adding @seed(...)" on stdout whenever it stops by an exception (the time
        # budget), which is no failure and breaks --json's one document on stdout
        seed = random.getrandbits(64)
    max_examples = max(1, int(max_examples))
    # A run that the clock ends searches in rounds of ROUND_EXAMPLES: given one count of 10^9,
    # Hypothesis's first target() pass (after 200 cases) may last until the deadline, hill-climbing
    # from one case, so every later case shares its input group (docs/results/2026-12-06-fuzz-rounds.md)
    rounds = seconds is not None and max_examples > ROUND_EXAMPLES and not derandomize
    budget = max_examples

    found = None
    from hypothesis.reporting import with_reporter
    result.seed = seed
    clock["last"] = time.perf_counter()
    try:
        with with_reporter(lambda msg: result.hypothesis_report.append(str(msg))):
            k = 0
            while budget > 0:
                n = min(budget, ROUND_EXAMPLES) if rounds else budget
                before = result.totals.cases
                make_test(n, _round_seed(seed, k), k == 0)()
                budget -= n
                k += 1
                if result.totals.cases - before < n:
                    break         # Hypothesis ran out of distinct cases: another seed would repeat them
        result.exit_reason = "examples exhausted"
    except _Counterexample as exc:
        found = exc.outcome
        result.exit_reason = "first counterexample"
        # Hypothesis's report of it (the falsifying example, the explain phase's notes)
        result.hypothesis_report += _own_lines_dropped([str(n) for n in getattr(exc, "__notes__", ())])
    except _BudgetSpent as exc:
        result.exit_reason = "time budget"
        _note_budget_statistics(exc, seconds, result, events)
    except KeyboardInterrupt as exc:
        result.exit_reason = _interrupt_reason(exc)
        if state["best"] is not None:
            # interrupted while Hypothesis shrank a finding: it is kept as shrunk so far
            found = state["best"]
            result.warnings.append(f"the run was {result.exit_reason} while Hypothesis shrank the finding: it is "
                                   f"kept as shrunk so far ({result.shrink_evaluations} shrink evaluations), "
                                   f"not shrunk element by element")
    except BaseException as exc:       # Hypothesis wraps errors from explicit examples
        inner = getattr(exc, "exceptions", None)
        hit = [e for e in (inner or []) if isinstance(e, _Counterexample)]
        if not hit:
            raise
        found = hit[0].outcome
        result.exit_reason = "first counterexample"
    if pending_interrupt() is not None and result.exit_reason not in ("interrupted", "terminated"):
        # an interrupt that arrived after the last safe point (swallowed where it was raised)
        result.exit_reason = "terminated" if pending_interrupt() == signal.SIGTERM else "interrupted"
    interrupted = result.exit_reason in ("interrupted", "terminated")
    result.elapsed = time.time() - result.started
    if state["phase"] == "search" and clock["last"] is not None:
        times.add("draw", time.perf_counter() - clock["last"])     # Hypothesis after the last case
    elif state["shrink_deadline"] is not None:
        times.add("shrink", time.time() - state["shrink_deadline"] + shrink_seconds)
    result.memory = memory.summary()
    if found is not None:
        try:
            findings.save(found.case)
        except Exception as exc:  # noqa: BLE001 - the finding stays in the result and the corpus
            result.warnings.append(f"could not keep the finding in the example database: {type(exc).__name__}: {exc}")
        result.counterexample = found
        result.shrunk_from = found.case
        if shrink and not interrupted:
            t0 = time.time()
            if progress:
                progress.update(result, force=True, note="shrinking elements")
            cfg = found.case.config

            sofar = {"best": found, "n": 0}

            def evaluate(inputs):
                sofar["n"] += 1
                out = judge(op, kfn, inputs, found.params, cfg, case=found.case, **kw)
                # the shrinker keeps every case that fails the same way: the best so far
                if same_failure(out, found):
                    sofar["best"] = out
                return out
            try:
                roles = input_roles(op, found.case.fmt, found.inputs)
                best, used = minimize(evaluate, found, roles=roles, cols_multiple_of=op.domain.cols_multiple_of,
                                      min_rows=op.domain.rows[0], min_cols=op.domain.cols[0],
                                      seconds=shrink_seconds)
            except KeyboardInterrupt as exc:  # an interrupt while shrinking keeps what was found, shrunk so far
                best, used = sofar["best"], sofar["n"]
                result.exit_reason = _interrupt_reason(exc)
                result.warnings.append(f"the run was {result.exit_reason} while the finding was shrunk element by "
                                       f"element: it is kept as shrunk so far")
            except Exception as exc:  # noqa: BLE001 - a shrinker failure must not lose the finding
                best, used = found, 0
                result.warnings.append(f"shrinking stopped by {type(exc).__name__}: {exc}; the case is saved "
                                       f"as found")
            result.counterexample = best
            result.shrink_evaluations += used
            result.shrink_seconds = time.time() - t0
            times.add("shrink", result.shrink_seconds)
        if corpus is not None and result.counterexample.reference_refused:
            # no regression case of the kernel: the operator's own domain draws what its reference refuses
            result.save_error = ("not saved: the reference refused the operator's own drawn inputs, which the "
                                 "operator's domain or example builder has to fix (no case of the kernel to keep)")
        elif corpus is not None:
            from .. import corpus as C
            try:
                result.saved = str(C.save(corpus, op, kspec, result.counterexample, backend=backend.name, mode=mode,
                                          expect=expect, kernel=kfn, kernel_config=dict(found.case.config)))
            except Exception as exc:  # noqa: BLE001 - the finding stays in the result, with why it was not saved
                result.save_error = f"could not save the case to {corpus}: {type(exc).__name__}: {exc}"
            if result.saved and result.counterexample.verdict is not None:
                result.counterexample.verdict.replay = result.saved
    if result.exit_reason in ("interrupted", "terminated"):
        interrupt_reported()       # the result says so: its exit code is 130 / 143
    if progress:
        progress.update(result, force=True)
        progress.done()
    return result
