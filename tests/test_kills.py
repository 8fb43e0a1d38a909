"""kill -9 and SIGTERM at random moments of fuzz, campaign (every stage) and replay: no
corrupt case, no finished unit lost or recomputed, no orphan process (counted by a marker
in the environment of every process the run starts).  Slow tier: each run is real.

Only a signal sent while the process is alive (``p.poll() is None``) counts, the runs are kept
alive through the moments drawn (a kernel that takes a fixed time a call, moments drawn in its
calls), and each test requires at least three of each kind to land.  Each prints its counts
(lines starting ``COUNT``; ``pytest -s`` shows them)."""

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


def _start(args, mark, **env_extra):
    env = dict(os.environ, NUMORACLE_TEST_MARK=mark, PYTHONPATH=str(ROOT), **env_extra)
    return subprocess.Popen([sys.executable, "-m", "numoracle", *args], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _kill(p, sig):
    """Send ``sig``; the run's (stdout, stderr)."""
    p.send_signal(sig)
    try:
        out, err = p.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        p.kill()
        p.communicate()
        raise AssertionError(f"no exit within 120 s of {sig!r}")
    return out, err


def _tree(d: Path) -> dict:
    return {str(f.relative_to(d)): (f.stat().st_mtime_ns, hashlib.sha1(f.read_bytes()).hexdigest())
            for f in sorted(d.rglob("*")) if f.is_file() and ".tmp" not in str(f.relative_to(d)) and f.name != ".lock"}


SLOW = "tests.fixtures.interrupting:slow_truncating_store"     # a reject to find, each call slowed and logged


def _calls(path: Path) -> int:
    try:
        return len(path.read_text().splitlines())
    except OSError:
        return 0


def _at_moment(p, calls: Path, k: int, jitter: float, startup: float) -> bool:
    """Wait for a moment of the run: after ``startup`` seconds when ``k`` is 0 (imports, the
    worker starting), else ``jitter`` seconds into its k-th kernel call.  True if the run is
    still alive then: a signal sent now lands; one sent to an ended run is not counted."""
    if k == 0:
        time.sleep(startup)
    else:
        end = time.monotonic() + 300
        while p.poll() is None and _calls(calls) < k and time.monotonic() < end:
            time.sleep(0.02)
        time.sleep(jitter)
    return p.poll() is None


def _corrupt(corpus: Path) -> int:
    bad = 0
    for c in (C.find([corpus]) if corpus.exists() else []):
        try:
            C.load(c)                             # whole, or not there at all
        except Exception:  # noqa: BLE001 - counted: a torn case
            bad += 1
    return bad


def test_fuzz_killed_at_random_moments_leaves_only_whole_cases_and_no_orphans(tmp_path):
    # each run searches, shrinks and saves for long enough (every kernel call takes 0.3 s) that
    # a moment drawn in its kernel calls - from the imports to the save after the last one -
    # finds it alive; only signals sent to a live run count, and enough of each kind must land
    rng = random.Random(23)
    corpus = tmp_path / "corpus"
    sent = {"SIGKILL": 0, "SIGTERM": 0}
    landed = {"SIGKILL": 0, "SIGTERM": 0}
    orphans, saved_on_term = 0, 0
    for i in range(10):
        mark = uuid.uuid4().hex
        sig = signal.SIGKILL if i % 2 else signal.SIGTERM
        calls = tmp_path / f"calls{i}.txt"
        p = _start(["fuzz", "rms_norm", "--kernel", SLOW, "--seconds", "120", "--seed", str(i), "--corpus",
                    str(corpus), "--database", "none", "--max-rows", "3", "--max-cols", "32", "--quiet"], mark,
                   NUMORACLE_TEST_CALLS=str(calls), NUMORACLE_TEST_SLEEP="0.3")
        k = rng.randint(0, 30)
        alive = _at_moment(p, calls, k, rng.uniform(0.0, 0.3), rng.uniform(1.0, 5.0))
        sent[sig.name] += 1
        if alive:
            landed[sig.name] += 1
            out, err = _kill(p, sig)
        else:
            out, err = p.communicate()
        if alive and sig == signal.SIGTERM:
            # 143 with its summary; -15 only if it came as the interpreter exited (handlers restored)
            assert p.returncode in (143, -15), (p.returncode, out[-2000:], err[-2000:])
            assert "Traceback" not in err, err
            if p.returncode == 143:
                assert "run terminated: exit code 143" in out, out[-2000:]
                saved_on_term += "\nSaved: " in out
        o = len(_orphans(mark))
        orphans += o
        print(f"COUNT fuzz run {i}: {sig.name} at kernel call {k} ({_calls(calls)} made), "
              f"{'landed' if alive else 'run had ended'}, rc={p.returncode}, orphans={o}", flush=True)
    corrupt = _corrupt(corpus)
    n_cases = len(C.find([corpus])) if corpus.exists() else 0
    tmp_left = len(list(corpus.rglob(".tmp-*"))) if corpus.exists() else 0
    print(f"COUNT fuzz: signals drawn {sent} (sent only to a live run), landed while alive {landed}, cases {n_cases}, corrupt {corrupt}, "
          f"findings saved by SIGTERMed runs {saved_on_term}, orphans {orphans}, .tmp dirs left {tmp_left}",
          flush=True)
    assert landed["SIGKILL"] >= 3 and landed["SIGTERM"] >= 3, landed
    assert orphans == 0 and corrupt == 0, (orphans, corrupt)
    # a later save removes what killed saves left behind
    p = subprocess.run([sys.executable, "-m", "numoracle", "fuzz", "rms_norm", "--kernel",
                        "tests.fixtures.user_kernels:rms_norm_truncating_store", "--seconds", "60", "--seed", "99",
                        "--corpus", str(corpus), "--database", "none", "--max-rows", "3", "--max-cols", "32",
                        "--quiet"], cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT)), capture_output=True,
                       text=True, timeout=600)
    assert p.returncode == 1, p.stderr
    tmp_after = len(list(corpus.rglob(".tmp-*")))
    corrupt_after = _corrupt(corpus)
    print(f"COUNT fuzz after the next save: cases {len(C.find([corpus]))}, corrupt {corrupt_after}, "
          f".tmp dirs left {tmp_after}", flush=True)
    assert tmp_after == 0 and corrupt_after == 0


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
    # a first run fills what one process leaves for the next (bytecode of a fresh clone, the
    # interpreter's caches), which made the measured stage lengths too long: in a fresh-clone CI
    # run the first kill meant for the correct stage landed after it (0 kills there)
    _campaign_run(tmp_path / "warm-up")
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
    by_kind = {st: {"SIGKILL": 0, "SIGTERM": 0} for st in kills}     # sent while it ran (p.poll() is None)
    for i in range(12):
        mark = uuid.uuid4().hex
        before = _tree(out) if out.exists() else {}
        resumes_in = _stage(out, units)
        p = _start(_campaign_args(out), mark)
        if kills[resumes_in] < 2:
            # early in the stage: a late kill lets a short stage finish unkilled, and the correct
            # stage, the first, is never resumed in again (a kill during start-up still lands in it)
            time.sleep(startup + rng.uniform(0.1, 0.6) * length[resumes_in])
        else:
            end = time.monotonic() + 600
            while p.poll() is None and _stage(out, units) == resumes_in and time.monotonic() < end:
                time.sleep(0.02)
            time.sleep(rng.uniform(0.1, 0.6) * length[_stage(out, units)])
        if p.poll() is not None:                   # it finished: the campaign is complete
            p.communicate()
            break
        stage = _stage(out, units)
        # each stage's first kill is a SIGKILL, its second a SIGTERM: both kinds in every stage it reaches
        signum = signal.SIGKILL if kills[stage] % 2 == 0 else signal.SIGTERM
        kills[stage] += 1
        by_kind[stage][signum.name] += 1
        _, err = _kill(p, signum)
        if signum == signal.SIGTERM:
            assert p.returncode in (143, -15), (p.returncode, err[-2000:])
            assert "Traceback" not in err, err[-2000:]
        o = len(_orphans(mark))
        orphans += o
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
        print(f"COUNT campaign run {i}: resumed in {resumes_in}, {signum.name} landed in {stage}, rc={p.returncode}, "
              f"orphans={o}, lost so far {lost}, redone so far {redone}", flush=True)
    tmp_before = len(list(out.rglob(".tmp*")))
    p = subprocess.run([sys.executable, "-m", "numoracle", *_campaign_args(out)], cwd=ROOT,
                       env=dict(os.environ, PYTHONPATH=str(ROOT)), capture_output=True, text=True, timeout=1800)
    assert p.returncode == 0, p.stderr[-2000:]
    tmp_after = len(list(out.rglob(".tmp*")))
    total = {k: sum(by_kind[st][k] for st in by_kind) for k in ("SIGKILL", "SIGTERM")}
    print(f"COUNT campaign: signals landed while it ran, by stage {by_kind} (all {total}), finished units lost "
          f"{lost}, recomputed {redone}, orphans {orphans}, .tmp files left before the last run {tmp_before}, "
          f"after it {tmp_after}", flush=True)
    assert kills["correct"] >= 1 and kills["mutation"] >= 1 and kills["replays"] >= 1, kills
    # a SIGKILL in every stage; a SIGTERM in at least the two stages always killed twice (the
    # replay stage may end before its second kill)
    assert all(by_kind[st]["SIGKILL"] >= 1 for st in by_kind) and total["SIGTERM"] >= 2, by_kind
    assert orphans == 0 and lost == 0 and redone == 0, (orphans, lost, redone)
    assert tmp_after == 0
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
    # four cases, each re-run with a kernel that takes 1.5 s a call: a replay lasts long enough
    # that moments drawn in its kernel calls find it alive
    corpus = tmp_path / "corpus"
    for seed in (1, 2, 3, 4):
        subprocess.run([sys.executable, "-m", "numoracle", "check", "rms_norm", "--kernel",
                        "faulty:unrounded_multiply", "--seed", str(seed), "--corpus", str(corpus)], cwd=ROOT,
                       env=dict(os.environ, PYTHONPATH=str(ROOT)), capture_output=True, timeout=600)
    n_cases = len(C.find([corpus]))
    assert n_cases >= 3, n_cases
    before = _tree(corpus)
    rng = random.Random(2)
    orphans = 0
    sent = {"SIGKILL": 0, "SIGTERM": 0}
    landed = {"SIGKILL": 0, "SIGTERM": 0}
    for i in range(8):
        mark = uuid.uuid4().hex
        sig = signal.SIGKILL if i % 2 else signal.SIGTERM
        calls = tmp_path / f"calls{i}.txt"
        p = _start(["replay", str(corpus), "--kernel", SLOW, "--brief"], mark, NUMORACLE_TEST_CALLS=str(calls),
                   NUMORACLE_TEST_SLEEP="1.5")
        k = rng.randint(0, n_cases)
        alive = _at_moment(p, calls, k, rng.uniform(0.0, 1.5), rng.uniform(0.5, 4.0))
        sent[sig.name] += 1
        if alive:
            landed[sig.name] += 1
            out, err = _kill(p, sig)
        else:
            out, err = p.communicate()
        if alive and sig == signal.SIGTERM:
            assert p.returncode in (143, -15), (p.returncode, out[-2000:], err[-2000:])
            assert "Traceback" not in err, err
        o = len(_orphans(mark))
        orphans += o
        print(f"COUNT replay run {i}: {sig.name} at kernel call {k} ({_calls(calls)} made), "
              f"{'landed' if alive else 'run had ended'}, rc={p.returncode}, orphans={o}", flush=True)
    after = _tree(corpus)
    changed = sum(1 for f in set(before) | set(after) if before.get(f) != after.get(f))
    tmp_left = len(list(corpus.rglob(".tmp*")))
    print(f"COUNT replay: {n_cases} cases, signals drawn {sent} (sent only to a live run), landed while alive {landed}, files changed "
          f"{changed}, corrupt {_corrupt(corpus)}, orphans {orphans}, .tmp dirs left {tmp_left}", flush=True)
    assert landed["SIGKILL"] >= 3 and landed["SIGTERM"] >= 3, landed
    assert orphans == 0
    assert after == before and tmp_left == 0
