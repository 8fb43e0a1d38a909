"""Compile a kind plan's regions function (the symbolic-mode code) with dynamic=False and
dynamic=True and compare each region tensor with the same code run eagerly, on one device:

    python scripts/symbolic_probe.py rms_norm cpu|cuda

(docs/results/2026-12-02-h200-symbolic-probe-torch211.txt: torch 2.11's CPU build.)"""
import os
import sys
import time
import warnings

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "benchmarks"))
import torch
import throughput as T
import numoracle as no
from numoracle.check import check
from numoracle.verdict import compiled
from numoracle.verdict.compiled.plan import struct
from numoracle.verdict.compiled.inductor import COMPILE_OPTIONS
warnings.simplefilter("ignore")
if len(sys.argv) != 3:
    sys.exit(__doc__)
op_name, device = sys.argv[1], sys.argv[2]
op, cases = T.make_cases(op_name, 4, 1, device=device)
with no.settings(compile_shapes_after=1e-9, cpu_verdict_max_elements=0):
    for inputs, params, outs in cases[:2]:
        check(op.reference, outs, inputs, params)
kind = [p for p in compiled.plans() if p.symbolic][0]
inputs, params, outs = cases[2]
tensors = []
for x in list(inputs) + list(outs if isinstance(outs, (tuple, list)) else [outs]):
    tensors += struct(x)[1]
fn = kind._function(full=True)
_, want_flags, want = fn(*tensors)
for dyn in (False, True):
    torch._dynamo.reset()
    c = torch.compile(kind._function(full=True), dynamic=dyn, options=dict(COMPILE_OPTIONS))
    with kind._tracing() if dyn else torch.no_grad():
        t = time.perf_counter(); _, flags, got = c(*tensors); dt = time.perf_counter() - t
    print(f"{op_name} {device} dynamic={dyn} compile {dt:.1f}s flags {flags.tolist()} want {want_flags.tolist()}")
    for j, (g, w) in enumerate(zip(got, want)):
        for name, a, b in zip(("centre", "fixed", "stat", "taint"), g, w):
            if a.dtype == torch.bool:
                print(f"  out{j} {name}: differing {int((a != b).sum())}")
            else:
                d = (a - b).abs(); rel = d / (b.abs() + 1e-300)
                print(f"  out{j} {name}: max abs {float(d.max()):.3e} max rel {float(rel.max()):.3e} nan {int(a.isnan().sum())}/{int(b.isnan().sum())}")
