"""The miscompile safety net: a signature's first compiled call (and its regions
function's first call) is compared with the same tensor code run eagerly, and every
compiled verdict that is not a plain accept with its regions computed again (``Mismatch``
where they disagree); a mismatch leaves the signature eager instead of judging wrongly."""

from __future__ import annotations

import re

import torch

# the tensors of a quantizer output's judgement, in the order the compiled function returns them
QUANTIZER_PARTS = ("centre", "lo", "hi", "qlo", "qhi", "rejected", "uncertified")
REGION_PARTS = ("centre", "fixed", "stat", "taint")


class Mismatch(RuntimeError):
    """A compiled verdict's flags that its regions, computed again, do not give."""


def close(a: torch.Tensor, b: torch.Tensor, radius: torch.Tensor | None = None) -> bool:
    """Equal up to float64 evaluation order: within 2**-40 relative, or, for a centre,
    within 2**-12 of its region's worst-case radius; non-finite values exactly.  A centre
    can lose all relative accuracy to cancellation (layer_norm's x - mean near the mean),
    while its radius holds every rounding of the reference (at least a unit roundoff of the
    operands of each fp32 step): a float64 reordering moves the centre by about 2**-41 of the
    operands, far below 2**-12 of the radius, and a lost fp32 rounding by up to half an fp32
    step, a fair part of it."""
    fin = torch.isfinite(a) & torch.isfinite(b)
    tol = 2.0 ** -40 * (a.abs() + b.abs())
    if radius is not None:
        tol = tol + 2.0 ** -12 * torch.where(torch.isfinite(radius), radius, torch.zeros_like(radius))
    near = (a - b).abs() <= tol
    same = (a == b) | (a.isnan() & b.isnan())
    return bool(torch.where(fin, near, same).all())


def compare(flags, want, regions, want_regions) -> None:
    """Compiled flags (and regions, where returned) against the same code's eager ones;
    raises RuntimeError on a difference."""
    if not torch.equal(flags.cpu(), want.cpu()):
        raise RuntimeError(f"the compiled flags {flags.tolist()} differ from the eager ones {want.tolist()}")
    for got, ref in zip(regions[:1], want_regions[:1]):
        for j, (g, r) in enumerate(zip(got, ref)):
            names = QUANTIZER_PARTS if len(g) == len(QUANTIZER_PARTS) else REGION_PARTS
            for name, a, b in zip(names, g, r):
                # masks and a quantizer's code bounds exactly; a region's centre against its radius
                exact = not a.is_floating_point() or (names is QUANTIZER_PARTS and name in ("qlo", "qhi"))
                radius = torch.maximum(g[1], r[1]) if names is REGION_PARTS and name == "centre" else None
                if not (torch.equal(a, b) if exact else close(a, b, radius)):
                    raise RuntimeError(f"output {j}'s compiled regions ({name}) differ from the eager ones")


def _same_site(what: str, label: str) -> bool:
    """Whether an eager label (which ends with the program line) is the traced site ``what``,
    in which a symbolic size (or a number computed from one) reads ``<n>`` (``Context.count``)
    for the eager run's number."""
    if "<n>" not in what:
        return label.startswith(what)
    return re.match(re.escape(what).replace(re.escape("<n>"), "[0-9.e+-]+"), label) is not None


def check_sites(traced, eager) -> None:
    """The traced program's sites ((what, kind) each) against an eager run's (label, kind,
    ...): the same sites in the same order, or RuntimeError."""
    if len(traced) != len(eager) or any(
            kind != s[1] or not _same_site(what, s[0]) for (what, kind), s in zip(traced, eager)):
        raise RuntimeError(f"the traced program has sites {[w for w, _ in traced]} where the eager "
                           f"run had {[s[0] for s in eager]}")
