"""numoracle's child processes end with their parent (docs/design.md §9), and on Linux do it
without a thread, so that the kernel worker's zygote forks from a single-threaded process."""

import os
import subprocess
import sys
import textwrap
import time

import pytest

CHILD = textwrap.dedent("""
    import sys, threading, time
    from numoracle.processes import die_with_parent
    die_with_parent()
    print(threading.active_count(), flush=True)
    time.sleep(60)
""")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the death signal is Linux's")
def test_a_child_dies_with_its_parent_and_starts_no_thread_on_linux(tmp_path):
    # a parent that starts the child and is then killed with SIGKILL; the child must follow it
    parent = textwrap.dedent(f"""
        import subprocess, sys, time
        from numoracle.processes import child_environment
        p = subprocess.Popen([sys.executable, "-c", {CHILD!r}], env=child_environment(),
                             stdout=open({str(tmp_path / 'out')!r}, "w"))
        print(p.pid, flush=True)
        time.sleep(60)
    """)
    par = subprocess.Popen([sys.executable, "-c", parent], stdout=subprocess.PIPE, text=True)
    child = int(par.stdout.readline())
    deadline = time.time() + 60
    while time.time() < deadline and not (tmp_path / "out").read_text().strip():
        time.sleep(0.1)
    assert (tmp_path / "out").read_text().split() == ["1"]        # only the main thread
    par.kill()
    par.wait()
    deadline = time.time() + 10
    while time.time() < deadline:
        try:
            os.kill(child, 0)
        except ProcessLookupError:
            break
        with open(f"/proc/{child}/stat") as f:
            if f.read().split()[2] == "Z":      # a zombie waiting for init: it has ended
                break
        time.sleep(0.1)
    else:
        os.kill(child, 9)
        pytest.fail("the child outlived its parent by 10 s")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the death signal is Linux's")
def test_a_worker_started_from_a_thread_outlives_the_thread():
    # Linux sends the death signal when the *thread* that started a child ends: a kernel worker
    # first used from a pool's thread must not die with that thread
    import threading

    import torch

    from numoracle import backends
    from numoracle.runner.worker import Worker
    wk = Worker(backends.select("interpreter"))
    x = torch.arange(4.0)
    try:
        first = []
        t = threading.Thread(target=lambda: first.append(wk.call(("import", "torch:clone"), [x], {}, {})))
        t.start()
        t.join()
        pid = wk.pid
        time.sleep(0.5)                 # the signal, were it sent, has arrived
        again = wk.call(("import", "torch:clone"), [x], {}, {})
        assert first[0].ok and again.ok and torch.equal(again.outputs, x)
        assert wk.starts == 1 and wk.pid == pid
    finally:
        wk.close(kill=True)


def test_popen_from_a_thread_reports_its_error_there():
    import threading

    from numoracle.processes import popen
    errors = []

    def start():
        try:
            popen(["/nonexistent/numoracle-test-binary"])
        except OSError as exc:
            errors.append(exc)
    t = threading.Thread(target=start)
    t.start()
    t.join()
    assert len(errors) == 1 and isinstance(errors[0], FileNotFoundError)
