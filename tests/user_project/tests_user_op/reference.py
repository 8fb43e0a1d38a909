"""The precision plan of ``kernels.add_rms_norm``, written as a reference program.

Each line states one thing the kernel does to a value: where it widens (exact), which
format an operation runs in, how a reduction accumulates, which math call it makes, and
where it rounds to the storage format."""

import numoracle as no
from numoracle.formats import fp32


@no.reference(outputs=("y", "residual_out"))
def add_rms_norm(x, residual, w, *, eps=1e-6, offset=0.0):
    h = x.to(fp32) + residual.to(fp32)           # both widened (exact), one fp32 add
    ms = no.mean(h * h, axis=-1, keepdims=True)  # fp32 products, fp32 sum in any order, / n
    rstd = no.rsqrt(ms + eps)                    # eps an fp32 argument; tl.math.rsqrt
    y = h * rstd * (w.to(fp32) + offset)         # fp32, left to right, from the unrounded h
    return y.to(x.format), h.to(x.format)        # the two stores
