"""Replaying a saved corpus case (docs/design.md §9): its kernel re-run on the saved inputs
and parameters, then judged in both modes.

A case records its operator (a registered name, or the ``package.module:attribute`` of
your own) and its kernel (a registered name, or ``package.module:function``): both are
imported again, as ``--kernel`` would import them, so a fixed kernel passes its saved
case.  Where the kernel cannot be imported (or with ``saved_outputs=True``) the outputs
saved with the case are re-judged instead, and the result says so.  Every problem with a
case (unreadable or inconsistent files, an operator or kernel that does not import,
parameters or inputs its operator does not take, a kernel that fails) is that case's
result, never an exception.

Before any kernel runs, the case is held to its operator: the parameters to the
reference's choices, the number of inputs to its arguments, and the saved inputs to what
the reference program can run on (labels in range, shapes that fit); a case that fails
there is corrupt, not a finding.  The reference is evaluated once per replay, with
non-finite inputs judged as ``nonfinite='uncertified'`` does (the elements they reach are
uncertified, the others judged), so a case whose inputs hold NaN or infinity replays.

A case saved from a kernel error, timeout or crash records it under ``finding`` (and no
judged outputs): its kernel is re-run (a crash's in the supervised worker), and its failing
again reproduces it; with ``saved_outputs`` a kernel error's saved outputs that cannot be
judged reproduce it too, where a reject's saved outputs that no longer fit are corrupt."""

from __future__ import annotations

import math
from pathlib import Path

from .. import backends, operators
from ..check import evaluate
from ..corpus import ARRAYS_FILE, load, read_meta
from ..errors import InvalidArgument, NotImportable
from ..verdict.evaluation import check_params, outputs_list
from .execute import execute
from .kernels import resolve

# a replay's status, from best to worst (its exit code: 0, 1, 2)
STATUSES = ("ok", "reproduced", "corrupt")
MODES = ("statistical", "fixed")
# the findings saved with judged outputs (the others: a kernel error, timeout or crash)
JUDGED = ("reject", "nan", "statistical_only", "uncertified", "accept")


def replay(path, *, kernel=None, backend=None, saved_outputs: bool = False, timeout: float = 120.0,
           isolate=None) -> dict:
    """Re-run and re-judge one saved case in both modes: a dict with ``status`` ("ok",
    "reproduced": a reject in either mode, a kernel failure, or non-finite outputs;
    "corrupt": the case cannot be replayed, with the ``reason`` naming the file, and ``here``
    true where the case is sound but cannot run in this process or on this machine), ``passes``
    (what the case's ``expect`` asks: accepted for a bug to fix, rejected for an oracle
    regression case), each mode's verdict, and a ``note`` on what ran.  ``isolate``: run the
    kernel in the supervised worker process (default ``settings.isolate``, and always for a
    case saved from a crash, which would end this process).  Raises InvalidArgument only for
    the caller's own arguments (``backend``, ``timeout``, ``isolate``)."""
    if backend is not None:
        backends.select(backend)            # the caller's backend: refused here, not once per case
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not (
            math.isfinite(timeout) and timeout > 0):
        raise InvalidArgument(f"timeout={timeout!r}: expected a number of seconds > 0 (the kernel's time limit).")
    if isolate is not None and not isinstance(isolate, bool):
        raise InvalidArgument(f"isolate={isolate!r}: expected True (the kernel in the supervised worker), False "
                              f"(in this process) or None (settings.isolate).")
    try:
        return _replay(path, kernel, backend, saved_outputs, timeout, isolate)
    except Exception as exc:
        # the last guard of a long replay: whatever this numoracle fails on is the case's result
        detail = " ".join(str(exc).split())[:300]
        return corrupt(path, f"replaying it failed in a way numoracle does not name ({type(exc).__name__}: "
                              f"{detail}); the case may be corrupt, or this is a numoracle bug: please report it "
                              f"with the case.")


def _replay(path, kernel, backend, saved_outputs, timeout, isolate) -> dict:
    try:
        cj, meta = read_meta(path)
    except InvalidArgument as exc:
        return corrupt(path, str(exc))
    npz = cj.parent / ARRAYS_FILE
    expect = meta.get("expect", "accept")
    spec = meta["kernel"]["spec"]
    base = {"op": meta["op"], "kernel": spec, "expect": expect}

    # the operator, and the case held to it, before any array is decompressed
    opspec = meta.get("operator") or meta["op"]
    try:
        op = operators.resolve(opspec)
    except InvalidArgument as exc:
        return corrupt(path, f"{cj}: its operator {opspec!r} cannot be found: {exc}{_import_hint(path, opspec)}",
                       here=isinstance(exc, NotImportable), **base)
    except (Exception, SystemExit) as exc:      # the case names a module whose import fails
        what = f"SystemExit({exc.code!r})" if isinstance(exc, SystemExit) else f"{type(exc).__name__}: {exc}"
        return corrupt(path, f"{cj}: importing its operator {opspec!r} raised {what}; fix the module or the "
                              f"case's 'operator'.", **base)
    if op.name != meta["op"]:
        return corrupt(path, f"{cj}: records op {meta['op']!r}, but its operator {opspec!r} is {op.name!r}; the "
                              f"case is corrupt.", **base)
    params = dict(meta["params"])
    try:
        check_params(op.reference, params)
    except InvalidArgument as exc:
        return corrupt(path, f"{cj}: its params do not fit {op.name}: {exc}", **base)
    takes = op.reference.input_names
    if len(meta["inputs"]) != len(takes):
        return corrupt(path, f"{cj}: records {len(meta['inputs'])} input(s), but {op.name} takes {len(takes)} "
                              f"({', '.join(takes)}); the case is corrupt.", **base)
    config = meta["kernel"].get("config") or {}
    # what was found (main's saves record it; older cases are rejects): a kernel error, timeout
    # or crash is saved without judged outputs
    finding = meta.get("finding")
    judged = finding is None or finding["status"] in JUDGED

    try:
        c = load(path)
    except InvalidArgument as exc:
        return corrupt(path, str(exc), **base)
    try:
        chosen_backend = backends.select(backend or meta["backend"])
    except InvalidArgument as exc:
        return corrupt(path, f"{cj}: records backend {meta['backend']!r}, which cannot run here: {exc}", here=True,
                       **base)
    dev = chosen_backend.device
    inputs = tuple(t.to(dev) for t in c.inputs)
    outs = tuple(t.to(dev) for t in c.outputs)

    # the reference on the saved inputs before a kernel runs on them: inputs the reference
    # cannot run on (labels out of range, shapes that do not fit) are a corrupt case
    # the launch values the saved verdict read (no.launch() parameters); a re-run's own replace them
    saved_launch = {**config, **(meta.get("launch") or {})}
    try:
        ev = evaluate(op.reference, inputs, params, backend=chosen_backend, nonfinite="uncertified",
                      launch=saved_launch)
    except InvalidArgument as exc:
        return corrupt(path, f"{npz}: the saved inputs do not fit {op.name}: {exc}", **base)

    note, ran = "saved outputs re-judged", False
    chosen = kernel if kernel is not None else (None if saved_outputs else spec)
    if chosen is not None:
        failure, here = None, False
        try:
            kfn, kname = resolve(op, chosen)
        except InvalidArgument as exc:
            failure, here = f"{exc}{_import_hint(path, chosen)}", isinstance(exc, NotImportable)
        except (Exception, SystemExit) as exc:   # a registered kernel's module failing to import
            failure = f"importing it raised {type(exc).__name__}: {exc}"
        if failure is not None:
            if kernel is not None:
                return corrupt(path, f"the kernel {kernel!r} cannot be imported: {failure}", here=here, **base)
            if not outs:
                return corrupt(path, f"{cj}: the case saved no outputs and its kernel {spec!r} cannot be "
                                      f"imported: {failure}", here=here, **base)
            note = f"saved outputs re-judged: the kernel cannot be imported ({failure})"
        else:
            if isolate is None and finding is not None and finding["status"] == "crash":
                isolate = True              # a crash would end this process
            done = execute(kfn, inputs, params, config, timeout=timeout, device=dev, isolate=isolate)
            if not done.ok:
                return {"path": str(c.path), **base, "status": "reproduced", "passes": expect == "reject", "kernel_ran": True,
                        "note": f"kernel {kname} re-run on {chosen_backend}: {done.status}: {done.error}",
                        "backend": chosen_backend.name, "statuses": {}, "reproduced": True, "verdicts": {}}
            # one output comes back bare: a tensor's truth value is no test of "no outputs"
            outs, ran, note = tuple(outputs_list(done.outputs)), True, f"kernel {kname} re-run on {chosen_backend}"
            now = {**config, **(done.launch or {})}
            if op.reference.launch_params and any(now.get(k) != saved_launch.get(k) for k in op.reference.launch_params):
                ev = evaluate(op.reference, inputs, params, backend=chosen_backend, nonfinite="uncertified",
                              launch=now)
    if not outs:
        what = "the case saved no outputs" if judged else \
            f"the case is a {finding['status']} finding, saved without outputs,"
        return corrupt(path, f"{cj}: {what} and its kernel {spec!r} was not run (saved outputs asked for); "
                              f"replay it with its kernel.", **base)
    try:
        verdicts = ev.judge(outs, MODES)
    except Exception as exc:  # noqa: BLE001 - outputs that cannot be judged: the case's finding, or corrupt
        if not ran and judged and isinstance(exc, InvalidArgument):
            # a reject's saved outputs were judged when it was saved: now they do not fit, so the
            # case is damaged (a kernel error's saved outputs are kept to meet its error again)
            return corrupt(path, f"{npz}: the saved outputs do not fit {op.name}: {exc}", **base)
        why = str(exc) if isinstance(exc, InvalidArgument) else f"{type(exc).__name__}: {exc}"
        return {"path": str(c.path), **base, "status": "reproduced", "passes": expect == "reject", "kernel_ran": ran,
                "note": f"{note}; outputs not judgeable: {why}", "backend": chosen_backend.name, "statuses": {},
                "reproduced": True, "verdicts": {}}
    from ..config import settings
    if ran and settings.default.plan_check:
        from ..plan.assume import annotate
        annotate(verdicts, op, kfn, inputs, params, kernel_kwargs=config)
    for v in verdicts.values():
        v.replay = str(c.path)
    names = [o.name for o in verdicts["fixed"].outputs]
    now_cert = verdicts["fixed"].certificate.to_dict()
    reproduced = any(v.status == "reject" for v in verdicts.values())
    return {"path": str(c.path), **base, "status": "reproduced" if reproduced else "ok",
            "passes": (verdicts["fixed"].status == "reject") if expect == "reject" else not reproduced,
            "kernel_ran": ran, "note": note, "backend": chosen_backend.name,
            "statuses": {m: v.status for m, v in verdicts.items()},
            "saved_statuses": {m: meta["verdict"].get(m, {}).get("status") for m in verdicts},
            "reproduced": reproduced, "outputs": names,
            "failure_class": named_failure_class(meta.get("failure_class"), names),
            "certificate_holds": now_cert["holds"], "certificate_same": now_cert == meta["certificate"],
            "verdicts": verdicts}


def named_failure_class(fc, names):
    """A saved failure class with its output named as the reference names it: cases saved before
    outputs had names recorded an index (0) or a positional name (``out0``)."""
    if not isinstance(fc, list) or not fc:
        return fc
    head = fc[0]
    j = head if isinstance(head, int) and not isinstance(head, bool) else (
        int(head[3:]) if isinstance(head, str) and head.startswith("out") and head[3:].isdigit() else None)
    if j is not None and 0 <= j < len(names):
        return [names[j], *fc[1:]]
    return fc


def _import_hint(path, spec: str) -> str:
    """Where a case's own ``package.module:attribute`` is importable from, when not from here.
    Corpora are saved under the directory a run started in (``corpora/OP/KERNEL/ID``, and the
    pytest plugin's ``.numoracle/corpus/...``), so the case's nearest ancestor holding the
    spec's top-level package is named.  Nothing is imported from there."""
    if not isinstance(spec, str) or ":" not in spec:
        return ""
    top = spec.split(":", 1)[0].split(".", 1)[0]
    here = Path.cwd().resolve()
    for d in list(Path(path).resolve().parents)[:6]:
        if (d / top).is_dir() or (d / f"{top}.py").is_file():
            return "" if d == here else (f" The case lies under {d}, which holds {top!r}: replay it from there, "
                                         f"or put {d} on PYTHONPATH.")
    return ""


def corrupt(path, reason: str, *, here: bool = False, **base) -> dict:
    """The result of a case that cannot be replayed (``reason`` names the file and the problem).
    ``here``: the case itself is sound but this process cannot run it (its operator or kernel
    does not import from here, its backend is missing on this machine)."""
    return {"path": str(path), **base, "status": "corrupt", "here": here, "passes": False, "reason": reason,
            "reproduced": False, "statuses": {}, "verdicts": {}, "kernel_ran": False}


def worst(results) -> str:
    """The worst status among replays' results."""
    return max((r["status"] for r in results), key=STATUSES.index, default="ok")
