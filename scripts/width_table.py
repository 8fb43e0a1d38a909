"""Per operator (correct kernel): the median and maximum width of the acceptance
interval in output ulps in each mode, beside the width that assert_close's
defaults and the upstream suite's own allclose rule allow for the same elements
(2·(atol + rtol·|reference|) in output ulps).  Rules that are not elementwise
(one-sided max, L2 distance, mean relative error) have no per-element width: the
table names them instead.

    python scripts/width_table.py --cases 22 [--backend gpu] [--out table.md]
"""
from __future__ import annotations

import argparse
import sys

import torch

from numoracle import backends, operators
from numoracle import formats as F
from numoracle.studies.campaign import correct as C
from numoracle.check import check_modes
from numoracle.oracles.baselines import Upstream

PAPER = ("rms_norm", "layer_norm", "swiglu", "geglu", "rope", "cross_entropy", "fused_linear_cross_entropy",
         "jsd", "rms_layernorm", "cross_entropy_loss", "geglu_exact", "per_token_group_quant_fp8",
         "w8a8_block_fp8_matmul")


def _q(t: torch.Tensor):
    return (float(t.median()), float(t.max())) if t.numel() else (float("nan"), float("nan"))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--backend", default="interpreter")
    ap.add_argument("--cases", type=int, default=22)
    ap.add_argument("--ops", default=",".join(PAPER))
    ap.add_argument("--out", default="")
    a = ap.parse_args(argv)
    backend = backends.select(a.backend)
    dev = backend.device
    up = Upstream()
    lines = ["| operator | stat median / max | fixed median / max | assert_close median / max | upstream rule | "
             "upstream median / max |", "|---|---|---|---|---|---|"]
    for name in a.ops.split(","):
        op = operators.get(name)
        kernel = op.kernels["correct"]
        acc = {"statistical": [], "fixed": [], "ac": [], "up": []}
        rules = set()
        for seed, group, fmt, (rows, cols), drawn in C.cases(op, a.cases):
            inputs, params = op.example(seed, dtype=C.DT[fmt], family=group, rows=rows, cols=cols)
            params = {**drawn, **params}
            inputs = tuple(t.to(dev) if isinstance(t, torch.Tensor) else t for t in inputs)
            outs = kernel(*[t.clone() if isinstance(t, torch.Tensor) else t for t in inputs], **params)
            for mode, v in check_modes(op.reference, outs, inputs, params, backend=backend).items():
                w, _, t = C.widths(v)
                acc[mode].append(w)
                if mode == "fixed":
                    acc["ac"].append(t)
                    for o in v.outputs:
                        rule = up.rule(name, o.fmt)
                        rules.add(rule.source if rule.kind == "allclose" else f"{rule.source} (not elementwise)")
                        ok = ~o.uncertified & torch.isfinite(o.centre)
                        if rule.kind == "allclose" and bool(ok.any()):
                            c = o.centre[ok]
                            acc["up"].append((2 * (rule.atol + rule.rtol * c.abs()) / F.ulp(c.abs(), o.fmt)).cpu())
        cat = (lambda xs: torch.cat(xs) if xs else torch.empty(0, dtype=torch.float64))
        cells = [f"{m:.3g} / {x:.3g}" for m, x in (_q(cat(acc[k])) for k in ("statistical", "fixed", "ac"))]
        upc = "–" if not acc["up"] else "{:.3g} / {:.3g}".format(*_q(cat(acc["up"])))
        lines.append(f"| {name} | " + " | ".join(cells) + f" | {'; '.join(sorted(rules))} | {upc} |")
        print(lines[-1], flush=True)
    text = "\n".join(lines) + "\n"
    if a.out:
        with open(a.out, "w", encoding="utf-8") as fh:
            fh.write(f"Acceptance width in output ulps ({backend}, {a.cases} cases per operator, correct kernel)\n\n" + text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
