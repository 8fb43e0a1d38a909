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

Both steps are exact and worst-case, so the statistical and fixed-input modes
agree on quantizer outputs.
"""

from __future__ import annotations

import torch

from .. import formats as F
from ..calculus import quant as Q
from ..errors import InvalidArgument
from ..verdict.judgement import GivenParts, OutputJudgement


def is_quant_output(r) -> bool:
    return isinstance(r, Q.QuantOutput)


def with_assumptions(assumptions):
    """A verdict's assumptions with the quantizer judgement's own added."""
    import dataclasses
    return dataclasses.replace(assumptions, implementation=tuple(assumptions.implementation) + Q.ASSUMPTIONS)


def _num(x: float) -> str:
    return f"{x:.9g}"


def _group_text(shape, group: int, flat_group: int) -> str:
    idx = tuple(int(k) for k in torch.unravel_index(torch.tensor(flat_group), shape)) if len(shape) else ()
    lead, g = idx[:-1], idx[-1]
    where = f"row {', '.join(map(str, lead))}, " if lead else ""
    return f"group ({where}columns {g * group}..{(g + 1) * group - 1})"


def _quantizers(refs) -> list:
    """[(quantizer, index of its scales output, index of its codes output or None)]."""
    sites = {}
    for j, r in enumerate(refs):
        if is_quant_output(r):
            sites.setdefault(id(r.quantizer), {})[r.kind] = j
    out = []
    for idx in sites.values():
        q = refs[next(iter(idx.values()))].quantizer
        if "scales" not in idx:
            raise InvalidArgument(
                "a reference program returns a quantizer's codes without its scales; the codes can only "
                "be judged conditioned on the kernel's stored scales: return both (q.codes, q.scales).")
        out.append((q, idx["scales"], idx.get("codes")))
    return out


def judge(refs, decoded, names) -> dict:
    """OutputJudgements for every quantizer output among ``refs`` (index ->
    judgement).  ``decoded``: the kernel outputs' exact float64 values."""
    out = {}
    for q, js, jc in _quantizers(refs):
        S = decoded[js]
        out[js] = _judge_scales(names[js], q, S)
        if jc is not None:
            out[jc] = _judge_codes(names[jc], q, decoded[jc], S)
    return out


def judge_tensors(refs, decoded) -> dict:
    """``judge`` as tensors only (index -> (centre, lo, hi, qlo, qhi, rejected,
    uncertified)), for the compiled verdict, which takes the explanation's details
    from an eager run when they are asked for."""
    out = {}
    for q, js, jc in _quantizers(refs):
        S = decoded[js]
        out[js] = _scale_tensors(q, S)[:7]
        if jc is not None:
            out[jc] = _code_tensors(q, decoded[jc], S)[:7]
    return out


def _scale_tensors(q: Q.Quantizer, S: torch.Tensor):
    lo, hi, pow2 = q.scales()
    ideal = q.ideal_scales()
    ok = (S >= lo) & (S <= hi) & torch.isfinite(S)
    if pow2:
        ok = ok & Q._is_pow2(S)
    unc = torch.zeros_like(ok) if q.x.taint is None else \
        Q.groups_of(q.x.taint.expand(q.x.c.shape), q.group).any(-1)
    rejected = ~ok & ~unc
    return ideal, lo, hi, lo, hi, rejected, unc, pow2


def _judge_scales(name, q: Q.Quantizer, S: torch.Tensor) -> OutputJudgement:
    ideal, lo, hi, _, _, rejected, unc, pow2 = _scale_tensors(q, S)
    special = ~torch.isfinite(S) & ~unc
    parts = GivenParts(kernel_values=S, centre_values=ideal, lo=lo, hi=hi, qlo=lo, qhi=hi, rejected_mask=rejected,
                       uncertified_mask=unc, special_mask=special, fixed_rejected_mask=rejected)
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

    return OutputJudgement(name=name, fmt=F.fp32, shape=S.shape, parts=parts, detail=detail)


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
    parts = GivenParts(kernel_values=y, centre_values=centre, lo=t_lo, hi=t_hi, qlo=q_lo, qhi=q_hi,
                       rejected_mask=rejected, uncertified_mask=unc, special_mask=special,
                       fixed_rejected_mask=rejected)

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

    return OutputJudgement(name=name, fmt=q.fmt, shape=y.shape, parts=parts, detail=detail)
