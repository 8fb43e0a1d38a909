"""One case: kernel on the backend (on clones of the inputs: several upstream
kernels work in place), reference, verdict.  A kernel that raises, returns
NaN where the reference is finite, or does not return within the per-case
limit is an outcome, never the end of the run (docs/design.md §9).

The per-case limit is a SIGALRM watchdog in the main thread: the Triton
interpreter runs the kernel as Python, so the alarm interrupts it between
bytecodes.  A GPU kernel that hangs blocks inside CUDA where no signal
reaches Python; for that, ``Isolated`` runs kernels in a worker process that
is killed at the limit.
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import signal
import threading
import time
import traceback
import warnings
from dataclasses import dataclass

import torch

from ..errors import InvalidArgument, NumoracleError
from .outcomes import Outcome, boundary_score, failure_class


class KernelTimeout(Exception):
    """The kernel did not return within the per-case limit."""


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
    signal.setitimer(signal.ITIMER_REAL, float(seconds))
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


def call_kernel(kernel, inputs, params, config, *, timeout=None, device="cpu", isolated=None):
    """The kernel's outputs on clones of ``inputs``; raises KernelTimeout."""
    if isolated is not None:
        return isolated.call(inputs, params, config, timeout)
    with watchdog(timeout):
        out = kernel(*[_clone(t) for t in inputs], **params, **config)
        _sync(device)
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


@dataclass
class Execution:
    """One kernel call: its outputs (as the kernel returned them), or why there are none."""
    status: str                  # "ok" | "error" | "timeout"
    outputs: object = None
    error: str = ""              # "ExceptionType: message"
    error_type: str = ""         # the exception's class name
    traceback: str = ""          # the end of its traceback
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return self.status == "ok"


def execute(kernel, inputs, params, config=(), *, timeout=None, device="cpu", isolated=None) -> Execution:
    """Run ``kernel`` on clones of ``inputs``: its outputs, or its failure as an outcome (a
    kernel's exception, its hang past ``timeout`` seconds); never raises for the kernel."""
    t0 = time.perf_counter()
    try:
        with warnings.catch_warnings():        # a broken kernel's overflow warnings on the interpreter
            warnings.simplefilter("ignore", RuntimeWarning)
            outs = call_kernel(kernel, inputs, params, dict(config), timeout=timeout, device=device,
                               isolated=isolated)
    except KernelTimeout as exc:
        return Execution("timeout", error=str(exc), seconds=time.perf_counter() - t0)
    except KeyboardInterrupt:
        raise
    except Exception as exc:  # the kernel's own failure is an outcome
        if _timed_out(exc):
            return Execution("timeout", error=f"no return within {timeout or 0:g} s",
                             seconds=time.perf_counter() - t0)
        text = f"{type(exc).__name__}: {exc}"
        from ..backends import NO_DRIVER, NO_DRIVER_HINT
        if NO_DRIVER in str(exc):
            text = f"{text[:300]} ({NO_DRIVER_HINT})"
        return Execution("error", error=text[:800], error_type=type(exc).__name__,
                         traceback=traceback.format_exc()[-1500:], seconds=time.perf_counter() - t0)
    return Execution("ok", outs, seconds=time.perf_counter() - t0)


def _has_special_reject(v) -> bool:
    return any(bool((o.special & o.rejected).any()) for o in v.outputs)


def _only_special_rejects(v) -> bool:
    return all(bool((o.rejected & ~o.special).sum() == 0) for o in v.outputs) and _has_special_reject(v)


def judge(op, kernel, inputs, params, config=(), *, backend="interpreter", mode="statistical", timeout=None,
          device="cpu", isolated=None, case=None, classify=True) -> Outcome:
    """Run ``kernel`` on ``inputs`` and judge its outputs against ``op.reference``."""
    from ..check import check
    t0 = time.perf_counter()
    ran = execute(kernel, inputs, params, config, timeout=timeout, device=device, isolated=isolated)
    if not ran.ok:
        return Outcome(ran.status, case, error=ran.error, seconds=time.perf_counter() - t0, inputs=inputs,
                       params=params)
    outs = ran.outputs
    try:
        v = check(op.reference, outs, inputs, params, mode=mode, backend=backend)
    except (InvalidArgument, NumoracleError) as exc:   # wrong number/shape/dtype of outputs
        return Outcome("error", case, error=f"outputs not judgeable: {exc}"[:500],
                       seconds=time.perf_counter() - t0, inputs=inputs, params=params, outputs=outs)
    status = v.status
    if status == "reject":
        if _only_special_rejects(v):
            status = "nan"
        elif mode == "statistical" and v.confirmation == "statistical-only":
            status = "statistical_only"
    out = Outcome(status, case, v, seconds=time.perf_counter() - t0, score=boundary_score(v),
                  inputs=inputs, params=params, outputs=outs)
    if status == "reject" and classify:
        out.failure_class = failure_class(v)
    if status == "uncertified":
        out.uncertified_reasons = tuple(v.certificate.reason_kinds()) or ("no finite bound",)
    return out


def run_case(op, kernel, case, **kw) -> Outcome:
    device = kw.get("device", "cpu")
    inputs, params = case.materialize(device, op)
    return judge(op, kernel, inputs, params, case.config, case=case, **kw)


# ---- subprocess isolation -------------------------------------------------------

def _worker(conn, op_name: str, spec: str, backend: str) -> None:  # pragma: no cover - runs in a child
    from .. import backends, operators
    from .kernels import resolve
    try:
        backend = backends.select(backend)
        op = operators.resolve(op_name)
        kernel, _ = resolve(op, spec)
        device = backend.device
    except Exception as exc:
        conn.send(("error", f"worker set-up failed: {type(exc).__name__}: {exc}"))
        return
    conn.send(("ready", None))
    while True:
        msg = conn.recv()
        if msg is None:
            return
        inputs, params, config = msg
        try:
            out = kernel(*[_clone(t) for t in inputs], **params, **config)
            _sync(device)
            if isinstance(out, (tuple, list)):
                out = tuple(o.cpu() if isinstance(o, torch.Tensor) else o for o in out)
            elif isinstance(out, torch.Tensor):
                out = out.cpu()
            conn.send(("ok", out))
        except Exception as exc:
            conn.send(("error", f"{type(exc).__name__}: {exc}"))


class Isolated:
    """Kernels run in a worker process (spawned, so CUDA starts clean); a call
    that exceeds its limit kills the worker, and the next call starts a new one.
    The kernel is named by its spec (registered name or module:function) so the
    worker imports it itself."""

    def __init__(self, op_name: str, spec: str, backend: str, device: str = "cpu"):
        self.op_name, self.spec, self.backend, self.device = op_name, spec, backend, device
        self._proc = None
        self._conn = None

    def _start(self):
        ctx = mp.get_context("spawn")
        parent, child = ctx.Pipe()
        self._proc = ctx.Process(target=_worker, args=(child, self.op_name, self.spec, self.backend), daemon=True)
        self._proc.start()
        self._conn = parent
        # set-up (imports, backend) is not the kernel's time: wait for it apart
        if not parent.poll(300):
            self.close(kill=True)
            raise RuntimeError("kernel worker process did not start within 300 s")
        kind, msg = parent.recv()
        if kind != "ready":
            self.close(kill=True)
            raise RuntimeError(msg)

    def call(self, inputs, params, config, timeout):
        if self._proc is None or not self._proc.is_alive():
            self._start()
        self._conn.send(([t.cpu() if isinstance(t, torch.Tensor) else t for t in inputs], params, config))
        # the first call also pays the worker's imports and backend set-up
        if not self._conn.poll(timeout if timeout else None):
            self.close(kill=True)
            raise KernelTimeout(f"no return within {timeout:g} s (worker process killed)")
        kind, out = self._conn.recv()
        if kind == "error":
            raise RuntimeError(out)
        dev = self.device
        if isinstance(out, tuple):
            return tuple(o.to(dev) if isinstance(o, torch.Tensor) else o for o in out)
        return out.to(dev) if isinstance(out, torch.Tensor) else out

    def close(self, kill: bool = False):
        if self._proc is None:
            return
        if kill:
            self._proc.kill()
        else:
            try:
                self._conn.send(None)
            except Exception:
                pass
        self._proc.join(timeout=5)
        self._proc = None
        self._conn = None
