"""vLLM's operators (docs/operators.md rows 12-13): ``per_token_group_quant_fp8`` and
``w8a8_block_fp8_matmul``, each with its reference program, correct kernel, behaviour-preserving
variants, domain, example inputs and the faulty kernels of change pairs 13-16 (plus a truncating
fp8 store, a row-0 scale broadcast and a wrong scale-block index).

The quantizer's outputs (codes, scales) are judged in two steps (docs/design.md §4.5,
``numoracle.oracles.quantizer``). ``group_quant_then_block_fp8_matmul`` is the reference of the
pipeline quantize → block matmul against the unquantized activations: the quantizer's error
enters the matmul as the quantizer site's symbol (``no.quantize_group(...).dequantized``).

Examples cycle the keyword parameters through the domain's choices by seed, so a sweep over
consecutive seeds covers every choice. CI shapes use small groups (16/32/64); the real vLLM
sizes (128, and 128×128 weight blocks) are the first choices, for GPU-sized runs.

e4m3fnuz (``fmt="e4m3fnuz"``, fmax 224) is a parameter of the quantizer but not in its domain:
the Triton interpreter stores tl.float8e4b8 with ties away from zero and Triton's NVIDIA backend
does not compile it (``kernels.group_quant_fp8.fnuz_supported`` says where it can run).
"""

from __future__ import annotations

import torch

import numoracle as no
from numoracle.calculus.quant import block_scaled_matmul
from numoracle.formats import fp32
from numoracle.operators import Domain, Operator, _register
from numoracle.families import fill

_K = "numoracle.operators.kernels."
_Q = _K + "group_quant_fp8:"
_M = _K + "block_fp8_matmul:"
GROUP_SIZES = (128, 64, 32, 16)


# ---------------------------------------------------------------------------------- references

@no.reference(outputs=("q", "scales"))
def per_token_group_quant_fp8(x, *, group_size=128, ue8m0=False, column_major_scales=False,
                              fmt="e4m3fn", eps=1e-10):
    """vLLM per-token-group fp8 quantization: x→fp32; per group scale = max(amax, eps)/fmax in
    fp32 (UE8M0: 2^ceil(log2(max(amax/fmax, eps)))); codes RN-even(clamp(x/scale, ±fmax)).
    Outputs (codes, scales); the scales' memory layout (column-major) does not change values."""
    q = no.quantize_group(x.to(fp32), group_size, fmt, "ue8m0" if ue8m0 else "fp32", eps=eps)
    return q.codes, q.scales


def _scaled_operand(vals, scales, group_rows, group_k):
    """vals [R, K] (fp32) times its block scale (scales [ceil(R/group_rows), K/group_k]), one fp32
    rounding per element."""
    R, K = vals.shape
    rows = torch.arange(R, device=vals.c.device) // group_rows
    cols = torch.arange(K, device=vals.c.device) // group_k
    return vals * scales[rows[:, None], cols[None, :]]


def _block_scaled_matmul(a1, b1, out, dot_acc):
    """Σ_k a1[m, k]·b1[n, k] with every product passing at most K + 2 fp32 roundings in any
    order: this encloses every tiling of the kernel's K loop (BLOCK_K any divisor of group_k,
    each tile's dot accumulated in fp32, scaled by a_scale then b_scale, tiles summed in any
    order, split-K, the last multiply-add fused or not): a tile of T columns costs each product
    (T-1) + 2 + (K/T - 1) <= K + 1 roundings, each bounded by u·Σ|products|."""
    return no.matmul(a1, b1.T, acc=dot_acc, order="any").to(out)


@no.reference
def w8a8_block_fp8_matmul(a, b, a_s, b_s, *, group_n=128, group_k=128, out="bf16", dot_acc="fp32"):
    """vLLM block fp8 matmul: C = (a·a_s) @ (b·b_s)ᵀ in the kernel's order: per K tile the dot of
    the e4m3 codes (products exact in fp32, fp32 accumulation), × a_scale, × b_scale (an fp32
    rounding each), added to the fp32 accumulator; one store rounding to ``out``.  Every K tile
    width the kernel may take (a divisor of group_k of at least 32) and split-K are covered, and
    the certificate covers each intermediate (``dot × a_scale`` can overflow where the product
    with b_scale would not).  ``dot_acc="tf32"`` is a conservative model of fp8 tensor cores that
    accumulate with fewer than 24 bits (Hopper's fp8 wgmma)."""
    c = block_scaled_matmul(a, b, a_s, b_s, group_n=group_n, group_k=group_k, acc=dot_acc)
    return c.to(out)


@no.reference
def group_quant_then_block_fp8_matmul(x, b, b_s, *, group_n=128, group_k=128, out="bf16",
                                      ue8m0=False, dot_acc="fp32"):
    """The pipeline per_token_group_quant_fp8(x) → w8a8_block_fp8_matmul against the
    unquantized x: x's quantization error (per element, bounded through its group's admissible
    scales) enters as the quantizer site's symbol, shared by every output that uses the group."""
    xq = no.quantize_group(x.to(fp32), group_k, "e4m3fn", "ue8m0" if ue8m0 else "fp32").dequantized
    a1 = xq._round(fp32, "fp32 rounding of the A-scaled tile dot (on the operand)")
    b1 = _scaled_operand(b.to(fp32), b_s, group_n, group_k)
    return _block_scaled_matmul(a1, b1, out, dot_acc)


# ---------------------------------------------------------------------------------- examples

def _choose(seed: int, choices, k: int):
    return choices[(seed // k) % len(choices)]


def _group_for(cols: int, seed: int) -> int:
    fits = [g for g in GROUP_SIZES if cols % g == 0 and cols // g >= 2] or \
           [g for g in GROUP_SIZES if cols % g == 0]
    if not fits:
        raise ValueError(f"cols={cols} is not a multiple of any group size {GROUP_SIZES}; use a multiple of 16")
    return fits[seed % len(fits)]


def _shift_groups(x: torch.Tensor, group: int, seed: int) -> torch.Tensor:
    """Scale patterns that reach the scale floor and the fp8 subnormals: per seed, one group is
    zeroed, scaled by 2^-30 (amax/fmax below eps) or left; a few others get 2^j, j in [-20, 8]."""
    g = torch.Generator().manual_seed(int(seed) + 99)
    rows, cols = x.shape
    n = cols // group
    xf = x.to(torch.float64).reshape(rows, n, group)
    factor = torch.exp2(torch.randint(-20, 9, (rows, n), generator=g).to(torch.float64))
    factor = torch.where(torch.rand((rows, n), generator=g) < 0.25, factor, torch.ones_like(factor))
    r, c = int(torch.randint(0, rows, (1,), generator=g)), int(torch.randint(0, n, (1,), generator=g))
    factor[r, c] = (0.0, 2.0 ** -30, 1.0)[seed % 3]
    lim = torch.finfo(x.dtype).max / 4          # stay finite in the input format, as fill() does
    return (xf * factor[..., None]).reshape(rows, cols).clamp(-lim, lim).to(x.dtype)


def _ex_quant(seed, dtype, family, rows, cols):
    group = _group_for(cols, seed)
    x = _shift_groups(fill((rows, cols), family, seed, dtype=dtype), group, seed)
    params = {"group_size": group, "ue8m0": bool(_choose(seed, (False, True), 1)),
              "column_major_scales": bool(_choose(seed, (False, True), 2))}
    return (x,), params


def quantize_blocks(v: torch.Tensor, group_rows: int, group_k: int, fmax: float = 448.0):
    """(e4m3 codes, fp32 scales [ceil(R/group_rows), K/group_k]) of a float tensor [R, K], with
    torch (fp32 scale = amax/fmax, codes RN-even): the inputs of a block fp8 matmul."""
    R, K = v.shape
    Rp = -(-R // group_rows) * group_rows
    vp = torch.zeros((Rp, K), dtype=torch.float32, device=v.device)
    vp[:R] = v.to(torch.float32)
    blocks = vp.reshape(Rp // group_rows, group_rows, K // group_k, group_k)
    amax = blocks.abs().amax(dim=(1, 3)).clamp(min=1e-10)
    scale = amax / fmax
    codes = (blocks / scale[:, None, :, None]).clamp(-fmax, fmax).to(torch.float8_e4m3fn)
    return codes.reshape(Rp, K)[:R].contiguous(), scale.contiguous()


def torch_group_quant(x: torch.Tensor, *, group_size=128, ue8m0=False, column_major_scales=False, fmax=448.0):
    """vLLM's per-token-group fp8 quantizer written in torch (the rule of its reference program:
    scale max(amax, eps)/fmax in fp32, or 2^ceil(log2(max(amax/fmax, eps))) under UE8M0; codes
    RN-even, saturating): a stand-in kernel where no GPU runs the Triton one."""
    xf = x.float().reshape(x.shape[0], -1, group_size)
    amax = xf.abs().amax(-1, keepdim=True)
    if ue8m0:
        s = torch.exp2(torch.ceil(torch.log2((amax / fmax).clamp(min=1e-10))))
    else:
        s = amax.clamp(min=1e-10) / fmax
    q = (xf / s).clamp(-fmax, fmax).to(torch.float8_e4m3fn).reshape(x.shape)
    s = s.squeeze(-1)
    if column_major_scales:
        s = s.t().contiguous().t()
    return q, s


_OUT = {torch.bfloat16: "bf16", torch.float16: "fp16", torch.float32: "fp32"}


def _matmul_groups(cols: int, seed: int):
    """(group_n, group_k) for CI shapes: group_k >= 32, since fp8 tl.dot on NVIDIA GPUs needs K
    tiles of at least 32."""
    fits = [g for g in GROUP_SIZES if g >= 32 and cols % g == 0]
    if not fits:
        raise ValueError(f"cols={cols} is not a multiple of 32 (the smallest fp8 K tile); use a multiple of 32")
    multi = [g for g in fits if cols // g >= 2] or fits
    return _choose(seed, (16, 32), 2), multi[seed % len(multi)]


def _ex_matmul(seed, dtype, family, rows, cols):
    group_n, group_k = _matmul_groups(cols, seed)
    n = (16, 24, 40)[(seed // 4) % 3]
    a = _shift_groups(fill((rows, cols), family, seed, dtype=torch.float32), group_k, seed)
    b = fill((n, cols), "normal", seed + 1, dtype=torch.float32)
    a_q, a_s = quantize_blocks(a, 1, group_k)
    b_q, b_s = quantize_blocks(b, group_n, group_k)
    return (a_q, b_q, a_s, b_s), {"group_n": group_n, "group_k": group_k, "out": _OUT.get(dtype, "bf16")}


def example_pipeline(seed, dtype=torch.bfloat16, family="normal", rows=4, cols=128):
    """(x, b, b_s), params for ``group_quant_then_block_fp8_matmul``."""
    group_n, group_k = _matmul_groups(cols, seed)
    n = (16, 24, 40)[(seed // 4) % 3]
    x = fill((rows, cols), family, seed, dtype=dtype)
    b_q, b_s = quantize_blocks(fill((n, cols), "normal", seed + 1), group_n, group_k)
    return (x, b_q, b_s), {"group_n": group_n, "group_k": group_k, "out": _OUT.get(dtype, "bf16"),
                           "ue8m0": bool(seed % 2)}


# ---------------------------------------------------------------------------------- registry

_register(Operator(
    "per_token_group_quant_fp8", per_token_group_quant_fp8,
    {"correct": _Q + "group_quant_fp8", "rows": _Q + "group_quant_fp8_rows",
     "loop": _Q + "group_quant_fp8_loop"},
    _ex_quant,
    domain=Domain(rows=(1, 64), cols=(16, 4096), cols_multiple_of=16,
                  formats=("bf16", "fp16", "fp32"),
                  params={"group_size": GROUP_SIZES, "ue8m0": (False, True),
                          "column_major_scales": (False, True)}),
    faulty={"ties_away": _Q + "group_quant_fp8_ties_away", "max224": _Q + "group_quant_fp8_max224",
            "floor_absmax": _Q + "group_quant_fp8_floor_absmax",
            "truncate": _Q + "group_quant_fp8_truncate"}, source='vllm'))

_register(Operator(
    "w8a8_block_fp8_matmul", w8a8_block_fp8_matmul,
    {"correct": _M + "block_fp8_matmul", "small_tiles": _M + "block_fp8_matmul_small_tiles",
     "split_k": _M + "block_fp8_matmul_split_k"},
    _ex_matmul,
    domain=Domain(rows=(1, 64), cols=(32, 4096), cols_multiple_of=32,
                  formats=("bf16", "fp16", "fp32"),
                  params={"group_k": (128, 64, 32), "group_n": (128, 16, 32), "out": ("bf16", "fp16", "fp32")}),
    faulty={"bk_over_group": _M + "block_fp8_matmul_bk_over_group",
            "row0_scale": _M + "block_fp8_matmul_row0_scale",
            "wrong_scale_block": _M + "block_fp8_matmul_wrong_scale_block"}, source='vllm'))

__all__ = ["per_token_group_quant_fp8", "w8a8_block_fp8_matmul", "group_quant_then_block_fp8_matmul",
           "quantize_blocks", "example_pipeline"]
