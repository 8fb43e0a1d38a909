"""The benchmark's bookkeeping (benchmarks/run.py is not part of the test run, and
runs mostly on a GPU: a slip in its last step once cost a device call)."""
import importlib.util
import os

import pytest

_HERE = os.path.dirname(os.path.abspath(__file__))


@pytest.fixture(scope="module")
def bench():
    path = os.path.join(_HERE, "..", "benchmarks", "run.py")
    spec = importlib.util.spec_from_file_location("numoracle_bench_run", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _row():
    return {"verdict_s": 2e-3, "verdict_eager_s": 4e-2, "ref64_s": 1e-3, "assert_close_s": 5e-4,
            "ref64_peak_bytes": 100, "verdict_peak_bytes": 300, "verdict_eager_peak_bytes": 900}


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_derived_ratios(bench, device):
    row = bench.derive(_row(), device, elements=1000, traffic=8_600_000)
    assert row["verdict_over_ref64"] == pytest.approx(2.0)
    assert row["eager_over_ref64"] == pytest.approx(40.0)
    assert row["verdict_over_assert_close"] == pytest.approx(4.0)
    assert row["memory_over_ref64"] == pytest.approx(3.0)
    assert row["verdict_ns_per_element"] == pytest.approx(2000.0)
    if device == "cuda":
        # 8.6 MB in 2 ms is 4.3 GB/s: a thousandth of the H200's copy bandwidth
        assert row["bandwidth_fraction"] == pytest.approx(1e-3)
    else:
        assert "bandwidth_fraction" not in row


def test_traffic_counts_reading_inputs_and_outputs_once(bench):
    import torch
    x = torch.zeros(10, 4, dtype=torch.bfloat16)
    y = torch.zeros(10, 4, dtype=torch.bfloat16)
    s = torch.zeros(10, dtype=torch.float32)
    # 80 B of inputs, 80 + 40 B of outputs, each read once (the flags); an accepted verdict
    # holds them instead of copying them (settings.hold_accepted)
    assert bench.traffic_bytes((x, 3), (y, s)) == 80 + 80 + 40
