"""The runner: outcomes that never end a run, per-group statistics, exit
reasons, target(), the example database, subprocess isolation."""

from pathlib import Path

import pytest

from numoracle.runner import RunResult, fuzz, judge
from numoracle.runner.outcomes import site_kind
from numoracle.strategies import GROUPS, Case, cases

ROOT = Path(__file__).resolve().parents[1]
USER = "tests.fixtures.user_kernels:"
LLAMA = (("casting", "llama"), ("offset", 0.0))


@pytest.fixture(autouse=True)
def _repo_root(monkeypatch):
    monkeypatch.chdir(ROOT)        # user kernels are named module:function from here


def _cases(shapes):
    return [Case("rms_norm", "bf16", r, c, "calibration", 0, (), LLAMA, (), i) for i, (r, c) in enumerate(shapes)]


def _totals_consistent(res: RunResult):
    t = res.totals
    assert t.cases == sum(getattr(t, s) for s in ("accept", "reject", "statistical_only", "uncertified",
                                                  "error", "nan", "timeout", "crash"))
    assert set(res.groups) <= set(GROUPS)


def test_correct_kernel_runs_to_the_end_without_findings():
    res = fuzz("rms_norm", "correct", max_examples=8, seed=3, strategy=cases("rms_norm", max_rows=4, max_cols=64))
    assert res.exit_reason == "examples exhausted"
    assert res.totals.cases >= 8 and res.counterexample is None and not res.found
    assert res.totals.reject == res.totals.error == res.totals.nan == res.totals.timeout == 0
    _totals_consistent(res)
    assert res.exit_code() == 0 and res.to_dict()["exit_reason"] == "examples exhausted"


@pytest.mark.parametrize("kernel,status,shapes", [
    ("rms_norm_raises", "error", [(1, 7), (2, 8), (1, 9), (2, 16)]),          # odd widths raise
    ("rms_norm_nan", "nan", [(1, 8), (2, 8), (1, 5), (3, 16)]),               # >= 2 rows: a NaN
    ("rms_norm_hangs", "timeout", [(1, 8), (1, 9), (2, 16), (1, 12)]),        # width % 3 == 0: no return
])
def test_kernel_failures_are_outcomes_and_the_run_goes_on(kernel, status, shapes):
    res = fuzz("rms_norm", USER + kernel, max_examples=1, seed=0, explicit=_cases(shapes), timeout=1.0,
               strategy=cases("rms_norm", rows=1, cols=(4, 4), params={"casting": ("llama",), "offset": (0.0,)}),
               stop_on_first=False)
    t = res.totals
    assert getattr(t, status) == 2, res.to_dict()["totals"]
    assert t.accept >= 2                       # the cases after the failures were still judged
    assert res.exit_reason == "examples exhausted" and res.found and res.exit_code() == 1
    assert all(o.status == status for o in res.errors)
    if status == "error":
        assert "odd widths" in res.errors[0].error
    _totals_consistent(res)


def test_time_budget_is_an_exit_reason():
    res = fuzz("rms_norm", "correct", max_examples=10**6, seconds=1.0, seed=1,
               strategy=cases("rms_norm", max_rows=2, max_cols=16))
    assert res.exit_reason == "time budget"
    assert 1 <= res.totals.cases


def test_a_run_the_clock_ends_searches_every_input_group_not_one(monkeypatch):
    """A time-bounded run (max_examples 10^9) is Hypothesis runs of ROUND_EXAMPLES cases: in a
    single run its first target() pass lasted until the deadline, hill-climbing from one case, and
    65-83% of a 9-16 s run's cases fell in one input group (docs/results/2026-12-06-fuzz-rounds.md).
    Smaller rounds than the shipped 1000 make the turns show within a short test."""
    from numoracle.runner import engine
    monkeypatch.setattr(engine, "ROUND_EXAMPLES", 100)
    res = fuzz("rms_norm", "correct", max_examples=10**9, seconds=8.0, seed=1, isolate=False, shrink=False,
               strategy=cases("rms_norm", max_rows=2, max_cols=16))
    assert res.exit_reason == "time budget"
    n = res.totals.cases
    if n < 250:
        pytest.skip(f"{n} cases in 8 s: too slow a machine for two rounds")
    shares = {g: s.cases / n for g, s in res.groups.items()}
    assert max(shares.values()) < 0.5, shares
    assert len(shares) == len(GROUPS)


def test_rounds_follow_from_the_runs_seed_and_stop_when_the_cases_run_out(monkeypatch):
    from hypothesis import strategies as st
    from numoracle.runner import engine
    monkeypatch.setattr(engine, "ROUND_EXAMPLES", 30)
    runs = [fuzz("rms_norm", "correct", max_examples=75, seconds=3600.0, seed=7, isolate=False, shrink=False,
                 strategy=cases("rms_norm", max_rows=2, max_cols=16)) for _ in range(2)]
    assert [r.totals.cases for r in runs] == [75, 75]
    assert [{g: s.cases for g, s in r.groups.items()} for r in runs][0] == \
        [{g: s.cases for g, s in r.groups.items()} for r in runs][1]
    # two distinct cases: the first round runs out, and no other round repeats them until the deadline
    two = st.sampled_from(_cases([(1, 8), (2, 8)]))
    res = fuzz("rms_norm", "correct", max_examples=10**9, seconds=60.0, seed=7, isolate=False, strategy=two)
    assert res.exit_reason == "examples exhausted" and res.totals.cases == 2


def test_boundary_score_and_site_kind():
    op_case = _cases([(2, 8)])[0]
    from numoracle import backends
    from numoracle.operators import get
    backends.select("interpreter")      # before the kernels are imported: @triton.jit reads TRITON_INTERPRET
    op = get("rms_norm")
    inputs, params = op_case.materialize()
    ok = judge(op, op.kernels["correct"], inputs, params)
    assert ok.status == "accept" and 0 <= ok.score <= 1
    bad = judge(op, _user("rms_norm_truncating_store"), inputs, params)
    assert bad.status == "reject" and bad.score > 1 and bad.failure_class[0] == "y"      # rms_norm names its outputs y, rstd
    assert site_kind("fp32 sum over 96 (any order) (rms_norm:83)") == "fp32 sum over n (any order) (rms_norm:83)"


def _user(name):
    from numoracle import backends
    from numoracle.runner.kernels import import_kernel
    backends.select("interpreter")
    return import_kernel(USER + name)


def test_database_resumes_a_run(tmp_path):
    kw = dict(max_examples=30, seed=5, shrink=False, database=tmp_path / "db",
              strategy=cases("rms_norm", max_rows=2, max_cols=16, formats=["bf16"],
                             params={"casting": ("llama",), "offset": (0.0,)}))
    first = fuzz("rms_norm", USER + "rms_norm_truncating_store", **kw)
    assert first.exit_reason == "first counterexample"
    assert any((tmp_path / "db").rglob("*"))
    again = fuzz("rms_norm", USER + "rms_norm_truncating_store", **{**kw, "seed": 6})
    assert again.exit_reason == "first counterexample"
    assert again.totals.cases == 1              # replayed from the database before any new draw


@pytest.mark.parametrize("isolate", [False, True])
def test_a_kernels_overflow_warnings_stay_off_the_terminal(isolate):
    # in-process the runner ignores them around the call; the worker process must too, since
    # its stderr is the user's terminal
    import subprocess
    import sys
    code = ("import warnings; warnings.simplefilter('default')\n"
            "from numoracle import backends; backends.select('interpreter')\n"
            "from numoracle.runner import fuzz\n"
            "from numoracle.strategies import cases\n"
            f"r = fuzz('rms_norm', {USER + 'rms_norm_warns'!r}, max_examples=3, seed=1, shrink=False, "
            f"database=None, isolate={isolate}, strategy=cases('rms_norm', max_rows=2, max_cols=8, formats=['bf16']))\n"
            "print(r.totals.cases, r.totals.error, r.isolation)\n")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                       cwd=Path(__file__).resolve().parent.parent)
    assert p.returncode == 0, p.stderr[-2000:]
    cases_run, errors, where = p.stdout.split()
    assert int(cases_run) >= 3 and errors == "0" and where == ("worker" if isolate else "in-process")
    assert "RuntimeWarning" not in p.stderr and "overflow" not in p.stderr, p.stderr[-2000:]


def test_the_worker_process_is_killed_on_a_hang_and_the_next_case_runs():
    from numoracle import backends
    from numoracle.operators import get
    backends.select("interpreter")
    op = get("rms_norm")
    kernel = _user("rms_norm_hangs")
    ok_case, hang_case, after = _cases([(1, 8), (1, 9), (1, 8)])
    outs = [judge(op, kernel, *c.materialize(), isolate=True, timeout=3.0, case=c) for c in (ok_case, hang_case, after)]
    assert [o.status for o in outs] == ["accept", "timeout", "accept"]
    assert "worker process killed" in outs[1].error


@pytest.mark.parametrize("isolate", [False, True])
def test_the_breakdown_accounts_for_the_search_and_the_worker_start(isolate):
    from numoracle.runner import worker
    from numoracle.runner.outcomes import Breakdown
    worker.close_all()                  # a worker left by an earlier test would need no start
    res = fuzz("rms_norm", USER + "rms_norm_truncating_store", max_examples=6, seed=2, shrink=False,
               stop_on_first=False, database=None, isolate=isolate,
               strategy=cases("rms_norm", max_rows=2, max_cols=16, formats=["bf16"]))
    b = res.to_dict()["breakdown"]
    phases = [p for p in Breakdown.PHASES if p != "shrink"]
    assert list(b["ms_per_case"]) == phases and b["cases"] == res.totals.cases >= 6
    assert all(v >= 0 for v in b["seconds"].values())
    # the phases are the search's time, split: together no more than the run took
    assert sum(b["seconds"][p] for p in phases) <= res.elapsed + 0.05
    if isolate:
        assert res.isolation == "worker" and b["seconds"]["worker_start"] > 0.3   # imports: seconds
        assert b["seconds"]["kernel"] < b["seconds"]["worker_start"]
    else:
        assert b["seconds"]["worker_start"] == 0
    assert b["seconds"]["compile"] == 0 and b["compiles"] == 0     # the interpreter compiles nothing


@pytest.mark.parametrize("isolate", [False, True])
def test_the_breakdown_keeps_triton_compiles_apart_from_the_kernel(isolate):
    # each call of this kernel takes Triton's compile step once, 20 ms (a stand-in's): the
    # breakdown counts the steps, puts their time under compile, and leaves it out of kernel
    from numoracle.runner import worker
    worker.close_all()
    strategy = cases("rms_norm", max_rows=2, max_cols=16, formats=["bf16"])
    runs = {}
    for k in ("rms_norm_ok", "rms_norm_compiling") * 2:      # the first of each readies its recipe
        runs[k] = fuzz("rms_norm", USER + k, max_examples=6, seed=2, shrink=False, stop_on_first=False,
                       database=None, isolate=isolate, strategy=strategy)
    plain, compiling = (runs[k].to_dict()["breakdown"] for k in ("rms_norm_ok", "rms_norm_compiling"))
    n = compiling["cases"]
    assert compiling["compiles"] == n and plain["compiles"] == 0
    assert 0.02 * n <= compiling["seconds"]["compile"] < 0.02 * n + 0.05 * n
    # without the compile steps the two kernels are alike: the steps' time is not counted twice
    assert compiling["ms_per_case"]["kernel"] < plain["ms_per_case"]["kernel"] + 10
    if isolate:
        assert runs["rms_norm_compiling"].isolation == "worker"


def test_compile_steps_are_measured_only_within_the_block():
    from triton.runtime.jit import JITFunction

    from numoracle.runner.launches import compiling
    from tests.fixtures.user_kernels import _StandIn
    before = JITFunction.__dict__["_do_compile"]
    with compiling() as got:
        assert JITFunction._do_compile(_StandIn(), None, None, "cpu", None, None, None, False) is None
        with compiling() as inner:           # nested blocks both see the step
            JITFunction._do_compile(_StandIn(), None, None, "cpu", None, None, None, False)
    assert (got.count, inner.count) == (2, 1) and got.seconds >= 0.04 and inner.seconds >= 0.02
    assert JITFunction.__dict__["_do_compile"] is before
    JITFunction._do_compile(_StandIn(), None, None, "cpu", None, None, None, False)
    assert got.count == 2


def test_the_summary_says_when_triton_compiles_took_the_run():
    # the stand-in compile step takes 20 ms a call: more than a tenth of a short search
    from numoracle.cli.run import print_result
    from numoracle.runner.outcomes import compile_note
    strategy = cases("rms_norm", max_rows=2, max_cols=16, formats=["bf16"])
    res = fuzz("rms_norm", USER + "rms_norm_compiling", max_examples=4, seed=2, shrink=False, stop_on_first=False,
               database=None, isolate=False, strategy=strategy)
    b = res.times.to_dict(res.totals.cases)
    n, spent = b["compiles"], b["seconds"]["compile"]
    share = spent / sum(v for k, v in b["seconds"].items() if k != "shrink")
    assert n == res.totals.cases and share >= 0.1
    assert compile_note(b) == (
        f"compile: Triton compiled (or loaded from its cache) {n} specializations of the kernel in {spent:.1f} s, "
        f"{share:.0%} of the search: the kernel's own shapes and formats, which Triton's on-disk cache keeps for "
        f"later runs")
    import contextlib
    import io
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        print_result(res)
    assert f"  {compile_note(b)}\n" in out.getvalue()
    # none where nothing compiled, or where compiling was a small part of the run
    assert compile_note({**b, "compiles": 0}) is None
    assert compile_note({**b, "seconds": {**b["seconds"], "compile": 0.05 * spent}}) is None
