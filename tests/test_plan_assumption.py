"""numoracle.plan.assumption: the plan check as one line of a verdict's assumptions, made once per
(kernel, input signature, parameters) and never raising for a kernel it cannot check."""

import importlib
import threading

import pytest
import torch

from numoracle import backends

backends.select("interpreter")

from numoracle import operators, plan  # noqa: E402
from numoracle.errors import InvalidArgument  # noqa: E402
# the module (numoracle.plan's "check" is its function)
C = importlib.import_module("numoracle.plan.check")

import test_plan_kernels as PK  # noqa: E402


@pytest.fixture
def checks(monkeypatch):
    """The number of plan checks made (the cache emptied first)."""
    plan.assumption.cache_clear()
    calls = []
    real = C.check

    def counted(*a, **k):
        calls.append(1)
        return real(*a, **k)
    monkeypatch.setattr(C, "check", counted)
    yield calls
    plan.assumption.cache_clear()


def test_one_check_per_signature_and_parameters(checks):
    op = operators.get("rms_norm")
    inputs, params = op.example(0)
    line = plan.assumption(op, "correct", inputs, params)
    assert line == "precision plan checked against the compiled kernel (cuda sm90): no disagreement"
    # other values of the same dtypes and shapes: the cached line
    other = [torch.randn_like(t) if t.is_floating_point() else t for t in inputs]
    assert plan.assumption("rms_norm", "correct", other, params) == line and len(checks) == 1
    # another format is another compiled kernel
    inputs16, params16 = op.example(0, dtype=torch.float16)
    assert plan.assumption(op, "correct", inputs16, params16).endswith("no disagreement") and len(checks) == 2
    # threads asking for one key wait for the one check
    results = []
    inputs32, params32 = op.example(0, dtype=torch.float32)
    ts = [threading.Thread(target=lambda: results.append(plan.assumption(op, "correct", inputs32, params32)))
          for _ in range(3)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert len(set(results)) == 1 and len(results) == 3 and len(checks) == 3


def test_a_disagreement_is_the_line_and_what_cannot_be_checked_says_why(checks):
    op = operators.get("rms_norm")
    inputs, params = op.example(0)
    line = plan.assumption(op, "1oversqrt", inputs, params)
    assert "1 disagreement(s), first: the kernel computes sqrt where the reference has rsqrt" in line
    line = plan.assumption(op, PK.uncompilable, inputs, params)
    assert line.startswith("precision plan not checked: cannot compile uncompilable_kernel for cuda sm90"), line

    def raises(x, w, **k):
        raise RuntimeError("no launch today")
    line = plan.assumption(op, raises, inputs, params)
    assert line.startswith("precision plan not checked: ") and "no launch today" in line
    # a launcher without Triton launches has no compiled plan: nothing to say
    assert plan.assumption(op, lambda x, w, **k: x * 2, inputs, params) is None
    # names that name nothing are the caller's error
    with pytest.raises(InvalidArgument):
        plan.assumption(op, "no_such_kernel", inputs, params)


def test_the_runner_and_check_carry_the_line_only_with_plan_check_on(checks):
    import numoracle as no
    from numoracle.runner import judge
    op = operators.get("rms_norm")
    inputs, params = op.example(0)
    kfn = op.kernels["correct"]
    # off by default: no check made, nothing in the verdict
    out = judge(op, kfn, inputs, params)
    assert out.status == "accept" and out.verdict.assumptions.plan is None and not checks
    assert "plan:" not in out.verdict.explain()
    with no.settings(plan_check=True):
        out = judge(op, kfn, inputs, params)
        line = "precision plan checked against the compiled kernel (cuda sm90): no disagreement"
        assert out.verdict.assumptions.plan == line and len(checks) == 1
        assert f"plan: {line}" in out.verdict.explain() and out.verdict.to_dict()["assumptions"]["plan"] == line
        # other values of one signature: the cached line, no second check
        other = [torch.randn_like(t) if t.is_floating_point() else t for t in inputs]
        assert judge(op, kfn, other, params).verdict.assumptions.plan == line and len(checks) == 1
        # a disagreement is stated; the verdict itself is unchanged by it
        out = judge(op, op.kernels["1oversqrt"], inputs, params)
        assert out.status == "accept" and "1 disagreement(s)" in out.verdict.assumptions.plan
        # no.check with the launcher named
        y = kfn(*inputs, **params)
        v = no.check(op.reference, y, inputs, params, kernel=kfn)
        assert v.assumptions.plan == line
        # a launcher that exits, or a kernel argument that names nothing: a line, not an exception
        def exits(*a, **k):
            raise SystemExit(3)
        v = no.check(op.reference, y, inputs, params, kernel=exits)
        assert v.status == "accept" and v.assumptions.plan.startswith("precision plan not checked: ")
        v = no.check(op.reference, y, inputs, params, kernel="not a launcher")
        assert v.status == "accept" and v.assumptions.plan.startswith("precision plan not checked: ")
    # without kernel= there is nothing to check, whatever the setting
    with no.settings(plan_check=True):
        assert no.check(op.reference, y, inputs, params).assumptions.plan is None


def test_the_launcher_runs_on_copies_with_the_inputs_strides_and_alignment(checks):
    from numoracle.plan.assume import _copy
    x = torch.randn(70)[1:65].reshape(8, 8)        # 4 bytes past a 16-byte boundary
    y = _copy(x)
    assert y.data_ptr() != x.data_ptr() and y.data_ptr() % 16 == x.data_ptr() % 16
    assert y.stride() == x.stride() and torch.equal(y, x)
    t = torch.randn(8, 16).t()
    assert _copy(t).stride() == t.stride()
    e = torch.randn(4, 1).expand(4, 8)             # overlapping: the tensor itself
    assert _copy(e) is e


def test_replay_carries_the_line_when_it_reruns_the_kernel(tmp_path, checks):
    import numoracle as no
    from numoracle import corpus
    from numoracle.runner import judge, replay
    from numoracle.strategies import Case
    op = operators.get("rms_norm")
    case = Case("rms_norm", "bf16", 2, 8, "calibration", 0, (), (("casting", "llama"), ("offset", 0.0)), (), 0)
    out = judge(op, op.kernels["correct"], *case.materialize(), case=case)
    path = corpus.save(tmp_path, op, "correct", out, backend="interpreter", mode="statistical", expect="accept")
    assert all(v.assumptions.plan is None for v in replay(path)["verdicts"].values())
    with no.settings(plan_check=True):
        r = replay(path)
        assert r["kernel_ran"] and all(v.assumptions.plan.endswith("no disagreement") for v in r["verdicts"].values())
        # saved outputs re-judged: no kernel ran, nothing to say
        r = replay(path, saved_outputs=True)
        assert all(v.assumptions.plan is None for v in r["verdicts"].values())
