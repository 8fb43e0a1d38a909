"""The evidence for issue #31's three reproductions, printed: each case of
tests/test_soundness_repros.py (the same inputs, built by that module's helpers) judged in
both modes on the interpreter, with the status, the rejected and uncertified element counts,
the failing certificate sites, and the registered faulty kernels' fixed-mode verdicts on the
same inputs; and geglu_backward on scaled_up with the gross fault (da x -3 + 7).

    PYTHONPATH=$PWD python scripts/soundness_repros.py

Exit status 1 if a correct kernel is rejected in fixed mode or a faulty one is not."""
from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

import numoracle as no  # noqa: E402
from numoracle import backends  # noqa: E402
from numoracle.check import check_modes  # noqa: E402

import test_soundness_repros as T  # noqa: E402

bad = []


def line(what, vs):
    parts = []
    for mode, v in vs.items():
        sites = sorted({s.label.split(" [")[0] for s in v.certificate.failing}) if v.status == "uncertified" else []
        parts.append(f"{mode}: {v.status} ({v.n_rejected} rejected, {v.n_uncertified} uncertified of "
                     f"{v.n_elements}{'; failing: ' + ', '.join(sites) if sites else ''})")
    print(f"  {what}: " + "; ".join(parts))


def expect(ok, what):
    if not ok:
        bad.append(what)


def main() -> int:
    backends.select("interpreter")
    print("1. no.matmul(a, b, acc=fp32), a = 0.01 randn(8, 16), b = 2^-127 randn(16, 8) (fp32)")
    a, b = T._subnormal_products()
    prods = a.unsqueeze(-1) * b.unsqueeze(0)
    seq = torch.zeros(8, 8)
    for k in range(16):
        seq = seq + prods[:, k, :]
    for what, y in (("sequential sum of rounded products", seq), ("a @ b", a @ b),
                    ("(a @ b) x 1.5 (wrong)", (a @ b) * 1.5)):
        vs = check_modes(T.fp32_matmul, y, (a, b))
        line(what, vs)
        expect((vs["fixed"].status == "reject") == what.endswith("(wrong)"), what)

    print("1b. fused_linear_cross_entropy, fp32, x = example x 2^-127 (4 x 48)")
    for seed in (0, 5):
        op, inputs, params = T._flce_subnormal(seed)
        print(f" seed {seed}, params {params}")
        for name, kernel in op.kernels.items():
            vs = check_modes(op.reference, kernel(*[t.clone() for t in inputs], **params), inputs, params)
            line(name, vs)
            expect(vs["fixed"].status == "accept", f"flce {seed} {name}")
        if params["reduction"] == "mean":
            y = op.faulty_kernel("chunk_count")(*[t.clone() for t in inputs], **params)
            vs = check_modes(op.reference, y, inputs, params)
            line("faulty:chunk_count", vs)
            expect(vs["fixed"].status == "reject", f"flce {seed} chunk_count")

    print("2. w8a8_block_fp8_matmul near overflow (rows 0-1: codes x a_scale ~ 8.5e37; rows 2-3 ordinary)")
    op = no.operators.get("w8a8_block_fp8_matmul")
    inputs, params = T._w8a8_near_overflow()
    for out in ("bf16", "fp32"):
        p = {**params, "out": out}
        print(f" out={out}")
        for name, kernel in op.kernels.items():
            y = kernel(*[t.clone() for t in inputs], **p)
            vs = check_modes(op.reference, y, inputs, p)
            line(f"{name} (stores {int((~torch.isfinite(y)).sum())} non-finite)", vs)
            expect(all(v.status == "uncertified" and v.n_rejected == 0 for v in vs.values()), f"w8a8 {out} {name}")
        for name in op.faulty:
            y = op.faulty_kernel(name)(*[t.clone() for t in inputs], **p)
            vs = check_modes(op.reference, y, inputs, p)
            line(f"faulty:{name}", vs)
            expect(vs["fixed"].status == "reject", f"w8a8 {out} faulty {name}")

    print("3. geglu_backward, fp32, scaled_up (8 x 64): correct kernel, and da x -3 + 7")
    for seed in (0, 1):
        op, inputs, params = T._geglu_scaled_up(seed, torch.float32)
        da, db = op.kernels["correct"](*[t.clone() for t in inputs], **params)
        vs = check_modes(op.reference, (da, db), inputs, params)
        line(f"seed {seed} correct", vs)
        expect(vs["fixed"].status == "accept", f"geglu {seed} correct")
        v = check_modes(op.reference, ((da.double() * -3 + 7).float(), db), inputs, params)["fixed"]
        o = v.outputs[0]
        judged = ~o.uncertified
        caught = float((o.rejected & judged).sum()) / max(float(judged.sum()), 1.0)
        vc = check_modes(op.reference, (da, db), inputs, params)["fixed"].outputs[0]
        big = judged & (da.double().abs() > 1)          # where gelu does not saturate to 0
        rel = ((vc.hi - vc.lo).double() / da.double().abs())[big]
        print(f"  seed {seed} gross fault on da: {v.status}, caught on {caught:.3f} of {int(judged.sum())} certified "
              f"elements; the correct da's region width / |da| where |da| > 1 ({int(big.sum())} elements): median "
              f"{float(rel.median()):.3g}, max {float(rel.max()):.3g}")
        expect(caught >= 0.9, f"geglu {seed} gross fault")
    for dtype in (torch.bfloat16, torch.float16):
        for seed in range(4):
            op, inputs, params = T._geglu_scaled_up(seed, dtype)
            y = op.faulty_kernel("unrounded_gelu")(*[t.clone() for t in inputs], **params)
            good = op.kernels["correct"](*[t.clone() for t in inputs], **params)
            v = check_modes(op.reference, y, inputs, params)["fixed"]
            differ = sum(int(((g.float() != b.float()) & ~o.uncertified).sum()) for g, b, o in zip(good, y, v.outputs))
            print(f"  {str(dtype)[6:]} seed {seed} faulty:unrounded_gelu: {v.status} ({v.n_rejected} rejected; "
                  f"{differ} certified elements differ from the correct kernel's)")
            expect(v.status == "reject" or differ == 0, f"geglu unrounded_gelu {dtype} {seed}")
    print("failures: " + (", ".join(bad) if bad else "none"))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
