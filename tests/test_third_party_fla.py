"""flash-linear-attention's Triton kernels (package fla-core), judged on the repaired
interpreter through the references of tests/third_party/fla_ops.py: accepted in both modes
on every input group, and a kernel output moved off its rounding is rejected (the
references are narrow enough to see it).  Skipped when fla-core is not installed.  The
full sweep is tests/third_party/sweep_fla.py (docs/results/2026-12-02-third-party-fla.md)."""

from __future__ import annotations

import importlib.util
import warnings

import pytest

pytestmark = pytest.mark.skipif(importlib.util.find_spec("fla") is None,
                                reason="flash-linear-attention (fla-core) is not installed")


@pytest.fixture(scope="module")
def fla_ops():
    from numoracle import backends
    backends.select("interpreter")        # before fla's kernels are decorated
    from tests.third_party import fla_ops
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")   # fla: "Triton is not supported on current platform"
        for op in fla_ops.OPERATORS:
            op.kernels                    # import the adapters (and fla) now
    return fla_ops


def _judge(op, case):
    import numoracle as no
    inputs, params = case.materialize("cpu", op)
    outs = op.kernels["correct"](*[t.clone() for t in inputs], **params)
    return inputs, params, outs, no.evaluate(op.reference, inputs, params).judge(outs)


def _cases(op, fmt, groups, shapes):
    from numoracle.strategies import Case
    params = tuple(sorted((k, v[0]) for k, v in op.domain.params.items()))
    return [Case(op.name, fmt, r, c, g, 0, (), params, (), 7 + i)
            for i, (g, (r, c)) in enumerate((g, s) for g in groups for s in shapes)]


@pytest.mark.parametrize("name", ["rms_norm", "layer_norm_residual", "layer_norm_backward", "l2norm", "swiglu",
                                  "logsigmoid", "softmax", "logsumexp"])
def test_fla_kernels_are_accepted_in_both_modes(fla_ops, name):
    op = next(o for o in fla_ops.OPERATORS if o.name == f"fla_{name}")
    for fmt in ("bf16", "fp16"):
        for case in _cases(op, fmt, ("calibration", "shifted_mean", "pow2_grid"), ((3, 96), (2, 700))):
            *_, verdicts = _judge(op, case)
            for mode, v in verdicts.items():
                assert v.status == "accept", f"{case!r} {mode}:\n{v.explain()}"


@pytest.mark.parametrize("name,output", [("rms_norm", 0), ("layer_norm", 0), ("layer_norm_backward", 0), ("swiglu", 0)])
def test_a_kernel_output_two_ulps_off_is_rejected(fla_ops, name, output):
    from numoracle import formats as F
    op = next(o for o in fla_ops.OPERATORS if o.name == f"fla_{name}")
    case = _cases(op, "bf16", ("calibration",), ((3, 96),))[0]
    inputs, params, outs, verdicts = _judge(op, case)
    assert verdicts["fixed"].status == "accept"
    outs = list(outs) if isinstance(outs, (tuple, list)) else [outs]
    y = outs[output]
    moved = y.clone()
    moved[0, 5] = (y[0, 5].double() + 2 * F.ulp(y[0, 5].double().abs(), F.from_dtype(y.dtype))).to(y.dtype)
    import numoracle as no
    outs[output] = moved
    v = no.evaluate(op.reference, inputs, params).judge(tuple(outs) if len(outs) > 1 else outs[0])["fixed"]
    assert v.status == "reject" and v.n_rejected == 1, v.explain()


@pytest.mark.slow
def test_the_sweep_finds_no_false_alarm_on_a_few_operators(tmp_path):
    import subprocess
    import sys
    from pathlib import Path
    root = Path(__file__).resolve().parents[1]
    res = subprocess.run([sys.executable, "tests/third_party/sweep_fla.py", "rms_norm_residual", "l2norm_backward",
                          "--drawn", "4", "--corpus", str(tmp_path / "corpus")],
                         cwd=root, capture_output=True, text=True, timeout=1200)
    assert res.returncode == 0, res.stdout + res.stderr
    assert res.stdout.count("cases") == 6            # two operators x three formats
