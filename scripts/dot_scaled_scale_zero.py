"""``tl.dot_scaled`` and the E8M0 scale byte 0 (2^-127) on this CUDA GPU, and what numoracle makes
of it (docs/results/2026-12-05-h100-dot-scaled-scale-zero.md).

1. One-block operands (code 1.0 at k = 0, zeros elsewhere) with each side's scale byte 0 and 1,
   by the raw ``tl.dot_scaled`` launch, by the dequantize-then-dot kernel and exactly.
2. The case the adversarial search found (mx_scaled_matmul, subnormal group): the raw launch's
   output judged in fixed mode (expected: rejected where the emulation reads 2^-127 as 0), the
   correct kernel's (accepted), and the registered ``dot_scaled`` variant (expected: it refuses
   these scales with NotImplementedError where the GPU emulates ``tl.dot_scaled``).

    python scripts/dot_scaled_scale_zero.py [--json OUT]

Exit 1 if any expectation fails; in particular if this GPU's ``tl.dot_scaled`` honours 2^-127
while the variant still refuses it (then ``dot_scaled_refusal`` should be narrowed)."""
from __future__ import annotations

import argparse
import json
import sys

import torch


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--json", default="")
    a = ap.parse_args(argv)
    if not torch.cuda.is_available():
        print("no CUDA device: nothing to check")
        return 0
    from numoracle import backends, operators
    from numoracle.check import check
    from numoracle.operators.kernels import mx_matmul as MX
    from numoracle.runner.execute import call_kernel
    from numoracle.strategies.cases import Case
    backends.select("gpu")
    cap = torch.cuda.get_device_capability()
    emulated = cap[0] < 10
    op = operators.get("mx_scaled_matmul")
    e4 = torch.float8_e4m3fn
    report = {"device": torch.cuda.get_device_name(), "capability": cap, "emulated": emulated, "blocks": [],
              "case": {}}
    failures = []

    for side in ("a", "b"):
        for e in (0, 1):
            codes = torch.zeros((1, 32), dtype=torch.uint8)
            codes[0, 0] = 0x38                                   # e4m3 1.0
            A = B = codes.view(e4).cuda()
            sa = torch.tensor([[e if side == "a" else 127]], dtype=torch.uint8, device="cuda")
            sb = torch.tensor([[e if side == "b" else 127]], dtype=torch.uint8, device="cuda")
            raw = float(MX._dot_scaled_launch(A, sa, B, sb, "fp32")[0, 0])
            deq = float(call_kernel(op.kernels["correct"], (A, sa, B, sb), {"out": "fp32"}, {}, device="cuda")[0, 0])
            exact = 2.0 ** (e - 127)
            report["blocks"].append({"scaled": side, "E": e, "raw": raw, "dequantize_then_dot": deq, "exact": exact})
            if deq != exact:
                failures.append(f"dequantize-then-dot gave {deq} for {side} scale byte {e}, exactly {exact}")
            if e == 0 and emulated and raw == exact:
                failures.append(f"tl.dot_scaled honours the {side} scale byte 0 here: narrow dot_scaled_refusal")
            if e == 0 and not emulated and raw != exact:
                failures.append(f"tl.dot_scaled reads the {side} scale byte 0 as {raw} on capability {cap}: "
                                f"dot_scaled_refusal should cover it")

    case = Case("mx_scaled_matmul", fmt="fp32", rows=9, cols=96, group="subnormal", params={"out": "fp32"}, seed=3)
    inputs, params = case.materialize()
    inputs = tuple(t.cuda() for t in inputs)
    has_zero = MX._nonzero_block_at_scale_0(inputs[0], inputs[1]) or MX._nonzero_block_at_scale_0(inputs[2], inputs[3])
    raw = MX._dot_scaled_launch(*inputs, params["out"])
    correct = call_kernel(op.kernels["correct"], inputs, params, {}, device="cuda")
    v_raw = check(op.reference, raw, inputs, params, mode="fixed", backend="gpu")
    v_ok = check(op.reference, correct, inputs, params, mode="fixed", backend="gpu")
    try:
        call_kernel(op.kernels["dot_scaled"], inputs, params, {}, device="cuda")
        refused = ""
    except NotImplementedError as exc:
        refused = str(exc)
    report["case"] = {"case": repr(case), "nonzero_block_at_scale_byte_0": has_zero, "raw_status": v_raw.status,
                      "raw_rejected": int(v_raw.outputs[0].rejected.sum()), "correct_status": v_ok.status,
                      "variant_refused": refused}
    if v_ok.status != "accept":
        failures.append(f"the dequantize-then-dot kernel is {v_ok.status} on {case!r}")
    if emulated and has_zero:
        if v_raw.status != "reject":
            failures.append(f"the raw tl.dot_scaled output is {v_raw.status}, not rejected, on {case!r}")
        if not refused:
            failures.append("the dot_scaled variant did not refuse scale byte 0 on an emulating GPU")
    report["failures"] = failures
    print(json.dumps(report, indent=1, default=str))
    if a.json:
        with open(a.json, "w") as fh:
            json.dump(report, fh, indent=1, default=str)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
