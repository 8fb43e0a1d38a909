"""``numoracle calibrate`` and the shipped math-library profiles (docs/design.md §5)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from numoracle import mathlib
from numoracle.calculus.tracked import ulp_bound_fp32
from numoracle.errors import InvalidArgument
from numoracle.mathlib import calibrate as C

# docs/facts.md, "Math library on an NVIDIA H200 (torch 2.11, Triton 3.6)": profile function ->
# (Triton call, max ulp measured there, largest |x| of the measured range (None: not input-dependent),
#  CUDA's documented bound is <= 2 ulp).
FACTS_H200 = {
    "exp": ("tl.exp", 63.5, 88.0, False),          # __expf-like: 2 + floor(1.173|x|)
    "sigmoid": ("tl.sigmoid", 61.5, 80.0, False),  # built on exp
    "exp2": ("tl.exp2", 2.06, None, True),
    "log": ("tl.log", 0.84, None, True),
    "log2": ("tl.log2", 0.89, None, True),
    "rsqrt": ("tl.math.rsqrt", 1.51, None, True),
    "sqrt": ("tl.sqrt", 0.94, None, True),
    "sqrt_rn": ("tl.sqrt_rn", 0.50, None, True),
    "recip": ("1.0 / x", 0.97, None, True),
    "div_rn": ("tl.math.div_rn", 0.50, None, True),
    "erf": ("tl.math.erf", 1.09, None, True),
    "sin": ("tl.sin", 1.46, None, True),
}


def _bound(model, absx):
    return model.a + model.b * (absx or 0.0)


@pytest.mark.parametrize("fn", sorted(FACTS_H200))
def test_h200_profile_covers_facts_and_is_tight(fn):
    call, measured, xmax, cuda_le_2 = FACTS_H200[fn]
    prof = mathlib.load("h200")
    bound = _bound(prof.model(fn), xmax)
    assert bound >= measured, f"h200 {fn} ({call}) bound {bound} ulp < {measured} ulp measured on the H200"
    if cuda_le_2:
        assert bound <= 2 * measured, (f"h200 {fn} ({call}) bound {bound} ulp is more than twice the "
                                       f"{measured} ulp measured on the H200")


def test_h200_profile_is_for_the_h200_and_flushes():
    prof = mathlib.load("h200")
    assert prof.ftz, "Triton links libdevice in flush-to-zero mode (docs/facts.md)"
    assert "H200" in prof.provenance.get("device", "")
    assert set(prof.functions) == set(mathlib.FUNCTION_NAMES)


def test_cuda_documented_profile_is_at_least_the_documented_bounds():
    prof = mathlib.load("cuda_documented")
    documented = {"exp2": 2, "tanh": 2, "erf": 2, "sin": 2, "cos": 2, "rsqrt": 2, "log": 1, "log2": 1, "div": 2, "recip": 2}
    for fn, ulps in documented.items():
        assert prof.model(fn).a >= ulps, fn
    for fn in ("exp", "sigmoid"):  # __expf: 2 + floor(1.173|x|)
        m = prof.model(fn)
        assert m.a >= 2 and m.b >= 1.173, fn
    assert set(prof.functions) == set(mathlib.FUNCTION_NAMES)


def test_ulp_unit_is_the_calculus_unit():
    rng = np.random.default_rng(1)
    v = rng.standard_normal(10000) * np.exp2(rng.uniform(-140, 120, 10000))
    mine = C.ulp_of_exact(v)
    theirs = ulp_bound_fp32(torch.from_numpy(np.abs(v))).numpy()
    # the calculus rounds the magnitude to fp32 first, so its ulp is never smaller
    assert np.all(theirs >= mine)
    assert np.mean(theirs == mine) > 0.999


def test_fit_linear_covers_and_recovers_a_growing_error():
    rng = np.random.default_rng(2)
    x = rng.uniform(0, 88, 50000)
    err = (0.5 + 0.7 * x) * rng.uniform(0.2, 1.0, x.size)
    a, b = C.fit_linear(x, err)
    assert np.all(err <= a + b * x + 1e-9)
    assert 0.6 <= b <= 0.75 and a <= 2.0
    flat = rng.uniform(0, 2.5, x.size)
    a, b = C.fit_linear(x, flat)
    assert np.all(flat <= a + b * x + 1e-9) and a + b * 88 <= 2.6


def test_fit_linear_is_tightest_near_zero_and_a_cap_levels_the_far_end():
    """ex2.approx(RN(x log2 e)): about |x| ulps up to |x| = 64, then level (the rounding of the
    argument is a fixed fraction of its ulp).  The line is fitted where kernels' arguments lie
    (near 0), the cap covers the far end; every point stays covered after the margin."""
    rng = np.random.default_rng(5)
    x = rng.uniform(0, 104, 200000)
    err = np.minimum(2.0 + 0.95 * x, 64.0) * rng.uniform(0.3, 1.0, x.size)
    a, b = C.fit_linear(x, err)
    assert a <= 2.5 and 0.9 <= b <= 1.0, (a, b)
    got = C.fit_function("exp", [(x, err)], "gpu", 0.25)
    bound = got["bound"]
    assert bound["cap"] == C._round_up(err.max() * 1.25) and bound["a"] <= 3.2, bound
    m = mathlib.ErrorModel(bound["a"], bound["b"], bound["cap"])
    assert np.all(err <= m.ulps(x))
    assert m.ulps(1.0) < 5 and m.ulps(104.0) == bound["cap"]
    # an error that keeps growing to the end of the range: the cap (if the rounded-up line
    # passes it at all) levels nothing off
    grow = C.fit_function("exp", [(x, 0.5 + 0.7 * x)], "gpu", 0.25)["bound"]
    assert grow.get("cap", np.inf) >= 0.99 * (grow["a"] + grow["b"] * 104), grow
    # a flat error is a constant
    flat = C.fit_function("tanh", [(x, rng.uniform(0, 1.5, x.size))], "gpu", 0.25)["bound"]
    assert flat["b"] == 0 and "cap" not in flat


def test_a_capped_error_model_reads_writes_and_refuses_what_means_nothing():
    m = mathlib.ErrorModel(2.0, 1.5, 90.0)
    assert m.ulps(0.0) == 2.0 and m.ulps(10.0) == 17.0 and m.ulps(100.0) == 90.0
    assert torch.equal(m.ulps(torch.tensor([0.0, 100.0], dtype=torch.float64)),
                       torch.tensor([2.0, 90.0], dtype=torch.float64))
    assert np.array_equal(m.ulps(np.array([10.0, 1000.0])), np.array([17.0, 90.0]))
    prof = mathlib.MathProfile("p", {"exp": m, "tanh": mathlib.ErrorModel(2.0)})
    back = mathlib.from_dict(json.loads(json.dumps(prof.to_dict())))
    assert back.model("exp") == m and back.model("tanh") == mathlib.ErrorModel(2.0)
    assert "cap" not in prof.to_dict()["functions"]["tanh"]
    for a, b, cap in ((2.0, 0.0, 5.0), (2.0, 1.0, 1.0)):
        with pytest.raises(InvalidArgument, match="a cap bounds a growing error"):
            mathlib.ErrorModel(a, b, cap)


def _calibrate(functions, samples=4000):
    return C.calibrate("interpreter", functions, samples=samples, seed=3)


def test_calibrate_interpreter_writes_a_loadable_covering_profile(tmp_path):
    prof, report, uncovered = _calibrate(["exp", "sqrt_rn", "div", "tanh"])
    assert uncovered == 0
    loaded = mathlib.from_dict(json.loads(json.dumps(prof)))
    for fn, rep in report.items():
        m = loaded.model(fn)
        for call, res in rep["calls"].items():
            # each call's worst point is inside the bound at its own |x| (exp's grows with |x|)
            assert m.a + m.b * abs(res["worst"]["x"][0]) >= res["max_ulp"], (fn, call, res["worst"])
            assert res["samples"] >= 4000 and res["in_domain"] > 0, call
            assert res["reference"]["max_rel_deviation"] <= C.REF_TOL, call
    # IEEE operations on the interpreter are written as correctly rounded
    assert loaded.model("sqrt_rn").a == 0.5 and loaded.model("div").a == 0.5
    # libdevice tanh is float64 rounded once to fp32 on the repaired interpreter: not claimed exact
    assert 0.5 < loaded.model("tanh").a < 1.0
    pv = prof["provenance"]
    for key in ("device", "torch", "triton", "python", "date", "margin", "samples", "ftz_observed"):
        assert key in pv, key
    assert pv["ftz_observed"]["tl.exp"]["outputs"] is False   # numpy keeps subnormal results
    assert prof["ftz"] is False


def test_shipped_interpreter_profile_covers_a_fresh_measurement():
    """The shipped interpreter profile was measured by calibrate; a fresh run on this machine
    (other seed, fewer samples) must stay inside it, or the machine's numpy differs."""
    shipped = mathlib.load("interpreter")
    assert shipped.provenance.get("status") == "measured"
    run = C.Runner("interpreter")
    for i, fn in enumerate(["exp", "exp2", "log", "log2", "rsqrt", "sigmoid", "sin", "cos"]):
        m = shipped.model(fn)
        for call in C.SPECS[fn].calls:
            res = C.measure_call(run, fn, call, 20000, seed=11 + i, ftz=shipped.ftz)
            xabs, err = res["_points"]
            over = err > m.a + m.b * xabs
            assert not over.any(), (fn, call, float(err.max()), res.get("worst"))


def test_cli_calibrate_help_and_bad_function(capsys):
    # in process (tests/test_conventions.py runs python -m numoracle as a process once)
    from numoracle.cli import main
    assert main(["calibrate", "--help"]) == 0
    out = capsys.readouterr().out
    assert "--backend" in out and "--samples" in out
    with pytest.raises(Exception, match="unknown"):
        C.calibrate("interpreter", ["expm1"], samples=100)


def test_gpu_profile_rule():
    from numoracle.assumptions import gpu_profile

    assert gpu_profile("NVIDIA H200") == "h200"
    assert gpu_profile("NVIDIA H100 80GB HBM3") == "h200"          # the same sm_90 chip
    assert gpu_profile("NVIDIA A100-SXM4-80GB") == "cuda_documented"
    if not torch.cuda.is_available():
        assert gpu_profile() == "h200"      # judging saved H200 outputs on a CPU machine
