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
    # row 1 holds 3e19, whose square leaves fp32: only that row is uncertified
    x = torch.tensor([[1.0, -2.0, 0.5], [3e19, 4.0, -1.0]], dtype=torch.float32)
    w = torch.tensor([1.0, 2.0, 3.0], dtype=torch.float32)
    y = x * x * w
    return no.check(scaled_square, y, (x, w)), x, w


def test_the_first_uncertified_element_names_its_inputs_rows_and_their_range():
    v, x, w = _uncertified_verdict()
    assert v.status == "uncertified"
    assert any(r.startswith("range: fp32 mul") for r in v.certificate.reason_kinds())
    ex = uncertified_example(v)
    assert ex["element"] == "y[1, 0]"
    assert ex["inputs"][0] == "x[1] in [-1, 3e+19]", ex
    assert ex["inputs"][1] == "w in [1, 3]", ex


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
