"""How tensors cross between this process and the kernel worker (runner.worker): through
shared memory, bit for bit, for every dtype, layout and size, with the region growing and
shrinking; and the child computes with this process's thread count."""

import pickle

import pytest
import torch

from numoracle import backends
from numoracle.runner import worker as W

DTYPES = [torch.float64, torch.float32, torch.float16, torch.bfloat16, torch.int64, torch.int32, torch.int16,
          torch.int8, torch.uint8, torch.bool, torch.complex64]
DTYPES += [getattr(torch, n) for n in ("float8_e4m3fn", "float8_e5m2", "float8_e8m0fnu", "float4_e2m1fn_x2")
           if hasattr(torch, n)]


def _bits(t):
    return t.contiguous().reshape(-1).view(torch.uint8)


def _random(dtype, shape, gen):
    raw = torch.randint(0, 256, (*shape, torch.empty((), dtype=dtype).element_size()), dtype=torch.uint8,
                        generator=gen)
    if dtype == torch.bool:
        return raw[..., 0] % 2 == 1
    return raw.view(dtype).reshape(shape)        # every bit pattern: NaN payloads, subnormals


def _cross(x, region):
    """``x`` as the other process receives it: described, pickled, its tensors through ``region``."""
    tensors = []
    described = W.pack(x, tensors)
    spans, size = W.write(region, tensors)
    described, spans, size = pickle.loads(pickle.dumps((described, spans, size)))
    return W.unpack(described, "cpu", W._Region(region.fd), spans, size)   # its own mapping of the file


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_every_dtype_and_layout_crosses_bit_for_bit(dtype):
    gen = torch.Generator().manual_seed(0)
    region = W._Region()
    base = _random(dtype, (6, 10), gen)
    sent = [base, base.t(), base[::2, 1::3], _random(dtype, (), gen), _random(dtype, (0, 4), gen),
            _random(dtype, (3, 1, 7), gen)]
    got = _cross(tuple(sent), region)
    assert isinstance(got, tuple) and len(got) == len(sent)
    for s, g in zip(sent, got):
        assert g.dtype == s.dtype and g.shape == s.shape and g.device.type == "cpu"
        assert torch.equal(_bits(g), _bits(s))
    # the receiver's tensors are its own: the next call's bytes do not change them
    _cross((torch.zeros_like(base),), region)
    assert torch.equal(_bits(got[0]), _bits(base))


def test_containers_plain_values_meta_tensors_and_other_objects_cross_as_described():
    region = W._Region()
    x = torch.arange(5, dtype=torch.float32)
    got = _cross({"a": [x, (1, 2.5, "s", None, b"b", True)], "m": torch.empty(3, 2, device="meta"),
                  "o": object()}, region)
    assert torch.equal(got["a"][0], x) and got["a"][1] == (1, 2.5, "s", None, b"b", True)
    assert isinstance(got["a"], list) and got["m"].device.type == "meta" and got["m"].shape == (3, 2)
    assert isinstance(got["o"], W.Unpicklable) and got["o"].type_name == "object"


def test_the_region_grows_for_a_large_call_and_shrinks_after_it(monkeypatch):
    monkeypatch.setattr(W._Region, "SHRINK_ABOVE", 4 << 20)
    writer = W._Region()
    reader = W._Region(writer.fd)
    small, big = torch.arange(10, dtype=torch.float32), torch.rand(5 << 18)      # 5 MiB: an 8 MiB file
    for x in (small, big, small, big):
        tensors = []
        described = W.pack(x, tensors)
        spans, size = W.write(writer, tensors)
        assert torch.equal(W.unpack(described, "cpu", reader, spans, size), x)
        assert writer.size == (W._Region.SMALLEST if x is small else 1 << (size - 1).bit_length())
    assert reader.size >= writer.size


@pytest.fixture()
def worker(monkeypatch):
    monkeypatch.chdir(W.__file__.rsplit("/numoracle/", 1)[0])
    wk = W.Worker(backends.select("interpreter"))
    yield wk
    wk.close(kill=True)


def test_a_kernel_in_the_worker_gets_and_returns_tensors_of_every_size(worker):
    for n in (0, 1, 1000, 1 << 19, 1 << 21, 7):         # across the region's first size and back
        x = torch.rand(n, dtype=torch.float32)
        ran = worker.call(("import", "torch:clone"), [x], {}, {})
        assert ran.ok and torch.equal(ran.outputs, x)
    # a kernel that works in place and returns its input: the parent's tensor is untouched
    x = torch.tensor([-1.0, 2.0, -3.0])
    ran = worker.call(("import", "torch:relu_"), [x], {}, {})
    assert ran.ok and ran.outputs.tolist() == [0.0, 2.0, 0.0] and x.tolist() == [-1.0, 2.0, -3.0]
    assert worker.starts == 1


def test_the_child_computes_with_this_process_thread_count(worker):
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        ran = worker.call(("import", "torch:get_num_threads"), [], {}, {})
        assert ran.ok and ran.outputs == 1
    finally:
        torch.set_num_threads(before)


def test_the_parent_polls_for_short_calls_only(worker):
    import time
    for _ in range(6):                         # the median of the last calls passes the poll's limit
        assert worker.call(("import", "time:sleep"), [0.02], {}, {}).ok
    cpu = time.process_time()
    for _ in range(10):
        assert worker.call(("import", "time:sleep"), [0.02], {}, {}).ok
    # polling would cost this process 3 ms a call; sleeping on the pipe costs it next to nothing
    assert time.process_time() - cpu < 0.012


def test_outputs_that_cannot_cross_are_the_call_error_and_the_child_goes_on(worker):
    x = torch.eye(3)
    ran = worker.call(("import", "torch:Tensor.to_sparse"), [x], {}, {})     # no strided bytes to copy
    assert ran.status == "error" and "cannot be sent to the parent" in ran.error
    assert worker.call(("import", "torch:clone"), [x], {}, {}).ok and worker.starts == 1


def test_a_prestarted_zygote_imports_while_the_caller_goes_on_and_serves_the_first_call(worker):
    worker.prestart()
    zygote = worker._zygote
    # prestart sent the hello and returned: the answer (the zygote's imports done) is not read yet
    assert zygote is not None and zygote.alive() and zygote._unanswered
    worker.prestart()                                   # twice: the same zygote
    assert worker._zygote is zygote
    ran = worker.call(("import", "torch:clone"), [torch.ones(3)], {}, {})
    assert ran.ok and ran.outputs.tolist() == [1.0, 1.0, 1.0]
    assert worker._zygote is zygote and not zygote._unanswered and worker.starts == 1


def test_a_fuzz_run_of_a_named_kernel_starts_its_worker_before_selecting_the_backend(monkeypatch):
    from numoracle.runner import engine
    monkeypatch.chdir(W.__file__.rsplit("/numoracle/", 1)[0])
    W.close_all()
    seen = {}
    select = backends.select

    def selecting(*a, **k):
        w = W._SHARED.get("interpreter")
        seen.setdefault("zygote", w is not None and w._zygote is not None and w._zygote.alive())
        return select(*a, **k)

    monkeypatch.setattr(engine.backends, "select", selecting)
    try:
        res = engine.fuzz("rms_norm", "correct", backend="interpreter", max_examples=1, isolate=True, shrink=False,
                          database=None, seed=1, strategy=None)
        assert res.totals.cases == 1 and seen["zygote"]
        # in-process, nothing is started
        W.close_all()
        seen.clear()
        engine.fuzz("rms_norm", "correct", backend="interpreter", max_examples=1, isolate=False, shrink=False,
                    database=None, seed=1)
        assert seen["zygote"] is False and "interpreter" not in W._SHARED
    finally:
        W.close_all()
