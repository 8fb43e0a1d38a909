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
