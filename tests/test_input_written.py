"""A kernel runs on copies of its inputs; one that changes an input it does not return as an
output would overwrite the caller's tensor: the case is an error (InputWritten), in-process
and in the supervised worker.  A kernel that updates an input in place and returns it is
judged as any other."""

import pytest
import torch

from numoracle import backends

backends.select("interpreter")                   # before the kernels' module is imported

from numoracle.errors import InputWritten  # noqa: E402
from numoracle.runner import fuzz  # noqa: E402
from numoracle.runner.execute import execute  # noqa: E402
from numoracle.runner.inputs import inputs_kept  # noqa: E402
from numoracle.strategies import cases  # noqa: E402
from tests.fixtures import out_of_bounds_kernels as K  # noqa: E402
from tests.fixtures.out_of_bounds import op  # noqa: E402


def test_a_changed_input_is_named_with_its_first_changed_element():
    x = torch.tensor([[1.0, float("nan"), 3.0]])
    same = x.clone()
    inputs_kept([x], [same], same * 2)           # NaN compared by its bits: unchanged
    changed = x.clone()
    changed[0, 2] = -0.0
    with pytest.raises(InputWritten) as e:
        inputs_kept([x], [changed], x * 2)
    assert str(e.value).startswith("the kernel wrote into its input 0 (float32, (1, 3)): 1 of 3 elements changed, "
                                   "the first at (0, 2): 3.0 -> -0.0;")
    inputs_kept([x], [changed], (x * 2, changed[0]))    # returned (a view of it): an in-place update


@pytest.mark.parametrize("isolate", [False, True], ids=["in-process", "worker"])
def test_a_kernel_using_its_input_as_scratch_is_an_error_and_one_returning_it_is_judged(isolate):
    x = torch.randn(3, 5).to(torch.bfloat16)
    ran = execute(K.double_using_input_as_scratch, (x,), {}, isolate=isolate)
    assert ran.status == "error" and ran.error_type == "InputWritten", ran.error
    assert ran.error.startswith("InputWritten: the kernel wrote into its input 0 (bfloat16, (3, 5)): ")
    assert ran.origin == "input 0"
    ok = execute(K.double_in_place, (x,), {}, isolate=isolate)
    assert ok.status == "ok" and torch.equal(ok.outputs, (x.float() * 2).to(torch.bfloat16))


def test_a_run_finds_it_and_accepts_the_in_place_variant():
    bad = fuzz(op, "faulty:writes_input", max_examples=5, seed=3, isolate=False, shrink=False,
               strategy=cases(op, rows=(1, 4), cols=(1, 64)))
    # filed under the input, not under the line of numoracle's code that found it
    assert bad.found and bad.counterexample.failure_class == ("error", "InputWritten", "input 0")
    ok = fuzz(op, "in_place", max_examples=10, seed=3, isolate=False, shrink=False,
              strategy=cases(op, rows=(1, 4), cols=(1, 64)))
    assert not ok.found and ok.totals.accept == ok.totals.cases
