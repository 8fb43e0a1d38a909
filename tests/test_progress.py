"""Progress for a person on a terminal, silence elsewhere (issue #24)."""

import io
import time
from types import SimpleNamespace

from numoracle.cli import common
from numoracle.runner import Progress
from numoracle.runner.outcomes import RunResult


class _Terminal(io.StringIO):
    def isatty(self):
        return True


def _result():
    r = RunResult("softmax", "correct", "interpreter", "statistical")
    r.started = time.time() - 10
    for status in ["accept"] * 7 + ["reject", "uncertified", "uncertified"]:
        r.groups.setdefault("calibration", type(r.totals)()).add(status)
    return r


def test_a_terminal_gets_cases_rejects_uncertified_rate_and_time_left():
    tty = _Terminal()
    p = Progress("softmax/correct", stream=tty, deadline=time.time() + 50)
    p.update(_result(), force=True)
    p.done()
    text = tty.getvalue()
    assert text.startswith("\r\x1b[2K[softmax/correct] 10 cases, 1 rejects, 2 uncertified, 1.0 cases/s, ")
    assert text.rstrip("\n").endswith("s left") and text.endswith("\n")
    assert "49s left" in text or "50s left" in text


def test_no_terminal_no_progress():
    pipe = io.StringIO()
    p = Progress("softmax/correct", stream=pipe, deadline=time.time() + 50)
    p.update(_result(), force=True)
    p.done()
    assert pipe.getvalue() == ""
    common.progress(SimpleNamespace(quiet=False), stream=pipe)("a line")
    assert pipe.getvalue() == ""
    tty = _Terminal()
    common.progress(SimpleNamespace(quiet=False), stream=tty)("a line")
    common.progress(SimpleNamespace(quiet=True), stream=tty)("quiet")
    assert tty.getvalue() == "a line\n"
