"""Cost of the plan line in the runner's verdicts (settings.plan_check): python benchmarks/plan_check_cost.py
(docs/results/2026-12-02-plan-check-cost.txt)."""
import time, statistics, torch
from numoracle import backends
backends.select("interpreter")
import numoracle as no
from numoracle import operators
from numoracle.runner import judge
from numoracle.plan import assumption

op = operators.get("rms_norm")
kfn = op.kernels["correct"]
inputs, params = op.example(0)

def cases(n, seed0=100):
    out = []
    for s in range(n):
        g = torch.Generator().manual_seed(seed0 + s)
        out.append([torch.randn(t.shape, generator=g).to(t.dtype) if t.is_floating_point() else t for t in inputs])
    return out

def run(n, on, shapes=False):
    ts = []
    with no.settings(plan_check=on):
        for k, xs in enumerate(cases(n)):
            if shapes:   # a new row count every case: a new signature every case
                xs = [torch.randn((t.shape[0] + k + 1,) + tuple(t.shape[1:])).to(t.dtype) if t.ndim == 2 else t for t in xs]
            t0 = time.perf_counter()
            o = judge(op, kfn, xs, params)
            ts.append(time.perf_counter() - t0)
            assert o.status == "accept", o.status
    return ts, o

judge(op, kfn, inputs, params)       # warm up the interpreter and calculus
off, o = run(20, False)
print("plan line off:", o.verdict.assumptions.plan)
assumption.cache_clear()
on, o = run(20, True)
print("plan line on:", o.verdict.assumptions.plan)
print(f"off: median {statistics.median(off)*1e3:.1f} ms/case")
print(f"on, same signature: first {on[0]:.2f} s (includes the compile helper's start), then median {statistics.median(on[1:])*1e3:.1f} ms/case")
newsig, _ = run(10, True, shapes=True)
offsig, _ = run(10, False, shapes=True)
print(f"on, a new signature every case: median {statistics.median(newsig)*1e3:.0f} ms/case; off: {statistics.median(offsig)*1e3:.0f} ms/case")
t0 = time.perf_counter()
for _ in range(1000):
    assumption(op, kfn, inputs, params)
print(f"cached assumption() lookup: {(time.perf_counter()-t0)*1e3:.3f} us/call")
