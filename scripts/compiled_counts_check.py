#!/usr/bin/env python3
"""cross_entropy's mean on the GPU's Liger kernel, judged eagerly and compiled (``always``):
cases whose count of ignored rows changes (each correct, and with one kept row's loss off
by 6%) get the same statuses and masks, and the compiled verdict traces whole (the count
stays a device tensor: ``references.kept_rows``).

    PYTHONPATH=$PWD python scripts/compiled_counts_check.py      # on a CUDA machine

Result on the H200: docs/results/2026-11-30-h200-ce-counts-compiled.json."""
import json
import os
import time

import torch

from numoracle import backends, compiled, operators
from numoracle.check import check

backends.select("gpu")
op = operators.get("cross_entropy")
g = torch.Generator().manual_seed(4)
out = {}
for rows, cols in ((64, 256), (4096, 256)):
    cases = []
    for ignored in (0, 0, 0, 7, 3, 63, 1, 0, 5, 30, 2, 9):
        ignored = min(ignored, rows - 1)
        logits = (torch.randn(rows, cols, generator=g) * 2).to(torch.bfloat16).cuda()
        labels = torch.randint(0, cols, (rows,), generator=g).cuda()
        labels[:ignored] = -100
        params = {"reduction": "mean", "ignore_index": -100}
        y = op.kernels["correct"](logits.clone(), labels, **params)
        yb = y.clone(); yb[ignored] = (yb[ignored].float() * 1.0625 + 1e-3).to(y.dtype)
        cases.append(((logits, labels), params, y))
        cases.append(((logits, labels), params, yb))
    got = {}
    for p in ("never", "always"):
        compiled.clear()
        os.environ["NUMORACLE_COMPILE"] = p
        got[p] = []
        t = time.perf_counter()
        for inputs, params, y in cases:
            v = check(op.reference, y, inputs, params, backend="gpu")
            got[p].append((v.status, v.outputs[0].rejected.cpu().clone()))
        torch.cuda.synchronize()
        got[p + "_s"] = time.perf_counter() - t
    plans = list(compiled._plans.values())
    same = all(a[0] == b[0] and torch.equal(a[1], b[1]) for a, b in zip(got["never"], got["always"]))
    out[f"{rows}x{cols}"] = {"statuses": [s for s, _ in got["never"]], "same": same,
                             "whole": [p.whole for p in plans], "graphs": [p.graphs for p in plans],
                             "failed": [p.failed for p in plans], "eager_s": got["never_s"], "compiled_s": got["always_s"]}
print(json.dumps(out, indent=1))
