"""Corpora: shrunk, confirmed counterexamples saved as plain files and
replayable forever (docs/design.md §9).

A case is a directory ``<corpus>/<op>/<kernel>/<id>/`` holding

* ``inputs.npz``: the raw bits of every input (``input0``, ``input1``, ...) and of
  the kernel's outputs when saved (``output0``, ...), as unsigned integers of
  the format's width (integer inputs such as labels as they are).  Loaded with
  ``allow_pickle=False``: nothing in a corpus is ever unpickled;
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
import hashlib
import json
import os
import platform
import shutil
import zipfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from . import formats as F
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
    if outs and judged:
        verdicts = {m: check(op.reference, outs, outcome.inputs, outcome.params, mode=m, backend=backend)
                    for m in ("statistical", "fixed")}
        certificate = verdicts["fixed"].certificate.to_dict()
    else:                   # the kernel returned nothing: the reference's certificate on these inputs
        verdicts = {}
        certificate = evaluate(op.reference, outcome.inputs, outcome.params, backend=backend).certificate().to_dict()
    case = outcome.case
    meta = {
        "schema": SCHEMA, "id": cid, "op": op.name, "operator": op.spec,
        "kernel": {"spec": kernel_spec, "registered": op.has_kernel(kernel_spec),
                   "config": _jsonable(kernel_config or {})},
        "params": _jsonable(outcome.params), "backend": backend, "mode": mode,
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
    p = Path(path)
    if p.is_dir():
        p = p / CASE_FILE
    if not p.exists():
        raise InvalidArgument(f"{p}: no such corpus case; expected a case directory holding {CASE_FILE} and "
                              f"{ARRAYS_FILE} (corpora/<op>/<kernel>/<id>/).")
    return p


# The most bytes one saved array may hold: far above any case numoracle saves (shrunk
# counterexamples are small) and far below what would exhaust a machine.  A case's
# arrays are checked against it, and against the shapes case.json declares, before
# anything is decompressed.
MAX_ARRAY_BYTES = 1 << 30


def _declared(meta: dict, cj: Path) -> dict:
    """key -> (shape, itemsize) of every array case.json declares."""
    out = {}
    for group in ("inputs", "outputs"):
        recs = meta.get(group) or []
        if not isinstance(recs, list):
            raise InvalidArgument(f"{cj}: field {group!r} must be a list; the case is corrupt.")
        for rec in recs:
            if not isinstance(rec, dict) or not isinstance(rec.get("key"), str):
                raise InvalidArgument(f"{cj}: an entry of {group!r} has no string 'key'; the case is corrupt.")
            shape = rec.get("shape", ())
            if not isinstance(shape, list) or not all(isinstance(d, int) and d >= 0 for d in shape):
                raise InvalidArgument(f"{cj}: {rec['key']} has shape {shape!r}; expected a list of sizes >= 0.")
            out[rec["key"]] = tuple(shape)
    return out


def _read_arrays(npz: Path, cj: Path, meta: dict) -> dict:
    """The .npz's arrays, after checking each member's size (the zip's own record, then the
    .npy header's shape and dtype) against case.json and ``MAX_ARRAY_BYTES``: a compressed
    bomb or a lying header is refused before it is decompressed."""
    declared = _declared(meta, cj)
    try:
        with zipfile.ZipFile(npz) as z:
            infos = {i.filename.removesuffix(".npy"): i for i in z.infolist()}
            for key, info in infos.items():
                if key not in declared:
                    raise InvalidArgument(f"{npz}: holds {key!r}, which {cj.name} does not declare; the case is "
                                          f"corrupt or foreign.")
                if info.file_size > MAX_ARRAY_BYTES + 4096:
                    raise InvalidArgument(f"{npz}[{key}]: {info.file_size} bytes uncompressed, over the limit of "
                                          f"{MAX_ARRAY_BYTES}; refused unread.")
                with z.open(info) as fh:
                    version = np.lib.format.read_magic(fh)
                    shape, _, dtype = (np.lib.format.read_array_header_1_0(fh) if version == (1, 0)
                                       else np.lib.format.read_array_header_2_0(fh))
                if dtype.hasobject:
                    raise InvalidArgument(f"{npz}[{key}]: an object array; refused (nothing is unpickled).")
                if tuple(shape) != declared[key]:
                    raise InvalidArgument(f"{npz}[{key}]: array has shape {tuple(shape)} but {cj.name} records "
                                          f"{list(declared[key])}; the case is corrupt (re-save it).")
                need = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
                if need > MAX_ARRAY_BYTES or need > info.file_size:
                    raise InvalidArgument(f"{npz}[{key}]: its header declares {need} bytes of data, but the file "
                                          f"holds {info.file_size} (limit {MAX_ARRAY_BYTES}); the case is corrupt.")
        with np.load(npz, allow_pickle=False) as data:
            return {k: data[k] for k in data.files}
    except InvalidArgument:
        raise
    except (ValueError, OSError, zipfile.BadZipFile, EOFError, KeyError, RuntimeError) as exc:
        raise InvalidArgument(f"{npz}: cannot read it as a plain-array .npz ({type(exc).__name__}: {exc}); the "
                              f"case is corrupt or foreign (object arrays are refused: nothing is unpickled).") \
            from None


def load(path) -> CorpusCase:
    """Read one case (its directory or its case.json).  A corrupt or foreign
    file raises InvalidArgument naming the file and the problem."""
    cj = _case_json(path)
    try:
        meta = json.loads(cj.read_text())
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InvalidArgument(f"{cj}: not valid JSON ({exc}); the case is corrupt or not a numoracle case.") from None
    if not isinstance(meta, dict) or "schema" not in meta:
        raise InvalidArgument(f"{cj}: no 'schema' field; not a numoracle corpus case (expected schema {SCHEMA!r}).")
    if meta["schema"] != SCHEMA:
        raise InvalidArgument(f"{cj}: schema {meta['schema']!r}, but this numoracle reads {SCHEMA!r}; replay it with "
                              f"the numoracle version recorded in the case ({meta.get('versions', {}).get('numoracle')}).")
    missing = [k for k in _REQUIRED if k not in meta]
    if missing:
        raise InvalidArgument(f"{cj}: missing field(s) {missing}; the case is corrupt.")
    kern = meta["kernel"]
    if not isinstance(kern, dict) or not isinstance(kern.get("spec"), str):
        raise InvalidArgument(f"{cj}: field 'kernel' must be an object with a string 'spec'; the case is corrupt.")
    npz = cj.parent / ARRAYS_FILE
    if not npz.exists():
        raise InvalidArgument(f"{npz}: missing; a case needs its {ARRAYS_FILE} beside {CASE_FILE}.")
    arrays = _read_arrays(npz, cj, meta)
    tensors = {}
    for group in ("inputs", "outputs"):
        recs = meta.get(group) or []
        if not isinstance(recs, list):
            raise InvalidArgument(f"{cj}: field {group!r} must be a list; the case is corrupt.")
        out = []
        for rec in recs:
            key = rec.get("key") if isinstance(rec, dict) else None
            if key not in arrays:
                raise InvalidArgument(f"{npz}: no array {key!r} recorded in {cj.name}'s {group}; the case is corrupt.")
            try:
                out.append(_from_raw(arrays[key], rec, f"{npz}[{key}]"))
            except InvalidArgument:
                raise
            except Exception as exc:
                raise InvalidArgument(f"{npz}[{key}]: {exc}; the case is corrupt.") from None
        tensors[group] = tuple(out)
    return CorpusCase(cj.parent, meta, tensors["inputs"], tensors["outputs"])


def find(paths) -> list:
    """Case directories under ``paths`` (cases themselves, case.json files, or
    directories searched recursively), sorted."""
    found = []
    for p in paths:
        p = Path(p)
        if p.is_file() and p.name == CASE_FILE:
            found.append(p.parent)
        elif (p / CASE_FILE).exists():
            found.append(p)
        elif p.is_dir():
            found += sorted(c.parent for c in p.rglob(CASE_FILE) if not any(
                part.startswith(".tmp-") for part in c.parts))
        else:
            raise InvalidArgument(f"{p}: not a corpus case or directory; give a case directory, its case.json, "
                                  f"or a corpus directory to search.")
    return found
