"""How does a tensor-core ``tl.dot`` accumulate in fp32?  (docs/design.md §4.4)

    python scripts/tensor_core_probe.py measure OUT.pt        # on a GPU: run the dots, save raw data
    python scripts/tensor_core_probe.py judge OUT.pt [--json F]  # anywhere: emulate and judge them

``measure`` runs one Triton kernel over bf16 and fp16 operands, tiles of 16 rows (mma v2) and 64
rows (wgmma), K from 1 to 64, three accumulator starts (zeros; the bias loaded into the
accumulator; ``tl.dot(a, b) + bias``, which Triton folds into the dot where K = 1), four input
kinds (normal, operands spread over 2^±10 and so with fp16 subnormals, a bias that cancels the
dot, products cancelling in pairs), and saves a, b, the bias and the fp32 results (tensors only,
read back with ``weights_only``).

``judge`` prints, per group, how many results ``emulator.tensor_core_dot`` reproduces bit for bit
and how many elements the GPU profile's and the interpreter profile's regions reject in each mode
(the round-to-nearest model rejects many; the tensor-core model must reject none)."""

import argparse
import collections
import json
import sys

import torch
import triton
import triton.language as tl


@triton.jit
def kernel(a_ptr, b_ptr, bias_ptr, y_ptr, M, N, K, START: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr,
           BK: tl.constexpr):
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.program_id(1) * BN + tl.arange(0, BN)
    bias = tl.load(bias_ptr + rn, mask=rn < N, other=0.0)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    if START == 1:
        acc = acc + bias[None, :]
    for k0 in range(0, K, BK):
        rk = k0 + tl.arange(0, BK)
        a = tl.load(a_ptr + rm[:, None] * K + rk[None, :], mask=(rm[:, None] < M) & (rk[None, :] < K), other=0.0)
        b = tl.load(b_ptr + rk[:, None] * N + rn[None, :], mask=(rk[:, None] < K) & (rn[None, :] < N), other=0.0)
        acc = tl.dot(a, b, acc)
    if START == 2:
        acc = acc + bias[None, :]
    tl.store(y_ptr + rm[:, None] * N + rn[None, :], acc, mask=(rm[:, None] < M) & (rn[None, :] < N))


def measure(path):
    g = torch.Generator().manual_seed(1)

    def inputs(kind, M, K, N, dt):
        a = torch.randn(M, K, generator=g, dtype=torch.float64)
        b = torch.randn(K, N, generator=g, dtype=torch.float64)
        if kind == "wide":
            a = a * torch.exp2(torch.randint(-10, 11, (M, K), generator=g).double())
            b = b * torch.exp2(torch.randint(-10, 11, (K, N), generator=g).double())
        if kind == "pairs":
            b[1::2] = -b[0::2][: b[1::2].shape[0]] * (1 + torch.randn(b[1::2].shape, generator=g, dtype=torch.float64)
                                                       * 2.0 ** -8)
            a[:, 1::2] = a[:, 0::2][:, : a[:, 1::2].shape[1]]
        a, b = a.to(dt), b.to(dt)
        ab = a.double() @ b.double()
        if kind == "cancel":
            bias = (-ab[0] * (1 + torch.randn(N, generator=g, dtype=torch.float64) * 2.0 ** -6)).float()
        else:
            bias = (torch.randn(N, generator=g, dtype=torch.float64) * ab.abs().mean()).float()
        return a, b, bias

    sets = []
    for dt in (torch.bfloat16, torch.float16):
        for BM, BN, BK in ((16, 16, 16), (64, 64, 32)):
            for start in (0, 1, 2):
                for K in (1, 2, 3, 4, 5, 8, 9, 16, 17, 32, 48, 64):
                    for kind in ("randn", "wide", "cancel", "pairs"):
                        M = N = 64
                        a, b, bias = inputs(kind, M, K, N, dt)
                        y = torch.empty(M, N, dtype=torch.float32, device="cuda")
                        ck = kernel[(triton.cdiv(M, BM), triton.cdiv(N, BN))](a.cuda(), b.cuda(), bias.cuda(), y, M, N,
                                                                             K, START=start, BM=BM, BN=BN, BK=BK)
                        ttgir = ck.asm.get("ttgir", "")
                        mma = "v3" if "versionMajor = 3" in ttgir else ("v2" if "versionMajor = 2" in ttgir else "?")
                        sets.append({"dt": str(dt)[6:], "BM": BM, "BK": BK, "start": start, "K": K, "kind": kind,
                                     "mma": mma, "folded": start == 2 and "arith.addf" not in ttgir,
                                     "a": a, "b": b, "bias": bias, "y": y.cpu()})
    torch.save({"device": torch.cuda.get_device_name(0), "triton": triton.__version__, "sets": sets}, path)
    print(len(sets), "sets from", torch.cuda.get_device_name(0))


def judge(path, out_json=None):
    import numoracle as no
    from numoracle import formats as F
    from numoracle.check import check
    from numoracle.formats import fp32
    from numoracle.selftest.emulator import tensor_core_dot

    @no.reference(outputs=("y",))
    def dot(a, b):
        return no.matmul(a, b, acc=fp32)

    @no.reference(outputs=("y",))
    def dot_bias(a, b, c):
        return no.matmul(a, b, acc=fp32) + c

    @no.reference(outputs=("y",))
    def bias_dot(a, b, c):       # the accumulator starts from the bias: the kernel adds the dot to it
        return c + no.matmul(a, b, acc=fp32)

    data = torch.load(path, weights_only=False)
    res = collections.defaultdict(collections.Counter)
    for s in data["sets"]:
        a, b, y, bias = s["a"], s["b"], s["y"], s["bias"]
        fmt = F.from_dtype(a.dtype)
        fold = s["start"] == 1 or s["folded"]
        em = tensor_core_dot(a.double(), b.double(), fmt, fmt, init=bias.double()[None, :] if fold else None)
        if s["start"] == 2 and not s["folded"]:
            em = F.round(em + bias.double()[None, :], fp32)
        key = f'{s["dt"]} {s["mma"]} {["zeros", "acc=bias", "dot+bias"][s["start"]]} K{"<=6" if s["K"] <= 6 else ">6"}'
        r = res[key]
        r["elements"] += y.numel()
        r["emulated bit for bit"] += int((em == y.double()).sum())
        prog, inputs = (dot, (a, b)) if s["start"] == 0 else ((bias_dot if s["start"] == 1 else dot_bias), (a, b, bias))
        for backend, prof in (("gpu", "h200"), ("interpreter", "interpreter")):
            for mode in ("fixed", "statistical"):
                v = check(prog, y, inputs, mode=mode, backend=backend, profile=prof)
                r[f"{prof} profile, {mode}: rejected elements"] += \
                    int(v.outputs[0].rejected.sum()) if v.status == "reject" else 0
                r[f"{prof} profile, {mode}: uncertified verdicts"] += v.status == "uncertified"
    print("measured on", data.get("device"), "Triton", data.get("triton"))
    for k in sorted(res):
        print(k, dict(res[k]))
    if out_json:
        with open(out_json, "w") as fh:
            json.dump({"device": data.get("device"), "triton": data.get("triton"),
                       "groups": {k: dict(v) for k, v in sorted(res.items())}}, fh, indent=1)
    bad = sum(r[f"h200 profile, {m}: rejected elements"] for r in res.values() for m in ("fixed", "statistical"))
    miss = sum(r["elements"] - r["emulated bit for bit"] for r in res.values())
    return 1 if bad or miss else 0


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("what", choices=("measure", "judge"))
    ap.add_argument("path")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    if args.what == "measure":
        measure(args.path)
    else:
        sys.exit(judge(args.path, args.json))
