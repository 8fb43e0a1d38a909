"""A reduction whose order or depth comes from the kernel's launch configuration (issue #30,
item 5): a reference reads a constexpr of the launch through ``no.launch()``; the runner
records every launch of the call it judges (in process and in the worker), an autotuned
kernel's chosen tile included; the verdict, a saved case and its replay read those values.
Before this, a reference could not say "the tile the autotuner chose" and had to take the
``"any"`` order's n - 1 roundings."""

from __future__ import annotations

import json

import pytest
import torch

import numoracle as no
from numoracle import backends, corpus, operators
from numoracle.formats import fp32
from numoracle.runner.execute import execute, judge
from numoracle.runner.replay import replay

backends.select("interpreter")      # before the kernels are imported: @triton.jit reads TRITON_INTERPRET
from tests.fixtures.launch_op import tiled_sum  # noqa: E402
from tests.fixtures.user_kernels import tiled_row_sum, tiled_row_sum_bf16_tiles  # noqa: E402


@no.reference
def any_order_sum(x):
    return no.sum(x.to(fp32), axis=-1)


def _x(rows=3, cols=256, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(rows, cols, generator=g) * 8).to(torch.bfloat16)


@pytest.mark.parametrize("isolate", [False, True])
@pytest.mark.parametrize("choice,block", [("0", 16), ("BLOCK=64", 64)])
def test_the_runner_records_the_autotuned_tile_in_process_and_in_the_worker(isolate, choice, block):
    with no.settings(autotune_config=choice):
        ran = execute(tiled_row_sum, (_x(),), {}, isolate=isolate)
    assert ran.ok, ran.error
    assert ran.launch["BLOCK"] == block


def test_the_launch_tile_gives_a_tighter_region_than_any_order_and_both_accept():
    x = _x()
    with no.settings(autotune_config="0"):
        ran = execute(tiled_row_sum, (x,), {}, isolate=False)
    v = no.check(tiled_sum, ran.outputs, (x,), mode="fixed", launch=ran.launch)
    w = no.check(any_order_sum, ran.outputs, (x,), mode="fixed")
    assert v.status == w.status == "accept"
    width = lambda verdict: float((verdict.outputs[0].hi - verdict.outputs[0].lo).max())   # noqa: E731
    # depth 15 + 15 = 30 against 255
    assert width(v) < width(w) / 4
    assert "BLOCK" not in tiled_sum.param_defaults and tiled_sum.launch_params.keys() == {"BLOCK"}


def test_a_reference_reading_the_launch_without_one_says_how_to_give_it():
    x = _x()
    y = x.float().sum(-1)
    with pytest.raises(no.InvalidArgument, match=r"reads BLOCK from the kernel's launch .*launch=\{'BLOCK'"):
        no.check(tiled_sum, y, (x,))
    assert no.check(tiled_sum, y, (x,), params={"BLOCK": 64}).status == "accept"      # params win
    with pytest.raises(no.InvalidArgument, match=r"several values \[16, 64\]"):
        no.check(tiled_sum, y, (x,), launch={"BLOCK": [16, 64]})

    @no.reference
    def with_default(x, *, BLOCK=no.launch(64)):
        return no.sum(x.to(fp32), axis=-1, order=(BLOCK - 1) + (-(-x.shape[-1] // BLOCK) - 1))
    assert no.check(with_default, y, (x,)).status == "accept"


def _op():
    return operators.resolve("tests.fixtures.launch_op:OP")


def test_a_planted_fault_under_the_launch_tile_is_rejected_saved_with_its_launch_and_replayed(tmp_path):
    op = _op()
    x = _x(seed=3)
    with no.settings(autotune_config="0"):
        good = judge(op, tiled_row_sum, (x,), {}, mode="fixed", isolate=False)
        bad = judge(op, tiled_row_sum_bf16_tiles, (x,), {}, mode="fixed", isolate=False)
    assert good.status == "accept" and good.launch["BLOCK"] == 16
    assert bad.status == "reject", bad.verdict.explain()
    path = corpus.save(tmp_path, op, "tests.fixtures.user_kernels:tiled_row_sum_bf16_tiles", bad,
                       backend="interpreter", mode="fixed")
    meta = json.loads((path / "case.json").read_text())
    assert meta["launch"]["BLOCK"] == 16
    # the saved outputs re-judged with the saved launch values
    r = replay(path, saved_outputs=True)
    assert r["status"] == "reproduced", r


@pytest.mark.parametrize("choice", ["0", "1"])
def test_the_correct_tiled_kernel_is_accepted_over_shapes_and_seeds_under_its_launch_depth(choice):
    op = _op()
    with no.settings(autotune_config=choice):
        for seed, cols in enumerate((1, 15, 16, 17, 100, 255, 512)):
            x = _x(rows=2, cols=cols, seed=seed)
            for mode in ("statistical", "fixed"):
                out = judge(op, tiled_row_sum, (x,), {}, mode=mode, isolate=False)
                assert out.status == "accept", (choice, cols, mode, out.verdict.explain())


def test_a_replay_that_re_runs_the_kernel_reads_the_re_run_launch(tmp_path):
    op = _op()
    with no.settings(autotune_config="0"):
        bad = judge(op, tiled_row_sum_bf16_tiles, (_x(seed=3),), {}, mode="fixed", isolate=False)
    path = corpus.save(tmp_path, op, "tests.fixtures.user_kernels:tiled_row_sum_bf16_tiles", bad,
                       backend="interpreter", mode="fixed")
    with no.settings(autotune_config="BLOCK=64"):
        r = replay(path, isolate=False)
    assert r["kernel_ran"] and r["status"] == "reproduced", r
    with no.settings(autotune_config="BLOCK=64"):
        fixed = replay(path, kernel="tests.fixtures.user_kernels:tiled_row_sum", isolate=False)
    assert fixed["status"] == "ok" and fixed["passes"], fixed


def test_the_kernel_signature_leaves_out_what_the_reference_reads_from_the_launch():
    """``numoracle ops`` showed ``kernel(x, *, BLOCK)``, as if the kernel took the tile as a keyword;
    the runner never passes it (and refuses a kernel by that signature only where it cannot take
    the reference's inputs and other parameters)."""
    from numoracle.operators.choose import resolve
    op = _op()
    assert op.kernel_signature() == "kernel(x) -> y  (the reference reads BLOCK from its launch)"
    assert resolve(op, tiled_row_sum)[0] is tiled_row_sum


def test_the_plan_check_gives_the_reference_the_launch_it_reads():
    """``numoracle plan`` and the verdict's plan assumption ran the reference without the
    launch, so a reference reading ``BLOCK=no.launch()`` raised inside the plan reader."""
    from numoracle.cli import main
    from numoracle.plan import check_plan
    op = _op()
    inputs, params = op.example(3)
    with no.settings(autotune_config="0"):
        report = check_plan(op, "correct", inputs, params)
        assert report.ok, report.explain()
        with no.settings(plan_check=True):
            out = judge(op, tiled_row_sum, inputs, params, mode="fixed", isolate=False)
    assert out.status == "accept"
    lines = [a for a in out.verdict.assumptions.lines() if a.startswith("plan:")]
    assert lines == ["plan: precision plan checked against the compiled kernel (cuda sm90): no disagreement"], lines
    assert main(["plan", "tests.fixtures.launch_op:OP"]) == 0


@no.reference
def tiled_sum_by_tiles(x, *, BLOCK=no.launch()):
    """The tiled sum written as the kernel runs it: a Python loop over the BLOCK-wide tiles."""
    xf, n, acc = x.to(fp32), x.shape[-1], None
    for start in range(0, n, BLOCK):
        tile = no.sum(xf[:, start:start + BLOCK], axis=-1)
        acc = tile if acc is None else acc + tile
    return acc


def test_a_reduction_a_python_loop_runs_per_tile_is_one_level_of_the_plan():
    """The kernel's loop body is one level of its IR however often it runs; the reference's
    loop ran its no.sum once per tile, and the plan counted each run whose error term reached
    the output apart: at 100 columns (7 tiles) 3 reductions against the kernel's 2."""
    from numoracle.plan import check_plan
    from numoracle.plan.reference import reference_plan
    op = _op()
    x = _x(rows=2, cols=100, seed=1)
    count, sites = reference_plan(tiled_sum_by_tiles, (x,), {}, launch={"BLOCK": 16}).output_profile(0)["sum"]["fp32"]
    assert count == 1 and {(s.line, s.what) for s in sites} == {
        (sites[0].line, "fp32 sum over 16 (any order)"), (sites[0].line, "fp32 sum over 4 (any order)")}
    with no.settings(autotune_config="0"):
        report = check_plan(tiled_sum_by_tiles, tiled_row_sum, (x,), {})
        assert report.ok, report.explain()
        for mode in ("statistical", "fixed"):
            assert judge(op, tiled_row_sum, (x,), {}, mode=mode, isolate=False).status == "accept"
        # the fault is still the plan's finding: a bf16 rounding of each tile the reference lacks
        bad = check_plan(tiled_sum_by_tiles, tiled_row_sum_bf16_tiles, (x,), {})
    assert not bad.ok and any(d.kind == "rounding" for d in bad.disagreements), bad.explain()
