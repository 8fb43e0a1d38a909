"""--json: every command that takes it prints exactly one JSON document on stdout - with and
without a seed, with and without a finding, and for a usage error - whatever else prints
(Hypothesis, kernels, progress) going to stderr (issue #24)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from numoracle.cli import COMMANDS, build_parser, main

ROOT = Path(__file__).resolve().parents[1]
BAD = "tests.fixtures.user_kernels:rms_norm_truncating_store"
RMS = ["--dtype", "bf16", "--param", "casting=llama", "--param", "offset=0.0", "--max-rows", "2", "--max-cols", "16"]
SMALL = ["--max-rows", "2", "--max-cols", "32", "--groups", "calibration"]


def _one_document(capsys, argv, codes=(0,)):
    rc = main(argv)
    out = capsys.readouterr().out
    doc = json.loads(out)           # the whole of stdout: one document, nothing before or after it
    assert rc in codes, (rc, out[:2000])
    return doc


def test_every_command_with_json_is_covered():
    takes = {c for c in COMMANDS
             if any("--json" in a.option_strings
                    for a in build_parser(only=c)._subparsers._group_actions[0].choices[c]._actions)}
    assert takes == COVERED, "a command takes --json but no test pipes it through json.loads"


COVERED = {"ops", "check", "fuzz", "replay", "mutate", "stress-tolerances", "campaign", "report", "calibrate", "plan"}


def test_ops(capsys):
    assert any(r["name"] == "rms_norm" for r in _one_document(capsys, ["ops", "--json"]))


@pytest.mark.parametrize("seed", [[], ["--seed", "5"]])
def test_check_without_a_finding(capsys, seed):
    doc = _one_document(capsys, ["check", "softmax", "--examples", "2", *SMALL, "--no-save", "--json", *seed])
    assert doc["counterexample"] is None


def test_check_and_replay_with_a_finding(capsys, tmp_path):
    doc = _one_document(capsys, ["check", "rms_norm", "--kernel", BAD, *RMS, "--corpus", str(tmp_path), "--json"],
                        codes=(1,))
    assert doc["counterexample"]["verdict"]["worst"]["output"] == "y" and doc["saved"]
    rep = _one_document(capsys, ["replay", doc["saved"], "--no-isolate", "--json"], codes=(1,))
    assert rep[0]["status"] == "reproduced" and rep[0]["outputs"] == ["y", "rstd"]
    rep = _one_document(capsys, ["replay", doc["saved"], "--no-isolate", "--kernel",
                                 "tests.fixtures.user_kernels:rms_norm_ok", "--json"])
    assert rep[0]["status"] == "ok"


@pytest.mark.parametrize("seed", [[], ["--seed", "1"]])
def test_fuzz_stopped_by_its_time_budget(capsys, seed):
    doc = _one_document(capsys, ["fuzz", "swiglu", "--seconds", "1", *SMALL, "--database", "none", "--no-isolate",
                                 "--json", *seed])
    assert doc["exit_reason"] == "time budget" and (doc["seed"] == 1 if seed else isinstance(doc["seed"], int))


@pytest.mark.parametrize("seed", [[], ["--seed", "3"]])
def test_fuzz_with_a_finding(capsys, tmp_path, seed):
    doc = _one_document(capsys, ["fuzz", "rms_norm", "--kernel", BAD, *RMS, "--seconds", "60", "--no-isolate",
                                 "--database", str(tmp_path / "db"), "--corpus", str(tmp_path / "c"), "--json", *seed],
                        codes=(1,))
    assert doc["exit_reason"] == "first counterexample" and doc["saved"]


@pytest.mark.slow
def test_fuzz_on_local_workers_sums_its_searches(capsys):
    """``--workers 2``: two processes, one search per input group (``--units 1``), every case
    counted once; the searches' own seconds sum over the units, so the run's wall time (process
    starts included) can be told apart from them."""
    doc = _one_document(capsys, ["fuzz", "swiglu", "--workers", "2", "--units", "1", "--examples", "2",
                                 "--max-rows", "2", "--max-cols", "32", "--groups", "calibration,uniform",
                                 "--no-isolate", "--no-save", "--json"])
    assert doc["executor"]["executor"] == "local" and doc["executor"]["workers"] == 2
    assert doc["units"] == doc["units_done"] == 2 and doc["totals"]["cases"] == 4
    assert sorted(doc["groups"]) == ["calibration", "uniform"]
    assert 0 < doc["unit_seconds"] <= 2 * doc["seconds"]
    # the breakdown is the units' summed: every case, no more time than the searches'
    b = doc["breakdown"]
    assert b["cases"] == 4 and 0 < sum(b["seconds"].values()) <= doc["unit_seconds"] + 1e-3
    assert b["seconds"]["kernel"] > 0 and b["seconds"]["verdict"] > 0


def test_fuzz_on_workers_passes_the_operator_spec_and_the_fixed_parameters(monkeypatch):
    """The units of ``fuzz --workers`` find a user's operator by its spec (by its name a worker
    found none: 'unknown operator') and draw ``--param``'s values (they were dropped)."""
    from numoracle.cli import main
    from numoracle.studies.executors import fuzz as EF
    seen = {}

    def fake_run_fuzz(units, **kw):
        seen["units"] = list(units)
        return {"units": 0, "units_done": 0, "groups": {}, "totals": dict.fromkeys(EF.STATS, 0),
                "exit_reasons": {}, "counterexamples": [], "saved": [], "seconds": 0.0, "cases_per_second": 0.0,
                "unit_seconds": 0.0, "breakdown": {}, "executor": {"executor": "local", "workers": 2},
                "found": False}

    monkeypatch.setattr(EF, "run_fuzz", fake_run_fuzz)
    monkeypatch.syspath_prepend(os.path.join(os.path.dirname(__file__), "user_project"))
    assert main(["fuzz", "tests_user_op.ops:my_op", "--workers", "2", "--units", "1", "--examples", "1",
                 "--groups", "calibration", "--param", "offset=1.0", "--json"]) == 0
    (u,) = seen["units"]
    assert u.op == "tests_user_op.ops:my_op" and dict(u.settings)["params"] == (("offset", (1.0,)),)
    assert main(["fuzz", "rms_norm", "--workers", "2", "--units", "1", "--examples", "1",
                 "--groups", "calibration", "--json"]) == 0
    assert seen["units"][0].op == "rms_norm" and dict(seen["units"][0].settings)["params"] is None


def test_timed_searches_on_workers_say_what_the_run_takes(monkeypatch, capsys):
    """With --workers, --seconds is each search's budget: the command says how many searches
    there are and about how long they take, before it starts them (nothing with --quiet)."""
    import numoracle.studies.executors.fuzz as EF
    from numoracle.cli import main

    def fake_run_fuzz(units, **kw):
        return {"units": len(units), "units_done": len(units), "groups": {}, "totals": dict.fromkeys(EF.STATS, 0),
                "exit_reasons": {}, "counterexamples": [], "saved": [], "seconds": 0.0, "cases_per_second": 0.0,
                "unit_seconds": 0.0, "breakdown": {}, "executor": {"executor": "local", "workers": 2},
                "found": False}

    monkeypatch.setattr(EF, "run_fuzz", fake_run_fuzz)
    argv = ["fuzz", "rms_norm", "--workers", "2", "--units", "3", "--seconds", "5", "--groups", "calibration,uniform"]
    assert main(argv) == 0
    assert capsys.readouterr().err.splitlines()[0] == (
        "[fuzz] 6 searches (2 input group(s) x 3 unit(s)), 5 s each (--seconds is each search's budget), "
        "on 2 worker(s): about 15 s of searches, and the workers' start")
    assert main(argv + ["--quiet"]) == 0
    assert "searches" not in capsys.readouterr().err


def test_fuzz_units_refuse_an_operator_no_worker_could_import():
    """An operator made in a function (no spec) or in ``__main__`` (a worker's ``__main__`` is
    another module) cannot be found by a worker process: refused with how to fix it."""
    import numoracle as no
    from numoracle.errors import InvalidArgument
    from numoracle.operators import get
    from numoracle.studies.executors.fuzz import fuzz_units
    op = no.Operator("made_here", get("softmax").reference, {"correct": "nowhere:kernel"})
    assert op.spec is None
    with pytest.raises(InvalidArgument, match="define it at the top level of a module"):
        fuzz_units(op, "correct", "interpreter", groups=["calibration"])
    op._spec = "__main__:op"
    with pytest.raises(InvalidArgument, match="define it at the top level of a module"):
        fuzz_units(op, "correct", "interpreter", groups=["calibration"])


def test_a_usage_error_is_the_document(capsys):
    doc = _one_document(capsys, ["check", "no_such_op", "--json"], codes=(2,))
    assert doc["exit_code"] == 2 and "unknown operator" in doc["error"]


@pytest.mark.parametrize("argv, message", [
    (["fuzz", "softmax", "--seconds", "abc", "--json"], "argument --seconds: 'abc' is not a number of seconds"),
    (["check", "--json"], "the following arguments are required: OP"),
    (["check", "softmax", "--mode", "bogus", "--json"], "argument --mode: invalid choice: 'bogus'"),
    (["--json"], "the following arguments are required: COMMAND"),
])
def test_an_argparse_error_is_the_document_too(capsys, argv, message):
    """A bad or missing argument (argparse's error) with --json: the same one-document error as
    numoracle's own input errors, argparse's message in it, exit 2, the usage text on stderr."""
    rc = main(argv)
    cap = capsys.readouterr()
    doc = json.loads(cap.out)
    assert rc == 2 and doc["exit_code"] == 2 and doc["error"].startswith(message), doc
    assert set(doc) <= {"error", "exit_code", "command"}
    assert "usage: numoracle" in cap.err and message in cap.err
    # without --json, stdout stays empty
    assert main([a for a in argv if a != "--json"] or ["fuzz", "softmax", "--seconds", "abc"]) == 2
    assert capsys.readouterr().out == ""


def test_plan_skeleton_to_stdout_with_json_is_in_the_document(capsys, tmp_path):
    """`plan OP --skeleton - --json`: the skeleton is the document's, not loose text on stdout;
    a file path still writes the file, and the document says where."""
    doc = _one_document(capsys, ["plan", "softmax", "--skeleton", "-", "--json"])
    assert doc["operator"] == "softmax" and doc["path"] is None
    assert doc["skeleton"].startswith('"""Reference skeleton for softmax') and "def softmax_plan(" in doc["skeleton"]
    assert doc["lines"] == doc["skeleton"].count("\n")
    path = tmp_path / "sk.py"
    doc2 = _one_document(capsys, ["plan", "softmax", "--skeleton", str(path), "--json"])
    assert doc2["skeleton"] is None and doc2["path"] == str(path) and path.read_text() == doc["skeleton"]


NOISY_KERNEL = '''
import ctypes
import os

import torch


def swiglu(a, b):
    os.write(1, b"noise on fd 1\\n")                 # what a C library or tl.device_print does
    try:
        ctypes.CDLL(None).printf(b"noise from printf\\n")   # buffered by the C library
    except Exception:
        pass
    print("noise from print")
    return torch.nn.functional.silu(a.float()).to(b.dtype) * b
'''
NOISY_ARGS = ["swiglu", "--dtype", "bf16", "--max-rows", "2", "--max-cols", "16", "--groups", "calibration"]


@pytest.mark.parametrize("command", [["check", *NOISY_ARGS, "--examples", "1", "--no-save"],
                                     ["fuzz", *NOISY_ARGS, "--seconds", "1", "--no-isolate", "--database", "none",
                                      "--no-save"]])
def test_a_kernel_writing_to_fd_1_does_not_break_the_document(tmp_path, command):
    """A kernel run in-process that writes straight to file descriptor 1 (check runs kernels
    in-process by default; fuzz --no-isolate too): its output goes to stderr, stdout is the one
    document, as a shell pipes it."""
    (tmp_path / "noisy_fd1_kernel.py").write_text(NOISY_KERNEL)
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = str(ROOT)
    res = subprocess.run([sys.executable, "-m", "numoracle", command[0], command[1], "--kernel",
                          "noisy_fd1_kernel:swiglu", *command[2:], "--json"], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=600)
    assert res.returncode in (0, 1), res.stderr[-3000:]
    doc = json.loads(res.stdout)
    assert doc["kernel"] == "noisy_fd1_kernel:swiglu" and doc["totals"]["cases"] >= 1
    assert "noise on fd 1" in res.stderr and "noise from print" in res.stderr
    assert "noise from printf" in res.stderr


def test_fd_1_is_restored_after_a_json_command(capfd, tmp_path, monkeypatch):
    """In-process: while the --json command runs, fd 1 is stderr; after it (a finding or an input
    error alike) fd 1 is stdout again."""
    (tmp_path / "noisy_fd1_kernel_inproc.py").write_text(NOISY_KERNEL)
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    rc = main(["check", *NOISY_ARGS, "--kernel", "noisy_fd1_kernel_inproc:swiglu", "--examples", "1", "--no-save",
               "--json"])
    os.write(1, b"after the command\n")
    cap = capfd.readouterr()
    assert rc in (0, 1)
    head, _, tail = cap.out.rpartition("}\n")
    assert json.loads(head + "}")["totals"]["cases"] >= 1 and tail == "after the command\n", cap.out[-500:]
    assert "noise on fd 1" in cap.err and "noise on fd 1" not in cap.out
    assert main(["check", "no_such_op", "--json"]) == 2
    os.write(1, b"after the error\n")
    cap = capfd.readouterr()
    head, _, tail = cap.out.rpartition("}\n")
    assert json.loads(head + "}")["exit_code"] == 2 and tail == "after the error\n"


def test_fuzz_in_a_pipe_prints_one_document_and_no_progress(tmp_path):
    """The issue's command, as a shell runs it: `numoracle fuzz softmax --seconds 4 --json |
    python -m json.tool` (a kernel worker process, no seed)."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = str(ROOT)
    res = subprocess.run([sys.executable, "-m", "numoracle", "fuzz", "softmax", "--seconds", "2", *SMALL,
                          "--database", str(tmp_path / "db"), "--json"], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["exit_reason"] == "time budget"
    assert "cases/s" not in res.stderr and "@seed" not in res.stdout + res.stderr     # no progress off a terminal
    tool = subprocess.run([sys.executable, "-m", "json.tool"], input=res.stdout, capture_output=True, text=True)
    assert tool.returncode == 0


@pytest.mark.slow
def test_the_studies(capsys, tmp_path):
    d = _one_document(capsys, ["mutate", "softmax", "--cases-per-group", "1", "--max-mutants", "1", "--groups",
                               "calibration", "--cols", "32", "--rows", "2", "--no-isolate", "--json"], codes=(0, 1))
    assert d["op"] == "softmax" and d["kernels"]
    d = _one_document(capsys, ["stress-tolerances", "softmax", "--atol", "1e-3", "--rtol", "1e-3", "--examples", "1",
                               *SMALL, "--corpus", "", "--no-isolate", "--json", "--seed", "2"], codes=(0, 1))
    assert d["op"] == "softmax" and d["configurations"]
    d = _one_document(capsys, ["plan", "softmax", "--json"], codes=(0, 1))
    assert d["operator"] == "softmax"
    camp = tmp_path / "camp"
    d = _one_document(capsys, ["campaign", "--quick", "--ops", "softmax", "--stages", "correct", "--cases", "2",
                               "--out", str(camp), "--no-isolate", "--json"])
    assert d["correct_runs"] > 0
    d = _one_document(capsys, ["report", str(camp), "--json"])
    assert Path(d["html"]).exists()
    d = _one_document(capsys, ["calibrate", "--functions", "exp", "--samples", "1024", "--refine", "0", "--json"],
                      codes=(0, 1))
    assert "exp" in d["functions"]
