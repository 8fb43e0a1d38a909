"""A fuzz run's findings in the example database (``runner.findings``): kept as cases, replayed
first, forgotten once they pass, bad entries skipped with a warning, and nothing else written
(the search runs without Hypothesis's database and its Pareto front of targets)."""

from pathlib import Path

import pytest
from hypothesis.database import InMemoryExampleDatabase

from numoracle.runner import fuzz
from numoracle.runner.findings import Findings, encode, key
from numoracle.strategies import Case, cases

ROOT = Path(__file__).resolve().parents[1]
USER = "tests.fixtures.user_kernels:"
SMALL = {"strategy": cases("rms_norm", max_rows=2, max_cols=16, formats=["bf16"],
                            params={"casting": ("llama",), "offset": (0.0,)})}


@pytest.fixture(autouse=True)
def _repo_root(monkeypatch):
    monkeypatch.chdir(ROOT)        # user kernels are named module:function from here


def _case(seed=0, rows=1, cols=8):
    return Case("rms_norm", "bf16", rows, cols, "calibration", 0, (), (("casting", "llama"), ("offset", 0.0)), (),
                seed)


def test_a_passing_run_writes_nothing_to_the_database():
    # with the database handed to Hypothesis, every run kept a Pareto front of its targets there
    db = InMemoryExampleDatabase()
    res = fuzz("rms_norm", "correct", max_examples=30, seed=2, shrink=False, database=db, **SMALL)
    assert res.exit_reason == "examples exhausted" and res.totals.cases >= 30
    assert not any(db.data.values())


def test_a_finding_is_kept_replayed_first_and_forgotten_once_fixed():
    db = InMemoryExampleDatabase()
    kw = dict(max_examples=40, seed=5, shrink=False, database=db, **SMALL)
    bad = USER + "rms_norm_truncating_store"
    first = fuzz("rms_norm", bad, **kw)
    assert first.exit_reason == "first counterexample"
    kept, warnings = Findings(db, "rms_norm", bad, "statistical").load()
    assert kept == [first.counterexample.case] and not warnings
    # another kernel, another mode: not theirs
    assert Findings(db, "rms_norm", USER + "rms_norm_ok", "statistical").load() == ([], [])
    assert Findings(db, "rms_norm", bad, "fixed").load() == ([], [])

    again = fuzz("rms_norm", bad, **{**kw, "seed": 6})
    assert again.totals.cases == 1 and again.counterexample.case == kept[0]
    assert len(Findings(db, "rms_norm", bad, "statistical").load()[0]) == 1     # kept once
    # kept as a case, not as Hypothesis's choices: a run drawing other shapes replays it as found
    other = cases("rms_norm", rows=3, cols=(40, 48), formats=["bf16"], params={"casting": ("gemma",)})
    third = fuzz("rms_norm", bad, **{**kw, "seed": 7, "strategy": other})
    assert third.totals.cases == 1 and third.counterexample.case == kept[0]

    # the same name, now a correct kernel: the saved case runs first, passes and is forgotten
    db.save(key("rms_norm", USER + "rms_norm_ok", "statistical"), encode(kept[0]))
    fixed = fuzz("rms_norm", USER + "rms_norm_ok", **{**kw, "max_examples": 5})
    assert fixed.exit_reason == "examples exhausted" and fixed.totals.accept >= 1
    assert Findings(db, "rms_norm", USER + "rms_norm_ok", "statistical").load() == ([], [])


def test_entries_that_are_not_cases_of_the_operator_are_skipped_with_a_warning():
    db = InMemoryExampleDatabase()
    k = key("rms_norm", "correct", "statistical")
    db.save(k, b"\x80not json")
    db.save(k, b'{"op": "rms_norm", "fmt": "bf16"}')                       # no shape
    other = Case("softmax", "bf16", 1, 8, "calibration", 0, (), (), (), 0)
    db.save(k, encode(other))
    good = _case(seed=3)
    db.save(k, encode(good))
    cases_, warnings = Findings(db, "rms_norm", "correct", "statistical").load()
    assert cases_ == [good]
    assert len(warnings) == 3
    assert all("not a case of rms_norm" in w and "was skipped" in w for w in warnings)
    assert any("UnicodeDecodeError" in w for w in warnings) and any("KeyError: 'rows'" in w for w in warnings)
    assert any("a case of 'softmax'" in w for w in warnings)
    res = fuzz("rms_norm", "correct", max_examples=3, seed=1, shrink=False, database=db, **SMALL)
    assert res.exit_reason == "examples exhausted"
    assert [w for w in res.warnings if "not a case of rms_norm" in w] == warnings


def test_the_entry_round_trips_every_field():
    c = Case("rms_norm", "fp16", 3, 40, "heavy_tailed", -4, ((5, "zero"), (17, "max_finite")),
             (("casting", "gemma"), ("offset", 1.0)), (("BLOCK", 64),), 12345)
    db = InMemoryExampleDatabase()
    Findings(db, "rms_norm", "correct", "statistical").save(c)
    assert Findings(db, "rms_norm", "correct", "statistical").load() == ([c], [])


def test_a_finding_outside_the_operator_s_domain_now_is_kept_but_not_replayed():
    # the developer narrowed the domain after the finding (a shape the reference refuses)
    from numoracle.operators.operator import Domain
    db = InMemoryExampleDatabase()
    k = key("rms_norm", "correct", "statistical")
    narrow, wide = _case(seed=1, cols=2), _case(seed=2, cols=8)
    db.save(k, encode(narrow))
    db.save(k, encode(wide))
    domain = Domain(rows=(1, 4), cols=(4, 64), formats=("bf16",), params={"casting": ("llama", "gemma")})
    cases_, warnings = Findings(db, "rms_norm", "correct", "statistical", domain).load()
    assert cases_ == [wide]
    assert len(warnings) == 1 and "outside rms_norm's domain now" in warnings[0] and "cols=2 is outside (4, 64)" in \
        warnings[0] and "not replayed" in warnings[0]
    assert len(list(db.fetch(k))) == 2          # kept: widening the domain judges it again
    for changed, why in ((Domain(formats=("fp16",)), "format bf16 is not among ('fp16',)"),
                         (Domain(rows=(2, 4)), "rows=1 is outside (2, 4)"),
                         (Domain(params={"casting": ("gemma",)}), "parameter casting='llama' is not among")):
        assert why in changed.outside(wide)
    assert Domain().outside(wide) is None
