"""How accurate are the float64 math functions that the calculus evaluates, eagerly and compiled by
torch.compile (Inductor's C++ on the CPU, its Triton code on a GPU)?  The calculus allows a float64
library function 2^-50 of its value (``calculus.functions._EVAL_SLACK``, about 9 units of float64's
last place): each function is measured at 4,000 arguments over its domain against mpmath at 140
bits, and the largest relative error printed in units of 2^-53.  ``formats.expm1`` is the one the
calculus calls (Inductor writes torch.expm1 as exp(t) - 1 on the CPU); torch.expm1 is shown beside it.

    python scripts/compiled_math_accuracy.py [--device cuda] [--json FILE]
"""

import argparse
import json
import math

import mpmath
import torch

from numoracle import formats as F

mpmath.mp.prec = 140
ULP = 2.0 ** -53
SLACK = 2.0 ** -50

# name: (torch function, mpmath function, argument range; a positive lower end draws log-uniformly)
FUNCTIONS = {
    "exp": (torch.exp, mpmath.exp, (-700.0, 700.0)),
    "exp2": (torch.exp2, lambda x: mpmath.power(2, x), (-1000.0, 1000.0)),
    "log": (torch.log, mpmath.log, (1e-300, 1e300)),
    "log2": (torch.log2, lambda x: mpmath.log(x, 2), (1e-300, 1e300)),
    "rsqrt": (torch.rsqrt, lambda x: 1 / mpmath.sqrt(x), (1e-300, 1e300)),
    "sqrt": (torch.sqrt, mpmath.sqrt, (1e-300, 1e300)),
    "reciprocal": (torch.reciprocal, lambda x: 1 / x, (1e-300, 1e300)),
    "pow(-1.5)": (lambda x: x.pow(-1.5), lambda x: mpmath.power(x, -1.5), (1e-200, 1e200)),
    "tanh": (torch.tanh, mpmath.tanh, (-30.0, 30.0)),
    "erf": (torch.erf, mpmath.erf, (-6.0, 6.0)),
    "sin": (torch.sin, mpmath.sin, (-1e4, 1e4)),
    "cos": (torch.cos, mpmath.cos, (-1e4, 1e4)),
    "sigmoid": (torch.sigmoid, lambda x: 1 / (1 + mpmath.exp(-x)), (-700.0, 700.0)),
    "torch.expm1": (torch.expm1, mpmath.expm1, (0.0, 700.0)),
    "formats.expm1": (F.expm1, mpmath.expm1, (0.0, 700.0)),
}


def arguments(lo: float, hi: float, n: int, gen: torch.Generator) -> torch.Tensor:
    """Half uniform over [lo, hi], half of magnitudes log-uniform down to 1e-17 (the small
    arguments where cancellation shows); all log-uniform for a positive lo."""
    def u(k, a, b):
        return torch.empty(k, dtype=torch.float64).uniform_(a, b, generator=gen)
    if lo > 0:
        return torch.exp(u(n, math.log(lo), math.log(hi)))
    sign = torch.where(u(n // 2, 0, 1) < 0.5, -1.0, 1.0) if lo < 0 else torch.ones(n // 2, dtype=torch.float64)
    small = torch.exp(u(n // 2, math.log(1e-17), math.log(max(-lo, hi)))) * sign
    return torch.cat([u(n - n // 2, lo, hi), small.clamp(lo, hi)])


def measure(device: str, n: int = 4000) -> dict:
    gen = torch.Generator().manual_seed(0)
    out = {}
    for name, (fn, exact, (lo, hi)) in FUNCTIONS.items():
        x = arguments(lo, hi, n, gen)
        truth = torch.tensor([float(exact(mpmath.mpf(float(v)))) for v in x], dtype=torch.float64)
        torch._dynamo.reset()
        compiled = torch.compile((lambda f: lambda t: f(t))(fn), dynamic=True, fullgraph=True)
        xd = x.to(device)
        row = {}
        for how, got in (("eager", fn(xd)), ("compiled", compiled(xd))):
            got = got.cpu()
            ok = torch.isfinite(truth) & (truth != 0)
            rel = (got[ok] - truth[ok]).abs() / truth[ok].abs()
            worst = int(rel.argmax())
            nonfinite_ok = bool(torch.equal(got[~torch.isfinite(truth)], truth[~torch.isfinite(truth)]))
            row[how] = {"max_ulps": float(rel.max() / ULP), "at": float(x[ok][worst]),
                        "within_slack": bool(rel.max() <= SLACK) and nonfinite_ok}
        out[name] = row
    return out


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    res = measure(args.device)
    print(f"{'function':15s} {'eager ulps':>12s} {'compiled ulps':>14s}  within 2^-50 (eager, compiled)")
    for name, row in res.items():
        e, c = row["eager"], row["compiled"]
        print(f"{name:15s} {e['max_ulps']:12.3g} {c['max_ulps']:14.3g}  {e['within_slack']}, {c['within_slack']}"
              + ("" if c["within_slack"] else f"   (compiled worst at {c['at']:.4g})"))
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"device": args.device, "torch": torch.__version__, "functions": res}, fh, indent=1)
