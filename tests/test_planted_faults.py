"""Planted faults in an emulated rms_norm (llama) kernel must be caught, and
caught more often than by torch.testing.assert_close's bf16 defaults on the
same inputs."""

import pytest

from numoracle.selftest.programs import planted_fault_run

SEEDS = range(24)
MIN_RATE = {"truncating_store": 0.75, "bf16_accumulation": 0.75, "no_widening": 0.75,
            "ulp_off_store": 0.75, "eps_after_rsqrt": 0.1}


@pytest.mark.parametrize("fault", sorted(MIN_RATE))
def test_planted_fault_is_caught(fault):
    ours = theirs = 0
    for seed in SEEDS:
        stat, fixed, ac, _ = planted_fault_run(fault, seed)
        if stat.status == "reject":
            ours += 1
            # every statistical reject of a real fault is confirmed without the zero-mean model
            assert stat.confirmation == "confirmed", stat.explain()
            assert fixed.status == "reject"
        theirs += not ac
    assert ours >= MIN_RATE[fault] * len(SEEDS), f"{fault}: numoracle rejected {ours}/{len(SEEDS)}"
    assert ours >= theirs, f"{fault}: numoracle {ours} < assert_close {theirs}"
