import torch

import numoracle as no
from numoracle.formats import e4m3fn, fp32
from numoracle.strategies import fill


@no.reference
def reference(x, scale):
    # written as the kernel is: where x / scale overflows fp32, the clamp of +-inf is +-448
    return no.clamp(x.to(fp32) / scale, -448.0, 448.0).to(e4m3fn)


def example(seed, dtype, family, rows, cols):
    g = torch.Generator().manual_seed(seed)
    scale = (10.0 ** (-3.0 * torch.rand(1, generator=g, dtype=torch.float64))).to(torch.float32)
    return (fill((rows, cols), family, seed, dtype=dtype), scale), {}


op = no.Operator("static_fp8_quant", reference,
                 kernels={"correct": "sq.kernels:static_quant"}, example=example,
                 faulty={"clamp_416": "sq.kernels:static_quant_416"},
                 domain=no.Domain(rows=(1, 8), cols=(1, 256), formats=("bf16",)))
