"""Edges of the tensor-core dot (docs/design.md §4.4): zeros, subnormal operands, FMAs, TF32, fp8.

    python scripts/tensor_core_edges.py measure OUT.pt    # on a GPU: run the dots, save raw data
    python scripts/tensor_core_edges.py judge OUT.pt [--json F]   # anywhere

``measure``: ``acc = c; acc = tl.dot(a, b, acc, input_precision=P)`` over 64x64 outputs, K = 2..32:
bf16 and fp16 operands with 30% zeros beside 2^12-times larger partners, subnormal operands beside
normal ones, subnormals times large partners; fp32 operands with P = "tf32" and "ieee"; e4m3.
``judge``: per group, the results the emulated instruction reproduces (16-bit; TF32 with the
operands truncated, 8 products per instruction), and the elements the GPU profile rejects against
``c + no.matmul(a, b)`` (fp8: ``acc=tf32``).  Exit 1 if a 16-bit or FMA result is rejected."""

import argparse
import collections
import json
import sys

import torch
import triton
import triton.language as tl


@triton.jit
def dk(a_ptr, b_ptr, c_ptr, y_ptr, M, N, K, PREC: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    pm, pn = tl.program_id(0), tl.program_id(1)
    rm = pm * BM + tl.arange(0, BM)
    rn = pn * BN + tl.arange(0, BN)
    acc = tl.load(c_ptr + rm[:, None] * N + rn[None, :], mask=(rm[:, None] < M) & (rn[None, :] < N), other=0.0)
    for k0 in range(0, K, BK):
        rk = k0 + tl.arange(0, BK)
        a = tl.load(a_ptr + rm[:, None] * K + rk[None, :], mask=(rm[:, None] < M) & (rk[None, :] < K), other=0.0)
        b = tl.load(b_ptr + rk[:, None] * N + rn[None, :], mask=(rk[:, None] < K) & (rn[None, :] < N), other=0.0)
        acc = tl.dot(a, b, acc, input_precision=PREC)
    tl.store(y_ptr + rm[:, None] * N + rn[None, :], acc, mask=(rm[:, None] < M) & (rn[None, :] < N))


def measure(path):
    g = torch.Generator().manual_seed(2)
    def r(*s):
        return torch.randn(*s, generator=g, dtype=torch.float64)
    def pw(lo, hi, *s):
        return torch.exp2(torch.randint(lo, hi, s, generator=g).double())

    sets = []
    M = N = 64
    def run(name, a, b, c, prec="tf32", BM=64, BK=32):
        y = torch.empty(M, N, dtype=torch.float32, device="cuda")
        K = a.shape[1]
        ck = dk[(triton.cdiv(M, BM), triton.cdiv(N, 64))](a.cuda(), b.cuda(), c.cuda(), y, M, N, K, PREC=prec, BM=BM, BN=64, BK=BK)
        ttgir = ck.asm.get("ttgir", "")
        mma = "v3" if "versionMajor = 3" in ttgir else ("v2" if "versionMajor = 2" in ttgir else "fma")
        sets.append({"name": name, "prec": prec, "mma": mma, "BK": BK, "a": a, "b": b, "c": c, "y": y.cpu()})
        print(name, prec, mma, K, flush=True)

    for K in (2, 3, 4, 8, 16, 32):
        for dt in (torch.float16, torch.bfloat16):
            # (a) zeros beside a large partner
            a = r(M, K) * pw(-12, -6, M, K); b = r(K, N)
            z = torch.rand(M, K, generator=g) < 0.3
            a[z] = 0.0
            b = torch.where(z.any(0)[:, None] & (torch.rand(K, N, generator=g) < 0.5), b * 2.0 ** 12, b)
            run(f"zeros-{dt}", a.to(dt), b.to(dt), torch.zeros(M, N, dtype=torch.float32))
            # (b) subnormal operands beside normal ones
            lo = -24 if dt == torch.float16 else -133
            emin = -14 if dt == torch.float16 else -126
            a = r(M, K) * pw(lo, emin, M, K); b = r(K, N) * pw(0, 4, K, N)
            nrm = torch.rand(M, K, generator=g) < 0.5
            a = torch.where(nrm, r(M, K) * 2.0 ** (emin + 2), a)
            run(f"subnormal-{dt}", a.to(dt), b.to(dt), torch.zeros(M, N, dtype=torch.float32))
            # (c) bf16/fp16 subnormals times large b against normal terms
            big = 2.0 ** 100 if dt == torch.bfloat16 else 2.0 ** 10
            a = r(M, K) * pw(lo, emin, M, K); b = r(K, N) * big
            b[0::2] = r(b[0::2].shape) * pw(-4, 4, b[0::2].shape[0], N)
            a[:, 0::2] = r(a[:, 0::2].shape) * (2.0 ** (lo + 8) if dt == torch.bfloat16 else 2.0 ** -8)
            run(f"subbig-{dt}", a.to(dt), b.to(dt), torch.zeros(M, N, dtype=torch.float32))
        # (d) fp32 operands, tf32 and ieee
        for prec in ("tf32", "ieee"):
            a = r(M, K) * pw(-6, 6, M, K); b = r(K, N)
            c = (r(M, N) * 4).float()
            run(f"fp32-{prec}", a.float(), b.float(), c, prec=prec)
        # (e) fp8 e4m3
        a = (r(M, K) * pw(-3, 3, M, K)).to(torch.float8_e4m3fn); b = r(K, N).to(torch.float8_e4m3fn)
        run("e4m3", a, b, (r(M, N)).float(), BK=32)
    torch.save(sets, path)
    print(len(sets), "sets")


def judge(path, out_json=None):
    import numoracle as no
    from numoracle import formats as F
    from numoracle.check import check
    from numoracle.formats import fp32, tf32
    from numoracle.selftest.emulator import tensor_core_dot

    @no.reference(outputs=("y",))
    def c_dot(a, b, c):
        return c + no.matmul(a, b, acc=fp32)

    @no.reference(outputs=("y",))
    def c_dot_tf32_acc(a, b, c):
        return c + no.matmul(a, b, acc=tf32)

    res = collections.defaultdict(collections.Counter)
    for s in torch.load(path, weights_only=False):
        a, b, c, y = s["a"], s["b"], s["c"], s["y"]
        name = s["name"].replace("torch.", "")
        r = res[name]
        r["elements"] += y.numel()
        if a.dtype in (torch.bfloat16, torch.float16):
            fa = F.from_dtype(a.dtype)
            em = tensor_core_dot(a.double(), b.double(), fa, fa, init=c.double())
        elif name == "fp32-tf32":
            at, bt = F.round(a.double(), tf32, "rtz"), F.round(b.double(), tf32, "rtz")
            em = tensor_core_dot(at, bt, tf32, tf32, init=c.double(), block=8)
        else:
            em = None
        if em is not None:
            r["emulated bit for bit"] += int((em == y.double()).sum())
        if name == "fp32-tf32":
            continue
        prog = c_dot_tf32_acc if name == "e4m3" else c_dot
        for mode in ("fixed", "statistical"):
            v = check(prog, y, (a, b, c), mode=mode, backend="gpu", profile="h200")
            r[f"GPU profile, {mode}: rejected elements"] += int(v.outputs[0].rejected.sum()) if v.status == "reject" else 0
    for k in sorted(res):
        print(k, dict(res[k]))
    if out_json:
        with open(out_json, "w") as fh:
            json.dump({k: dict(v) for k, v in sorted(res.items())}, fh, indent=1)
    bad = sum(v for k, r in res.items() if k != "e4m3" for m, v in r.items() if "rejected" in m)
    return 1 if bad else 0


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
