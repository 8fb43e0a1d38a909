"""Replaying a saved corpus case (docs/design.md §9): its inputs, parameters and kernel
outputs re-judged in both modes, its kernel re-run when it can be."""

from __future__ import annotations

from .. import backends, operators
from ..check import check
from ..corpus import load
from ..errors import InvalidArgument
from .execute import KernelTimeout, call_kernel
from .kernels import resolve


def replay(path, *, kernel=None, backend=None) -> dict:
    """Re-judge a saved case in both modes.  The kernel is re-run when it is a
    registered kernel of the operator or given as ``kernel`` (a spec or a
    callable); otherwise the saved outputs are re-judged.  Returns a dict with
    each mode's verdict and ``reproduced`` (a reject in either mode)."""
    c = load(path)
    op = operators.get(c.op)
    backend = backends.select(backend or ("gpu" if c.meta["backend"] == "gpu" else "interpreter"))
    dev = backend.device
    inputs = tuple(t.to(dev) for t in c.inputs)
    params = dict(c.meta["params"])
    spec = c.kernel_spec
    ran, note = False, "saved outputs re-judged (kernel not registered; pass --kernel to re-run it)"
    outs = tuple(t.to(dev) for t in c.outputs)
    chosen = kernel if kernel is not None else (spec if op.has_kernel(spec) else None)
    if chosen is not None:
        kfn, kname = resolve(op, chosen)
        try:
            outs = call_kernel(kfn, inputs, params, dict(c.meta["kernel"].get("config") or {}), timeout=120.0,
                               device=dev)
            ran, note = True, f"kernel {kname} re-run on {backend}"
        except KernelTimeout as exc:
            return {"path": str(c.path), "op": c.op, "kernel": spec, "error": str(exc), "reproduced": False,
                    "statuses": {}, "expect": c.meta.get("expect", "accept")}
    if not outs:
        raise InvalidArgument(f"{c.path}: the case saved no outputs and its kernel {spec!r} is not registered; "
                              f"pass --kernel {spec} to re-run it.")
    verdicts = {m: check(op.reference, outs, inputs, params, mode=m, backend=backend)
                for m in ("statistical", "fixed")}
    for v in verdicts.values():
        v.replay = str(c.path)
    saved_cert = c.meta["certificate"]
    now_cert = verdicts["fixed"].certificate.to_dict()
    return {"path": str(c.path), "op": c.op, "kernel": spec, "kernel_ran": ran, "note": note,
            "backend": backend.name,
            "statuses": {m: v.status for m, v in verdicts.items()},
            "saved_statuses": {m: c.meta["verdict"].get(m, {}).get("status") for m in verdicts},
            "reproduced": any(v.status == "reject" for v in verdicts.values()),
            "certificate_holds": now_cert["holds"], "certificate_same": now_cert == saved_cert,
            "expect": c.meta.get("expect", "accept"), "verdicts": verdicts}
