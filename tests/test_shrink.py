"""Shrinking: the element-level minimizer keeps the failure class, and the
planted rms_norm faults of a user's module are found by ``numoracle check``,
shrunk to <= 2 rows and a few columns, saved with their certificate, and
reproduced by ``numoracle replay`` in both modes."""

import json
import time
from pathlib import Path

import pytest
import torch

from numoracle.cli import main
from numoracle.runner.outcomes import Outcome
from numoracle.runner.shrink import input_roles, minimize

ROOT = Path(__file__).resolve().parents[1]
USER = "tests.fixtures.user_kernels:"


def test_minimize_reduces_rows_columns_values_and_never_drifts():
    x = torch.linspace(-3, 3, 6 * 40, dtype=torch.float32).reshape(6, 40)
    x[3, 17] = 1000.0          # the failure being shrunk: an element >= 500
    x[1, 2] = -1000.0          # another failure (<= -500, in another output): never what is left
    w = torch.full((40,), 0.3, dtype=torch.float32)
    calls = []

    def evaluate(inputs):
        calls.append(inputs)
        a = inputs[0]
        big, small = bool((a >= 500).any()), bool((a <= -500).any())
        if big:
            return Outcome("reject", failure_class=("y", "outside", "big"), inputs=inputs)
        if small:
            return Outcome("reject", failure_class=("rstd", "outside", "small"), inputs=inputs)
        return Outcome("accept", inputs=inputs)

    start = evaluate((x, w))
    roles = [["rows", "cols"], ["cols"]]
    best, used = minimize(evaluate, start, roles=roles, seconds=30, evaluations=2000)
    a, ww = best.inputs
    assert best.failure_class == ("y", "outside", "big")
    assert a.shape == (1, 1) and ww.shape == (1,)
    assert float(a[0, 0]) == 1024.0            # the nearest power of two still fails
    assert float(ww[0]) == 0.0                 # the whole weight tensor went to 0 (it plays no part)
    assert used == len(calls) - 1


def test_a_reject_shrinks_on_while_the_dominant_site_of_its_width_moves_with_the_shape():
    """The site with the largest share of the worst element's width is a description of the
    region, not of the fault: a row sum's share falls as the row shortens.  The shrinker keeps a
    reject's output and kind only (the drift test above keeps two outputs apart)."""
    x = torch.linspace(-3, 3, 4 * 40, dtype=torch.float32).reshape(4, 40)
    x[2, 30] = 1000.0

    def evaluate(inputs):
        a = inputs[0]
        if bool((a >= 500).any()):
            site = "sum over n" if a.shape[-1] > 8 else "exp"
            return Outcome("reject", failure_class=("y", "outside", site), inputs=inputs)
        return Outcome("accept", inputs=inputs)

    best, _ = minimize(evaluate, evaluate((x,)), roles=[["rows", "cols"]], seconds=30, evaluations=2000)
    assert best.inputs[0].shape == (1, 1) and best.failure_class == ("y", "outside", "exp")


def test_a_users_padding_fault_shrinks_to_one_short_row(monkeypatch):
    """A log-softmax that pads masked lanes with 0: found on two rows of 205 columns, where the
    row sum's share of the width is the largest, it shrinks to one row of a few columns, where
    the log's is (held to the first site it stopped at 2 x 187 after 400 kernel runs, its
    budget: docs/results/2026-12-06-shrink-failure-key.md)."""
    from numoracle import backends
    from numoracle.runner.execute import judge
    from numoracle.runner.shrink import minimize as shrink
    backends.select("interpreter")
    monkeypatch.chdir(ROOT)
    from numoracle.strategies import Case
    from tests.fixtures import user_log_softmax as U
    (x,), _ = Case(U.op.name, fmt="bf16", rows=2, cols=205, group="calibration", seed=3).materialize(op=U.op)
    found = judge(U.op, U.log_softmax_pad_zero, (x,), {})
    assert found.status == "reject" and found.failure_class[2].startswith("fp32 sum over n"), found.failure_class
    best, used = shrink(lambda inputs: judge(U.op, U.log_softmax_pad_zero, inputs, {}), found,
                        roles=input_roles(U.op, "bf16"), seconds=60, evaluations=400)
    assert best.status == "reject" and best.failure_class[:2] == ("y", "outside")
    assert best.inputs[0].shape[0] == 1 and best.inputs[0].shape[1] <= 4, (best.inputs[0].shape, used)


def test_input_roles_from_the_operator_example():
    from numoracle.operators import get
    assert input_roles(get("rms_norm"), "bf16") == [["rows", "cols"], ["cols"]]
    assert input_roles(get("cross_entropy"), "bf16") == [["rows", "cols"], ["rows"]]


@pytest.mark.parametrize("fault", ["truncating_store", "bf16_accumulation", "eps_after_rsqrt"])
def test_check_finds_shrinks_saves_and_replays_a_planted_fault(fault, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(ROOT)
    kernel = USER + "rms_norm_" + fault
    t0 = time.time()
    rc = main(["check", "rms_norm", "--kernel", kernel, "--backend", "interpreter", "--corpus", str(tmp_path),
               "--shrink-seconds", "20", "--json", "--quiet"])
    elapsed = time.time() - t0
    res = json.loads(capsys.readouterr().out)
    assert rc == 1 and res["exit_reason"] == "first counterexample"
    assert elapsed < 60
    ce = res["counterexample"]
    assert ce["status"] == "reject" and ce["verdict"]["confirmation"] == "confirmed"
    x_shape = ce["shape"][0]
    assert x_shape[0] <= 2 and x_shape[1] <= 16, x_shape        # one block of columns at most
    saved = Path(res["saved"])
    meta = json.loads((saved / "case.json").read_text())
    assert meta["schema"] == "numoracle.corpus/1" and meta["kernel"]["spec"] == kernel
    assert meta["kernel"]["registered"] is False
    assert meta["verdict"]["statistical"]["status"] == meta["verdict"]["fixed"]["status"] == "reject"
    assert meta["certificate"]["holds"] is True and meta["certificate"]["sites"]
    assert meta["inputs"][0]["shape"] == x_shape
    # replay: the saved kernel re-run (as recorded, or named on the command line), then the saved
    # outputs re-judged
    for extra, ran in (([], True), (["--kernel", kernel], True), (["--saved-outputs"], False)):
        rc = main(["replay", str(saved), "--json", *extra])
        rep = json.loads(capsys.readouterr().out)[0]
        assert rc == 1 and rep["statuses"] == {"statistical": "reject", "fixed": "reject"}
        assert rep["kernel_ran"] is ran and rep["certificate_same"]


def test_input_roles_follow_the_case_where_it_stores_an_operand_packed():
    """The roles come from the operator's seed-0 example (e4m3 x e4m3 for the MX matmul);
    a case whose b operand is packed fp4 (two columns a byte) has half as many columns
    there: whole blocks of them are taken in bytes, never with the column indices."""
    from numoracle.operators import get
    op = get("mx_scaled_matmul")
    example = input_roles(op, "bf16")
    inputs, _ = op.make_example(1, torch.bfloat16, "uniform", 4, 96)
    assert inputs[2].dtype == torch.float4_e2m1fn_x2 and inputs[2].shape[-1] == 48
    assert example[2] == [None, "cols"]
    assert input_roles(op, "bf16", inputs) == [["rows", "cols"], ["rows", "groups"], [None, "cols_packed"],
                                               [None, "groups"]]
    # an operand of another rank than the example's: none of its dimensions is shrunk
    odd = list(inputs)
    odd[0] = inputs[0].reshape(-1)
    assert input_roles(op, "bf16", odd)[0] == [None]


def test_a_case_with_a_packed_fp4_operand_shrinks_to_one_block_and_replays(tmp_path, capsys):
    rc = main(["check", "mx_scaled_matmul", "--kernel", "faulty:nibble_swapped", "--backend", "interpreter",
               "--corpus", str(tmp_path), "--shrink-seconds", "30", "--json", "--quiet"])
    res = json.loads(capsys.readouterr().out)
    assert rc == 1 and res["exit_reason"] == "first counterexample" and not res["warnings"], res["warnings"]
    a, a_scales, b, b_scales = res["counterexample"]["shape"]
    assert a == [1, 32] and b[-1] == 16, res["counterexample"]["shape"]     # one 32-column block, 16 bytes of b
    rc = main(["replay", res["saved"], "--json"])
    rep = json.loads(capsys.readouterr().out)[0]
    assert rc == 1 and rep["statuses"] == {"statistical": "reject", "fixed": "reject"}


def test_a_shrinker_failure_keeps_and_saves_the_finding_as_found(tmp_path, monkeypatch, capsys):
    from numoracle.runner import engine

    def broken(*args, **kwargs):
        raise RuntimeError("planted shrinker bug")
    monkeypatch.setattr(engine, "minimize", broken)
    rc = main(["check", "rms_norm", "--kernel", USER + "rms_norm_truncating_store", "--backend", "interpreter",
               "--corpus", str(tmp_path), "--json", "--quiet"])
    res = json.loads(capsys.readouterr().out)
    assert rc == 1 and res["counterexample"]["status"] == "reject" and res["saved"]
    assert any("shrinking stopped by RuntimeError: planted shrinker bug" in w for w in res["warnings"])
    assert res["shrink"]["evaluations"] == 0
