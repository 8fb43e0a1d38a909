"""The command line: ops, check and fuzz on the runner, replay, exit codes."""

import json
from pathlib import Path

import pytest

from numoracle.cli import SUBCOMMANDS, build_parser, main

ROOT = Path(__file__).resolve().parents[1]


def test_ops_lists_the_registry(capsys):
    assert main(["ops", "--json"]) == 0
    names = [r["name"] for r in json.loads(capsys.readouterr().out)]
    assert "rms_norm" in names and "softmax" in names


@pytest.mark.parametrize("argv,msg", [
    (["check", "no_such_op"], "unknown operator"),
    (["check", "rms_norm", "--kernel", "nope"], "rms_norm has kernels"),
    (["check", "rms_norm", "--kernel", "no_such_module_xyz:f"], "cannot import it"),
    (["check", "rms_norm", "--shift", "sideways"], "unknown input-shift group"),
    (["fuzz", "rms_norm", "--seconds", "1", "--minutes", "1"], "not both"),
    (["check", "rms_norm", "--dtype", "e2m1"], "is defined on"),
    (["replay", "/nonexistent/case"], "not a corpus case"),
])
def test_usage_errors_exit_2_with_a_message(argv, msg, capsys):
    assert main(argv) == 2
    assert msg in capsys.readouterr().err


def test_argparse_errors_exit_2():
    assert main(["check"]) == 2
    assert main(["check", "rms_norm", "--mode", "approximately"]) == 2


def test_check_correct_kernel_json(capsys):
    rc = main(["check", "softmax", "--backend", "interpreter", "--examples", "3", "--shift", "calibration,scaled_up",
               "--max-cols", "64", "--json", "--no-save"])
    out = json.loads(capsys.readouterr().out)
    assert rc == 0 and out["exit_reason"] == "examples exhausted"
    assert set(out["groups"]) == {"calibration", "scaled_up"}
    assert out["totals"]["cases"] >= 2 + 3 and out["totals"]["reject"] == 0
    assert out["counterexample"] is None


def test_fuzz_with_a_time_budget_text_output(capsys):
    rc = main(["fuzz", "swiglu", "--seconds", "2", "--max-rows", "2", "--max-cols", "32", "--database", "none",
               "--seed", "1", "--quiet"])
    text = capsys.readouterr().out
    assert rc == 0
    assert "- time budget" in text and "cases in" in text


def test_subcommands_table_is_kept():
    assert set(SUBCOMMANDS) >= {"calibrate", "mutate", "stress-tolerances"}
    sub = build_parser(only="")._subparsers._group_actions[0].choices
    assert {"ops", "check", "fuzz", "replay"} <= set(sub)
