"""The quick campaign: deterministic, small, and judged the way the full one is (slow tier:
minutes on two cores).  The default tier replays one change pair and checks the report's
refusals and rendering."""
import json

import pytest

from numoracle.studies.campaign import replays as RP

from numoracle.studies.campaign import campaign
from numoracle.studies.campaign import correct as C
from numoracle.studies.campaign.report import headline, load, render_html, render_markdown, write
from numoracle.errors import InvalidArgument

OPS = ["rms_norm", "cross_entropy", "per_token_group_quant_fp8"]


@pytest.fixture(scope="module")
def quick(tmp_path_factory):
    out = tmp_path_factory.mktemp("campaign")
    data = campaign(out, backend="interpreter", size="quick", ops=OPS, stages=("correct", "mutation", "replays"),
                    log=lambda s: None, mutation_ops=["rms_norm"])
    return out, data


@pytest.mark.slow
def test_no_false_alarm_on_correct_kernels_and_variants(quick):
    _, data = quick
    h = headline(data)
    assert h["correct_runs"] >= 4 * 8
    assert h["false_alarms_statistical"] == 0 and h["false_alarms_fixed"] == 0


@pytest.mark.slow
def test_change_pairs_exposed_and_controls_accepted(quick):
    _, data = quick
    rp = [r for r in data["replays"] if "skipped" not in r]
    assert all(r["control_rejections"] == 0 for r in rp), [r["pair"] for r in rp if r["control_rejections"]]
    h = headline(data)
    assert h["change_pairs_exposed"] >= 13, [(r["pair"], r["operator"]) for r in data["replays"] if not r["faulty_rejected"]]
    exposed = [r for r in rp if r["faulty_rejected"]]
    assert all(r["exposed_by"] and r["first_counterexample"]["explain"].startswith("Kernel output outside")
               for r in exposed)


@pytest.mark.slow
def test_mutation_stage_kills_without_false_alarms(quick):
    _, data = quick
    m = data["mutation"]
    assert m["false_alarms"]["numoracle"] == 0
    assert m["effective"] >= 1 and m["kills"]["numoracle"] >= 1
    fr = data["frontier"]
    assert len(fr["configs"]) == 400 and fr["numoracle_kills"] == m["kills"]["numoracle"]
    assert set(data["tuned_shift"]["rms_norm"]["groups"]) >= {"calibration", "shifted_mean", "scaled_up"}


@pytest.mark.slow
def test_resumes_without_recomputing(quick, monkeypatch):
    out, data = quick
    def boom(*a, **k):
        raise AssertionError("a finished kernel was run again")
    monkeypatch.setattr(C, "sweep_kernel", boom)
    again = campaign(out, backend="interpreter", size="quick", ops=OPS, stages=("correct", "mutation", "replays"),
                     log=lambda s: None, mutation_ops=["rms_norm"])
    assert again["correct"] == json.loads(json.dumps(data["correct"]))


@pytest.mark.slow
def test_a_different_campaign_in_the_same_directory_is_refused(quick):
    out, _ = quick
    with pytest.raises(InvalidArgument, match="holds a campaign"):
        campaign(out, backend="interpreter", size="quick", ops=["softmax"], stages=("correct",), log=lambda s: None)


@pytest.mark.slow
def test_report_has_every_section(quick):
    out, _ = quick
    html_path, md_path = write(out)
    page = html_path.read_text()
    for section in ("Headline", "Correct kernels", "Per input group", "Width histograms", "Historical change pairs",
                    "Mutation testing", "Tuned-tolerance frontier", "Tuned tolerances under input shift"):
        assert section in page
    assert page.count("<svg") >= 2 and "http://" not in page.replace("http://www.w3.org/2000/svg", "")
    md = md_path.read_text()
    assert "| pair |" in md and "## Correct kernels and variants" in md


def test_report_refuses_what_is_not_a_campaign(tmp_path):
    (tmp_path / "campaign.json").write_text("{\"x\": 1}")
    with pytest.raises(InvalidArgument, match="not a numoracle campaign"):
        load(tmp_path)
    (tmp_path / "campaign.json").write_text("{broken")
    with pytest.raises(InvalidArgument, match="not valid JSON"):
        load(tmp_path)
    with pytest.raises(InvalidArgument, match="no campaign results"):
        load(tmp_path / "nowhere")


def test_render_tolerates_skipped_stages():
    data = {"meta": {"backend": "interpreter"}, "correct": {"x/correct": {"skipped": "ImportError('liger')"}}}
    assert "skipped" in render_html(data) and "# numoracle campaign" in render_markdown(data)


def test_one_change_pair_replays_its_fault_and_accepts_its_control():
    """The replays stage on one pair (Liger's Llama RMSNorm multiplying x·rstd by w in fp32):
    the faulty kernel is rejected, confirmed, with an explanation; the control never is."""
    pair = next(p for p in RP.PAIRS if (p.operator, p.faulty) == ("rms_norm", "unrounded_multiply"))
    r = RP.replay(pair, 1, "interpreter", "cpu")
    assert r["cases"] == 1 and r["errors"] == 0, r.get("error_examples")
    assert r["control_rejections"] == 0
    assert r["faulty_rejected"] and r["passed"] and r["exposed_by"]
    assert r["first_counterexample"]["explain"].startswith("Kernel output outside")


def test_a_resumed_replay_stage_runs_both_entries_of_a_shared_pair_number(monkeypatch):
    # pairs 3 and 5 each have two entries: a resume must not take one's result for the other
    from numoracle.studies.campaign import replays as RP

    ran = []

    def fake(p, n_cases, backend, dev, baselines=None):
        ran.append(RP.key(p))
        return {"pair": p.pair, "operator": p.operator, "faulty": p.faulty, "faulty_rejected": True,
                "control_rejections": 0, "cases": n_cases, "faulty_rejections": 1, "exposed_by": [], "seconds": 0}

    monkeypatch.setattr(RP, "replay", fake)
    first3 = next(p for p in RP.PAIRS if p.pair == 3)
    done = {RP.key(first3): fake(first3, 1, None, None)}
    ran.clear()
    out = RP.run(1, None, "cpu", log=None, done=done)
    assert len(out) == len(RP.PAIRS) and len({RP.key(r) for r in out}) == len(RP.PAIRS)
    assert RP.key(first3) not in ran and len(ran) == len(RP.PAIRS) - 1
    assert [(r["operator"], r["faulty"]) for r in out] == [(p.operator, p.faulty) for p in RP.PAIRS]
