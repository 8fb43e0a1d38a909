"""The corrupt-case battery (issue #23): a real saved case, broken in one way per kind.

Each kind edits a copy of a case saved by ``corpus.save`` from a real run (rms_norm's
faulty ``unrounded_multiply`` kernel on a 2x8 bf16 case, a confirmed reject; a
cross_entropy case for the labels; two kernel-error findings saved by ``fuzz`` as main
saves them, with the "finding" record: one without outputs, one with outputs of the wrong
shape), then gives it to every entry point:

* ``runner.replay``: a corrupt kind gives status "corrupt" with a one-line reason naming the
  broken file (case.json or inputs.npz, or the kernel's module) and saying what is wrong, no
  traceback text, no exception escaping, and bounded memory (tracemalloc's peak under
  ``PEAK_BYTES``; for the bombs a fresh process whose peak RSS grows by under ``RSS_BYTES``);
* ``corpus.load``: the same message as an InvalidArgument where the files are damaged (a case
  corrupt only against its operator, kernel or backend loads: ``LOADS``);
* ``numoracle replay`` (``cli.main``): exit 2, the case's one line saying the same, no traceback;
* the pytest plugin (one run over a corpus of every kind): one item per case, a corrupt case's
  item failing with the file and the problem.

Nothing is unpickled on the way (pickle.load/loads/Unpickler and torch.load are watched, and
three kinds carry payloads that would leave a marker directory).  A kind that is not
corruption (NaN bits, a BOM, a unicode path, a finding of a kernel error, ...) must replay:
"reproduced" for a faulty kernel's case, "ok" for the correct one, and ``why`` says why it is
not corruption.  The command line is also run over a mix of cases: one line per case, the
worst status as the exit code, and ``--json`` printing one JSON document."""

from __future__ import annotations

import io
import json
import math
import os
import re
import shutil
import struct
import subprocess
import sys
import textwrap
import tracemalloc
import zipfile
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np
import pytest
import torch

from numoracle import corpus as C

pytest_plugins = ["pytester"]

ROOT = Path(__file__).resolve().parents[1]
CJ, NPZ = C.CASE_FILE, C.ARRAYS_FILE
PEAK_BYTES = 32 << 20          # traced Python/numpy allocations while replaying one kind
RSS_BYTES = 64 << 20           # growth of a fresh process's peak RSS over all the bombs
GIB = 1 << 30
IS_ROOT = hasattr(os, "geteuid") and os.geteuid() == 0


# ---- the saved cases -------------------------------------------------------------------------

@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """{'rms': a confirmed reject of rms_norm's faulty unrounded_multiply kernel, 'ce': an
    accepted cross_entropy case of its correct kernel}, saved by corpus.save."""
    from numoracle import backends
    from numoracle.operators import get
    from numoracle.runner import judge
    from numoracle.strategies import Case
    backends.select("interpreter")
    root = tmp_path_factory.mktemp("corpus")
    rms = get("rms_norm")
    case = Case("rms_norm", "bf16", 2, 8, "calibration", 0, (), (("casting", "llama"), ("offset", 0.0)), (), 0)
    out = judge(rms, rms.faulty_kernel("unrounded_multiply"), *case.materialize(), case=case)
    assert out.status == "reject"
    ce = get("cross_entropy")
    case2 = Case("cross_entropy", "bf16", 2, 8, "calibration", 0, (), (("reduction", "mean"),), (), 0)
    out2 = judge(ce, ce.kernels["correct"], *case2.materialize(), case=case2)
    assert out2.status == "accept"
    paths = {"rms": C.save(root, rms, "faulty:unrounded_multiply", out, backend="interpreter", mode="statistical"),
             "ce": C.save(root, ce, "correct", out2, backend="interpreter", mode="statistical")}
    # findings of a kernel error, saved as a run saves them: without outputs (it raised), and
    # with outputs of the wrong shape (kept for a replay of the saved outputs to meet them)
    from numoracle.runner import fuzz, replay
    from numoracle.strategies import cases
    for name, kernel in (("err", "raises"), ("shape", "wrong_shape")):
        res = fuzz("rms_norm", f"tests.fixtures.misbehaving:{kernel}", max_examples=1, seed=0, timeout=10.0,
                   explicit=[Case("rms_norm", "bf16", 2, 4, "calibration", 0, (), case.params, (), 0)],
                   isolate=False, shrink=False, corpus=root / name, strategy=cases("rms_norm", rows=1, cols=4))
        assert res.saved and res.counterexample.status == "error", (res.saved, res.save_error)
        paths[name] = Path(res.saved)
    assert meta(paths["err"])["finding"]["status"] == "error" and meta(paths["err"])["outputs"] == []
    assert [o["shape"] for o in meta(paths["shape"])["outputs"]] == [[2, 3], [2]]
    assert replay(paths["rms"])["status"] == "reproduced" and replay(paths["ce"])["status"] == "ok"
    assert replay(paths["err"])["status"] == "reproduced"
    return paths


# ---- editing a case --------------------------------------------------------------------------

def meta(d: Path) -> dict:
    return json.loads((d / CJ).read_text())


def put_meta(d: Path, m) -> None:
    (d / CJ).write_text(json.dumps(m, indent=1))


def edit_meta(f: Callable[[dict], None]):
    def edit(d):
        m = meta(d)
        f(m)
        put_meta(d, m)
    return edit


def members(d: Path) -> dict:
    with zipfile.ZipFile(d / NPZ) as z:
        return {i.filename: z.read(i) for i in z.infolist()}


def put_members(d: Path, ms, method=zipfile.ZIP_STORED) -> None:
    with zipfile.ZipFile(d / NPZ, "w", method) as z:
        for name, data in (ms.items() if isinstance(ms, dict) else ms):
            z.writestr(name, data)


def edit_members(f: Callable[[dict], object]):
    def edit(d):
        ms = members(d)
        out = f(ms)
        put_members(d, ms if out is None else out)
    return edit


def npy(arr: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.lib.format.write_array(buf, arr, allow_pickle=True)
    return buf.getvalue()


def npy_header(header: str, data: bytes = b"") -> bytes:
    """A version 1.0 .npy with this header text (padded as numpy pads it) and data."""
    h = header.encode("latin1")
    pad = 64 - (10 + len(h) + 1) % 64
    h = h + b" " * (pad % 64) + b"\n"
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(h)) + h + data


def input0(d: Path) -> np.ndarray:
    with zipfile.ZipFile(d / NPZ) as z, z.open("input0.npy") as fh:
        return np.lib.format.read_array(fh)


def put_array(key: str, arr: np.ndarray, d: Path) -> None:
    ms = members(d)
    ms[f"{key}.npy"] = npy(arr)
    put_members(d, ms)


def set_bits(key: str, index, value: float, dtype=torch.bfloat16):
    """The saved bits of ``key`` with element ``index`` set to ``value`` (as ``dtype``)."""
    def edit(d):
        with zipfile.ZipFile(d / NPZ) as z, z.open(f"{key}.npy") as fh:
            arr = np.lib.format.read_array(fh).copy()
        width = {torch.bfloat16: np.uint16, torch.float32: np.uint32}[dtype]
        arr[index] = torch.tensor([value], dtype=dtype).view({np.uint16: torch.int16,
                                                             np.uint32: torch.int32}[width]).numpy().view(width)[0]
        put_array(key, arr, d)
    return edit


# ---- raw zip archives (bombs, lying entries) -------------------------------------------------

@dataclass
class Entry:
    name: str
    data: bytes                # as stored (compressed where method is deflate)
    method: int = 0
    crc: int = 0
    size: int = 0              # uncompressed size the directory records
    flags: int = 0


def raw_zip(entries) -> bytes:
    """A zip archive written field by field, so that sizes, CRCs and methods can lie; zip64
    extra fields where a size needs them."""
    out, central = bytearray(), bytearray()
    for e in entries:
        name = e.name.encode()
        big = e.size >= 0xFFFFFFFF or len(e.data) >= 0xFFFFFFFF
        extra = struct.pack("<HHQQ", 1, 16, e.size, len(e.data)) if big else b""
        size32 = 0xFFFFFFFF if big else e.size
        comp32 = 0xFFFFFFFF if big else len(e.data)
        offset = len(out)
        out += struct.pack("<4s5H3L2H", b"PK\x03\x04", 45 if big else 20, e.flags, e.method, 0, 0x21, e.crc,
                           comp32, size32, len(name), len(extra)) + name + extra + e.data
        central += struct.pack("<4s6H3L5H2L", b"PK\x01\x02", 45 if big else 20, 45 if big else 20, e.flags,
                               e.method, 0, 0x21, e.crc, comp32, size32, len(name), len(extra), 0, 0, 0, 0,
                               offset) + name + extra
    n = len(entries)
    out += central + struct.pack("<4s4H2LH", b"PK\x05\x06", 0, 0, n, n, len(central), len(out), 0)
    return bytes(out)


CHUNK = 1 << 20


def deflated_zeros(prefix: bytes, n_chunks: int) -> bytes:
    """A raw deflate stream of ``prefix`` then ``n_chunks`` MiB of zeros, made without
    compressing them: after a full flush the compressor starts afresh, so one compressed
    MiB repeats (about 1 KiB each: 8 GiB of zeros in 8 MiB)."""
    c = zlib.compressobj(9, zlib.DEFLATED, -15)
    head = c.compress(prefix) + c.flush(zlib.Z_FULL_FLUSH)
    block = c.compress(b"\0" * CHUNK) + c.flush(zlib.Z_FULL_FLUSH)
    assert c.compress(b"\0" * CHUNK) + c.flush(zlib.Z_FULL_FLUSH) == block
    return head + block * n_chunks + c.flush()


def test_the_bomb_is_real():
    """The construction decompresses to what it claims (checked at 16 MiB; the bombs repeat
    the same block 8192 times)."""
    prefix = npy_header("{'descr': '<u2', 'fortran_order': False, 'shape': (2, 8), }")
    s = deflated_zeros(prefix, 16)
    d = zlib.decompressobj(-15)
    n, out = 0, d.decompress(s, 1 << 22)
    while out:
        n += len(out)
        out = d.decompress(d.unconsumed_tail, 1 << 22)
    assert n == len(prefix) + 16 * CHUNK and len(s) < 40 * 1024


def _bomb(d: Path, *, n_chunks: int, recorded: int | None, header: str | None = None) -> None:
    """inputs.npz with input0 a deflate stream of a .npy header then n_chunks MiB of zeros;
    its directory records ``recorded`` bytes uncompressed (None: the truth)."""
    header = header or "{'descr': '<u2', 'fortran_order': False, 'shape': (2, 8), }"
    prefix = npy_header(header)
    stream = deflated_zeros(prefix, n_chunks)
    true = len(prefix) + n_chunks * CHUNK
    size = true if recorded is None else recorded
    # the CRC of the bytes a reader stopping at the recorded size would see
    crc = zlib.crc32(prefix + b"\0" * max(0, min(size, 1 << 16) - len(prefix))) if size < (1 << 16) else 0
    entries = [Entry("input0.npy", stream, zipfile.ZIP_DEFLATED, crc, size)]
    for name, data in members(d).items():
        if name != "input0.npy":
            entries.append(Entry(name, data, 0, zlib.crc32(data), len(data)))
    (d / NPZ).write_bytes(raw_zip(entries))


# ---- the kinds ---------------------------------------------------------------------------------

@dataclass
class Kind:
    name: str
    edit: Callable                       # edit(case dir) -> the path to replay, or None for the directory
    status: str = "corrupt"
    file: str = CJ                       # the file the reason names
    says: str = ""                       # and what it says is wrong
    base: str = "rms"
    replay: dict = field(default_factory=dict)
    why: str = ""                        # why a kind that replays is not corruption
    skip: str = ""
    bomb: bool = False
    xfail: str = ""                      # corruption this branch cannot see (the file that would)
    note: str = ""                       # a replay of no verdicts (a kernel error): what its note says
    slow: bool = False


KINDS: list[Kind] = []


def kind(name, edit, **kw):
    KINDS.append(Kind(name, edit, **kw))


def _unlink(name):
    return lambda d: (d / name).unlink()


def _write(name, data: bytes | str):
    def edit(d):
        (d / name).unlink()
        (d / name).write_bytes(data if isinstance(data, bytes) else data.encode())
    return edit


def _truncate(name, frac=0.5):
    def edit(d):
        b = (d / name).read_bytes()
        (d / name).write_bytes(b[:int(len(b) * frac)])
    return edit


def _replace_with_dir(name):
    def edit(d):
        (d / name).unlink()
        (d / name).mkdir()
        (d / name / "inner").write_text("x")
    return edit


def _symlink(name, target):
    def edit(d):
        (d / name).unlink()
        os.symlink(target if target != "self" else d / name, d / name)
    return edit


def _fifo(name):
    def edit(d):
        (d / name).unlink()
        os.mkfifo(d / name)
    return edit


def _unreadable(name):
    return lambda d: os.chmod(d / name, 0)


def _sparse(name, size):
    def edit(d):
        with open(d / name, "r+b") as fh:
            fh.truncate(size)
    return edit


def _field(key, value):
    return edit_meta(lambda m: m.__setitem__(key, value))


def _drop(key):
    return edit_meta(lambda m: m.pop(key))


def _rec(group, i, key, value):
    def f(m):
        if value is _DEL:
            m[group][i].pop(key)
        else:
            m[group][i][key] = value
    return edit_meta(f)


_DEL = object()

# case.json: reading it
kind("case_json_missing", _unlink(CJ), says="missing")
kind("case_json_empty", _write(CJ, ""), says="empty")
kind("case_json_truncated", _truncate(CJ), says="not valid JSON")
kind("case_json_not_json", _write(CJ, "{ not json"), says="not valid JSON")
kind("case_json_array", _write(CJ, "[1, 2]"), says="holds an array, not a JSON object")
kind("case_json_string", _write(CJ, '"a case"'), says="holds a string, not a JSON object")
kind("case_json_null", _write(CJ, "null"), says="holds null, not a JSON object")
kind("case_json_non_utf8", _write(CJ, b'{"schema": "numoracle.corpus/1", "op": "\xff\xfe"}'), says="not UTF-8")
kind("case_json_utf16", lambda d: (d / CJ).write_bytes((d / CJ).read_text().encode("utf-16")), says="not UTF-8")
kind("case_json_huge_sparse", _sparse(CJ, 4 * GIB), says="over the limit")
kind("case_json_deeply_nested", _write(CJ, "[" * 200000 + "]" * 200000), says="nested too deeply")
kind("case_json_huge_integer", _write(CJ, '{"schema": ' + "9" * 20000 + "}"), says="not valid JSON")
kind("case_json_is_a_directory", _replace_with_dir(CJ), says="is a directory")
kind("case_json_symlink_loop", _symlink(CJ, "self"), says="symlink loop")
kind("case_json_dangling_symlink", _symlink(CJ, "/nonexistent/case.json"), says="missing")
kind("case_json_fifo", _fifo(CJ), says="is a FIFO")
kind("case_json_dev_zero", _symlink(CJ, "/dev/zero"), says="is a device")
kind("case_json_symlink_outside_the_corpus", _symlink(CJ, "/etc/passwd"), says="not valid JSON",
     skip="" if os.path.isfile("/etc/passwd") else "no /etc/passwd here")
kind("case_json_unreadable", _unreadable(CJ), says="Permission denied", skip="root reads any file" if IS_ROOT else "")
kind("case_json_bom", lambda d: (d / CJ).write_bytes(b"\xef\xbb\xbf" + (d / CJ).read_bytes()), status="reproduced",
     why="a UTF-8 byte-order mark (some editors add one) is not part of the JSON text")
# case.json: the schema and required fields
kind("schema_missing", _drop("schema"), says="no 'schema' field")
kind("schema_other_version", _field("schema", "numoracle.corpus/99"), says="schema 'numoracle.corpus/99'")
kind("schema_not_a_string", _field("schema", [1]), says="schema [1]")
kind("schema_other_and_versions_not_object", edit_meta(lambda m: m.update(schema="x/2", versions=[1])),
     says="schema 'x/2'")
for _key in ("id", "op", "kernel", "params", "backend", "mode", "inputs", "verdict", "certificate"):
    kind(f"field_{_key}_missing", _drop(_key), says=f"missing field(s) ['{_key}']")
kind("id_not_a_string", _field("id", 7), says="field 'id'")
kind("op_not_a_string", _field("op", 42), says="field 'op'")
kind("op_unknown", edit_meta(lambda m: m.update(op="no_such_op", operator=None)), says="no_such_op")
kind("operator_module_missing", _field("operator", "no_such_module_xyz:op"), says="cannot be found")
kind("operator_not_an_operator", _field("operator", "json:dumps"), says="json:dumps")
kind("operator_is_another_op", _field("operator", "softmax"), says="'softmax'")
kind("kernel_not_an_object", _field("kernel", "faulty:unrounded_multiply"), says="field 'kernel'")
kind("kernel_spec_not_a_string", _field("kernel", {"spec": 5}), says="field 'kernel'")
kind("kernel_spec_empty", _field("kernel", {"spec": ""}), says="field 'kernel'")
kind("kernel_config_not_an_object", _field("kernel", {"spec": "correct", "config": [1]}), says="field 'kernel'")
kind("kernel_unknown_with_saved_outputs", edit_meta(lambda m: m["kernel"].update(spec="no_such_kernel")),
     status="reproduced", why="the saved outputs are re-judged (and the result says the kernel cannot be imported)")
kind("kernel_unknown_without_outputs",
     lambda d: (edit_meta(lambda m: m.update(kernel={"spec": "no_such_kernel"}, outputs=[])))(d)
     or edit_members(lambda ms: {k: v for k, v in ms.items() if k.startswith("input")})(d),
     says="saved no outputs")
kind("params_not_an_object", _field("params", ["eps", 1e-6]), says="field 'params'")
kind("param_unknown_name", edit_meta(lambda m: m["params"].update(epsilon=1e-6)), says="unknown parameter")
kind("param_bad_choice", edit_meta(lambda m: m["params"].update(casting="evil")), says="casting='evil'")
kind("param_wrong_type", edit_meta(lambda m: m["params"].update(eps="small")), says="eps='small'")
kind("param_nan", edit_meta(lambda m: m["params"].update(eps=math.nan)), says="eps=nan")
kind("backend_unknown", _field("backend", "tpu"), says="field 'backend'")
kind("backend_not_a_string", _field("backend", None), says="field 'backend'")
kind("backend_gpu_without_cuda", _field("backend", "gpu"), says="CUDA",
     skip="this machine has CUDA" if torch.cuda.is_available() else "")
kind("mode_unknown", _field("mode", "bogus"), says="field 'mode'")
kind("expect_unknown", _field("expect", "maybe"), says="field 'expect'")
kind("verdict_not_an_object", _field("verdict", "reject"), says="field 'verdict'")
kind("verdict_mode_not_an_object", _field("verdict", {"statistical": 1, "fixed": 2}), says="field 'verdict'")
kind("certificate_not_an_object", _field("certificate", True), says="field 'certificate'")
# case.json: the array records
kind("inputs_not_a_list", _field("inputs", {"x": 1}), says="field 'inputs'")
kind("inputs_empty", _field("inputs", []), says="0 input(s)")
kind("input_record_not_an_object", edit_meta(lambda m: m["inputs"].__setitem__(0, 5)), says="inputs[0]")
kind("input_key_missing", _rec("inputs", 0, "key", _DEL), says="no string 'key'")
kind("input_key_not_a_string", _rec("inputs", 0, "key", 0), says="no string 'key'")
kind("input_key_twice", _rec("inputs", 1, "key", "input0"), says="declared twice")
kind("input_dropped_from_case_json", edit_meta(lambda m: m["inputs"].pop(1)), says="1 input(s)")
kind("shape_negative", _rec("inputs", 0, "shape", [-2, 8]), says="shape [-2, 8]")
kind("shape_huge", _rec("inputs", 0, "shape", [2 ** 40, 8]), says="over the limit")
kind("shape_overflows_int64", _rec("inputs", 0, "shape", [2 ** 40, 2 ** 40]), says="over the limit")
kind("shape_float", _rec("inputs", 0, "shape", [2.0, 8]), says="shape [2.0, 8]")
kind("shape_bool", _rec("inputs", 0, "shape", [True, 8]), says="shape [True, 8]")
kind("shape_not_a_list", _rec("inputs", 0, "shape", "2x8"), says="shape '2x8'")
kind("shape_other_than_saved", _rec("inputs", 0, "shape", [3, 8]), file=NPZ,
     says="array has shape (2, 8) but case.json records [3, 8]")
kind("shape_other_rank", _rec("inputs", 0, "shape", [16]), file=NPZ, says="records [16]")
kind("dtype_unknown", _rec("inputs", 0, "dtype", "bfloat17"), says="dtype 'bfloat17'")
kind("dtype_missing", _rec("inputs", 0, "dtype", _DEL), says="dtype None")
kind("dtype_an_attribute_of_torch", _rec("inputs", 0, "dtype", "cuda"), says="dtype 'cuda'")
kind("format_unknown", _rec("inputs", 0, "format", "bf17"), says="format 'bf17'")
kind("format_dtype_mismatch", _rec("inputs", 0, "format", "fp16"), says="does not hold format fp16")
kind("format_on_an_integer_dtype", edit_meta(lambda m: m["inputs"][0].update(format="bf16", dtype="int64")),
     says="does not hold format bf16")
kind("format_missing_on_a_float_dtype", _rec("inputs", 0, "format", None), says="dtype 'bfloat16' and no format")
kind("input_renamed", _rec("inputs", 0, "name", "q"), status="reproduced",
     why="inputs are passed by position; the recorded name is for the reader")
kind("outputs_not_a_list", _field("outputs", "y"), says="field 'outputs'")
kind("output_declared_not_saved", edit_meta(lambda m: m["outputs"].append(
    {"key": "output2", "format": "bf16", "dtype": "bfloat16", "shape": [2]})), file=NPZ, says="'output2'")
kind("output_missing_from_both_saved_outputs",
     lambda d: edit_meta(lambda m: m["outputs"].pop(1))(d) or edit_members(lambda ms: ms.pop("output1.npy") and None)(d),
     replay={"saved_outputs": True}, file=NPZ, says="2 output(s) but 1 were given")
kind("output_other_shape_in_both_saved_outputs",
     lambda d: edit_meta(lambda m: m["outputs"][0].update(shape=[2, 4]))(d)
     or edit_members(lambda ms: ms.update({"output0.npy": npy(np.zeros((2, 4), np.uint16))}))(d),
     replay={"saved_outputs": True}, file=NPZ, says="shape (2, 4)")
kind("outputs_none_saved_outputs_asked",
     lambda d: edit_meta(lambda m: m.update(outputs=[]))(d)
     or edit_members(lambda ms: {k: v for k, v in ms.items() if k.startswith("input")})(d),
     replay={"saved_outputs": True}, says="saved no outputs")
# inputs.npz: the file
kind("npz_missing", _unlink(NPZ), file=NPZ, says="missing")
kind("npz_empty", _write(NPZ, b""), file=NPZ, says="is empty")
kind("npz_truncated", _truncate(NPZ), file=NPZ, says="not a zip archive")
kind("npz_truncated_at_the_end", _truncate(NPZ, 0.99), file=NPZ, says="not a zip archive")
kind("npz_not_a_zip", _write(NPZ, os.urandom(512)), file=NPZ, says="not a zip archive")
kind("npz_damaged_directory", lambda d: (d / NPZ).write_bytes((d / NPZ).read_bytes().replace(b"PK\x01\x02", b"PK\x01\x09")),
     file=NPZ, says="cannot read it as a plain-array .npz")
kind("npz_is_a_directory", _replace_with_dir(NPZ), file=NPZ, says="is a directory")
kind("npz_symlink_loop", _symlink(NPZ, "self"), file=NPZ, says="symlink loop")
kind("npz_fifo", _fifo(NPZ), file=NPZ, says="is a FIFO")
kind("npz_dev_zero", _symlink(NPZ, "/dev/zero"), file=NPZ, says="is a device")
kind("npz_symlink_outside_the_corpus", _symlink(NPZ, "/etc/passwd"), file=NPZ, says="not a zip archive",
     skip="" if os.path.isfile("/etc/passwd") else "no /etc/passwd here")


def _outside(d: Path) -> Path:
    """A directory outside the corpus the case is in (and outside what the plugin collects)."""
    out = d.parent.parent.parent / f"outside-{d.parent.parent.name}-{d.parent.name}"
    out.mkdir()
    return out


def _link_outside(arrays: Callable[[Path], dict]):
    def edit(d):
        target = _outside(d) / NPZ
        np.savez(target, **arrays(d))
        (d / NPZ).unlink()
        os.symlink(target, d / NPZ)
    return edit


kind("npz_symlink_outside_to_other_arrays", _link_outside(lambda d: {"input0": input0(d), "input1": np.array([3, 5]),
                                                                      "output0": input0(d), "output1": input0(d)[:, 0]}),
     file=NPZ, says="[input1]: array has shape (2,) but case.json records [8]")
kind("npz_symlink_outside_to_the_same_arrays", _link_outside(
    lambda d: {k.removesuffix(".npy"): np.lib.format.read_array(io.BytesIO(v)) for k, v in members(d).items()}),
     status="reproduced", why="a linked inputs.npz is read through the link, and judged by what it holds")
kind("npz_huge_sparse", _sparse(NPZ, 8 * GIB), file=NPZ, says="over the limit")
kind("npz_unreadable", _unreadable(NPZ), file=NPZ, says="Permission denied", skip="root reads any file" if IS_ROOT else "")
# inputs.npz: its members
kind("member_renamed", edit_members(lambda ms: {("inputX.npy" if k == "input0.npy" else k): v for k, v in ms.items()}),
     file=NPZ, says="'inputX.npy'")
kind("member_extra", edit_members(lambda ms: ms.update({"extra.npy": npy(np.zeros(2, np.uint16))})), file=NPZ,
     says="'extra.npy'")
kind("member_missing", edit_members(lambda ms: ms.pop("input1.npy") and None), file=NPZ, says="no array 'input1'")
kind("member_twice", edit_members(lambda ms: list(ms.items()) + [("input0.npy", ms["input0.npy"])]), file=NPZ,
     says="twice")
kind("member_in_a_subdirectory", edit_members(lambda ms: {("sub/" + k if k == "input0.npy" else k): v
                                                          for k, v in ms.items()}), file=NPZ, says="'sub/input0.npy'")
kind("member_not_npy", edit_members(lambda ms: {("input0" if k == "input0.npy" else k): v for k, v in ms.items()}),
     file=NPZ, says="'input0'")
kind("many_members", lambda d: (d / NPZ).write_bytes(raw_zip([Entry(f"m{i}.npy", b"") for i in range(20000)])),
     file=NPZ, says="20000 entries")
kind("compression_method_unknown",
     lambda d: (d / NPZ).write_bytes(raw_zip([Entry(n, v, 99, zlib.crc32(v), len(v)) for n, v in members(d).items()])),
     file=NPZ, says="compression method 99")
kind("member_encrypted",
     lambda d: (d / NPZ).write_bytes(raw_zip([Entry(n, v, 0, zlib.crc32(v), len(v), flags=1)
                                              for n, v in members(d).items()])), file=NPZ, says="encrypted")
kind("member_crc_mismatch",
     lambda d: (d / NPZ).write_bytes(raw_zip([Entry(n, v, 0, zlib.crc32(v) ^ 1, len(v)) for n, v in members(d).items()])),
     file=NPZ, says="CRC")
kind("member_bits_flipped_crc_kept",
     lambda d: (d / NPZ).write_bytes(raw_zip([Entry(n, v[:-1] + bytes([v[-1] ^ 0x40]), 0, zlib.crc32(v), len(v))
                                              for n, v in members(d).items()])), file=NPZ, says="CRC")
kind("deflated_members", lambda d: put_members(d, members(d), zipfile.ZIP_DEFLATED), status="reproduced",
     why="np.savez_compressed writes deflated members; they are read like stored ones")
kind("lzma_members", lambda d: put_members(d, members(d), zipfile.ZIP_LZMA), status="reproduced",
     why="zip's lzma method is a compression zipfile reads, bounded like deflate")
# inputs.npz: the .npy inside
kind("npy_bad_magic", edit_members(lambda ms: ms.update({"input0.npy": b"NOTNUMPY" + ms["input0.npy"][8:]})),
     file=NPZ, says="cannot read it as a plain-array .npz")
kind("npy_version_3", edit_members(lambda ms: ms.update({"input0.npy": ms["input0.npy"][:6] + b"\x03\x00"
                                                                         + ms["input0.npy"][8:]})),
     file=NPZ, says="format version (3, 0)")
kind("npy_header_garbage", edit_members(lambda ms: ms.update({"input0.npy": npy_header("{'descr': <u2 oops", b"\0" * 32)})),
     file=NPZ, says="cannot read it as a plain-array .npz")
kind("npy_header_huge", edit_members(lambda ms: ms.update({"input0.npy": npy_header(
    "{'descr': '<u2', 'fortran_order': False, 'shape': (2, 8), }" + " " * 60000, b"\0" * 32)})),
     file=NPZ, says="refused unread")
kind("npy_header_shape_lies", edit_members(lambda ms: ms.update({"input0.npy": npy_header(
    "{'descr': '<u2', 'fortran_order': False, 'shape': (3, 8), }", b"\0" * 32)})), file=NPZ,
     says="array has shape (3, 8) but case.json records [2, 8]")
kind("npy_header_and_case_json_agree_data_short",
     lambda d: _rec("inputs", 0, "shape", [3, 8])(d) or edit_members(lambda ms: ms.update({"input0.npy": npy_header(
         "{'descr': '<u2', 'fortran_order': False, 'shape': (3, 8), }", b"\0" * 32)}))(d), file=NPZ,
     says="declares 48 bytes of data")
kind("npy_header_dtype_wider", edit_members(lambda ms: ms.update({"input0.npy": npy_header(
    "{'descr': '<u4', 'fortran_order': False, 'shape': (2, 8), }", b"\0" * 32)})), file=NPZ, says="<u4")
kind("npy_header_dtype_float", edit_members(lambda ms: ms.update({"input0.npy": npy_header(
    "{'descr': '<f2', 'fortran_order': False, 'shape': (2, 8), }", b"\0" * 32)})), file=NPZ, says="<f2")
kind("npy_big_endian", edit_members(lambda ms: ms.update({"input0.npy": npy_header(
    "{'descr': '>u2', 'fortran_order': False, 'shape': (2, 8), }", b"\0" * 32)})), file=NPZ, says=">u2")
kind("npy_trailing_bytes", edit_members(lambda ms: ms.update({"input0.npy": ms["input0.npy"] + b"\0" * 64})),
     file=NPZ, says="the zip entry holds")
kind("npy_object_array", edit_members(lambda ms: ms.update({"input0.npy": npy(np.array([object()] * 16, dtype=object)
                                                                              .reshape(2, 8))})),
     file=NPZ, says="an object array; refused")
kind("npy_structured_with_object", edit_members(lambda ms: ms.update({"input0.npy": npy(
    np.zeros((2, 8), dtype=[("a", "<u2"), ("b", "O")]))})), file=NPZ, says="an object array; refused")
kind("npy_fortran_order", lambda d: put_array("input0", np.asfortranarray(input0(d)), d), status="reproduced",
     why="a column-major .npy holds the same values; numpy writes one for a Fortran-ordered array")
# inputs.npz: bombs (memory measured in a fresh process as well, below)
kind("bomb_honest_size_8gib", lambda d: _bomb(d, n_chunks=8192, recorded=None), file=NPZ, says="refused unread",
     bomb=True)
kind("bomb_size_recorded_small", lambda d: _bomb(d, n_chunks=8192, recorded=len(npy_header(
    "{'descr': '<u2', 'fortran_order': False, 'shape': (2, 8), }")) + 32), file=NPZ, says="compressed bytes",
     bomb=True)
kind("bomb_modest_header_entry_900mib", lambda d: _bomb(d, n_chunks=900, recorded=None), file=NPZ,
     says="refused unread", bomb=True)
kind("bomb_header_declares_32gib", lambda d: _bomb(d, n_chunks=64, recorded=None, header=(
    "{'descr': '<u2', 'fortran_order': False, 'shape': (2147483648, 8), }")), file=NPZ,
     says="refused unread", bomb=True)
kind("bomb_case_json_agrees_32gib",
     lambda d: _rec("inputs", 0, "shape", [2 ** 31, 8])(d) or _bomb(d, n_chunks=64, recorded=None, header=(
         "{'descr': '<u2', 'fortran_order': False, 'shape': (2147483648, 8), }")), says="over the limit", bomb=True)
# values that are not corruption, and labels that are
kind("nan_in_an_input", set_bits("input0", (0, 1), math.nan), status="reproduced",
     why="NaN inputs are judged as nonfinite='uncertified' judges them: the faulty kernel's rejects elsewhere remain")
kind("inf_in_an_input", set_bits("input0", (1, 2), math.inf), status="reproduced",
     why="an infinite input is a value; the elements it reaches are uncertified, the others judged")
kind("nan_in_a_saved_output", set_bits("output0", (0, 3), math.nan), status="reproduced",
     replay={"saved_outputs": True}, why="a NaN output where the reference is finite is a reject, not corruption")
kind("inf_in_a_saved_output_correct_case", set_bits("output0", (1,), math.inf), base="ce", status="reproduced",
     replay={"saved_outputs": True}, why="an infinite loss where the reference is finite is a reject")
kind("labels_out_of_range", lambda d: put_array("input1", np.array([3, 8]), d), base="ce", file=NPZ,
     says="index 8 is out of bounds")
kind("labels_far_out_of_range", lambda d: put_array("input1", np.array([3, 2 ** 40]), d), base="ce", file=NPZ,
     says="out of bounds")
kind("labels_float", lambda d: edit_meta(lambda m: m["inputs"][1].update(format="bf16", dtype="bfloat16"))(d)
     or put_array("input1", np.array([0x4040, 0x40A0], np.uint16), d), base="ce", file=NPZ, says="labels")
kind("labels_other_length", lambda d: _rec("inputs", 1, "shape", [3])(d) or put_array("input1", np.array([1, 2, 3]), d),
     base="ce", file=NPZ, says="labels")
kind("labels_negative", lambda d: put_array("input1", np.array([-5, 3]), d), base="ce", file=NPZ, says="labels")
kind("labels_ignore_index", lambda d: put_array("input1", np.array([-100, 3]), d), base="ce", status="ok",
     why="-100 is cross_entropy's ignore_index: the row is ignored, by the kernel and the reference")
# the path
kind("unicode_path", lambda d: d.rename(d.parent / "cas€-ü-案例") or d.parent / "cas€-ü-案例", status="reproduced",
     why="a directory name is any name the file system takes")
kind("undecodable_path", lambda d: d.rename(d.parent / os.fsdecode(b"case-\xff\xfe")) or d.parent / os.fsdecode(b"case-\xff\xfe"),
     status="reproduced", why="POSIX paths are bytes; Python carries undecodable ones as surrogate escapes")
kind("case_json_path_given", lambda d: d / CJ, status="reproduced", why="a case is named by its directory or its case.json")
def _dir_to_file(d):
    shutil.rmtree(d)
    d.write_text("not a directory")


kind("case_dir_is_a_file", _dir_to_file, says="is a file")
kind("case_dir_missing", lambda d: shutil.rmtree(d), says="no such corpus case")
kind("case_dir_empty", lambda d: [p.unlink() for p in d.iterdir()] and None, says="missing")
kind("case_dir_symlink_loop", lambda d: shutil.rmtree(d) or os.symlink(d, d) or d, says="symlink loop")
kind("extra_fields_in_case_json", edit_meta(lambda m: m.update(comment="triaged by Ana", future={"x": 1})),
     status="reproduced", why="fields this version does not read are kept for the versions that do")
kind("optional_fields_absent", edit_meta(lambda m: [m.pop(k) for k in ("seed", "group", "case", "versions",
                                                                         "created", "replay", "failure_class")]),
     status="reproduced", why="only the fields replay reads are required")
kind("expect_reject", _field("expect", "reject"), status="reproduced",
     why="an oracle regression case: still rejected, so it passes")


def _kernel_module(text):
    """A kind whose kernel is a module of the user's that fails to import."""
    def edit(d):
        name = f"corrupt_kernel_{abs(hash(text)) % 10**8}"
        (d.parent.parent / f"{name}.py").write_text(textwrap.dedent(text))     # on sys.path (case_copy)
        edit_meta(lambda m: m.update(kernel={"spec": f"{name}:fn"}, outputs=[]))(d)
        edit_members(lambda ms: {k: v for k, v in ms.items() if k.startswith("input")})(d)
    return edit


kind("kernel_module_syntax_error", _kernel_module("def fn(x, w, **p):\n    return x +\n"), file=".py:2",
     says="SyntaxError")
kind("kernel_module_raises_at_import", _kernel_module("raise RuntimeError('refusing to be imported')\n"),
     file=".py:1", says="refusing to be imported")


# case.json's "finding": what a run saved the case from (a kernel error here: no outputs)
def _finding(**edit):
    return edit_meta(lambda m: m["finding"].update(edit))


kind("finding_not_an_object", _field("finding", "error"), base="err", says="field 'finding'")
kind("finding_status_unknown", _finding(status="exploded"), base="err", says="field 'finding'")
kind("finding_status_missing", edit_meta(lambda m: m["finding"].pop("status")), base="err", says="field 'finding'")
kind("finding_status_not_a_string", _finding(status=["error"]), base="err", says="field 'finding'")
kind("finding_error_not_a_string", _finding(error=5), base="err", says="field 'finding'")
kind("finding_traceback_not_a_string", _finding(traceback={"line": 1}), base="err", says="field 'finding'")
kind("finding_error_kernel_gone", edit_meta(lambda m: m["kernel"].update(spec="no_such_module_xyz:fn")), base="err",
     says="saved no outputs and its kernel 'no_such_module_xyz:fn' cannot be imported")
kind("finding_error_replays", lambda d: None, base="err", status="reproduced", note="unsupported shape (2, 4)",
     why="a kernel error saved without outputs: its kernel re-run raises again")
kind("finding_null", _field("finding", None), status="reproduced",
     why="a case saved before findings were recorded (no 'finding'): a reject, judged as one")
kind("finding_crash", _finding(status="crash"), base="err", status="reproduced", note="unsupported shape", slow=True,
     why="a crash finding replays its kernel in the worker process (which survives it)")
kind("finding_error_wrong_shape_saved_outputs", lambda d: None, base="shape", status="reproduced",
     note="outputs not judgeable",
     replay={"saved_outputs": True}, why="a kernel error's outputs of the wrong shape are saved to meet it again")
kind("finding_reject_with_wrong_shape_outputs", _finding(status="reject"), base="shape", file=NPZ,
     replay={"saved_outputs": True}, says="the saved outputs do not fit rms_norm")
kind("bomb_consistent_512mib",
     lambda d: _rec("inputs", 0, "shape", [2, 2 ** 27])(d) or _bomb(d, n_chunks=512, recorded=None, header=(
         "{'descr': '<u2', 'fortran_order': False, 'shape': (2, 134217728), }")), file=NPZ, says="over 64-fold",
     bomb=True)


# payloads that act when unpickled: nothing of a case is ever unpickled, so the marker never appears
MARKER = "UNPICKLED"


class _Payload:
    def __init__(self, path):
        self.path = str(path)

    def __reduce__(self):
        return (os.mkdir, (self.path,))


def _payload(d: Path) -> _Payload:
    return _Payload(d.parent / MARKER)


kind("npy_object_array_payload", lambda d: edit_members(lambda ms: ms.update({"input0.npy": npy(
    np.array([_payload(d)] * 16, dtype=object).reshape(2, 8))}))(d), file=NPZ, says="an object array; refused")
kind("npz_is_a_pickle", lambda d: (d / NPZ).write_bytes(__import__("pickle").dumps(_payload(d))), file=NPZ,
     says="not a zip archive")
kind("npz_is_a_torch_save", lambda d: torch.save({"input0": _payload(d)}, d / NPZ), file=NPZ,
     says="which case.json does not declare")


# corrupt against the operator, kernel or backend it names, its files sound: corpus.load reads it
LOADS = {"op_unknown", "operator_module_missing", "operator_not_an_operator", "operator_is_another_op",
         "kernel_unknown_without_outputs", "param_unknown_name", "param_bad_choice", "param_wrong_type", "param_nan",
         "backend_gpu_without_cuda", "output_missing_from_both_saved_outputs",
         "output_other_shape_in_both_saved_outputs", "outputs_none_saved_outputs_asked", "labels_out_of_range", "labels_negative",
         "labels_far_out_of_range", "labels_float", "labels_other_length", "kernel_module_syntax_error",
         "kernel_module_raises_at_import", "finding_error_kernel_gone", "finding_reject_with_wrong_shape_outputs"}
# sound cases this process cannot run (a module not importable from here, a backend this machine
# lacks): "cannot be replayed here", not "corrupt", still exit 2
HERE = {"operator_module_missing", "backend_gpu_without_cuda", "finding_error_kernel_gone"}
# replay finds these against the operator before reading inputs.npz; corpus.load, which knows
# no operator, finds the arrays case.json does not declare: (the file, what it says)
LOAD_SAYS = {"inputs_empty": (NPZ, "holds 'input0.npy', which case.json does not declare"),
             "input_dropped_from_case_json": (NPZ, "holds 'input1.npy', which case.json does not declare")}
# the path given is no case (the directory is gone, a file, a loop, empty): the command line says
# so on stderr, as of any path holding no case
PATH_KINDS = {"case_dir_is_a_file": "not a corpus case or directory", "case_dir_missing": "not a corpus case or "
              "directory", "case_dir_symlink_loop": "not a corpus case or directory",
              "case_dir_empty": "no corpus cases under it"}


def test_the_battery_is_large_enough():
    corrupt = [k for k in KINDS if k.status == "corrupt"]
    assert len({k.name for k in KINDS}) == len(KINDS) and len(corrupt) >= 60, (len(corrupt), len(KINDS))
    assert all(k.why for k in KINDS if k.status != "corrupt") and all(k.says for k in corrupt)


@pytest.fixture
def unpickled(monkeypatch):
    """Every way a case could be unpickled in this process (pickle.load, pickle.loads, a new
    pickle.Unpickler, torch.load), recorded: the battery asserts the list stays empty."""
    import pickle
    calls = []

    def record(name, real):
        def f(*a, **kw):
            calls.append(name)
            return real(*a, **kw)
        return f
    for name in ("load", "loads"):
        monkeypatch.setattr(pickle, name, record(f"pickle.{name}", getattr(pickle, name)))
    monkeypatch.setattr(pickle, "Unpickler", record("pickle.Unpickler", pickle.Unpickler))
    monkeypatch.setattr(torch, "load", record("torch.load", torch.load))
    return calls


@pytest.fixture
def case_copy(saved, tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "path", [str(tmp_path)] + sys.path)      # the kinds' kernel modules

    def copy(base):
        d = tmp_path / "corpus" / "case"
        shutil.copytree(saved[base], d)
        return d
    return copy


@pytest.mark.parametrize("k", [pytest.param(k, id=k.name, marks=(
    [pytest.mark.skip(reason=k.skip)] if k.skip else [])
    + ([pytest.mark.xfail(strict=True, reason=k.xfail)] if k.xfail else [])
    + ([pytest.mark.slow] if k.slow else [])) for k in KINDS])
def test_every_corrupt_case_is_reported_and_the_others_replay(k, case_copy, capsys, unpickled):
    from numoracle.runner import replay
    d = case_copy(k.base)
    path = k.edit(d)
    path = path if isinstance(path, Path) else d
    tracemalloc.start()
    try:
        r = replay(path, **k.replay)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < PEAK_BYTES, f"{k.name}: {peak} bytes traced"
    text = json.dumps({x: v for x, v in r.items() if x != "verdicts"})
    assert "Traceback" not in text and 'File "' not in text
    assert r["status"] == k.status, r.get("reason") or r.get("note")
    assert r.get("here", False) == (k.name in HERE), (k.name, r.get("reason"))
    if k.status == "corrupt":
        reason = r["reason"]
        assert k.file in reason and k.says in reason, reason
        assert "numoracle does not name" not in reason, reason          # a named problem, not the last guard
        assert "\n" not in reason
    elif k.note:
        assert k.note in r["note"] and not r["verdicts"], r["note"]
    else:
        assert r["verdicts"] and set(r["statuses"]) == {"statistical", "fixed"}
        if k.name == "kernel_unknown_with_saved_outputs":
            assert "kernel cannot be imported" in r["note"] and not r["kernel_ran"]
    _through_the_corpus_api(k, path, r)
    _through_the_command_line(k, path, r, capsys)
    if not k.slow:                       # (the supervised worker pickles its own messages)
        assert unpickled == [], unpickled
    assert not (d.parent / MARKER).exists()


def _through_the_corpus_api(k, path, r):
    """corpus.load: a case whose files are damaged raises InvalidArgument saying what replay
    says; one whose files are sound (corrupt only against its operator, kernel or backend,
    LOADS) loads, and so do the cases that are not corrupt."""
    from numoracle.errors import InvalidArgument
    if k.status == "corrupt" and k.name not in LOADS:
        with pytest.raises(InvalidArgument) as exc:
            C.load(path)
        if k.name in LOAD_SAYS:
            file, says = LOAD_SAYS[k.name]
            assert str(exc.value).startswith(f"{Path(r['path']) / file}: {says}"), str(exc.value)
        else:
            assert str(exc.value) == r["reason"], (str(exc.value), r["reason"])
    else:
        c = C.load(path)
        assert len(c.inputs) == len(c.meta["inputs"]) and all(isinstance(t, torch.Tensor) for t in c.inputs)
        assert k.status != "corrupt" or k.name in LOADS


def _through_the_command_line(k, path, r, capsys):
    """numoracle replay PATH: exit 2 for a corrupt case (1 reproduced, 0 ok), one line for the
    case saying what replay says, no traceback on either stream."""
    from numoracle.cli import main
    argv = ["replay", "--brief", "--isolate" if k.slow else "--no-isolate"]
    argv += ["--saved-outputs"] if k.replay.get("saved_outputs") else []
    capsys.readouterr()
    rc = main(argv + [str(path)])
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err and 'File "' not in out + err, out + err
    assert rc == ("ok", "reproduced", "corrupt").index(k.status), (rc, out, err)
    lines = out.splitlines()
    if k.name in PATH_KINDS:          # not a case at all: a usage error on stderr, the others still run
        assert f"numoracle: error: {path}" in err and PATH_KINDS[k.name] in err, err
        assert lines[-1] == "0 case(s): none; 1 path(s) holding no case", out
        return
    shown = r["path"].encode("utf-8", "backslashreplace").decode()
    mine = [line for line in lines if line.startswith(f"{shown}:")]
    assert len(mine) == 1 and lines[-1].startswith("1 case(s): "), out
    if k.status == "corrupt":
        said = "cannot be replayed here" if k.name in HERE else "corrupt"
        assert mine[0] == f"{shown}: {said}: {r['reason']}".encode("utf-8", "backslashreplace").decode(), mine
        assert lines[-1] == f"1 case(s): 1 {'not replayable here' if k.name in HERE else 'corrupt'}", lines[-1]
    else:
        assert mine[0].startswith(f"{shown}: {k.status}"), mine


# what the pytest plugin cannot be given: no case there to collect, or a replay mode it lacks
NOT_FOR_THE_PLUGIN = set(PATH_KINDS) | {"case_json_path_given"}


def _for_the_plugin(k) -> bool:
    return not (k.skip or k.xfail or k.slow or k.replay or k.name in NOT_FOR_THE_PLUGIN)


def _one_corpus(saved, corpora: Path) -> list:
    """Every kind the plugin can be given, each edited into corpora/<kind>/case; the kinds."""
    kinds = [k for k in KINDS if _for_the_plugin(k)]
    for k in kinds:
        d = corpora / k.name / "case"
        shutil.copytree(saved[k.base], d)
        k.edit(d)
    return kinds


def test_the_plugin_collects_every_case_once_and_fails_the_corrupt_ones(saved, pytester, monkeypatch):
    """Every kind's case under one corpora/ directory, collected by the pytest plugin in one
    run: one item per case (one whose case.json is missing, a directory, a FIFO or a loop is
    collected from its inputs.npz), no collection error and no hang (a FIFO, /dev/zero and a
    4 GiB case.json are not read at collection), a corrupt case's item failing with the file
    and the problem and no traceback, the others passing or failing as their replay says."""
    corpora = pytester.path / "corpora"
    monkeypatch.syspath_prepend(str(corpora))          # the kinds' kernel modules
    kinds = _one_corpus(saved, corpora)

    class Record:
        items, reports, collect_errors = [], {}, []

        def pytest_collection_modifyitems(self, items):
            Record.items = [i.nodeid for i in items]

        def pytest_collectreport(self, report):
            if report.failed:
                Record.collect_errors.append((report.nodeid, report.longreprtext))

        def pytest_runtest_logreport(self, report):
            if report.when == "call" or report.failed:
                Record.reports[report.nodeid] = (report.outcome, report.longreprtext)

    res = pytester.runpytest_inprocess("-p", "no:cacheprovider", "-q", "corpora", plugins=[Record()])
    assert Record.collect_errors == []
    by_kind = {}
    for nodeid in Record.items:
        by_kind.setdefault(nodeid.split("/")[1], []).append(nodeid)
    assert sorted(by_kind) == sorted(k.name for k in kinds if k.name != "case_dir_empty")
    assert all(len(v) == 1 for v in by_kind.values()), {k: v for k, v in by_kind.items() if len(v) != 1}
    for k in kinds:
        if k.name == "case_dir_empty":
            continue
        outcome, text = Record.reports[by_kind[k.name][0]]
        assert "Traceback" not in text and 'File "' not in text, (k.name, text)
        if k.status == "corrupt":
            assert outcome == "failed" and k.file in text and k.says in text, (k.name, outcome, text)
        elif k.status == "ok" or k.name == "expect_reject":
            assert outcome == "passed", (k.name, text)
        else:                            # a reproduced finding: the bug it records is not fixed
            assert outcome == "failed", (k.name, text)
            assert (k.note or "Kernel output outside its acceptance region") in text, (k.name, text)
    assert res.ret == 1


@pytest.mark.parametrize("kw,words", [
    ({"timeout": 0}, "timeout=0"), ({"timeout": math.nan}, "timeout=nan"), ({"timeout": "5"}, "timeout='5'"),
    ({"timeout": True}, "timeout=True"), ({"isolate": "yes"}, "isolate='yes'"), ({"isolate": 1}, "isolate=1"),
    ({"backend": "tpu"}, "tpu")])
def test_replays_own_bad_arguments_raise_before_any_case_is_read(kw, words, saved):
    """The caller's own arguments are the caller's error (InvalidArgument), not the case's."""
    from numoracle.errors import InvalidArgument
    from numoracle.runner import replay
    with pytest.raises(InvalidArgument, match=re.escape(words)):
        replay(saved["rms"], **kw)


def test_bombs_are_refused_in_bounded_memory(saved, tmp_path):
    """Every bomb replayed in one fresh process: its peak RSS (ru_maxrss) grows by less than
    RSS_BYTES over them all, after a warm-up replay of the intact case."""
    bombs = [k for k in KINDS if k.bomb]
    paths = []
    for i, k in enumerate(bombs):
        d = tmp_path / f"bomb{i}"
        shutil.copytree(saved[k.base], d)
        path = k.edit(d)
        paths.append(str(path if isinstance(path, Path) else d))
    script = textwrap.dedent("""
        import json, resource, sys
        from numoracle.runner import replay
        replay(sys.argv[1], saved_outputs=True)                  # imports and first-use allocations
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        out = [replay(p)["status"] for p in sys.argv[2:]]
        after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        print(json.dumps({"statuses": out, "grew_kib": after - before}))
    """)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TRITON_INTERPRET": "1"}
    done = subprocess.run([sys.executable, "-c", script, str(saved["rms"]), *paths], capture_output=True, text=True,
                          env=env, timeout=300, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert got["statuses"] == ["corrupt"] * len(bombs)
    assert got["grew_kib"] * 1024 < RSS_BYTES, got


# ---- the command line ----------------------------------------------------------------------------

@pytest.fixture
def mix(saved, tmp_path):
    """An intact reject, an intact accepted case, a case with a damaged case.json and one
    missing its inputs.npz, under one corpus directory."""
    root = tmp_path / "corpus"
    good = shutil.copytree(saved["rms"], root / "rms_norm" / "k" / "good")
    ok = shutil.copytree(saved["ce"], root / "cross_entropy" / "correct" / "ok")
    bad = shutil.copytree(saved["rms"], root / "rms_norm" / "k" / "bad-json")
    (bad / CJ).write_text("{ truncated")
    lost = shutil.copytree(saved["rms"], root / "rms_norm" / "k" / "lost-npz")
    (lost / NPZ).unlink()
    return root, [good, ok, bad, lost]


def test_cli_replays_every_case_of_a_mix_and_exits_with_the_worst(mix, capsys):
    from numoracle.cli import main
    root, (good, ok, bad, lost) = mix
    assert main(["replay", "--brief", "--no-isolate", str(good), str(ok), str(bad), str(lost)]) == 2
    out = capsys.readouterr().out.splitlines()
    lines = {p: [line for line in out if line.startswith(f"{p}:")] for p in (good, ok, bad, lost)}
    assert all(len(v) == 1 for v in lines.values()), out
    assert ": reproduced (" in lines[good][0] and ": ok (" in lines[ok][0]
    assert f"corrupt: {bad / CJ}: not valid JSON" in lines[bad][0]
    assert f"corrupt: {lost / NPZ}: missing" in lines[lost][0]
    assert out[-1] == "4 case(s): 1 ok, 1 reproduced, 2 corrupt"
    # the corpus directory itself: the same four, the one missing its inputs.npz included
    assert main(["replay", "--brief", "--no-isolate", str(root)]) == 2
    assert capsys.readouterr().out.splitlines()[-1] == "4 case(s): 1 ok, 1 reproduced, 2 corrupt"
    assert main(["replay", "--brief", "--no-isolate", str(good), str(ok)]) == 1
    assert main(["replay", "--brief", "--no-isolate", str(ok)]) == 0


def test_cli_json_is_one_document_of_every_case(mix, capsys):
    from numoracle.cli import main
    root, (good, ok, bad, lost) = mix
    assert main(["replay", "--json", "--no-isolate", str(root), str(root / "nowhere")]) == 2
    captured = capsys.readouterr()
    doc = json.loads(captured.out)                       # the whole of stdout is one document
    by_path = {d["path"]: d for d in doc}
    assert {by_path[str(p)]["status"] for p in (good, ok, bad, lost)} == {"reproduced", "ok", "corrupt"}
    assert by_path[str(root / "nowhere")]["status"] == "corrupt" and len(doc) == 5
    assert "not a corpus case" in captured.err and "Traceback" not in captured.err


def test_cli_prints_an_undecodable_path_on_a_strict_utf8_stdout(saved, tmp_path, monkeypatch):
    from numoracle.cli import main
    d = shutil.copytree(saved["ce"], tmp_path / os.fsdecode(b"case-\xff"))
    raw = io.BytesIO()
    out = io.TextIOWrapper(raw, encoding="utf-8", errors="strict")
    monkeypatch.setattr(sys, "stdout", out)
    assert main(["replay", "--brief", "--no-isolate", str(d)]) == 0
    out.flush()
    assert b"case-\\udcff: ok" in raw.getvalue()


@pytest.mark.slow
def test_python_m_numoracle_replay_over_every_kind_at_once(saved, tmp_path):
    """``python -m numoracle replay CORPUS`` (kernels in the supervised worker, the default)
    over one corpus of every kind: one line per case with the status its kind expects, the
    summary, exit 2, and no traceback on stderr."""
    corpora = tmp_path / "corpora"
    kinds = _one_corpus(saved, corpora)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(corpora)])}
    done = subprocess.run([sys.executable, "-m", "numoracle", "replay", "--brief", str(corpora)],
                          capture_output=True, env=env, timeout=600)
    out, err = done.stdout.decode("utf-8"), done.stderr.decode("utf-8", "replace")
    assert done.returncode == 2 and "Traceback" not in out + err, err[-3000:]
    lines = out.splitlines()
    for k in kinds:
        if k.name == "case_dir_empty":
            continue
        mine = [line for line in lines if line.startswith(f"{corpora / k.name}/")]
        said = "cannot be replayed here" if k.name in HERE else k.status
        assert len(mine) == 1 and f": {said}" in mine[0], (k.name, mine)
        if k.status == "corrupt":
            assert k.file in mine[0] and k.says in mine[0], (k.name, mine)
    n = sum(k.name != "case_dir_empty" for k in kinds)
    assert lines[-1].startswith(f"{n} case(s): "), lines[-1]


@pytest.mark.slow
def test_python_m_numoracle_replay_over_a_mix(mix):
    """The mix through ``python -m numoracle``, kernels in the supervised worker (the default)."""
    root, (good, ok, bad, lost) = mix
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    run = [sys.executable, "-m", "numoracle", "replay", "--brief"]
    text = subprocess.run(run + [str(p) for p in (good, ok, bad, lost)], capture_output=True, text=True, env=env,
                          timeout=600)
    assert text.returncode == 2 and "Traceback" not in text.stderr
    assert len(text.stdout.splitlines()) == 5 and text.stdout.splitlines()[-1] == "4 case(s): 1 ok, 1 reproduced, 2 corrupt"
    js = subprocess.run(run[:-1] + ["--json", str(root)], capture_output=True, text=True, env=env, timeout=600)
    assert js.returncode == 2 and len(json.loads(js.stdout)) == 4
