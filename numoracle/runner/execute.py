"""One case: kernel on the backend (on clones of the inputs: several upstream
kernels work in place), reference, verdict.  Whatever the kernel does - raise (any
exception, ``SystemExit`` and ``KeyboardInterrupt`` included), return NaN where the
reference is finite, hang past the per-case limit, crash its process - is that case's
outcome, never the end of the run (docs/design.md §9).

In this process the limit is a SIGALRM watchdog in the main thread: the Triton interpreter
runs the kernel as Python, so the alarm interrupts it between bytecodes, and it fires again
every second until the kernel lets it through (a retry loop that swallows it).  A hang in C
(a GPU kernel blocked in CUDA, a busy loop in an extension) is out of a signal's reach:
with ``settings.isolate`` the kernel runs in a supervised worker process instead
(``runner.worker``), killed at the limit.

Only a ``UserInterrupt`` - the user's Ctrl-C or a SIGTERM, which ``interrupts()`` turns
into one - ends a run; a ``KeyboardInterrupt`` the kernel raises itself is its failure.
The signal is recorded as *pending* before anything is raised, and it stays pending until
the ``interrupts()`` block ends: raised where Python would only print it ("Exception ignored
in: gc_callback", a finalizer), it is deferred, and every safe point (``check_interrupt``:
each case, before and after each kernel or worker call) raises it again, so that no
interrupt is swallowed and a run always stops within about a case.
"""

from __future__ import annotations

import contextlib
import signal
import threading
import time
import traceback
import warnings

import torch

from ..errors import InvalidArgument, NumoracleError, ReferenceRefused
from .inputs import inputs_kept
from .outcomes import Execution, Outcome, boundary_score, excess_ulps, failure_class, raised


class KernelTimeout(BaseException):
    """The kernel did not return within the per-case limit (a BaseException, so that a
    kernel's ``except Exception`` does not swallow it)."""


class UserInterrupt(KeyboardInterrupt):
    """The user's interrupt (SIGINT) or a termination request (SIGTERM) that arrived while
    numoracle ran; ``signum`` says which.  A run ends on it with its summary."""

    def __init__(self, signum: int = signal.SIGINT):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum

    @property
    def exit_code(self) -> int:
        return 128 + int(self.signum)           # 130 for SIGINT, 143 for SIGTERM


def _raise_interrupt(signum, frame):
    raise UserInterrupt(signum)


# the interrupt that arrived inside an ``interrupts()`` block: its signal number, and whether
# a run has reported it (its result says "interrupted" / "terminated")
_PENDING = {"signum": None, "reported": False, "depth": 0}


def _swallowed_here(frame) -> bool:
    """Whether an exception raised in ``frame`` would be printed as "Exception ignored" and
    dropped: inside a gc callback (Hypothesis installs one, junkdrawer.gc_cumulative_time) or
    a finalizer, anywhere up the stack."""
    import gc
    codes = {getattr(cb, "__code__", None) for cb in list(gc.callbacks)}
    codes.discard(None)
    f, n = frame, 0
    while f is not None and n < 200:
        if f.f_code in codes or f.f_code.co_name == "__del__":
            return True
        f, n = f.f_back, n + 1
    return False


def _on_interrupt(signum, frame):
    """The handler ``interrupts()`` installs: the interrupt is pending from now on, and raised
    here unless raising here would be swallowed (then the next safe point raises it)."""
    if _PENDING["signum"] is None:
        _PENDING["signum"] = signum
    if _swallowed_here(frame):
        return
    raise UserInterrupt(_PENDING["signum"])


def pending_interrupt() -> "int | None":
    """The signal number of the interrupt pending in this ``interrupts()`` block, or None."""
    return _PENDING["signum"]


def check_interrupt() -> None:
    """A safe point: raise the pending interrupt (main thread only).  Once an interrupt has
    arrived every safe point raises it, until the ``interrupts()`` block ends: the run is
    ending, and one swallowed raise must not let it go on."""
    signum = _PENDING["signum"]
    if signum is not None and threading.current_thread() is threading.main_thread():
        raise UserInterrupt(signum)


def interrupt_reported() -> None:
    """A run has ended on the pending interrupt and says so in its result (its exit code is
    130 / 143): the end of the ``interrupts()`` block need not raise it again."""
    _PENDING["reported"] = True


@contextlib.contextmanager
def interrupts(terminate: bool = True):
    """SIGINT (and SIGTERM, with ``terminate``) raise ``UserInterrupt`` inside the block, so
    that a run can tell them from a kernel's own KeyboardInterrupt and end with its summary.
    The interrupt stays pending (``check_interrupt`` raises it again) until the block ends; a
    block whose body returned while one was pending that no run reported raises it as it ends.
    Main thread only (elsewhere a no-op)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    sigs = [signal.SIGINT] + ([signal.SIGTERM] if terminate else [])
    old = {s: signal.signal(s, _on_interrupt) for s in sigs}
    outer = _PENDING["depth"] == 0
    if outer:
        _PENDING.update(signum=None, reported=False)
    _PENDING["depth"] += 1
    try:
        yield
        signum = _PENDING["signum"]
        if outer and signum is not None and not _PENDING["reported"]:
            raise UserInterrupt(signum)
    finally:
        _PENDING["depth"] -= 1
        for s, h in old.items():
            signal.signal(s, h)
        if outer:
            _PENDING.update(signum=None, reported=False)


@contextlib.contextmanager
def watchdog(seconds: float | None):
    usable = (seconds and seconds > 0 and hasattr(signal, "setitimer")
              and threading.current_thread() is threading.main_thread())
    if not usable:
        yield
        return

    def _alarm(signum, frame):
        raise KernelTimeout(f"no return within {seconds:g} s")
    old = signal.signal(signal.SIGALRM, _alarm)
    # re-armed every second: a kernel that catches the first one meets the next
    signal.setitimer(signal.ITIMER_REAL, float(seconds), 1.0)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def _clone(t):
    return t.clone() if isinstance(t, torch.Tensor) else t


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def call_kernel(kernel, inputs, params, config, *, timeout=None, device="cpu"):
    """The kernel's outputs on clones of ``inputs``, in this process; raises KernelTimeout
    (and UserInterrupt for the user's Ctrl-C), and InputWritten for a kernel that changed an
    input it does not return."""
    main = threading.current_thread() is threading.main_thread()
    own_sigint = main and signal.getsignal(signal.SIGINT) is signal.default_int_handler
    old = signal.signal(signal.SIGINT, _raise_interrupt) if own_sigint else None
    try:
        with watchdog(timeout):
            given = [_clone(t) for t in inputs]
            out = kernel(*given, **params, **config)
            _sync(device)
    finally:
        if own_sigint:
            signal.signal(signal.SIGINT, old)
    inputs_kept(inputs, given, out)
    return out


def _timed_out(exc: BaseException) -> bool:
    """Triton's interpreter wraps exceptions raised inside a kernel (our alarm
    included) in its own InterpreterError: look through the chain."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, KernelTimeout) or "KernelTimeout(" in str(exc):
            return True
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__
    return False


def _interrupted(exc: BaseException) -> "UserInterrupt | None":
    """The user's interrupt in ``exc``'s chain (a kernel may wrap it), or None."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, UserInterrupt):
            return exc
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__
    return None


def execute(kernel, inputs, params, config=(), *, timeout=None, device="cpu", isolate=None) -> Execution:
    """Run ``kernel`` on clones of ``inputs``: its outputs, or its failure as an outcome (an
    exception, a hang past ``timeout`` seconds (default ``settings.kernel_timeout``), a crash);
    never raises for the kernel, only for the user's interrupt.  ``isolate`` (default ``settings.isolate``): in the supervised
    worker process, when the kernel can be named there (``worker.recipe_of``)."""
    from ..config import settings
    check_interrupt()                   # a safe point: an interrupt swallowed elsewhere ends here
    current = settings.default
    isolate = current.isolate if isolate is None else isolate
    if timeout is None:
        timeout = current.kernel_timeout or None
    if isolate:
        from . import worker
        recipe = worker.recipe_of(kernel)
        if recipe is not None:
            from .. import backends
            backend = backends.selected() or backends.select("auto")
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)
                ran = worker.shared(backend).call(recipe, inputs, params, dict(config), timeout)
            check_interrupt()
            return ran
    t0 = time.perf_counter()
    from .launches import compiling, recorded
    try:
        # a broken kernel's overflow warnings are its values' business (the verdict judges them)
        with warnings.catch_warnings(), recorded() as launch, compiling() as compiled:
            warnings.simplefilter("ignore", RuntimeWarning)
            outs = call_kernel(kernel, inputs, params, dict(config), timeout=timeout, device=device)
    except UserInterrupt:
        raise
    except KernelTimeout as exc:
        check_interrupt()
        return Execution("timeout", error=str(exc), error_type="KernelTimeout", seconds=time.perf_counter() - t0)
    except BaseException as exc:  # noqa: BLE001 - the kernel's own failure (SystemExit, KeyboardInterrupt too)
        user = _interrupted(exc)
        if user is not None:
            raise UserInterrupt(user.signum) from None
        check_interrupt()               # a kernel that caught the user's interrupt does not keep the run going
        if _timed_out(exc):
            return Execution("timeout", error=f"no return within {timeout or 0:g} s", error_type="KernelTimeout",
                             seconds=time.perf_counter() - t0)
        exc, where = raised(exc)
        text = f"{type(exc).__name__}: {exc}"
        from ..backends import NO_DRIVER, NO_DRIVER_HINT
        if NO_DRIVER in str(exc):
            text = f"{text[:300]} ({NO_DRIVER_HINT})"
        return Execution("error", error=text[:800], error_type=type(exc).__name__,
                         traceback=traceback.format_exc()[-1500:], seconds=time.perf_counter() - t0,
                         origin=where)
    check_interrupt()
    from .worker import rss_mb
    return Execution("ok", outs, seconds=time.perf_counter() - t0, rss_mb=rss_mb(), launch=launch,
                     compile_seconds=compiled.seconds, compiles=compiled.count)


def _has_special_reject(v) -> bool:
    return any(bool((o.special & o.rejected).any()) for o in v.outputs)


def _only_special_rejects(v) -> bool:
    return all(bool((o.rejected & ~o.special).sum() == 0) for o in v.outputs) and _has_special_reject(v)


def judge(op, kernel, inputs, params, config=(), *, backend="interpreter", mode="statistical", timeout=None,
          device="cpu", isolate=None, case=None, classify=True, times=None) -> Outcome:
    """Run ``kernel`` on ``inputs`` and judge its outputs against ``op.reference``.  Every
    finding gets a failure class (``outcomes.finding_class``), what shrinking keeps.
    ``times`` (an ``outcomes.Breakdown``) is given the kernel's, the verdict's and the
    outcome's seconds."""
    from ..check import check
    t0 = time.perf_counter()
    ran = execute(kernel, inputs, params, config, timeout=timeout, device=device, isolate=isolate)
    t1 = time.perf_counter()
    if times is not None:
        times.add("worker_start", ran.start_seconds)
        times.add("compile", ran.compile_seconds)
        times.compiles += ran.compiles
        times.add("kernel", t1 - t0 - ran.start_seconds - ran.compile_seconds)
    if not ran.ok:
        out = Outcome(ran.status, case, error=ran.error, seconds=time.perf_counter() - t0, inputs=inputs,
                      params=params, traceback=ran.traceback, rss_mb=ran.rss_mb)
        out.failure_class = execution_class(ran)
        return out
    outs = ran.outputs
    # what the reference's no.launch() parameters read: the launches' own values, else the
    # kernel keywords the case gave
    launch = {**dict(config), **(ran.launch or {})}
    try:
        v = check(op.reference, outs, inputs, params, mode=mode, backend=backend, launch=launch)
    except ReferenceRefused as exc:       # the drawn inputs do not fit the reference: the domain's doing
        return Outcome("error", case, error=f"{exc} The operator's "
                       f"domain or example builder makes inputs its reference does not take: narrow "
                       f"no.Domain(rows=..., cols=..., cols_multiple_of=..., params=...) or the example builder "
                       f"to what the reference takes."[:1000],
                       seconds=time.perf_counter() - t0, inputs=inputs, params=params, outputs=outs,
                       failure_class=("error", "reference", "ReferenceRefused"), rss_mb=ran.rss_mb)
    except (InvalidArgument, NumoracleError) as exc:   # wrong number/shape/dtype/device of outputs
        return Outcome("error", case, error=f"outputs not judgeable: {exc}"[:800],
                       seconds=time.perf_counter() - t0, inputs=inputs, params=params, outputs=outs,
                       failure_class=("error", "outputs", type(exc).__name__), rss_mb=ran.rss_mb)
    except Exception as exc:  # noqa: BLE001 - judging failed on these outputs: the case's outcome
        return Outcome("error", case, error=f"judging the outputs failed: {type(exc).__name__}: {exc}"[:800],
                       seconds=time.perf_counter() - t0, inputs=inputs, params=params, outputs=outs,
                       traceback=traceback.format_exc()[-1500:],
                       failure_class=("error", "judging", type(exc).__name__), rss_mb=ran.rss_mb)
    from ..config import settings
    if settings.default.plan_check:
        # the kernel returned on these inputs, so its launcher can be captured on them; once per
        # (kernel, input signature, parameters, config) in a process
        from ..plan.assume import annotate
        annotate({mode: v}, op, kernel, inputs, params, kernel_kwargs=dict(config))
    t2 = time.perf_counter()
    if times is not None:
        times.add("verdict", t2 - t1)     # the plan check's annotation included
    status = v.status
    if status == "reject":
        if _only_special_rejects(v):
            status = "nan"
        elif mode == "statistical" and v.confirmation == "statistical-only":
            status = "statistical_only"
    out = Outcome(status, case, v, seconds=time.perf_counter() - t0, score=boundary_score(v),
                  excess_ulps=excess_ulps(v), inputs=inputs, params=params, outputs=outs, rss_mb=ran.rss_mb, launch=launch or None)
    if status in ("reject", "nan") and classify:
        out.failure_class = failure_class(v)
    if status == "uncertified":
        out.uncertified_reasons = tuple(v.certificate.reason_kinds()) or ("no finite bound",)
        from ..verdict.explain import uncertified_example
        try:
            out.uncertified_example = uncertified_example(v)
        except Exception:  # noqa: BLE001 - the example only adds to the reasons
            out.uncertified_example = None
    if times is not None:
        times.add("outcome", time.perf_counter() - t2)
    return out


def execution_class(ran: Execution) -> tuple:
    """The failure class of a kernel that did not return outputs: (status, what, where) -
    the exception's type and the line it was raised at, the signal or exit code."""
    if ran.status == "error":
        return ("error", ran.error_type, ran.origin)
    if ran.status == "crash":
        return ("crash", ran.error_type)
    return (ran.status,)


def run_case(op, kernel, case, times=None, **kw) -> Outcome:
    device = kw.get("device", "cpu")
    t0 = time.perf_counter()
    inputs, params = case.materialize(device, op)
    if times is not None:
        times.add("inputs", time.perf_counter() - t0)
    return judge(op, kernel, inputs, params, case.config, case=case, times=times, **kw)
