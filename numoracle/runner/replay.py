"""Replaying a saved corpus case (docs/design.md §9): its kernel re-run on the saved inputs
and parameters, then judged in both modes.

A case records its operator (a registered name, or the ``package.module:attribute`` of
your own) and its kernel (a registered name, or ``package.module:function``): both are
imported again, as ``--kernel`` would import them, so a fixed kernel passes its saved
case.  Where the kernel cannot be imported (or with ``saved_outputs=True``) the outputs
saved with the case are re-judged instead, and the result says so.  Every problem with a
case (unreadable files, an operator or kernel that does not import, a kernel that fails)
is that case's result, never an exception."""

from __future__ import annotations

from .. import backends, operators
from ..check import check
from ..corpus import load
from ..errors import InvalidArgument
from .execute import execute
from .kernels import resolve

# a replay's status, from best to worst (its exit code: 0, 1, 2)
STATUSES = ("ok", "reproduced", "corrupt")


def replay(path, *, kernel=None, backend=None, saved_outputs: bool = False, timeout: float = 120.0,
           isolate=None) -> dict:
    """Re-run and re-judge one saved case in both modes: a dict with ``status`` ("ok",
    "reproduced": a reject in either mode, a kernel failure, or non-finite outputs;
    "corrupt": the case cannot be replayed, with the ``reason`` and the file), ``passes``
    (what the case's ``expect`` asks: accepted for a bug to fix, rejected for an oracle
    regression case), each mode's verdict, and a ``note`` on what ran.  ``isolate``: run the
    kernel in the supervised worker process (default ``settings.isolate``, and always for a
    case saved from a crash, which would end this process)."""
    try:
        c = load(path)
    except InvalidArgument as exc:
        return _corrupt(path, str(exc))
    expect = c.meta.get("expect", "accept")
    base = {"path": str(c.path), "op": c.op, "kernel": c.kernel_spec, "expect": expect}
    try:
        op = operators.resolve(c.meta.get("operator") or c.op)
    except InvalidArgument as exc:
        return _corrupt(path, f"its operator cannot be found: {exc}", **base)
    try:
        backend = backends.select(backend or ("gpu" if c.meta["backend"] == "gpu" else "interpreter"))
    except InvalidArgument as exc:
        return _corrupt(path, str(exc), **base)
    dev = backend.device
    inputs = tuple(t.to(dev) for t in c.inputs)
    params = dict(c.meta["params"]) if isinstance(c.meta["params"], dict) else {}
    outs = tuple(t.to(dev) for t in c.outputs)
    note, ran = "saved outputs re-judged", False
    chosen = kernel if kernel is not None else (None if saved_outputs else c.kernel_spec)
    if chosen is not None:
        try:
            kfn, kname = resolve(op, chosen)
        except InvalidArgument as exc:
            if kernel is not None or not outs:
                return _corrupt(path, f"its kernel cannot be imported: {exc}", **base)
            note = f"saved outputs re-judged: the kernel cannot be imported ({exc})"
        else:
            finding = c.meta.get("finding") if isinstance(c.meta.get("finding"), dict) else {}
            if isolate is None and finding.get("status") == "crash":
                isolate = True
            done = execute(kfn, inputs, params, (c.meta["kernel"].get("config") or {}), timeout=timeout, device=dev,
                           isolate=isolate)
            if not done.ok:
                return {**base, "status": "reproduced", "passes": expect == "reject", "kernel_ran": True,
                        "note": f"kernel {kname} re-run on {backend}: {done.status}: {done.error}",
                        "backend": backend.name, "statuses": {}, "reproduced": True, "verdicts": {}}
            outs, ran, note = done.outputs, True, f"kernel {kname} re-run on {backend}"
    if not outs:
        return _corrupt(path, f"the case saved no outputs and its kernel {c.kernel_spec!r} was not run", **base)
    try:
        verdicts = {m: check(op.reference, outs, inputs, params, mode=m, backend=backend)
                    for m in ("statistical", "fixed")}
    except Exception as exc:  # noqa: BLE001 - outputs that cannot be judged are what the case saved
        why = str(exc) if isinstance(exc, InvalidArgument) else f"{type(exc).__name__}: {exc}"
        return {**base, "status": "reproduced", "passes": expect == "reject", "kernel_ran": ran,
                "note": f"{note}; outputs not judgeable: {why}", "backend": backend.name, "statuses": {},
                "reproduced": True, "verdicts": {}}
    from ..config import settings
    if ran and settings.default.plan_check:
        from ..plan.assume import annotate
        annotate(verdicts, op, kfn, inputs, params, kernel_kwargs=c.meta["kernel"].get("config") or {})
    for v in verdicts.values():
        v.replay = str(c.path)
    now_cert = verdicts["fixed"].certificate.to_dict()
    reproduced = any(v.status == "reject" for v in verdicts.values())
    return {**base, "status": "reproduced" if reproduced else "ok",
            "passes": (verdicts["fixed"].status == "reject") if expect == "reject" else not reproduced,
            "kernel_ran": ran, "note": note, "backend": backend.name,
            "statuses": {m: v.status for m, v in verdicts.items()},
            "saved_statuses": {m: c.meta["verdict"].get(m, {}).get("status") for m in verdicts},
            "reproduced": reproduced,
            "certificate_holds": now_cert["holds"], "certificate_same": now_cert == c.meta["certificate"],
            "verdicts": verdicts}


def _corrupt(path, reason: str, **base) -> dict:
    return {"path": str(path), **base, "status": "corrupt", "passes": False, "reason": reason,
            "reproduced": False, "statuses": {}, "verdicts": {}, "kernel_ran": False}


def worst(results) -> str:
    """The worst status among replays' results."""
    return max((r["status"] for r in results), key=STATUSES.index, default="ok")
