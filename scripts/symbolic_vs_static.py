"""Verdict time of one shape, compiled for that shape (static) or for its kind (symbolic sizes), beside the
float64 reference + assert_close (best of 7, one thread).  python scripts/symbolic_vs_static.py rms_norm static|symbolic 64x4096"""
import sys, time
sys.path.insert(0, __import__("os").path.join(__import__("os").path.dirname(__import__("os").path.abspath(__file__)), "..", "benchmarks"))
import torch
torch.set_num_threads(1)
import throughput as T
import numoracle as no
from numoracle.check import check
from numoracle.verdict import compiled
op_name = sys.argv[1]; mode = sys.argv[2]; shape = tuple(int(v) for v in sys.argv[3].split("x"))
def best(f, n=7):
    ts=[]
    for _ in range(n):
        t=time.perf_counter(); f(); ts.append(time.perf_counter()-t)
    return min(ts)
if mode == "static":
    ctx = no.settings(compile="always", compile_shapes_after=0, cpu_verdict_max_elements=0)
else:
    ctx = no.settings(compile_shapes_after=0.001, cpu_verdict_max_elements=0)
with ctx:
    # warm shapes of same kind
    op, cs = T.make_cases(op_name, 0, 1, [(shape[0]-1, shape[1]-3), (shape[0]-2, shape[1]-5), shape, (shape[0]-3, shape[1]-7)] if mode!="static" else [shape])
    for inputs, params, outs in cs:
        for _ in range(3):
            check(op.reference, outs, inputs, params, mode="statistical")
    inputs, params, outs = cs[2] if mode!="static" else cs[0]
    t = best(lambda: check(op.reference, outs, inputs, params, mode="statistical"))
    r = best(lambda: T.reference_check(op_name, inputs, params, outs))
    ps = compiled.plans()
    print(mode, shape, "verdict ms", round(t*1e3,2), "ref ms", round(r*1e3,3), "ratio", round(t/r,1),
          [(p.symbolic, p.compiled_calls, p.failed is None, p.fn is not None) for p in ps])
