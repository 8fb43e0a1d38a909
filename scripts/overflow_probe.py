"""Where a Triton kernel's fp32 division and multiply-add overflow (docs/design.md §4, "Certain
overflow"), measured on this machine's backend (a GPU, or the interpreter with
TRITON_INTERPRET=1 on CPU tensors).

- division: ``x / y`` for 2^21 exact quotients q in a narrow band around fp32's overflow
  threshold T (max_finite + half a top ulp), and for quotients far past it: the
  largest q whose result is finite, the smallest whose result is +inf, and how many quotients at
  or past T / (1 - a 2^-23) (a = the profile's division bound in ulps) came back finite (the
  calculus calls those +inf exactly; expected 0).
- multiply-add: ``x * y + z``, ``-(x * y) - z`` and ``x * y + z * w`` with a product past the
  range and a sum that brings it back: finite where the compiler contracts the product into an
  FMA, infinite where it rounds the product first (why the calculus keeps a product's overflow
  uncertified until an operation that cannot be contracted with it reads it).

    python scripts/overflow_probe.py --out probe.json            # on a GPU
    TRITON_INTERPRET=1 python scripts/overflow_probe.py --device cpu --out probe.json
"""

import argparse
import json

import numpy as np
import torch
import triton
import triton.language as tl

T = float(np.finfo(np.float32).max) + 2.0 ** 103       # fp32's overflow threshold


@triton.jit
def _div(x_ptr, y_ptr, q_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(x_ptr + offs, mask=m, other=1.0)
    y = tl.load(y_ptr + offs, mask=m, other=1.0)
    tl.store(q_ptr + offs, x / y, mask=m)


@triton.jit
def _fma_forms(x_ptr, y_ptr, z_ptr, w_ptr, a_ptr, b_ptr, c_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(x_ptr + offs, mask=m, other=0.0)
    y = tl.load(y_ptr + offs, mask=m, other=0.0)
    z = tl.load(z_ptr + offs, mask=m, other=0.0)
    w = tl.load(w_ptr + offs, mask=m, other=0.0)
    tl.store(a_ptr + offs, x * y + z, mask=m)
    tl.store(b_ptr + offs, -(x * y) - z, mask=m)
    tl.store(c_ptr + offs, x * y + z * w, mask=m)


def _run_div(x, y):
    q = torch.empty_like(x)
    _div[(triton.cdiv(x.numel(), 1024),)](x, y, q, x.numel(), BLOCK=1024)
    return q.cpu()


def division(device, ulps):
    margin = 1.0 / (1.0 - ulps * 2.0 ** -23)
    g = torch.Generator().manual_seed(1)
    n = 1 << 21
    # pairs whose exact quotient is T (1 + delta), delta uniform in +-1e-6 (about 17 fp32 ulps
    # of T either side): y log-uniform over fp32's normal range below 1, x = RN(T (1 + delta) y)
    y = (2.0 ** (-126 * torch.rand(n, generator=g, dtype=torch.float64))).clamp(max=0.999).float()
    delta = (2 * torch.rand(n, generator=g, dtype=torch.float64) - 1) * 1e-6
    x = (T * (1 + delta) * y.double()).float()
    exact = x.double() / y.double()
    q = _run_div(x.to(device), y.to(device))
    finite, inf = torch.isfinite(q), torch.isinf(q)
    band = dict(quotients=n, largest_finite_q_over_T=float(exact[finite].max() / T) - 1,
                smallest_inf_q_over_T=float(exact[inf].min() / T) - 1,
                finite_at_or_past_margin=int((finite & (exact >= T * margin)).sum()),
                finite_at_or_past_T=int((finite & (exact >= T)).sum()),
                inf_below_T=int((inf & (exact < T)).sum()),
                nan=int(torch.isnan(q).sum()))
    # quotients far past the range: q log-uniform in [T, 1e45]
    e = 38.6 + 6.4 * torch.rand(n, generator=g, dtype=torch.float64)
    y = (10.0 ** (-37 + 36.9 * torch.rand(n, generator=g, dtype=torch.float64))).float()
    x = (10.0 ** e * y.double()).clamp(max=3.4e38).float()
    exact = x.double() / y.double()
    keep = exact >= T * margin
    q = _run_div(x[keep].to(device), y[keep].to(device))
    far = dict(quotients=int(keep.sum()), finite=int(torch.isfinite(q).sum()))
    return dict(threshold=T, ulps=ulps, margin_over_T=margin - 1, band=band, far=far)


def multiply_add(device):
    # x * y = 3.45e38 (past the range) in the first three; z brings it back in the first only
    x = torch.tensor([3.45e19, 3.45e19, 3.45e19, 1e19], dtype=torch.float32)
    y = torch.full((4,), 1e19, dtype=torch.float32)
    z = torch.tensor([-3.4e38, 1e38, -1e30, 1.0], dtype=torch.float32)
    w = torch.ones(4, dtype=torch.float32)
    outs = [torch.empty(4, dtype=torch.float32, device=device) for _ in range(3)]
    _fma_forms[(1,)](*[t.to(device) for t in (x, y, z, w)], *outs, 4, BLOCK=4)
    got = [o.cpu().tolist() for o in outs]
    p, zd = x.double() * y.double(), z.double()
    rp = p.float().double()                  # the product rounded to fp32 first (inf past the range)
    return {
        "x*y + z": dict(z=z.tolist(), kernel=got[0], fused=(p + zd).float().tolist(),
                        rounded_first=(rp + zd).float().tolist()),
        "-(x*y) - z": dict(z=z.tolist(), kernel=got[1], fused=(-p - zd).float().tolist(),
                           rounded_first=(-rp - zd).float().tolist()),
        "x*y + z*w (w = 1)": dict(z=z.tolist(), kernel=got[2], fused=(p + zd).float().tolist(),
                                  rounded_first=(rp + zd).float().tolist()),
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--ulps", type=float, default=None,
                    help="the division bound in ulps (default: the profile of the device: h200 on a "
                         "GPU, interpreter on the CPU)")
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    from numoracle import mathlib
    prof = mathlib.load("h200" if a.device != "cpu" else "interpreter")
    ulps = a.ulps if a.ulps is not None else prof.model("div").a
    res = dict(device=torch.cuda.get_device_name() if a.device != "cpu" else "interpreter",
               triton=triton.__version__, torch=torch.__version__,
               division=division(a.device, ulps), multiply_add=multiply_add(a.device))
    text = json.dumps(res, indent=1)
    print(text)
    if a.out:
        with open(a.out, "w") as fh:
            fh.write(text + "\n")


if __name__ == "__main__":
    main()
