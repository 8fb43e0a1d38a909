"""The text of ``Verdict.explain()`` (format fixed by a snapshot test)."""

from __future__ import annotations

import re

import torch

from .. import fixed_input
from .. import formats as F
from ..statistical import lam

_LINE = re.compile(r" \[([^\]:]+):(\d+)\]")


def _site(label: str) -> str:
    return _LINE.sub(r" (\1:\2)", label)


def _num(x: float) -> str:
    return f"{x:.6g}"


def _bits(x: float, fmt: F.Format) -> str:
    if x != x:
        return f"{fmt} NaN"
    try:
        b = int(F.to_bits(torch.tensor([x], dtype=torch.float64), fmt)[0])
    except Exception:  # pragma: no cover - display only
        return str(fmt)
    width = max(1, fmt.bits // 4)
    return f"{fmt} 0x{b:0{width}X}"


def attribution(verdict, out_name: str, flat: int) -> list[tuple[str, float]]:
    """(site, share of the radius) at one element, from an uncondensed re-run."""
    refs, ctx, _ = verdict.reference_run.rerun(condensed=False)
    names = [o.name for o in verdict.outputs]
    out = refs[names.index(out_name)]
    pre = out.pre if out.pre is not None else out
    full = out.c.shape

    def at(t):
        return float(t.expand(full).reshape(-1)[flat])

    fixed, sig, det = {}, {}, {}
    for k, t in pre.form.shared.items():
        label = ctx.symbols[k][1]
        fixed[label] = fixed.get(label, 0.0) + abs(at(t.coef))
        sig[label] = sig.get(label, 0.0) + abs(at(t.coef * t.s))
    for e in pre.form.private:
        fixed[e.label] = fixed.get(e.label, 0.0) + at(e.abs)
        sig[e.label] = sig.get(e.label, 0.0) + at(e.var) ** 0.5
    for k, v in pre.form.det.items():
        det[k] = det.get(k, 0.0) + at(v)
        fixed[k] = fixed.get(k, 0.0) + at(v)
    total_fixed = sum(fixed.values())
    if verdict.mode == "fixed" or total_fixed == 0:
        shares = {k: v / total_fixed if total_fixed else 0.0 for k, v in fixed.items()}
    else:
        lm = lam(verdict.n_elements, verdict.p)
        s2 = sum(v * v for v in sig.values())
        rnd = lm * s2 ** 0.5
        d = sum(det.values())
        if rnd + d >= total_fixed:      # the statistical radius was capped by the fixed one
            shares = {k: v / total_fixed for k, v in fixed.items()}
        else:
            total = rnd + d
            shares = {k: (rnd * v * v / s2 if s2 else 0.0) / total for k, v in sig.items()}
            for k, v in det.items():
                shares[k] = shares.get(k, 0.0) + v / total
    merged: dict[str, float] = {}
    for k, v in shares.items():
        merged[_site(k)] = merged.get(_site(k), 0.0) + v
    return sorted(((k, v) for k, v in merged.items() if v > 0.005), key=lambda kv: -kv[1])


def _row_ranges(v, idx: tuple) -> list:
    """'name in [lo, hi]' of each input's row holding the element at ``idx`` (the inputs
    whose leading dimensions match it), for an uncertified element's explanation."""
    run = v.reference_run
    if run is None:
        return []
    out = []
    for name, x in zip(run.program.input_names, run.inputs):
        t = x[0] if isinstance(x, tuple) else x
        if not isinstance(t, torch.Tensor) or not t.is_floating_point() or t.ndim == 0:
            continue
        lead = idx[:-1] if len(idx) == t.ndim else ()
        if len(lead) >= t.ndim:
            continue
        try:
            row = t[lead].double() if lead else t.double()
        except IndexError:
            continue
        fin = row[torch.isfinite(row)]
        rng = f"[{_num(float(fin.min()))}, {_num(float(fin.max()))}]" if fin.numel() else "no finite value"
        extra = f", {int((~torch.isfinite(row)).sum())} non-finite" if fin.numel() < row.numel() else ""
        out.append(f"{name}{'[' + ', '.join(map(str, lead)) + ']' if lead else ''} in {rng}{extra}")
    return out


def uncertified_example(v) -> dict | None:
    """The first uncertified element of a verdict, for a run's summary: its name and index and
    the range of each input's row that holds it (``{"element": "y[2, 0]", "inputs":
    ["x[2] in [-3.4e+38, 3.4e+38]", ...]}``), or None when every element is judged."""
    for o in v.outputs:
        flat = o.uncertified.reshape(-1)
        if not bool(flat.any()):
            continue
        i = int(torch.nonzero(flat)[0])
        idx = tuple(int(k) for k in torch.unravel_index(torch.tensor(i), o.uncertified.shape)) \
            if o.uncertified.ndim else ()
        return {"element": f"{o.name}[{', '.join(map(str, idx))}]", "inputs": _row_ranges(v, idx)}
    return None


def _uncertified_lines(v, o, i) -> list:
    """An uncertified element: not judged, and why (no accepted range: there is none)."""
    idx = tuple(int(k) for k in torch.unravel_index(torch.tensor(i), o.kernel.shape)) if o.kernel.ndim else ()
    y = float(o.kernel.reshape(-1)[i])
    lines = [f"Uncertified element {o.name}[{', '.join(map(str, idx))}] (not judged)",
             f"  kernel    = {_num(y)}  ({_bits(y, o.fmt)})"]
    reasons = v.certificate.reasons() or ["the calculus has no finite bound for it (a non-finite centre or radius)"]
    lines += [f"  why       = {r}" for r in reasons[:3]]
    ranges = _row_ranges(v, idx)
    if ranges:
        lines.append("  inputs    = " + "; ".join(ranges))
    return lines


def _index(flat: int, shape) -> str:
    idx = tuple(int(k) for k in torch.unravel_index(torch.tensor(flat), tuple(shape))) if len(shape) else ()
    return "(" + ", ".join(map(str, idx)) + ("," if len(idx) == 1 else "") + ")"


def differences(v) -> list:
    """The greatest absolute and relative difference of the kernel's outputs from the reference's
    centre, in ``torch.testing.assert_close``'s words (over the elements where both are finite;
    the relative one divides by |centre|, as assert_close divides by |expected|).  One pair per
    output, named after it where there are several."""
    lines = []
    outs = [o for o in v.outputs if getattr(o, "numel", 0) and getattr(o, "centre", None) is not None]
    for o in outs:
        where = f" of {o.name}" if len(outs) > 1 else ""
        if o.kind == "index":
            # indices have no size of difference: how many differ from the reference's own choice
            other = int((o.kernel != o.centre).sum())
            lines.append(f"Indices other than the reference's own choice: {other} / {o.numel}{where}")
            continue
        k, c = o.kernel.double().reshape(-1), o.centre.double().reshape(-1)
        ok = torch.isfinite(k) & torch.isfinite(c)
        if not bool(ok.any()):
            continue
        diff = torch.where(ok, (k - c).abs(), torch.full_like(k, -1.0))
        rel = torch.where(ok, diff / c.abs(), torch.full_like(k, -1.0))
        rel = torch.where(ok & (diff == 0), torch.zeros_like(rel), rel)      # 0/0: no difference
        ia, ir = int(torch.argmax(diff)), int(torch.argmax(rel))
        lines.append(f"Greatest absolute difference: {float(diff[ia])} at index {_index(ia, o.kernel.shape)}{where}")
        lines.append(f"Greatest relative difference: {float(rel[ir])} at index {_index(ir, o.kernel.shape)}{where}")
    return lines


def explain(v) -> str:
    head = {"reject": "Kernel output outside its acceptance region",
            "accept": "Kernel output inside its acceptance region",
            "uncertified": "Kernel output not judged everywhere: incomplete finite-range certificate"}[v.status]
    lines = [f"{head} ({v.program}, {v.mode}, p={v.p:g})"]
    n = v.n_elements
    nr = v.n_rejected
    nspecial = sum(int(o.special.sum()) for o in v.outputs)
    lines.append(f"Rejected: {nr} / {n} ({100.0 * nr / max(n, 1):.2f}%)   special values: "
                 f"{'ok' if nspecial == 0 else f'{nspecial} NaN/inf where a finite value is certain'}"
                 f"   shape/dtype: ok")
    if v.n_uncertified:
        why = v.certificate.summary()
        if v.certificate.holds and v.certificate.inputs == "finite":
            # every site holds: the region itself is not finite (verdict.regions.region_of)
            why = ("every site's certificate holds, but the value before the store is not a number with a "
                   "finite bound there (an infinity that carries an error, or NaN)")
        lines.append(f"Uncertified: {v.n_uncertified} / {n} — {why}")
    if v.confirmation:
        lines.append(fixed_input.CONFIRMATION_TEXT[v.confirmation])
    w = v.worst()
    if w is not None and w[0].kind == "index":
        o, i, _ = w
        idx = tuple(int(k) for k in torch.unravel_index(torch.tensor(i), o.kernel.shape)) if o.kernel.ndim else ()
        head = ("Uncertified" if bool(o.uncertified.reshape(-1)[i]) else
                "Worst" if v.status == "reject" else "Closest to its bounds:")
        lines.append(f"{head} element {o.name}[{', '.join(map(str, idx))}] (an index output)")
        lines += o.detail(i)
    elif w is not None and bool(w[0].uncertified.reshape(-1)[w[1]]):
        lines += _uncertified_lines(v, w[0], w[1])
    elif w is not None:
        o, i, excess = w
        idx = tuple(int(k) for k in torch.unravel_index(torch.tensor(i), o.kernel.shape)) if o.kernel.ndim else ()
        y = float(o.kernel.reshape(-1)[i])
        lines.append(f"{'Worst' if v.status == 'reject' else 'Closest to its bounds:'} element "
                     f"{o.name}[{', '.join(map(str, idx))}]")
        lines.append(f"  kernel    = {_num(y)}  ({_bits(y, o.fmt)})")
        lines.append(f"  accepted  = [{_num(float(o.qlo.reshape(-1)[i]))}, {_num(float(o.qhi.reshape(-1)[i]))}]"
                     f"   reference = {_num(float(o.centre.reshape(-1)[i]))}")
        lines.append(f"  interval  = [{float(o.lo.reshape(-1)[i]):.9g}, {float(o.hi.reshape(-1)[i]):.9g}] "
                     f"before the {o.fmt} store")
        if bool(o.rejected.reshape(-1)[i]) and not bool(o.special.reshape(-1)[i]):
            side = "above the upper" if y > float(o.hi.reshape(-1)[i]) else "below the lower"
            lines.append(f"  excess    = {abs(excess):.3g} ulp({o.fmt}) {side} bound")
        lo_i, hi_i, c_i = (float(t.reshape(-1)[i]) for t in (o.lo, o.hi, o.centre))
        ulp_i = float(F.ulp(torch.tensor([abs(c_i)], dtype=torch.float64), o.fmt)[0])
        if hi_i - lo_i <= 1e-6 * ulp_i:
            # decided casts made every earlier rounding exact: nothing to attribute
            lines.append("  width     = none: every rounding before the store is decided, so the value "
                         "before the store is known exactly")
        elif v.reference_run is not None:
            shares = attribution(v, o.name, i)
            if shares:
                top = shares[:4]
                text = " · ".join(f"{k} ({100 * s:.0f}%)" for k, s in top)
                rest = sum(s for _, s in shares[4:])
                if rest > 0.005:
                    text += f" · other ({100 * rest:.0f}%)"
                lines.append(f"  width     = {text}")
    lines += differences(v)
    if getattr(v.assumptions, "caution", None):
        lines.append("Caution: " + v.assumptions.caution)
    lines.append("Assumptions: " + "; ".join(v.assumptions.lines()))
    if v.replay:
        lines.append(f"Replay: numoracle replay {v.replay}")
    return "\n".join(lines)
