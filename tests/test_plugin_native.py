"""The plugin as a Hypothesis and pytest citizen (issue #24): profiles are Hypothesis profiles,
the example database and numoracle's corpus replay a failure first, statistics and health
checks work, fixtures, failure output, which corpus cases become items."""

import json
import re
import shutil
from pathlib import Path

import pytest
from hypothesis import HealthCheck
from hypothesis import settings as hsettings
from hypothesis.errors import FailedHealthCheck

import numoracle as no
from numoracle import profiles

pytest_plugins = ["pytester"]

ROOT = Path(__file__).resolve().parents[1]
BAD = "tests.fixtures.user_kernels:rms_norm_truncating_store"
SMALL = 'formats=["bf16"], params={"casting": ("llama",), "offset": (0.0,)}, rows=(1, 2), cols=(1, 16)'


@pytest.fixture(autouse=True, scope="module")
def _triton_imported_outside():
    """pytester's in-process runs drop the modules they imported; Triton's compiled
    extension must not be imported twice in one process."""
    from numoracle import backends
    backends.select("interpreter")
    import numoracle.operators  # noqa: F401
    import triton  # noqa: F401


@pytest.fixture(autouse=True)
def _hypothesis_profile_restored():
    """An in-process run's --hypothesis-profile stays loaded in this process: load ours back."""
    before = hsettings.get_current_profile_name()
    yield
    hsettings.load_profile(before)


# a profile as Hypothesis's default but with the database in the test's own directory:
# Hypothesis resolves its default database's path once per process, here this one's
HERE = """
from hypothesis import settings
from hypothesis.database import DirectoryBasedExampleDatabase
# from Hypothesis's default profile: under CI the loaded one is its derandomized ci profile
settings.register_profile("here", settings.get_profile("default"),
                          database=DirectoryBasedExampleDatabase(".hypothesis/examples"))
"""


def _run(pytester, *args):
    pytester.syspathinsert(ROOT)          # the fixtures' user module, as a user's own package
    return pytester.runpytest_inprocess("-p", "no:cacheprovider", "--numoracle-backend", "interpreter", *args)


# ---- profiles --------------------------------------------------------------------------------

def test_profiles_are_hypothesis_profiles_with_numoracle_fields_beside():
    import numoracle.pytest_plugin  # noqa: F401  (registers them, as at pytest's start)
    assert hsettings.get_profile("ci").max_examples == 10 and hsettings.get_profile("ci").derandomize
    assert hsettings.get_profile("ci").database is None
    assert hsettings.get_profile("dev").max_examples == 100 and not hsettings.get_profile("dev").derandomize
    assert hsettings.get_profile("long").max_examples == 100_000
    assert all(hsettings.get_profile(n).deadline is None for n in profiles.NAMES)
    assert no.settings.get_profile("dev").max_rows == 32 and no.settings.get_profile("long").max_cols is None
    hsettings.load_profile("dev")
    hs, ns = profiles.current()
    assert hs.max_examples == 100 and (ns.max_rows, ns.max_cols, ns.time_budget) == (32, 512, 300.0)
    hsettings.load_profile("default")
    hs, ns = profiles.current()
    assert ns == no.settings.default and hs.database is not None     # Hypothesis's default database


def test_hypothesis_profile_option_selects_examples_and_fixtures_see_the_profile(pytester):
    pytester.makepyfile(test_user='''
from numoracle.pytest_plugin import property_test

@property_test("softmax", kernel="correct", rows=(1, 2), cols=(1, 16))
def test_counts(result):
    assert result.totals.cases == 10           # --hypothesis-profile ci: 10 examples
    assert result.seed is None                 # ci is derandomized

def test_fixtures(numoracle_backend, numoracle_settings, numoracle_corpus):
    assert numoracle_backend.name == "interpreter"
    assert (numoracle_settings.max_rows, numoracle_settings.max_cols) == (8, 256)
    assert numoracle_corpus.name == "corpus" and numoracle_corpus.parent.name == ".numoracle"
''')
    res = _run(pytester, "--hypothesis-profile", "ci")
    res.assert_outcomes(passed=2)


def test_health_checks_are_on():
    """Every health check but the two the engine justifies (too_slow, differing_executors)
    fires as in any Hypothesis test: a strategy that rejects everything fails one, instead of
    ending as an unexplained Unsatisfiable."""
    from numoracle.runner import fuzz
    from numoracle.strategies import cases
    with pytest.raises(FailedHealthCheck) as e:
        fuzz("softmax", "correct", max_examples=5, seed=1, database=None, progress=False,
             strategy=cases("softmax", max_rows=2, max_cols=16).filter(lambda c: False))
    assert "filter" in str(e.value).lower()
    assert HealthCheck.filter_too_much.name in str(e.value)


# ---- a failing property test: output, statistics, the corpus, the database -------------------

def _failure_text(out: str, name: str) -> list:
    lines = out.splitlines()
    start = next(i for i, ln in enumerate(lines) if re.match(rf"_+ {name} _+$", ln))
    end = next(i for i in range(start + 1, len(lines)) if lines[i].startswith(("=", "_")))
    return [ln for ln in lines[start + 1:end] if ln.strip()]


def test_a_failure_starts_with_the_explanation_and_ends_with_the_replay_line(pytester):
    pytester.makepyfile(test_user=f'''
from numoracle.pytest_plugin import property_test

test_bad = property_test("rms_norm", kernel="{BAD}", {SMALL})
''')
    pytester.makeconftest(HERE)
    res = _run(pytester, "--numoracle-seed", "3", "--hypothesis-show-statistics", "--hypothesis-profile", "here")
    res.assert_outcomes(failed=1)
    out = res.stdout.str()
    text = _failure_text(out, "test_bad")
    assert text[0].startswith("Kernel output outside its acceptance region (rms_norm"), text[:3]
    assert text[-1].startswith("Replay: numoracle replay "), text[-3:]
    assert any(ln.startswith("Greatest absolute difference: ") for ln in text)
    found = [ln for ln in text if ln.startswith("Found by Case(")]
    assert len(found) == 1 and "--numoracle-seed 3" in found[0], text
    # the explanation is of the shrunk case: the line says what it was shrunk to
    assert re.search(r"\), shrunk to inputs \[\d+, \d+\] x \[\d+\] in \d+ kernel runs$", found[0]), found
    assert "pytest_plugin.py" not in out and "def run(" not in out          # no plugin frames
    # saved by default, where the replay line says, and Hypothesis's database holds it
    saved = Path(text[-1].removeprefix("Replay: numoracle replay "))
    assert saved.is_dir() and saved.parent.parent == pytester.path / ".numoracle" / "corpus" / "rms_norm"
    assert any((pytester.path / ".hypothesis" / "examples").iterdir())
    # --hypothesis-show-statistics: events and targets of the search
    stats = out[out.index("Hypothesis Statistics"):]
    assert "test_user.py::test_bad" in stats and "excess in ulps" in stats and "status: reject" in stats


def test_statistics_are_shown_when_the_time_budget_ends_the_search(pytester):
    """A property test stopped by numoracle's time budget (not by Hypothesis's max_examples)
    still shows its statistics under --hypothesis-show-statistics: the phases that ran, their
    events and targets, and why it stopped."""
    pytester.makepyfile(test_user='''
from numoracle.pytest_plugin import property_test

@property_test("swiglu", kernel="correct", formats=["bf16"], rows=(1, 2), cols=(1, 16))
def test_budget(result):
    assert result.exit_reason == "time budget", result.exit_reason
''')
    pytester.makeconftest(HERE + '''
import numoracle as no
settings.register_profile("budget", settings.get_profile("here"), max_examples=100_000)
no.settings.register_profile("budget", time_budget=3.0, max_rows=2, max_cols=16)
''')
    res = _run(pytester, "--numoracle-seed", "5", "--hypothesis-show-statistics", "--hypothesis-profile", "budget")
    res.assert_outcomes(passed=1)
    out = res.stdout.str()
    stats = out[out.index("Hypothesis Statistics"):]
    body = stats[stats.index("test_user.py::test_budget:"):]
    assert "during generate phase" in body and "passing" in body, stats
    assert "status: accept" in body and "group: " in body and "excess in ulps" in body, stats
    assert "Stopped because numoracle's time budget of 3 s was spent" in body, stats


def test_budget_statistics_without_the_engine_come_from_the_runs_own_counts():
    """Where Hypothesis's engine cannot be found (its internals changed), the budget's statistics
    are made of the run's own counts and events; nothing is reported where no one collects them."""
    from collections import Counter

    from hypothesis.statistics import collector, describe_statistics

    from numoracle.runner import engine
    from numoracle.runner.outcomes import GroupStats, RunResult
    res = RunResult("softmax", "correct", "interpreter", "statistical")
    res.groups["calibration"] = GroupStats(cases=4, accept=3, uncertified=1)
    events = Counter({"status: accept": 3, "status: uncertified": 1, "group: calibration": 4})
    engine._note_budget_statistics(engine._BudgetSpent(None), 2.0, res, events)      # no collector: nothing
    got = []
    with collector.with_value(got.append):
        engine._note_budget_statistics(engine._BudgetSpent(None), 2.0, res, events)
    (stats,) = got
    text = describe_statistics(stats)
    assert "4 passing, 0 failing" in text and "75.00%, status: accept" in text and "100.00%, group: calibration" in text
    assert text.endswith("Stopped because numoracle's time budget of 2 s was spent")


@pytest.mark.slow
def test_a_failure_is_replayed_first_and_passes_once_the_kernel_is_fixed(pytester):
    """Under a random seed a property test fails and saves its case; run again, its kernel's
    first call is on that case (still failing, without a new search); fixed, the first call is
    again on that case and the test passes."""
    log = pytester.path / "calls.log"
    kernel_src = f'''
import hashlib
from tests.fixtures.user_kernels import {{which}} as _kernel

def rms_norm(x, w, **kw):
    with open({str(log)!r}, "a") as f:
        f.write(hashlib.sha1(x.float().cpu().numpy().tobytes()).hexdigest()[:12] + " " + str(tuple(x.shape)) + "\\n")
    return _kernel(x, w, **kw)
'''
    pytester.makepyfile(mykernels=kernel_src.format(which="rms_norm_truncating_store"))
    pytester.makepyfile(test_user=f'''
from numoracle.pytest_plugin import property_test

test_mine = property_test("rms_norm", kernel="mykernels:rms_norm", {SMALL})
''')

    def calls():
        lines = log.read_text().split("\n") if log.exists() else []
        log.unlink(missing_ok=True)
        return [ln.split()[0] for ln in lines if ln]

    pytester.makeconftest(HERE)
    here = ("--hypothesis-profile", "here")
    res = _run(pytester, *here)              # no seed: Hypothesis's defaults, random
    res.assert_outcomes(failed=1)
    saved = sorted((pytester.path / ".numoracle" / "corpus").glob("rms_norm/*/*/case.json"))
    assert len(saved) == 1
    from numoracle import corpus
    import hashlib
    x = corpus.load(saved[0].parent).inputs[0]
    digest = hashlib.sha1(x.float().cpu().numpy().tobytes()).hexdigest()[:12]
    first_run = calls()
    assert first_run[-1] == digest or digest in first_run

    res = _run(pytester, *here)
    res.assert_outcomes(failed=1)
    text = _failure_text(res.stdout.str(), "test_mine")
    assert text[0].startswith("Kernel output outside its acceptance region")
    assert any(ln.startswith("Replayed first: the case this test saved at ") for ln in text)
    assert text[-1] == f"Replay: numoracle replay {saved[0].parent}"
    second = calls()
    assert second and second[0] == digest and len(second) == 1          # the saved case, and no search

    # the example database keeps the search's finding (the case Hypothesis shrank)
    from hypothesis.database import DirectoryBasedExampleDatabase

    from numoracle.runner.findings import Findings
    db = DirectoryBasedExampleDatabase(str(pytester.path / ".hypothesis" / "examples"))
    kept, bad = Findings(db, "rms_norm", "mykernels:rms_norm", "statistical").load()
    assert len(kept) == 1 and not bad
    kept_x = kept[0].materialize()[0][0]
    kept_digest = hashlib.sha1(kept_x.float().cpu().numpy().tobytes()).hexdigest()[:12]

    pytester.makepyfile(mykernels=kernel_src.format(which="rms_norm_ok"))      # the fix
    res = _run(pytester, "--hypothesis-show-statistics", *here)
    res.assert_outcomes(passed=1)
    third = calls()
    assert third[0] == digest and len(third) > 2                        # the corpus's case, then
    assert third[1] == kept_digest                                      # the database's, then the search
    # passing now, the database's finding is forgotten
    assert Findings(db, "rms_norm", "mykernels:rms_norm", "statistical").load() == ([], [])


# ---- corpus items ------------------------------------------------------------------------------

def _case(dest: Path, **changes):
    src = sorted((ROOT / "corpora" / "rms_norm").glob("tests.fixtures.user_kernels.*/*/case.json"))[0].parent
    shutil.copytree(src, dest)
    meta = json.loads((dest / "case.json").read_text())
    for k, v in changes.items():
        if k == "spec":
            meta["kernel"]["spec"] = v
        elif v is None:
            meta.pop(k, None)
        else:
            meta[k] = v
    (dest / "case.json").write_text(json.dumps(meta))


def test_only_replayable_numoracle_cases_become_items(pytester):
    c = pytester.path / "corpora"
    _case(c / "a" / "regression", expect="reject")                                    # oracle regression: yes
    _case(c / "b" / "importable", expect="accept")                                    # module:function: yes
    _case(c / "c" / "main", expect="accept", spec="__main__:rms_norm")                # cannot be imported: no
    _case(c / "d" / "local", expect="accept", spec="tests.x:f.<locals>.g")            # a local function: no
    _case(c / "f" / "corrupt", schema=None)              # numoracle's arrays, case.json gone wrong: fails, so yes
    (c / "g").mkdir()
    (c / "g" / "case.json").write_text('{"something": "else"}')                      # not a case: no
    (c / "h").mkdir()
    (c / "h" / "case.json").write_text(json.dumps({**json.loads((c / "b" / "importable" / "case.json").read_text()),
                                                    "schema": "someone-else/2"}))  # no arrays either: no
    res = _run(pytester, "--collect-only", "-q")
    out = res.stdout.str()
    collected = sorted(ln.split("/")[1] for ln in out.splitlines() if "case.json::" in ln)
    assert collected == ["a", "b", "f"], out


# ---- outputs named as the reference names them ----------------------------------------------------

def test_an_old_case_replays_with_the_reference_output_names(tmp_path):
    """The committed cases predate named outputs (no names, a failure class of 'out0')."""
    from numoracle.runner.replay import replay
    src = sorted((ROOT / "corpora" / "rms_norm").glob("tests.fixtures.user_kernels.*/*/case.json"))[0].parent
    meta = json.loads((src / "case.json").read_text())
    old = meta["failure_class"][0]
    assert old in ("out0", "out1") and "name" not in meta["outputs"][0]
    r = replay(src, backend="interpreter")
    assert r["outputs"] == ["y", "rstd"] and r["failure_class"][0] == ["y", "rstd"][int(old[3:])]
    assert "out0" not in r["verdicts"]["fixed"].explain()


def test_a_property_test_naming_no_operator_fails_with_the_message_alone(pytester):
    pytester.makepyfile(test_user='''
from numoracle.pytest_plugin import property_test

test_bad = property_test("no_such_op", kernel="correct")
''')
    res = _run(pytester)
    res.assert_outcomes(failed=1)
    out = res.stdout.str()
    assert "property_test('no_such_op', kernel='correct'): unknown operator 'no_such_op'; registered:" in out
    assert "operators/__init__.py" not in out and "def resolve(" not in out      # no numoracle frames
