"""Corpora: shrunk, confirmed counterexamples saved as plain files and
replayable forever (docs/design.md §9).

A case is a directory ``<corpus>/<op>/<kernel>/<id>/`` holding

* ``inputs.npz``: the raw bits of every input (``input0``, ``input1``, ...) and of
  the kernel's outputs when saved (``output0``, ...), as unsigned integers of
  the format's width (integer inputs such as labels as they are).  Read by a bounded
  reader of its own that refuses object arrays: nothing in a corpus is ever unpickled;
* ``case.json``: schema version, operator, kernel spec and config, parameters,
  backend, mode, seed and input group, the formats and shapes of the arrays,
  the versions it was found with, the verdict in both modes, the failure
  class, and the finite-range certificate.

Cases are written to a temporary directory next to their final place, every
file fsynced, then renamed into place: a killed run leaves no half-written
case.  The id is a digest of operator, kernel and input bits, so saving the
same counterexample twice gives one case.  A kernel named in ``case.json`` is
imported only when it is registered with the operator or passed explicitly
(``numoracle.runner.replay(..., kernel=...)`` / ``--kernel``); otherwise the saved
outputs are re-judged.  This module stores and reads cases; replaying them (running a
kernel) is the runner's.
"""

from __future__ import annotations

import datetime as _dt
import errno
import hashlib
import json
import math
import os
import platform
import shutil
import stat
import struct
import zipfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from . import formats as F
from .backends import RUNNING
from .errors import InvalidArgument

SCHEMA = "numoracle.corpus/1"
CASE_FILE = "case.json"
ARRAYS_FILE = "inputs.npz"
_REQUIRED = ("schema", "id", "op", "kernel", "params", "backend", "mode", "inputs", "verdict", "certificate")
_UINT = {8: np.uint8, 16: np.uint16, 32: np.uint32, 64: np.uint64}
_SINT_TORCH = {8: torch.uint8, 16: torch.int16, 32: torch.int32, 64: torch.int64}
_INT_DTYPES = {"int64": torch.int64, "int32": torch.int32, "int16": torch.int16, "int8": torch.int8,
               "uint8": torch.uint8, "bool": torch.bool}


# ---- tensors <-> raw bits -----------------------------------------------------------

def _to_raw(t: torch.Tensor):
    """(numpy array of raw bits, record) for one tensor."""
    t = t.detach().cpu().contiguous()
    if t.dtype.is_floating_point:
        fmt = F.from_dtype(t.dtype)
        width = t.element_size() * 8
        arr = t.view(_SINT_TORCH[width]).numpy().view(_UINT[width])
        return arr, {"format": fmt.name, "dtype": str(t.dtype).removeprefix("torch."), "shape": list(t.shape)}
    name = str(t.dtype).removeprefix("torch.")
    if name not in _INT_DTYPES:
        raise InvalidArgument(f"cannot save a {t.dtype} tensor in a corpus; expected a floating-point format "
                              f"or one of {sorted(_INT_DTYPES)}.")
    return t.numpy(), {"format": None, "dtype": name, "shape": list(t.shape)}


def _from_raw(arr: np.ndarray, rec: dict, where: str) -> torch.Tensor:
    shape = tuple(rec.get("shape", ()))
    if tuple(arr.shape) != shape:
        raise InvalidArgument(f"{where}: array has shape {tuple(arr.shape)} but case.json records {list(shape)}; "
                              f"the case is corrupt (re-save it).")
    dname = rec.get("dtype")
    if rec.get("format"):
        fmt = F.by_name(rec["format"])
        dt = getattr(torch, str(dname), None)
        if not isinstance(dt, torch.dtype) or not dt.is_floating_point or F.from_dtype(dt) is not fmt:
            raise InvalidArgument(f"{where}: dtype {dname!r} does not hold format {fmt.name}; case.json is corrupt "
                                  f"or from another tool.")
        width = torch.empty((), dtype=dt).element_size() * 8
        if arr.dtype != _UINT[width]:
            raise InvalidArgument(f"{where}: expected raw bits as {np.dtype(_UINT[width]).name} for {fmt.name}, "
                                  f"found {arr.dtype}; the case is corrupt.")
        signed = arr.view(np.dtype(f"int{width}")) if width > 8 else arr
        return torch.from_numpy(np.ascontiguousarray(signed)).view(dt).clone()
    if dname not in _INT_DTYPES:
        raise InvalidArgument(f"{where}: unknown dtype {dname!r}; expected a format or one of {sorted(_INT_DTYPES)}.")
    if arr.dtype != np.dtype(dname):
        raise InvalidArgument(f"{where}: expected {dname}, found {arr.dtype}; the case is corrupt.")
    return torch.from_numpy(np.ascontiguousarray(arr)).clone()


def _outputs_list(outs):
    return list(outs) if isinstance(outs, (tuple, list)) else [outs]


def versions() -> dict:
    import hypothesis

    from . import __version__
    v = {"numoracle": __version__, "python": platform.python_version(), "torch": torch.__version__,
         "numpy": np.__version__, "hypothesis": hypothesis.__version__}
    try:
        import triton
        v["triton"] = triton.__version__
    except Exception:  # pragma: no cover - triton is a dependency, but corpora are readable without it
        v["triton"] = None
    if torch.cuda.is_available():
        v["device"] = torch.cuda.get_device_name(0)
    return v


def _jsonable(x):
    if isinstance(x, dict):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    if isinstance(x, (str, int, float, bool)) or x is None:
        return x
    if isinstance(x, torch.Tensor) and x.numel() == 1:
        return x.item()
    return repr(x)


def _verdict_summary(v) -> dict:
    d = v.to_dict()
    d.pop("certificate", None)
    return d


def slug(spec: str) -> str:
    """A directory name for a kernel spec (corpora/<op>/<kernel>/...)."""
    out = "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in spec.replace(":", "."))
    return out.strip("._") or "kernel"


def case_id(op: str, kernel: str, arrays: dict) -> str:
    h = hashlib.sha256(f"{op}\0{kernel}\0".encode())
    for k in sorted(arrays):
        h.update(k.encode())
        h.update(str(arrays[k].dtype).encode())
        h.update(str(arrays[k].shape).encode())
        h.update(np.ascontiguousarray(arrays[k]).tobytes())
    return h.hexdigest()[:12]


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _clean_stale(directory: Path) -> None:
    """Remove the temporary directories of saves whose process is gone (a killed run):
    their name ends in the saving process's pid."""
    try:
        entries = list(directory.iterdir())
    except OSError:
        return
    for e in entries:
        if not e.name.startswith(".tmp-"):
            continue
        pid = e.name.rpartition("-")[2]
        if pid.isdigit() and int(pid) != os.getpid() and not _pid_alive(int(pid)):
            shutil.rmtree(e, ignore_errors=True)


def save(corpus, op, kernel_spec: str, outcome, *, backend: str, mode: str, expect: str = "accept",
         kernel=None, kernel_config=None) -> Path:
    """Save a finding (an Outcome with inputs and params: a confirmed reject or NaN with its
    outputs, or a kernel error, timeout or crash without them) and return the case
    directory.  The verdict is recomputed in both modes where there are outputs; the
    finding's status, message and failure class are recorded under ``finding``."""
    from .check import check, evaluate
    if expect not in ("accept", "reject"):
        raise InvalidArgument(f"expect={expect!r}: expected 'accept' (a bug to fix: the replayed case passes "
                              f"once the kernel is accepted) or 'reject' (an oracle regression: must stay rejected).")
    arrays, in_recs, out_recs = {}, [], []
    names = list(op.reference.input_names)
    for i, t in enumerate(outcome.inputs):
        arr, rec = _to_raw(t)
        arrays[f"input{i}"] = arr
        in_recs.append({"name": names[i] if i < len(names) else f"arg{i}", "key": f"input{i}", **rec})
    outs = _outputs_list(outcome.outputs) if outcome.outputs is not None else []
    judged = getattr(outcome, "status", "reject") in ("reject", "nan", "statistical_only", "uncertified", "accept")
    if not judged:
        # a kernel error: its outputs (wrong shape, dtype, ...) are kept where they are tensors,
        # for a replay of the saved outputs to meet the same error; they are not judged here
        outs = outs if all(isinstance(t, torch.Tensor) and t.device.type != "meta" for t in outs) else []
    out_names = op.reference.names_of(len(outs)) if hasattr(op.reference, "names_of") else []
    for j, t in enumerate(outs):
        arr, rec = _to_raw(t)
        arrays[f"output{j}"] = arr
        out_recs.append({"name": out_names[j] if j < len(out_names) else f"out{j}", "key": f"output{j}", **rec})
    cid = case_id(op.name, kernel_spec, arrays)
    final = Path(corpus) / op.name / slug(kernel_spec) / cid
    launch = {**dict(kernel_config or {}), **(getattr(outcome, "launch", None) or {})}
    if outs and judged:
        verdicts = {m: check(op.reference, outs, outcome.inputs, outcome.params, mode=m, backend=backend,
                             launch=launch) for m in ("statistical", "fixed")}
        certificate = verdicts["fixed"].certificate.to_dict()
    else:                   # the kernel returned nothing: the reference's certificate on these inputs
        verdicts = {}
        certificate = evaluate(op.reference, outcome.inputs, outcome.params, backend=backend,
                               launch=launch).certificate().to_dict()
    case = outcome.case
    meta = {
        "schema": SCHEMA, "id": cid, "op": op.name, "operator": op.spec,
        "kernel": {"spec": kernel_spec, "registered": op.has_kernel(kernel_spec),
                   "config": _jsonable(kernel_config or {})},
        "params": _jsonable(outcome.params), "backend": backend, "mode": mode,
        **({"launch": _jsonable(outcome.launch)} if getattr(outcome, "launch", None) else {}),
        "seed": None if case is None else case.seed, "group": None if case is None else case.group,
        "case": None if case is None else _jsonable(case.to_dict()),
        "inputs": in_recs, "outputs": out_recs,
        "versions": versions(), "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "verdict": {m: _verdict_summary(v) for m, v in verdicts.items()},
        "failure_class": list(outcome.failure_class) if outcome.failure_class else None,
        "finding": {"status": getattr(outcome, "status", "reject"), "error": getattr(outcome, "error", None) or None,
                    "traceback": getattr(outcome, "traceback", "") or None},
        "certificate": certificate,
        "expect": expect,
        "replay": f"numoracle replay {final}",
    }
    if final.exists():
        return final
    final.parent.mkdir(parents=True, exist_ok=True)
    _clean_stale(final.parent)
    tmp = final.parent / f".tmp-{cid}-{os.getpid()}"
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir()
    try:
        with open(tmp / ARRAYS_FILE, "wb") as fh:
            np.savez(fh, **arrays)
            fh.flush()
            os.fsync(fh.fileno())
        with open(tmp / CASE_FILE, "w") as fh:
            json.dump(meta, fh, indent=2, sort_keys=False, allow_nan=True)
            fh.write("\n")
            fh.flush()
            os.fsync(fh.fileno())
        _fsync_dir(tmp)
        try:
            os.rename(tmp, final)
        except OSError:
            if final.exists():          # saved meanwhile by another run: the same bits, same id
                shutil.rmtree(tmp, ignore_errors=True)
                return final
            raise
        _fsync_dir(final.parent)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return final


# ---- loading and replay ------------------------------------------------------------

@dataclass
class CorpusCase:
    path: Path                 # the case directory
    meta: dict
    inputs: tuple
    outputs: tuple

    @property
    def op(self) -> str:
        return self.meta["op"]

    @property
    def kernel_spec(self) -> str:
        return self.meta["kernel"]["spec"]


def _case_json(path) -> Path:
    """The case.json of a case directory (or the case.json given); a path that is neither a
    directory nor a case.json, or that does not exist, raises InvalidArgument."""
    p = Path(path)
    if p.name == CASE_FILE:
        return p
    try:
        st = os.stat(p)
    except FileNotFoundError:
        raise InvalidArgument(f"{p}: no such corpus case; expected a case directory holding {CASE_FILE} and "
                              f"{ARRAYS_FILE} (corpora/<op>/<kernel>/<id>/).") from None
    except OSError as exc:
        why = "a symlink loop" if exc.errno == errno.ELOOP else (exc.strerror or str(exc))
        raise InvalidArgument(f"{p}: cannot be read ({why}); expected a case directory holding {CASE_FILE} and "
                              f"{ARRAYS_FILE}.") from None
    if not stat.S_ISDIR(st.st_mode):
        raise InvalidArgument(f"{p}: is a file, not a corpus case; expected a case directory holding {CASE_FILE} "
                              f"and {ARRAYS_FILE}, or its {CASE_FILE}.")
    return p / CASE_FILE


# The most bytes one saved array may hold: far above any case numoracle saves (shrunk
# counterexamples are small) and far below what would exhaust a machine.  A case's
# arrays are checked against it, and against the shapes case.json declares, before
# anything is decompressed.
MAX_ARRAY_BYTES = 1 << 30
# ... and all the arrays of one case together
MAX_CASE_BYTES = 2 * MAX_ARRAY_BYTES
# case.json holds metadata and a certificate (kilobytes); it is read no further than this
MAX_CASE_JSON_BYTES = 16 << 20
# inputs.npz's zip directory: a case has a few arrays, so a directory of thousands of
# entries (each parsed into memory before any is read) is refused from its end record
_MAX_MEMBERS = 1024
_MAX_ZIP_DIRECTORY = 1 << 20
_MAX_NPY_HEADER = 10000            # numpy's own default limit
# a compressed entry of more than _RATIO_FROM bytes may expand at most _MAX_RATIO-fold
_RATIO_FROM = 16 << 20
_MAX_RATIO = 64
_ZIP_METHODS = (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED, zipfile.ZIP_BZIP2, zipfile.ZIP_LZMA)
BACKENDS = RUNNING                     # the backends a saved case may record
MODES = ("statistical", "fixed")
EXPECTS = ("accept", "reject")
# what a case's "finding" records: the outcome it was saved from (runner.outcomes.STATUSES)
FINDINGS = ("reject", "nan", "error", "timeout", "crash", "statistical_only", "uncertified", "accept")


def _short(x) -> str:
    text = " ".join(repr(x).split())
    return text if len(text) <= 60 else text[:57] + "..."


def _open_regular(path: Path, limit: int, missing: str):
    """``path`` opened for reading if it is a regular file of at most ``limit`` bytes.  Opened
    without blocking (a FIFO would wait for a writer forever) and checked on the descriptor
    it is read through; every failure names the file."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise InvalidArgument(f"{path}: missing; {missing}") from None
    except OSError as exc:
        why = "a symlink loop" if exc.errno == errno.ELOOP else (exc.strerror or str(exc))
        raise InvalidArgument(f"{path}: cannot be opened ({why}); the case is unreadable (check the file and its "
                              f"permissions).") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            kind = ("a directory" if stat.S_ISDIR(st.st_mode) else "a FIFO" if stat.S_ISFIFO(st.st_mode)
                    else "a device" if stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode) else "a socket"
                    if stat.S_ISSOCK(st.st_mode) else "not a file")
            raise InvalidArgument(f"{path}: is {kind}, not a regular file; the case is corrupt.")
        if st.st_size > limit:
            raise InvalidArgument(f"{path}: {st.st_size} bytes, over the limit of {limit} for it; refused unread "
                                  f"(a case is far smaller).")
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_meta(path) -> tuple:
    """(case.json path, its contents checked): every field replay reads is present and of
    its type, and every array it declares fits the limits.  Reads case.json only; a corrupt
    or foreign file raises InvalidArgument naming it and the problem."""
    cj = _case_json(path)
    with _open_regular(cj, MAX_CASE_JSON_BYTES, f"a case needs its {CASE_FILE} beside {ARRAYS_FILE}.") as fh:
        data = fh.read(MAX_CASE_JSON_BYTES + 1)
    if len(data) > MAX_CASE_JSON_BYTES:       # it grew while being read
        raise InvalidArgument(f"{cj}: over the limit of {MAX_CASE_JSON_BYTES} bytes; refused.")
    if not data.strip():
        raise InvalidArgument(f"{cj}: is empty; the case is corrupt (a case.json holds the case's metadata).")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise InvalidArgument(f"{cj}: not UTF-8 text (byte {data[exc.start]:#04x} at offset {exc.start}); the case "
                              f"is corrupt or not a numoracle case.") from None
    try:
        meta = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InvalidArgument(f"{cj}: not valid JSON ({exc.msg}: line {exc.lineno} column {exc.colno}); the case is "
                              f"corrupt or not a numoracle case.") from None
    except RecursionError:
        raise InvalidArgument(f"{cj}: not valid JSON for a case (nested too deeply to read); the case is corrupt "
                              f"or not a numoracle case.") from None
    except ValueError as exc:                 # e.g. an integer of more digits than Python converts
        raise InvalidArgument(f"{cj}: not valid JSON for a case ({exc}); the case is corrupt.") from None
    _check_meta(meta, cj)
    return cj, meta


def _check_meta(meta, cj: Path) -> None:
    if not isinstance(meta, dict) or "schema" not in meta:
        kinds = {list: "an array", str: "a string", int: "a number", float: "a number", bool: "a boolean"}
        got = "no 'schema' field" if isinstance(meta, dict) else f"holds {kinds.get(type(meta), 'null')}, not a JSON object"
        raise InvalidArgument(f"{cj}: {got}; not a numoracle corpus case (expected a JSON object with schema "
                              f"{SCHEMA!r}).")
    if meta["schema"] != SCHEMA:
        versions = meta.get("versions")
        made = versions.get("numoracle") if isinstance(versions, dict) else None
        raise InvalidArgument(f"{cj}: schema {_short(meta['schema'])}, but this numoracle reads {SCHEMA!r}; replay it "
                              f"with the numoracle version recorded in the case ({made}).")
    missing = [k for k in _REQUIRED if k not in meta]
    if missing:
        raise InvalidArgument(f"{cj}: missing field(s) {missing}; the case is corrupt.")

    def need(key, ok, expected):
        if not ok(meta[key]):
            raise InvalidArgument(f"{cj}: field {key!r} is {_short(meta[key])}; expected {expected}. The case is "
                                  f"corrupt.")

    def text(v):
        return isinstance(v, str) and bool(v)

    need("id", text, "the case's id (a string)")
    need("op", text, "an operator name")
    if meta.get("operator") is not None:
        need("operator", text, "the operator's registered name or package.module:attribute")
    need("kernel", lambda v: isinstance(v, dict) and text(v.get("spec"))
         and isinstance(v.get("config") if v.get("config") is not None else {}, dict),
         "an object with a string 'spec' (and a 'config' object)")
    need("params", lambda v: isinstance(v, dict) and all(isinstance(k, str) for k in v),
         "an object of the operator's parameters by name")
    need("backend", lambda v: v in BACKENDS, f"one of {list(BACKENDS)}")
    need("mode", lambda v: v in MODES, f"one of {list(MODES)}")
    need("inputs", lambda v: isinstance(v, list), "a list of array records")
    if meta.get("outputs") is not None:
        need("outputs", lambda v: isinstance(v, list), "a list of array records")
    need("verdict", lambda v: isinstance(v, dict) and all(isinstance(x, dict) for x in v.values()),
         "an object of each mode's verdict summary")
    need("certificate", lambda v: isinstance(v, dict), "the certificate (an object)")
    if "expect" in meta:
        need("expect", lambda v: v in EXPECTS, f"one of {list(EXPECTS)}")
    if meta.get("launch") is not None:
        need("launch", lambda v: isinstance(v, dict) and all(
            isinstance(k, str) and (isinstance(x, (int, float, str, bool, type(None))) or (
                isinstance(x, list) and all(isinstance(y, (int, float, str, bool, type(None))) for y in x)))
            for k, x in v.items()), "an object of the kernel's launch values by name (numbers, strings, booleans)")
    if meta.get("finding") is not None:
        _check_finding(meta["finding"], cj)
    _declared(meta, cj)


def _check_finding(finding, cj: Path) -> None:
    """case.json's "finding": an object with the outcome's status, and its error and
    traceback as strings (or null).  Said without quoting the saved text (a traceback)."""
    expected = (f"expected an object with the finding's 'status' (one of {list(FINDINGS)}) and its 'error' and "
                f"'traceback' (strings or null). The case is corrupt.")
    if not isinstance(finding, dict):
        raise InvalidArgument(f"{cj}: field 'finding' is {_short(finding)}; {expected}")
    if finding.get("status") not in FINDINGS:
        got = _short(finding["status"]) if "status" in finding else "missing"
        raise InvalidArgument(f"{cj}: field 'finding': its 'status' is {got}; {expected}")
    for k in ("error", "traceback"):
        v = finding.get(k)
        if v is not None and not isinstance(v, str):
            raise InvalidArgument(f"{cj}: field 'finding': its {k!r} is a {type(v).__name__}, not a string; "
                                  f"{expected}")


def _record_dtype(rec: dict, cj: Path, key: str) -> np.dtype:
    """The numpy dtype of an array record's raw bits, after checking its format and dtype."""
    dname, fname = rec.get("dtype"), rec.get("format")
    if fname is not None:
        try:
            fmt = F.by_name(fname) if isinstance(fname, str) else None
        except InvalidArgument:
            fmt = None
        if fmt is None:
            raise InvalidArgument(f"{cj}: {key} has format {_short(fname)}, which this numoracle does not know; "
                                  f"expected one of {[f.name for f in F.ALL]}. The case is corrupt.")
        dt = getattr(torch, dname, None) if isinstance(dname, str) and dname.isidentifier() else None
        try:
            holds = isinstance(dt, torch.dtype) and dt.is_floating_point and F.from_dtype(dt) is fmt
        except InvalidArgument:
            holds = False
        if not holds:
            raise InvalidArgument(f"{cj}: {key}: dtype {_short(dname)} does not hold format {fmt.name}; case.json is "
                                  f"corrupt or from another tool.")
        return np.dtype(_UINT[torch.empty((), dtype=dt).element_size() * 8])
    if dname not in _INT_DTYPES:
        raise InvalidArgument(f"{cj}: {key} has dtype {_short(dname)} and no format; expected a format with its "
                              f"dtype, or one of {sorted(_INT_DTYPES)}. The case is corrupt.")
    return np.dtype(dname)


def _declared(meta: dict, cj: Path) -> dict:
    """key -> (shape, raw-bits dtype) of every array case.json declares, each within
    ``MAX_ARRAY_BYTES`` and all within ``MAX_CASE_BYTES``."""
    out, total = {}, 0
    for group in ("inputs", "outputs"):
        recs = meta.get(group) or []
        if not isinstance(recs, list):
            raise InvalidArgument(f"{cj}: field {group!r} must be a list; the case is corrupt.")
        for j, rec in enumerate(recs):
            if not isinstance(rec, dict) or not isinstance(rec.get("key"), str) or not rec["key"]:
                raise InvalidArgument(f"{cj}: {group}[{j}] is {_short(rec)}, with no string 'key'; expected an "
                                      f"array record (key, dtype, shape, format). The case is corrupt.")
            key = rec["key"]
            if key in out:
                raise InvalidArgument(f"{cj}: array {key!r} is declared twice; the case is corrupt.")
            shape = rec.get("shape")
            if not isinstance(shape, list) or not all(type(d) is int and d >= 0 for d in shape):
                raise InvalidArgument(f"{cj}: {key} has shape {_short(shape)}; expected a list of sizes >= 0 "
                                      f"(integers). The case is corrupt.")
            dtype = _record_dtype(rec, cj, key)
            nbytes = math.prod(shape) * dtype.itemsize
            total += nbytes
            if nbytes > MAX_ARRAY_BYTES or total > MAX_CASE_BYTES:
                raise InvalidArgument(f"{cj}: {key} declares shape {shape} of {dtype} ({nbytes} bytes), over the "
                                      f"limit of {MAX_ARRAY_BYTES} bytes an array (and {MAX_CASE_BYTES} a case); "
                                      f"refused before {ARRAYS_FILE} is read (a shrunk counterexample is far "
                                      f"smaller).")
            out[key] = (tuple(shape), dtype)
    if len(out) > _MAX_MEMBERS:
        raise InvalidArgument(f"{cj}: declares {len(out)} arrays, over the limit of {_MAX_MEMBERS}; the case is "
                              f"corrupt.")
    return out


def _zip_directory(fh, npz: Path, size: int) -> None:
    """Refuse a zip whose directory (which ZipFile parses whole, into memory, on opening it)
    is larger than a case's few arrays need: read from the end record."""
    tail_len = min(size, 22 + 65535)
    fh.seek(size - tail_len)
    tail = fh.read(tail_len)
    at = tail.rfind(b"PK\x05\x06")
    if at < 0 or len(tail) - at < 22:
        raise InvalidArgument(f"{npz}: not a zip archive (no end-of-directory record); the case is corrupt "
                              f"(truncated, or not written by numoracle).")
    entries, dir_size = struct.unpack("<HL", tail[at + 10:at + 16])
    if (entries == 0xFFFF or dir_size == 0xFFFFFFFF) and at >= 20 and tail[at - 20:at - 16] == b"PK\x06\x07":
        (where,) = struct.unpack("<Q", tail[at - 12:at - 4])       # the zip64 end record
        if where + 56 > size:
            raise InvalidArgument(f"{npz}: its zip64 end record lies outside the file; the case is corrupt.")
        fh.seek(where)
        rec = fh.read(56)
        if rec[:4] != b"PK\x06\x06":
            raise InvalidArgument(f"{npz}: its zip64 end record is damaged; the case is corrupt.")
        entries, dir_size = struct.unpack("<QQ", rec[32:48])
    if entries > _MAX_MEMBERS or dir_size > _MAX_ZIP_DIRECTORY:
        raise InvalidArgument(f"{npz}: a zip directory of {entries} entries ({dir_size} bytes), over the limit of "
                              f"{_MAX_MEMBERS} ({_MAX_ZIP_DIRECTORY} bytes); refused unread (a case holds a few "
                              f"arrays).")
    fh.seek(0)


def _read_arrays(npz: Path, cj: Path, declared: dict) -> dict:
    """The .npz's arrays, after checking the zip's directory, then each member's size (the
    zip's own record, then the .npy header's shape and dtype) against case.json and the
    limits: a compressed bomb, a lying header or entry, and an object array are refused
    before they are decompressed.  Each member is read to its end, so its CRC is checked."""
    fh = _open_regular(npz, MAX_CASE_BYTES + (1 << 20), f"a case needs its {ARRAYS_FILE} beside {CASE_FILE}.")
    try:
        with fh:
            size = os.fstat(fh.fileno()).st_size
            if size == 0:
                raise InvalidArgument(f"{npz}: is empty; the case is corrupt (it holds the case's arrays).")
            _zip_directory(fh, npz, size)
            with zipfile.ZipFile(fh) as z:
                infos = z.infolist()
                members = {}
                for info in infos:
                    key = info.filename.removesuffix(".npy")
                    if key in members:
                        raise InvalidArgument(f"{npz}: holds {info.filename!r} twice; the case is corrupt.")
                    if key not in declared or not info.filename.endswith(".npy"):
                        raise InvalidArgument(f"{npz}: holds {info.filename!r}, which {cj.name} does not declare; "
                                              f"the case is corrupt or foreign.")
                    members[key] = info
                for key, info in members.items():
                    _check_entry(info, npz, key, declared[key])
                # what is there first (an object array or a bomb is the louder problem), then what is not
                arrays = {key: _read_member(z, info, npz, cj, key, *declared[key]) for key, info in members.items()}
                for key in declared:
                    if key not in members:
                        raise InvalidArgument(f"{npz}: no array {key!r}, which {cj.name} declares; the case is "
                                              f"corrupt.")
                return arrays
    except InvalidArgument:
        raise
    except Exception as exc:       # whatever zipfile, zlib and numpy raise on damaged bytes
        detail = " ".join(str(exc).split())[:200]
        raise InvalidArgument(f"{npz}: cannot read it as a plain-array .npz ({type(exc).__name__}: {detail}); the "
                              f"case is corrupt or foreign (object arrays are refused: nothing is unpickled).") \
            from None


def _check_entry(info, npz: Path, key: str, declared) -> None:
    """A zip entry's own record against the array case.json declares, before it is opened."""
    shape, dtype = declared
    need = math.prod(shape) * dtype.itemsize
    if info.flag_bits & 0x1:
        raise InvalidArgument(f"{npz}[{key}]: an encrypted zip entry; the case is corrupt or foreign.")
    if info.compress_type not in _ZIP_METHODS:
        raise InvalidArgument(f"{npz}[{key}]: zip compression method {info.compress_type}, which is not one of "
                              f"{list(_ZIP_METHODS)} (stored, deflate, bzip2, lzma); the case is corrupt.")
    if not need <= info.file_size <= need + _MAX_NPY_HEADER + 16:
        raise InvalidArgument(f"{npz}[{key}]: its zip entry holds {info.file_size} bytes uncompressed, but the "
                              f"{list(shape)} {dtype} array declared needs {need} (plus a header of at most "
                              f"{_MAX_NPY_HEADER}); refused unread (a compressed bomb or a damaged entry).")
    # deflate, bzip2 and lzma expand incompressible data by well under 1/16 (plus a few
    # headers): more compressed bytes than that are data the entry's size does not cover
    # numoracle stores its arrays uncompressed; a compressed entry of a big array that
    # expands more than _MAX_RATIO-fold is a bomb however consistently it is declared
    if (info.compress_type != zipfile.ZIP_STORED and info.file_size > _RATIO_FROM
            and info.file_size > _MAX_RATIO * info.compress_size):
        raise InvalidArgument(f"{npz}[{key}]: its zip entry expands {info.compress_size} compressed bytes to "
                              f"{info.file_size}, over {_MAX_RATIO}-fold; refused unread (a compressed bomb: "
                              f"numoracle saves arrays uncompressed, re-save the case with numoracle).")
    if info.compress_size > info.file_size + info.file_size // 16 + 4096:
        raise InvalidArgument(f"{npz}[{key}]: its zip entry holds {info.compress_size} compressed bytes for "
                              f"{info.file_size} of data; refused unread (a compressed bomb or a damaged entry).")


def _read_member(z, info, npz: Path, cj: Path, key: str, shape: tuple, dtype: np.dtype) -> np.ndarray:
    with z.open(info) as fh:
        version = np.lib.format.read_magic(fh)
        if version == (1, 0):
            hshape, fortran, hdtype = np.lib.format.read_array_header_1_0(fh, max_header_size=_MAX_NPY_HEADER)
        elif version == (2, 0):
            hshape, fortran, hdtype = np.lib.format.read_array_header_2_0(fh, max_header_size=_MAX_NPY_HEADER)
        else:
            raise InvalidArgument(f"{npz}[{key}]: .npy format version {version}, not 1.0 or 2.0 (what numpy writes "
                                  f"for plain arrays); the case is corrupt or foreign.")
        if hdtype.hasobject:
            raise InvalidArgument(f"{npz}[{key}]: an object array; refused (nothing is unpickled).")
        if tuple(hshape) != shape:
            raise InvalidArgument(f"{npz}[{key}]: array has shape {tuple(hshape)} but {cj.name} records "
                                  f"{list(shape)}; the case is corrupt (re-save it).")
        if hdtype != dtype:
            raise InvalidArgument(f"{npz}[{key}]: holds {hdtype.str} ({hdtype}) but {cj.name} declares raw bits as "
                                  f"{dtype.str} ({dtype}); the case is corrupt.")
        need = math.prod(shape) * dtype.itemsize
        if info.file_size != fh.tell() + need:
            raise InvalidArgument(f"{npz}[{key}]: its header declares {need} bytes of data after {fh.tell()} of "
                                  f"header, but the zip entry holds {info.file_size}; the case is corrupt.")
        buf, pos = bytearray(need), 0
        view = memoryview(buf)
        while pos < need:
            chunk = fh.read(min(1 << 20, need - pos))
            if not chunk:
                break
            view[pos:pos + len(chunk)] = chunk
            pos += len(chunk)
        view.release()
        if pos != need or fh.read(1):
            raise InvalidArgument(f"{npz}[{key}]: {pos} bytes of data where its header declares {need}; the case "
                                  f"is corrupt.")
    return np.frombuffer(buf, dtype=dtype).reshape(shape, order="F" if fortran else "C")


def load(path) -> CorpusCase:
    """Read one case (its directory or its case.json).  A corrupt or foreign
    file raises InvalidArgument naming the file and the problem; nothing is read
    beyond the limits (``MAX_CASE_JSON_BYTES``, ``MAX_ARRAY_BYTES``, ``MAX_CASE_BYTES``)."""
    cj, meta = read_meta(path)
    declared = _declared(meta, cj)
    npz = cj.parent / ARRAYS_FILE
    arrays = _read_arrays(npz, cj, declared)
    tensors = {}
    for group in ("inputs", "outputs"):
        out = []
        for rec in meta.get(group) or []:
            key = rec["key"]
            try:
                out.append(_from_raw(arrays[key], rec, f"{npz}[{key}]"))
            except InvalidArgument:
                raise
            except Exception as exc:
                raise InvalidArgument(f"{npz}[{key}]: {exc}; the case is corrupt.") from None
        tensors[group] = tuple(out)
    return CorpusCase(cj.parent, meta, tensors["inputs"], tensors["outputs"])


def _holds_case(p: Path) -> bool:
    """Whether directory ``p`` is a case: it holds a case.json or an inputs.npz (whatever
    they are: a case missing one is still a case to report, as corrupt)."""
    return any(os.path.lexists(p / name) for name in (CASE_FILE, ARRAYS_FILE))


def find(paths) -> list:
    """Case directories under ``paths`` (cases themselves, case.json files, or
    directories searched recursively, not following links and skipping half-written
    ``.tmp-*`` ones), sorted.  A directory holding a case.json or an inputs.npz is a case,
    so that one that lost a file is replayed (and reported corrupt), not skipped."""
    found = []
    for p in paths:
        p = Path(p)
        if p.name == CASE_FILE and os.path.lexists(p):
            found.append(p.parent)
        elif p.is_dir() and _holds_case(p):
            found.append(p)
        elif p.is_dir():
            cases = []
            for root, dirs, _ in os.walk(p):
                dirs[:] = sorted(d for d in dirs if not d.startswith(".tmp-"))
                here = Path(root)
                if here != p and _holds_case(here):
                    cases.append(here)
                    dirs[:] = []           # a case holds no cases
            found += sorted(cases)
        else:
            raise InvalidArgument(f"{p}: not a corpus case or directory; give a case directory, its case.json, "
                                  f"or a corpus directory to search.")
    return found
