"""kill -9 and SIGTERM at random moments of fuzz, campaign (every stage) and replay: no
corrupt case, no finished unit lost or recomputed, no orphan process (counted by a marker
in the environment of every process the run starts).  Slow tier: each run is real."""

import hashlib
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from numoracle import corpus as C

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow


def _marked(mark: str) -> list:
    found = []
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                with open(f"/proc/{pid}/environ", "rb") as f:
                    if mark.encode() in f.read():
                        found.append(int(pid))
            except OSError:
                pass
    return found


def _orphans(mark: str, seconds: float = 15.0) -> list:
    end = time.time() + seconds
    while time.time() < end and _marked(mark):
        time.sleep(0.2)
    return _marked(mark)


def _start(args, mark):
    env = dict(os.environ, NUMORACLE_TEST_MARK=mark, PYTHONPATH=str(ROOT))
    return subprocess.Popen([sys.executable, "-m", "numoracle", *args], cwd=ROOT, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def _kill(p, sig):
    p.send_signal(sig)
    try:
        _, err = p.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        p.kill()
        _, err = p.communicate()
        raise AssertionError(f"no exit within 120 s of {sig!r}")
    return err


def _tree(d: Path) -> dict:
    return {str(f.relative_to(d)): (f.stat().st_mtime_ns, hashlib.sha1(f.read_bytes()).hexdigest())
            for f in sorted(d.rglob("*")) if f.is_file() and ".tmp" not in str(f.relative_to(d)) and f.name != ".lock"}


def test_fuzz_killed_at_random_moments_leaves_only_whole_cases_and_no_orphans(tmp_path):
    rng = random.Random(23)
    corpus = tmp_path / "corpus"
    kinds = {"kill": 0, "term": 0}
    orphans = 0
    for i in range(8):
        mark = uuid.uuid4().hex
        sig = signal.SIGKILL if i % 2 else signal.SIGTERM
        p = _start(["fuzz", "rms_norm", "--kernel", "tests.fixtures.user_kernels:rms_norm_truncating_store",
                    "--seconds", "60", "--seed", str(i), "--corpus", str(corpus), "--database", "none",
                    "--max-rows", "3", "--max-cols", "32", "--quiet"], mark)
        time.sleep(rng.uniform(4.0, 30.0))       # imports, search, shrinking or saving
        err = _kill(p, sig)
        if sig == signal.SIGTERM and p.returncode not in (0, 1):   # finished before the signal: 0 / 1
            assert p.returncode == 143, err
            assert "Traceback" not in err, err
        kinds["kill" if sig == signal.SIGKILL else "term"] += 1
        orphans += len(_orphans(mark))
    assert orphans == 0
    cases = C.find([corpus]) if corpus.exists() else []
    for c in cases:
        C.load(c)                                 # whole, or not there at all
    # a later save removes what killed saves left behind
    p = subprocess.run([sys.executable, "-m", "numoracle", "fuzz", "rms_norm", "--kernel",
                        "tests.fixtures.user_kernels:rms_norm_truncating_store", "--seconds", "60", "--seed", "99",
                        "--corpus", str(corpus), "--database", "none", "--max-rows", "3", "--max-cols", "32",
                        "--quiet"], cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT)), capture_output=True,
                       text=True, timeout=600)
    assert p.returncode == 1, p.stderr
    assert not [d for d in corpus.rglob(".tmp-*")]
    for c in C.find([corpus]):
        C.load(c)


def _campaign_args(out):
    return ["campaign", "--quick", "--ops", "rms_norm", "--mutation-ops", "rms_norm", "--out", str(out),
            "--cases", "1", "--max-mutants", "2", "--mutation-cases", "1", "--replay-cases", "1", "--json"]


def _headline(out):
    d = json.loads((out / "campaign.json").read_text())
    return d["done"], {k: d[k] for k in ("correct", "mutation", "replays")}


def _finished(d: Path, sub: str) -> set:
    return {f.name for f in (d / sub).glob("*") if ".tmp" not in f.name} if (d / sub).exists() else set()


def _stage(out: Path, units: set) -> str:
    """The stage a campaign writing `out` is in, read from what it has finished on disk."""
    if _finished(out, "mutation"):
        return "replays"
    return "mutation" if units <= _finished(out, "units") else "correct"


def _campaign_run(out: Path) -> float:
    t0 = time.monotonic()
    p = subprocess.run([sys.executable, "-m", "numoracle", *_campaign_args(out)], cwd=ROOT,
                       env=dict(os.environ, PYTHONPATH=str(ROOT)), capture_output=True, text=True, timeout=1800)
    assert p.returncode == 0, p.stderr[-2000:]
    return time.monotonic() - t0


def test_campaign_killed_in_every_stage_resumes_without_losing_or_redoing_a_unit(tmp_path):
    base = tmp_path / "uninterrupted"
    t0 = time.time()
    _campaign_run(base)
    want_done, want = _headline(base)
    units = _finished(base, "units")
    # how long each stage took, from the finish times of its files; and the start-up cost, from
    # re-running the finished campaign (which has nothing left to do)
    ends = {"correct": max((base / "units" / u).stat().st_mtime for u in units),
            "mutation": max((base / "mutation" / m).stat().st_mtime for m in _finished(base, "mutation")),
            "replays": (base / "campaign.json").stat().st_mtime}
    shutil.copytree(base, tmp_path / "again")
    startup = _campaign_run(tmp_path / "again")
    length = {"correct": max(ends["correct"] - t0 - startup, 0.5), "mutation": ends["mutation"] - ends["correct"],
              "replays": ends["replays"] - ends["mutation"]}

    # Kills are placed by stage, not by the clock alone, so that a fast machine cannot finish the
    # campaign before it has been interrupted in each stage: every run is killed twice inside the
    # stage it resumes in, then let through to the next stage and killed there.
    out = tmp_path / "killed"
    rng = random.Random(5)
    orphans, lost, redone = 0, 0, 0
    kills = {"correct": 0, "mutation": 0, "replays": 0}
    for i in range(12):
        mark = uuid.uuid4().hex
        before = _tree(out) if out.exists() else {}
        resumes_in = _stage(out, units)
        p = _start(_campaign_args(out), mark)
        if kills[resumes_in] < 2:
            time.sleep(startup + rng.uniform(0.2, 0.9) * length[resumes_in])
        else:
            end = time.monotonic() + 600
            while p.poll() is None and _stage(out, units) == resumes_in and time.monotonic() < end:
                time.sleep(0.02)
            time.sleep(rng.uniform(0.1, 0.6) * length[_stage(out, units)])
        if p.poll() is not None:                   # it finished: the campaign is complete
            p.communicate()
            break
        kills[_stage(out, units)] += 1
        _kill(p, signal.SIGKILL if i % 2 == 0 else signal.SIGTERM)
        orphans += len(_orphans(mark))
        after = _tree(out)
        # every unit file finished before this run is still there, untouched (not recomputed)
        for name, sig in before.items():
            if name.startswith("units/") or name.startswith("mutation/"):
                if name not in after:
                    lost += 1
                elif after[name] != sig and name.startswith("units/"):
                    redone += 1
        if (out / "campaign.json").exists():                      # (absent when killed before its first write)
            json.loads((out / "campaign.json").read_text())      # never a torn campaign.json
    p = subprocess.run([sys.executable, "-m", "numoracle", *_campaign_args(out)], cwd=ROOT,
                       env=dict(os.environ, PYTHONPATH=str(ROOT)), capture_output=True, text=True, timeout=1800)
    assert p.returncode == 0, p.stderr[-2000:]
    assert kills["correct"] >= 1 and kills["mutation"] >= 1 and sum(kills.values()) >= 3, kills
    assert orphans == 0 and lost == 0 and redone == 0, (orphans, lost, redone)
    assert not list(out.rglob(".tmp*"))
    got_done, got = _headline(out)
    assert sorted(got_done) == sorted(want_done)
    # the same campaign: the same kills and verdict counts, whatever the interruptions
    strip = ("seconds", "elapsed", "s", "time")

    def norm(x):
        if isinstance(x, dict):
            return {k: norm(v) for k, v in x.items() if k not in strip and not k.endswith("_seconds")}
        if isinstance(x, list):
            return [norm(v) for v in x]
        return x
    assert norm(got["correct"]) == norm(want["correct"])
    assert norm(got["replays"]) == norm(want["replays"])


def test_replay_killed_at_random_moments_changes_nothing_and_leaves_no_orphans(tmp_path):
    corpus = tmp_path / "corpus"
    for seed in (1, 2):
        subprocess.run([sys.executable, "-m", "numoracle", "check", "rms_norm", "--kernel",
                        "faulty:unrounded_multiply", "--seed", str(seed), "--corpus", str(corpus)], cwd=ROOT,
                       env=dict(os.environ, PYTHONPATH=str(ROOT)), capture_output=True, timeout=600)
    assert C.find([corpus])
    before = _tree(corpus)
    rng = random.Random(2)
    orphans = 0
    for i in range(6):
        mark = uuid.uuid4().hex
        p = _start(["replay", str(corpus)], mark)
        time.sleep(rng.uniform(2.0, 12.0))
        _kill(p, signal.SIGKILL if i % 2 else signal.SIGTERM)
        orphans += len(_orphans(mark))
    assert orphans == 0
    assert _tree(corpus) == before
