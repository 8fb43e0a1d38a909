"""Do tl.dot and tl.atomic_add flush fp32-subnormal products or sums to zero?  One product per output
element (a's column 0 times b's row 0), bf16 operands, fp32 accumulation, on tiles of 16
rows (mma v2 on sm80/sm90) and 64 rows (wgmma on sm90).  Prints each case's result beside
the exact value; run on the GPU (``--device cuda``) or numoracle's repaired interpreter (``--device cpu``)."""

import argparse
import json

if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    from numoracle import backends
    backends.select("interpreter" if args.device == "cpu" else "gpu")      # the repaired interpreter on cpu

import torch
import triton
import triton.language as tl


@triton.jit
def _dot(a_ptr, b_ptr, c_ptr, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    rm = tl.arange(0, BM)
    rn = tl.arange(0, BN)
    rk = tl.arange(0, BK)
    a = tl.load(a_ptr + rm[:, None] * BK + rk[None, :])
    b = tl.load(b_ptr + rk[:, None] * BN + rn[None, :])
    tl.store(c_ptr + rm[:, None] * BN + rn[None, :], tl.dot(a, b))


@triton.jit
def _mul(a_ptr, b_ptr, c_ptr, BLOCK: tl.constexpr):
    i = tl.arange(0, BLOCK)
    a = tl.load(a_ptr + i).to(tl.float32)
    b = tl.load(b_ptr + i).to(tl.float32)
    tl.store(c_ptr + i, a * b)


@triton.jit
def _atomic(x_ptr, c_ptr, BLOCK: tl.constexpr):
    i = tl.arange(0, BLOCK)
    tl.atomic_add(c_ptr + i, tl.load(x_ptr + i))


CASES = [  # (name, [(a value, b value), ...] summed into one element)
    ("bf16 subnormal x 1", [(2.0 ** -133, 1.0)]),
    ("normal x normal -> fp32 subnormal", [(2.0 ** -70, 2.0 ** -70)]),
    ("normal x normal -> 2^-126 (smallest normal)", [(2.0 ** -63, 2.0 ** -63)]),
    ("two subnormal products summing to 2^-126", [(2.0 ** -70, 2.0 ** -57), (2.0 ** -70, 2.0 ** -57)]),
    ("subnormal product plus a normal one", [(2.0 ** -70, 2.0 ** -70), (2.0 ** -60, 2.0 ** -60)]),
]


def run(device):
    out = []
    for bm in (16, 64):
        for name, terms in CASES:
            a = torch.zeros(bm, 16, dtype=torch.bfloat16, device=device)
            b = torch.zeros(16, 16, dtype=torch.bfloat16, device=device)
            for k, (x, y) in enumerate(terms):
                a[:, k] = x
                b[k, :] = y
            c = torch.empty(bm, 16, dtype=torch.float32, device=device)
            _dot[(1,)](a, b, c, BM=bm, BN=16, BK=16)
            exact = sum(x * y for x, y in terms)
            got = float(c[0, 0])
            out.append({"tile_rows": bm, "case": name, "exact": exact, "got": got, "equal": got == exact})
    n = 16
    a = torch.full((n,), 2.0 ** -70, dtype=torch.bfloat16, device=device)
    c = torch.empty(n, dtype=torch.float32, device=device)
    _mul[(1,)](a, a, c, BLOCK=n)
    out.append({"tile_rows": None, "case": "fp32 multiply (no dot) -> fp32 subnormal", "exact": 2.0 ** -140,
                "got": float(c[0]), "equal": float(c[0]) == 2.0 ** -140})
    for name, start, x in (("fp32 atomic add of a subnormal into 0", 0.0, 2.0 ** -140),
                           ("fp32 atomic add of a normal into a subnormal", 2.0 ** -140, 2.0 ** -120),
                           ("fp32 atomic add whose sum is subnormal", 2.0 ** -127, -2.0 ** -128)):
        c = torch.full((n,), start, dtype=torch.float32, device=device)
        xs = torch.full((n,), x, dtype=torch.float32, device=device)
        _atomic[(1,)](xs, c, BLOCK=n)
        out.append({"tile_rows": None, "case": name, "exact": start + x, "got": float(c[0]),
                    "equal": float(c[0]) == start + x})
    return out


if __name__ == "__main__":
    rows = run(args.device)
    for r in rows:
        print(f"{str(r['tile_rows']):>4}  {r['case']:45s} exact {r['exact']:.6e}  got {r['got']:.6e}  "
              f"{'equal' if r['equal'] else 'DIFFERS'}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": torch.cuda.get_device_name() if args.device == "cuda" else "interpreter",
                       "torch": torch.__version__, "triton": triton.__version__, "rows": rows}, f, indent=1)
