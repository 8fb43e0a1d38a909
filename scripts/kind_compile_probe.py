"""Which kinds of signature (symbolic plans) of an operator's verdict compile on a device, and
whether their compiled verdicts agree with eager ones:

    python scripts/kind_compile_probe.py rms_norm cuda [--out FILE.json]

Shapes of one row and of several, over a few widths: each group of shapes is judged under
compile_shapes_after=1e-9 (a kind compiles at its second call) with small verdicts kept on the
device, then eagerly (compile='never') for comparison.  For each symbolic plan the JSON says
whether it compiled and, if not, the compiler's error (its end, where Triton names the line)."""
import argparse
import json
import os
import sys
import warnings

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "benchmarks"))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("op")
    ap.add_argument("device")
    ap.add_argument("--out", default="")
    a = ap.parse_args()
    warnings.simplefilter("ignore")
    import throughput as T
    import torch

    import numoracle as no
    from numoracle.check import check
    from numoracle.verdict import compiled
    shapes = [(1, 96), (1, 300), (1, 77), (1, 200), (1, 450), (1, 511),
              (2, 96), (7, 300), (33, 77), (5, 200), (9, 450), (64, 511)]
    if a.op == "per_token_group_quant_fp8":          # columns: whole groups of 128
        shapes = [(r, 128 * max(1, c // 128)) for r, c in shapes]
    op, cases = T.make_cases(a.op, 0, 3, extra=shapes, device=a.device)
    rows = []
    with no.settings(compile_shapes_after=1e-9, cpu_verdict_max_elements=0):
        got = [check(op.reference, outs, inputs, params) for inputs, params, outs in cases]
    with no.settings(compile="never", cpu_verdict_max_elements=0):
        want = [check(op.reference, outs, inputs, params) for inputs, params, outs in cases]
    for (r, c), g, w in zip(shapes, got, want):
        same = g.status == w.status and all(
            bool(torch.equal(x.rejected, y.rejected)) and bool(torch.equal(x.uncertified, y.uncertified))
            for x, y in zip(g.outputs, w.outputs))
        rows.append({"shape": [r, c], "compiled_status": g.status, "eager_status": w.status, "same": same})
    kinds = [p for p in compiled.plans() if getattr(p, "symbolic", False)]
    report = {"op": a.op, "device": a.device, "torch": torch.__version__, "numoracle": no.__file__,
              "cases": rows,
              "kinds": [{"calls": p.calls, "compiled_calls": p.compiled_calls, "compiled": p.fn is not None
                         and p.failed is None, "traces": len(getattr(p, "_traces", ())),
                         "failed": (p.failed or "")[-3000:]} for p in kinds]}
    try:
        import triton
        report["triton"] = triton.__version__
    except ImportError:
        pass
    text = json.dumps(report, indent=1)
    print(text)
    if a.out:
        with open(a.out, "w") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()
