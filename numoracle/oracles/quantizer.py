"""The two-step check of block-scaled quantizer outputs (docs/design.md §4.5).

1. **Admissible scale**: each group's stored scale must lie in the interval of
   scales a correct kernel can produce from the enclosure of the group's amax
   (``calculus.quant.admissible_scales``), and be a power of two under UE8M0.
2. **Codes conditioned on the stored scale**: with the kernel's own scale S of
   its group, each code must lie in ``[RN(clamp(lo)), RN(clamp(hi))]`` where
   [lo, hi] encloses fl32(x / S) (the rounding-interval check of §4.3 with the
   fp32 division accounted for before the fp8 rounding, ties to even,
   saturation at ±fmax).  A group whose stored scale is not a finite positive
   number has its codes left unjudged (uncertified); its scale is rejected.

MX and NVFP4 sites (``calculus.quant_mx``) are judged the same way, NVFP4 in three
levels: tensor scale, block scales conditioned on the stored tensor scale, codes
conditioned on both stored scales.  Packed fp4 codes are judged per code.

Both steps are exact and worst-case, so the statistical and fixed-input modes
agree on quantizer outputs.
"""

from __future__ import annotations

import math

import torch

from .. import formats as F
from ..calculus import quant as Q
from ..calculus import quant_mx as MX
from ..calculus.tracked import any_of
from ..errors import InvalidArgument
from ..verdict.judgement import GivenParts, OutputJudgement


def is_quant_output(r) -> bool:
    return isinstance(r, Q.QuantOutput)


def with_assumptions(assumptions):
    """A verdict's assumptions with the quantizer judgement's own added."""
    import dataclasses
    return dataclasses.replace(assumptions, implementation=tuple(assumptions.implementation) + Q.ASSUMPTIONS)


def _judgement(name, *, fmt, y, centre, lo, hi, qlo, qhi, rejected, unc, special, detail) -> OutputJudgement:
    """An output's judgement from its computed tensors (the same in both modes: the
    quantizer checks are exact and worst-case)."""
    parts = GivenParts(kernel_values=y, centre_values=centre, lo=lo, hi=hi, qlo=qlo, qhi=qhi, rejected_mask=rejected,
                       uncertified_mask=unc, special_mask=special, fixed_rejected_mask=rejected)
    return OutputJudgement(name=name, fmt=fmt, shape=y.shape, parts=parts, detail=detail)


def _num(x: float) -> str:
    return f"{x:.9g}"


def _group_text(shape, group: int, flat_group: int) -> str:
    idx = tuple(int(k) for k in torch.unravel_index(torch.tensor(flat_group), shape)) if len(shape) else ()
    lead, g = idx[:-1], idx[-1]
    where = f"row {', '.join(map(str, lead))}, " if lead else ""
    return f"group ({where}columns {g * group}..{(g + 1) * group - 1})"


def _kinds(q) -> tuple:
    return q.kinds if not isinstance(q, Q.Quantizer) else ("scales", "codes")


def _quantizers(refs) -> list:
    """[(quantizer, {kind: index of that output})], every kind a returned one depends on
    present (a code is judged conditioned on its stored scales, a block scale of NVFP4
    on the stored tensor scale)."""
    sites = {}
    for j, r in enumerate(refs):
        if is_quant_output(r):
            sites.setdefault(id(r.quantizer), (r.quantizer, {}))[1][r.kind] = j
    for q, idx in sites.values():
        kinds = _kinds(q)
        last = max(kinds.index(k) for k in idx)
        missing = [k for k in kinds[:last] if k not in idx]
        if missing:
            names = {"scales": "q.scales", "tensor_scale": "q.tensor_scale", "codes": "q.codes"}
            raise InvalidArgument(
                f"a reference program returns a quantizer's {kinds[last]} without its {' and '.join(missing)}; "
                f"the {kinds[last]} can only be judged conditioned on the kernel's stored "
                f"{' and '.join(missing)}: return {', '.join(names[k] for k in kinds[:last + 1])} too.")
    return list(sites.values())


def compiles(refs) -> bool:
    """Whether the compiled verdict may judge these outputs: per-token-group quantizers
    only (their compiled judgement was checked equal to the eager one); MX and NVFP4
    outputs are judged eagerly."""
    return not any(is_quant_output(r) and not isinstance(r.quantizer, Q.Quantizer) for r in refs)


def judge(refs, decoded, names) -> dict:
    """OutputJudgements for every quantizer output among ``refs`` (index ->
    judgement).  ``decoded``: the kernel outputs' exact float64 values."""
    out = {}
    for q, idx in _quantizers(refs):
        if isinstance(q, Q.Quantizer):
            js, jc = idx["scales"], idx.get("codes")
            S = decoded[js]
            out[js] = _judge_scales(names[js], q, S)
            if jc is not None:
                out[jc] = _judge_codes(names[jc], q, decoded[jc], S)
            continue
        stored = {k: decoded[j] for k, j in idx.items()}
        for kind, j in idx.items():
            out[j] = _judge_block(names[j], q, kind, stored)
    return out


def judge_tensors(refs, decoded) -> dict:
    """``judge`` as tensors only (index -> (centre, lo, hi, qlo, qhi, rejected,
    uncertified)), for the compiled verdict, which takes the explanation's details
    from an eager run when they are asked for."""
    out = {}
    for q, idx in _quantizers(refs):
        if isinstance(q, Q.Quantizer):
            js, jc = idx["scales"], idx.get("codes")
            S = decoded[js]
            out[js] = _scale_tensors(q, S)[:7]
            if jc is not None:
                out[jc] = _code_tensors(q, decoded[jc], S)[:7]
            continue
        stored = {k: decoded[j] for k, j in idx.items()}
        for kind, j in idx.items():
            out[j] = _block_tensors(q, kind, stored)[:7]
    return out


def _scale_tensors(q: Q.Quantizer, S: torch.Tensor):
    lo, hi, pow2 = q.scales()
    ideal = q.ideal_scales()
    ok = (S >= lo) & (S <= hi) & torch.isfinite(S)
    if pow2:
        ok = ok & Q._is_pow2(S)
    unc = torch.zeros_like(ok) if q.x.taint is None else \
        any_of(Q.groups_of(q.x.taint.expand(q.x.c.shape), q.group), -1)
    rejected = ~ok & ~unc
    return ideal, lo, hi, lo, hi, rejected, unc, pow2


def _judge_scales(name, q: Q.Quantizer, S: torch.Tensor) -> OutputJudgement:
    ideal, lo, hi, _, _, rejected, unc, pow2 = _scale_tensors(q, S)
    special = ~torch.isfinite(S) & ~unc
    made = dict(fmt=F.fp32, y=S, centre=ideal, lo=lo, hi=hi, qlo=lo, qhi=hi, rejected=rejected, unc=unc, special=special)
    amax_lo, amax_hi = q.amax_enclosure()

    def detail(i: int) -> list:
        g = _group_text(tuple(S.shape), q.group, i)
        a_lo, a_hi = float(amax_lo.reshape(-1)[i]), float(amax_hi.reshape(-1)[i])
        amax = _num(a_lo) if a_lo == a_hi else f"[{_num(a_lo)}, {_num(a_hi)}]"
        rule = {"fp32": f"max(amax, {q.eps:g}) / {q.fmax:g} in fp32",
                "ue8m0": f"2^ceil(log2(max(amax / {q.fmax:g}, {q.eps:g}))) (UE8M0)"}[q.rule]
        s = float(S.reshape(-1)[i])
        lines = [f"  quantizer = {q.fmt} per group of {q.group}, scale = {rule}",
                 f"  {g}: amax = {amax}",
                 f"  scale     = {_num(s)} stored; admissible [{_num(float(lo.reshape(-1)[i]))}, "
                 f"{_num(float(hi.reshape(-1)[i]))}]{' (powers of two)' if pow2 else ''}"]
        if bool(rejected.reshape(-1)[i]):
            if pow2 and not bool(Q._is_pow2(S.reshape(-1)[i:i + 1])[0]) and s == s:
                lines.append("  the stored scale is not a power of two")
            else:
                lines.append(f"  the stored scale is {s / float(ideal.reshape(-1)[i]):.6g}x the reference scale")
        return lines

    return _judgement(name, detail=detail, **made)


def _code_tensors(q: Q.Quantizer, y: torch.Tensor, S: torch.Tensor):
    prof = q.x.ctx.profile
    s_el = Q.per_element(S, q.group)
    valid = torch.isfinite(s_el) & (s_el > 0)
    safe = torch.where(valid, s_el, torch.ones_like(s_el))
    R = q.x.radius().expand(q.x.c.shape)
    x_lo, x_hi = q.x.c - R, q.x.c + R
    t_lo, t_hi, q_lo, q_hi = Q.code_bounds(x_lo, x_hi, safe, q.fmt, q.fmax, prof)
    centre = (q.x.c / safe).clamp(-q.fmax, q.fmax)
    ok = (y >= q_lo) & (y <= q_hi)
    unc = ~valid
    if q.x.taint is not None:
        unc = unc | q.x.taint.expand(y.shape)
    rejected = ~ok & ~unc
    return centre, t_lo, t_hi, q_lo, q_hi, rejected, unc, s_el, valid


def _judge_codes(name, q: Q.Quantizer, y: torch.Tensor, S: torch.Tensor) -> OutputJudgement:
    centre, t_lo, t_hi, q_lo, q_hi, rejected, unc, s_el, valid = _code_tensors(q, y, S)
    special = ~torch.isfinite(y) & ~unc
    made = dict(fmt=q.fmt, y=y, centre=centre, lo=t_lo, hi=t_hi, qlo=q_lo, qhi=q_hi, rejected=rejected, unc=unc, special=special)

    def detail(i: int) -> list:
        K = y.shape[-1]
        gshape = tuple(S.shape)
        flat_group = (i // K) * gshape[-1] + (i % K) // q.group if len(gshape) else 0
        g = _group_text(gshape, q.group, flat_group)
        s = float(s_el.reshape(-1)[i])
        x = float(q.x.c.reshape(-1)[i])
        lines = [f"  quantizer = {q.fmt} per group of {q.group}, codes RN-even, saturating at ±{q.fmax:g}",
                 f"  {g}: kernel scale = {_num(s)} (the code is judged conditioned on it)",
                 f"  x = {_num(x)}, x/scale in [{_num(float(t_lo.reshape(-1)[i]))}, "
                 f"{_num(float(t_hi.reshape(-1)[i]))}] after the fp32 division and clamp"]
        if not bool(valid.reshape(-1)[i]):
            lines.append("  the group's stored scale is not a finite positive number: its codes are not judged")
        return lines

    return _judgement(name, detail=detail, **made)


# ------------------------------------------------------------------------------ MX and NVFP4

def _block_tensors(q, kind: str, stored: dict):
    """(centre, lo, hi, qlo, qhi, rejected, uncertified, extra) of one MX/NVFP4 output."""
    nv = isinstance(q, MX.NVFP4Quantizer)
    T = None
    if nv:
        T = stored["tensor_scale"] if "tensor_scale" in stored else q.ideal_tensor_scale()
        T = T.reshape(-1)[:1]
    if kind == "tensor_scale":
        centre, lo, hi, rejected, unc = q.tensor_scale_tensors(T)
        return centre, lo, hi, lo, hi, rejected, unc, None
    if kind == "scales":
        if nv:
            centre, r_lo, r_hi, s_lo, s_hi, rejected, unc = q.scale_tensors(stored["scales"], T)
            return centre, r_lo, r_hi, s_lo, s_hi, rejected, unc, None
        centre, lo, hi, rejected, unc = q.scale_tensors(stored["scales"])
        return centre, lo, hi, lo, hi, rejected, unc, None
    if nv:
        centre, t_lo, t_hi, q_lo, q_hi, rejected, unc, valid, s_el = q.code_tensors(stored["codes"],
                                                                                   stored["scales"], T)
    else:
        centre, t_lo, t_hi, q_lo, q_hi, rejected, unc, valid, s_el = q.code_tensors(stored["codes"],
                                                                                   stored["scales"])
    return centre, t_lo, t_hi, q_lo, q_hi, rejected, unc, (s_el, valid)


def _block_text(q) -> str:
    if isinstance(q, MX.NVFP4Quantizer):
        ts = "given" if q.given is not None else f"fl32(max(amax, {q.eps:g}) / 2688)"
        return (f"NVFP4: e2m1 per block of {q.block}, e4m3 block scale RN(fl32(fl32(amax/6)/ts)) in "
                f"[2^-6, 448], fp32 tensor scale ts = {ts}")
    rule = {"floor": f"2^(floor(log2 amax) - {q.fmt.emax}) (OCP, clamping)",
            "ceil": f"2^ceil(log2(amax / {q.fmax:g})) (round-up)"}[q.rule]
    return f"MX {q.fmt} per block of {q.block}, E8M0 scale {rule}"


def _judge_block(name, q, kind: str, stored: dict) -> OutputJudgement:
    centre, lo, hi, qlo, qhi, rejected, unc, extra = _block_tensors(q, kind, stored)
    y = stored[kind]
    if kind == "tensor_scale":
        y = y.reshape(-1)[:1]
    fmt = {"codes": q.fmt, "tensor_scale": F.fp32}.get(kind) or (
        q.scale_fmt if isinstance(q, MX.NVFP4Quantizer) else F.e8m0)
    special = ~torch.isfinite(y) & ~unc
    made = dict(fmt=fmt, y=y, centre=centre, lo=lo, hi=hi, qlo=qlo, qhi=qhi, rejected=rejected, unc=unc, special=special)
    amax_lo, amax_hi = q.amax_enclosure()
    K = q.x.c.shape[-1]
    nb = K // q.block

    def detail(i: int) -> list:
        lines = [f"  quantizer = {_block_text(q)}"]
        if kind == "tensor_scale":
            lines.append(f"  tensor scale = {_num(float(y[0]))} stored; admissible [{_num(float(qlo[0]))}, "
                         f"{_num(float(qhi[0]))}] (tensor amax {_num(float(amax_hi.max()))})")
            return lines
        flat_block = i if kind == "scales" else (i // K) * nb + (i % K) // q.block
        g = _group_text(tuple(amax_lo.shape), q.block, flat_block).replace("group (", "block (")
        if kind == "scales":
            a_lo, a_hi = float(amax_lo.reshape(-1)[i]), float(amax_hi.reshape(-1)[i])
            amax = _num(a_lo) if a_lo == a_hi else f"[{_num(a_lo)}, {_num(a_hi)}]"
            lines += [f"  {g}: amax = {amax}",
                      f"  scale     = {_num(float(y.reshape(-1)[i]))} stored; admissible "
                      f"[{_num(float(qlo.reshape(-1)[i]))}, {_num(float(qhi.reshape(-1)[i]))}]"]
            if isinstance(q, MX.NVFP4Quantizer):
                lines.append(f"  conditioned on the stored tensor scale; before the e4m3 rounding "
                             f"[{_num(float(lo.reshape(-1)[i]))}, {_num(float(hi.reshape(-1)[i]))}]")
            c = float(centre.reshape(-1)[i])
            if bool(rejected.reshape(-1)[i]) and c > 0 and math.isfinite(float(y.reshape(-1)[i])):
                lines.append(f"  the stored scale is {float(y.reshape(-1)[i]) / c:.6g}x the reference scale")
            return lines
        s_el, valid = extra
        scale = "kernel divisor fl32(ts·S)" if isinstance(q, MX.NVFP4Quantizer) else "kernel scale"
        lines += [f"  {g}: {scale} = {_num(float(s_el.reshape(-1)[i]))} (the code is judged conditioned on it)",
                  f"  x = {_num(float(q.x.c.reshape(-1)[i]))}, x/scale in [{_num(float(lo.reshape(-1)[i]))}, "
                  f"{_num(float(hi.reshape(-1)[i]))}] after the fp32 division and clamp at ±{q.fmax:g}"]
        if q.layout is not None:
            byte = i // 2
            lines.append(f"  stored packed ({q.layout!r}): byte {byte} of the flattened codes, "
                         f"{'low' if (i % 2 == 0) == (q.layout.order == 'low_first') else 'high'} nibble")
        if not bool(valid.reshape(-1)[i]):
            lines.append("  the stored scale is not a finite positive number: its codes are not judged")
        return lines

    return _judgement(name, detail=detail, **made)
