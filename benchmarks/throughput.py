"""Verdict throughput on a stream of shapes (issue #26), side by side with what a user
would write instead, and with another checkout of numoracle (the baseline), in one run.

Three measurements, each in a fresh process per (side, operator), the sides interleaved
(``--side NAME=PATH``: PATH is put first on PYTHONPATH; the default is this checkout):

- ``stream``: verdicts per second over a drawn stream of shapes (rows 1-64, columns
  1-4096, uniform; bf16) for ``no.check`` (default settings, but ``--shapes-after``: the
  seconds of eager verdicts before a kind compiles with symbolic sizes) and for a float64 torch
  reference + ``torch.testing.assert_close`` of the same outputs.  Inputs and kernel
  outputs (the emulator's; the torch quantizer for per_token_group_quant_fp8) are made
  before the clock starts.  Two streams of different shapes: ``cold`` (the first, with
  whatever compiling the side does) and ``warm`` (the next one, all new shapes).
- ``one``: one signature of 256x4096 = 1,048,576 elements, the verdict (default
  settings, after its warm-up calls) over the float64 reference, best of ``--reps`` (the
  target's ratio); beside it, over the reference + assert_close, what the user's check costs.
- ``fuzz``: ``numoracle.runner.fuzz`` of rms_norm's correct kernel on the interpreter
  backend (no shrinking), cases/s, and the per-case breakdown the run reports (where the
  side reports one).
- ``cli``: the command a user runs, ``numoracle fuzz OP --backend B --json`` (no saving),
  serially and with each ``--cli-workers`` count (``--units`` so that every worker has one
  search per round), each search ``--fuzz-seconds`` long: cases/s over the command's whole
  wall time (process starts, imports and compiles included) and over the searches' own time.

    python benchmarks/throughput.py --side before=/work/main --side after=$PWD \\
        --cases 200 --out docs/results/throughput.json

Targets (issue #26, CPU): stream >= 1/5 of the float64 reference + assert_close; one
signature at 10^6 <= 3x its float64 reference.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time

OPS = ("rms_norm", "layer_norm", "softmax", "cross_entropy", "per_token_group_quant_fp8")
HERE = os.path.dirname(os.path.abspath(__file__))
STREAM_TARGET = 1 / 5        # numoracle's verdicts/s over the reference + assert_close's
ONE_TARGET = 3.0             # verdict time over the float64 reference at 10^6 elements


def shapes(op_name: str, n: int, seed: int):
    """n (rows, cols) drawn uniformly: rows 1-64, cols 1-4096 (a multiple of the quantizer's
    group size for per_token_group_quant_fp8, which needs it)."""
    import random
    rng = random.Random(f"{op_name}:{seed}")
    out = []
    for _ in range(n):
        rows = rng.randint(1, 64)
        cols = rng.randint(1, 32) * 128 if op_name == "per_token_group_quant_fp8" else rng.randint(1, 4096)
        out.append((rows, cols))
    return out


def make_cases(op_name: str, n: int, seed: int, extra=(), device="cpu"):
    """n cases of drawn shapes, then one of each shape in ``extra``; on ``device``."""
    import torch
    from numoracle import operators
    op = operators.get(op_name)
    cases = []
    for k, (rows, cols) in enumerate(list(shapes(op_name, n, seed)) + list(extra)):
        inputs, params = op.example(seed * 100003 + k, dtype=torch.bfloat16, family="calibration", rows=rows,
                                    cols=cols)
        if op_name == "per_token_group_quant_fp8":
            from numoracle.operators.ops_vllm import torch_group_quant
            params = dict(params, group_size=128, column_major_scales=False)
            outs = torch_group_quant(inputs[0], **params)
        else:
            from numoracle.selftest.emulator import Plan, emulate
            outs = emulate(op.reference, inputs, params, Plan(seed=k))
        if device != "cpu":
            inputs, outs = _to(inputs, device), _to(outs, device)
        cases.append((inputs, params, outs))
    return op, cases


def _to(xs, device):
    if isinstance(xs, tuple) and len(xs) == 2 and not hasattr(xs[1], "to"):      # (tensor, Format)
        return (xs[0].to(device), xs[1])
    if isinstance(xs, (tuple, list)):
        return type(xs)(_to(x, device) for x in xs)
    return xs.to(device) if hasattr(xs, "to") else xs


def _flat(outs):
    outs = list(outs) if isinstance(outs, (tuple, list)) else [outs]
    return [o[0] if isinstance(o, tuple) else o for o in outs]


def reference_check(op_name, inputs, params, outs):
    """What a user writes instead of numoracle: a float64 torch reference and
    ``torch.testing.assert_close`` with bf16's default tolerances (a mismatch is caught:
    its report is part of the cost)."""
    import torch
    sys.path.insert(0, HERE)
    import run as B
    ref = B._ref64(op_name, inputs, params)
    ref = list(ref) if isinstance(ref, (tuple, list)) else [ref]
    got = _flat(outs)
    if op_name == "rms_norm":          # the registered reference's outputs: y (and rstd, not in _ref64)
        got = got[:1]
    if op_name == "per_token_group_quant_fp8":
        q, s = got[0], got[1]
        got = [q.double(), s.double().reshape(ref[1].shape)]
        ref = [ref[0].clamp(-448, 448), ref[1]]
    for g, r in zip(got, ref):
        try:
            torch.testing.assert_close(g.double().reshape(r.shape), r, rtol=1.6e-2, atol=1e-5)
        except AssertionError:
            pass
    return True


# the cold stream ends with these: shapes whose column count is a power of two take a trace of
# their own in a symbolic plan (exact scalings by 1/n), so that the warm stream measures the
# steady state of a long run, every trace compiled
POW2_TAIL = ((5, 1024), (3, 256))


def child_stream(op_name: str, cases: int, seed: int, shapes_after=None, device="cpu") -> dict:
    """``shapes_after``: settings.compile_shapes_after for the run (None: the default; a side
    without the field ignores it)."""
    import contextlib
    import torch
    import numoracle as no
    from numoracle.check import check
    row = {"op": op_name, "cases": cases, "numoracle": no.__file__, "threads": torch.get_num_threads(),
           "device": device}
    block = contextlib.nullcontext()
    if shapes_after is not None and "compile_shapes_after" in {f.name for f in no.settings.fields()}:
        block = no.settings(compile_shapes_after=shapes_after)
        row["compile_shapes_after"] = shapes_after
    with block:
        _stream_phases(op_name, cases, seed, row, check, device)
    try:
        from numoracle.verdict import compiled
        row["plans"] = len(compiled.plans())
        row["compiled_plans"] = sum(1 for p in compiled.plans() if p.fn is not None and p.failed is None)
        kinds = [p for p in compiled.plans() if getattr(p, "symbolic", False)]
        row["symbolic_plans"] = len(kinds)
        row["symbolic_compiled_calls"] = sum(p.compiled_calls for p in kinds)
        row["symbolic_failed"] = [p.failed for p in kinds if p.failed]
        row["symbolic_traces"] = [len(getattr(p, "_traces", ())) for p in kinds]
    except Exception:
        pass
    return row


def _stream_phases(op_name, cases, seed, row, check, device):
    for phase, s in (("cold", seed), ("warm", seed + 1)):
        op, cs = make_cases(op_name, cases, s, POW2_TAIL if phase == "cold" else (), device)
        row[f"{phase}_elements"] = sum(c[0][0].numel() for c in cs)
        t = time.perf_counter()
        for inputs, params, outs in cs:
            reference_check(op_name, inputs, params, outs)
        row[f"{phase}_reference_s"] = time.perf_counter() - t
        statuses: dict = {}
        t = time.perf_counter()
        for inputs, params, outs in cs:
            v = check(op.reference, outs, inputs, params, mode="statistical")
            statuses[v.status] = statuses.get(v.status, 0) + 1
        row[f"{phase}_numoracle_s"] = time.perf_counter() - t
        row[f"{phase}_statuses"] = statuses
        row[f"{phase}_reference_per_s"] = len(cs) / row[f"{phase}_reference_s"]
        row[f"{phase}_numoracle_per_s"] = len(cs) / row[f"{phase}_numoracle_s"]
        row[f"{phase}_ratio"] = row[f"{phase}_numoracle_per_s"] / row[f"{phase}_reference_per_s"]


def child_one(op_name: str, reps: int) -> dict:
    import torch
    sys.path.insert(0, HERE)
    import run as B
    from numoracle.check import check
    op, inputs, params, outs = B.setup(op_name, 1 << 20, "cpu")
    if op_name == "per_token_group_quant_fp8":
        from numoracle.operators.ops_vllm import torch_group_quant
        params = dict(params, column_major_scales=False)
        outs = torch_group_quant(inputs[0], **params)

    def verdict():
        return check(op.reference, outs, inputs, params, mode="statistical")
    row = {"op": op_name, "elements": inputs[0].numel(), "threads": torch.get_num_threads()}
    t = time.perf_counter()
    for _ in range(4):               # eager calls, then the compile (default settings)
        verdict()
    row["warmup_s"] = time.perf_counter() - t
    row["status"] = verdict().status
    from numoracle.verdict import compiled
    row["compiled"] = any(p.fn is not None and p.failed is None for p in compiled.plans())
    row["ref64_s"] = B._time(lambda: B._ref64(op_name, inputs, params), "cpu", reps)
    # beside the target's denominator, what the user's whole check costs (reference + assert_close)
    row["ref64_check_s"] = B._time(lambda: reference_check(op_name, inputs, params, outs), "cpu", reps)
    row["verdict_s"] = B._time(verdict, "cpu", reps)
    row["ratio"] = row["verdict_s"] / row["ref64_s"]
    row["ratio_over_check"] = row["verdict_s"] / row["ref64_check_s"]
    return row


def child_fuzz(op_name: str, seconds: float, seed: int, backend_name: str = "interpreter",
               shapes_after=None, warmup=0.0, database="none", max_rows=None, max_cols=None) -> dict:
    """``warmup``: seconds of another fuzz run (another seed) first, in the same process, so
    that the measured run finds its kinds compiled (a long run's steady state).  ``database``:
    "none", or "dir" for a new example database directory, as ``numoracle fuzz`` has by default.
    ``max_rows``/``max_cols``: caps on the drawn shapes (the operator's domain otherwise)."""
    import contextlib
    import tempfile
    import numoracle as no
    from numoracle import backends, operators
    from numoracle.runner import fuzz
    from numoracle.strategies import cases
    backend = backends.select(backend_name)
    op = operators.get(op_name)
    strategy = cases(op, max_rows=max_rows, max_cols=max_cols)
    block = contextlib.nullcontext()
    if shapes_after is not None and "compile_shapes_after" in {f.name for f in no.settings.fields()}:
        block = no.settings(compile_shapes_after=shapes_after)
    with block:
        if warmup:
            fuzz(op, "correct", backend=backend, mode="statistical", max_examples=10 ** 9, seconds=warmup,
                 seed=seed + 1000, strategy=strategy, shrink=False, stop_on_first=False, database=None, isolate=False)
        before = _compiled_calls()
        db = tempfile.mkdtemp(prefix="numoracle-bench-db-") if database == "dir" else None
        t = time.perf_counter()
        res = fuzz(op, "correct", backend=backend, mode="statistical", max_examples=10 ** 9, seconds=seconds,
                   seed=seed, strategy=strategy, shrink=False, stop_on_first=False, database=db, isolate=False)
    wall = time.perf_counter() - t
    measured_compiled = _compiled_calls() - before
    d = res.to_dict()
    row = {"op": op_name, "database": database, "cases": res.totals.cases, "seconds": res.elapsed, "wall_s": wall,
           "cases_per_s": res.totals.cases / res.elapsed if res.elapsed else 0.0,
           "totals": res.totals.to_dict(), "breakdown": d.get("breakdown"), "warmup_s": warmup}
    try:
        from numoracle.verdict import compiled
        kinds = [p for p in compiled.plans() if getattr(p, "symbolic", False)]
        row["symbolic_plans"] = len(kinds)
        row["symbolic_compiled_calls"] = sum(p.compiled_calls for p in kinds)
        row["symbolic_failed"] = [p.failed[:300] for p in kinds if p.failed]
        row["symbolic_traces"] = [len(getattr(p, "_traces", ())) for p in kinds]
        row["plans"] = len(compiled.plans())
        # the measured run's verdicts that ran compiled (the rest ran eagerly: a kind not yet
        # compiled, a new trace, a failed kind, a non-finite input), and each kind's story
        row["measured_compiled_calls"] = measured_compiled
        row["kinds"] = [{"kind": repr(key[-1]), "calls": p.calls, "compiled_calls": p.compiled_calls,
                         "traces": len(getattr(p, "_traces", ())), "failed": (p.failed or "")[-1500:]}
                        for key, p in list(compiled._plans.items()) if getattr(p, "symbolic", False)]
    except Exception as exc:
        row["kinds_error"] = repr(exc)
    return row


def _compiled_calls() -> int:
    """Compiled verdicts so far, over every plan of this process."""
    try:
        from numoracle.verdict import compiled
        return sum(p.compiled_calls for p in compiled.plans())
    except Exception:
        return 0


class _Stop(Exception):
    pass


def child_hypothesis_loop(op_name: str, backend_name: str, seconds: float, seed: int, max_rows=None,
                          max_cols=None) -> dict:
    """What the fuzz loop is compared with: a plain Hypothesis loop over the same cases
    (``numoracle.strategies.cases``), the same kernel, a float64 reference and
    ``assert_close`` (rms_norm's y against its float64 reference), cases/s."""
    import torch
    from hypothesis import HealthCheck, Phase, given, seed as hseed, settings
    from numoracle import backends, operators
    from numoracle.runner.execute import call_kernel
    from numoracle.runner.kernels import resolve
    from numoracle.strategies import cases
    sys.path.insert(0, HERE)
    import run as B
    backend = backends.select(backend_name)
    device = backend.device
    op = operators.get(op_name)
    try:
        from numoracle.runner.launches import compiling
    except ImportError:                     # a baseline that does not measure Triton's compile steps
        import contextlib

        class _Nothing:
            count, seconds = 0, 0.0

        def compiling():
            return contextlib.nullcontext(_Nothing())
    kfn, _ = resolve(op, "correct")
    state = {"n": 0, "deadline": time.time() + seconds, "t0": None, "compiles": 0, "compile_s": 0.0}

    @hseed(seed)
    @settings(max_examples=10 ** 9, deadline=None, database=None, suppress_health_check=list(HealthCheck),
              phases=[Phase.generate])
    @given(cases(op, max_rows=max_rows, max_cols=max_cols))
    def loop(case):
        if state["t0"] is None:
            state["t0"] = time.perf_counter()
        if time.time() > state["deadline"]:
            raise _Stop
        inputs, params = case.materialize(device, op)
        with compiling() as got:
            outs = call_kernel(kfn, inputs, params, dict(case.config), device=device)
        state["compiles"] += got.count
        state["compile_s"] += got.seconds
        y = _flat(outs)[0]
        ref = B._ref64(op_name, inputs, params) if op_name in B.OPS else None
        if ref is not None and not isinstance(ref, tuple):
            try:
                torch.testing.assert_close(y.double(), ref, rtol=1.6e-2, atol=1e-5)
            except AssertionError:
                pass
        state["n"] += 1
    t = time.perf_counter()
    try:
        loop()
    except _Stop:
        pass
    wall = time.perf_counter() - t
    return {"op": op_name, "backend": backend_name, "cases": state["n"], "seconds": wall,
            "cases_per_s": state["n"] / wall if wall else 0.0, "compiles": state["compiles"],
            "compile_s": state["compile_s"], "cases_per_s_without_compile":
            state["n"] / (wall - state["compile_s"]) if wall > state["compile_s"] else 0.0}


def cli_fuzz(path: str, op_name: str, backend_name: str, seconds: float, seed: int, workers: int | None,
             isolate: bool) -> dict:
    """``numoracle fuzz`` as a user runs it, in ``path``'s checkout: serially (``workers``
    None) or on ``workers`` local processes, with every input group's searches spread so that
    each worker has one per round."""
    from math import ceil
    cmd = [sys.executable, "-m", "numoracle", "fuzz", op_name, "--backend", backend_name, "--seconds",
           str(seconds), "--seed", str(seed), "--no-save", "--no-shrink", "--json", "--quiet",
           "--isolate" if isolate else "--no-isolate"]
    if workers:
        cmd += ["--workers", str(workers), "--units", str(max(1, ceil(workers / 11)))]
    env = dict(os.environ, PYTHONPATH=path + os.pathsep + os.environ.get("PYTHONPATH", ""))
    t = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=path, check=False)
    wall = time.perf_counter() - t
    try:
        d = json.loads(p.stdout)
    except ValueError:
        return {"error": (p.stderr.strip().splitlines() or ["no output"])[-1][:500], "rc": p.returncode}
    row = {"op": op_name, "backend": backend_name, "workers": workers, "isolate": isolate, "wall_s": wall,
           "rc": p.returncode}
    if workers:
        row.update(cases=d["totals"]["cases"], totals=d["totals"], units=d["units"],
                   search_s=d.get("unit_seconds"), executor=d["executor"], breakdown=d.get("breakdown"))
        row["search_cases_per_s"] = (d["totals"]["cases"] / (d["unit_seconds"] / d["executor"]["workers"])
                                     if d.get("unit_seconds") else None)
    else:
        row.update(cases=d["totals"]["cases"], totals=d["totals"], search_s=d["seconds"],
                   breakdown=d.get("breakdown"))
        row["search_cases_per_s"] = d["totals"]["cases"] / d["seconds"] if d["seconds"] else None
    # the searches' rate without Triton's compile steps (a side that reports them): what the
    # fuzz loop costs once the kernel's specializations are compiled
    compile_s = ((row.get("breakdown") or {}).get("seconds") or {}).get("compile")
    if compile_s is not None and row.get("search_s"):
        per = workers and d["executor"]["workers"] or 1
        left = row["search_s"] - compile_s
        row["compile_s"] = compile_s
        row["compiles"] = row["breakdown"].get("compiles")
        row["search_cases_per_s_without_compile"] = row["cases"] / (left / per) if left > 0 else None
    row["cases_per_s"] = row["cases"] / wall
    return row


def _child(path: str, what: str, *args) -> dict:
    env = dict(os.environ, PYTHONPATH=path + os.pathsep + os.environ.get("PYTHONPATH", ""))
    code = ("import json, sys; sys.path.insert(0, %r); import throughput as T; "
            "print('@@' + json.dumps(T.child_%s(*%r), default=str))" % (HERE, what, args))
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=path)
    for line in p.stdout.splitlines():
        if line.startswith("@@"):
            return json.loads(line[2:])
    return {"error": (p.stderr.strip().splitlines() or ["no output"])[-1][:500]}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--side", action="append", default=[],
                    help="NAME=PATH: a checkout of numoracle to measure (repeatable; default: this one)")
    ap.add_argument("--ops", default=",".join(OPS))
    ap.add_argument("--cases", type=int, default=200, help="shapes per stream")
    ap.add_argument("--seed", type=int, default=26)
    ap.add_argument("--shapes-after", type=float, default=None,
                    help="settings.compile_shapes_after for the stream (default: the settings' default); "
                         "small, the cold stream compiles each kind and the warm one runs compiled")
    ap.add_argument("--reps", type=int, default=5, help="best of this many at 10^6")
    ap.add_argument("--device", default="cpu", help="the stream's tensors' device (cuda on the H200)")
    ap.add_argument("--fuzz-seconds", type=float, default=20.0)
    ap.add_argument("--fuzz-op", default="rms_norm")
    ap.add_argument("--fuzz-warmup", type=float, default=0.0,
                    help="seconds of fuzzing (another seed) before the measured run, in its process")
    ap.add_argument("--fuzz-backend", default="interpreter", help="the fuzz measurement's backend (gpu on the H200)")
    ap.add_argument("--fuzz-database", default="none", choices=("none", "dir"),
                    help="the fuzz run's example database: none, or a new directory (numoracle fuzz's default)")
    ap.add_argument("--fuzz-max-rows", type=int, default=None, help="cap the fuzz run's drawn rows")
    ap.add_argument("--fuzz-max-cols", type=int, default=None, help="cap the fuzz run's drawn columns")
    ap.add_argument("--cli-workers", default="",
                    help="comma-separated worker counts for the cli measurement, besides the serial run")
    ap.add_argument("--cli-isolate", action="store_true",
                    help="the cli measurement with the kernels in a supervised worker (numoracle fuzz's "
                         "default) instead of in the searching process")
    ap.add_argument("--skip", default="", help="comma-separated: stream, one, fuzz, loop, cli")
    ap.add_argument("--out", default="")
    a = ap.parse_args(argv)
    sides = [s.split("=", 1) for s in a.side] or [["this", os.path.dirname(HERE)]]
    ops = a.ops.split(",")
    skip = set(filter(None, a.skip.split(",")))
    result = {"meta": {"command": " ".join([os.path.relpath(sys.argv[0])] + (argv or sys.argv[1:])),
                       "sides": {k: v for k, v in sides}, "machine": platform.node(), "cores": os.cpu_count(),
                       "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                       "targets": {"stream_ratio": STREAM_TARGET, "one_ratio": ONE_TARGET}},
              "stream": [], "one": [], "fuzz": [], "cli": []}
    for name, path in sides:
        commit = subprocess.run(["git", "-C", path, "rev-parse", "--short", "HEAD"], capture_output=True,
                                text=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", path, "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True).stdout.strip()
        result["meta"].setdefault("commits", {})[name] = commit + ("+dirty" if dirty else "")

    def save():
        if a.out:
            with open(a.out, "w") as fh:
                json.dump(result, fh, indent=1)
    def record(section, name, label, r, show):
        r["side"] = name
        result[section].append(r)
        print(f"{name:8s} {label} " + (f"error: {r['error']}" if "error" in r else show(r)), flush=True)
        save()

    if "stream" not in skip:
        print(f"stream of {a.cases} shapes (cold: first stream, warm: the next, new shapes), verdicts/s")
        print(f"{'side':8s} {'operator':26s} {'ref/s':>8s} {'no/s cold':>10s} {'ratio':>7s} {'ref/s':>8s} "
              f"{'no/s warm':>10s} {'ratio':>7s}")
        for op in ops:
            for name, path in sides:
                record("stream", name, f"{op:26s}", _child(path, "stream", op, a.cases, a.seed, a.shapes_after, a.device),
                       lambda r: f"{r['cold_reference_per_s']:8.1f} {r['cold_numoracle_per_s']:10.1f} "
                                 f"{r['cold_ratio']:7.3f} {r['warm_reference_per_s']:8.1f} "
                                 f"{r['warm_numoracle_per_s']:10.1f} {r['warm_ratio']:7.3f}")
    if "one" not in skip:
        print("one signature, 1,048,576 elements: verdict / float64 reference (best of reps)")
        for op in ops:
            for name, path in sides:
                record("one", name, f"{op:26s}", _child(path, "one", op, a.reps),
                       lambda r: f"ref64 {r['ref64_s'] * 1e3:8.2f} ms  verdict {r['verdict_s'] * 1e3:8.2f} ms  "
                                 f"ratio {r['ratio']:6.2f}  (over ref64 + assert_close "
                                 f"{r['ref64_check_s'] * 1e3:.2f} ms: {r['ratio_over_check']:.2f}; "
                                 f"{r['status']}, warm-up {r['warmup_s']:.1f} s)")
    if "fuzz" not in skip:
        print(f"fuzz {a.fuzz_op} ({a.fuzz_backend}, no shrinking, {a.fuzz_seconds:g} s)")
        for name, path in sides:
            record("fuzz", name, "", _child(path, "fuzz", a.fuzz_op, a.fuzz_seconds, a.seed, a.fuzz_backend,
                                            a.shapes_after, a.fuzz_warmup, a.fuzz_database, a.fuzz_max_rows,
                                            a.fuzz_max_cols),
                   lambda r: f"{r['cases']} cases, {r['cases_per_s']:.1f} cases/s; breakdown: "
                             f"{json.dumps(r['breakdown'])}")
    if "cli" not in skip:
        counts = [None] + [int(w) for w in filter(None, a.cli_workers.split(","))]
        print(f"numoracle fuzz {a.fuzz_op} --backend {a.fuzz_backend} ({'isolated' if a.cli_isolate else 'in-process'} "
              f"kernels, {a.fuzz_seconds:g} s a search)")
        for w in counts:
            for name, path in sides:
                record("cli", name, f"workers {w or 'serial':>6}:",
                       cli_fuzz(path, a.fuzz_op, a.fuzz_backend, a.fuzz_seconds, a.seed, w, a.cli_isolate),
                       lambda r: f"{r['cases']} cases in {r['wall_s']:.1f} s: {r['cases_per_s']:.1f} cases/s over "
                                 f"the wall, {r.get('search_cases_per_s') or 0:.1f} over "
                                 f"the searches, {r.get('search_cases_per_s_without_compile') or 0:.1f} without "
                                 f"{r.get('compiles', '?')} compiles ({r.get('compile_s') or 0:.1f} s)")
    if "loop" not in skip:
        r = _child(sides[0][1], "hypothesis_loop", a.fuzz_op, a.fuzz_backend, a.fuzz_seconds, a.seed,
                   a.fuzz_max_rows, a.fuzz_max_cols)
        result["loop"] = r
        print(f"Hypothesis + assert_close loop, {a.fuzz_op} ({a.fuzz_backend}): "
              f"{r.get('cases_per_s', float('nan')):.1f} cases/s, "
              f"{r.get('cases_per_s_without_compile', float('nan')):.1f} without {r.get('compiles')} compiles "
              f"({r.get('compile_s', 0):.1f} s) {r.get('error', '')}", flush=True)
        for f in result["fuzz"]:
            if "cases_per_s" in f and r.get("cases_per_s"):
                f["over_loop"] = f["cases_per_s"] / r["cases_per_s"]
    save()
    return 0


if __name__ == "__main__":
    sys.exit(main())
