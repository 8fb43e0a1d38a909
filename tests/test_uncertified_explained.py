"""Uncertified explained (issue #30, item 7): an uncertified case says which site, which
reason and the input range that triggered it, in a run's per-group summary and its JSON."""

from __future__ import annotations

import torch

import numoracle as no
from numoracle.formats import fp32
from numoracle.runner.outcomes import Outcome, RunResult
from numoracle.verdict.explain import uncertified_example


@no.reference
def scaled_square(x, w):
    xf = x.to(fp32)
    return (xf * xf * w.to(fp32)).to(x.format)


def _uncertified_verdict():
    # row 1 holds 3e19, whose square leaves fp32: +inf, and +inf times w's 0 is NaN, so that
    # element is uncertified (a square past the range times a non-zero w would be an exact inf)
    x = torch.tensor([[1.0, -2.0, 0.5], [3e19, 4.0, -1.0]], dtype=torch.float32)
    w = torch.tensor([0.0, 2.0, 3.0], dtype=torch.float32)
    y = x * x * w
    return no.check(scaled_square, y, (x, w)), x, w


def test_the_first_uncertified_element_names_its_inputs_rows_and_their_range():
    v, x, w = _uncertified_verdict()
    assert v.status == "uncertified"
    assert any(r.startswith("range: fp32 mul") for r in v.certificate.reason_kinds())
    ex = uncertified_example(v)
    assert ex["element"] == "y[1, 0]"
    assert ex["inputs"][0] == "x[1] in [-1, 3e+19]", ex
    assert ex["inputs"][1] == "w in [0, 3]", ex


def test_an_accepted_verdict_has_no_uncertified_example():
    x = torch.tensor([[1.0, 2.0]], dtype=torch.float32)
    w = torch.tensor([1.0, 1.0], dtype=torch.float32)
    assert uncertified_example(no.check(scaled_square, x * x * w, (x, w))) is None


def test_a_runs_summary_carries_each_reasons_first_example_per_group():
    v, x, w = _uncertified_verdict()
    out = Outcome("uncertified", None, v, uncertified_reasons=tuple(v.certificate.reason_kinds()),
                  uncertified_example=uncertified_example(v))
    res = RunResult(op="scaled_square", kernel="k", backend="interpreter", mode="statistical")
    res.record(out, "outliers")
    res.record(Outcome("accept", None, None), "outliers")
    d = res.to_dict()
    reasons = d["uncertified_reasons"]["outliers"]
    examples = d["uncertified_examples"]["outliers"]
    assert set(examples) == set(reasons) and reasons
    for r in reasons:
        assert examples[r]["element"] == "y[1, 0]" and "x[1] in [-1, 3e+19]" in examples[r]["inputs"]
    assert out.summary()["uncertified_example"]["element"] == "y[1, 0]"


@no.reference
def square_sum(x, w):
    # terms of both signs: a sum holding a square past the range is not decided (a sum of
    # squares alone would be +inf in every order)
    xf = x.to(fp32)
    sq = xf * xf * w.to(fp32)
    return no.sum(sq, axis=-1, keepdims=True)


def test_two_failing_sites_of_one_kind_on_one_line_are_one_reason():
    v, x, w = _uncertified_verdict()
    assert len([s for s in v.certificate.failing if s.kind == "range"]) == 2     # x * x and * w
    assert v.certificate.reason_kinds() == ["range: fp32 mul [scaled_square:17]"]


def test_sites_that_fail_in_the_same_cases_are_one_cause_named_by_the_first():
    """An overflow at one site overflows the sites after it too: the summary counts the sets of
    sites that fail together, in the reference's order, and prints one line for each."""
    from numoracle.cli.run import print_result
    x = torch.tensor([[1.0, -2.0, 0.5], [3e19, 4.0, -1.0]], dtype=torch.float32)
    w = torch.tensor([1.0, -1.0, 1.0], dtype=torch.float32)
    v = no.check(square_sum, (x * x * w).sum(-1, keepdim=True), (x, w))
    reasons = tuple(v.certificate.reason_kinds())
    assert len(reasons) == 2 and reasons[0].startswith("range: fp32 mul") and "sum" in reasons[1], reasons
    res = RunResult(op="scaled_square", kernel="k", backend="interpreter", mode="statistical")
    ex = uncertified_example(v)
    for _ in range(3):
        res.record(Outcome("uncertified", None, v, uncertified_reasons=reasons, uncertified_example=ex), "outliers")
    res.record(Outcome("uncertified", None, v, uncertified_reasons=reasons[1:], uncertified_example=ex), "outliers")
    d = res.to_dict()
    assert d["uncertified_causes"]["outliers"] == [{"sites": list(reasons), "cases": 3, "example": ex},
                                                    {"sites": list(reasons[1:]), "cases": 1, "example": ex}]
    assert d["uncertified_reasons"]["outliers"][reasons[1]] == 4
    import contextlib
    import io
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        print_result(res)
    lines = [ln for ln in buf.getvalue().splitlines() if ln.startswith("  uncertified in")]
    assert lines[0] == (f"  uncertified in outliers: {reasons[0]} (3 cases; e.g. {ex['element']}: {'; '.join(ex['inputs'])})"
                        f"; later sites failing in them: {', '.join(reasons[1:])}"), lines
    assert lines[1].startswith(f"  uncertified in outliers: {reasons[1]} (1 case;") and len(lines) == 2, lines
    # cases with one first site and different later ones are one line, with every later site
    other = (reasons[0], "range: fp32 add [square_sum:99]")
    res.record(Outcome("uncertified", None, v, uncertified_reasons=other, uncertified_example=ex), "outliers")
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        print_result(res)
    lines = [ln for ln in buf.getvalue().splitlines() if ln.startswith("  uncertified in")]
    assert lines[0].startswith(f"  uncertified in outliers: {reasons[0]} (4 cases;") and lines[0].endswith(
        f"; later sites failing in them: {reasons[1]}, range: fp32 add [square_sum:99]"), lines
    assert len(lines) == 2, lines
    # each line's example is a case whose first failing site is the one named
    other_ex = {"element": "y[0, 2]", "inputs": ["x[0] in [1, 2]"]}
    res.record(Outcome("uncertified", None, v, uncertified_reasons=reasons[1:], uncertified_example=other_ex),
               "scaled_up")
    res.record(Outcome("uncertified", None, v, uncertified_reasons=reasons, uncertified_example=ex), "scaled_up")
    res.record(Outcome("uncertified", None, v, uncertified_reasons=reasons[1:], uncertified_example=ex), "scaled_up")
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        print_result(res)
    lines = [ln for ln in buf.getvalue().splitlines() if ln.startswith("  uncertified in scaled_up")]
    assert lines[0].startswith(f"  uncertified in scaled_up: {reasons[1]} (2 cases; e.g. y[0, 2]: x[0] in [1, 2])"), lines
    assert lines[1].startswith(f"  uncertified in scaled_up: {reasons[0]} (1 case; e.g. {ex['element']}:"), lines
    causes = res.to_dict()["uncertified_causes"]["scaled_up"]
    assert causes[0] == {"sites": list(reasons[1:]), "cases": 2, "example": other_ex}, causes
