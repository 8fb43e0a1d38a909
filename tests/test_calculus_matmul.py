"""matmul in the calculus: a symbol that is one variable along K (a per-row
statistic of a) sums with its sign across the dot, so the statistical mode
sees (sum_k a_k b_k)^2, not sum_k (a_k b_k)^2."""
import torch

import numoracle as no
from numoracle.calculus import form as FM
from numoracle.verdict.evaluation import run_reference
from numoracle.formats import fp32
from numoracle.mathlib import load as load_profile


@no.reference
def scaled_matmul(x, w):
    xf = x.to(fp32)
    r = no.rsqrt(no.mean(xf * xf, axis=-1, keepdims=True) + 1e-6)     # one variable per row
    return no.matmul(xf * r, w.to(fp32), acc=fp32)


def test_row_symbol_stays_shared_through_matmul():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(3, 64, generator=g).to(torch.bfloat16)
    w = torch.rand(64, 5, generator=g).to(torch.bfloat16)           # positive: no cancellation
    outs, ctx, _ = run_reference(scaled_matmul, (x, w), {}, load_profile("interpreter"))
    out = outs[0] if isinstance(outs, (list, tuple)) else outs
    row_terms = [t for t in out.form.shared.values() if t.s.shape[-1] == 1 and t.s.shape[0] == 3]
    assert row_terms, "the per-row rsqrt symbol must stay a shared symbol of the output"
    # its statistical contribution is the signed sum over K, as large as the worst case here
    sig2 = FM.stat_sigma2(out.form, ctx.symbols, out.c)
    biggest = max((t.coef * t.s).abs() for t in row_terms)
    assert bool((sig2 >= biggest.square() * (1 - 1e-12)).all())
