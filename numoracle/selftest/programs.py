"""numoracle's own soundness campaign: the emulator (a correct kernel with
random reduction orders, FMA choices and math errors inside their profile)
against the oracle, over generated inputs; and planted faults that must be
caught.  Used by the test suite (small) and, with NUMORACLE_SOUNDNESS_EXAMPLES raised, for large runs."""

from __future__ import annotations

import torch

from ..reference import matmul, mean, reference, rsqrt
from ..check import check
from ..formats import fp32
from .emulator import Plan, emulate
from ..operators import references as R
from ..families import fill


@reference(outputs=("y",))
def linear_tf32(x, w, b):
    """A linear layer as ``tl.dot`` runs it by default: fp32 operands read as TF32 (bf16 and fp16
    ones are TF32 values already), the bias added to the dot (which Triton may fold into it)."""
    return (matmul(x, w, acc=fp32, input_precision="tf32") + b).to(x.format)


@reference(outputs=("y",))
def linear_tf32x3(x, w, b):
    """The linear layer with ``tl.dot(..., input_precision="tf32x3")``: fp32 tiles split into three
    TF32 dots, the bias added to the dot."""
    return (matmul(x, w, acc=fp32, input_precision="tf32x3") + b).to(x.format)


@reference(outputs=("y",))
def linear_bf16x3(x, w, b):
    """The linear layer with ``tl.dot(..., input_precision="bf16x3")``: fp32 tiles split into bf16
    parts, three bf16 dots, about 16 bits of each operand kept."""
    return (matmul(x, w, acc=fp32, input_precision="bf16x3") + b).to(x.format)


@reference(outputs=("y", "h"))
def add_rms_norm(x, r, w, *, eps=1e-6):
    """A fused residual add and RMSNorm (vLLM's fused_add_rms_norm): h = x + r in x's format,
    stored, then normalised as Llama casting does (a sum of known values: it settles)."""
    h = x + r
    hf = h.to(fp32)
    rstd = rsqrt(mean(hf * hf, axis=-1, keepdims=True) + eps)
    return (hf * rstd).to(x.format) * w, h


PROGRAMS = {
    "rms_norm_llama": R.rms_norm_llama,
    "rms_norm_gemma": R.rms_norm_gemma,
    "layer_norm": R.layer_norm,
    "softmax": R.softmax,
    "swiglu": R.swiglu,
    "cross_entropy_loss": R.cross_entropy_loss,
    # the mean over kept rows: a division by a runtime count (a power of two or not)
    "cross_entropy_mean": R.cross_entropy,
    "masked_attention": R.masked_attention,
    "linear_tf32": linear_tf32,
    "linear_tf32x3": linear_tf32x3,
    "linear_bf16x3": linear_bf16x3,
    "add_rms_norm": add_rms_norm,
}
SOUNDNESS_FAMILIES = ("normal", "shifted_mean", "heavy_tailed", "scaled", "constant_rows", "pow2_grid")
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


def make_inputs(program: str, dtype, rows: int, cols: int, family: str, scale_exp: int, seed: int):
    dt = DTYPES[dtype] if isinstance(dtype, str) else dtype
    k = scale_exp if family == "scaled" else 0
    x = fill((rows, cols), family, seed, scale_exp=k, dtype=dt)
    if program in ("rms_norm_llama", "rms_norm_gemma"):
        w = fill((cols,), "normal", seed + 1, dtype=dt).float().mul(0.1).add(1).to(dt)
        return (x, w)
    if program == "add_rms_norm":
        w = fill((cols,), "normal", seed + 1, dtype=dt).float().mul(0.1).add(1).to(dt)
        return (x, fill((rows, cols), family, seed + 3, scale_exp=k, dtype=dt), w)
    if program == "layer_norm":
        w = fill((cols,), "normal", seed + 1, dtype=dt).float().mul(0.1).add(1).to(dt)
        b = fill((cols,), "normal", seed + 2, dtype=dt).float().mul(0.1).to(dt)
        return (x, w, b)
    if program == "swiglu":
        return (x, fill((rows, cols), family, seed + 3, scale_exp=k, dtype=dt))
    if program in ("cross_entropy_loss", "cross_entropy_mean"):
        g = torch.Generator().manual_seed(seed)
        labels = torch.randint(0, cols, (rows,), generator=g)
        if program == "cross_entropy_mean":
            # ignore (-100) a seed-drawn number of rows, from none to all
            labels[:int(torch.randint(0, rows + 1, (1,), generator=g))] = -100
        return (x, labels)
    if program in ("linear_tf32", "linear_tf32x3", "linear_bf16x3"):
        # rows x cols times cols x 16, plus an fp32 bias
        w = fill((cols, 16), "normal", seed + 1, dtype=dt)
        return (x, w, fill((16,), "normal", seed + 2, dtype=torch.float32))
    if program == "masked_attention":
        # rows queries over cols keys, head dimension 16
        return tuple(fill(shape, family, seed + i, scale_exp=k, dtype=dt)
                     for i, shape in enumerate(((rows, 16), (cols, 16), (cols, 16))))
    return (x,)


def judge_emulated(program: str, inputs, plan: Plan, backend: str = "interpreter") -> dict:
    """Statuses of both modes for one emulated (correct or faulty) run."""
    prog = PROGRAMS[program]
    outs = emulate(prog, inputs, plan=plan)
    res = {}
    for mode in ("fixed", "statistical"):
        v = check(prog, outs, inputs, mode=mode, backend=backend)
        res[mode] = v
    return res


def assert_close_accepts(outs, ref_outs) -> bool:
    """torch.testing.assert_close with its per-dtype defaults (docs/facts.md)."""
    outs = outs if isinstance(outs, tuple) else (outs,)
    ref_outs = ref_outs if isinstance(ref_outs, tuple) else (ref_outs,)
    try:
        for y, r in zip(outs, ref_outs):
            torch.testing.assert_close(y, r)
        return True
    except AssertionError:
        return False


def float64_reference(program: str, inputs):
    """The operator computed in float64 and cast to the output dtypes: what an
    assert_close user compares against."""
    from .. import formats as F
    from ..verdict.evaluation import run_reference
    from ..mathlib import load
    prog = PROGRAMS[program]
    # the calculus centre is the exact-input value of every output, before its store
    refs, _, _ = run_reference(prog, inputs, {}, load("interpreter"))
    return tuple(F.encode(F.round(r.c, r.fmt), r.fmt) for r in refs) if len(refs) > 1 else \
        F.encode(F.round(refs[0].c, refs[0].fmt), refs[0].fmt)


# ---- planted faults

def _eps_after_rsqrt():
    import numoracle as no
    from ..formats import fp32

    @no.reference
    def rms_norm_llama_eps_after_rsqrt(x, w, *, eps=1e-6, offset=0.0):
        xf = x.to(fp32)
        ms = no.mean(xf * xf, axis=-1, keepdims=True)
        r = no.rsqrt(ms) + eps
        return (xf * r).to(x.format) * w
    return rms_norm_llama_eps_after_rsqrt


FAULTS = ("truncating_store", "bf16_accumulation", "no_widening", "eps_after_rsqrt", "ulp_off_store")
FAULT_FAMILIES = ("normal", "shifted_mean", "heavy_tailed", "scaled", "pow2_grid", "constant_rows")


def planted_fault_run(fault: str, seed: int, rows: int = 8, cols: int = 256, dtype="bf16"):
    """One rms_norm (llama) case with a planted fault: (numoracle statistical
    verdict, fixed verdict, assert_close accepted?).  Inputs cycle through the
    families and through scales 10^-4..10^4, the same for every oracle."""
    family = FAULT_FAMILIES[seed % len(FAULT_FAMILIES)]
    scale_exp = (-4, -2, 2, 4)[(seed // len(FAULT_FAMILIES)) % 4]
    inputs = make_inputs("rms_norm_llama", dtype, rows, cols, family, scale_exp, seed)
    if fault == "eps_after_rsqrt":
        outs = emulate(_eps_after_rsqrt(), inputs, plan=Plan(seed=seed))
    else:
        outs = emulate(R.rms_norm_llama, inputs, plan=Plan(seed=seed, faults=(fault,)))
    stat = check(R.rms_norm_llama, outs, inputs, mode="statistical")
    fixed = check(R.rms_norm_llama, outs, inputs, mode="fixed")
    ac = assert_close_accepts(outs, float64_reference("rms_norm_llama", inputs))
    return stat, fixed, ac, family
