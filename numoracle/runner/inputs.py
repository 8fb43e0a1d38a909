"""What a kernel did to its inputs: it runs on copies of them (runner.execute; the worker
process keeps a copy on the kernel's device), and one that changed an input it does not
return as an output would have overwritten the caller's tensor (docs/design.md §9)."""

from __future__ import annotations

import torch

from ..errors import InputWritten


def _bits(t: torch.Tensor) -> torch.Tensor:
    """t's elements as integers of their width (floats compared by bits: NaN equals NaN)."""
    if t.dtype.is_floating_point or t.dtype.is_complex:
        return t.view({1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64, 16: torch.int64}
                      [t.element_size()])
    return t


def _storage(t: torch.Tensor) -> int | None:
    try:
        return t.untyped_storage().data_ptr()
    except (NotImplementedError, RuntimeError):       # a sparse tensor: no single storage
        return None


def _storages(x, out: set) -> set:
    if isinstance(x, torch.Tensor):
        out.add(_storage(x))
    elif isinstance(x, (tuple, list)):
        for v in x:
            _storages(v, out)
    elif isinstance(x, dict):
        for v in x.values():
            _storages(v, out)
    return out


def copies(inputs) -> list:
    """Copies of ``inputs``' tensors on their devices (what ``inputs_kept`` compares with)."""
    return [t.clone() if isinstance(t, torch.Tensor) else t for t in inputs]


def inputs_kept(originals, given, outputs) -> None:
    """Raise InputWritten where the kernel changed an input it was ``given`` (a copy of the
    value in ``originals``) and does not return as an output (an in-place kernel returns the
    tensor it updates): on the caller's tensors the call would have overwritten them."""
    returned = _storages(outputs, set())
    for i, (a, b) in enumerate(zip(originals, given)):
        if not isinstance(b, torch.Tensor) or not isinstance(a, torch.Tensor) or b is a:
            continue
        if b.layout != torch.strided or _storage(b) in returned:
            continue
        if b.shape != a.shape:
            raise InputWritten(f"the kernel resized its input {i} from {tuple(a.shape)} to {tuple(b.shape)} and "
                               f"does not return it: on the caller's tensor that call changes it", where=f"input {i}")
        b = b.to(a.device)
        if torch.equal(_bits(a), _bits(b)):       # one comparison and one wait a tensor
            continue
        changed = _bits(a) != _bits(b)
        at = tuple(int(k) for k in changed.nonzero()[0])
        raise InputWritten(
            f"the kernel wrote into its input {i} ({str(a.dtype).replace('torch.', '')}, {tuple(a.shape)}): "
            f"{int(changed.sum())} of {a.numel()} elements changed, the first at {at}: {a[at].item()!r} -> "
            f"{b[at].item()!r}; called on the caller's tensor it would overwrite it (a kernel that updates "
            f"an input in place returns it as an output)", where=f"input {i}")
