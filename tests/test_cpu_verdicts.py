"""Small verdicts of GPU tensors are computed on the CPU (settings.cpu_verdict_max_elements).
The choice is tested here with meta tensors (a device that is not the CPU, no data); the
verdicts themselves are compared on a GPU by scripts/cpu_verdict_parity.py."""
import pytest
import torch

import numoracle as no
from numoracle import formats as F
from numoracle.check import _accelerator_home
from numoracle.errors import InvalidArgument
from numoracle.formats import fp32


def _meta(*shape):
    return torch.empty(shape, dtype=torch.bfloat16, device="meta")


def test_small_gpu_verdicts_go_to_the_cpu_and_large_ones_stay():
    s = no.settings()
    assert s.cpu_verdict_max_elements == 1 << 15
    inputs, outputs = (_meta(8, 256), _meta(256)), [_meta(8, 256)]
    assert _accelerator_home(inputs, outputs, s) == torch.device("meta")
    # the limit counts inputs and outputs, raw-bits pairs by their tensor
    exact = no.settings(cpu_verdict_max_elements=8 * 256 * 2 + 256)
    assert _accelerator_home(inputs, outputs, exact) == torch.device("meta")
    assert _accelerator_home(inputs, outputs, no.settings(cpu_verdict_max_elements=8 * 256 * 2 + 255)) is None
    pair = (torch.empty(16, dtype=torch.uint8, device="meta"), F.by_name("e2m1"))
    assert _accelerator_home((pair,), [_meta(16)], s) == torch.device("meta")
    assert _accelerator_home(inputs, outputs, no.settings(cpu_verdict_max_elements=0)) is None


def test_cpu_mixed_and_malformed_verdicts_are_judged_where_they_are():
    s = no.settings()
    assert _accelerator_home((torch.zeros(4),), [torch.zeros(4)], s) is None
    # a kernel that wrote its output to another device: judged as given, which reports it
    assert _accelerator_home((_meta(4),), [torch.zeros(4)], s) is None
    assert _accelerator_home((_meta(4),), [None], s) is None
    assert _accelerator_home((), [], s) is None


def test_the_limit_is_validated():
    with pytest.raises(InvalidArgument, match="cpu_verdict_max_elements=-1: expected an integer >= 0"):
        no.settings(cpu_verdict_max_elements=-1)


def test_a_verdict_computed_elsewhere_returns_its_masks_on_the_outputs_device():
    x = torch.randn(4, 64, dtype=torch.float32).to(torch.bfloat16)
    w = torch.ones(64, dtype=torch.bfloat16)

    @no.reference
    def rms(x, w, *, eps=1e-6):
        xf = x.to(fp32)
        r = no.rsqrt(no.mean(xf * xf, axis=-1, keepdims=True) + eps)
        return (xf * r * w.to(fp32)).to(x.fmt)

    y = (x.double() * torch.rsqrt((x.double() ** 2).mean(-1, keepdim=True) + 1e-6)).to(torch.bfloat16)
    v = no.check(rms, y, (x, w))
    assert v.device is None and v.rejected[0].device.type == "cpu"
    v.device = torch.device("meta")
    assert [m.device for m in v.rejected + v.uncertified] == [torch.device("meta")] * 2
