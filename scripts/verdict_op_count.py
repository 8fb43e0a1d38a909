"""Full-size torch operations of one traced-mode (general path) verdict, counted by the numoracle function
that issued them.  python scripts/verdict_op_count.py rms_norm"""
import sys, collections, traceback, os
sys.path.insert(0, __import__("os").path.join(__import__("os").path.dirname(__import__("os").path.abspath(__file__)), "..", "benchmarks"))
import torch
from torch.utils._python_dispatch import TorchDispatchMode
import throughput as T
from numoracle.verdict.evaluation import evaluate, decode_outputs
from numoracle.verdict.judgement import judge_masks
op_name = sys.argv[1]
op, cases = T.make_cases(op_name, 1, 5)
inputs, params, outs = cases[0]
FULL = inputs[0].numel()
cnt = collections.Counter(); fn_cnt = collections.Counter()
class M(TorchDispatchMode):
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        r = func(*args, **(kwargs or {}))
        if isinstance(r, torch.Tensor) and r.numel() >= FULL and func.__name__ not in ("expand.default","view.default","detach.default","alias.default","t.default","unsqueeze.default","squeeze.dim","_to_copy.default","clone.default","lift_fresh.default"):
            st = traceback.extract_stack()
            fr = [f for f in st if "/numoracle/" in f.filename and "python_dispatch" not in f.filename]
            key = f"{os.path.basename(fr[-1].filename)}:{fr[-1].name}" if fr else "?"
            cnt[key] += 1
            fn_cnt[" > ".join(f"{f.name}" for f in fr[-4:])] += 1
        return r
print("full", FULL, inputs[0].shape)
from numoracle import backends
prof = backends.resolve("interpreter").profile()
with M():
    ev = evaluate(op.reference, inputs, params, prof, 1e-6, "error", traced=True, sanitise=False)
    ys = decode_outputs(ev, [outs] if isinstance(outs, torch.Tensor) else list(outs))
    for reg, y in zip(ev.regions, ys):
        if reg is not None:
            judge_masks(reg.fmt, reg.centre, reg.fixed, reg.stat, reg.taint, y, ("statistical",))
print("total full-size ops", sum(cnt.values()))
for k, v in cnt.most_common(40): print(v, k)
print("----")
for k, v in fn_cnt.most_common(25): print(v, k)
