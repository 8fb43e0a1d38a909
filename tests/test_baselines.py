"""Baseline oracles: each rule on hand-made runs where the answer is known, and on
real runs of a correct kernel (interpreter backend)."""

import math

import pytest
import torch

from numoracle import formats as F
from numoracle.errors import InvalidArgument
from numoracle.oracles.baselines import (AssertClose, FlashTwoX, Observed, TunedTolerance, UlpRule, Upstream,
                                         required_atol)


def _obs(y, c, fmt=F.bf16, op="softmax"):
    return Observed(op, [(torch.tensor(y, dtype=torch.float64), torch.tensor(c, dtype=torch.float64), fmt)])


def test_assert_close_bf16_defaults():
    # bf16 defaults: rtol 1.6e-2, atol 1e-5; e = centre rounded to bf16 (1.0 exactly)
    assert AssertClose().judge(_obs([1.015625], [1.0])).ok          # 1.5625e-2 <= 1e-5 + 1.6e-2
    r = AssertClose().judge(_obs([1.03125], [1.0]))
    assert not r.ok and r.ratio == pytest.approx(0.03125 / (1e-5 + 1.6e-2))


def test_assert_close_nonfinite_and_fp32():
    assert not AssertClose().judge(_obs([math.nan], [1.0])).ok
    assert AssertClose().judge(_obs([math.inf], [math.inf])).ok
    assert AssertClose().judge(_obs([1.0 + 2 ** -20], [1.0], F.fp32)).ok      # 9.5e-7 <= 1e-5 + 1.3e-6
    assert not AssertClose().judge(_obs([1.0 + 2 ** -16], [1.0], F.fp32)).ok  # 1.5e-5 > 1.13e-5


def test_ulp_rule_counts_output_ulps():
    u = 2.0 ** -7                      # bf16 ulp at 1.0
    assert UlpRule(2).judge(_obs([1.0 + 2 * u], [1.0])).ok
    assert not UlpRule(2).judge(_obs([1.0 + 3 * u], [1.0])).ok
    assert UlpRule(3).judge(_obs([1.0 + 3 * u], [1.0])).ok
    with pytest.raises(InvalidArgument):
        UlpRule(0)


def test_upstream_table_and_fallback():
    up = Upstream()
    r = up.judge(_obs([1.1], [1.0], op="rms_norm"))           # Liger rms_norm: atol 0.2, rtol 0.02
    assert r.ok and "Liger" in r.note
    r = up.judge(_obs([1.1], [1.0], op="no_such_operator"))   # KernelBench fallback 1e-2
    assert not r.ok and "fallback" in r.note


def test_required_atol_matches_allclose():
    obs = _obs([1.0, 2.0 + 2 ** -6, 0.5], [1.0, 2.0, 0.5])
    rtols = [0.0, 1e-3, 1e-2]
    need = required_atol(obs, rtols)
    assert need[0] == pytest.approx(2 ** -6)
    assert need[1] == pytest.approx(2 ** -6 - 2e-3)
    assert need[2] == 0.0


def test_tuned_tolerance_accepts_its_calibration_and_has_a_floor():
    cal = [_obs([1.0 + 2 ** -7, 0.0], [1.0, 0.0]), _obs([2.0, 1e-6], [2.0, 0.0])]
    t = TunedTolerance.fit(cal, margin=2.0)
    for o in cal:
        assert t.judge(o).ok
    (atol, rtol), = t.per_output
    assert rtol == pytest.approx(2 * 2 ** -7) and atol == pytest.approx(2e-6)
    assert not t.judge(_obs([1.0 + 2 ** -5, 0.0], [1.0, 0.0])).ok
    zero = TunedTolerance.fit([_obs([1.0], [1.0])])
    assert zero.per_output[0][1] == pytest.approx(2 * 2.0 ** -8)      # never below margin * u(bf16)
    with pytest.raises(InvalidArgument):
        TunedTolerance.fit(cal, margin=0.5)


def test_flash_rule_against_low_precision_reference():
    # plain-PyTorch bf16 softmax as the low-precision reference
    x = torch.randn(3, 40, generator=torch.Generator().manual_seed(0)).to(torch.bfloat16)
    c = torch.softmax(x.double(), -1)
    lp_err = float((torch.softmax(x, -1).double() - c).abs().max())
    assert lp_err > 0
    good = Observed("softmax", [(F.round(c, F.bf16), c, F.bf16)], (x,), {})
    assert FlashTwoX().judge(good).ok
    bad_y = c + 3 * lp_err
    bad = Observed("softmax", [(bad_y, c, F.bf16)], (x,), {})
    r = FlashTwoX().judge(bad)
    assert not r.ok and r.ratio == pytest.approx(1.5, rel=1e-6)
