"""The exact points of every math call on a backend (numoracle.mathlib.calibrate.exact_points),
with what each call returned at each candidate: python scripts/exact_points.py interpreter|gpu
> OUT.json.  Produced docs/results/2026-12-02-exact-points/."""
import json, sys, time
t0 = time.time()
from numoracle.mathlib.calibrate import Runner, exact_points, EXACT_CANDIDATES, SPECS
import numpy as np
backend = sys.argv[1]
run = Runner(backend)
out = {"device": run.device_name(), "exact": {}, "observed": {}}
for key in EXACT_CANDIDATES:
    out["exact"][key] = exact_points(run, key, copies=2048)
    for x, fx in EXACT_CANDIDATES[key]:
        for call in SPECS[key].calls:
            for arg in ((x, -x) if x == 0 else (x,)):
                got = run(call, np.full(2048, arg, np.float32))
                out["observed"][f"{call}({arg!r})"] = sorted({float(v) for v in got})[:4]
out["seconds"] = round(time.time() - t0, 1)
import triton, torch
out["versions"] = {"torch": torch.__version__, "triton": triton.__version__}
print(json.dumps(out, indent=1))
