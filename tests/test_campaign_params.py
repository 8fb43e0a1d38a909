"""``campaign --param NAME=VALUE``: the fixed parameters reach every case of the correct and
mutation stages (units carry them to worker processes, the mutation child gets them as a
literal), a name no operator takes is refused, and a campaign resumed with other parameters
is refused rather than mixing cases of two configurations."""

from __future__ import annotations

import json

import pytest

from numoracle.errors import InvalidArgument
from numoracle.studies import campaign as CA
from numoracle.studies.campaign import mutation as MU
from numoracle.studies.campaign import units as U


def test_fixed_params_go_to_the_operators_that_take_them_and_are_checked_there():
    got = CA.fixed_params(["rms_norm", "swiglu"], {"casting": "llama"})
    assert got == {"rms_norm": {"casting": "llama"}}
    with pytest.raises(InvalidArgument, match=r"parameter\(s\) \['castng'\]: no operator of this campaign"):
        CA.fixed_params(["rms_norm"], {"castng": "llama"})
    with pytest.raises(InvalidArgument, match="expected one of"):
        CA.fixed_params(["rms_norm"], {"casting": "evil"})


def test_every_unit_case_has_the_fixed_value_and_the_other_parameters_still_cycle():
    free = [c for u in U.correct_units(["rms_norm"], 12, "interpreter") for c in U.unit_cases(u)]
    assert len({dict(c.params)["casting"] for c in free}) > 1          # drawn: the test can fail
    units = U.correct_units(["rms_norm"], 12, "interpreter", params={"rms_norm": {"casting": "llama"}})
    fixed = [c for u in units for c in U.unit_cases(u)]
    assert len(fixed) == len(free) and {dict(c.params)["casting"] for c in fixed} == {"llama"}
    # a unit is data sent to other processes: the value travels with it
    assert all(u.to_dict()["settings"]["params"] == (("casting", "llama"),) for u in units)
    # with nothing fixed the units are those of a campaign written before --param existed
    assert all("params" not in u.to_dict()["settings"] for u in U.correct_units(["rms_norm"], 12, "interpreter"))


def test_the_mutation_stage_hands_the_parameters_to_each_operator_child(monkeypatch, tmp_path):
    seen = {}

    def fake(name, **kw):
        seen[name] = kw["params"]
        return None, "not run (test)"
    monkeypatch.setattr(MU, "run_operator", fake)
    MU.run(["rms_norm", "swiglu"], 1, "interpreter", tmp_path, log=lambda s: None,
           params={"rms_norm": {"casting": "gemma"}})
    assert seen == {"rms_norm": {"casting": "gemma"}, "swiglu": None}

    from numoracle.studies import mutation as M
    got = {}

    class C:
        def to_dict(self):
            return {}

    def fake_campaign(name, **kw):
        got.update(kw)
        return C()
    monkeypatch.setattr(M, "run_campaign", fake_campaign)
    monkeypatch.setattr("numoracle.processes.die_with_parent", lambda: None)
    out = tmp_path / "op.json"
    assert MU._child(["rms_norm", str(out), "interpreter", "1", "2", "60", "bf16", repr({"casting": "gemma"})]) == 0
    assert got["params"] == {"casting": "gemma"}
    assert MU._child(["rms_norm", str(out), "interpreter", "1", "2", "60", "bf16", "{}"]) == 0
    assert got["params"] is None


def _campaign(out, *extra):
    from numoracle.cli import main
    return main(["campaign", "--quick", "--ops", "rms_norm", "--stages", "correct", "--cases", "2", "--out", str(out),
                 "--no-isolate", "--json", *extra])


def test_campaign_param_is_recorded_and_a_resume_with_other_parameters_is_refused(tmp_path, capsys):
    out = tmp_path / "c"
    assert _campaign(out, "--param", "casting=llama") == 0
    meta = json.loads((out / "campaign.json").read_text())["meta"]
    assert meta["params"] == {"casting": "'llama'"}
    capsys.readouterr()
    assert _campaign(out, "--param", "casting=gemma") == 2
    err = capsys.readouterr().err
    assert "holds a campaign with" in err and "gemma" in err, err
    assert _campaign(out) == 2
    assert "holds a campaign with" in capsys.readouterr().err
    assert _campaign(tmp_path / "d", "--param", "castng=llama") == 2
    assert "no operator of this campaign takes them" in capsys.readouterr().err
