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


def test_a_usage_error_is_the_document(capsys):
    doc = _one_document(capsys, ["check", "no_such_op", "--json"], codes=(2,))
    assert doc["exit_code"] == 2 and "unknown operator" in doc["error"]


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
