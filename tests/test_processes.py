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
