"""The command line: ops, check and fuzz on the runner, replay, exit codes."""

import json
from pathlib import Path

import pytest

from numoracle.cli import COMMANDS, build_parser, main

ROOT = Path(__file__).resolve().parents[1]


def test_ops_lists_the_registry(capsys):
    assert main(["ops", "--json"]) == 0
    names = [r["name"] for r in json.loads(capsys.readouterr().out)]
    assert "rms_norm" in names and "softmax" in names


@pytest.mark.parametrize("argv,msg", [
    (["check", "no_such_op"], "unknown operator"),
    (["check", "rms_norm", "--kernel", "nope"], "rms_norm has kernels"),
    (["check", "rms_norm", "--kernel", "no_such_module_xyz:f"], "cannot import it"),
    (["check", "rms_norm", "--groups", "sideways"], "unknown input-shift group"),
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
    rc = main(["check", "softmax", "--backend", "interpreter", "--examples", "3", "--groups", "calibration,scaled_up",
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


def test_every_command_is_listed_without_importing_its_module():
    sub = build_parser(only="")._subparsers._group_actions[0].choices
    assert set(sub) == set(COMMANDS) >= {"ops", "check", "fuzz", "replay", "mutate", "stress-tolerances", "campaign",
                                         "report", "calibrate", "workers"}


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_every_flag_of_every_command_has_help(command):
    parser = build_parser(only=command)._subparsers._group_actions[0].choices[command]
    missing = [a.option_strings or a.dest for a in parser._actions
               if a.help is None and a.dest != "help"]
    assert not missing, f"{command}: flags without help {missing}"


@pytest.mark.parametrize("argv", [["fuzz", "rms_norm", "--seconds", "nan"], ["fuzz", "rms_norm", "--timeout", "0"],
                                  ["check", "rms_norm", "--max-rows", "0"],
                                  ["check", "rms_norm", "--shrink-seconds", "-1"],
                                  ["mutate", "softmax", "--cases-per-group", "0"],
                                  ["stress-tolerances", "softmax", "--grid", "0"]])
def test_numeric_options_are_validated(argv, capsys):
    assert main(argv) == 2
    assert "expected" in capsys.readouterr().err


def test_the_same_flag_means_the_same_in_every_command():
    """--groups, --seconds, --backend, --json: one name, one definition, wherever they appear."""
    seen = {}
    for command in COMMANDS:
        parser = build_parser(only=command)._subparsers._group_actions[0].choices[command]
        for a in parser._actions:
            for flag in a.option_strings:
                seen.setdefault(flag, set()).add((a.dest, a.nargs, type(a).__name__))
    for flag in ("--groups", "--seconds", "--backend", "--json", "--seed", "--dtype", "--kernel", "--out"):
        assert len(seen.get(flag, ())) <= 1, (flag, seen[flag])
    assert "--shift" not in seen and "--time-budget" not in seen and "--minutes" not in seen


# options whose absence simply means "not done" (an extra file, a second configuration): no default to state
_NOTHING_BY_DEFAULT = {("mutate", "--out"), ("stress-tolerances", "--out"), ("calibrate", "--base"),
                       ("calibrate", "--note"), ("plan", "--skeleton"), ("plan", "--compare"), ("plan", "--intended")}


def test_every_flag_states_its_default_in_its_help():
    """A flag's help says what happens when it is not given: the formatter adds a stated
    default, an on/off flag says which, and a flag whose default is None says what None means."""
    import argparse

    from numoracle.cli.common import Formatter
    formatter = Formatter("numoracle")
    missing = []
    for command in COMMANDS:
        parser = build_parser(only=command)._subparsers._group_actions[0].choices[command]
        for a in parser._actions:
            if not a.option_strings or isinstance(a, (argparse._HelpAction, argparse._StoreTrueAction)):
                continue
            flag = max(a.option_strings, key=len)
            if (command, flag) in _NOTHING_BY_DEFAULT:
                continue
            if "default" not in formatter._get_help_string(a).lower():
                missing.append((command, flag, a.default))
    assert not missing, missing


@pytest.mark.parametrize("caps, want", [((), (4, 96)), (("--max-rows", "2", "--max-cols", "32"), (2, 32)),
                                        (("--rows", "3", "--max-rows", "2"), (3, 96))])
def test_check_keeps_its_one_case_per_group_within_the_caps(caps, want, monkeypatch, capsys):
    """--max-rows/--max-cols cap check's case per input group as they cap the drawn ones
    (a --rows or --cols given is used as it is)."""
    import numoracle.strategies as S
    seen = []
    real = S.explicit_cases

    def spy(op, **kw):
        seen.append((kw["rows"], kw["cols"]))
        return real(op, **kw)
    monkeypatch.setattr(S, "explicit_cases", spy)
    assert main(["check", "rms_norm", "--examples", "0", "--groups", "calibration", "--no-save", "--json",
                 *caps]) == 0
    assert seen == [want]
    assert json.loads(capsys.readouterr().out)["totals"]["reject"] == 0
