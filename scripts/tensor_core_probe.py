"""How does a tensor-core ``tl.dot`` accumulate in fp32?  (docs/design.md §4.4)

    python scripts/tensor_core_probe.py measure OUT.pt              # on a GPU: run the dots, save raw data
    python scripts/tensor_core_probe.py judge OUT.pt [--json F]     # anywhere: emulate and judge them
    python scripts/tensor_core_probe.py measure-edges OUT.pt        # on a GPU: zeros, subnormals, FMAs, TF32, fp8
    python scripts/tensor_core_probe.py judge-edges OUT.pt [--json F]
    python scripts/tensor_core_probe.py measure-tf32 OUT.pt         # on a GPU: TF32 dots, long and subnormal
    python scripts/tensor_core_probe.py judge-tf32 OUT.pt [--json F]
    python scripts/tensor_core_probe.py measure-x3 OUT.pt           # on a GPU: the split precisions
    python scripts/tensor_core_probe.py judge-x3 OUT.pt [--json F]

``measure`` runs one Triton kernel over bf16 and fp16 operands, tiles of 16 rows (mma v2) and 64
rows (wgmma), K from 1 to 64, three accumulator starts (zeros; the bias loaded into the
accumulator; ``tl.dot(a, b) + bias``, which Triton folds into the dot where K = 1), four input
kinds (normal, operands spread over 2^±10 and so with fp16 subnormals, a bias that cancels the
dot, products cancelling in pairs), and saves a, b, the bias and the fp32 results (tensors only).
``judge`` prints, per group, how many results ``emulator.tensor_core_dot`` reproduces bit for bit
and how many elements the GPU profile's and the interpreter profile's regions reject in each mode
(the round-to-nearest model rejects many; the tensor-core model must reject none).

``measure-edges``: ``acc = c; acc = tl.dot(a, b, acc, input_precision=P)`` over 64x64 outputs,
K = 2..32: bf16 and fp16 operands with 30% zeros beside 2^12-times larger partners, subnormal
operands beside normal ones, subnormals times large partners; fp32 operands with P = "tf32" and
"ieee"; e4m3.  ``judge-edges``: the results the emulated instruction reproduces (16-bit; TF32 with
the operands truncated, 8 products per instruction), and the elements the GPU profile rejects
against ``c + no.matmul(a, b)`` (fp8: ``acc=tf32``; TF32: ``input_precision="tf32"``).

``measure-tf32``: the same kernel with P = "tf32" on fp32 operands, wgmma and mma v2 tiles: mixed
terms over 2^±6 from a bias, and positive terms from zero (K = 8..4096), and subnormal fp32 operands
times 2^100 partners.  ``judge-tf32``: how many results the emulated instruction on the truncated
operands reproduces (for subnormals also with them flushed), and the elements that
``c + no.matmul(a, b, input_precision="tf32")`` rejects under the GPU profile (and, to compare,
``.to(tf32)``'s round-to-nearest operands and plain fp32 operands); also reads measure-edges'
"fp32-tf32" sets.

``measure-x3``: one set of fp32 inputs per (kind, K) -- mixed, positive, wide-exponent (2^+-40),
cancelling, subnormal beside 2^100 partners, infinite -- run with P = "tf32", "tf32x3", "bf16x3" and
"bf16x6" on wgmma (BK 32) and mma v2 (BK 16) tiles; saves the inputs once, every result, and each
precision's TTIR and TTGIR.  ``judge-x3``: the results the emulation reproduces (``split_dot`` with
the kernel's BK for the splits) and the elements each precision's reference rejects.

Each judge exits 1 if the emulation misses a result or the GPU profile rejects one (fp8 aside;
judge-tf32: rejects only, as the subnormal operands' treatment is what it measures)."""

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


@triton.jit
def edges_kernel(a_ptr, b_ptr, c_ptr, y_ptr, M, N, K, PREC: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
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


def _rejected(v) -> int:
    """Elements a verdict rejects (0 for an accept or an uncertified verdict)."""
    return int(v.outputs[0].rejected.sum()) if v.status == "reject" else 0


def _report(res, out_json, meta=None):
    """Print each group's counts and write them to ``out_json``: under "groups" beside the device
    and Triton version where ``meta`` has them, else (measure-edges' files) as they are."""
    if meta is not None:
        print("measured on", meta.get("device"), "Triton", meta.get("triton"))
    for k in sorted(res):
        print(k, dict(res[k]))
    if out_json:
        groups = {k: dict(v) for k, v in sorted(res.items())}
        with open(out_json, "w") as fh:
            json.dump(groups if meta is None else {"device": meta.get("device"), "triton": meta.get("triton"),
                                                   "groups": groups}, fh, indent=1)


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
                r[f"{prof} profile, {mode}: rejected elements"] += _rejected(v)
                r[f"{prof} profile, {mode}: uncertified verdicts"] += v.status == "uncertified"
    _report(res, out_json, data)
    bad = sum(r[f"h200 profile, {m}: rejected elements"] for r in res.values() for m in ("fixed", "statistical"))
    miss = sum(r["elements"] - r["emulated bit for bit"] for r in res.values())
    return 1 if bad or miss else 0


def measure_edges(path):
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
        ck = edges_kernel[(triton.cdiv(M, BM), triton.cdiv(N, 64))](a.cuda(), b.cuda(), c.cuda(), y, M, N, K, PREC=prec, BM=BM, BN=64, BK=BK)
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


def judge_edges(path, out_json=None):
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

    @no.reference(outputs=("y",))
    def c_dot_tf32_operands(a, b, c):
        return c + no.matmul(a, b, acc=fp32, input_precision="tf32")

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
        prog = {"e4m3": c_dot_tf32_acc, "fp32-tf32": c_dot_tf32_operands}.get(name, c_dot)
        for mode in ("fixed", "statistical"):
            v = check(prog, y, (a, b, c), mode=mode, backend="gpu", profile="h200")
            r[f"GPU profile, {mode}: rejected elements"] += _rejected(v)
    _report(res, out_json)
    bad = sum(v for k, r in res.items() if k != "e4m3" for m, v in r.items() if "rejected" in m)
    miss = sum(r["elements"] - r["emulated bit for bit"] for r in res.values() if "emulated bit for bit" in r)
    return 1 if bad or miss else 0


def measure_tf32(path):
    """fp32 operands with inputPrecision="tf32": long dots (K up to 4096) of mixed and of positive
    terms, and subnormal fp32 operands beside large partners (kept or flushed?)."""
    g = torch.Generator().manual_seed(3)
    sets = []
    M = N = 64

    def run(name, a, b, c, BM, BK):
        y = torch.empty(M, N, dtype=torch.float32, device="cuda")
        K = a.shape[1]
        ck = edges_kernel[(triton.cdiv(M, BM), triton.cdiv(N, BM))](a.cuda(), b.cuda(), c.cuda(), y, M, N, K,
                                                                   PREC="tf32", BM=BM, BN=BM, BK=BK)
        ttgir = ck.asm.get("ttgir", "")
        mma = "v3" if "versionMajor = 3" in ttgir else ("v2" if "versionMajor = 2" in ttgir else "fma")
        sets.append({"name": name, "mma": mma, "a": a, "b": b, "c": c, "y": y.cpu()})
        print(name, mma, K, flush=True)

    r = lambda *s: torch.randn(*s, generator=g, dtype=torch.float64)
    for BM, BK in ((64, 32), (16, 16)):
        for K in (8, 64, 256, 1024, 4096):
            a = (r(M, K) * torch.exp2(torch.randint(-6, 7, (M, K), generator=g).double())).float()
            run("mixed", a, r(K, N).float(), (r(M, N) * 4).float(), BM, BK)
            run("positive", r(M, K).abs().float(), r(K, N).abs().float(), torch.zeros(M, N), BM, BK)
        for K in (8, 64):
            sub = r(M, K) * torch.exp2(torch.randint(-149, -126, (M, K), generator=g).double())
            a = torch.where(torch.rand(M, K, generator=g) < 0.5, sub, r(M, K) * 2.0 ** -100).float()
            run("subnormal", a, (r(K, N) * 2.0 ** 100).float(), torch.zeros(M, N), BM, BK)
    torch.save({"device": torch.cuda.get_device_name(0), "triton": triton.__version__, "sets": sets}, path)
    print(len(sets), "sets")


def judge_tf32(path, out_json=None):
    import numoracle as no
    from numoracle import formats as F
    from numoracle.check import check
    from numoracle.formats import fp32, tf32
    from numoracle.selftest.emulator import tensor_core_dot

    @no.reference(outputs=("y",))
    def tf32_operands(a, b, c):
        return c + no.matmul(a, b, acc=fp32, input_precision="tf32")

    @no.reference(outputs=("y",))
    def to_tf32(a, b, c):
        return c + no.matmul(a.to(tf32), b.to(tf32), acc=fp32)

    @no.reference(outputs=("y",))
    def fp32_operands(a, b, c):
        return c + no.matmul(a, b, acc=fp32)

    data = torch.load(path, weights_only=False)
    res = collections.defaultdict(collections.Counter)
    sets = data["sets"] if isinstance(data, dict) else data      # measure-edges saved a list
    for s in sets:
        a, b, c, y = s["a"], s["b"], s["c"], s["y"]
        if a.dtype != torch.float32 or s.get("prec", "tf32") != "tf32":
            continue                                                # measure-edges' other sets
        r = res[f'{s["name"]} {s["mma"]} K={a.shape[1]}']
        r["elements"] += y.numel()
        t = lambda x: F.round(x.double(), tf32, "rtz")
        em = tensor_core_dot(t(a), t(b), tf32, tf32, init=c.double(), block=8)
        r["emulated bit for bit (truncated operands)"] += int((em == y.double()).sum())
        if s["name"] == "subnormal":
            flush = lambda x: torch.where(x.abs() < 2.0 ** -126, torch.zeros_like(x), x)
            emf = tensor_core_dot(flush(t(a)), flush(t(b)), tf32, tf32, init=c.double(), block=8)
            r["emulated bit for bit (subnormals flushed)"] += int((emf == y.double()).sum())
        for mode in ("fixed", "statistical"):
            v = check(tf32_operands, y, (a, b, c), mode=mode, backend="gpu", profile="h200")
            r[f"input_precision=tf32, {mode}: rejected elements"] += _rejected(v)
            r[f"input_precision=tf32, {mode}: uncertified verdicts"] += v.status == "uncertified"
        for name, prog in ((".to(tf32)", to_tf32), ("fp32 operands", fp32_operands)):
            v = check(prog, y, (a, b, c), mode="fixed", backend="gpu", profile="h200")
            r[f"{name}, fixed: rejected elements"] += _rejected(v)
    _report(res, out_json, data if isinstance(data, dict) else {})
    bad = sum(v for r in res.values() for m, v in r.items() if m.startswith("input_precision") and "rejected" in m)
    return 1 if bad else 0


def measure_x3(path):
    """fp32 operands with the split precisions (tf32x3; bf16x3 and bf16x6 where this Triton has
    them) beside plain tf32, on one set of inputs per (kind, K): ``acc = c; acc = tl.dot(a, b,
    acc, input_precision=P)`` over 64x64 outputs, wgmma tiles (BK 32, and 8) and mma v2 tiles (BK
    16).  Kinds: mixed terms over 2^+-6 beside a bias, positive terms from zero, operands over
    2^+-40, a bias that cancels the dot, subnormal operands beside 2^100 partners, infinite
    operands.  Saves the inputs once, every result, and each precision's TTIR and TTGIR."""
    g = torch.Generator().manual_seed(4)
    r = lambda *s: torch.randn(*s, generator=g, dtype=torch.float64)
    pw = lambda lo, hi, *s: torch.exp2(torch.randint(lo, hi, s, generator=g).double())
    M = N = 64
    inputs = []
    for K in (8, 16, 64, 256, 1024, 4096):
        inputs.append(("mixed", (r(M, K) * pw(-6, 7, M, K)).float(), r(K, N).float(), (r(M, N) * 4).float()))
        inputs.append(("positive", r(M, K).abs().float(), r(K, N).abs().float(), torch.zeros(M, N)))
        if K > 1024:
            continue
        inputs.append(("wide", (r(M, K) * pw(-40, 41, M, K)).float(), (r(K, N) * pw(-40, 41, K, N)).float(),
                       torch.zeros(M, N)))
        a, b = r(M, K).float(), r(K, N).float()
        ab = a.double() @ b.double()
        inputs.append(("cancel", a, b, (-ab * (1 + r(M, N) * 2.0 ** -12)).float()))
        if K <= 64:
            sub = r(M, K) * pw(-149, -126, M, K)
            a = torch.where(torch.rand(M, K, generator=g) < 0.5, sub, r(M, K) * 2.0 ** -100).float()
            inputs.append(("subnormal", a, (r(K, N) * 2.0 ** 100).float(), torch.zeros(M, N)))
            a = r(M, K)
            a[torch.rand(M, K, generator=g) < 0.02] = float("inf")
            inputs.append(("inf", a.float(), r(K, N).float(), r(M, N).float()))
    precs = ["tf32", "tf32x3", "bf16x3", "bf16x6"]
    results, asm = [], {}
    for prec in list(precs):
        for BM, BK in ((64, 32), (64, 8), (16, 16)):
            for i, (kind, a, b, c) in enumerate(inputs):
                K = a.shape[1]
                if BK == 8 and K > 256:
                    continue
                y = torch.empty(M, N, dtype=torch.float32, device="cuda")
                try:
                    ck = edges_kernel[(triton.cdiv(M, BM), triton.cdiv(N, BM))](
                        a.cuda(), b.cuda(), c.cuda(), y, M, N, K, PREC=prec, BM=BM, BN=BM, BK=BK)
                except Exception as e:                       # a precision this Triton lacks
                    print(prec, BM, BK, "failed:", str(e).splitlines()[0][:200], flush=True)
                    asm.setdefault(f"{prec} error", str(e)[:2000])
                    break
                ttgir = ck.asm.get("ttgir", "")
                mma = "v3" if "versionMajor = 3" in ttgir else ("v2" if "versionMajor = 2" in ttgir else "fma")
                asm.setdefault(f"{prec} BM{BM} BK{BK} ttir", ck.asm.get("ttir", ""))
                asm.setdefault(f"{prec} BM{BM} BK{BK} ttgir", ttgir)
                results.append({"input": i, "prec": prec, "BM": BM, "BK": BK, "mma": mma, "y": y.cpu()})
            print(prec, BM, BK, "done", flush=True)
    meta = {"device": torch.cuda.get_device_name(0), "triton": triton.__version__}
    torch.save({**meta, "inputs": inputs, "results": results}, path)
    with open(path + ".asm.json", "w") as fh:
        json.dump({**meta, "asm": asm}, fh)
    print(len(inputs), "inputs,", len(results), "results from", meta)


def judge_x3(path, out_json=None):
    """measure-x3's results: per (precision, kind, tile) how many the emulation reproduces bit for
    bit (tf32: the truncated operands' dot; the splits: ``emulator.split_dot`` with the kernel's BK;
    NaN counted equal to NaN), and the elements ``c + no.matmul(a, b, input_precision=P)`` rejects
    under the GPU profile, in both modes, beside the other precisions' references."""
    import numoracle as no
    from numoracle import formats as F
    from numoracle.check import check
    from numoracle.formats import fp32, tf32
    from numoracle.calculus.ops import SPLITS
    from numoracle.selftest.emulator import split_dot, tensor_core_dot

    def ref(prec):
        @no.reference(outputs=("y",))
        def c_dot(a, b, c):
            return c + no.matmul(a, b, acc=fp32, input_precision=prec)
        return c_dot
    refs = {p: ref(p) for p in ("ieee", "tf32") + tuple(SPLITS)}
    data = torch.load(path, weights_only=False)
    res = collections.defaultdict(collections.Counter)
    for s in data["results"]:
        kind, a, b, c = data["inputs"][s["input"]]
        y, prec = s["y"], s["prec"]
        r = res[f'{prec} {kind} {s["mma"]} BK={s["BK"]}']
        r["elements"] += y.numel()
        A, B, C = a.double(), b.double(), c.double()
        if prec == "tf32":
            t = lambda x: F.round(x, tf32, "rtz")
            em = tensor_core_dot(t(A), t(B), tf32, tf32, init=C, block=8)
        elif prec in SPLITS:
            em = split_dot(A, B, SPLITS[prec], init=C, bk=s["BK"])
        else:
            em = None
        if em is not None:
            same = (em == y.double()) | (torch.isnan(em) & torch.isnan(y))
            r["emulated bit for bit"] += int(same.sum())
        # infinite operands: the elements they reach are uncertified, the others judged
        kw = {} if bool(torch.isfinite(a).all()) else {"nonfinite": "uncertified"}
        for p, prog in refs.items():
            for mode in (("fixed", "statistical") if p == prec else ("fixed",)):
                v = check(prog, y, (a, b, c), mode=mode, backend="gpu", profile="h200", **kw)
                r[f"reference {p}, {mode}: rejected elements"] += _rejected(v)
                if p == prec:
                    r[f"reference {p}, {mode}: uncertified verdicts"] += v.status == "uncertified"
    _report(res, out_json, data)
    bad = sum(v for k, r in res.items() for m, v in r.items()
              if m.startswith(f"reference {k.split()[0]},") and "rejected" in m)
    miss = sum(r["elements"] - r["emulated bit for bit"] for r in res.values() if "emulated bit for bit" in r)
    return 1 if bad or miss else 0


if __name__ == "__main__":
    COMMANDS = {"measure": measure, "judge": judge, "measure-edges": measure_edges, "judge-edges": judge_edges,
                "measure-tf32": measure_tf32, "judge-tf32": judge_tf32,
                "measure-x3": measure_x3, "judge-x3": judge_x3}
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("what", choices=tuple(COMMANDS))
    ap.add_argument("path")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    if args.what.startswith("measure"):
        COMMANDS[args.what](args.path)
    else:
        sys.exit(COMMANDS[args.what](args.path, args.json))
