"""The mutation engine's mutants against the plan check: those that change the compiled precision
plan are flagged statically, but for the two plan changes docs/results/2026-12-01-plan-notes.md
explains, and none whose plan is unchanged is flagged (the table per mutation operator, over all
operators, is docs/results/2026-12-01-plan-mutants.txt)."""

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


# the plan changes the check does not see (docs/results/2026-12-01-plan-notes.md): both make
# rms_norm's casting="none" path compute ms + eps as a bf16 add, which is its reference's own plan,
# where the kernel adds in fp32 and rounds; one bf16 rounding of that sum either way
UNSEEN = {("rms_norm", "earlier_downcast", "_inv_rms", "ms + EPS: round ms to storage first"),
          ("rms_norm", "widening_dropped", "_inv_rms", "ms.to(fmt).to(tl.float32) -> ms.to(fmt)")}


@pytest.mark.slow
def test_plan_changing_mutants_are_flagged_and_unchanged_ones_are_not():
    rows = [r for name in ("rms_norm", "softmax", "swiglu", "geglu", "layer_norm", "cross_entropy",
                           "per_token_group_quant_fp8", "geglu_exact") for r in _rows(name)]
    assert not [r.to_dict() for r in rows if r.flagged_on_unchanged]
    missed = {(r.op, r.operator, r.function, r.change) for r in rows if r.plan_changed and not r.flagged}
    assert missed <= UNSEEN, missed - UNSEEN
    changed = [r for r in rows if r.plan_changed]
    # these eight operators' mutants hold 84 plan changes (2026-12-01): far fewer would mean the
    # study stopped seeing them, not that the check got better
    assert len(changed) >= 50 and sum(r.flagged for r in changed) >= 0.9 * len(changed)


def test_a_dropped_bitcast_that_makes_the_integer_bits_the_scale_is_flagged():
    """mx_scaled_matmul's _e8m0_value builds 2^E from its bits, ((E + 127) << 23).to(fp32,
    bitcast=True); the widening_dropped mutant drops the bitcast, so tl.where's int32 is converted
    by value: every operand scaled by (E + 127)·2^23. No rounding is added or removed (the product
    is exact), but the reader sees an exponent field converted by value and flags it."""
    rows = _rows("mx_scaled_matmul", kinds=["widening_dropped"], first_example=True)
    (r,) = [r for r in rows if r.function == "_e8m0_value"]
    assert r.plan_changed and r.flagged and any("by value, not by a bitcast" in m for m in r.new), r.to_dict()
    assert not [x.to_dict() for x in rows if x.flagged_on_unchanged]
