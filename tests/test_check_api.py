"""The public API of docs/design.md §3: the rms_norm example verbatim, verdict fields,
error messages for bad input (InvalidArgument says given / expected / fix)."""

import json

import pytest
import torch

import numoracle as no
from numoracle.formats import fp32


@no.reference
def rms_norm_llama(x, w, *, eps=1e-6):             # x, w: tracked tensors in their stored formats
    xf = x.to(fp32)                                  # exact widening
    ms = no.mean(xf * xf, axis=-1, keepdims=True)    # fp32 accumulation, order model: see §4.4
    r = no.rsqrt(ms + eps)                           # error from the backend's math-library profile
    return (xf * r).to(x.format) * w                 # round to bf16, then a bf16 multiply (rounds again)


def _inputs(rows=4, cols=64, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(rows, cols, generator=g).to(torch.bfloat16)
    w = (1 + 0.1 * torch.randn(cols, generator=g)).to(torch.bfloat16)
    return x, w


def _kernel(x, w, eps=1e-6):
    # the llama precision plan in torch: fp32 statistics, round, bf16 multiply
    xf = x.float()
    r = torch.rsqrt((xf * xf).mean(-1, keepdim=True) + eps)
    return (xf * r).to(torch.bfloat16) * w


def test_design_example_runs_verbatim():
    x, w = _inputs()
    y = _kernel(x, w)
    v = no.check(rms_norm_llama, outputs=y, inputs=(x, w), params={"eps": 1e-6},
                 mode="statistical", backend="interpreter")
    assert v.status == "accept" and v.accepted
    assert "inside its acceptance region" in v.explain()
    d = v.certificate.to_dict()
    json.dumps(d)
    assert d["holds"] and d["sites"]
    no.assert_accepted(rms_norm_llama, outputs=y, inputs=(x, w), params={"eps": 1e-6})


def test_reject_raises_oracle_violation_with_explanation():
    x, w = _inputs()
    y = _kernel(x, w)
    bits = y.view(torch.int16)
    y_bad = (bits + 1).view(torch.bfloat16)           # every element one ulp away from 0
    with pytest.raises(no.OracleViolation) as ei:
        no.assert_accepted(rms_norm_llama, outputs=y_bad, inputs=(x, w))
    assert isinstance(ei.value, AssertionError)
    assert ei.value.verdict.status == "reject"
    assert "Worst element y[" in str(ei.value)
    assert ei.value.verdict.to_dict()["rejected"] > 0
    json.dumps(ei.value.verdict.to_dict())


def test_masks_are_per_element():
    x, w = _inputs()
    y = _kernel(x, w).clone()
    y[2, 5] = y[2, 5] * 1.5
    v = no.check(rms_norm_llama, outputs=y, inputs=(x, w))
    assert v.status == "reject"
    (mask,) = v.rejected
    assert mask.shape == y.shape and bool(mask[2, 5]) and int(mask.sum()) == 1


def test_special_values_rejected_before_intervals():
    x, w = _inputs()
    y = _kernel(x, w).clone()
    y[0, 0] = float("nan")
    v = no.check(rms_norm_llama, outputs=y, inputs=(x, w))
    assert v.status == "reject"
    assert "1 NaN/inf where a finite value is certain" in v.explain()


def test_uncertified_when_a_site_may_overflow():
    @no.reference
    def exp_of(x):
        return no.exp(x.to(fp32)).to(x.format)
    # fp32 exp of 88.73 may be the largest finite value or +inf (from 88.75 it is +inf exactly)
    x = torch.tensor([[1.0, 88.73]], dtype=torch.float32)
    y = torch.exp(x)
    v = no.check(exp_of, outputs=y, inputs=(x,))
    assert v.status == "uncertified"
    assert v.uncertified[0].tolist() == [[False, True]]
    failing = [s for s in v.certificate.to_dict()["sites"] if not s["holds"]]
    assert failing and "exp" in failing[0]["site"]
    assert "certificate fails at exp" in v.explain()


@pytest.mark.parametrize("bad, match", [
    (dict(outputs=torch.zeros(4, 63, dtype=torch.bfloat16)), "has shape \\(4, 63\\) but rms_norm_llama produces \\(4, 64\\)"),
    (dict(outputs=torch.zeros(4, 64, dtype=torch.float32)), "is fp32 but rms_norm_llama stores it in bf16"),
    (dict(outputs=torch.zeros(4, 64, dtype=torch.int16)), "is int16 but rms_norm_llama stores it in bf16"),
    (dict(outputs=torch.zeros(4, 64, dtype=torch.uint8)), "is uint8 but rms_norm_llama stores it in bf16"),
    (dict(outputs=(torch.zeros(4, 64, dtype=torch.bfloat16),) * 2), "returns 1 output\\(s\\) but 2 were given"),
    (dict(mode="exact"), "mode='exact': expected 'statistical' or 'fixed'"),
    (dict(backend="tpu"), "backend='tpu': expected one of"),
    (dict(params={"epsilon": 1e-6}), "unknown parameter\\(s\\) \\['epsilon'\\]"),
    (dict(p=2.0), "p=2.0: the false-alarm budget"),
])
def test_bad_arguments_are_invalid_argument(bad, match):
    x, w = _inputs()
    kw = dict(outputs=_kernel(x, w), inputs=(x, w))
    kw.update(bad)
    with pytest.raises(no.InvalidArgument, match=match) as ei:
        no.check(rms_norm_llama, **kw)
    assert isinstance(ei.value, ValueError) and isinstance(ei.value, TypeError)


@pytest.mark.parametrize("value", ["bogus", "Raise", None, True])
def test_assert_accepted_refuses_an_unknown_uncertified_policy(value):
    # issue #23: uncertified='bogus' was ignored (an uncertified verdict passed silently)
    x, w = _inputs()
    with pytest.raises(no.InvalidArgument, match=f"uncertified={value!r}: expected 'raise'.*or 'ignore'"):
        no.assert_accepted(rms_norm_llama, outputs=_kernel(x, w), inputs=(x, w), uncertified=value)
    # the two it takes
    for ok in ("raise", "ignore"):
        assert no.assert_accepted(rms_norm_llama, outputs=_kernel(x, w), inputs=(x, w), uncertified=ok).accepted


def test_non_tensor_and_wrong_count_inputs():
    x, w = _inputs()
    y = _kernel(x, w)
    with pytest.raises(no.InvalidArgument, match="input 1 \\(w\\) is a list; expected a torch tensor"):
        no.check(rms_norm_llama, outputs=y, inputs=(x, [1.0] * 64))
    with pytest.raises(no.InvalidArgument, match="takes 2 inputs \\(x, w\\) but 1 were given"):
        no.check(rms_norm_llama, outputs=y, inputs=(x,))


def test_nonfinite_inputs_policy():
    x, w = _inputs()
    y = _kernel(x, w)
    x2 = x.clone()
    x2[1, 3] = float("inf")
    with pytest.raises(no.InvalidArgument, match="non-finite value\\(s\\) \\(first at index \\(1, 3\\)\\).*nonfinite='uncertified'"):
        no.check(rms_norm_llama, outputs=y, inputs=(x2, w))
    v = no.check(rms_norm_llama, outputs=y, inputs=(x2, w), nonfinite="uncertified")
    # row 1 depends on the inf through its mean square; the other rows are judged
    assert v.uncertified[0][1].all() and not v.uncertified[0][0].any()
    assert v.certificate.inputs.startswith("non-finite inputs")


def test_statistical_reject_is_rejudged_in_fixed_mode():
    x, w = _inputs()
    y = _kernel(x, w)
    bits = y.view(torch.int16)
    v = no.check(rms_norm_llama, outputs=(bits + 1).view(torch.bfloat16), inputs=(x, w))
    assert v.confirmation == "confirmed"
    assert no.check(rms_norm_llama, outputs=y, inputs=(x, w)).confirmation is None


def test_flush_to_zero_profile_uncertifies_subnormal_rsqrt_arguments():
    # measured on the H200: rsqrt of a subnormal fp32 input gives inf (FTZ)
    @no.reference
    def rsqrt_of(x):
        return no.rsqrt(x)
    x = torch.tensor([1e-40, 1.0], dtype=torch.float32)
    y = torch.rsqrt(x.double()).float()
    gpu = no.check(rsqrt_of, outputs=y, inputs=(x,), backend="gpu")
    assert gpu.uncertified[0].tolist() == [True, False]
    cpu = no.check(rsqrt_of, outputs=y, inputs=(x,), backend="interpreter")
    assert cpu.status == "accept"


def test_the_excess_of_a_zero_is_counted_in_ulps_of_the_bound_it_missed():
    """A kernel that stores 0 where the region is near 2.5 is 2.5 / ulp(2.5) away (160 bf16
    ulps at most), not 2.5 / (the smallest subnormal) (about 1e40): the ulp is the one at the
    larger of the stored value and the bound it passed."""
    x, w = _inputs()
    y = _kernel(x, w)
    bad = y.clone()
    i = int(torch.argmax(y.float().abs().reshape(-1)))
    bad.reshape(-1)[i] = 0.0
    v = no.check(rms_norm_llama, outputs=bad, inputs=(x, w), params={"eps": 1e-6}, mode="fixed")
    worst = v.to_dict()["worst"]
    assert v.status == "reject" and v.to_dict()["rejected"] == 1
    assert worst["index"] == [int(k) for k in torch.unravel_index(torch.tensor(i), y.shape)]
    assert worst["kernel"] == 0.0
    value = float(y.reshape(-1)[i].float().abs())
    from numoracle.formats import bf16, ulp
    expected = value / float(ulp(torch.tensor(value, dtype=torch.float64), bf16))
    assert 0.9 * expected < worst["excess_ulp"] <= 1.01 * expected, (worst["excess_ulp"], expected)
    assert "e+3" not in v.explain() and "e+4" not in v.explain()
