"""1.0 / sqrt(x) with IEEE fp32 sqrt and division (numpy: the interpreter's plan) over every fp32
in [1, 4), two binades (IEEE sqrt and division scale exactly by powers of four), in the calculus's
unit (the fp32 ulp of the exact value's binade): at most 1.5 ulp by argument, against the
interpreter's rsqrt bound of 2.25 (docs/results/2026-12-02-plan-1oversqrt.md).

    python scripts/rsqrt_vs_sqrt_div_ieee.py
"""
import numpy as np

b = np.arange(0x3F800000, 0x40800000, dtype=np.uint32)
x = b.view(np.float32)
r = np.float32(1.0) / np.sqrt(x)
e = 1.0 / np.sqrt(x.astype(np.float64))
q = np.floor(np.log2(e))
q = np.where(2.0 ** q > e, q - 1, q)
u = np.abs(r.astype(np.float64) - e) / 2.0 ** (q - 23)
print(f"{len(x)} inputs: max {u.max():.4f} ulp at x = {x[u.argmax()]!r}; above 1.5 ulp: {int((u > 1.5).sum())}")
