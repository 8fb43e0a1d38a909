"""The repaired interpreter refuses loads, stores and atomics outside a kernel's tensors (defect
``out_of_bounds``, docs/design.md §7): the launch raises OutOfBounds before memory is
touched, naming the kernel's line, the first bad lane and the nearest tensor; a run reports
it as the case's error at that line, shrinks it and saves it."""

import inspect
import os

import pytest
import torch

import numoracle as no
from numoracle import backends

backends.select("interpreter")                   # before the kernels' module is imported

import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from numoracle.runner import fuzz  # noqa: E402
from numoracle.strategies import cases  # noqa: E402
from tests.fixtures import out_of_bounds_kernels as K  # noqa: E402
from tests.fixtures.out_of_bounds import op  # noqa: E402


def _line(fn, text: str) -> str:
    """file:line of the first line of ``fn``'s source holding ``text``."""
    lines, first = inspect.getsourcelines(fn)
    k = next(i for i, s in enumerate(lines) if text in s)
    return f"{os.path.basename(inspect.getsourcefile(fn))}:{first + k}"


def _out_of_bounds(excinfo) -> no.OutOfBounds:
    e = excinfo.value
    while e is not None and not isinstance(e, no.OutOfBounds):
        e = e.__cause__ or e.__context__
    assert e is not None, f"no OutOfBounds in {excinfo.value!r}"
    return e


LOAD_LINE = _line(K._double.fn, "v = tl.load(")
STORE_LINE = _line(K._double.fn, "tl.store(")


def test_a_read_one_element_past_the_input_is_refused_naming_the_line_lane_and_tensor():
    x = torch.ones(3, 5, dtype=torch.bfloat16)
    with pytest.raises(Exception) as excinfo:
        K.double_reading_past_end(x)
    e = _out_of_bounds(excinfo)
    # rows 0 and 1 read the next row's first element (inside x); row 2's lane 5 is past x
    assert e.where == LOAD_LINE
    assert str(e).startswith(f"out-of-bounds load at {LOAD_LINE}: 1 of 6 active lanes address memory outside "
                             f"every tensor argument (the first, lane (5,) at 0x")
    assert "is right after the end of x_ptr (bfloat16, (3, 5), 30 bytes))" in str(e)


def test_a_store_past_the_output_is_refused_before_memory_is_touched():
    x = torch.arange(15, dtype=torch.float32).reshape(3, 5)
    y = torch.full((3, 5), -7.0)
    with pytest.raises(Exception) as excinfo:
        K._double[(3,)](x, y, 5, BLOCK=8, READ_PAST=False, WRITE_PAST=True)
    e = _out_of_bounds(excinfo)
    assert e.where == STORE_LINE and "out-of-bounds store" in str(e) and "right after the end of y_ptr" in str(e)
    # programs 0 and 1 ran, each also writing its masked-away lane (0) over the next row's first
    # element; program 2's store, one lane of which is past y, was refused whole
    assert torch.equal(y[:2], 2 * x[:2]) and y[2, 0] == 0
    assert torch.equal(y[2, 1:], torch.full((4,), -7.0))


def test_masked_lanes_past_the_end_and_a_view_inside_its_storage_are_allowed():
    x = torch.randn(3, 5).to(torch.bfloat16)
    assert torch.equal(K.double(x), (x.float() * 2).to(torch.bfloat16))     # BLOCK 8 > 5: masked lanes
    storage = torch.arange(16, dtype=torch.float32)
    view = storage[:15].view(3, 5)                   # row 2's lane 5 reads storage[15]: inside
    y = torch.zeros(3, 5)
    K._double[(3,)](view, y, 5, BLOCK=8, READ_PAST=True, WRITE_PAST=False)
    assert torch.equal(y, 2 * view)


@triton.jit
def _add_into(o_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.atomic_add(o_ptr + offs, tl.full((BLOCK,), 1.0, tl.float32), mask=offs <= n)


@triton.jit
def _peek(x_ptr, o_ptr, off, tag):
    one = tl.arange(0, 1)
    tl.store(o_ptr + one, tl.load(x_ptr + off + one) + tag * 0)


def test_an_atomic_past_the_end_is_refused():
    o = torch.zeros(4)
    with pytest.raises(Exception) as excinfo:
        _add_into[(1,)](o, 4, BLOCK=8)
    e = _out_of_bounds(excinfo)
    assert "out-of-bounds atomic" in str(e) and "1 of 5 active lanes" in str(e) and "o_ptr (float32, (4,)" in str(e)
    assert torch.equal(o, torch.zeros(4))


def test_a_launch_with_an_integer_argument_that_may_be_an_address_is_not_checked():
    x, out = torch.zeros(1), torch.zeros(1)
    hidden = torch.full((1,), 7.25)                  # memory no argument owns
    off = (hidden.data_ptr() - x.data_ptr()) // 4
    with pytest.raises(Exception) as excinfo:
        _peek[(1,)](x, out, off, 1)
    assert "out-of-bounds load" in str(_out_of_bounds(excinfo))
    _peek[(1,)](x, out, off, 1 << 40)               # perhaps a raw address: the check stands aside
    assert out.item() == 7.25


@pytest.mark.parametrize("isolate", [False, True], ids=["in-process", "worker"])
def test_a_run_reports_the_read_as_an_error_at_the_kernel_line_shrunk_to_one_element(tmp_path, isolate):
    res = fuzz(op, "faulty:reads_past_end", max_examples=10, seed=0, isolate=isolate, corpus=str(tmp_path),
               strategy=cases(op, rows=(1, 4), cols=(1, 16)))
    assert res.found and res.totals.error >= 1 and res.totals.reject == 0
    ce = res.counterexample
    assert ce.status == "error" and ce.failure_class == ("error", "OutOfBounds", LOAD_LINE)
    assert ce.error.startswith(f"OutOfBounds: out-of-bounds load at {LOAD_LINE}:")
    assert tuple(ce.inputs[0].shape) == (1, 1)       # any shape reads past its last row
    assert res.saved


def test_the_correct_kernel_and_a_write_past_the_end_in_a_run():
    ok = fuzz(op, "correct", max_examples=15, seed=1, isolate=False, shrink=False,
              strategy=cases(op, rows=(1, 4), cols=(1, 64)))
    assert not ok.found and ok.totals.accept == ok.totals.cases
    bad = fuzz(op, "faulty:writes_past_end", max_examples=5, seed=1, isolate=True, shrink=False,
               strategy=cases(op, rows=(1, 4), cols=(1, 64)))
    # refused before the heap is corrupted: an error outcome, not a crashed worker
    assert bad.totals.error >= 1 and bad.totals.crash == 0
    assert bad.counterexample.failure_class == ("error", "OutOfBounds", STORE_LINE)
