"""numoracle's cost beside the computations it stands next to, measured in one
process and run per (operator, size):

- verdict time (reference program + calculus + check) / time of a plain float64
  torch reference of the same operator;
- verdict time / ``torch.testing.assert_close`` time (including its own fp32
  reference, as a user would run it);
- peak memory of the verdict / peak memory of the float64 reference
  (CUDA: ``max_memory_allocated``; CPU: peak RSS of a child process that does
  only that one thing);
- time per element at each size (cost linear in elements).

    python benchmarks/run.py                       # CPU: 1e5, 1e6, 1e7
    python benchmarks/run.py --device cuda --sizes 1e5,1e6,1e7,1e8 --out $OUT/bench.json

Outputs the kernel would produce are made by the emulator (one concrete
rounding per site) on the CPU, by the operator's Triton kernel on a GPU: the
verdict's cost does not depend on which."""
from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time

import torch

OPS = ("rms_norm", "layer_norm", "softmax", "cross_entropy", "per_token_group_quant_fp8")
COLS = 4096
COPY_BANDWIDTH = 4.3e12     # bytes/s, the H200's measured copy bandwidth (docs/facts.md)


def _ref64(op: str, inputs, params):
    """What a user writes as the high-precision reference: plain float64 torch."""
    x = inputs[0].double()
    if op == "rms_norm":
        w = inputs[1].double()
        return x * torch.rsqrt((x * x).mean(-1, keepdim=True) + params.get("eps", 1e-6)) * w
    if op == "layer_norm":
        w, b = inputs[1].double(), inputs[2].double()
        mu = x.mean(-1, keepdim=True)
        return (x - mu) * torch.rsqrt(((x - mu) ** 2).mean(-1, keepdim=True) + params.get("eps", 1e-5)) * w + b
    if op == "softmax":
        return torch.softmax(x, -1)
    if op == "cross_entropy":
        return torch.logsumexp(x, -1) - x.gather(-1, inputs[1][:, None].long()).squeeze(-1)
    if op == "per_token_group_quant_fp8":
        g = params.get("group_size", 128)
        xg = x.reshape(x.shape[0], -1, g)
        s = xg.abs().amax(-1, keepdim=True).clamp(min=1e-10) / 448.0
        return (xg / s).clamp(-448, 448).reshape(x.shape), s
    raise KeyError(op)


def _ref32(op: str, inputs, params):
    x = inputs[0].float()
    if op == "rms_norm":
        return (x * torch.rsqrt((x * x).mean(-1, keepdim=True) + params.get("eps", 1e-6)) * inputs[1].float()).to(inputs[0].dtype)
    if op == "layer_norm":
        return torch.nn.functional.layer_norm(x, x.shape[-1:], inputs[1].float(), inputs[2].float(),
                                              params.get("eps", 1e-5)).to(inputs[0].dtype)
    if op == "softmax":
        return torch.softmax(x, -1).to(inputs[0].dtype)
    if op == "cross_entropy":
        return (torch.logsumexp(x, -1) - x.gather(-1, inputs[1][:, None].long()).squeeze(-1)).to(inputs[0].dtype)
    if op == "per_token_group_quant_fp8":
        g = params.get("group_size", 128)
        xg = x.reshape(x.shape[0], -1, g)
        s = xg.abs().amax(-1, keepdim=True).clamp(min=1e-10) / 448.0
        return (xg / s).clamp(-448, 448).reshape(x.shape).to(torch.float8_e4m3fn)
    raise KeyError(op)


def setup(op_name: str, n: int, device: str):
    """(operator, inputs, params, kernel outputs) for about n elements."""
    from numoracle import backends, operators
    op = operators.get(op_name)
    rows = max(1, n // COLS)
    inputs, params = op.example(7, dtype=torch.bfloat16, family="calibration", rows=rows, cols=COLS)
    if device == "cuda":
        backends.select("gpu")
        inputs = tuple(t.cuda() if isinstance(t, torch.Tensor) else t for t in inputs)
        outs = op.kernels["correct"](*[t.clone() for t in inputs], **params)
        torch.cuda.synchronize()
    elif op_name == "per_token_group_quant_fp8":
        from numoracle.operators.ops_vllm import torch_group_quant
        outs = torch_group_quant(inputs[0], **params)
    else:
        from numoracle.selftest.emulator import Plan, emulate
        outs = emulate(op.reference, inputs, params, Plan(seed=1))
    return op, inputs, params, outs


def traffic_bytes(inputs, outs) -> int:
    """The tensor traffic a compiled verdict cannot avoid: read the inputs and the
    kernel's outputs once.  (An accepted verdict holds them, with fingerprints,
    instead of copying them (settings field ``hold_accepted``).  Results from before it
    counted that copy too: three times the bytes.)"""
    outs = list(outs) if isinstance(outs, (tuple, list)) else [outs]
    t = sum(x.numel() * x.element_size() for x in inputs if isinstance(x, torch.Tensor))
    for y in outs:
        y = y[0] if isinstance(y, tuple) else y
        t += y.numel() * y.element_size()
    return t


def _time(f, device, reps=3, wait=True):
    """Best of ``reps`` runs of f, after one to warm up; with ``wait=False`` the
    host's time alone (the device's work is waited for outside the measurement)."""
    f()                                             # warm: caches, allocator, lazy imports
    best = float("inf")
    for _ in range(reps):
        if device == "cuda":
            torch.cuda.synchronize()
        t = time.perf_counter()
        f()
        if device == "cuda" and wait:
            torch.cuda.synchronize()
        best = min(best, time.perf_counter() - t)
    if device == "cuda":
        torch.cuda.synchronize()
    return best


def _with_policy(policy, f):
    def g():
        from numoracle import settings
        with settings(compile=policy):
            return f()
    return g


def actions(op, inputs, params, outs):
    from numoracle.check import check
    ref_out = outs[0] if isinstance(outs, (tuple, list)) else outs

    def verdict():
        return check(op.reference, outs, inputs, params, mode="statistical")
    return {
        "ref64": lambda: _ref64(op.name, inputs, params),
        # compiled (numoracle.verdict.compiled): the first call of a signature runs eagerly, the second compiles
        "verdict": _with_policy("always", verdict),
        "verdict_eager": _with_policy("never", verdict),
        "assert_close": lambda: torch.testing.assert_close(
            ref_out.float(), _ref32(op.name, inputs, params).float(), rtol=1.0, atol=1e30, equal_nan=True),
    }


def measure(op_name: str, n: int, device: str) -> dict:
    """One (operator, size), best run in a process of its own (``main`` does): on the
    CPU the memory peaks are measured first, before the timing phase's allocator
    regime leaves freed blocks in the heap for later allocations to reuse unseen."""
    if device == "cpu":
        _malloc_regime(measuring_memory=True)
    op, inputs, params, outs = setup(op_name, n, device)
    acts = actions(op, inputs, params, outs)
    elements = inputs[0].numel()
    row = {"op": op_name, "n": n, "elements": elements}
    from numoracle.verdict import compiled
    compiled.clear()
    if device == "cuda":
        torch.cuda.synchronize()
        before = torch.cuda.memory_allocated()
    acts["verdict"]()                               # eager: learns the signature's sites
    t = time.perf_counter()
    acts["verdict"]()                               # compiles (or finds it cannot: then eager)
    if device == "cuda":
        torch.cuda.synchronize()
    row["compile_s"] = time.perf_counter() - t
    if device == "cuda":
        # what the compiled verdict holds between calls: a CUDA graph's buffers and its copy of
        # the tensors (the peak below counts only what one call allocates on top)
        row["verdict_held_bytes"] = torch.cuda.memory_allocated() - before
    row["compiled"] = all(p.fn is not None and p.failed is None for p in compiled.plans())
    for k in ("ref64", "verdict", "verdict_eager"):
        if device == "cuda":
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            base = torch.cuda.memory_allocated()
            acts[k]()
            torch.cuda.synchronize()
            row[f"{k}_peak_bytes"] = torch.cuda.max_memory_allocated() - base
        else:
            row[f"{k}_peak_bytes"] = _peak_growth(acts[k])
    if device == "cpu":
        _malloc_regime(measuring_memory=False)
    for k, f in acts.items():
        # on a GPU a run takes milliseconds and its time varies with the host: best of 10
        # (the eager verdict, hundreds of separate passes, best of 3)
        reps = 10 if device == "cuda" and k != "verdict_eager" else (2 if n >= 10 ** 7 else 3)
        row[f"{k}_s"] = _time(f, device, reps=reps)
    try:
        derive(row, device, elements, traffic_bytes(inputs, outs))
    except Exception as exc:     # keep the measurements: they cost minutes of device time
        row["derive_error"] = f"{type(exc).__name__}: {exc}"
    return row


def derive(row: dict, device: str, elements: int, traffic: int) -> dict:
    """The ratios of a row from its measured times and peaks."""
    row["verdict_over_ref64"] = row["verdict_s"] / row["ref64_s"]
    row["eager_over_ref64"] = row["verdict_eager_s"] / row["ref64_s"]
    row["verdict_over_assert_close"] = row["verdict_s"] / row["assert_close_s"]
    if row.get("ref64_peak_bytes"):
        row["memory_over_ref64"] = row["verdict_peak_bytes"] / row["ref64_peak_bytes"]
        row["eager_memory_over_ref64"] = row["verdict_eager_peak_bytes"] / row["ref64_peak_bytes"]
        if "verdict_held_bytes" in row:
            row["memory_with_held_over_ref64"] = ((row["verdict_peak_bytes"] + row["verdict_held_bytes"])
                                                  / row["ref64_peak_bytes"])
    row["verdict_ns_per_element"] = row["verdict_s"] / elements * 1e9
    row["traffic_bytes"] = traffic
    if device == "cuda":
        row["bandwidth_fraction"] = traffic / row["verdict_s"] / COPY_BANDWIDTH
    return row


def _status_kib(field: str) -> int:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"/proc/self/status has no {field}")


def _malloc_regime(measuring_memory: bool) -> None:
    """glibc's allocator settings for each phase (CPU).

    Timing: large blocks come from the heap and stay there (mmap threshold at
    its 32 MiB maximum, no trimming), as glibc's own adaptive threshold does
    in a long-running process once large blocks have been freed: repeated
    calls then reuse memory instead of page-faulting fresh mappings, for the
    reference and the verdict alike.
    Memory: every block of 64 KiB or more is its own mapping, returned on free,
    so that the peak resident set of one action shows (and earlier actions'
    freed blocks do not hide it)."""
    try:
        import ctypes
        libc = ctypes.CDLL("libc.so.6")
        if measuring_memory:
            libc.mallopt(-3, 1 << 16)          # M_MMAP_THRESHOLD
            libc.mallopt(-1, 1 << 17)          # M_TRIM_THRESHOLD
            libc.malloc_trim(0)                # give back what the timing phase left in the heap
        else:
            libc.mallopt(-3, 32 << 20)
            libc.mallopt(-1, 1 << 30)
    except (OSError, AttributeError):
        pass


def _peak_growth(f) -> int:
    """Bytes the process's resident set grew to at its peak while f ran: the
    peak is reset first (``/proc/self/clear_refs`` 5), so earlier work does not count."""
    import gc
    gc.collect()
    with open("/proc/self/clear_refs", "w") as fh:
        fh.write("5")
    base = _status_kib("VmRSS")
    f()
    return (_status_kib("VmHWM") - base) * 1024


def _measure_in_child(op: str, n: int, device: str) -> dict:
    """``measure`` in a fresh process: no allocator state or compiled code carried over
    from another operator or size (Inductor's on-disk cache is shared, as for a user)."""
    import subprocess
    code = ("import json, sys; sys.path.insert(0, %r); import run; "
            "print('@@' + json.dumps(run.measure(%r, %d, %r)))" % (os.path.dirname(os.path.abspath(__file__)),
                                                                   op, n, device))
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    for line in p.stdout.splitlines():
        if line.startswith("@@"):
            return json.loads(line[2:])
    return {"op": op, "n": n, "error": (p.stderr.strip().splitlines() or ["no output"])[-1][:300]}


def _fuzz_throughput(a):
    """Cases/s per operator from scripts/fuzz_throughput.py, run as its own process."""
    import subprocess
    import tempfile
    here = os.path.dirname(os.path.abspath(__file__))
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "fuzz.json")
        cmd = [sys.executable, os.path.join(here, "..", "scripts", "fuzz_throughput.py"),
               "--backend", "gpu" if a.device == "cuda" else "interpreter", "--seconds", str(a.fuzz_seconds),
               "--out", out, "--ops", *a.ops.split(",")]
        print("fuzz throughput:", " ".join(cmd[1:]), flush=True)
        subprocess.run(cmd, check=False)
        if not os.path.exists(out):
            return {"error": "scripts/fuzz_throughput.py wrote no results"}
        with open(out) as fh:
            return json.load(fh)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    ap.add_argument("--sizes", default="1e5,1e6,1e7")
    ap.add_argument("--ops", default=",".join(OPS))
    ap.add_argument("--out", default="")
    ap.add_argument("--fuzz-seconds", type=float, default=0.0,
                    help="also measure fuzz throughput (cases/s) for the same operators on this device's backend "
                         "(interpreter on the CPU, gpu on CUDA) for this many seconds each (scripts/fuzz_throughput.py)")
    a = ap.parse_args(argv)
    sizes = [int(float(s)) for s in a.sizes.split(",")]
    rows = []
    print(f"{'operator':26s} {'elements':>10s} {'verdict/ref64':>14s} {'(eager)':>8s} {'verdict/assert_close':>21s} "
          f"{'mem/ref64':>10s} {'+held':>6s} {'(eager)':>8s} {'ns/element':>11s} {'compile s':>10s}")
    for op in a.ops.split(","):
        for n in sizes:
            r = _measure_in_child(op, n, a.device)
            if "error" in r:                        # one failing size must not end the suite
                print(f"{op:28s} {n:>10d} error: {r['error']}")
            else:
                print(f"{op:26s} {r['elements']:>10d} {r['verdict_over_ref64']:>14.2f} "
                      f"{r['eager_over_ref64']:>8.1f} {r['verdict_over_assert_close']:>21.2f} "
                      f"{r.get('memory_over_ref64', float('nan')):>10.2f} "
                      f"{r.get('memory_with_held_over_ref64', float('nan')):>6.2f} "
                      f"{r.get('eager_memory_over_ref64', float('nan')):>8.2f} {r['verdict_ns_per_element']:>11.1f} "
                      f"{r['compile_s']:>10.1f}{'' if r['compiled'] else ' (eager: not compiled)'}", flush=True)
            rows.append(r)
            _write(a.out, rows, None)         # after every row: a run cut short keeps what it measured
    fuzz = _fuzz_throughput(a) if a.fuzz_seconds > 0 else None
    _write(a.out, rows, fuzz)
    return 0


def _write(path: str, rows: list, fuzz) -> None:
    if not path:
        return
    meta = {"device": torch.cuda.get_device_name() if torch.cuda.is_available() else platform.processor() or "cpu",
            "cores": os.cpu_count(), "threads": torch.get_num_threads(), "torch": torch.__version__,
            "python": platform.python_version(), "date": time.strftime("%Y-%m-%d")}
    with open(path, "w") as fh:
        json.dump({"meta": meta, "rows": rows, "fuzz": fuzz}, fh, indent=1)


if __name__ == "__main__":
    sys.exit(main())
