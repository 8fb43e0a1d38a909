"""A project outside the package (tests/user_project: its own Triton kernel, reference program,
operator and a planted-fault copy of the kernel), driven end to end through the console script
in a subprocess whose working directory is a copy of the project, as its developer would run
it: ``numoracle ops`` prints the kernel signature; ``check`` accepts the kernel; the faulty
kernel is rejected, shrunk and saved; once the kernel is fixed the printed replay line and
pytest on the corpus pass; ``mutate`` and ``stress-tolerances`` run on the operator."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

PROJECT = Path(__file__).resolve().parent / "user_project"
OP = "tests_user_op.ops:my_op"
FAULTY = "tests_user_op.kernels_faulty:add_rms_norm"


@pytest.fixture
def project(tmp_path):
    dest = tmp_path / "project"
    shutil.copytree(PROJECT, dest, ignore=shutil.ignore_patterns("__pycache__", "corpora*", ".numoracle"))
    return dest


def numoracle(cwd, *args, timeout=300):
    """``python -m numoracle ARGS`` in ``cwd``: (exit code, stdout, stderr)."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    res = subprocess.run([sys.executable, "-m", "numoracle", *args], cwd=cwd, env=env, capture_output=True,
                         text=True, timeout=timeout)
    return res.returncode, res.stdout, res.stderr


def run_line(cwd, line, timeout=300):
    """A printed ``numoracle ...`` command line, run as printed."""
    argv = shlex.split(line)
    assert argv[0] == "numoracle", line
    return numoracle(cwd, *argv[1:], timeout=timeout)


def pytest_in(cwd, *args, env=None, timeout=300):
    """``python -m pytest ARGS`` in ``cwd``: (exit code, stdout + stderr)."""
    env = env or {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    res = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args], cwd=cwd, env=env,
                         capture_output=True, text=True, timeout=timeout)
    return res.returncode, res.stdout + res.stderr


def fix_the_kernel(project: Path) -> None:
    """The developer's fix: the faulty module gets the correct code."""
    pkg = project / "tests_user_op"
    shutil.copyfile(pkg / "kernels.py", pkg / "kernels_faulty.py")


def test_the_operator_declaration_is_reachable_as_no_operator():
    import numoracle as no
    from numoracle import operators
    assert (no.Operator, no.Domain, no.operator) == (operators.Operator, operators.Domain, operators.operator)


def test_an_example_builder_that_cannot_take_a_case_is_refused_when_the_operator_is_declared():
    # every case calls it with (seed, dtype, family, rows, cols): a builder without `family`
    # failed at the first case, as a TypeError from inside the command
    import numoracle as no
    from numoracle.formats import fp32

    @no.reference
    def copy(x):
        return x.to(fp32).to(x.format)

    def without_family(seed, dtype="bf16", rows=3, cols=256, **kw):
        return (torch.zeros(rows, cols),), {}
    with pytest.raises(no.InvalidArgument) as e:
        no.Operator("copy_test", copy, {"correct": "pkg.mod:kernel"}, without_family)
    assert str(e.value) == (
        "Operator('copy_test', example='without_family'): its signature (seed, dtype='bf16', rows=3, cols=256, "
        "**kw) cannot take the five positional arguments every case gives (too many positional arguments); "
        "expected example(seed, dtype, family, rows, cols) -> (inputs, params), e.g. def example(seed, dtype, "
        "family, rows, cols): return (fill((rows, cols), family, seed, dtype=dtype),), {}")

    def with_keywords(seed, dtype, family, rows, cols, *, scale=1.0):
        return (torch.zeros(rows, cols),), {}
    op = no.Operator("copy_test", copy, {"correct": "pkg.mod:kernel"}, with_keywords)
    assert op.example(0)[0][0].shape == (4, 96)
    for ok in (lambda *a: ((torch.zeros(1, 1),), {}), print):   # varargs; a builtin without a signature
        no.Operator("copy_test", copy, {"correct": "pkg.mod:kernel"}, ok)


def test_ops_prints_the_kernel_signature_of_a_user_operator(project):
    rc, out, err = numoracle(project, "ops", OP)
    assert rc == 0, err
    assert "add_rms_norm" in out
    assert "kernel(x, residual, w, *, eps=1e-06, offset=0.0) -> y, residual_out" in out


def test_plan_takes_the_user_operator(project, monkeypatch):
    # numoracle plan (merged from main) imported package.module:attribute as a kernel and
    # refused the Operator object; it resolves operators as every other command does
    from numoracle import operators
    from numoracle.cli import plan
    monkeypatch.chdir(project)
    monkeypatch.syspath_prepend(str(project))
    op = plan._operator(OP)
    assert isinstance(op, operators.Operator) and op.name == "add_rms_norm"
    with pytest.raises(Exception, match="unknown operator"):
        plan._operator("no_such_operator_here")


@pytest.mark.parametrize("command", ["check", "fuzz", "mutate", "stress-tolerances", "plan"])
def test_every_command_drawing_parameters_takes_param_checked_against_the_reference(project, command):
    # --param NAME=VALUE (issue #30 item 3) on each command that draws operator parameters:
    # a name the reference does not take is refused before anything runs, saying what it takes
    rc, out, err = numoracle(project, command, OP, "--param", "casting=llama")
    assert rc == 2, (out, err)
    assert "unknown parameter(s) ['casting'] for add_rms_norm; it takes ['eps', 'offset']" in err, err


def test_check_accepts_the_user_kernel(project):
    rc, out, err = numoracle(project, "check", OP, "--json", "--no-save")
    assert rc == 0, err
    res = json.loads(out)
    t = res["totals"]
    assert t["cases"] >= 11 + 12 and t["reject"] == 0 and t["statistical_only"] == 0
    assert t["error"] == t["nan"] == t["timeout"] == 0
    # uncertified only where a value overflows (x + r squared, its sum, the store): how many such
    # cases there are depends on what the Hypothesis release draws; the reason does not
    assert t["accept"] + t["uncertified"] == t["cases"] and t["accept"] >= t["cases"] // 2
    reasons = [r for g in res["uncertified_reasons"].values() for r in g]
    assert bool(reasons) == bool(t["uncertified"]) and all(r.startswith("range: ") for r in reasons), reasons
    assert res["counterexample"] is None


def test_fuzz_with_a_time_budget_prints_one_json_document(project):
    # Hypothesis, seeding a run itself, reported "You can reproduce this failure by adding
    # @seed(...)" on stdout when the time budget stopped it
    rc, out, err = numoracle(project, "fuzz", OP, "--seconds", "1", "--database", "none", "--json")
    assert rc == 0, err
    assert json.loads(out)["exit_reason"] == "time budget"


def test_a_planted_fault_is_rejected_shrunk_saved_and_its_replay_passes_once_fixed(project):
    rc, out, err = numoracle(project, "check", OP, "--kernel", FAULTY, "--quiet")
    assert rc == 1, out + err
    assert "Kernel output outside its acceptance region" in out and "Confirmed" in out
    replay = [ln.removeprefix("Replay: ") for ln in out.splitlines() if ln.startswith("Replay: ")]
    saved = [ln.removeprefix("Saved: ") for ln in out.splitlines() if ln.startswith("Saved: ")]
    assert len(replay) == 1 and len(saved) == 1, out
    case = project / saved[0]
    meta = json.loads((case / "case.json").read_text())
    assert meta["operator"] == OP and meta["kernel"]["spec"] == FAULTY
    # shrunk: one row, fewer columns than the 4 x 96 case that found it, still not a power of two
    # (a row that fills its power-of-two block divides by the right count)
    rows, cols = meta["inputs"][0]["shape"]
    assert rows == 1 and cols < 96 and cols & (cols - 1) != 0, meta["inputs"]

    corpus = saved[0].split("/")[0]

    rc, out, err = run_line(project, replay[0])
    assert rc == 1, out + err
    assert f"kernel {FAULTY} re-run" in out and "reproduced" in out
    # from another directory the operator does not import: the message says where it does
    rc, out, err = numoracle(project.parent, "replay", str(case))
    assert rc == 2, out + err
    assert "No module named 'tests_user_op'" in out and f"The case lies under {project}, which holds " \
        f"'tests_user_op': replay it from there, or put {project} on PYTHONPATH." in " ".join(out.split()), out
    rc, out = pytest_in(project, corpus)
    assert rc == 1 and "1 failed" in out and "Kernel output outside its acceptance region" in out, out

    fix_the_kernel(project)
    rc, out, err = run_line(project, replay[0])
    assert rc == 0, out + err
    assert f"kernel {FAULTY} re-run" in out and ": ok (statistical accept, fixed accept" in out
    rc, out = pytest_in(project, corpus)
    assert rc == 0 and "1 passed" in out, out


@pytest.mark.slow
def test_fuzz_on_worker_processes_finds_saves_and_replays_the_users_fault(project):
    """``fuzz --workers 2`` on a user's operator: the worker processes import it by its spec
    (they once looked it up by name and refused it), and the case they save replays."""
    rc, out, err = numoracle(project, "fuzz", OP, "--kernel", FAULTY, "--workers", "2", "--units", "1",
                             "--examples", "40", "--groups", "calibration", "--max-rows", "2", "--max-cols", "40",
                             "--no-isolate", "--json")
    assert rc == 1, out + err
    doc = json.loads(out)
    assert doc["totals"]["reject"] >= 1 and len(doc["saved"]) == 1, doc
    rc, out, err = numoracle(project, "replay", doc["saved"][0])
    assert rc == 1 and f"kernel {FAULTY} re-run" in out and "reproduced" in out, out + err


@pytest.mark.slow
def test_mutate_runs_on_the_user_operator(project):
    rc, out, err = numoracle(project, "mutate", OP, "--cases-per-group", "1", "--max-mutants", "3", "--json")
    assert rc == 0, err
    d = json.loads(out)
    assert d["numoracle_rejects_on_correct_and_variants"] == []
    assert len(d["mutants"]) == 3
    # every mutant is of the user's own kernel
    assert all(m["kernel"] == "correct" and m["module"] == "tests_user_op.kernels"
               and m["function"] == "_add_rms_norm_fwd" for m in d["mutants"]), d["mutants"]
    assert {m["id"] for m in d["mutants"]} == {f"add_rms_norm-m{i:03d}" for i in range(3)}


@pytest.mark.slow
def test_stress_tolerances_runs_on_the_user_operator(project):
    rc, out, err = numoracle(project, "stress-tolerances", OP, "--grid", "2", "--examples", "2", "--json",
                             "--corpus", "")
    assert rc == 0, err
    d = json.loads(out)
    assert d["numoracle_rejects_on_correct"] == []
    assert len(d["configurations"]) == 4
    assert set(d["runs_per_group"]) >= {"calibration", "shifted_mean", "pow2_grid"}
    assert len(d["faulty_and_mutants"]) == 1           # the planted fault, run on fixed cases


@pytest.mark.slow
def test_a_property_test_replays_its_saved_case_first(project):
    """A property test saves its counterexample; run again, it re-runs the kernel on that case
    before any new one: still failing while the kernel is faulty, passing once it is fixed."""
    sys.path.insert(0, str(PROJECT))
    try:
        from check_property import digest
    finally:
        sys.path.remove(str(PROJECT))

    def pytest_run(log):
        env = {**{k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}, "USER_OP_CALL_LOG": str(log)}
        rc, out = pytest_in(project, "check_property.py", "--numoracle-backend", "interpreter",
                            "--numoracle-corpus", "corpora", "-k", "test_user_property", env=env)
        calls = log.read_text().split() if log.exists() else []
        return rc, out, calls

    rc, out, _ = pytest_run(project / "log1")
    assert rc == 1 and "Replay: numoracle replay " in out.split("short test summary")[0], out
    cases = sorted((project / "corpora").glob("*/*/*/case.json"))
    assert len(cases) == 1, cases
    from numoracle import corpus
    saved = digest(*corpus.load(cases[0].parent).inputs)

    rc, out, calls = pytest_run(project / "log2")
    assert rc == 1, out
    assert calls and calls[0] == saved, "the saved case is not the first one the kernel ran on"

    fix_the_kernel(project)
    rc, out, calls = pytest_run(project / "log3")
    assert rc == 0, out
    assert calls and calls[0] == saved, "the saved case is not the first one the kernel ran on"


OWN_GIVEN = '''
from hypothesis import given, settings

import numoracle as no
from numoracle.strategies import cases
from tests_user_op.kernels import add_rms_norm          # imported at the top, as users do
from tests_user_op.ops import my_op


@settings(max_examples=4, deadline=None, database=None)
@given(cases(my_op, max_rows=2, max_cols=40))
def test_my_kernel(case):
    inputs, params = case.materialize(op=my_op)
    no.assert_accepted(my_op.reference, outputs=add_rms_norm(*inputs, **params), inputs=inputs, params=params,
                       uncertified="ignore")
'''


@pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU runs the compiled kernel anyway")
def test_a_hypothesis_test_of_ones_own_imports_the_kernel_at_the_top_under_the_named_interpreter(project):
    """``--numoracle-backend interpreter`` selects the interpreter before the test modules are
    imported; it was chosen only when a property test ran, so a kernel imported at the top of
    a user's own @given test was compiled for a GPU ('0 active drivers' on the CPU)."""
    (project / "test_own_given.py").write_text(OWN_GIVEN)
    rc, out = pytest_in(project, "test_own_given.py", "--numoracle-backend", "interpreter")
    assert rc == 0 and "1 passed" in out, out
    rc, out = pytest_in(project, "test_own_given.py")
    assert rc == 1 and "0 active drivers" in out, out


NO_EXAMPLE = '''
import numoracle as no
from tests_user_op.reference import add_rms_norm

op = no.Operator("add_rms_norm_without_example", add_rms_norm,
                 kernels={"correct": "tests_user_op.kernels:add_rms_norm"})
'''


def test_every_command_that_draws_cases_refuses_an_operator_without_an_example_builder(project):
    # the builder is optional (no.check on one's own tensors needs none); drawing cases failed
    # with "'NoneType' object is not callable" from inside Hypothesis, and a campaign counted
    # kernel errors and exited 0
    (project / "noexample.py").write_text(NO_EXAMPLE)
    for command in (["check"], ["fuzz", "--seconds", "5"], ["mutate"], ["stress-tolerances"],
                    ["campaign", "--quick", "--stages", "correct", "--out", "camp", "--ops"]):
        rc, out, err = numoracle(project, *command, "noexample:op")
        assert rc == 2, (command, out, err)
        assert ("operator add_rms_norm_without_example has no example builder, and drawing cases needs one to "
                "make its inputs; give Operator('add_rms_norm_without_example', ..., example=f) with f(seed, "
                "dtype, family, rows, cols) -> (inputs, params)") in err, (command, err)
    assert not (project / "camp").exists()


def test_a_drawn_case_the_reference_refuses_is_the_domains_fault_not_the_kernels(tmp_path):
    # an operator whose domain draws a last axis that its reference's group size does not divide
    import numoracle as no
    from numoracle.formats import fp32
    from numoracle.runner.engine import fuzz
    from numoracle.strategies import fill

    @no.reference(outputs=("q", "scales"))
    def grouped(x):
        q = no.quantize_group(x.to(fp32), 128, "e4m3fn", "fp32")
        return q.codes, q.scales

    def kernel(x):                       # never judged: the reference refuses first
        return torch.zeros(x.shape, dtype=torch.float8_e4m3fn), torch.ones(x.shape[0], 1)

    op = no.Operator("grouped_test", grouped, {"correct": kernel},
                     lambda seed, dtype, family, rows, cols: ((fill((rows, cols), family, seed, dtype=dtype),), {}),
                     domain=no.Domain(rows=(1, 4), cols=(1, 256)))
    res = fuzz(op, kernel, max_examples=5, isolate=False, corpus=str(tmp_path / "corpus"), shrink_seconds=5)
    found = res.counterexample
    assert found is not None and found.failure_class == ("error", "reference", "ReferenceRefused")
    text = found.explain()
    assert text.startswith("The reference could not run: grouped cannot run on the inputs given"), text
    assert "group=128 must divide the last axis" in text
    assert "narrow no.Domain(rows=..., cols=..., cols_multiple_of=..., params=...)" in text
    assert res.saved is None and res.save_error.startswith("not saved: the reference refused"), res.save_error
    assert not (tmp_path / "corpus").exists()
