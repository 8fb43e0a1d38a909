"""Fault injection: a run survives whatever its kernel does (tests/fixtures/misbehaving.py).

For each failure class - raise, NaN, wrong shape/dtype/device, not a tensor, a Python hang,
a hang in C, a retry loop that swallows the timeout, a segfault, os._exit, SystemExit,
KeyboardInterrupt, MemoryError, a leak - the run returns with its summary, the case's
outcome says what happened, and the finding is shrunk (keeping its failure class) and saved
as a corpus case whose replay reproduces it.  In the supervised worker process every class
is survivable; in-process, the ones that end or freeze a process (segfault, os._exit, a
hang in C) are not, which is why long runs isolate by default.
"""

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from numoracle.runner import fuzz
from numoracle.runner.replay import replay
from numoracle.strategies import Case, cases

ROOT = Path(__file__).resolve().parents[1]
MOD = "tests.fixtures.misbehaving:"
LLAMA = (("casting", "llama"), ("offset", 0.0))


@pytest.fixture(autouse=True)
def _repo_root(monkeypatch):
    monkeypatch.chdir(ROOT)


def _case(rows, cols, i=0):
    return Case("rms_norm", "bf16", rows, cols, "calibration", 0, (), LLAMA, (), i)


# kernel -> (status, the failure class's first fields); every kernel misbehaves on >= 2 rows
CLASSES = {
    "raises": ("error", ("error", "RuntimeError", "misbehaving.py:28")),
    "nan": ("nan", ("y", "non-finite")),
    "wrong_shape": ("error", ("error", "outputs")),
    "wrong_dtype": ("error", ("error", "outputs")),
    "wrong_device": ("error", ("error",)),
    "not_a_tensor": ("error", ("error", "outputs")),
    "python_hang": ("timeout", ("timeout",)),
    "c_hang": ("timeout", ("timeout",)),
    "swallows_timeout": ("timeout", ("timeout",)),
    "segfault": ("crash", ("crash", "SIGSEGV")),
    "exits": ("crash", ("crash", "exit 7")),
    "system_exit": ("error", ("error", "SystemExit")),
    "keyboard_interrupt": ("error", ("error", "KeyboardInterrupt")),
    "memory_error": ("error", ("error", "RuntimeError")),
    "python_memory_error": ("error", ("error", "MemoryError")),
}
# what ends or freezes the process it runs in: only the worker survives these
PROCESS_KILLERS = {"segfault", "exits", "c_hang"}
FAST = {("raises", False), ("nan", False), ("keyboard_interrupt", False), ("swallows_timeout", False),
        ("segfault", True), ("system_exit", True), ("wrong_shape", True)}
ROWS = [pytest.param(k, iso, id=f"{k}-{'worker' if iso else 'in-process'}",
                     marks=() if (k, iso) in FAST else pytest.mark.slow)
        for k in CLASSES for iso in (True, False) if iso or k not in PROCESS_KILLERS]


@pytest.mark.parametrize("kernel,isolate", ROWS)
def test_every_failure_class_is_an_outcome_shrunk_saved_and_replayable(kernel, isolate, tmp_path):
    status, klass = CLASSES[kernel]
    # the timeout is what a hang runs into; a kernel that does not hang gets one that a cold
    # first call on a loaded two-core machine does not reach (a fresh CI once timed out the
    # accepted first case of 'nan', 'wrong_shape' and 'segfault' at 1 s)
    res = fuzz("rms_norm", MOD + kernel, max_examples=2, seed=0, explicit=[_case(1, 8), _case(3, 12, 1)],
               timeout=1.0 if status == "timeout" else 60.0, isolate=isolate, corpus=tmp_path, shrink_seconds=20,
               strategy=cases("rms_norm", rows=(1, 3), cols=(4, 16), params={"casting": ("llama",), "offset": (0.0,)}))
    t = res.totals
    assert t.accept >= 1 and getattr(t, status) == 1, res.to_dict()["totals"]
    assert res.exit_reason == "first counterexample" and res.exit_code() == 1
    assert res.isolation == ("worker" if isolate else "in-process")
    ce = res.counterexample
    assert ce.status == status and ce.failure_class[:len(klass)] == klass, (ce.status, ce.failure_class)
    # shrunk: the trigger is two rows, and one column shows it
    shape = tuple(ce.inputs[0].shape)
    assert shape == (2, 1), shape
    assert res.saved and not res.save_error
    r = replay(res.saved, isolate=True, timeout=2.0)
    assert r["status"] == "reproduced", r


def test_an_unwritable_corpus_keeps_the_finding_and_says_why(tmp_path):
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("a file where the corpus should be")
    res = fuzz("rms_norm", MOD + "raises", max_examples=1, seed=0, explicit=[_case(2, 4)], timeout=5.0,
               corpus=blocker, shrink=False, strategy=cases("rms_norm", rows=1, cols=(4, 4)))
    assert res.counterexample is not None and res.saved is None
    assert "could not save the case to" in res.save_error and str(blocker) in res.save_error
    assert "unsupported shape" in res.counterexample.explain()


def test_a_leaking_kernel_is_reported():
    res = fuzz("rms_norm", MOD + "leaks", max_examples=40, seed=0, isolate=False,
               strategy=cases("rms_norm", rows=1, cols=(4, 8), params={"casting": ("llama",), "offset": (0.0,)}))
    assert res.totals.accept >= 25
    assert res.memory["growth_mb"] >= 4 * 20 and res.memory["leak_warning"]
    assert any("memory grows with every case" in w for w in res.warnings)


def test_a_correct_kernel_does_not_look_like_a_leak():
    res = fuzz("rms_norm", "correct", max_examples=40, seed=0, isolate=True,
               strategy=cases("rms_norm", rows=1, cols=(4, 8), params={"casting": ("llama",), "offset": (0.0,)}))
    assert res.totals.accept >= 25 and res.isolation == "worker"
    assert not res.memory["leak_warning"] and not res.warnings


def test_warm_up_growth_is_not_a_leak_and_steady_growth_is():
    from numoracle.runner.outcomes import MemoryWatch

    def warned(samples):
        w = MemoryWatch()
        return any(w.add(mb) for mb in samples)
    # a run's first cases: one large step (caches, a compilation), then a page or two a case
    warm_up = [334.0, 338.4, 339.3, 339.4, 339.5, 373.1] + [373.1 + 0.05 * k for k in range(1, 60)]
    assert not warned(warm_up)
    # a kernel keeping 2 MiB a case
    assert warned([300.0 + 2.0 * k for k in range(40)])
    # the same growth in one step does not grow "with every case"
    assert not warned([300.0] * 20 + [380.0] * 20)


def test_a_run_keeps_no_verdicts_of_cases_that_found_nothing():
    # an in-process run is watched in its own process, where every verdict it kept (float64
    # regions of every output element, ~35x a bf16 case's inputs) would look like a leak
    import gc

    import torch

    from numoracle.verdict.verdict import Verdict

    def verdicts():
        return sum(isinstance(o, Verdict) for o in gc.get_objects())
    alive = []
    # verdicts that earlier tests of this process still hold are not the run's (pytest -n 0)
    gc.collect()
    held = verdicts()

    def rms_norm_torch(x, w, *, eps=1e-6, offset=0.0, casting="llama", **_):
        alive.append(verdicts() - held)
        xf = x.float()
        rstd = torch.rsqrt((xf * xf).mean(-1) + eps)
        return (xf * rstd[..., None]).to(x.dtype) * (w + offset), rstd
    res = fuzz("rms_norm", rms_norm_torch, max_examples=30, seed=0, isolate=False, shrink=False,
               strategy=cases("rms_norm", rows=(1, 4), cols=(8, 64), params={"casting": ("llama",), "offset": (0.0,)}))
    assert res.totals.accept >= 20 and not res.found
    assert len(alive) >= 20 and max(alive) <= 3, alive


def test_a_kernel_the_worker_cannot_import_runs_in_process_and_says_so():
    from numoracle.operators import get

    def local_kernel(x, w, **p):                  # a closure: no worker process can import it
        return get("rms_norm").kernels["correct"](x, w, **p)
    res = fuzz("rms_norm", local_kernel, max_examples=2, seed=0, isolate=True,
               strategy=cases("rms_norm", rows=1, cols=(4, 8)))
    assert res.isolation.startswith("in-process:") and res.totals.accept >= 1


# ---- the command line: interrupts, exit codes, no orphans ------------------------------------

def _processes_marked(mark: str) -> list:
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                if mark.encode() in f.read():
                    found.append(int(pid))
        except OSError:
            continue
    return found


def _start_fuzz(kernel: str, mark: str, *extra):
    env = dict(os.environ, NUMORACLE_TEST_MARK=mark, PYTHONPATH=str(ROOT))
    cmd = [sys.executable, "-m", "numoracle", "fuzz", "rms_norm", "--kernel", MOD + kernel, "--seconds", "120",
           "--timeout", "100", "--no-save", "--database", "none", "--max-rows", "1", "--max-cols", "8", *extra]
    return subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _wait_for_worker(p, mark, seconds=120.0):
    end = time.time() + seconds
    while time.time() < end:
        if len(_processes_marked(mark)) >= 3 or p.poll() is not None:   # the run, its zygote, a child
            return
        time.sleep(0.2)


def _no_orphans(mark, seconds=10.0):
    end = time.time() + seconds
    while time.time() < end and _processes_marked(mark):
        time.sleep(0.2)
    return _processes_marked(mark)


# each is a fuzz run in a subprocess with its zygote: SIGINT in the default tier, SIGTERM slow
@pytest.mark.parametrize("sig,code,reason", [(signal.SIGINT, 130, "interrupted"),
                                             pytest.param(signal.SIGTERM, 143, "terminated", marks=pytest.mark.slow)])
def test_sigint_and_sigterm_end_a_run_with_its_summary_and_exit_code(sig, code, reason):
    mark = uuid.uuid4().hex
    p = _start_fuzz("python_hang", mark, "--examples", "1000", "--rows", "2")   # every case hangs
    _wait_for_worker(p, mark)
    time.sleep(1.0)
    p.send_signal(sig)
    out, err = p.communicate(timeout=60)
    assert p.returncode == code, (out, err)
    assert f"- {reason}" in out and f"run {reason}: exit code {code}" in out, out
    assert "Traceback" not in err, err
    assert _no_orphans(mark) == []


def test_kill_9_of_the_run_leaves_no_worker_behind():
    mark = uuid.uuid4().hex
    p = _start_fuzz("python_hang", mark, "--examples", "1000", "--rows", "2")
    _wait_for_worker(p, mark)
    assert len(_processes_marked(mark)) >= 2          # the run and its worker processes
    p.kill()
    p.communicate(timeout=30)
    assert _no_orphans(mark) == []


# ---- an interrupt keeps the finding, and is never swallowed (issue #23) ----------------------

SMALL = dict(strategy=cases("rms_norm", rows=(1, 3), cols=(4, 16), params={"casting": ("llama",), "offset": (0.0,)}))


def test_sigterm_while_hypothesis_shrinks_keeps_and_saves_the_finding(tmp_path):
    # the kernel sends SIGTERM to this process the first time the engine's Hypothesis shrink
    # phase calls it: the run ends terminated (143) with the finding as shrunk so far, saved
    from numoracle.runner.execute import interrupts
    from tests.fixtures import interrupting
    interrupting.SENT.clear()
    with interrupts():
        res = fuzz("rms_norm", "tests.fixtures.interrupting:terminates_while_hypothesis_shrinks", isolate=False,
                   seed=0, max_examples=50, timeout=60.0, corpus=tmp_path, **SMALL)
    assert interrupting.SENT, "the kernel was never called by Hypothesis's shrink phase"
    assert res.exit_reason == "terminated" and res.exit_code() == 143
    ce = res.counterexample
    assert ce is not None and ce.status == "error" and ce.failure_class[:2] == ("error", "RuntimeError")
    assert any("while Hypothesis shrank the finding" in w for w in res.warnings), res.warnings
    assert res.saved and not res.save_error
    r = replay(res.saved, isolate=True, timeout=30.0)
    assert r["status"] == "reproduced", r


@pytest.mark.slow
def test_sigterm_to_the_command_while_hypothesis_shrinks_saves_the_finding(tmp_path):
    # the command line with its worker process: the signal lands while the run waits for the
    # kernel of a shrink candidate (each failing call takes 0.5 s; Hypothesis's shrink makes ~20)
    calls = tmp_path / "calls.txt"
    corpus = tmp_path / "corpus"
    env = dict(os.environ, PYTHONPATH=str(ROOT), NUMORACLE_TEST_CALLS=str(calls), NUMORACLE_TEST_SLEEP="0.5")
    p = subprocess.Popen([sys.executable, "-m", "numoracle", "fuzz", "rms_norm", "--kernel",
                          "tests.fixtures.interrupting:slow_raises", "--seconds", "120", "--seed", "1",
                          "--corpus", str(corpus), "--database", "none", "--max-rows", "3", "--max-cols", "16",
                          "--quiet"], cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    end = time.time() + 300
    # the first failing call is the finding; two more are Hypothesis's shrink candidates
    while p.poll() is None and time.time() < end and (not calls.exists() or len(calls.read_text().splitlines()) < 3):
        time.sleep(0.05)
    assert p.poll() is None, p.communicate()
    p.send_signal(signal.SIGTERM)
    out, err = p.communicate(timeout=120)
    assert p.returncode == 143, (out, err)
    assert "Traceback" not in err, err
    assert "Finding (error)" in out and "while Hypothesis shrank the finding" in out, out
    assert "run terminated: exit code 143" in out, out
    saved = [line.split("Saved: ", 1)[1].strip() for line in out.splitlines() if line.startswith("Saved: ")]
    assert saved, out
    r = replay(saved[0], isolate=True, timeout=30.0)
    assert r["status"] == "reproduced", r


def test_a_sigterm_raised_inside_a_gc_callback_is_not_swallowed():
    # /tmp/audit/23/swallowed_sigterm.py: the handler ran inside a gc callback (Hypothesis installs
    # one), where what it raised was "ignored", and the run went on to its full budget
    import gc
    from numoracle.runner.execute import UserInterrupt, check_interrupt, interrupts
    ignored, after_safe_point = [], []
    hook, sys.unraisablehook = sys.unraisablehook, lambda u: ignored.append(u)

    def cb(phase, info):
        if phase == "start" and not ignored and not after_safe_point:
            os.kill(os.getpid(), signal.SIGTERM)
            sum(range(1000))                       # a few bytecodes: the handler runs here
    gc.callbacks.append(cb)
    try:
        with pytest.raises(UserInterrupt) as e:
            with interrupts():
                gc.collect()
                gc.callbacks.remove(cb)
                check_interrupt()                  # the next safe point raises it
                after_safe_point.append(True)
    finally:
        if cb in gc.callbacks:
            gc.callbacks.remove(cb)
        sys.unraisablehook = hook
    assert e.value.signum == signal.SIGTERM and e.value.exit_code == 143
    assert not after_safe_point
    assert not [u for u in ignored if isinstance(u.exc_value, KeyboardInterrupt)], ignored


def test_an_interrupt_swallowed_after_the_last_safe_point_still_ends_the_block():
    # raised in a weakref callback (which the handler does not recognise), the interrupt is
    # "ignored" there; no safe point follows, and the block's end raises it
    import weakref
    from numoracle.runner.execute import UserInterrupt, interrupts
    ignored, after = [], []
    hook, sys.unraisablehook = sys.unraisablehook, lambda u: ignored.append(u)

    class Thing:
        pass

    def cb(ref):
        os.kill(os.getpid(), signal.SIGINT)
        sum(range(1000))
    try:
        with pytest.raises(UserInterrupt) as e:
            with interrupts():
                t = Thing()
                r = weakref.ref(t, cb)
                del t                                # the callback runs, and the interrupt in it is lost
                after.append(r)
    finally:
        sys.unraisablehook = hook
    assert after, "the interrupt was not swallowed: nothing tested"
    assert [u for u in ignored if isinstance(u.exc_value, KeyboardInterrupt)]
    assert e.value.signum == signal.SIGINT and e.value.exit_code == 130


def test_a_sigterm_in_hypothesis_gc_callback_stops_a_fuzz_run_within_a_case():
    # a fuzz run of a correct kernel with a budget of 60 s: SIGTERM sent (once) from inside a gc
    # callback 2 s in - the audit's 5 of 41 SIGTERMs that ran a run to its full budget
    import gc
    from numoracle.runner.execute import interrupts
    ignored, sent = [], []
    hook, sys.unraisablehook = sys.unraisablehook, lambda u: ignored.append(u)
    start = time.monotonic()

    def cb(phase, info):
        if phase == "start" and not sent and time.monotonic() > start + 2.0:
            sent.append(time.monotonic())
            os.kill(os.getpid(), signal.SIGTERM)
            sum(range(1000))
    gc.callbacks.append(cb)
    try:
        with interrupts():
            res = fuzz("rms_norm", "correct", isolate=False, seed=0, max_examples=10**6, seconds=60.0, **SMALL)
    finally:
        if cb in gc.callbacks:
            gc.callbacks.remove(cb)
        sys.unraisablehook = hook
    assert sent
    assert res.exit_reason == "terminated" and res.exit_code() == 143, res.exit_reason
    assert time.monotonic() - sent[0] < 10.0, time.monotonic() - sent[0]
    assert res.totals.cases >= 1
    assert not [u for u in ignored if isinstance(u.exc_value, KeyboardInterrupt)], ignored
