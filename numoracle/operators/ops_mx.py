"""Microscaling operators (docs/design.md §4.5): MXFP8, MXFP4 and NVFP4 quantizers and a
scaled matmul on MX operands, each with its reference program, our Triton kernels,
behaviour-preserving variants, faulty kernels, domain and example.

The quantizers' outputs are judged in two steps (NVFP4: three levels), conditioned on the
kernel's stored scales (``numoracle.oracles.quantizer``); packed fp4 codes are judged per
code, in the nibble order the reference names.  ``mx_quant_then_matmul`` is the
reference of the pipeline quantize → scaled matmul against the unquantized activations:
the quantizer's error, clamping included, enters the matmul as the quantizer site's
symbol (``no.quantize_mx(...).dequantized``).

Examples cycle the keyword parameters through the domain's choices by seed (element
format, scale rule, nibble order), scale some blocks by powers of two, zero or shrink one
per seed, and on every third seed plant a block of exact ties of the element grid (for
NVFP4 with a tensor amax of 2688, so that the tensor scale is 1 and the ties survive the
division).  ``torch_mx_quantize`` and ``torch_nvfp4_quantize`` are the quantizers written
in torch (the plans of the Triton kernels): they build the matmul's operands and serve as
the "expected" tensors of fixed-tolerance comparisons.
"""

from __future__ import annotations

import math

import torch

import numoracle as no
from numoracle import formats as F
from numoracle.formats import bf16, fp32
from numoracle.operators import Domain, Operator, _register
from numoracle.families import fill
from numoracle.calculus import quant_mx as QM

_K = "numoracle.operators.kernels."
_Q = _K + "mx_quant:"
_M = _K + "mx_matmul:"
MX_BLOCK = 32
NV_BLOCK = 16
ORDERS = ("low_first", "high_first")


# ---------------------------------------------------------------------------------- references

@no.reference(outputs=("codes", "scales"))   # fields of one object q: named here
def mxfp8_quantize(x, *, fmt="e4m3fn", scale_rule="floor", block_size=32):
    """MXFP8: x→fp32; per block of 32 an E8M0 scale 2^E (OCP "floor": E = floor(log2 amax) −
    emax, the largest elements clamp; "ceil": E = ceil(log2(amax/fmax))); codes RN-even of
    clamp(x / 2^E, ±fmax), saturating.  Outputs (codes, scales)."""
    q = no.quantize_mx(x.to(fp32), fmt, scale_rule, block=block_size)
    return q.codes, q.scales


@no.reference(outputs=("codes", "scales"))   # fields of one object q: named here
def mxfp4_quantize(x, *, scale_rule="floor", block_size=32, nibble_order="low_first"):
    """MXFP4: as MXFP8 with e2m1 codes (fmax 6, ties to even), stored two per byte in
    ``nibble_order``.  Outputs (packed codes, scales)."""
    q = no.quantize_mx(x.to(fp32), "e2m1", scale_rule, block=block_size, packed=nibble_order)
    return q.codes, q.scales


@no.reference(outputs=("codes", "scales", "tensor_scale"))   # fields of one object q: named here
def nvfp4_quantize(x, *, block_size=16, nibble_order="low_first", eps=1e-10):
    """NVFP4: ts = fl32(max(amax, eps)/2688); per block of 16 an e4m3 scale
    RN(clamp(fl32(fl32(amax/6)/ts), 2^-6, 448)); e2m1 codes RN-even of
    clamp(x / fl32(ts·S), ±6), packed in ``nibble_order``.  Outputs (codes, block scales,
    tensor scale)."""
    q = no.quantize_nvfp4(x.to(fp32), block=block_size, packed=nibble_order, eps=eps)
    return q.codes, q.scales, q.tensor_scale


def _mx_matmul(a1, b1, out, after=None):
    """Σ_k a1[m, k]·b1[n, k]: the dequantized operands rounded to bf16 (exact but below bf16's
    normals), products exact in fp32, any order of fp32 accumulation (every tiling, the
    scale applied before or after each 32-wide block's dot, split-K), one store rounding.
    ``after`` = (a, a_s, b, b_s, block): the codes and scales, whose scale-after-the-dot
    plan adds its own certificate sites (an intermediate dot·2^Ea can overflow where the
    result would not)."""
    acc = no.matmul(a1.to(bf16), b1.to(bf16).T, acc=fp32, order="any")
    if after is not None:
        acc = QM.after_dot_sites(acc, *after)
    return acc.to(out)


@no.reference
def mx_scaled_matmul(a, a_s, b, b_s, *, block_size=32, out="bf16"):
    """C = (a·2^a_s) @ (b·2^b_s)ᵀ on MX operands: a MXFP8 [M, K], b MXFP8 [N, K] or MXFP4
    (packed along K), E8M0 scales per 32 values of K."""
    return _mx_matmul(no.dequantize(a, a_s, block_size), no.dequantize(b, b_s, block_size), out,
                      after=(a, a_s, b, b_s, block_size))


@no.reference
def mx_quant_then_matmul(x, b, b_s, *, fmt="e4m3fn", scale_rule="floor", block_size=32, out="bf16"):
    """The pipeline mxfp8_quantize(x) → mx_scaled_matmul against the unquantized x: x's
    quantization error (clamping included) enters as the quantizer site's symbol."""
    xq = no.quantize_mx(x.to(fp32), fmt, scale_rule, block=block_size).dequantized
    return _mx_matmul(xq, no.dequantize(b, b_s, block_size), out)


# ---------------------------------------------------------------------------------- torch quantizers

def _e8m0(E: torch.Tensor) -> torch.Tensor:
    return (E.to(torch.int64) + 127).to(torch.uint8).view(torch.float8_e8m0fnu)


def torch_mx_quantize(x: torch.Tensor, fmt="e4m3fn", scale_rule="floor", block_size=32, nibble_order="low_first"):
    """(codes, E8M0 scales) of x by the Triton kernels' plan, in torch: the exponent from
    the bits of amax (floor) or of the fp32 quotient amax/fmax (ceil), y / 2^E in fp32,
    codes rounded once (RN-even, saturating); e2m1 codes packed in ``nibble_order``."""
    f = F.by_name(fmt)
    xf = x.float().reshape(*x.shape[:-1], -1, block_size)
    amax = xf.abs().amax(-1)
    if scale_rule == "floor":
        _, e = torch.frexp(amax.double().clamp(min=2.0 ** (f.emax - 127)))
        E = (e - 1 - f.emax).double()
    else:
        d = (amax / f.max_finite).double().clamp(min=2.0 ** -127)    # the fp32 quotient
        m, e = torch.frexp(d)
        E = torch.where(m == 0.5, e - 1, e).double()
    E = E.clamp(-127, 127)
    t = (xf / torch.exp2(E).float()[..., None]).double().clamp(-f.max_finite, f.max_finite)
    codes = F.round(t, f, "rne", "saturate").reshape(x.shape)
    layout = F.Packed(f, nibble_order) if f.bits == 4 else f
    return F.encode(codes, layout), _e8m0(E)


def torch_nvfp4_quantize(x: torch.Tensor, block_size=16, nibble_order="low_first", eps=1e-10):
    """(packed codes, e4m3 block scales, fp32 tensor scale (1,)) of x by the Triton
    kernel's plan, in torch."""
    xf = x.float()
    ts = (xf.abs().max().clamp(min=torch.tensor(eps, dtype=torch.float32)) / 2688.0).reshape(1)
    xb = xf.reshape(*x.shape[:-1], -1, block_size)
    r = (xb.abs().amax(-1) / 6.0) / ts
    s = r.clamp(2.0 ** -6, 448.0).to(torch.float8_e4m3fn)
    t = (xb / (ts * s.float())[..., None]).clamp(-6, 6).double()
    codes = F.round(t, F.e2m1, "rne", "saturate").reshape(x.shape)
    return F.encode(codes, F.Packed(F.e2m1, nibble_order)), s, ts


# ---------------------------------------------------------------------------------- examples

def _choose(seed: int, choices, k: int = 1):
    return choices[(seed // k) % len(choices)]


def _grid_ties(fmt: F.Format) -> torch.Tensor:
    """The positive values of fmt's grid up to fmax and the ties between neighbours."""
    v = F.from_bits(torch.arange(1 << fmt.bits), fmt)
    v = torch.unique(v[torch.isfinite(v) & (v >= 0)])
    return torch.cat([v, (v[:-1] + v[1:]) / 2])


def _shift_blocks(x: torch.Tensor, block: int, seed: int, fmt: F.Format, anchor=None) -> torch.Tensor:
    """Block scale patterns: a quarter of the blocks scaled by 2^j (j in [-20, 8]), one block
    per seed zeroed or scaled by 2^-30; on every third seed one block holds fmax·2^k and
    exact ties of fmt's grid times 2^k (its scale is 2^k under both MX rules), or for NVFP4
    (``anchor``) the values 6 and the e2m1 ties, with 2688 elsewhere (tensor scale 1)."""
    g = torch.Generator().manual_seed(int(seed) + 77)
    rows, cols = x.shape
    n = cols // block
    xf = x.to(torch.float64).reshape(rows, n, block)
    factor = torch.exp2(torch.randint(-20, 9, (rows, n), generator=g).to(torch.float64))
    factor = torch.where(torch.rand((rows, n), generator=g) < 0.25, factor, torch.ones_like(factor))
    r, c = int(torch.randint(0, rows, (1,), generator=g)), int(torch.randint(0, n, (1,), generator=g))
    factor[r, c] = (0.0, 2.0 ** -30, 1.0)[seed % 3]
    lim = torch.finfo(x.dtype).max / 4
    xf = (xf * factor[..., None]).clamp(-lim, lim)
    if seed % 3 == 0 and n >= 2:
        ties = _grid_ties(fmt)
        # 2^k keeps fmax·2^k inside the input format's range (e5m2's 57344 in fp16: k <= -2)
        k_top = min(3, math.floor(math.log2(lim / fmt.max_finite)))
        k = 0 if anchor is not None else int(torch.randint(-6, k_top + 1, (1,), generator=g))
        vals = torch.cat([torch.tensor([fmt.max_finite]), ties])
        sign = torch.where(torch.rand(block, generator=g) < 0.5, -1.0, 1.0).to(torch.float64)
        pick = vals[torch.randint(0, vals.numel(), (block,), generator=g)]
        pick[0] = fmt.max_finite
        tb = (r, (c + 1) % n)
        xf[tb[0], tb[1]] = sign * pick * 2.0 ** k
        if anchor is not None:
            other = (tb[0], (tb[1] + 1) % n)
            xf[other[0], other[1], 0] = anchor
    return xf.reshape(rows, cols).to(x.dtype)


def _ex_mxfp8(seed, dtype, family, rows, cols):
    fmt = _choose(seed, ("e4m3fn", "e5m2"))
    x = _shift_blocks(fill((rows, cols), family, seed, dtype=dtype), MX_BLOCK, seed, F.by_name(fmt))
    return (x,), {"fmt": fmt, "scale_rule": _choose(seed, ("floor", "ceil"), 2)}


def _ex_mxfp4(seed, dtype, family, rows, cols):
    x = _shift_blocks(fill((rows, cols), family, seed, dtype=dtype), MX_BLOCK, seed, F.e2m1)
    return (x,), {"scale_rule": _choose(seed, ("floor", "ceil")), "nibble_order": _choose(seed, ORDERS, 2)}


def _ex_nvfp4(seed, dtype, family, rows, cols):
    x = _shift_blocks(fill((rows, cols), family, seed, dtype=dtype), NV_BLOCK, seed, F.e2m1, anchor=2688.0)
    return (x,), {"nibble_order": _choose(seed, ORDERS)}


_OUT = {torch.bfloat16: "bf16", torch.float16: "fp16", torch.float32: "fp32"}
MATMUL_FORMATS = (("e4m3fn", "e4m3fn"), ("e4m3fn", "e2m1"), ("e5m2", "e5m2"), ("e5m2", "e2m1"))


def mx_operands(seed, family, rows, cols, n, formats):
    """(a, a_s, b, b_s): MX operands quantized by ``torch_mx_quantize`` (floor rule) from
    ``family`` (a, with block shifts) and normal values (b [n, cols]); MXFP4 b as
    float4_e2m1fn_x2."""
    fa, fb = formats
    a = _shift_blocks(fill((rows, cols), family, seed, dtype=torch.float32), MX_BLOCK, seed, F.by_name(fa))
    a, a_s = torch_mx_quantize(a, fa)
    b, b_s = torch_mx_quantize(fill((n, cols), "normal", seed + 1, dtype=torch.float32), fb)
    if fb == "e2m1":
        b = b.view(torch.float4_e2m1fn_x2)
    return a, a_s, b, b_s


def _ex_matmul(seed, dtype, family, rows, cols):
    n = (16, 24, 40)[(seed // 4) % 3]
    return mx_operands(seed, family, rows, cols, n, _choose(seed, MATMUL_FORMATS)), {"out": _OUT.get(dtype, "bf16")}


def example_pipeline(seed, dtype=torch.bfloat16, family="normal", rows=4, cols=128):
    """(x, b, b_s), params for ``mx_quant_then_matmul``."""
    n = (16, 24, 40)[(seed // 4) % 3]
    fb = _choose(seed, ("e4m3fn", "e2m1"))
    x = fill((rows, cols), family, seed, dtype=dtype)
    b, b_s = torch_mx_quantize(fill((n, cols), "normal", seed + 1, dtype=torch.float32), fb)
    if fb == "e2m1":
        b = b.view(torch.float4_e2m1fn_x2)
    return (x, b, b_s), {"fmt": _choose(seed, ("e4m3fn", "e5m2"), 2), "scale_rule": _choose(seed, ("floor", "ceil"), 4),
                         "out": _OUT.get(dtype, "bf16")}


# ---------------------------------------------------------------------------------- registry

_register(Operator(
    "mxfp8_quantize", mxfp8_quantize,
    {"correct": _Q + "mxfp8_quant", "tiles": _Q + "mxfp8_quant_tiles", "rows": _Q + "mxfp8_quant_rows",
     "log2": _Q + "mxfp8_quant_log2"},
    _ex_mxfp8,
    domain=Domain(rows=(1, 64), cols=(32, 4096), cols_multiple_of=MX_BLOCK, formats=("bf16", "fp16", "fp32"),
                  params={"fmt": ("e4m3fn", "e5m2"), "scale_rule": ("floor", "ceil")}),
    faulty={"wrong_rounding": _Q + "mxfp8_quant_wrong_rounding",
            "nan_on_overflow": _Q + "mxfp8_quant_nan_on_overflow",
            "block64": _Q + "mxfp8_quant_block64"}, source='ocp_mx'))

_register(Operator(
    "mxfp4_quantize", mxfp4_quantize,
    {"correct": _Q + "mxfp4_quant", "split": _Q + "mxfp4_quant_split", "rows": _Q + "mxfp4_quant_rows",
     "log2": _Q + "mxfp4_quant_log2"},
    _ex_mxfp4,
    domain=Domain(rows=(1, 64), cols=(32, 4096), cols_multiple_of=MX_BLOCK, formats=("bf16", "fp16", "fp32"),
                  params={"scale_rule": ("floor", "ceil"), "nibble_order": ORDERS}),
    faulty={"ties_away": _Q + "mxfp4_quant_ties_away", "nibble_swapped": _Q + "mxfp4_quant_nibble_swapped",
            "wrong_rounding": _Q + "mxfp4_quant_wrong_rounding", "block64": _Q + "mxfp4_quant_block64"}, source='ocp_mx'))

_register(Operator(
    "nvfp4_quantize", nvfp4_quantize,
    {"correct": _Q + "nvfp4_quant", "tiles": _Q + "nvfp4_quant_tiles", "rows": _Q + "nvfp4_quant_rows"},
    _ex_nvfp4,
    domain=Domain(rows=(1, 64), cols=(16, 4096), cols_multiple_of=NV_BLOCK, formats=("bf16", "fp16", "fp32"),
                  params={"nibble_order": ORDERS}),
    faulty={"tensor_scale_twice": _Q + "nvfp4_quant_tensor_scale_twice",
            "tensor_scale_dropped": _Q + "nvfp4_quant_tensor_scale_dropped",
            "ties_away": _Q + "nvfp4_quant_ties_away", "nibble_swapped": _Q + "nvfp4_quant_nibble_swapped",
            "scale_truncated": _Q + "nvfp4_quant_scale_truncated", "block32": _Q + "nvfp4_quant_block32"}, source='nvfp4'))

_register(Operator(
    "mx_scaled_matmul", mx_scaled_matmul,
    {"correct": _M + "mx_matmul", "wide_tiles": _M + "mx_matmul_wide_tiles",
     "scale_after_dot": _M + "mx_matmul_scale_after_dot", "split_k": _M + "mx_matmul_split_k",
     "dot_scaled": _M + "mx_matmul_dot_scaled"},
    _ex_matmul,
    domain=Domain(rows=(1, 64), cols=(32, 4096), cols_multiple_of=MX_BLOCK, formats=("bf16", "fp16", "fp32"),
                  params={"out": ("bf16", "fp16", "fp32")}),
    faulty={"scale_block64": _M + "mx_matmul_scale_block64", "nibble_swapped": _M + "mx_matmul_nibble_swapped",
            "scale_bias": _M + "mx_matmul_scale_bias"}, source='ocp_mx'))

__all__ = ["mxfp8_quantize", "mxfp4_quantize", "nvfp4_quantize", "mx_scaled_matmul", "mx_quant_then_matmul",
           "torch_mx_quantize", "torch_nvfp4_quantize", "mx_operands", "example_pipeline", "MATMUL_FORMATS"]
