"""mx_scaled_matmul's scale_after_dot variant against the reference's plan: on the registered
examples, how many dequantized operand values code·2^E the reference rounds to bf16 inexactly
(below bf16's normals, where the dequantize-then-dot kernel rounds them too and scale_after_dot
does not: it dots the codes, exact in bf16, and scales the fp32 block sums), and the verdicts of
both kernels (interpreter).

    python scripts/mx_scale_after_dot_plan.py      (docs/plan.md, "What the registry shows")
"""
import torch

from numoracle import backends

backends.select("interpreter")

from numoracle import formats as F  # noqa: E402
from numoracle import operators  # noqa: E402
from numoracle.runner import judge  # noqa: E402

op = operators.get("mx_scaled_matmul")
for seed in range(8):
    inputs, params = op.example(seed)
    a, a_s, b, b_s = inputs[:4]
    inexact = 0
    total = 0
    for codes, scales in ((a, a_s), (b, b_s)):
        # dequantized values in float64: code · 2^(E - 127), E8M0 bytes
        if codes.dtype == torch.float4_e2m1fn_x2:
            vals = F.decode(codes, F.Packed(F.e2m1, "low_first")).double()
        else:
            vals = codes.double()
        e = scales.view(torch.uint8).double() - 127
        d = vals * torch.exp2(e).repeat_interleave(32, dim=-1)
        inexact += int((d.to(torch.bfloat16).double() != d).sum())
        total += d.numel()
    verdicts = {k: judge(op, op.kernels[k], inputs, params).status for k in ("correct", "scale_after_dot")}
    print(f"seed {seed}: {inexact} of {total} dequantized operands round in bf16; verdicts {verdicts}")
