"""Inductor's C++ for boolean masks and for widenings of bf16 to float64 while a CPU verdict
compiles (numoracle.verdict.compiled.inductor.vector_code): the same values as the eager code,
vector code where the rewrite applies, Inductor's own code outside numoracle's compiles.

The compiling test is in the slow tier (a cold C++ compile per graph); the default tier's
verdict parity test (tests/test_compiled.py) compiles its rms_norm verdict with the rewrite
too."""
import re
import threading

import pytest
import torch

from numoracle.verdict.compiled import holding, inductor

needs_codegen = pytest.mark.skipif(inductor._codegen_internals() is None,
                                   reason="another torch's Inductor internals: its own mask code is kept")


def test_the_rewrite_is_on_in_this_thread_only_while_numoracle_compiles():
    state = inductor._code_state
    assert not getattr(state, "active", False)
    with inductor.vector_code(False):
        assert not getattr(state, "active", False)
    if inductor._codegen_internals() is None:
        return
    with inductor.vector_code(True):
        assert state.active
        with inductor.vector_code(True):
            assert state.active
        assert state.active                    # a nested exit keeps the outer one
        seen = []
        t = threading.Thread(target=lambda: seen.append(getattr(state, "active", False)))
        t.start()
        t.join()
        assert seen == [False]                 # another thread's compiles are Inductor's own
    assert not state.active
    with pytest.raises(RuntimeError, match="boom"), inductor.vector_code(True):
        raise RuntimeError("boom")
    assert not state.active


@needs_codegen
def test_numoracles_kernels_have_a_cache_key_of_their_own():
    """The tag pass changes no graph and names the rewrite in Inductor's cache key, so a kernel
    compiled without it is never served to a verdict (nor the reverse)."""
    (tag,) = inductor.vector_code_options().values()
    assert tag.uuid() == inductor.CODE_TAG
    g = torch.fx.Graph()
    x = g.placeholder("x")
    g.output(x)
    before = str(g)
    assert tag(g) is None and str(g) == before


@needs_codegen
def test_another_torchs_internals_keep_inductors_own_code(monkeypatch):
    """Where Inductor's mask code generators are not the ones the rewrite wraps (another name
    or signature), numoracle compiles with Inductor's own code and no cache tag."""
    from torch._inductor.codegen import cpp as C

    def store_line(self, value, var, index, dtype, accu_store=False, extra=None):
        raise AssertionError("not called")
    monkeypatch.setattr(C.CppVecKernel, "_get_store_line", store_line)
    inductor._codegen_internals.cache_clear()
    try:
        assert inductor._codegen_internals() is None and inductor.vector_code_options() == {}
        with inductor.vector_code(True):
            assert not getattr(inductor._code_state, "active", False)
    finally:
        monkeypatch.undo()
        inductor._codegen_internals.cache_clear()
    assert inductor._codegen_internals() is not None


def _masks(x, y):
    """Masks of float64 and bf16 comparisons combined (&, |, ^, ~), a row reduction of a mask
    read back by a later pass, masks selected by where and bool outputs (stored)."""
    a = x > 0.5
    b = (y.to(torch.float64) < 0.25) | (x == 0)
    m = a & ~b
    row = m.any(dim=-1, keepdim=True)
    c = m ^ row
    t = torch.where(c, x, -x).sum(dim=-1, keepdim=True)
    k = c & (x * t > 0) | (a & ~row)
    flags = torch.stack([m.any(), k.all(), (k != c).any()])
    return k, c, torch.where(row, m, k), (k & a).all(dim=-1), flags, y.to(torch.float64) * x


def _bf16_masks(x, y):
    """The same from a bf16 input alone: Inductor's loops are then bf16-wide (two int32 vectors
    a step)."""
    yd = y.to(torch.float64)
    a = (yd > 0.5) & (yd < 0.9)
    row = a.any(dim=-1, keepdim=True)
    s = torch.where(a, yd, -yd).sum(dim=-1, keepdim=True)
    return (a ^ row) & (yd * s > 0), a, yd * s


def _bits_and_positions(x, y):
    """Bit views between float32 and int32 and between float64 and int64, both ways, values
    weighed by their position along the last axis (an index expression, int64 and int32),
    and the fingerprint of a bf16 tensor (through float32's bits)."""
    b32 = y.float().view(torch.int32)
    b64 = x.view(torch.int64)
    i = torch.arange(x.shape[-1], device=x.device)
    i32 = torch.arange(x.shape[-1], device=x.device, dtype=torch.int32)
    weighed = ((b32 >> 16).to(torch.int64) * (i + 1)).sum(-1)
    low = ((b64 & 0xFFFF) * (i + 3)).sum(-1) + ((b32 & 0xFF) * (i32 + 1)).sum(-1)
    back = (b32 ^ 1).view(torch.float32).to(torch.float64) + (b64 | 1).view(torch.float64)
    return weighed, low, back, holding.fingerprint(y)


def _reductions(x, y):
    """Row maxima and minima of float64 values with NaNs and infinities among them, and
    integer row sums: the ends of reductions the rewrite takes in halves."""
    xn = torch.where(x > 0.97, float("nan"), x)
    xi = torch.where(x < 0.02, -float("inf"), x) - y.to(torch.float64)
    b = y.float().view(torch.int32).to(torch.int64) * 3 - (x * 1000).to(torch.int64)
    return (xn.amax(-1), xi.amax(-1), xn.amin(-1), xi.amin(-1), b.sum(-1), (b * b).sum(-1),
            torch.maximum(xi.amax(-1, keepdim=True), xn).amax(-1))


def _inputs(rows, cols, seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.rand(rows, cols, generator=g, dtype=torch.float64)
    x[x < 0.05] = 0.0
    y = torch.rand(rows, cols, generator=g).to(torch.bfloat16)
    return x, y


def _vector_widths() -> list:
    try:
        from torch._inductor import cpu_vec_isa
        return sorted({isa.bit_width() for isa in cpu_vec_isa.valid_vec_isa_list()})
    except (ImportError, AttributeError):     # another torch's internals
        return []


# (vector width, float tiling): as numoracle compiles on an AVX-512 host (one int32 vector a
# step), Inductor's own tiling there (bf16 loops two), and as on an AVX2-only host
CONFIGS = {"512-float-tiling": (512, True), "512": (512, False), "256": (256, False)}


@pytest.mark.slow
@needs_codegen
@pytest.mark.parametrize("config", sorted(CONFIGS))
@pytest.mark.parametrize("dynamic", (False, True), ids=("static", "symbolic"))
def test_masks_compiled_with_the_rewrite_equal_eager_ones(dynamic, config):
    from torch._inductor.utils import run_and_get_code
    width, tiled = CONFIGS[config]
    if width not in _vector_widths() or (tiled and not inductor.float_tiling_options()):
        pytest.skip(f"no {width}-bit vectors here")
    tiling = inductor.float_tiling_options() if tiled else {"cpp.simdlen": width}
    options = dict(inductor.COMPILE_OPTIONS, **inductor.vector_code_options(), **tiling)
    # sizes below, at and past one vector of lanes (8, 16 and 32), with tails
    shapes = ((1, 1), (3, 17), (2, 16), (5, 8), (7, 33), (64, 100), (4, 1000))
    codes = []
    for fn in (_masks, _bf16_masks, _bits_and_positions, _reductions):
        torch._dynamo.reset()
        f = torch.compile(fn, dynamic=dynamic, options=options)
        with inductor.float_tiling(tiled), inductor.vector_code(True):
            for k, (rows, cols) in enumerate(shapes if dynamic else shapes[-3:]):
                x, y = _inputs(rows, cols, k)
                got, code = run_and_get_code(f, x, y)
                codes += code
                for g, w in zip(got, fn(x, y)):
                    assert g.dtype == w.dtype and torch.equal(g.isnan(), w.isnan()), (fn.__name__, rows, cols)
                    assert torch.equal(g[~g.isnan()], w[~w.isnan()]), (fn.__name__, rows, cols)
                    if g.dtype == torch.bool:       # a stored bool is 0 or 1, nothing else
                        assert set(g.view(torch.uint8).unique().tolist()) <= {0, 1}
    text = "\n".join(codes)
    # the rewrite ran: masks combined in int64 lanes, bool stores narrowed through int32
    assert "cast<int64_t," in text
    assert "at::vec::convert<int8_t,1,int32_t," in text
    assert "VecMask<int32_t," in text
    # bf16 widened to float64 through float32
    assert re.search(r"convert<double,\d,float,\d>\(at::vec::convert<float,\d,at::BFloat16,\d>", text)
    # bit views of whole vectors, positions as a broadcast plus a constant vector
    assert "at::vec::cast<int32_t>(" in text and "at::vec::cast<double>(" in text
    assert re.search(r"\(at::vec::VectorizedN<int64_t,\d>\(\w+\) \+ at::vec::VectorizedN<int64_t,\d>::arange\(0, 1\)\)",
                     text)
    assert "= c10::bit_cast<" not in re.sub(r"auto tmp\d+ = c10::bit_cast<", "", text)   # scalar loops keep theirs
    assert not re.search(r"::arange\(tmp\d+, 1\)", text)
    # the ends of float64 maxima and minima and of int64 sums, in halves
    assert "a[i] = max_propagate_nan(a[i], a[i + w])" in text and "a[i] = min_propagate_nan(a[i], a[i + w])" in text
    assert "__at_align__ int64_t a[n]" in text
    assert not re.search(r"vec_reduce_all<double, \d>\([^)]*\) \{ return at::vec::(maximum|minimum)", text)
    assert not re.search(r"vec_reduce_all<int64_t, \d>\([^)]*\) \{ return x \+ y", text)
    if width == 256:           # AVX2's bf16-wide loops: two int32 vectors a step
        assert "at::vec::convert<int8_t,1,int32_t,2>" in text and "VecMask<int32_t,2>" in text


@pytest.mark.slow
@needs_codegen
def test_compiles_outside_numoracles_keep_inductors_own_mask_code():
    from torch._inductor.utils import run_and_get_code
    with inductor.vector_code(True):
        pass                                   # installed, and off again
    torch._dynamo.reset()
    f = torch.compile(_masks, dynamic=False, options=dict(inductor.COMPILE_OPTIONS))
    x, y = _inputs(7, 33, 3)
    got, code = run_and_get_code(f, x, y)
    for g, w in zip(got, _masks(x, y)):
        assert torch.equal(g, w)
    assert "at::vec::convert<int8_t,1,int32_t," not in "\n".join(code)
    assert not re.search(r"convert<double,\d,float,\d>\(at::vec::convert<float", "\n".join(code))


def test_only_whole_constant_strides_take_the_broadcast_position():
    import sympy
    c = inductor._constant_int
    assert (c(1), c(sympy.Integer(-2)), c(3.0)) == (1, -2, 3)
    assert c(sympy.Symbol("s0")) is None and c(sympy.Rational(1, 2)) is None and c(2.5) is None
