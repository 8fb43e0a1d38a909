"""Verdict time / float64 reference time for rms_norm (llama), in one process.
Usage: python benchmarks/verdict_cost.py [rows] [cols]"""
import sys
import time

import torch

import numoracle as no
from numoracle.operators.references import rms_norm_llama

rows, cols = (int(sys.argv[1]), int(sys.argv[2])) if len(sys.argv) > 2 else (4096, 4096)
g = torch.Generator().manual_seed(0)
x = torch.randn(rows, cols, generator=g).to(torch.bfloat16)
w = (1 + 0.1 * torch.randn(cols, generator=g)).to(torch.bfloat16)
xf = x.float()
y = ((xf * torch.rsqrt((xf * xf).mean(-1, keepdim=True) + 1e-6)).to(torch.bfloat16) * w)


def ref64():
    x64, w64 = x.double(), w.double()
    return x64 * torch.rsqrt((x64 * x64).mean(-1, keepdim=True) + 1e-6) * w64


def best(f, n=3):
    ts = []
    for _ in range(n):
        t = time.perf_counter()
        f()
        ts.append(time.perf_counter() - t)
    return min(ts)


t_ref = best(ref64)
t_ver = best(lambda: no.check(rms_norm_llama, y, (x, w)), n=2)
t_ac = best(lambda: torch.testing.assert_close(y, ref64().to(torch.bfloat16)), n=3)
print(f"rms_norm {rows}x{cols}: float64 reference {t_ref*1e3:.1f} ms, verdict {t_ver*1e3:.1f} ms, "
      f"ratio {t_ver/t_ref:.2f}; assert_close {t_ac*1e3:.1f} ms (verdict/assert_close {t_ver/t_ac:.2f})")
