"""``numoracle stress-tolerances``: false alarms of a fixed tolerance on correct
kernels found by the search, kills of faulty kernels, saved corpus cases."""

import json

import numpy as np

from numoracle.studies.runs import log_grid
from numoracle.cli import main


def test_log_grid_spans_the_range():
    g = log_grid(20)
    assert len(g) == 20 and g[0] == 1e-6 and abs(g[-1] - 1.0) < 1e-12
    assert all(b > a for a, b in zip(g, g[1:]))


def test_zero_tolerance_false_alarms_and_saved_case(tmp_path, capsys):
    # rms_norm's llama plan rounds x*rstd to bf16 before the weight multiply, so a zero
    # tolerance against the correctly rounded reference rejects correct runs.
    rc = main(["stress-tolerances", "rms_norm", "--atol", "0", "--rtol", "0", "--groups", "calibration",
               "--examples", "3", "--max-rows", "4", "--max-cols", "64", "--corpus", str(tmp_path), "--json"])
    rep = json.loads(capsys.readouterr().out)
    assert rc == 0                                   # numoracle itself accepted every correct run
    assert rep["summary"]["configurations"] == 1 and rep["summary"]["numoracle_rejects_on_correct"] == 0
    cfg = rep["configurations"][0]
    assert cfg["false_alarm_rate"]["calibration"] > 0
    assert cfg["kills"] == len(rep["faulty_and_mutants"]) >= 1     # nothing passes a zero tolerance
    saved = [s for s in rep["saved_cases"] if "path" in s]
    assert saved
    with np.load(f"{saved[0]['path']}/inputs.npz", allow_pickle=False) as z:
        assert "input0" in z.files
    meta = json.load(open(f"{saved[0]['path']}/case.json"))
    assert meta["op"] == "rms_norm" and meta["verdict"]["fixed"]["status"] == "accept"


def test_grid_report_shape(capsys):
    rc = main(["stress-tolerances", "softmax", "--grid", "3", "--groups", "calibration,scaled_up",
               "--examples", "2", "--max-rows", "2", "--max-cols", "32", "--corpus", "", "--json"])
    rep = json.loads(capsys.readouterr().out)
    assert rc == 0 and len(rep["configurations"]) == 9
    loosest = [c for c in rep["configurations"] if c["atol"] == 1.0 and c["rtol"] == 1.0][0]
    assert loosest["max_false_alarm_rate"] == 0.0
    assert set(loosest["false_alarm_rate"]) == {"calibration", "scaled_up"}


def test_bad_arguments():
    assert main(["stress-tolerances", "softmax", "--atol", "1e-3"]) == 2
    assert main(["stress-tolerances", "softmax", "--groups", "nope"]) == 2
