#!/usr/bin/env python3
"""Where an isolated kernel call's time goes on this machine's device (``--isolate``, the
supervised worker of ``numoracle.runner.worker``): rms_norm's correct kernel called in-process
and through the worker, CALLS calls each (default 200), with the parent's pack and unpack timed
apart and a GPU op's latency in the parent right after a worker call; the steps of the
child's side of a call (``worker.serve``) timed one by one in this process; the kernel over
300 random shapes (rows 1-64, columns 1-4096) in-process and through the worker, twice (the
second pass with every specialization loaded); then, unless ``--no-fuzz``, a profile of an
isolated fuzz run (after an 8 s warm-up).  ``--pingpong`` measures only the round trip of one
byte between two processes over pipes, sleeping on the pipe or polling it, with a GPU op (and
its wait) in the child, the parent, both or neither.  ``--start`` measures the worker's start
in parts (the zygote's spawn and imports, the child's fork and set-up, its first calls of
seven shapes), and the same first calls in-process, each in a fresh process, twice.
``--trace SECONDS`` runs an isolated fuzz search twice in one process (the second finds the
worker warm) and times every worker call: the start, the first call of each new (dtype,
block, parameters), the others.

    PYTHONPATH=$PWD python scripts/isolation_cost.py [CALLS] [--no-fuzz] [--pingpong] [--start] [--trace SECONDS]

docs/results/2026-12-05-h200-fuzz-workers.md, 2026-12-05-h100-isolation-diagnosis.txt,
2026-12-05-h100-worker-transport.md, 2026-12-05-h100-steady-state.md.
"""
import cProfile
import io
import json
import os
import pstats
import random
import subprocess
import sys
import time

import torch

from numoracle import backends, operators
from numoracle.runner import fuzz
from numoracle.runner import worker as W
from numoracle.runner.execute import call_kernel
from numoracle.runner.kernels import resolve
from numoracle.strategies import cases

DEV = "cuda" if torch.cuda.is_available() else "cpu"


def timeit(f, n):
    """ms a call, after one call outside the clock."""
    f()
    t = time.perf_counter()
    for _ in range(n):
        f()
    return (time.perf_counter() - t) / n * 1e3


def send(region, x):
    """What a process sends of ``x``: its description, pickled, and its tensors in ``region``."""
    import pickle
    tensors = []
    described = W.pack(x, tensors)
    spans, size = W.write(region, tensors)
    return pickle.dumps((described, spans, size), protocol=pickle.HIGHEST_PROTOCOL)


def receive(region, msg, device):
    import pickle
    described, spans, size = pickle.loads(msg)
    return W.unpack(described, device, region, spans, size)


def shape_row(wk, kfn, recipe, rows, cols, n):
    x = torch.randn(rows, cols, device=DEV).to(torch.bfloat16)
    w = (torch.rand(cols, device=DEV) + 0.5).to(torch.bfloat16)
    xs, ws = x.cpu(), w.cpu()
    region = W._Region()
    packed = send(region, (x, w))

    def parent_op_after_call():
        wk.call(recipe, [x, w], {}, {})
        t = time.perf_counter()
        torch.ones(1, device=DEV).sum().item()
        return time.perf_counter() - t

    parent_op_after_call()
    return {"shape": (rows, cols),
            "inproc": timeit(lambda: call_kernel(kfn, [x, w], {}, {}, device=DEV), n),
            "worker": timeit(lambda: wk.call(recipe, [x, w], {}, {}), n),
            "worker_cpu_inputs": timeit(lambda: wk.call(recipe, [xs, ws], {}, {}), n),
            # the round trip with torch.clone for a kernel: no Triton launch, no launch record
            "worker_clone": timeit(lambda: wk.call(("import", "torch:clone"), [x], {}, {}), n),
            "pack_dev": timeit(lambda: send(region, (x, w)), n),
            "pack_cpu": timeit(lambda: send(region, (xs, ws)), n),
            "unpack_dev": timeit(lambda: receive(region, packed, DEV), n),
            "unpack_cpu": timeit(lambda: receive(region, packed, "cpu"), n),
            "parent_op_after_call_ms": sum(parent_op_after_call() for _ in range(50)) / 50 * 1e3,
            "parent_op_alone_ms": timeit(lambda: torch.ones(1, device=DEV).sum().item(), 50)}


def child_steps(kfn, rows, cols, n):
    """The child's work for one call, step by step (ms): its inputs from the message and the
    shared memory to the device, the launch under ``launches.recorded``, the wait, the outputs
    into the shared memory with the reply's pickling, its resident-memory reading."""
    from numoracle.runner.launches import recorded
    x = torch.randn(rows, cols, device=DEV).to(torch.bfloat16)
    w = (torch.rand(cols, device=DEV) + 0.5).to(torch.bfloat16)
    requests, replies = W._Region(), W._Region()
    msg = send(requests, (x, w))
    ins = receive(requests, msg, DEV)
    out = kfn(*ins)

    def launch():
        with recorded():
            kfn(*ins)

    def launch_sync():
        launch()
        if DEV == "cuda":
            torch.cuda.synchronize()

    return {"shape": (rows, cols),
            "unpickle_unpack_to_device": timeit(lambda: receive(requests, msg, DEV), n),
            "launch_recorded": timeit(launch, n),
            "launch_bare": timeit(lambda: kfn(*ins), n),
            "launch_recorded_and_wait": timeit(launch_sync, n),
            "outputs_to_reply": timeit(lambda: send(replies, out), n),
            "rss_mb": timeit(W.rss_mb, n)}


def stream_row(wk, kfn, recipe, n=300, seed=0) -> dict:
    """ms a call over n random shapes: in-process, then through the worker, two passes each."""
    rng = random.Random(seed)
    shapes = [(rng.randint(1, 64), rng.randint(1, 4096)) for _ in range(n)]
    ins = [(torch.randn(r, c, device=DEV).to(torch.bfloat16), (torch.rand(c, device=DEV) + .5).to(torch.bfloat16))
           for r, c in shapes]
    row = {}
    for name, f in (("inproc", lambda xw: call_kernel(kfn, list(xw), {}, {}, device=DEV)),
                    ("worker", lambda xw: wk.call(recipe, list(xw), {}, {}))):
        for p in ("first", "second"):
            t = time.perf_counter()
            for xw in ins:
                f(xw)
            row[f"{name}_{p}"] = (time.perf_counter() - t) / n * 1e3
    return row


def _read1(fd, poll):
    while True:
        try:
            return os.read(fd, 1)
        except BlockingIOError:
            if not poll:
                raise


def pingpong_child(r, w, poll, gpu):
    if poll:
        os.set_blocking(r, False)
    x = torch.ones(1, device="cuda") if gpu else None
    os.write(w, b"r")
    while True:
        b = _read1(r, poll)
        if not b or b == b"q":
            return
        if gpu:
            x.add_(1)
            torch.cuda.synchronize()
        os.write(w, b"k")


def pingpong(parent_poll, child_poll, child_gpu, parent_gpu, n=3000) -> dict:
    """us a round trip of one byte to a child process and back."""
    r1, w1 = os.pipe()
    r2, w2 = os.pipe()
    p = subprocess.Popen([sys.executable, __file__, "--pingpong-child", str(r1), str(w2), str(int(child_poll)),
                          str(int(child_gpu))], pass_fds=(r1, w2))
    os.close(r1)
    os.close(w2)
    os.read(r2, 1)
    if parent_poll:
        os.set_blocking(r2, False)
    y = torch.ones(1, device="cuda") if parent_gpu else None
    ts = []
    for _ in range(n):
        t = time.perf_counter()
        os.write(w1, b"c")
        _read1(r2, parent_poll)
        ts.append(time.perf_counter() - t)
        if parent_gpu:
            y.add_(1)
            torch.cuda.synchronize()
    os.write(w1, b"q")
    p.wait()
    ts.sort()
    return {"parent_polls": parent_poll, "child_polls": child_poll, "child_gpu": child_gpu, "parent_gpu": parent_gpu,
            "median_us": round(ts[n // 2] * 1e6, 1), "p90_us": round(ts[int(n * .9)] * 1e6, 1)}


START_SHAPES = ((16, 512), (16, 512), (3, 1000), (7, 77), (64, 4096), (2, 4096), (5, 130))


def start_probe(where: str) -> dict:
    """In this (fresh) process: the imports already done, the worker's start in parts and its
    first calls of START_SHAPES (``where`` 'worker'), or the same calls in-process."""
    r = {"where": where}
    t = time.perf_counter()
    backend = backends.select("gpu" if DEV == "cuda" else "interpreter")
    r["select_s"] = time.perf_counter() - t
    kfn, _ = resolve(operators.get("rms_norm"), "correct")
    recipe = W.recipe_of(kfn)
    ins = [(torch.randn(a, c, device=DEV).to(torch.bfloat16), (torch.rand(c, device=DEV) + .5).to(torch.bfloat16))
           for a, c in START_SHAPES]
    wk = None
    if where == "worker":
        wk = W.Worker(backend)
        wk._recipes.append(recipe)
        t = time.perf_counter()
        wk._zygote = W._Zygote(backend, wk._values())
        r["zygote_ready_s"] = time.perf_counter() - t
        t = time.perf_counter()
        wk._child = W._Child(wk._zygote, [recipe])
        wk._child.wait_ready()
        r["child_ready_s"] = time.perf_counter() - t
        wk.starts = 1
        call = lambda xw: wk.call(recipe, list(xw), {}, {})
    else:
        call = lambda xw: call_kernel(kfn, list(xw), {}, {}, device=DEV)
    ms = []
    for xw in ins:
        t = time.perf_counter()
        call(xw)
        ms.append(round((time.perf_counter() - t) * 1e3, 2))
    r["first_calls_ms"] = ms                   # in START_SHAPES' order (the second repeats the first)
    if wk is not None:
        wk.close(kill=True)
    return {k: (round(v, 3) if isinstance(v, float) else v) for k, v in r.items()}


def trace(seconds: float) -> None:
    """An isolated fuzz search twice in this process, every worker call timed."""
    backend = backends.select("gpu" if DEV == "cuda" else "interpreter")
    op = operators.get("rms_norm")
    rec, seen = [], set()
    plain = W.Worker.call

    def timed(self, recipe, inputs, params, config, timeout=None):
        t = time.perf_counter()
        ex = plain(self, recipe, inputs, params, config, timeout)
        x = inputs[0]
        block = 1 << max(x.shape[-1] - 1, 0).bit_length() if x.dim() else 1
        key = (self.starts, str(x.dtype), block, tuple(sorted(params.items())))
        rec.append((time.perf_counter() - t, ex.start_seconds, key not in seen))
        seen.add(key)
        return ex

    W.Worker.call = timed
    try:
        for search in ("first", "second"):
            rec.clear()
            t = time.perf_counter()
            res = fuzz(op, "correct", backend=backend, mode="statistical", max_examples=10**9, seconds=seconds,
                       seed=11, strategy=cases(op), shrink=False, stop_on_first=False, database=None, isolate=True)
            wall = time.perf_counter() - t
            new = [c for c, start, is_new in rec if is_new and not start]
            other = sorted(c for c, start, is_new in rec if not is_new and not start)
            print(search, json.dumps({
                "cases": res.totals.cases, "cases_per_s": round(res.totals.cases / wall, 1),
                "start_s": round(sum(start for _, start, _ in rec), 3),
                "new_calls": len(new), "new_s": round(sum(new), 3),
                "other_calls": len(other), "other_median_ms": round(other[len(other) // 2] * 1e3, 3) if other else None,
                "ms_per_case": res.to_dict()["breakdown"]["ms_per_case"]}), flush=True)
    finally:
        W.Worker.call = plain
        W.close_all()


def main() -> int:
    if sys.argv[1:2] == ["--start-probe"]:
        print(json.dumps(start_probe(sys.argv[2])), flush=True)
        return 0
    if "--start" in sys.argv:
        for _ in range(2):
            for where in ("worker", "in-process"):
                t = time.perf_counter()
                p = subprocess.run([sys.executable, __file__, "--start-probe", where], capture_output=True, text=True,
                                   check=False)
                lines = p.stdout.strip().splitlines() or [f"rc {p.returncode}: {p.stderr.strip()[-300:]}"]
                print(f"{lines[-1]}  (whole process {time.perf_counter() - t:.2f} s)", flush=True)
        return 0
    if "--trace" in sys.argv:
        trace(float(sys.argv[sys.argv.index("--trace") + 1]))
        return 0
    if sys.argv[1:2] == ["--pingpong-child"]:
        pingpong_child(int(sys.argv[2]), int(sys.argv[3]), sys.argv[4] == "1", sys.argv[5] == "1")
        return 0
    if "--pingpong" in sys.argv:
        confs = [(0, 0, 0, 0), (1, 0, 0, 0), (1, 1, 0, 0)]
        if DEV == "cuda":
            confs += [(0, 0, 1, 0), (0, 0, 1, 1), (1, 0, 1, 1), (1, 1, 1, 1)]
        for c in confs:
            print(json.dumps(pingpong(*map(bool, c))), flush=True)
        return 0
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    n = int(args[0]) if args else 200
    backend = backends.select("gpu" if DEV == "cuda" else "interpreter")
    op = operators.get("rms_norm")
    kfn, _ = resolve(op, "correct")
    recipe = W.recipe_of(kfn)
    wk = W.Worker(backend)
    for rows, cols in ((4, 128), (16, 512), (64, 4096)):
        row = shape_row(wk, kfn, recipe, rows, cols, n)
        print({k: (round(v, 3) if isinstance(v, float) else v) for k, v in row.items()}, flush=True)
    row = stream_row(wk, kfn, recipe, 300 if DEV == "cuda" else 10)
    print("300 random shapes" if DEV == "cuda" else "10 random shapes",
          {k: round(v, 3) for k, v in row.items()}, flush=True)
    wk.close(kill=True)
    for rows, cols in ((4, 128), (64, 4096)):
        row = child_steps(kfn, rows, cols, n)
        print("child steps", {k: (round(v, 3) if isinstance(v, float) else v) for k, v in row.items()}, flush=True)
    if "--no-fuzz" in sys.argv:
        return 0
    strategy = cases(op)
    kw = {"backend": backend, "mode": "statistical", "max_examples": 10**9, "strategy": strategy, "shrink": False,
          "stop_on_first": False, "database": None, "isolate": True}
    fuzz(op, "correct", seconds=8, seed=5, **kw)
    prof = cProfile.Profile()
    prof.enable()
    res = fuzz(op, "correct", seconds=12, seed=6, **kw)
    prof.disable()
    print(res.totals.cases, "cases", res.to_dict()["breakdown"]["ms_per_case"])
    for key, lines in (("tottime", 30), ("cumulative", 45)):
        s = io.StringIO()
        pstats.Stats(prof, stream=s).sort_stats(key).print_stats(lines)
        print(s.getvalue()[:9000])
    return 0


if __name__ == "__main__":
    sys.exit(main())
