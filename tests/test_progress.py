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


def test_no_terminal_no_rewritten_line_but_a_study_logs_its_lines():
    pipe = io.StringIO()
    p = Progress("softmax/correct", stream=pipe, deadline=time.time() + 50)
    p.update(_result(), force=True)
    p.done()
    assert pipe.getvalue() == ""                    # fuzz's per-case line is for a terminal
    # a study's lines (one a kernel or stage) go to a log file too, so a background run shows
    # how far it got; --quiet silences them anywhere
    common.progress(SimpleNamespace(quiet=False), stream=pipe)("a line")
    assert pipe.getvalue() == "a line\n"
    tty = _Terminal()
    common.progress(SimpleNamespace(quiet=False), stream=tty)("a line")
    common.progress(SimpleNamespace(quiet=True), stream=tty)("quiet")
    common.progress(SimpleNamespace(quiet=True), stream=pipe)("quiet")
    assert tty.getvalue() == "a line\n" and pipe.getvalue() == "a line\n"


def test_a_campaign_in_the_background_logs_each_kernel(tmp_path):
    import subprocess
    import sys
    log = tmp_path / "log"
    with open(log, "w") as err:
        r = subprocess.run([sys.executable, "-m", "numoracle", "campaign", "--quick", "--ops", "softmax",
                            "--stages", "correct", "--backend", "interpreter", "--out", str(tmp_path / "c")],
                           stderr=err, stdout=subprocess.PIPE, text=True, timeout=600)
    assert r.returncode == 0, log.read_text()[-2000:]
    lines = [ln for ln in log.read_text().splitlines() if ln.startswith("[correct] softmax/")]
    assert len(lines) >= 2, log.read_text()[-2000:]
