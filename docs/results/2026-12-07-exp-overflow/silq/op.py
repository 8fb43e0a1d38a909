import numoracle as no
from numoracle.formats import fp32
from numoracle.strategies import fill


@no.reference(outputs=("q", "scales"))
def reference(a, b, *, group_size=128, eps=1e-10):
    af = a.to(fp32)
    h = af / (1.0 + no.exp(-af)) * b.to(fp32)
    q = no.quantize_group(h, group_size, "e4m3fn", "fp32", eps=eps)
    return q.codes, q.scales


def example(seed, dtype, family, rows, cols):
    return (fill((rows, cols), family, seed, dtype=dtype), fill((rows, cols), family, seed + 1, dtype=dtype)), {}


op = no.Operator("silu_mul_quant", reference,
                 kernels={"correct": "silq.kernels:silu_mul_quant"}, example=example,
                 faulty={"h_bf16": "silq.kernels:silu_mul_quant_h_bf16"},
                 domain=no.Domain(rows=(1, 8), cols=(128, 512), cols_multiple_of=128, formats=("bf16", "fp16")))
