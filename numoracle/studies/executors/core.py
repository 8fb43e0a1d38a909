"""Work units and the two executors that run them (issue 9).

A unit is plain, hashable data -- (stage, operator, kernel, input group, seed
range) plus the few numbers that fix its cases -- so any process on any host
rebuilds the same work from it, and its ``id`` is the key under which its
result is merged: a unit whose result has been merged is never merged again,
whatever retries or resumptions deliver it twice.

``map_units(units, fn, executor=...)`` yields ``(unit, result)`` as units
complete:

- ``local`` (the default): one spawned process per visible GPU on the gpu
  backend (each pinned with ``CUDA_VISIBLE_DEVICES``; ``workers`` above the
  GPU count share the GPUs in turn), ``workers`` processes (default 1) on the
  interpreter backend; ``workers=0`` runs inline.  Each process gets an equal
  share of the host's cores for torch's CPU threads.  A unit whose process
  dies is run again in a fresh one, up to ``retries`` times.
- ``dask``: a Dask distributed client -- to ``scheduler`` when given, else to
  a cluster started here (one worker per GPU, pinned through its environment
  and holding the worker resource ``GPU=1``; CPU workers on the interpreter).
  Units go out with ``retries=`` (a raising unit is run again) and the
  scheduler reschedules the units of a lost worker; a unit that still fails
  (``KilledWorker`` after the scheduler's allowed failures) is submitted again
  from here, up to ``retries`` times, under a new key.
"""
from __future__ import annotations

import collections
import concurrent.futures as cf
import multiprocessing as mp
import os
import sys
import time
import uuid
from dataclasses import dataclass, field

from ... import backends
from ...errors import InvalidArgument, NumoracleError

EXECUTORS = ("local", "dask")


class UnitFailed(NumoracleError):
    """A unit failed on every attempt."""


@dataclass(frozen=True)
class Unit:
    """(stage, operator, kernel, input group, seed range [lo, hi)) and the
    stage's own settings as sorted (name, value) pairs."""
    stage: str
    op: str
    kernel: str
    group: str
    seeds: tuple            # (lo, hi): the seeds lo <= s < hi
    backend: str = "interpreter"     # a backend's name: units are data, sent to other processes
    settings: tuple = field(default=())

    def __post_init__(self):
        if not isinstance(self.backend, str):           # a numoracle.backends.Backend
            object.__setattr__(self, "backend", self.backend.name)

    @property
    def id(self) -> str:
        return f"{self.stage}:{self.op}/{self.kernel}/{self.group}/{self.seeds[0]}-{self.seeds[1]}"

    @property
    def key(self) -> str:
        """The kernel the unit belongs to, as the campaign names it."""
        return f"{self.op}/{self.kernel}"

    def get(self, name, default=None):
        return dict(self.settings).get(name, default)

    def to_dict(self) -> dict:
        return {"id": self.id, "stage": self.stage, "op": self.op, "kernel": self.kernel, "group": self.group,
                "seeds": list(self.seeds), "backend": self.backend, "settings": dict(self.settings)}


def visible_gpus() -> list[str]:
    """The device ordinals this process may use: CUDA_VISIBLE_DEVICES's entries
    when set, else every device torch sees."""
    env = os.environ.get("CUDA_VISIBLE_DEVICES")
    if env is not None:
        return [d.strip() for d in env.split(",") if d.strip() and d.strip() != "-1"]
    import torch
    return [str(i) for i in range(torch.cuda.device_count())] if torch.cuda.is_available() else []


def gpu_slots(workers: int | None = None) -> list[str]:
    """The device of each worker process on the gpu backend: every visible GPU
    once, or ``workers`` processes over the visible GPUs in turn.  More
    processes than GPUs pay off because a fuzz or campaign case of a small
    kernel is mostly host work (drawing, launching, small verdicts on the
    host's CPU), which one process does on one core."""
    devs = visible_gpus()
    if not devs:
        raise InvalidArgument("backend='gpu' but no GPU is visible (CUDA_VISIBLE_DEVICES or torch.cuda); use "
                              "--backend interpreter.")
    if not workers:
        return devs
    return [devs[i % len(devs)] for i in range(workers)]


def host_cores() -> int:
    """The cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def prepare_worker(backend: str, device: str | None = None, settings_values: dict | None = None,
                   threads: int | None = None) -> str:
    """Set this process up for ``backend`` (idempotent): pin it to ``device``,
    choose Triton's mode before any kernel module is imported, repair the
    interpreter, take the parent's settings (``settings_values``), use ``threads``
    CPU threads in torch (its default, every core, oversubscribes a host shared by
    several workers), and die with the parent (no orphans whatever ends it).  Runs
    in every worker before its first unit."""
    if settings_values is not None:
        from ...config import settings
        from ...processes import die_with_parent
        die_with_parent()
        settings.register_profile("numoracle-unit-worker", **settings_values)
        settings.load_profile("numoracle-unit-worker")
    if device is not None:
        os.environ["CUDA_VISIBLE_DEVICES"] = str(device)
    if backend == "interpreter":
        os.environ.update(backends.resolve("interpreter").environment())
    elif backends.interpret_requested():
        raise InvalidArgument("backend='gpu' in a worker whose environment sets TRITON_INTERPRET=1; start the "
                              "worker without it.")
    if threads:
        import torch
        torch.set_num_threads(threads)
    return backends.select(backend).name


def call_unit(fn, unit: Unit):
    """What a worker runs: set-up for the unit's backend, then ``fn(unit)``."""
    prepare_worker(unit.backend)
    return fn(unit)


def _default_progress(done: int, total: int, unit: Unit, result, info: dict) -> None:
    print(f"[{info.get('executor')}] {done}/{total} {unit.id}", file=sys.stderr, flush=True)


def map_units(units, fn, *, executor: str = "local", scheduler: str | None = None, workers: int | None = None,
              backend: str | None = None, retries: int = 2, progress=None, client=None, info: dict | None = None,
              cluster_options: dict | None = None):
    """Run ``fn(unit)`` for every unit (duplicates by id run once) and yield
    ``(unit, result)`` as units complete, each unit exactly once.

    ``fn`` must be importable by the workers (a module-level function or a
    picklable callable).  ``info`` (a dict) is filled with what was used:
    executor, workers, dashboard link (dask), resubmissions.  ``progress``:
    ``callable(done, total, unit, result, info)``, or True for a line on
    stderr per unit.  Closing the generator cancels the units not yet done."""
    if executor not in EXECUTORS:
        raise InvalidArgument(f"executor={executor!r}: expected one of {EXECUTORS}.")
    if scheduler and executor != "dask":
        raise InvalidArgument(f"scheduler={scheduler!r} given with executor={executor!r}; a scheduler address "
                              f"needs executor='dask'.")
    if retries < 0:
        raise InvalidArgument(f"retries={retries}: expected a count >= 0.")
    seen, todo = set(), []
    for u in units:
        if u.id not in seen:
            seen.add(u.id)
            todo.append(u)
    backends_used = {u.backend for u in todo}
    if backend is not None and not isinstance(backend, str):      # a numoracle.backends.Backend
        backend = backend.name
    if backend is None:
        backend = next(iter(backends_used)) if len(backends_used) == 1 else "interpreter"
    if len(backends_used) > 1:
        raise InvalidArgument(f"units for several backends {sorted(backends_used)}; map each backend's units "
                              f"in its own call.")
    if backend not in backends.RUNNING:
        raise InvalidArgument(f"backend={backend!r}: expected 'interpreter' or 'gpu' (resolve 'auto' with "
                              f"numoracle.backends.select first).")
    info = {} if info is None else info
    info.update(executor=executor, units=len(todo), resubmitted=0)
    if progress is True:
        progress = _default_progress
    if not todo:
        return
    gen = (_map_local(todo, fn, workers, backend, retries, info) if executor == "local"
           else _map_dask(todo, fn, scheduler, workers, backend, retries, info, client, cluster_options or {}))
    done = 0
    try:
        for unit, result in gen:
            done += 1
            if progress:
                progress(done, len(todo), unit, result, info)
            yield unit, result
    finally:
        gen.close()


# ---- local: spawned processes --------------------------------------------------------------------

def _pool(backend: str, device: str | None, threads: int):
    from ...config import settings
    return cf.ProcessPoolExecutor(max_workers=1, mp_context=mp.get_context("spawn"), initializer=prepare_worker,
                                  initargs=(backend, device, settings.default.to_dict(), threads))


def _map_local(units, fn, workers, backend, retries, info):
    if backend == "gpu" and workers != 0:
        devs = gpu_slots(workers)
    else:
        n = 1 if workers is None else workers
        devs = [None] * n
    threads = max(1, host_cores() // max(1, len(devs)))
    info.update(workers=len(devs), devices=[d for d in devs if d is not None], threads=threads)
    if not devs:                                 # workers=0: inline, in this process
        prepare_worker(backend)
        for u in units:
            yield u, _with_retries(fn, u, retries, info)
        return
    pending = collections.deque((u, 0) for u in units)
    slots = [_pool(backend, d, threads) for d in devs]
    busy: dict = {}                              # future -> (unit, attempt, slot index)
    try:
        while pending or busy:
            free = [i for i in range(len(slots)) if i not in {s for (_, _, s) in busy.values()}]
            for i in free:
                if not pending:
                    break
                u, a = pending.popleft()
                busy[slots[i].submit(call_unit, fn, u)] = (u, a, i)
            finished, _ = cf.wait(list(busy), return_when=cf.FIRST_COMPLETED)
            for fut in finished:
                u, a, i = busy.pop(fut)
                try:
                    res = fut.result()
                except BaseException as exc:
                    if isinstance(exc, cf.process.BrokenProcessPool):     # the process died: a new one
                        slots[i].shutdown(wait=False, cancel_futures=True)
                        slots[i] = _pool(backend, devs[i], threads)
                        # the other units that were on it are lost with it: run them again too
                        for f2 in [f for f, (_, _, s) in busy.items() if s == i]:
                            u2, a2, _ = busy.pop(f2)
                            pending.appendleft((u2, a2))
                    if a >= retries:
                        raise UnitFailed(f"unit {u.id} failed {a + 1} time(s); last: {type(exc).__name__}: "
                                         f"{exc}") from exc
                    info["resubmitted"] += 1
                    pending.append((u, a + 1))
                    continue
                yield u, res
    finally:
        for s in slots:
            s.shutdown(wait=False, cancel_futures=True)


def _with_retries(fn, u, retries, info):
    for a in range(retries + 1):
        try:
            return fn(u)
        except Exception as exc:
            if a >= retries:
                raise UnitFailed(f"unit {u.id} failed {a + 1} time(s); last: {type(exc).__name__}: {exc}") from exc
            info["resubmitted"] += 1


# ---- dask ----------------------------------------------------------------------------------------

def _import_dask():
    try:
        import distributed
    except ImportError:
        raise InvalidArgument("executor='dask' needs the 'dask' extra: pip install 'numoracle[dask]' "
                              "(dask and distributed).") from None
    return distributed


def start_cluster(backend: str, workers: int | None = None, *, memory_limit=None, host: str = "127.0.0.1",
                  dashboard_address: str = "127.0.0.1:0", **options):
    """A cluster on this host: one single-threaded worker process per visible
    GPU (``CUDA_VISIBLE_DEVICES`` set in its environment, resource ``GPU=1``;
    ``workers`` above the GPU count share them in turn) on the gpu backend;
    ``workers`` CPU worker processes (default: half the cores, at least 1) with
    TRITON_INTERPRET=1 on the interpreter.
    ``memory_limit``: host memory per worker before Dask pauses/restarts it
    (default 4GiB for CPU workers, none for GPU workers, whose process holds
    the CUDA context and libraries and whose real limit is the device's).
    Scheduler and workers listen on ``host`` (loopback: this host only)."""
    distributed = _import_dask()
    if memory_limit is None:
        memory_limit = 0 if backend == "gpu" else "4GiB"
    if backend == "gpu":
        names = _gpu_worker_names(gpu_slots(workers), "gpu")
        spec = {name: {"cls": distributed.Nanny,
                       "options": {"nthreads": 1, "memory_limit": memory_limit, "resources": {"GPU": 1},
                                   "env": gpu_worker_env(d), "name": name, "host": host, **options}}
                for name, d in names.items()}
        sched = {"cls": distributed.Scheduler, "options": {"dashboard_address": dashboard_address, "host": host}}
        return distributed.SpecCluster(workers=spec, scheduler=sched, name="numoracle-gpu")
    n = workers if workers else max(1, (os.cpu_count() or 2) // 2)
    return distributed.LocalCluster(n_workers=n, threads_per_worker=1, processes=True, memory_limit=memory_limit,
                                    host=host, dashboard_address=dashboard_address, env={"TRITON_INTERPRET": "1"},
                                    resources={"CPU": 1}, **options)


def _gpu_worker_names(devs: list[str], prefix: str) -> dict:
    """{worker name: device}: ``{prefix}{device}``, with ``.k`` added where workers share a device."""
    shared = len(set(devs)) < len(devs)
    seen: dict = {}
    out = {}
    for d in devs:
        k = seen[d] = seen.get(d, -1) + 1
        out[f"{prefix}{d}.{k}" if shared else f"{prefix}{d}"] = d
    return out


def gpu_worker_env(device) -> dict:
    from ... import backends
    env = {"CUDA_VISIBLE_DEVICES": str(device)}
    if backends.interpret_requested():
        env["TRITON_INTERPRET"] = "0"
    return env


def _map_dask(units, fn, scheduler, workers, backend, retries, info, client, cluster_options):
    distributed = _import_dask()
    own_client = own_cluster = None
    if client is None:
        if scheduler:
            client = own_client = distributed.Client(scheduler, timeout="30s")
        else:
            own_cluster = start_cluster(backend, workers, **cluster_options)
            client = own_client = distributed.Client(own_cluster)
    try:
        info["dashboard"] = client.dashboard_link
        info["scheduler"] = client.scheduler.address
        ws = client.scheduler_info().get("workers", {})
        info["workers"] = len(ws)
        resources = None
        if backend == "gpu":
            resources = {"GPU": 1}
            if ws and not any(w.get("resources", {}).get("GPU") for w in ws.values()):
                raise InvalidArgument(f"backend='gpu' on scheduler {info['scheduler']}: none of its {len(ws)} "
                                      f"workers has the resource GPU; start one worker per GPU with "
                                      f"`python -m numoracle.studies.executors workers {info['scheduler']}` (or "
                                      f"`dask worker ADDRESS --nthreads 1 --resources GPU=1` with "
                                      f"CUDA_VISIBLE_DEVICES set).")
        print(f"numoracle: dask scheduler {info['scheduler']}, {len(ws)} worker(s), dashboard "
              f"{info['dashboard']}", file=sys.stderr, flush=True)
        run = uuid.uuid4().hex[:8]
        attempts: dict = {}
        owner: dict = {}

        def submit(u, a):
            fut = client.submit(call_unit, fn, u, key=f"numoracle-{run}-{u.id}-a{a}", pure=False,
                                retries=retries, resources=resources)
            attempts[u.id] = a
            owner[fut.key] = u
            return fut

        futs = [submit(u, 0) for u in units]
        ac = distributed.as_completed(futs)
        delivered = set()
        try:
            for fut in ac:
                u = owner.pop(fut.key)
                if u.id in delivered:           # never merged twice
                    continue
                if fut.status == "finished":
                    try:
                        res = fut.result()
                    except Exception as exc:    # lost between finishing and fetching
                        res, err = None, exc
                    else:
                        err = None
                else:
                    res, err = None, fut.exception() if fut.status == "error" else RuntimeError(fut.status)
                if err is not None:
                    a = attempts[u.id]
                    if a >= retries:
                        raise UnitFailed(f"unit {u.id} failed {a + 1} time(s) on dask; last: "
                                         f"{type(err).__name__}: {err}") from err
                    info["resubmitted"] += 1
                    ac.add(submit(u, a + 1))
                    continue
                delivered.add(u.id)
                fut.release()
                yield u, res
        finally:
            pend = [f for f in ac.futures] if hasattr(ac, "futures") else []
            if pend:
                client.cancel(pend)
    finally:
        if own_client is not None:
            own_client.close()
        if own_cluster is not None:
            own_cluster.close()


async def _serve_workers(scheduler: str, devices, backend: str, memory_limit: str, name: str):
    import asyncio
    distributed = _import_dask()
    nannies = []
    names = _gpu_worker_names(devices, f"{name}-{'gpu' if backend == 'gpu' else 'cpu'}")
    for wname, d in names.items():
        env = gpu_worker_env(d) if backend == "gpu" else {"TRITON_INTERPRET": "1"}
        res = {"GPU": 1} if backend == "gpu" else {"CPU": 1}
        nannies.append(distributed.Nanny(scheduler, nthreads=1, memory_limit=memory_limit, resources=res, env=env,
                                         name=wname))
    await asyncio.gather(*nannies)
    try:
        await asyncio.gather(*(n.finished() for n in nannies))
    finally:
        await asyncio.gather(*(n.close() for n in nannies), return_exceptions=True)


def serve_workers(scheduler: str, *, backend: str = "gpu", workers: int | None = None, memory_limit=0,
                  name: str | None = None) -> None:
    """Start this host's workers for ``scheduler`` and block: one per visible
    GPU (pinned, resource GPU=1; ``workers`` above the GPU count share them in
    turn), or ``workers`` CPU workers on the interpreter backend."""
    import asyncio
    import socket
    if backend == "gpu":
        devs = gpu_slots(workers)
    else:
        devs = [str(i) for i in range(workers or 1)]
    asyncio.run(_serve_workers(scheduler, devs, backend, memory_limit, name or socket.gethostname()))


def wait_for_workers(client, n: int, timeout: float = 120.0) -> None:
    t0 = time.time()
    while len(client.scheduler_info().get("workers", {})) < n:
        if time.time() - t0 > timeout:
            raise TimeoutError(f"fewer than {n} Dask workers after {timeout:g} s")
        time.sleep(0.2)
