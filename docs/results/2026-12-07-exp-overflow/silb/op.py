import numoracle as no
from numoracle.formats import fp32
from numoracle.strategies import fill


@no.reference
def reference(dy, x):
    xf = x.to(fp32)
    sig = 1.0 / (1.0 + no.exp(-xf))
    return (dy.to(fp32) * sig * (1.0 + xf * (1.0 - sig))).to(x.format)


def example(seed, dtype, family, rows, cols):
    return (fill((rows, cols), family, seed, dtype=dtype), fill((rows, cols), family, seed + 1, dtype=dtype)), {}


op = no.Operator("silu_bwd", reference, kernels={"correct": "silb.kernels:silu_bwd"}, example=example,
                 domain=no.Domain(rows=(1, 16), cols=(1, 2048), formats=("bf16", "fp16")))
