"""Per-token-group fp8 quantization, after vLLM's precision plan (docs/operators.md row 12).

Per group of ``group_size`` contiguous values of a row: widen to fp32; amax = max|y| (exact);
scale = max(amax, eps) / fmax as one fp32 division, or with UE8M0 the power of two at or above
the floored scale, 2^ceil(log2(max(amax / fmax, eps))) (the floor is on the scale before the
round-up: change pair 14); codes = clamp(y / scale, ±fmax) in fp32, stored with one RN-even,
saturating cast to the fp8 format (``cvt.rn.satfinite``). fmax is 448 for e4m3fn and 224 (vLLM's
choice, not the format's 240) for e4m3fnuz. Outputs: codes (x's shape, fp8) and scales (fp32,
[rows, K/group]; ``column_major_scales`` stores them with strides (1, rows), as vLLM's
column-major option does — same logical shape).

e4m3fnuz is ``tl.float8e4b8``: Triton compiles it for AMD GPUs only, and the Triton interpreter
(3.9) rounds it ties-away and wraps past the range (numoracle's interpreter repair covers e4m3fn
and e5m2 only), so :func:`fnuz_supported` says where the e4m3fnuz variant can run faithfully.

Faulty versions (change pairs 14–16 and a truncating store) are at the end of the module; they
are registered as ``faulty`` kernels, never as kernels.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

FORMATS = {"e4m3fn": torch.float8_e4m3fn, "e4m3fnuz": torch.float8_e4m3fnuz}
FP8_MAX = {"e4m3fn": 448.0, "e4m3fnuz": 224.0}
EMIN = {"e4m3fn": -6, "e4m3fnuz": -7}


@triton.jit
def _group_scale(amax, EPS: tl.constexpr, FP8_MAX: tl.constexpr, UE8M0: tl.constexpr,
                 FLOOR_ON: tl.constexpr):
    """The fp32 scale of a group from its amax."""
    if FLOOR_ON == "absmax":
        s = tl.maximum(amax, EPS) / FP8_MAX
    else:
        s = tl.maximum(amax / FP8_MAX, EPS)
    if UE8M0:
        s = tl.exp2(tl.ceil(tl.log2(s)))
    return s


@triton.jit
def _round_manual(t, EMIN: tl.constexpr, MODE: tl.constexpr):
    """t (fp32, |t| <= fmax) rounded onto the e4m3 grid by integer arithmetic, ties away from
    zero (MODE "rna") or toward zero ("rtz"); the result is an e4m3 value, so the cast after it
    is exact. Used by the faulty kernels only."""
    a = tl.abs(t)
    e = ((a.to(tl.int32, bitcast=True) >> 23) & 0xFF) - 127
    q = tl.maximum(e, EMIN) - 3                    # exponent of the grid spacing at |t|
    ulp = ((q + 127) << 23).to(tl.float32, bitcast=True)
    inv = ((127 - q) << 23).to(tl.float32, bitcast=True)
    k = a * inv                                    # exact: a power-of-two scaling
    if MODE == "rna":
        r = tl.floor(k + 0.5)
    else:
        r = tl.floor(k)
    return tl.where(t < 0, -(r * ulp), r * ulp)


@triton.jit
def _codes(y, scale, FP8_MAX: tl.constexpr, EMIN: tl.constexpr, ROUNDING: tl.constexpr):
    t = tl.clamp(y / scale, -FP8_MAX, FP8_MAX)
    if ROUNDING != "rne":
        t = _round_manual(t, EMIN, ROUNDING)
    return t


@triton.jit
def _group_quant_kernel(y_ptr, q_ptr, s_ptr, n_cols, groups_per_row, s_stride_row, s_stride_group,
                        GROUP: tl.constexpr, BLOCK: tl.constexpr, EPS: tl.constexpr,
                        FP8_MAX: tl.constexpr, EMIN: tl.constexpr, UE8M0: tl.constexpr,
                        FLOOR_ON: tl.constexpr, ROUNDING: tl.constexpr):
    """One group per program."""
    g = tl.program_id(0).to(tl.int64)
    row = g // groups_per_row
    gi = g % groups_per_row
    cols = tl.arange(0, BLOCK)
    mask = cols < GROUP
    offs = row * n_cols + gi * GROUP + cols
    y = tl.load(y_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    scale = _group_scale(tl.max(tl.abs(y), axis=0), EPS, FP8_MAX, UE8M0, FLOOR_ON)
    q = _codes(y, scale, FP8_MAX, EMIN, ROUNDING)
    tl.store(q_ptr + offs, q.to(q_ptr.dtype.element_ty), mask=mask)
    tl.store(s_ptr + row * s_stride_row + gi * s_stride_group, scale)


@triton.jit
def _group_quant_row_kernel(y_ptr, q_ptr, s_ptr, n_cols, groups_per_row, s_stride_row, s_stride_group,
                            GROUP: tl.constexpr, BLOCK: tl.constexpr, GBLOCK: tl.constexpr,
                            EPS: tl.constexpr, FP8_MAX: tl.constexpr, EMIN: tl.constexpr,
                            UE8M0: tl.constexpr, FLOOR_ON: tl.constexpr, ROUNDING: tl.constexpr):
    """One row per program: a [GBLOCK, BLOCK] tile of all the row's groups, max along axis 1."""
    row = tl.program_id(0).to(tl.int64)
    gs = tl.arange(0, GBLOCK)
    cols = tl.arange(0, BLOCK)
    mask = (gs < groups_per_row)[:, None] & (cols < GROUP)[None, :]
    offs = row * n_cols + gs[:, None] * GROUP + cols[None, :]
    y = tl.load(y_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    scale = _group_scale(tl.max(tl.abs(y), axis=1), EPS, FP8_MAX, UE8M0, FLOOR_ON)
    q = _codes(y, scale[:, None], FP8_MAX, EMIN, ROUNDING)
    tl.store(q_ptr + offs, q.to(q_ptr.dtype.element_ty), mask=mask)
    tl.store(s_ptr + row * s_stride_row + gs * s_stride_group, scale, mask=gs < groups_per_row)


@triton.jit
def _group_quant_loop_kernel(y_ptr, q_ptr, s_ptr, n_groups, n_cols, groups_per_row, s_stride_row,
                             s_stride_group, GROUPS_PER_PROGRAM: tl.constexpr, GROUP: tl.constexpr,
                             BLOCK: tl.constexpr, EPS: tl.constexpr, FP8_MAX: tl.constexpr,
                             EMIN: tl.constexpr, UE8M0: tl.constexpr, FLOOR_ON: tl.constexpr,
                             ROUNDING: tl.constexpr):
    """Each program walks GROUPS_PER_PROGRAM consecutive groups (in row-major group order)."""
    first = tl.program_id(0).to(tl.int64) * GROUPS_PER_PROGRAM
    cols = tl.arange(0, BLOCK)
    mask = cols < GROUP
    for k in range(GROUPS_PER_PROGRAM):
        g = first + k
        if g < n_groups:
            row = g // groups_per_row
            gi = g % groups_per_row
            offs = row * n_cols + gi * GROUP + cols
            y = tl.load(y_ptr + offs, mask=mask, other=0.0).to(tl.float32)
            scale = _group_scale(tl.max(tl.abs(y), axis=0), EPS, FP8_MAX, UE8M0, FLOOR_ON)
            q = _codes(y, scale, FP8_MAX, EMIN, ROUNDING)
            tl.store(q_ptr + offs, q.to(q_ptr.dtype.element_ty), mask=mask)
            tl.store(s_ptr + row * s_stride_row + gi * s_stride_group, scale)


def _check(x: torch.Tensor, group_size: int, fmt: str) -> None:
    if fmt not in FORMATS:
        raise ValueError(f"fmt must be one of {sorted(FORMATS)}, got fmt={fmt!r}")
    if group_size <= 0 or x.shape[-1] % group_size:
        raise ValueError(f"group_size={group_size} must divide the last dimension {x.shape[-1]}")
    if x.dtype not in (torch.bfloat16, torch.float16, torch.float32):
        raise ValueError(f"x must be bf16, fp16 or fp32, got {x.dtype}")


def _launch(x, group_size, ue8m0, column_major_scales, fmt, eps, *, variant="group", num_warps=4,
            fp8_max=None, floor_on=None, rounding="rne", groups_per_program=2):
    _check(x, group_size, fmt)
    x2 = x.contiguous().reshape(-1, x.shape[-1])
    rows, n_cols = x2.shape
    ngroups = n_cols // group_size
    q = torch.empty(x2.shape, dtype=FORMATS[fmt], device=x.device)
    if column_major_scales:
        s = torch.empty((ngroups, rows), dtype=torch.float32, device=x.device).t()
    else:
        s = torch.empty((rows, ngroups), dtype=torch.float32, device=x.device)
    consts = dict(GROUP=group_size, BLOCK=triton.next_power_of_2(group_size), EPS=float(eps),
                  FP8_MAX=float(FP8_MAX[fmt] if fp8_max is None else fp8_max), EMIN=EMIN[fmt],
                  UE8M0=bool(ue8m0), FLOOR_ON=floor_on or ("scale" if ue8m0 else "absmax"),
                  ROUNDING=rounding)
    if rows and ngroups:
        if variant == "group":
            _group_quant_kernel[(rows * ngroups,)](x2, q, s, n_cols, ngroups, s.stride(0), s.stride(1),
                                                   **consts, num_warps=num_warps)
        elif variant == "row":
            _group_quant_row_kernel[(rows,)](x2, q, s, n_cols, ngroups, s.stride(0), s.stride(1),
                                             GBLOCK=triton.next_power_of_2(ngroups), **consts,
                                             num_warps=num_warps)
        else:
            n = rows * ngroups
            _group_quant_loop_kernel[(triton.cdiv(n, groups_per_program),)](
                x2, q, s, n, n_cols, ngroups, s.stride(0), s.stride(1),
                GROUPS_PER_PROGRAM=groups_per_program, **consts, num_warps=num_warps)
    return q.reshape(x.shape), s.reshape(*x.shape[:-1], ngroups)


def group_quant_fp8(x, *, group_size=128, ue8m0=False, column_major_scales=False, fmt="e4m3fn",
                    eps=1e-10):
    """Per-token-group fp8 quantization, one group per program (num_warps 4).

    Precision plan: the module docstring's. Returns ``(codes, scales)``: codes in ``fmt`` with
    x's shape; scales fp32 of shape x.shape[:-1] + (K/group_size,).
    """
    return _launch(x, group_size, ue8m0, column_major_scales, fmt, eps)


def group_quant_fp8_rows(x, *, group_size=128, ue8m0=False, column_major_scales=False, fmt="e4m3fn",
                         eps=1e-10):
    """As :func:`group_quant_fp8`, one row per program: all its groups as a 2-D tile (num_warps 8)."""
    return _launch(x, group_size, ue8m0, column_major_scales, fmt, eps, variant="row", num_warps=8)


def group_quant_fp8_loop(x, *, group_size=128, ue8m0=False, column_major_scales=False, fmt="e4m3fn",
                         eps=1e-10):
    """As :func:`group_quant_fp8`, each program looping over 3 consecutive groups (num_warps 2)."""
    return _launch(x, group_size, ue8m0, column_major_scales, fmt, eps, variant="loop", num_warps=2,
                   groups_per_program=3)


def fnuz_supported(backend: str) -> tuple[bool, str]:
    """(whether an e4m3fnuz store is faithful on ``backend``, why not)."""
    if backend == "gpu":
        if torch.cuda.is_available() and getattr(torch.version, "hip", None):
            return True, ""
        return False, ("e4m3fnuz (tl.float8e4b8) is an AMD format: Triton's NVIDIA backend does not "
                       "compile it; run the e4m3fnuz variant on a ROCm GPU")
    # a group whose amax is 224 has scale 1 (exact), so the codes are RN(x): two exact ties
    x = torch.tensor([[1 + 2 ** -4, 1 + 3 * 2 ** -4, 224.0, -(1 + 2 ** -4)]], dtype=torch.float32)
    try:
        q, _ = group_quant_fp8(x, group_size=4, fmt="e4m3fnuz")
    except Exception as exc:  # pragma: no cover - depends on the Triton build
        return False, f"the interpreter cannot store tl.float8e4b8: {exc!r}"
    got, want = q.float()[0], torch.tensor([1.0, 1.25, 224.0, -1.0])
    if torch.equal(got, want):
        return True, ""
    return False, ("the Triton interpreter rounds tl.float8e4b8 (e4m3fnuz) ties away from zero (and wraps "
                   "values past its range); numoracle's interpreter repair covers e4m3fn/e5m2 only: "
                   f"stored {got.tolist()} where RN-even gives {want.tolist()}")


# ------------------------------------------------------------------------------ faulty versions

def group_quant_fp8_ties_away(x, *, group_size=128, ue8m0=False, column_major_scales=False,
                              fmt="e4m3fn", eps=1e-10):
    """FAULTY (change pair 16): codes rounded to nearest with ties away from zero."""
    return _launch(x, group_size, ue8m0, column_major_scales, fmt, eps, rounding="rna")


def group_quant_fp8_max224(x, *, group_size=128, ue8m0=False, column_major_scales=False,
                           fmt="e4m3fn", eps=1e-10):
    """FAULTY (change pair 15): fp8 max hard-coded to 224 whatever the format (e4m3fn has 448)."""
    return _launch(x, group_size, ue8m0, column_major_scales, fmt, eps, fp8_max=224.0)


def group_quant_fp8_floor_absmax(x, *, group_size=128, ue8m0=False, column_major_scales=False,
                                 fmt="e4m3fn", eps=1e-10):
    """FAULTY (change pair 14): with UE8M0, absmax floored at eps instead of the scale (all-zero
    and tiny groups get a much smaller power of two). Without UE8M0 it is the correct kernel."""
    return _launch(x, group_size, ue8m0, column_major_scales, fmt, eps, floor_on="absmax")


def group_quant_fp8_truncate(x, *, group_size=128, ue8m0=False, column_major_scales=False,
                             fmt="e4m3fn", eps=1e-10):
    """FAULTY: codes rounded toward zero (a truncating fp8 store)."""
    return _launch(x, group_size, ue8m0, column_major_scales, fmt, eps, rounding="rtz")
