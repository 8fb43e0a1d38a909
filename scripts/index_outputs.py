"""Index outputs (docs/design.md §4.7): soundness on emulated correct kernels, and the contrast
with exact index equality (what torch.testing.assert_close does on index tensors).

    python scripts/index_outputs.py soundness N    # N cases of each of three programs, both modes
    python scripts/index_outputs.py contrast N     # argmax in near ties; the runner-up planted

``soundness``: argmax of a fp32 sum whose candidates are permutations of one set of terms (the
exact sums tie, the fp32 sums differ with the order), top-k routing over few-valued logits,
argmin of exp; emulated correct kernels over every summation order and math model; prints the
cases, the chosen indices, how many differ from the reference's own choice, and the verdicts.
``contrast``: on the same argmax, how many correct kernels exact index equality fails and
numoracle rejects; on normal inputs, the runner-up's index planted in every row."""

import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

import numoracle as no  # noqa: E402
from numoracle import formats as F  # noqa: E402
from numoracle.selftest.emulator import Plan, emulate  # noqa: E402
from test_selection import _cancelling, _tied, pick, route  # noqa: E402

ORDERS = ["random", "sequential", "tree", "worst"]


@no.reference
def low(x):
    return no.argmin(no.exp(x.to(F.fp32)), axis=-1)


def soundness(n_cases: int) -> dict:
    out = {}
    for name in ("pick", "route", "low"):
        c = {"cases": 0, "indices": 0, "differ_from_own": 0, "reject_fixed": 0, "reject_statistical": 0,
             "uncertified": 0}
        for seed in range(n_cases):
            g = torch.Generator().manual_seed(seed)
            rows, n = int(torch.randint(1, 9, (1,), generator=g)), int(torch.randint(2, 65, (1,), generator=g))
            plan = Plan(seed=seed, order=ORDERS[seed % 4], math=["random", "extreme"][(seed // 4) % 2])
            if name == "pick":
                d = int(torch.randint(2, 40, (1,), generator=g))
                prog, inputs, params = pick, (_cancelling(seed, rows, n, d), torch.ones(d, dtype=torch.bfloat16)), {}
            elif name == "route":
                prog, inputs, params = route, (_tied(seed, (rows, n), levels=3) * 4,), {"k": min(n, 1 + seed % 4)}
            else:
                prog, inputs, params = low, (_tied(seed, (rows, n), levels=5),), {}
            y = emulate(prog, inputs, params, plan=plan)
            vs = no.check_modes(prog, y, inputs, params)
            o = vs["fixed"].outputs[-1]
            c["cases"] += 1
            c["indices"] += o.numel
            c["differ_from_own"] += int((o.kernel != o.centre).sum())
            c["reject_fixed"] += vs["fixed"].status == "reject"
            c["reject_statistical"] += vs["statistical"].status == "reject"
            c["uncertified"] += vs["fixed"].status == "uncertified"
        out[name] = c
    return out


def contrast(n_cases: int) -> dict:
    c = {"cases": 0, "exact_equality_fails_correct": 0, "numoracle_rejects_correct": 0, "fault_rows": 0,
         "fault_rows_rejected": 0, "fault_rows_top_two_within_1e-3": 0}
    for seed in range(n_cases):
        g = torch.Generator().manual_seed(seed)
        rows, n, d = (int(torch.randint(1, 9, (1,), generator=g)), int(torch.randint(2, 65, (1,), generator=g)),
                      int(torch.randint(2, 40, (1,), generator=g)))
        x, w = _cancelling(seed, rows, n, d), torch.ones(d, dtype=torch.bfloat16)
        idx = emulate(pick, (x, w), plan=Plan(seed=seed, order=ORDERS[seed % 4]))
        v = no.check(pick, idx, (x, w), mode="fixed")
        c["cases"] += 1
        try:
            torch.testing.assert_close(idx, v.outputs[0].centre.long())
        except AssertionError:
            c["exact_equality_fails_correct"] += 1
        c["numoracle_rejects_correct"] += v.status == "reject"
        x = torch.randn(rows, n, d, generator=g).to(torch.bfloat16)
        w = (1 + 0.1 * torch.randn(d, generator=g)).to(torch.bfloat16)
        s = (x.double() * w.double()).sum(-1)
        runner_up = s.scatter(-1, s.argmax(-1, keepdim=True), -torch.inf).argmax(-1)
        vf = no.check(pick, runner_up, (x, w), mode="fixed")
        top = s.topk(2, -1).values
        c["fault_rows"] += rows
        c["fault_rows_rejected"] += int(vf.outputs[0].rejected.sum())
        c["fault_rows_top_two_within_1e-3"] += int(((top[..., 0] - top[..., 1]) / top[..., 0].abs() < 1e-3).sum())
    return c


if __name__ == "__main__":
    what, n = sys.argv[1], int(sys.argv[2])
    print(json.dumps({"soundness": soundness, "contrast": contrast}[what](n), indent=1))
