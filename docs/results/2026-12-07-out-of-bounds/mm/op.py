import torch

import numoracle as no
from numoracle.formats import fp32
from numoracle.strategies import fill


@no.reference
def reference(a, b, bias):
    acc = no.matmul(a, b, acc=fp32) + bias.to(fp32)
    y = acc / (1.0 + no.exp(-acc))
    return y.to(a.format)


def example(seed, dtype, family, rows, cols):
    a = fill((rows, cols), family, seed, dtype=dtype)
    b = (fill((cols, 8 * (1 + seed % 5)), "normal", seed + 1, dtype=torch.float32) / max(cols, 1) ** 0.5).to(dtype)
    bias = fill((8 * (1 + seed % 5),), "normal", seed + 2, dtype=dtype)
    return (a, b, bias), {}


op = no.Operator("mm_bias_silu", reference, kernels={"correct": "mm.kernels:mm_bias_silu", "wide": "mm.kernels:mm_bias_silu_wide"}, faulty={"bf16_bias": "mm.kernels:mm_bias_silu_bf16bias", "oob_read": "mm.kernels:mm_oob_read"}, example=example,
                 domain=no.Domain(rows=(1, 64), cols=(1, 512), formats=("bf16", "fp16")))
