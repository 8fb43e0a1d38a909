#!/usr/bin/env python3
"""Whether this torch's Inductor keeps a float32 -> bf16/fp16 -> float32 round trip in C++
code (torch 2.11 folds it into the value itself, emulate_precision_casts or not:
pytorch/pytorch#185337), and what that did to a compiled verdict: rope with bf16 cos/sin,
judged eagerly and compiled ('always') on the emulator's outputs and then on outputs moved one
bf16 step up wherever the eager statistical region still accepts them.  Every status should
be 'accept'.  docs/results/2026-12-05-torch211-lowp-round-trip.md.

    python scripts/lowp_round_trip.py
"""
import warnings

import torch

import numoracle as no
from numoracle import operators
from numoracle.selftest.emulator import Plan, emulate
from numoracle.verdict import compiled
from numoracle.verdict.compiled.inductor import COMPILE_OPTIONS


def round_trip() -> None:
    x = torch.randn(64, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    for dtype in (torch.bfloat16, torch.float16):
        def kept(t, dtype=dtype):
            f = t.to(torch.float32)
            return f.to(dtype).to(torch.float32) == f
        torch._dynamo.reset()
        got = torch.compile(kept, options=dict(COMPILE_OPTIONS))(x)
        print(f"torch {torch.__version__}: float32 -> {dtype} -> float32 equal to the float32 value: "
              f"eager {int(kept(x).sum())} of 64, compiled {int(got.sum())} of 64")


def one_step_up(y: torch.Tensor, qhi: torch.Tensor) -> torch.Tensor:
    f = y.float()
    bits = f.view(torch.int32)
    up = torch.where(f >= 0, bits + (1 << 16), bits - (1 << 16)).view(torch.float32)
    return torch.where(up <= qhi.float(), up.to(torch.bfloat16), y)


def rope() -> None:
    op = operators.get("rope")
    inputs, params = op.example(7, dtype=torch.bfloat16, family="calibration", rows=16, cols=64)
    outs = emulate(op.reference, inputs, params, Plan(seed=1))
    v = no.check(op.reference, outs, inputs, params, settings=no.settings(compile="never"))
    moved = tuple(one_step_up(y, j.qhi) for y, j in zip(outs, v.outputs))
    print(f"rope, cos/sin {inputs[2].dtype}: {sum(int((m != y).sum()) for m, y in zip(moved, outs))} "
          f"elements moved one bf16 step, inside the eager statistical region")
    for policy in ("never", "always"):
        compiled.clear()
        seen = []
        for k in range(4):
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                try:
                    status = no.check(op.reference, outs if k < 2 else moved, inputs, params,
                                      settings=no.settings(compile=policy)).status
                except RuntimeError as exc:
                    status = f"{type(exc).__name__}: {str(exc)[:120]}"
            said = [str(w.message)[:120] for w in caught if "numoracle" in str(w.message)]
            seen.append(status + (f" (warned: {said[0]})" if said else ""))
        print(f"compile={policy}: " + " | ".join(seen))


if __name__ == "__main__":
    round_trip()
    rope()
