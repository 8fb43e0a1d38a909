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

judge(op, kfn, inputs, params)       # warm up the interpreter and calculus
assumption.cache_clear()
t0 = time.perf_counter()
with no.settings(plan_check=True):
    o = judge(op, kfn, inputs, params)
first = time.perf_counter() - t0
print("plan line on:", o.verdict.assumptions.plan)
# off and on alternate case by case (the machine is shared: load drifts)
off, on = [], []
for k, xs in enumerate(cases(40)):
    for flag, acc in ((False, off), (True, on)) if k % 2 else ((True, on), (False, off)):
        with no.settings(plan_check=flag):
            t0 = time.perf_counter()
            o = judge(op, kfn, xs, params)
            acc.append(time.perf_counter() - t0)
        assert o.status == "accept" and (o.verdict.assumptions.plan is not None) == flag
print(f"first case with the line on: {first:.2f} s (includes the compile helper's start)")
print(f"one signature, alternating: off median {statistics.median(off)*1e3:.1f} ms/case, "
      f"on median {statistics.median(on)*1e3:.1f} ms/case")
newsig, offsig = [], []
for k, xs in enumerate(cases(10)):
    # a new row count every case: a new signature every case
    xs = [torch.randn((t.shape[0] + k + 1,) + tuple(t.shape[1:])).to(t.dtype) if t.ndim == 2 else t for t in xs]
    for flag, acc in ((True, newsig), (False, offsig)):
        with no.settings(plan_check=flag):
            t0 = time.perf_counter()
            judge(op, kfn, xs, params)
            acc.append(time.perf_counter() - t0)
print(f"a new signature every case: on median {statistics.median(newsig)*1e3:.0f} ms/case, "
      f"off {statistics.median(offsig)*1e3:.0f} ms/case")
t0 = time.perf_counter()
for _ in range(1000):
    assumption(op, kfn, inputs, params)
print(f"a cached assumption() call: {(time.perf_counter()-t0)*1e3:.3f} us")
