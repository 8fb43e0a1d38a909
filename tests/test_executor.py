"""The executor layer (issue 9): units merged once per id give the serial
correct stage's exact result; a Dask LocalCluster of two CPU workers on the
interpreter runs the stage, survives a worker killed mid-run (its units run
again elsewhere, none lost, none counted twice) and reports its dashboard.

The cluster runs (a two-worker LocalCluster that interprets the kernels cold in each
worker, a killed worker, the local pool's killed process) are the slow tier; the default
tier keeps the unit and merge logic and starts one cluster (the GPU layout, no kernel)."""
from __future__ import annotations

import dataclasses
import json
import os
import signal
import urllib.request
from pathlib import Path

import pytest

from numoracle import backends, operators
from numoracle.studies.campaign import correct as C
from numoracle.studies.executors import Unit, map_units
from numoracle.runner.replay import replay
from numoracle.studies.campaign import CampaignDir, run_correct_stage
from numoracle.studies.campaign.units import (MergeError, Merger, correct_units, load_unit, merge_kernel,
                                              run_correct_unit, save_unit, unit_cases)

OP = "swiglu"                  # the cheapest operator on the interpreter, ~0.1 s a case
KERNELS = ("correct", "flat")  # two of its kernels: each is interpreted cold once per worker
N = 6                          # cases per kernel: six input groups, one case each


# Units carry their cases' widths (sweep_kernel(raw=True)): the merged medians are exact.
EXACT = True


def _strip(d, exact=True):
    out = {k: v for k, v in d.items() if k != "seconds"}
    if not exact:
        def nomed(s):
            return None if s is None else {k: v for k, v in s.items() if k != "median"}
        for key in ("width_ulps", "accepted_width_ulps"):
            out[key] = {m: nomed(s) for m, s in (out.get(key) or {}).items()}
        out["assert_close_width_ulps"] = nomed(out.get("assert_close_width_ulps"))
    return out


@pytest.fixture(scope="module")
def backend():
    return backends.select("interpreter")


@pytest.fixture(scope="module")
def serial(backend):
    """The serial stage's per-kernel results (what numoracle campaign writes)."""
    op = operators.get(OP)
    cl = C.cases(op, N)
    return {f"{OP}/{k}": C.sweep_kernel(op, k, op.kernels[k], cl, backend, "cpu") for k in KERNELS}


def test_units_partition_the_serial_cases(backend):
    op = operators.get(OP)
    for chunk in (None, 1):
        units = correct_units([OP], 13, backend, chunk=chunk)
        for k in op.kernel_specs:
            got = sorted(c.seed for u in units if u.kernel == k for c in unit_cases(u))
            assert got == [c.seed for c in C.cases(op, 13)]        # every case once, none twice
    assert len({u.id for u in correct_units([OP], 13, backend, chunk=1)}) == len(correct_units([OP], 13, backend,
                                                                                                 chunk=1))


def test_split_sweep_merges_to_sweep_kernel_with_rejects(backend):
    """sweep_kernel per case, merged, equals sweep_kernel over all the cases,
    on a faulty kernel (rejects, examples) and on a correct one."""
    op = operators.get("rms_norm")
    # Llama casting: the one the fault (pair 5, x*rstd not rounded before the multiply by w) concerns
    cl = [dataclasses.replace(c, params=tuple(sorted({**dict(c.params), "casting": "llama", "offset": 0.0}.items())))
          for c in C.cases(op, 5)]
    kw = {"raw": True} if EXACT else {}
    refs = []
    for kern in (op.faulty_kernel("unrounded_multiply"), op.kernels["correct"]):
        ref = C.sweep_kernel(op, "k", kern, cl, backend, "cpu")
        refs.append(ref)
        assert _strip(merge_kernel([ref])) == _strip(ref)
        parts = [C.sweep_kernel(op, "k", kern, [c], backend, "cpu", **kw) for c in reversed(cl)]
        assert _strip(merge_kernel(parts), EXACT) == _strip(ref, EXACT)
    assert refs[0]["counts"]["fixed"].get("reject", 0) >= 1 and refs[0]["examples"]    # the faulty one
    assert refs[1]["counts"]["fixed"] == {"accept": len(cl)}                             # the correct one


def test_merge_refuses_a_field_it_cannot_merge():
    a = {"cases": 1, "note": "x", "examples": []}
    assert merge_kernel([a, dict(a)])["note"] == "x"
    with pytest.raises(MergeError, match="note"):
        merge_kernel([a, {**a, "note": "y"}])


def test_merger_counts_a_unit_once_and_unit_files_round_trip(backend, tmp_path, serial):
    units = [u for u in correct_units([OP], N, backend) if u.kernel == "correct"]
    m = Merger(units)
    results = {u.id: run_correct_unit(u) for u in units}
    for u in units:
        assert m.add(u, results[u.id])
        assert not m.add(u, results[u.id])                  # delivered twice: merged once
        save_unit(tmp_path, u, results[u.id])
        back = load_unit(tmp_path, u)
        assert back is not None and _strip(merge_kernel([back])) == _strip(merge_kernel([results[u.id]]))
    assert m.complete(f"{OP}/correct")
    assert _strip(m.merged(f"{OP}/correct"), EXACT) == _strip(serial[f"{OP}/correct"], EXACT)
    other = Unit("correct", OP, "correct", units[0].group, units[0].seeds, "interpreter", (("n_cases", N + 1),))
    assert load_unit(tmp_path, other) is None               # another campaign's unit is not picked up


class KillOnce:
    """A unit function that kills its own worker process (SIGKILL) the first
    time it runs one of ``victims``; a marker file (holding the killed pid)
    makes the next attempt run normally."""

    def __init__(self, marker_dir, victims):
        self.marker_dir, self.victims = str(marker_dir), set(victims)

    def __call__(self, unit):
        if unit.id in self.victims:
            marker = Path(self.marker_dir) / (unit.id.replace("/", "_").replace(":", "_") + ".killed")
            try:
                fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
            except FileExistsError:
                marker.with_suffix(".rerun").write_text(str(os.getpid()))
            else:
                os.write(fd, str(os.getpid()).encode())
                os.close(fd)
                os.kill(os.getpid(), signal.SIGKILL)
        return run_correct_unit(unit)


@pytest.mark.slow
def test_local_executor_reruns_the_units_of_a_dead_process(tmp_path, backend):
    """The local executor's process pool: the dead process's unit is run in a
    fresh process; each unit is delivered once."""
    units = [u for u in correct_units([OP], 2, backend) if u.kernel == "flat"]
    victim = units[0].id
    info = {}
    got = list(map_units(units, KillOnce(tmp_path, [victim]), executor="local", workers=1, info=info))
    assert sorted(u.id for u, _ in got) == sorted(u.id for u in units)
    killed = int(next(tmp_path.glob("*.killed")).read_text())
    assert int(next(tmp_path.glob("*.rerun")).read_text()) != killed     # run again in a new process
    assert info["resubmitted"] == 1


try:
    import distributed  # noqa: F401
except ImportError:
    HAVE_DASK = False
else:
    HAVE_DASK = True
needs_dask = pytest.mark.skipif(not HAVE_DASK, reason="dask cannot be imported (pip install 'numoracle[dask]')")


@pytest.fixture(scope="module")
def client():
    import distributed

    from numoracle.studies.executors.core import start_cluster, wait_for_workers
    cluster = start_cluster("interpreter", 2, memory_limit="2GiB", silence_logs=50)
    c = distributed.Client(cluster)
    wait_for_workers(c, 2)
    yield c
    c.close()
    cluster.close()


@pytest.mark.slow
@needs_dask
def test_dask_correct_stage_equals_serial_and_reports_dashboard(client, serial, tmp_path, backend):
    data = {}
    out = CampaignDir(tmp_path)
    res = run_correct_stage([OP], N, backend, "dask", out=out, data=data, client=client,
                            log=lambda s: None, kernels=KERNELS, save=lambda: out.save(data))
    assert set(res) == set(serial)
    for k in serial:
        assert res[k]["groups"] == serial[k]["groups"]      # the same counts per input group
        assert _strip(res[k], EXACT) == _strip(serial[k], EXACT)    # and everything else
    ex = data["executor"]["correct"]
    assert ex["executor"] == "dask" and ex["workers"] == 2 and ex["units_run"] == len(correct_units([OP], N, backend,
                                                                                                kernels=KERNELS))
    assert ex["dashboard"].startswith("http://") and ex["exact_medians"] is EXACT
    with urllib.request.urlopen(ex["dashboard"].rsplit("/", 1)[0] + "/health", timeout=10) as r:
        assert r.read() == b"ok"
    on_disk = json.loads((tmp_path / "campaign.json").read_text())
    assert on_disk["correct"][f"{OP}/correct"]["groups"] == serial[f"{OP}/correct"]["groups"]
    # resumed: nothing left to run, the same result
    again = {"correct": {}}
    run_correct_stage([OP], N, backend, "dask", out=out, data=again, client=client, log=lambda s: None,
                      kernels=KERNELS)
    assert again["executor"]["correct"]["units_run"] == 0
    assert {k: _strip(v, EXACT) for k, v in again["correct"].items()} == \
        {k: _strip(v, EXACT) for k, v in res.items()}


@pytest.mark.slow
@needs_dask
@pytest.mark.parametrize("allowed_failures", [None, 0])
def test_dask_worker_killed_mid_run(client, serial, tmp_path, backend, allowed_failures):
    """A unit kills its worker the first time it runs.  With the scheduler's
    default allowed failures the scheduler reschedules it on the other (or the
    restarted) worker; with 0 the client sees KilledWorker and submits it
    again itself.  Either way every unit is merged exactly once and the result
    equals the serial stage's."""
    units = correct_units([OP], N, backend, kernels=KERNELS)
    victims = [units[len(units) // 3 + (allowed_failures is None)].id]
    old = client.run_on_scheduler(lambda dask_scheduler: dask_scheduler.allowed_failures)
    if allowed_failures is not None:
        client.run_on_scheduler(lambda dask_scheduler, n=allowed_failures: setattr(dask_scheduler,
                                                                                    "allowed_failures", n))
    try:
        data = {}
        res = run_correct_stage([OP], N, backend, "dask", data=data, client=client, log=lambda s: None,
                                unit_fn=KillOnce(tmp_path, victims), kernels=KERNELS)
    finally:
        client.run_on_scheduler(lambda dask_scheduler, n=old: setattr(dask_scheduler, "allowed_failures", n))
    killed = sorted(tmp_path.glob("*.killed"))
    assert len(killed) == len(victims)                      # the kills did happen
    assert len(list(tmp_path.glob("*.rerun"))) == len(victims)  # and the victims ran again
    for k in serial:
        assert _strip(res[k], EXACT) == _strip(serial[k], EXACT)    # nothing lost, nothing counted twice
    ex = data["executor"]["correct"]
    assert ex["units_run"] == len(units)
    if allowed_failures == 0:
        # the client's own resubmission was used: for the victim, and for any unit that was
        # assigned to the killed worker with it (KilledWorker too, with no allowed failures)
        assert ex["resubmitted"] >= 1


@pytest.mark.slow
@needs_dask
def test_dask_fuzz_units_merge_and_stream_corpus(client, tmp_path, backend):
    """Fuzz units of a faulty kernel: statistics merged per group, the shrunk
    counterexample's corpus case written on the client and replayable."""
    from numoracle.studies.executors.fuzz import fuzz_units, run_fuzz
    units = fuzz_units("rms_norm", "faulty:unrounded_multiply", backend, seeds=(0, 2), groups=["calibration"],
                       examples=4, max_rows=4, max_cols=64, shrink_seconds=5.0,
                       params={"casting": ("llama",), "offset": (0.0,)})
    res = run_fuzz(units, executor="dask", client=client, corpus=tmp_path / "corpora", log=lambda s: None)
    assert res["units_done"] == len(units) == 2
    assert set(res["groups"]) == {"calibration"}
    assert res["totals"]["cases"] == res["groups"]["calibration"]["cases"] >= 1
    assert res["found"] and res["counterexamples"]
    saved = [Path(s) for s in res["saved"]]
    assert saved and all((s / "case.json").exists() for s in saved)
    assert not list((tmp_path / "corpora").rglob(".tmp-*"))
    r = replay(saved[0], backend="interpreter")
    assert r["reproduced"]


def test_a_fuzz_unit_runs_in_the_worker_and_its_corpus_case_is_written_on_the_client(backend, tmp_path):
    """The worker side of a fuzz unit, run in this process (the default tier's cover of the
    fuzz executor; the Dask run is the slow tier's): a faulty kernel's counterexample comes
    back as files, written on the client as a whole case that replays."""
    from numoracle import InvalidArgument
    from numoracle.studies.executors.fuzz import fuzz_units, run_fuzz_unit, write_case
    with pytest.raises(InvalidArgument, match="unknown input-shift group"):
        fuzz_units("rms_norm", "faulty:unrounded_multiply", backend, groups=["no_such_group"])
    # a store that truncates is wrong on nearly every case, whatever the Hypothesis release draws
    unit, = fuzz_units("rms_norm", "tests.fixtures.user_kernels:rms_norm_truncating_store", backend, seeds=(0, 1),
                       groups=["calibration"], examples=10, max_rows=2, max_cols=48, shrink=False,
                       params={"casting": ("llama",), "offset": (0.0,)})
    out = run_fuzz_unit(unit)
    assert out["unit"] == unit.id and out["groups"]["calibration"]["cases"] >= 1
    # the search's breakdown comes back too (the client sums the units'), within the search's time
    from numoracle.runner.outcomes import Breakdown
    assert set(out["breakdown"]) == set(Breakdown.PHASES)
    assert 0 < sum(v for k, v in out["breakdown"].items() if k != "shrink") <= out["seconds"] + 1e-3
    assert out["counterexamples"] and out["corpus"], out
    case = write_case(tmp_path / "corpora", out["corpus"][0]["rel"], out["corpus"][0]["files"])
    assert (case / "case.json").exists() and not list((tmp_path / "corpora").rglob(".tmp-*"))
    assert replay(case, backend="interpreter")["reproduced"]


def test_gpu_workers_beyond_the_gpu_count_share_the_gpus_in_turn(monkeypatch):
    """One worker per visible GPU by default; ``workers`` above the GPU count
    cycle over them (the local executor used to keep only the first
    ``workers`` GPUs, so --workers 12 on one GPU ran one process)."""
    from numoracle.errors import InvalidArgument
    from numoracle.studies.executors.core import _gpu_worker_names, gpu_slots
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,5")
    assert gpu_slots() == ["3", "5"]
    assert gpu_slots(1) == ["3"]
    assert gpu_slots(5) == ["3", "5", "3", "5", "3"]
    assert _gpu_worker_names(["3", "5"], "gpu") == {"gpu3": "3", "gpu5": "5"}
    assert _gpu_worker_names(gpu_slots(3), "h-gpu") == {"h-gpu3.0": "3", "h-gpu5.0": "5", "h-gpu3.1": "3"}
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    with pytest.raises(InvalidArgument, match="no GPU is visible"):
        gpu_slots(4)


@pytest.mark.slow
def test_local_workers_split_the_host_cores_for_torch(backend):
    """Each local worker process uses its share of the host's cores for torch's
    CPU threads, so workers do not oversubscribe the host."""
    from numoracle.studies.executors.core import host_cores
    units = [Unit("probe", OP, "correct", g, (0, 1), backend) for g in ("a", "b", "c", "d")]
    info = {}
    got = dict((u.id, r) for u, r in map_units(units, _threads_and_pid, executor="local", workers=2, info=info))
    assert info["threads"] == max(1, host_cores() // 2)
    assert {t for t, _ in got.values()} == {info["threads"]}
    assert len({pid for _, pid in got.values()}) == 2


def _threads_and_pid(unit):
    import torch
    return torch.get_num_threads(), os.getpid()


@needs_dask
def test_gpu_cluster_pins_one_device_per_worker(monkeypatch):
    """The gpu backend's cluster, built here without a GPU: workers pinned to
    the visible devices in turn (three workers on two devices), each with only
    its own device in CUDA_VISIBLE_DEVICES and the resource GPU=1, so a unit
    submitted with resources={"GPU": 1} holds its worker's share of a device."""
    import distributed

    from numoracle.studies.executors.core import start_cluster, wait_for_workers
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    cluster = start_cluster("gpu", workers=3, memory_limit="1GiB", silence_logs=50)
    try:
        with distributed.Client(cluster) as c:
            wait_for_workers(c, 3)
            ws = c.scheduler_info()["workers"]
            assert sorted(w["resources"].get("GPU") for w in ws.values()) == [1, 1, 1]
            seen = c.run(lambda: (os.environ["CUDA_VISIBLE_DEVICES"], os.environ.get("TRITON_INTERPRET")))
            assert sorted(v[0] for v in seen.values()) == ["0", "0", "1"]
            assert all(v[1] != "1" for v in seen.values())
            futs = [c.submit(lambda i: os.environ["CUDA_VISIBLE_DEVICES"], i, resources={"GPU": 1}, pure=False)
                    for i in range(4)]
            assert set(c.gather(futs)) <= {"0", "1"}
    finally:
        cluster.close()
