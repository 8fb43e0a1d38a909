#!/usr/bin/env python3
"""Is Triton's fp32 ``x / n``, n a runtime fp32 argument (Liger's count of kept rows), exact on
this GPU where n is a power of two?  The calculus takes it so (``tracked._pow2_scale``): exact
while the quotient is normal; subnormal quotients rounded or flushed to 0.  Counts, per n
(2^k and 3*2^k), the quotients that break that; also ``x * (1.0 / n)``.

    python scripts/div_by_runtime_pow2.py        # on a CUDA machine

Result on the H200: docs/results/2026-11-30-h200-div-by-runtime-pow2.txt."""
import json

import torch
import triton
import triton.language as tl


@triton.jit
def _k(x_ptr, o_ptr, r_ptr, n, N, BLOCK: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = i < N
    x = tl.load(x_ptr + i, mask=m)
    tl.store(o_ptr + i, x / n, mask=m)
    tl.store(r_ptr + i, x * (1.0 / n), mask=m)


def main():
    g = torch.Generator().manual_seed(0)
    N = 1 << 20
    x = (torch.randn(N, generator=g, dtype=torch.float64) * torch.exp2(torch.randint(-149, 128, (N,), generator=g).double())).float()
    x = x[torch.isfinite(x)].contiguous()
    N = x.numel()
    xd = x.cuda()
    res = {}
    for k in list(range(0, 41)) + [-1, -3]:
        for n in ((2.0 ** k), 3.0 * 2.0 ** max(k, 0)) if k >= 0 else ((2.0 ** k),):
            o = torch.empty_like(xd); r = torch.empty_like(xd)
            _k[(triton.cdiv(N, 1024),)](xd, o, r, n, N, BLOCK=1024)
            q = x.double() / n
            rn = q.float()
            normal = q.abs() >= 2.0 ** -126
            oc, rc = o.cpu(), r.cpu()
            fin = torch.isfinite(rn)
            key = f"{n:g}"
            res[key] = {
                "div_normal_not_RN": int(((oc != rn) & normal & fin).sum()),
                "div_sub_not_RN_or_0": int(((oc != rn) & (oc != 0) & ~normal).sum()),
                "div_sub_flushed": int(((oc == 0) & (rn != 0) & ~normal).sum()),
                "mulrecip_normal_not_RN": int(((rc != rn) & normal & fin).sum()),
                "subnormal_quotients": int((~normal & (q != 0)).sum()),
            }
    bad = {k: v for k, v in res.items() if (v["div_normal_not_RN"] or v["div_sub_not_RN_or_0"])}
    pow2 = {f"{2.0 ** j:g}" for j in range(-3, 41)}
    print(json.dumps({"n_inputs": N, "pow2_bad": {k: v for k, v in bad.items() if k in pow2}}))
    for k, v in res.items():
        print(k, json.dumps(v))
    return 1 if any(k in pow2 for k in bad) else 0


if __name__ == "__main__":
    raise SystemExit(main())
