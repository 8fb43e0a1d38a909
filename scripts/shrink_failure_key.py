"""Shrink a user's log-softmax padding fault (tests/fixtures/user_log_softmax.py) from four
fixed cases and print: the group, the dominant site of the finding, the shape it shrank to,
the kernel runs used (budget 400) and the dominant site at the end.

    PYTHONPATH=. python scripts/shrink_failure_key.py

docs/results/2026-12-06-shrink-failure-key.md compares it before and after the shrinker kept
only a reject's output and kind."""
import torch, sys
from numoracle import backends
backends.select("interpreter")
from numoracle.runner.execute import judge
from numoracle.runner.shrink import minimize, input_roles
from numoracle.strategies import Case
from tests.fixtures import user_log_softmax as U
for grp, seed, r, c in [("calibration", 3, 2, 205), ("normal", 0, 2, 187), ("laplace", 1, 3, 150), ("shifted_mean", 2, 2, 100)]:
    (x,), _ = Case("user_log_softmax", fmt="bf16", rows=r, cols=c, group=grp, seed=seed).materialize(op=U.op)
    found = judge(U.op, U.log_softmax_pad_zero, (x,), {})
    if found.failure_class is None:
        print(grp, found.status); continue
    best, used = minimize(lambda i: judge(U.op, U.log_softmax_pad_zero, i, {}), found, roles=input_roles(U.op, "bf16"), seconds=60, evaluations=400)
    print(grp, found.failure_class[2][:20], tuple(best.inputs[0].shape), used, best.failure_class[2][:20])
