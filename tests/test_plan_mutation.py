"""The mutation engine's mutants against the plan check: those that change the compiled precision
plan are flagged statically (at least 90% of each mutation operator's), and none whose plan is
unchanged is flagged (docs/plan.md; the full table is docs/results/2026-12-01-plan-mutants.txt)."""

import pytest

from numoracle import backends

backends.select("interpreter")

from numoracle import operators  # noqa: E402
from numoracle.plan import study  # noqa: E402


def _rows(name, kinds=None, only=None, first_example=False):
    op = operators.get(name)
    exs = study.examples(op, formats=("bf16",))
    rows = study.mutation_study(op, exs[:1] if first_example else exs, kinds=kinds)
    return [r for r in rows if only is None or only(r)]


def test_a_sum_in_the_storage_format_is_flagged_and_a_changed_eps_is_not():
    rows = _rows("rms_norm", kinds=["reduction_in_storage", "eps_changed"],
                 only=lambda r: r.kernel == "correct", first_example=True)
    red = [r for r in rows if r.operator == "reduction_in_storage"]
    eps = [r for r in rows if r.operator == "eps_changed"]
    assert red and all(r.plan_changed and r.flagged for r in red), [r.to_dict() for r in red]
    assert eps and not any(r.plan_changed or r.flagged for r in eps), [r.to_dict() for r in eps]


@pytest.mark.slow
def test_plan_changing_mutants_are_flagged_and_unchanged_ones_are_not():
    rows = [r for name in ("rms_norm", "softmax", "swiglu", "geglu", "layer_norm", "cross_entropy",
                           "per_token_group_quant_fp8", "geglu_exact") for r in _rows(name)]
    assert not [r.to_dict() for r in rows if r.flagged_on_unchanged]
    summary = study.summary(rows)
    for kind, s in summary.items():
        if s.get("plan_changed", 0) >= 5:
            assert s["flagged"] >= 0.9 * s["plan_changed"], (kind, s)
