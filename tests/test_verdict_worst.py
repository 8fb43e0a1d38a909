"""Verdict.worst reads the excess in ulps at the chosen element only when nothing is rejected:
the same element and the same excess as computing it for every element, on outputs with
every kind of value (NaN and infinite kernels, infinite bounds, uncertified elements, broadcast
and non-contiguous tensors)."""
from types import SimpleNamespace

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from numoracle import formats as F
from numoracle.verdict.verdict import Verdict


def _worst_every_element(outputs):
    # the definition: excess of every element, then the element by status and score
    best = None
    for o in outputs:
        if o.numel == 0:
            continue
        k = torch.where(torch.isfinite(o.kernel), o.kernel, o.centre).abs()

        def ulp_beside(bound, k=k, fmt=o.fmt):
            return F.ulp(torch.where(torch.isfinite(bound), torch.maximum(k, bound.abs()), k), fmt)
        excess = torch.maximum((o.kernel - o.hi) / ulp_beside(o.hi), (o.lo - o.kernel) / ulp_beside(o.lo))
        if bool(o.rejected.any()):
            score = torch.where(o.rejected, torch.nan_to_num(excess, nan=float("inf"), posinf=float("inf")),
                                torch.full_like(excess, -float("inf")))
            kind = 1
        else:
            half = (o.hi - o.lo) / 2
            dev = (o.kernel - o.centre).abs() / torch.where(half > 0, half, torch.ones_like(half))
            score = torch.where(o.uncertified | ~torch.isfinite(dev), torch.full_like(dev, -float("inf")), dev)
            kind = 0
        i = int(torch.argmax(score.reshape(-1)))
        excess = excess.expand(score.shape)
        cand = (kind, float(score.reshape(-1)[i]), o, i, float(excess.reshape(-1)[i]))
        if best is None or cand[:2] > best[:2]:
            best = cand
    return None if best is None else best[2:]


SPECIAL = [float("nan"), float("inf"), -float("inf"), 0.0, -0.0, 1e-300, 3.0e38]


@st.composite
def outputs(draw):
    outs = []
    for _ in range(draw(st.integers(1, 3))):
        rows, cols = draw(st.integers(0, 4)), draw(st.integers(1, 6))
        fmt = draw(st.sampled_from([F.bf16, F.fp16, F.fp32, F.e4m3fn]))
        g = torch.Generator().manual_seed(draw(st.integers(0, 2**31)))
        centre = torch.randn(rows, cols, generator=g, dtype=torch.float64) * 2.0 ** draw(st.integers(-20, 20))
        r = torch.rand(rows, cols, generator=g, dtype=torch.float64) * centre.abs() * 0.01
        lo, hi = centre - r, centre + r
        kernel = centre + (torch.rand(rows, cols, generator=g, dtype=torch.float64) - 0.5) * 4 * r
        flat = kernel.reshape(-1)
        for _ in range(draw(st.integers(0, 3))):
            if flat.numel():
                flat[draw(st.integers(0, flat.numel() - 1))] = draw(st.sampled_from(SPECIAL))
        if draw(st.booleans()) and rows:
            hi[0] = float("inf")
        unc = torch.rand(rows, cols, generator=g) < draw(st.sampled_from([0.0, 0.3]))
        inside = (kernel >= lo) & (kernel <= hi)
        rejected = ~inside & ~unc if draw(st.booleans()) else torch.zeros_like(unc)
        if draw(st.booleans()):            # the centre broadcast along a row, the kernel transposed
            centre = centre[:, :1].expand(rows, cols)
            kernel = kernel.t().contiguous().t()
        outs.append(SimpleNamespace(kind="value", numel=rows * cols, kernel=kernel, centre=centre, lo=lo, hi=hi, fmt=fmt,
                                    rejected=rejected, uncertified=unc))
    return outs


@settings(max_examples=300, deadline=None)
@given(outputs())
def test_worst_equals_the_excess_of_every_element(outs):
    v = Verdict(status="accept", program="p", mode="fixed", p=1e-6, outputs=outs, certificate=None,
                assumptions=None)
    got, want = v.worst(), _worst_every_element(outs)
    if want is None:
        assert got is None
        return
    assert got[0] is want[0] and got[1] == want[1]
    assert got[2] == want[2] or (got[2] != got[2] and want[2] != want[2]), (got[2], want[2])
