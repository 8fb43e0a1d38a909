"""rms_norm casting="none": is the reference's ``(mean).to(x.format) + eps`` right for the kernel's
``ms + EPS`` in fp32 rounded once to x's format, and for the other plan (eps rounded to x's format
first, as upstream Liger's ``eps.to(X_row_dtype)``)?

Rows whose mean square lies near eps (where the two plans can round differently) are judged
against the reference (eps = 1e-6) in both modes, with the correct kernel run twice on the
interpreter: with eps = 1e-6 (fp32 EPS: the kernel's plan) and with eps = bf16(1e-6) (the sum
of the bf16 mean and bf16(eps), rounded once: the other plan). Prints, per format, the rows where
the two kernels' stored rstd differ and each verdict.

    python scripts/rms_none_eps.py        (docs/results/2026-12-02-plan-1oversqrt.md, part b)
"""
import torch

from numoracle import backends

backends.select("interpreter")

import numoracle as no  # noqa: E402
from numoracle import operators  # noqa: E402

op = operators.get("rms_norm")
kernel = op.kernels["correct"]
EPS = 1e-6
for dtype in (torch.bfloat16, torch.float16):
    g = torch.Generator().manual_seed(0)
    rows, cols = 512, 64
    # per row a mean square between eps/16 and 16 eps
    scale = (EPS * torch.exp2(torch.empty(rows, 1).uniform_(-4, 4, generator=g))).sqrt()
    x = (torch.randn(rows, cols, generator=g) * scale).to(dtype)
    w = (1 + 0.1 * torch.randn(cols, generator=g)).to(dtype)
    params = {"eps": EPS, "casting": "none", "offset": 0.0}
    eps_low = float(torch.tensor(EPS).to(dtype).float())
    y1, r1 = kernel(x, w, **params)
    y2, r2 = kernel(x, w, **{**params, "eps": eps_low})
    line = [f"{dtype}: eps in fp32 vs eps rounded to {dtype} first ({eps_low!r}):",
            f"rstd differs on {int((r1 != r2).sum())} of {rows} rows, y on {int((y1 != y2).sum())} of {rows * cols}"]
    for name, out in (("fp32 eps (the kernel)", (y1, r1)), ("rounded eps", (y2, r2))):
        vs = no.check_modes(op.reference, out, (x, w), params)
        line.append(f"{name}: " + ", ".join(f"{m} {v.status} ({v.n_rejected} rejected)" for m, v in vs.items()))
    print("\n  ".join(line))
