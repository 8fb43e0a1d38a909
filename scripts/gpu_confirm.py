"""Run every registered operator's kernels (correct + variants) on a backend
over generated cases and judge them in both modes; write counts as JSON.
Usage: python scripts/gpu_confirm.py --backend gpu --cases 12 --out results.json"""
import argparse
import json
import time
import traceback

import torch

from numoracle import backends, operators
from numoracle.check import check

FAMILIES = ("normal", "shifted_mean", "heavy_tailed", "scaled", "constant_rows", "pow2_grid")
SHAPES = ((4, 96), (8, 1000), (3, 4096))

ap = argparse.ArgumentParser()
ap.add_argument("--backend", default="gpu")
ap.add_argument("--cases", type=int, default=12)
ap.add_argument("--out", default="confirm.json")
ap.add_argument("--dtypes", default="bf16,fp16,fp32")
a = ap.parse_args()
backend = backends.select(a.backend)
dev = backends.device(backend)
DT = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
report = {"backend": backend, "torch": torch.__version__, "device": torch.cuda.get_device_name() if dev == "cuda" else "cpu",
          "results": {}}
t0 = time.time()
for name in operators.names():
    op = operators.get(name)
    for kname, kernel in op.kernels.items():
        counts = {}
        examples = []
        for dt in a.dtypes.split(","):
            for i in range(a.cases):
                fam = FAMILIES[i % len(FAMILIES)]
                rows, cols = SHAPES[i % len(SHAPES)]
                inputs, params = op.example(1000 + i, dtype=DT[dt], family=fam, rows=rows, cols=cols)
                inputs = tuple(t.to(dev) for t in inputs)
                try:
                    outs = kernel(*[t.clone() for t in inputs], **params)
                    for mode in ("statistical", "fixed"):
                        v = check(op.reference, outs, inputs, params, mode=mode, backend=backend)
                        key = f"{mode}:{v.status}"
                        counts[key] = counts.get(key, 0) + 1
                        if v.status != "accept" and len(examples) < 3:
                            examples.append({"dtype": dt, "family": fam, "shape": [rows, cols], "mode": mode,
                                             "explain": v.explain()[:1500]})
                except Exception:
                    counts["error"] = counts.get("error", 0) + 1
                    if len(examples) < 3:
                        examples.append({"dtype": dt, "family": fam, "error": traceback.format_exc()[-1500:]})
        report["results"][f"{name}/{kname}"] = {"counts": counts, "examples": examples}
        print(name, kname, counts, flush=True)
report["seconds"] = round(time.time() - t0, 1)
with open(a.out, "w") as fh:
    json.dump(report, fh, indent=1)
