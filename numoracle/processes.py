"""The processes numoracle starts (the kernel worker, the campaign's mutation child, the plan's
compile helper, executor workers) end with the process that started them, however it ends:
no kill -9 leaves one behind holding a GPU or a core (docs/design.md §9)."""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import threading
import time

PARENT_ENV = "NUMORACLE_PARENT_PID"


def child_environment(env: dict | None = None) -> dict:
    """``env`` (default: this process's) with this process's pid as the parent a child started
    with it must die with (``die_with_parent``)."""
    return {**(os.environ if env is None else env), PARENT_ENV: str(os.getpid())}


_SPAWNER: dict = {"thread": None, "requests": None}
_SPAWNER_LOCK = threading.Lock()


def popen(cmd: list, **kw) -> subprocess.Popen:
    """``subprocess.Popen(cmd, **kw)``, started from a thread that lasts as long as this
    process.  Linux sends the parent-death signal (``die_with_parent``) when the *thread* that
    started a child ends, not its process: a child started from a pool's or a helper's thread
    would die when that thread does."""
    if threading.current_thread() is threading.main_thread():
        return subprocess.Popen(cmd, **kw)
    with _SPAWNER_LOCK:
        if _SPAWNER["thread"] is None or not _SPAWNER["thread"].is_alive():
            requests: queue.SimpleQueue = queue.SimpleQueue()
            thread = threading.Thread(target=_spawn_forever, args=(requests,), name="numoracle-spawner", daemon=True)
            thread.start()
            _SPAWNER.update(thread=thread, requests=requests)
        requests = _SPAWNER["requests"]
    answer: queue.SimpleQueue = queue.SimpleQueue()
    requests.put((cmd, kw, answer))
    ok, value = answer.get()
    if not ok:
        raise value
    return value


def _spawn_forever(requests) -> None:
    while True:
        cmd, kw, answer = requests.get()
        try:
            answer.put((True, subprocess.Popen(cmd, **kw)))
        except BaseException as exc:  # noqa: BLE001 - raised in the thread that asked
            answer.put((False, exc))


def die_with_parent() -> None:
    """End this process when the one that started it ends, however it ends (kill -9 too):
    the kernel's death signal on Linux, else a thread watching the parent's pid.  A parent
    that died while this process was still starting (imports take seconds) is caught by the
    pid its starter put in the environment (``child_environment``).  Where the death signal is
    set no thread is started, so the kernel worker's zygote stays single-threaded when it forks
    (Python 3.12 warns of, and a thread holding a lock at a fork can deadlock, a forked child)."""
    parent = os.getppid()
    expected = os.environ.pop(PARENT_ENV, "")      # for this process only, not for its own children
    if expected.isdigit() and int(expected) != parent:
        os._exit(1)
    signalled = False
    if sys.platform.startswith("linux"):
        try:
            import ctypes
            libc = ctypes.CDLL(None, use_errno=True)
            PR_SET_PDEATHSIG = 1
            signalled = libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) == 0
        except Exception:  # noqa: BLE001 - the watching thread below ends it instead
            signalled = False
    if os.getppid() != parent:          # the parent died before the call above took effect
        os._exit(1)
    if signalled:
        return

    def watch():
        while True:
            time.sleep(1.0)
            if os.getppid() != parent:
                os._exit(1)
    threading.Thread(target=watch, name="numoracle-parent-watch", daemon=True).start()
