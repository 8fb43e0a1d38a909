"""Holding the caller's tensors instead of copying them, and copying them fast.

An accepted compiled verdict keeps references to the tensors it judged, with a
fingerprint of each that the compiled function computes as it reads them; its regions,
kernel values and certificate are computed from those tensors when first asked for,
after the fingerprints are checked (``TensorsChanged`` if the caller overwrote one
meanwhile).  A verdict that rejects, is uncertified or saw a non-finite input copies
them: its explanation is what is read.  (Setting ``hold_accepted``; why holding pays:
docs/results/INDEX.md, "holding".)  The fingerprint is not cryptographic: it guards
against accidental reuse of buffers, not against an adversary."""

from __future__ import annotations

import torch

# the integer type whose values are a tensor's bits, per element size
_BITS = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def as_bits(t: torch.Tensor):
    """t's elements as integers of their size (a view), or None where there are none (complex)."""
    if t.is_complex() or t.element_size() not in _BITS:
        return None
    return t.view(_BITS[t.element_size()])


# Every term and partial sum of a fingerprint stays far inside int64: Inductor's C++ leaves signed
# overflow undefined, and a wrapping weight (an odd 64-bit constant) made compiled and eager
# fingerprints differ.  Positions weigh i + 1, an index expression, not a cycle (``i % 61``):
# Inductor's CPU code runs an index remainder one element at a time, which made the row loops it
# was fused into scalar (docs/results/2026-12-03-stream-kernel.md).  Up to this many positions
# the sum of 16-bit values times i + 1 stays below 2^16 * n^2 / 2 < 2^63; longer axes cycle.
_LINEAR_UP_TO = 2 ** 23


def _fold16(b: torch.Tensor) -> torch.Tensor:
    """int64 values folded to 16 bits (0 <= v < 2^16) by exclusive-or of their four quarters."""
    return (b ^ (b >> 16) ^ (b >> 32) ^ (b >> 48)) & 0xFFFF


def _weighed(v: torch.Tensor) -> torch.Tensor:
    """The sum along the last axis of v (int64, |v| < 2^16) times a weight per position."""
    n = v.shape[-1]
    i = torch.arange(n, device=v.device, dtype=torch.int64)
    # a symbolic size becomes a guard here: one more trace, for rows longer than 2^23 only
    weight = i + 1 if n <= _LINEAR_UP_TO else i % 61 + 1
    return (v * weight).sum(-1)


def _bits(t: torch.Tensor) -> torch.Tensor:
    """t's elements' bits as int64 values.  A bf16 CPU tensor's go through float32, whose bits
    are a bf16's followed by 16 zeros (a shift, in eager and compiled code alike): Inductor's
    CPU code vectorises float32 and int32 but not int16, and a scalar fingerprint made the row
    loops it was fused into scalar (docs/performance.md, "Fingerprints, bit views, positions and
    row ends")."""
    if t.dtype == torch.bfloat16 and t.device.type == "cpu":
        return (t.float().view(torch.int32) >> 16).to(torch.int64)
    return as_bits(t).to(torch.int64)


def fingerprint(t: torch.Tensor) -> torch.Tensor:
    """An int64 that a change of t's bits almost surely changes: each element's bit pattern
    (folded to 16 bits where wider) times a weight that grows with its position (so that
    moved values count too), summed along the last axis first, where a verdict's row loops
    read t; then the rows' sums, folded, weighed by row."""
    bits = _bits(t)
    if t.element_size() > 2:
        bits = _fold16(bits)
    if bits.dim() == 0:
        return bits
    rows = _weighed(bits).reshape(-1)
    return _weighed(_fold16(rows))


def fingerprints(tensors) -> list:
    """The tensors' fingerprints, read to the host."""
    return torch.stack([fingerprint(t) for t in tensors]).tolist()


def holdable(tensors) -> bool:
    """Whether the tensors have fingerprints: integer-viewable, on one device."""
    return (bool(tensors) and len({t.device for t in tensors}) == 1
            and all(as_bits(t) is not None for t in tensors))


def guard(name, tensors, prints):
    """A function that raises ``TensorsChanged`` once the tensors no longer have the
    fingerprints ``prints``; None where the verdict keeps copies (``prints`` None)."""
    if prints is None:
        return None

    def check():
        from ...errors import TensorsChanged
        now = fingerprints(tensors)
        changed = [i for i, (a, b) in enumerate(zip(now, prints)) if a != b]
        if changed:
            which = (f"tensors {', '.join(map(str, changed))} were" if len(changed) > 1
                     else f"tensor {changed[0]} was")
            raise TensorsChanged(
                f"numoracle: a tensor that {name}'s accepted verdict judged changed after check() "
                f"returned ({which} overwritten; inputs then outputs, counted from 0). Its "
                f"regions, kernel values and certificate are computed from the tensors when "
                f"first asked for: read them before reusing the buffers, pass check() copies, "
                f"or judge with settings(hold_accepted=False) to have every verdict copy them.")
    return check


def copy_into(dsts, srcs) -> None:
    """dst.copy_(src) for each pair, as their bits: one launch per element size on a GPU
    (torch's fused copy takes one dtype at a time); as bits, fp8 values copy as fast as
    bytes."""
    groups: dict = {}
    for d, s in zip(dsts, srcs):
        bits = as_bits(s) if s.dtype == d.dtype else None
        if bits is not None:
            d, s = as_bits(d), bits
        ds, ss = groups.setdefault(s.dtype, ([], []))
        ds.append(d)
        ss.append(s)
    for ds, ss in groups.values():
        torch._foreach_copy_(ds, ss)


def copies(tensors) -> list:
    """Copies of the tensors, in one launch per dtype where they are on a GPU."""
    if not tensors or tensors[0].device.type != "cuda":
        return [t.clone() for t in tensors]
    out = [torch.empty_like(t) for t in tensors]
    copy_into(out, tensors)
    return out
