"""Snapshot of Verdict.explain(): its text is API (docs/contributing.md).  Regenerate with
NUMORACLE_UPDATE_SNAPSHOTS=1 after an intended change, and review the diff."""

import os
from pathlib import Path

import torch

import numoracle as no
from numoracle.operators.references import rms_norm_llama

SNAP = Path(__file__).parent / "snapshots"

# assert_close's first failure imports torch.distributed's operator libraries; done here, at
# collection, so that no pytester in-process run before this module's tests imports them first
# and then drops them (they register with torch once a process)
try:
    torch.testing.assert_close(torch.zeros(1), torch.ones(1))
except AssertionError:
    pass


def _case():
    g = torch.Generator().manual_seed(7)
    x = torch.randn(8, 1024, generator=g).to(torch.bfloat16)
    w = (1 + 0.1 * torch.randn(1024, generator=g)).to(torch.bfloat16)
    xf = x.float()
    t = xf * torch.rsqrt((xf * xf).mean(-1, keepdim=True) + 1e-6)
    t = t.to(torch.bfloat16).float() * w.float()
    # a truncating store: drop the low 16 bits of the fp32 product
    y = (t.view(torch.int32) & ~0xFFFF).view(torch.float32).to(torch.bfloat16)
    return x, w, y


def _check(name, text):
    path = SNAP / name
    if os.environ.get("NUMORACLE_UPDATE_SNAPSHOTS"):
        path.write_text(text + "\n")
    assert text + "\n" == path.read_text()


def test_explain_reject_snapshot():
    x, w, y = _case()
    v = no.check(rms_norm_llama, outputs=y, inputs=(x, w), params={"eps": 1e-6})
    assert v.status == "reject"
    _check("explain_rms_norm_truncating_store.txt", v.explain())


def test_explain_fixed_mode_snapshot():
    x, w, y = _case()
    v = no.check(rms_norm_llama, outputs=y, inputs=(x, w), params={"eps": 1e-6}, mode="fixed")
    _check("explain_rms_norm_truncating_store_fixed.txt", v.explain())


def test_the_greatest_differences_are_assert_close_s():
    """The two lines users look for, with the numbers and indices torch.testing.assert_close
    gives for the kernel's output against the reference centre."""
    import re

    import pytest
    x, w, y = _case()
    v = no.check(rms_norm_llama, outputs=y, inputs=(x, w), params={"eps": 1e-6})
    centre = v.outputs[0].centre.double()
    with pytest.raises(AssertionError) as e:
        torch.testing.assert_close(y.double(), centre, rtol=0, atol=0)
    theirs = [re.sub(r" \(up to .* allowed\)$", "", ln) for ln in str(e.value).splitlines()
              if ln.startswith("Greatest ")]
    ours = [ln for ln in v.explain().splitlines() if ln.startswith("Greatest ")]
    assert len(theirs) == 2 and ours == theirs
