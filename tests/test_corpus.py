"""Corpora: raw-bit round trips, atomic writes, clear errors on corrupt or
foreign files, replay."""

import json
import re
import os
from pathlib import Path

import numpy as np
import pytest
import torch

from numoracle import corpus as C
from numoracle.errors import InvalidArgument
from numoracle.runner import judge, replay
from numoracle.strategies import Case

LLAMA = (("casting", "llama"), ("offset", 0.0))


@pytest.fixture(scope="module")
def reject():
    """A confirmed reject of the registered faulty 'unrounded' kernel, or a
    truncating store: a real Outcome to save."""
    from numoracle import backends
    from numoracle.operators import get
    from numoracle.runner.kernels import import_kernel
    backends.select("interpreter")
    cwd = os.getcwd()
    os.chdir(Path(__file__).resolve().parents[1])
    try:
        k = import_kernel("tests.fixtures.user_kernels:rms_norm_truncating_store")
    finally:
        os.chdir(cwd)
    op = get("rms_norm")
    case = Case("rms_norm", "bf16", 2, 8, "calibration", 0, (), LLAMA, (), 0)
    out = judge(op, k, *case.materialize(), case=case)
    assert out.status == "reject"
    return op, out


def _save(tmp_path, reject, **kw):
    op, out = reject
    return C.save(tmp_path, op, "tests.fixtures.user_kernels:rms_norm_truncating_store", out,
                  backend="interpreter", mode="statistical", **kw)


def test_round_trip_is_bit_exact_and_idempotent(tmp_path, reject):
    op, out = reject
    path = _save(tmp_path, reject)
    assert path.parent.name == "tests.fixtures.user_kernels.rms_norm_truncating_store"
    assert sorted(p.name for p in path.iterdir()) == ["case.json", "inputs.npz"]
    c = C.load(path)
    for a, b in zip(c.inputs, out.inputs):
        assert a.dtype == b.dtype and torch.equal(a.view(torch.int16), b.view(torch.int16))
    assert torch.equal(c.outputs[0].view(torch.int16), out.outputs[0].view(torch.int16))
    assert torch.equal(c.outputs[1], out.outputs[1])
    m = c.meta
    assert m["inputs"][0] == {"name": "x", "key": "input0", "format": "bf16", "dtype": "bfloat16", "shape": [2, 8]}
    assert m["seed"] == 0 and m["group"] == "calibration" and m["params"]["eps"] == 1e-6
    assert set(m["versions"]) >= {"numoracle", "torch", "triton", "python"}
    assert m["verdict"]["fixed"]["status"] == "reject" and m["certificate"]["holds"]
    assert _save(tmp_path, reject) == path                  # same bits, same id: one case
    assert C.find([tmp_path]) == [path]


@pytest.mark.parametrize("dtype", [torch.float16, torch.float32, torch.float8_e4m3fn, torch.float8_e5m2,
                                   torch.int64])
def test_raw_bits_of_other_formats(dtype):
    t = torch.tensor([0.0, -0.0, 1.5, -2.0, 3.0e-3, 7.0]).to(dtype)
    arr, rec = C._to_raw(t)
    assert arr.dtype.kind in "ui"
    back = C._from_raw(arr, rec, "x")
    assert back.dtype == dtype and torch.equal(back.view(torch.uint8), t.view(torch.uint8))


def test_a_killed_write_leaves_no_case(tmp_path, reject, monkeypatch):
    def boom(*a, **k):
        raise KeyboardInterrupt
    monkeypatch.setattr(C.json, "dump", boom)
    with pytest.raises(KeyboardInterrupt):
        _save(tmp_path, reject)
    left = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert left == [] and C.find([tmp_path]) == []


def test_corrupt_and_foreign_files_name_the_file_and_the_problem(tmp_path, reject):
    path = _save(tmp_path, reject)
    cj, npz = path / "case.json", path / "inputs.npz"
    good = cj.read_text()
    cj.write_text("{ not json")
    with pytest.raises(InvalidArgument, match=f"{cj}: not valid JSON"):
        C.load(path)
    cj.write_text(json.dumps({"hello": 1}))
    with pytest.raises(InvalidArgument, match="no 'schema' field; not a numoracle corpus case"):
        C.load(path)
    cj.write_text(json.dumps({**json.loads(good), "schema": "numoracle.corpus/99"}))
    with pytest.raises(InvalidArgument, match="schema 'numoracle.corpus/99'"):
        C.load(path)
    cj.write_text(good)
    np.savez(npz, input0=np.array([object()], dtype=object))          # would need unpickling
    with pytest.raises(InvalidArgument, match=re.escape(f"{npz}[input0]: an object array; refused")):
        C.load(path)
    npz.write_bytes(b"PK\x03\x04 truncated")
    with pytest.raises(InvalidArgument, match=str(npz)):
        C.load(path)
    npz.unlink()
    with pytest.raises(InvalidArgument, match="missing; a case needs its inputs.npz"):
        C.load(path)
    with pytest.raises(InvalidArgument, match="no such corpus case"):
        C.load(tmp_path / "nowhere")


def test_shape_mismatch_is_reported(tmp_path, reject):
    path = _save(tmp_path, reject)
    meta = json.loads((path / "case.json").read_text())
    meta["inputs"][0]["shape"] = [3, 8]
    (path / "case.json").write_text(json.dumps(meta))
    with pytest.raises(InvalidArgument, match=r"input0\]: array has shape \(2, 8\) but case.json records \[3, 8\]"):
        C.load(path)


def test_replay_reruns_the_cases_kernel_and_says_when_it_only_rejudges_saved_outputs(tmp_path, reject):
    path = _save(tmp_path, reject)
    r = replay(path)                                   # the saved kernel, imported again and re-run
    assert r["kernel_ran"] is True and r["status"] == "reproduced" and "re-run on interpreter" in r["note"]
    r = replay(path, saved_outputs=True)
    assert r["kernel_ran"] is False and r["note"] == "saved outputs re-judged" and r["reproduced"]
    meta = json.loads((path / "case.json").read_text())
    meta["kernel"]["spec"] = "no_such_module_anywhere:kernel"
    (path / "case.json").write_text(json.dumps(meta))
    r = replay(path)
    assert r["kernel_ran"] is False and "saved outputs re-judged: the kernel cannot be imported" in r["note"]
    assert r["reproduced"] and r["statuses"] == {"statistical": "reject", "fixed": "reject"}
    # a registered kernel named in the case is re-run: the correct kernel is accepted on these inputs
    meta["kernel"]["spec"] = "correct"
    (path / "case.json").write_text(json.dumps(meta))
    r = replay(path)
    assert r["kernel_ran"] is True and not r["reproduced"] and r["status"] == "ok" and r["passes"]
