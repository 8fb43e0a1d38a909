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
PAIR_OPS = sorted({p.operator for p in RP.PAIRS})


@pytest.fixture(scope="module")
def quick(tmp_path_factory):
    out = tmp_path_factory.mktemp("campaign")
    data = campaign(out, backend="interpreter", size="quick", ops=OPS, stages=("correct", "mutation", "replays"),
                    log=lambda s: None, mutation_ops=["rms_norm"], replay_ops=PAIR_OPS)
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
                     log=lambda s: None, mutation_ops=["rms_norm"], replay_ops=PAIR_OPS)
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


def test_a_campaign_of_some_operators_replays_only_their_change_pairs(monkeypatch, tmp_path):
    """``--ops softcap.ops:op`` replayed all 16 pairs of registered operators, none its own."""
    ran = []

    def fake(p, n_cases, backend, dev, baselines=None):
        ran.append(p.operator)
        return {"pair": p.pair, "operator": p.operator, "faulty": p.faulty, "faulty_rejected": True,
                "control_rejections": 0, "cases": n_cases, "faulty_rejections": 1, "exposed_by": [], "seconds": 0}

    monkeypatch.setattr(RP, "replay", fake)
    campaign(tmp_path / "a", ops=["rms_norm", "softmax"], stages=("replays",), log=lambda s: None)
    assert ran == [p.operator for p in RP.PAIRS if p.operator == "rms_norm"] and len(ran) == 2
    ran.clear()
    campaign(tmp_path / "b", ops=["softmax"], stages=("replays",), log=lambda s: None)
    assert ran == []
    campaign(tmp_path / "c", ops=["softmax"], stages=("replays",), log=lambda s: None, replay_ops=["kl_div"])
    assert ran == ["kl_div"]
    ran.clear()
    campaign(tmp_path / "d", stages=("replays",), log=lambda s: None)
    assert len(ran) == len(RP.PAIRS)


# ---- the output directory's lock, and the working time across resumes (issue #23) ------------

import os  # noqa: E402
import signal  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def _campaign_cli(out, *extra, cases="12"):
    return [sys.executable, "-m", "numoracle", "campaign", "--quick", "--ops", "rms_norm", "--stages", "correct",
            "--cases", cases, "--out", str(out), "--quiet", *extra]


def _env():
    return dict(os.environ, PYTHONPATH=str(ROOT))


def test_a_second_campaign_on_a_locked_directory_is_refused_naming_the_holder(tmp_path):
    from numoracle.studies.campaign import CampaignDir
    out = tmp_path / "camp"
    with CampaignDir(out):                         # this process is the first campaign
        p = subprocess.run(_campaign_cli(out), cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=600)
        assert p.returncode == 2, (p.stdout, p.stderr)
        assert f"in use by another campaign (pid {os.getpid()} since" in p.stderr, p.stderr
        assert "give another --out directory" in p.stderr and "Traceback" not in p.stderr
        assert not (out / "campaign.json").exists() and not (out / "units").exists()
        # in this process too: the API refuses the same way
        with pytest.raises(InvalidArgument, match=f"pid {os.getpid()}"):
            campaign(out, backend="interpreter", size="quick", ops=["rms_norm"], stages=("correct",),
                     log=lambda s: None)
    with CampaignDir(out):                         # released: the next one takes it
        assert f"pid {os.getpid()}" in (out / ".lock").read_text()


@pytest.mark.slow
def test_two_campaign_commands_on_one_directory_the_second_refused(tmp_path):
    out = tmp_path / "camp"
    first = subprocess.Popen(_campaign_cli(out, cases="40"), cwd=ROOT, env=_env(), stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE, text=True)
    try:
        end = time.time() + 300
        while first.poll() is None and time.time() < end and not (out / "units").is_dir():
            time.sleep(0.05)                       # the lock is taken before the first unit is written
        assert first.poll() is None, first.communicate()
        p = subprocess.run(_campaign_cli(out, cases="40"), cwd=ROOT, env=_env(), capture_output=True, text=True,
                           timeout=600)
        holding = first.poll() is None
    finally:
        first.kill()
        first.communicate()
    assert holding, "the first campaign ended before the second tried: nothing tested"
    assert p.returncode == 2, (p.stdout, p.stderr)
    assert f"in use by another campaign (pid {first.pid} since" in p.stderr, p.stderr


@pytest.mark.slow
def test_meta_seconds_keeps_growing_across_a_kill_9_and_resumes(tmp_path):
    import json as _json
    out = tmp_path / "camp"
    t0 = time.monotonic()
    p = subprocess.Popen(_campaign_cli(out), cwd=ROOT, env=_env(), stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL)
    end = time.time() + 300
    while p.poll() is None and time.time() < end and not (out / "campaign.json").exists():
        time.sleep(0.02)                           # the first kernel's units are written
    time.sleep(0.3)
    assert p.poll() is None, "the campaign ended before it was killed: nothing tested"
    p.send_signal(signal.SIGKILL)
    p.wait(timeout=60)
    first_wall = time.monotonic() - t0
    killed = _json.loads((out / "campaign.json").read_text())
    s1 = killed["meta"]["seconds"]
    assert "done" not in killed or "correct" not in killed.get("done", [])
    assert 0 < s1 <= first_wall, (s1, first_wall)

    t1 = time.monotonic()
    r = subprocess.run(_campaign_cli(out), cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=900)
    second_wall = time.monotonic() - t1
    assert r.returncode == 0, r.stderr[-2000:]
    s2 = _json.loads((out / "campaign.json").read_text())["meta"]["seconds"]
    # this run's working time is added to what the killed one recorded, never in its place
    assert s1 < s2 <= s1 + second_wall + 0.2, (s1, s2, second_wall)

    r = subprocess.run(_campaign_cli(out), cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stderr[-2000:]
    s3 = _json.loads((out / "campaign.json").read_text())["meta"]["seconds"]
    assert s2 <= s3 < s2 + 30, (s2, s3)            # nothing left to do: a little more, not a reset
