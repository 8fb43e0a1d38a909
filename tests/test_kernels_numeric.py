"""Numeric tests of numoracle's own Triton kernels (numoracle/operators/kernels).

By default the kernels run on the Triton interpreter over CPU tensors. There only fp32 is faithful
(docs/facts.md: bf16 casts truncate, bf16 arithmetic is garbage, libdevice returns None), so fp32 runs
are compared with a float64 evaluation of the same math, and bf16 runs with a torch emulation of
the precision plan only once ``numoracle.backends.interpreter.install()`` exists to repair the
interpreter. With ``NUMORACLE_KERNEL_TEST_DEVICE=cuda`` the same tests run compiled on a GPU.
"""

import os

DEVICE = os.environ.get("NUMORACLE_KERNEL_TEST_DEVICE", "cpu")
if DEVICE == "cpu":
    os.environ["TRITON_INTERPRET"] = "1"

import pytest  # noqa: E402
import torch  # noqa: E402

from numoracle.operators.kernels import cross_entropy as ce  # noqa: E402
from numoracle.operators.kernels import geglu as gg  # noqa: E402
from numoracle.operators.kernels import layer_norm as ln  # noqa: E402
from numoracle.operators.kernels import rms_norm as rn  # noqa: E402
from numoracle.operators.kernels import softmax as sm  # noqa: E402
from numoracle.operators.kernels import swiglu as sw  # noqa: E402

SHAPES = [(3, 37), (4, 64), (2, 130)]


def _randn(*shape, scale=1.0, seed=0, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(*shape, generator=g, dtype=torch.float64) * scale).to(dtype).to(DEVICE)


def _rel_err(got, want):
    """max |got − want| / max |want| (float64)."""
    got, want = got.double().cpu(), want.double().cpu()
    return ((got - want).abs().max() / want.abs().max().clamp_min(1e-300)).item()


def _repaired_interpreter():
    """Skip unless the interpreter can be trusted with bf16 and libdevice (or we are on a GPU)."""
    if DEVICE != "cpu":
        return
    backend = pytest.importorskip("numoracle.backends.interpreter")
    if not hasattr(backend, "install"):
        pytest.skip("numoracle.backends.interpreter has no install() yet")
    backend.install()


def _assert_bf16_matches(got, want, *, max_ulps=2, min_exact=0.95):
    """bf16 ``got`` against a torch emulation ``want`` of the same plan: every element within
    ``max_ulps`` bf16 ulps, and at least ``min_exact`` of them identical (a truncating store
    differs on about half)."""
    assert got.dtype == want.dtype == torch.bfloat16
    g, w = got.float().cpu(), want.float().cpu()
    ulp = torch.exp2(torch.floor(torch.log2(w.abs().clamp_min(2.0 ** -126))) - 7)
    excess = ((g - w).abs() / ulp).max().item()
    exact = (g == w).float().mean().item()
    assert excess <= max_ulps, f"{excess} bf16 ulps off the emulation"
    assert exact >= min_exact, f"only {exact:.1%} of elements equal the emulation"


# ---------------------------------------------------------------------------------- RMSNorm

RMS_FORWARDS = [rn.rms_norm, rn.rms_norm_1oversqrt, rn.rms_norm_two_rows, rn.rms_norm_chunked]


def _rms_ref(x, w, eps, offset):
    x, w = x.double(), w.double()
    rstd = torch.rsqrt((x * x).mean(-1, keepdim=True) + eps)
    return x * rstd * (offset + w), rstd[..., 0]


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("casting,offset", [("llama", 0.0), ("gemma", 1.0), ("none", 0.0)])
@pytest.mark.parametrize("fwd", RMS_FORWARDS, ids=lambda f: f.__name__)
def test_rms_norm_fp32_matches_float64(fwd, casting, offset, shape):
    x, w = _randn(*shape, scale=2.0), _randn(shape[1], seed=1)
    kw = {"block": 32} if fwd is rn.rms_norm_chunked else {}
    y, rstd = fwd(x, w, eps=1e-6, offset=offset, casting=casting, **kw)
    want_y, want_rstd = _rms_ref(x, w, 1e-6, offset)
    assert y.shape == x.shape and y.dtype == x.dtype
    assert rstd.shape == shape[:1] and rstd.dtype == torch.float32
    assert _rel_err(y, want_y) < 1e-5
    assert _rel_err(rstd, want_rstd) < 1e-5


def test_rms_norm_leading_dims_and_inputs_untouched():
    x, w = _randn(2, 3, 37), _randn(37, seed=1)
    x0, w0 = x.clone(), w.clone()
    y, rstd = rn.rms_norm(x, w)
    assert y.shape == (2, 3, 37) and rstd.shape == (2, 3)
    assert torch.equal(x, x0) and torch.equal(w, w0)
    assert _rel_err(y, _rms_ref(x, w, 1e-6, 0.0)[0]) < 1e-5


def test_rms_norm_rejects_bad_arguments():
    x, w = _randn(3, 37), _randn(37)
    with pytest.raises(ValueError, match="casting"):
        rn.rms_norm(x, w, casting="llama3")
    with pytest.raises(ValueError, match="w must have shape"):
        rn.rms_norm(x, _randn(36))
    with pytest.raises(ValueError, match="chunked"):
        rn.rms_norm(x, w, block=16)


@pytest.mark.parametrize("shape,num_programs", [((5, 37), 2), ((4, 64), None), ((3, 130), 1)])
@pytest.mark.parametrize("casting,offset", [("llama", 0.0), ("gemma", 1.0), ("none", 0.5)])
def test_rms_norm_backward_fp32_matches_float64_autograd(casting, offset, shape, num_programs):
    x, w, dy = _randn(*shape, scale=2.0), _randn(shape[1], seed=1), _randn(*shape, seed=2)
    _, rstd = rn.rms_norm(x, w, offset=offset, casting=casting)
    dx, dw = rn.rms_norm_backward(dy, x, w, rstd, offset=offset, casting=casting,
                                  num_programs=num_programs)
    xd = x.double().cpu().requires_grad_()
    wd = w.double().cpu().requires_grad_()
    _rms_ref(xd, wd, 1e-6, offset)[0].backward(dy.double().cpu())
    assert dx.dtype == x.dtype and dw.dtype == w.dtype
    assert _rel_err(dx, xd.grad) < 1e-5
    assert _rel_err(dw, wd.grad) < 1e-5


def _rms_llama_bf16_emulation(x, w, eps):
    xf = x.float()
    rstd = torch.rsqrt((xf * xf).sum(-1, keepdim=True) / x.shape[-1] + eps)
    return (xf * rstd).to(torch.bfloat16) * w


def test_rms_norm_bf16_llama_and_gemma_follow_their_plans():
    _repaired_interpreter()
    x = _randn(4, 130, scale=2.0, dtype=torch.bfloat16)
    w = _randn(130, seed=1, dtype=torch.bfloat16)
    y, rstd = rn.rms_norm(x, w, casting="llama")
    assert rstd.dtype == torch.float32
    _assert_bf16_matches(y, _rms_llama_bf16_emulation(x.cpu(), w.cpu(), 1e-6))
    y, _ = rn.rms_norm(x, w, offset=1.0, casting="gemma")
    xf = x.float().cpu()
    rstd_f = torch.rsqrt((xf * xf).mean(-1, keepdim=True) + 1e-6)
    _assert_bf16_matches(y, (xf * rstd_f * (w.float().cpu() + 1.0)).to(torch.bfloat16))


# -------------------------------------------------------------------------------- LayerNorm

LN_FORWARDS = [ln.layer_norm, ln.layer_norm_1oversqrt, ln.layer_norm_chunked]


def _ln_ref(x, w, b, eps):
    x = x.double()
    mean = x.mean(-1, keepdim=True)
    rstd = torch.rsqrt(((x - mean) ** 2).mean(-1, keepdim=True) + eps)
    return (x - mean) * rstd * w.double() + b.double(), mean[..., 0], rstd[..., 0]


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("fwd", LN_FORWARDS, ids=lambda f: f.__name__)
def test_layer_norm_fp32_matches_float64(fwd, shape):
    # A large common offset makes a padded-lane variance (each pad adds mean²) obvious.
    x = _randn(*shape, scale=3.0) + 50.0
    w, b = _randn(shape[1], seed=1), _randn(shape[1], seed=2)
    kw = {"block": 32} if fwd is ln.layer_norm_chunked else {}
    y, mean, rstd = fwd(x, w, b, eps=1e-5, **kw)
    want_y, want_mean, want_rstd = _ln_ref(x, w, b, 1e-5)
    assert mean.dtype == rstd.dtype == x.dtype and mean.shape == shape[:1]
    assert _rel_err(y, want_y) < 1e-4  # x − mean cancels ~4 bits of x's fp32 rounding
    assert _rel_err(mean, want_mean) < 1e-6
    assert _rel_err(rstd, want_rstd) < 1e-5


def test_layer_norm_bf16_stores_statistics_in_bf16():
    _repaired_interpreter()
    x = _randn(3, 37, scale=2.0, dtype=torch.bfloat16)
    w = _randn(37, seed=1, dtype=torch.bfloat16)
    b = _randn(37, seed=2, dtype=torch.bfloat16)
    y, mean, rstd = ln.layer_norm(x, w, b)
    xf = x.float().cpu()
    mu = xf.sum(-1, keepdim=True) / 37
    r = torch.rsqrt(((xf - mu) ** 2).sum(-1, keepdim=True) / 37 + 1e-5)
    want = (xf - mu) * r * w.float().cpu() + b.float().cpu()
    assert mean.dtype == rstd.dtype == torch.bfloat16
    _assert_bf16_matches(mean, mu[:, 0].to(torch.bfloat16), min_exact=0.6)
    _assert_bf16_matches(rstd, r[:, 0].to(torch.bfloat16), min_exact=0.6)
    _assert_bf16_matches(y, want.to(torch.bfloat16))


# ---------------------------------------------------------------------------------- Softmax

@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("fn", [sm.softmax, sm.softmax_exp2, sm.softmax_online],
                         ids=lambda f: f.__name__)
def test_softmax_fp32_matches_float64(fn, shape):
    x = _randn(*shape, scale=4.0)
    kw = {"block": 16} if fn is sm.softmax_online else {}
    y = fn(x, **kw)
    want = torch.softmax(x.double().cpu(), -1)
    assert y.dtype == x.dtype
    assert ((y.double().cpu() - want).abs() / want).max().item() < 1e-5


def test_softmax_bf16_rounds_once():
    _repaired_interpreter()
    x = _randn(4, 130, scale=3.0, dtype=torch.bfloat16)
    _assert_bf16_matches(sm.softmax(x), torch.softmax(x.float().cpu(), -1).to(torch.bfloat16))


# ----------------------------------------------------------------------------------- SwiGLU

@pytest.mark.parametrize("shape", SHAPES + [(3, 1500)])
@pytest.mark.parametrize("fn", [sw.swiglu, sw.swiglu_explicit_sigmoid, sw.swiglu_flat],
                         ids=lambda f: f.__name__)
def test_swiglu_fp32_matches_float64(fn, shape):
    a, b = _randn(*shape, scale=4.0), _randn(*shape, seed=1)
    c = fn(a, b)
    want = torch.nn.functional.silu(a.double().cpu()) * b.double().cpu()
    assert c.dtype == b.dtype and c.shape == b.shape
    assert ((c.double().cpu() - want).abs() / want.abs().clamp_min(1e-30)).max().item() < 1e-5


@pytest.mark.filterwarnings("ignore:overflow encountered in exp:RuntimeWarning")
def test_swiglu_very_negative_gate_gives_zero():
    a = torch.full((2, 37), -100.0, device=DEVICE)
    c = sw.swiglu(a, torch.ones(2, 37, device=DEVICE))
    assert torch.all(c == 0)  # fp32 exp(100) = inf, so sigmoid = 0: the docs/facts.md edge case


def test_swiglu_bf16_rounds_silu_before_the_product():
    _repaired_interpreter()
    a = _randn(3, 130, scale=4.0, dtype=torch.bfloat16)
    b = _randn(3, 130, seed=1, dtype=torch.bfloat16)
    af = a.float().cpu()
    want = (af * torch.sigmoid(af)).to(torch.bfloat16) * b.cpu()
    _assert_bf16_matches(sw.swiglu(a, b), want)
    _assert_bf16_matches(sw.swiglu_flat(a, b), want)


# ------------------------------------------------------------------------------------ GeGLU

def _gelu_tanh64(a):
    a = a.double().cpu()
    return 0.5 * a * (1 + torch.tanh(0.7978845608028654 * (a + 0.044715 * a ** 3)))


def _assert_geglu_close(c, a, b, gelu64):
    a64 = a.double().cpu()
    want = gelu64 * b.double().cpu()
    # fp32 1 + tanh(z) cancels for very negative a: the error is absolute, ~u·|a|·|b|.
    bound = 1e-5 * want.abs() + 4e-7 * (a64.abs() + 1) * b.double().cpu().abs()
    assert c.dtype == b.dtype and c.shape == b.shape
    assert torch.all((c.double().cpu() - want).abs() <= bound)


@pytest.mark.parametrize("shape", SHAPES)
def test_geglu_sigmoid_form_fp32_matches_float64(shape):
    a, b = _randn(*shape, scale=3.0), _randn(*shape, seed=1)
    _assert_geglu_close(gg.geglu_sigmoid_form(a, b), a, b, _gelu_tanh64(a))


@pytest.mark.parametrize("shape", SHAPES)
def test_geglu_exact_fp32_matches_float64(shape):
    a, b = _randn(*shape, scale=3.0), _randn(*shape, seed=1)
    gelu64 = torch.nn.functional.gelu(a.double().cpu())
    _assert_geglu_close(gg.geglu(a, b, approximate="none"), a, b, gelu64)


@pytest.mark.parametrize("shape", SHAPES)
def test_geglu_tanh_libdevice_fp32_matches_float64(shape):
    _repaired_interpreter()
    a, b = _randn(*shape, scale=3.0), _randn(*shape, seed=1)
    _assert_geglu_close(gg.geglu(a, b, approximate="tanh"), a, b, _gelu_tanh64(a))


def test_geglu_rejects_unknown_approximation():
    with pytest.raises(ValueError, match="approximate"):
        gg.geglu(_randn(2, 8), _randn(2, 8), approximate="sigmoid")


def test_geglu_bf16_rounds_gelu_before_the_product():
    _repaired_interpreter()
    a = _randn(3, 130, scale=3.0, dtype=torch.bfloat16)
    b = _randn(3, 130, seed=1, dtype=torch.bfloat16)
    gelu = torch.nn.functional.gelu(a.float().cpu(), approximate="tanh")
    want = gelu.to(torch.bfloat16) * b.cpu()
    _assert_bf16_matches(gg.geglu(a, b), want)
    _assert_bf16_matches(gg.geglu_sigmoid_form(a, b), want)


# ---------------------------------------------------------------------------- Cross-entropy

CE_FNS = [ce.cross_entropy, ce.cross_entropy_two_pass]


def _ce_ref(logits, labels, *, ignore_index=-100, label_smoothing=0.0, reduction="mean",
            softcap=None, z_loss_scale=0.0):
    """float64 per-row loss and gradient of the reduced loss, by autograd."""
    x = logits.double().cpu().requires_grad_()
    labels = labels.cpu()
    xc = x if softcap is None else softcap * torch.tanh(x / softcap)
    keep = labels != ignore_index
    safe = torch.where(keep, labels, 0)
    lse = torch.logsumexp(xc, -1)
    nll = lse - xc.gather(-1, safe[:, None])[:, 0]
    smooth = lse - xc.mean(-1)
    loss = (1 - label_smoothing) * nll + label_smoothing * smooth + z_loss_scale * lse ** 2
    loss = torch.where(keep, loss, 0.0)
    if reduction == "mean":
        loss = loss / max(int(keep.sum()), 1)
    loss.sum().backward()
    return loss.detach(), x.grad


def _labels(n_rows, n_cols, ignored=(), seed=3):
    g = torch.Generator().manual_seed(seed)
    labels = torch.randint(0, n_cols, (n_rows,), generator=g)
    for r in ignored:
        labels[r] = -100
    return labels.to(DEVICE)


def _assert_ce_close(got, want, logits):
    loss, grad = got
    want_loss, want_grad = want
    scale = 1.0 + logits.abs().max().item()
    assert loss.dtype == grad.dtype == logits.dtype
    assert (loss.double().cpu() - want_loss).abs().max().item() <= 1e-5 * scale
    assert (grad.double().cpu() - want_grad).abs().max().item() <= 2e-6


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("shape,block", [((5, 37), None), ((4, 64), 16), ((6, 130), 32)])
@pytest.mark.parametrize("fn", CE_FNS, ids=lambda f: f.__name__)
def test_cross_entropy_fp32_matches_float64(fn, shape, block, reduction):
    logits = _randn(*shape, scale=3.0)
    labels = _labels(shape[0], shape[1], ignored=(1,))
    before = logits.clone()
    got = fn(logits, labels, reduction=reduction, block=block)
    _assert_ce_close(got, _ce_ref(logits, labels, reduction=reduction), logits)
    assert torch.equal(logits, before)
    assert got[0][1].item() == 0.0 and torch.all(got[1][1] == 0)


@pytest.mark.parametrize("fn", CE_FNS, ids=lambda f: f.__name__)
def test_cross_entropy_smoothing_zloss_softcap(fn):
    logits = _randn(6, 130, scale=8.0)
    labels = _labels(6, 130, ignored=(0, 4))
    opts = dict(label_smoothing=0.1, z_loss_scale=1e-3, softcap=5.0)
    got = fn(logits, labels, block=32, softcap_tanh="sigmoid", **opts)
    _assert_ce_close(got, _ce_ref(logits, labels, **opts), logits)


def test_cross_entropy_softcap_libdevice_tanh():
    _repaired_interpreter()
    logits = _randn(4, 64, scale=8.0)
    labels = _labels(4, 64)
    got = ce.cross_entropy(logits, labels, softcap=5.0)
    _assert_ce_close(got, _ce_ref(logits, labels, softcap=5.0), logits)


def test_cross_entropy_all_ignored_is_zero_not_nan():
    logits = _randn(3, 37)
    labels = torch.full((3,), -7, dtype=torch.long, device=DEVICE)
    loss, grad = ce.cross_entropy(logits, labels, ignore_index=-7)
    assert torch.all(loss == 0) and torch.all(grad == 0)


def test_cross_entropy_confident_true_class_gradient():
    # p_y ≈ 0.99: the true-class gradient p_y − 1 must keep its relative accuracy (pair 1).
    logits = torch.zeros(2, 130, device=DEVICE)
    labels = torch.tensor([5, 77], device=DEVICE)
    logits[0, 5] = logits[1, 77] = 9.46
    got = ce.cross_entropy(logits, labels, reduction="sum")
    want_grad = _ce_ref(logits, labels, reduction="sum")[1]
    for r, y in enumerate((5, 77)):
        rel = abs(got[1][r, y].item() - want_grad[r, y].item()) / abs(want_grad[r, y].item())
        assert rel < 1e-4


def test_cross_entropy_rejects_bad_arguments():
    logits, labels = _randn(3, 37), _labels(3, 37)
    with pytest.raises(ValueError, match="reduction"):
        ce.cross_entropy(logits, labels, reduction="avg")
    with pytest.raises(ValueError, match="one label per row"):
        ce.cross_entropy(logits, labels[:2])


def test_cross_entropy_bf16_grad_rounds_once():
    _repaired_interpreter()
    logits = _randn(4, 130, scale=3.0, dtype=torch.bfloat16)
    labels = _labels(4, 130, ignored=(2,))
    loss, grad = ce.cross_entropy(logits, labels, reduction="sum")
    x = logits.float().cpu()
    p = torch.softmax(x, -1)
    keep = (labels.cpu() != -100)[:, None]
    safe = torch.where(keep[:, 0], labels.cpu(), 0)
    want_grad = torch.where(keep, p - torch.nn.functional.one_hot(safe, 130), 0.0)
    want_grad = want_grad.to(torch.bfloat16)
    nll = torch.logsumexp(x, -1) - x.gather(-1, safe[:, None])[:, 0]
    want_loss = torch.where(keep[:, 0], nll, 0.0).to(torch.bfloat16)
    _assert_bf16_matches(grad, want_grad)
    _assert_bf16_matches(loss, want_loss, min_exact=0.5)
