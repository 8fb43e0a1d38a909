"""Issue #26's own example of a held-out reference: a user-written gemma RMSNorm (x and w
widened to fp32, all math in fp32, one rounding at the store), not the registered operator,
judged on one 256x4096 bf16 signature with default settings (compiled after its eager calls),
against the float64 torch reference a user would write.  Best of seven, in one process.

    python benchmarks/user_reference.py                  # this machine's threads
    OMP_NUM_THREADS=1 python benchmarks/user_reference.py
"""
from __future__ import annotations

import json
import os
import sys
import time

import torch

import numoracle as no
from numoracle.formats import fp32

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import run as B


@no.reference
def my_gemma_rms_norm(x, w):
    xf = x.to(fp32)
    r = no.rsqrt(no.mean(xf * xf, axis=-1, keepdims=True) + 1e-6)
    return (xf * r * (1.0 + w.to(fp32))).to(x.format)


def main() -> None:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(256, 4096, generator=g).to(torch.bfloat16)
    w = (0.1 * torch.randn(4096, generator=g)).to(torch.bfloat16)
    xf, wf = x.float(), w.float()
    y = (xf * torch.rsqrt((xf * xf).mean(-1, keepdim=True) + 1e-6) * (1.0 + wf)).to(torch.bfloat16)

    def ref64():
        x64, w64 = x.double(), w.double()
        return x64 * torch.rsqrt((x64 * x64).mean(-1, keepdim=True) + 1e-6) * (1.0 + w64)

    def verdict():
        return no.check(my_gemma_rms_norm, y, (x, w), mode="statistical")

    t = time.perf_counter()
    for _ in range(4):          # eager calls, then the compile (default settings)
        verdict()
    warm = time.perf_counter() - t
    from numoracle.verdict import compiled
    v_s, r_s = B._time(verdict, "cpu", 7), B._time(ref64, "cpu", 7)
    print(json.dumps({"elements": x.numel(), "threads": torch.get_num_threads(), "status": verdict().status,
                      "compiled": any(p.fn is not None and p.failed is None for p in compiled.plans()),
                      "warmup_s": round(warm, 1), "ref64_ms": round(1e3 * r_s, 3),
                      "verdict_ms": round(1e3 * v_s, 3), "ratio": round(v_s / r_s, 2)}))


if __name__ == "__main__":
    main()
