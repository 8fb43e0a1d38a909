"""The microscaling operators (numoracle/operators/ops_mx.py) on the repaired interpreter:
registration, every kernel and variant accepted in both modes over the input-shift groups,
every faulty kernel rejected (and what a one-spacing assert_close makes of them), the
kernels on every e2m1 / e4m3 value and tie and every E8M0 exponent, the quantize → matmul
pipeline, and the generic machinery (mutation) finding the kernels."""

import math

import ml_dtypes
import numpy as np
import pytest
import torch

import numoracle as no
from numoracle import formats as F
from numoracle.backends import select
from numoracle.check import check_modes
from numoracle.families import GROUPS
from operator_checks import assert_accepted

select("interpreter")
OPS = ("mxfp8_quantize", "mxfp4_quantize", "nvfp4_quantize", "mx_scaled_matmul")
QUICK_GROUPS = ("calibration", "pow2_grid", "outliers", "constant_rows")
pytestmark = pytest.mark.filterwarnings("ignore:divide by zero encountered in log2:RuntimeWarning")


@pytest.fixture(scope="module")
def K():
    from numoracle.operators.kernels import mx_quant
    return mx_quant


@pytest.fixture(scope="module")
def X():
    from numoracle.operators import ops_mx
    return ops_mx


def _kernels(op):
    from numoracle.operators.kernels.mx_matmul import dot_scaled_supported
    for name, kernel in op.kernels.items():
        if name == "dot_scaled" and not dot_scaled_supported("interpreter")[0]:
            continue
        yield name, kernel


def test_registered_with_domain_and_faulty_apart():
    for name in OPS:
        op = no.operators.get(name)
        assert name in no.operators.names() and op.source in ("ocp_mx", "nvfp4")
        assert "correct" in op.kernel_specs and len(op.kernel_specs) >= 3
        assert op.faulty and not set(op.faulty) & set(op.kernel_specs)
        d = op.to_dict()
        assert d["domain"]["cols_multiple_of"] in (16, 32)


def _judge_all(name, groups, seeds):
    op = no.operators.get(name)
    runs = 0
    for gi, group in enumerate(groups):
        for s in range(seeds):
            seed = gi * seeds + s
            dtype = (torch.bfloat16, torch.float16, torch.float32)[seed % 3]
            inputs, params = op.example(seed, dtype, group, rows=1 + seed % 3, cols=32 * (2 + seed % 3))
            for kname, kernel in _kernels(op):
                out = kernel(*[t.clone() for t in inputs], **params)
                for mode, v in check_modes(op.reference, out, inputs, params).items():
                    # uncertified only where a value leaves its format (an fp16 matmul output past 65504)
                    assert_accepted(v, f"{name}/{kname} {group} seed {seed} {params} {mode}")
                runs += 1
    return runs


@pytest.mark.parametrize("name", OPS)
def test_every_kernel_accepted_in_both_modes(name):
    assert _judge_all(name, QUICK_GROUPS, 2) > 0


@pytest.mark.slow
@pytest.mark.parametrize("name", OPS)
def test_every_kernel_accepted_over_every_input_shift_group(name):
    assert _judge_all(name, tuple(GROUPS), 4) >= 4 * len(GROUPS) * 3


FAULTY_CASES = [
    # (operator, faulty kernel, parameters forced on the example)
    ("mxfp8_quantize", "wrong_rounding", {}),
    ("mxfp8_quantize", "nan_on_overflow", {"scale_rule": "floor"}),
    ("mxfp8_quantize", "block64", {}),
    ("mxfp4_quantize", "ties_away", {}),
    ("mxfp4_quantize", "nibble_swapped", {}),
    ("mxfp4_quantize", "wrong_rounding", {}),
    ("mxfp4_quantize", "block64", {}),
    ("nvfp4_quantize", "tensor_scale_twice", {}),
    ("nvfp4_quantize", "tensor_scale_dropped", {}),
    ("nvfp4_quantize", "ties_away", {}),
    ("nvfp4_quantize", "nibble_swapped", {}),
    ("nvfp4_quantize", "scale_truncated", {}),
    ("nvfp4_quantize", "block32", {}),
    ("mx_scaled_matmul", "scale_block64", {}),
    ("mx_scaled_matmul", "nibble_swapped", {}),
    ("mx_scaled_matmul", "scale_bias", {}),
]


@pytest.mark.parametrize("name,faulty,force", FAULTY_CASES, ids=[f"{a}-{b}" for a, b, _ in FAULTY_CASES])
def test_faulty_kernel_rejected(name, faulty, force):
    op = no.operators.get(name)
    kernel = op.faulty_kernel(faulty)
    for seed in range(8):
        inputs, params = op.example(seed, torch.bfloat16, "normal", rows=3, cols=128)
        params.update(force)
        v = no.check(op.reference, kernel(*inputs, **params), inputs, params, mode="fixed")
        if v.status == "reject":
            assert v.explain().startswith("Kernel output outside its acceptance region")
            return
    pytest.fail(f"{name}/{faulty} was accepted on seeds 0..7")


# ------------------------------------------------------------------ every value, tie, exponent

def _fp32(v):
    return torch.tensor(v, dtype=torch.float64).to(torch.float32)


def _e2m1_probe_rows():
    """Rows of 32 fp32 values: 6 (so the block's scale is 1 under both rules) and 31 of
    every e2m1 value, every tie and each tie's float32 neighbours, both signs."""
    v = F.from_bits(torch.arange(16), F.e2m1)
    v = torch.unique(v)
    mid = (v[:-1] + v[1:]) / 2
    vals = torch.cat([v, mid, F.next_down(mid, F.fp32), F.next_up(mid, F.fp32)])
    n = -(-vals.numel() // 31)
    vals = torch.cat([vals, torch.zeros(n * 31 - vals.numel(), dtype=torch.float64)]).reshape(n, 31)
    return torch.cat([torch.full((n, 1), 6.0, dtype=torch.float64), vals], 1).to(torch.float32), mid


@pytest.mark.parametrize("rule", ["floor", "ceil"])
def test_mxfp4_kernel_on_every_e2m1_value_tie_and_neighbour(K, rule):
    x, mid = _e2m1_probe_rows()
    params = dict(scale_rule=rule)
    for kname in ("mxfp4_quant", "mxfp4_quant_split"):
        q, s = getattr(K, kname)(x, **params)
        assert bool((F.decode(s) == 1).all())
        want = x.numpy().astype(ml_dtypes.float4_e2m1fn).astype(np.float64)
        assert np.array_equal(F.decode(q, F.Packed(F.e2m1)).numpy(), want)
        ref = no.operators.get("mxfp4_quantize").reference
        for mode in ("statistical", "fixed"):
            assert no.check(ref, (q, s), (x,), params, mode=mode).status == "accept"
    v = no.check(ref, K.mxfp4_quant_ties_away(x, **params), (x,), params, mode="fixed")
    # the ties RN-even sends toward zero: 0.25, 1.25, 2.5, 5 and their negatives
    assert v.n_rejected == 8 and sorted(v.outputs[0].centre[v.outputs[0].rejected].abs().unique().tolist()) == \
        [0.25, 1.25, 2.5, 5.0]


def test_nvfp4_kernel_on_every_e4m3_block_scale_value_and_tie(K):
    """Tensor amax 2688 gives ts = 1; a block of amax 6r then has the fp32 quotient r: every
    positive e4m3 value and tie as r."""
    v = F.from_bits(torch.arange(256), F.e4m3fn)
    v = torch.unique(v[torch.isfinite(v) & (v > 0)])
    r = torch.cat([v, (v[:-1] + v[1:]) / 2])
    x = torch.zeros(1, 16 * (r.numel() + 1), dtype=torch.float64)
    x[0, 0] = 2688.0
    x[0, 16::16] = 6 * r
    x = x.to(torch.float32)
    q, s, ts = K.nvfp4_quant_rows(x)
    assert float(ts) == 1.0
    want = r.clamp(2.0 ** -6, 448).to(torch.float32).numpy().astype(ml_dtypes.float8_e4m3fn).astype(np.float64)
    assert np.array_equal(F.decode(s)[0, 1:].numpy(), want)
    ref = no.operators.get("nvfp4_quantize").reference
    assert no.check(ref, (q, s, ts), (x,), mode="fixed").status == "accept"
    vt = no.check(ref, K._launch_nvfp4(x, 16, "low_first", 1e-10, per_row=True, fault="scale_truncated"), (x,),
                  mode="fixed")
    # truncation differs where RN-even rounded up: the ties to an even code above, and
    # nothing else (every other r is a value or a tie rounded down)
    up = torch.from_numpy(want) > r.clamp(2.0 ** -6, 448)
    assert torch.equal(vt.outputs[1].rejected[0, 1:], up) and int(up.sum()) > 50


def _binade_amaxes():
    """fp32 amax per binade: 2^k, its float32 neighbours, 1.5·2^k (k = -149..127), and 0."""
    out = [0.0]
    for k in range(-149, 128):
        p = np.float32(2.0 ** k)
        out += [float(p), float(np.nextafter(p, np.float32(np.inf))), float(np.nextafter(p, np.float32(0)))]
        if k > -149:
            out.append(1.5 * 2.0 ** k)
    a = torch.tensor(sorted(set(v for v in out if v < 3.4e38)), dtype=torch.float64)
    return a[F.round(a, F.fp32) == a]


def _reference_exponent(a: float, fmt, rule) -> int:
    if a == 0:
        return -127
    if rule == "floor":
        return max(-127, min(127, math.frexp(a)[1] - 1 - fmt.emax))
    d = float(np.float32(a) / np.float32(fmt.max_finite))
    if d == 0:
        return -127
    m, e = math.frexp(d)
    return max(-127, min(127, e - 1 if m == 0.5 else e))


@pytest.mark.parametrize("fmt", ["e4m3fn", "e5m2", "e2m1"])
@pytest.mark.parametrize("rule", ["floor", "ceil"])
def test_mx_kernels_store_every_e8m0_exponent_of_an_fp32_amax(K, fmt, rule):
    """One block per amax, its exponent from the bits and from fp32 log2 (the kernels' one
    exponent helper; a row per program here, so that a thousand blocks interpret quickly)."""
    a = _binade_amaxes()
    a = torch.cat([a, torch.zeros((-a.numel()) % 128, dtype=torch.float64)])
    x = torch.zeros(a.numel(), 32, dtype=torch.float64)
    x[:, 0] = a
    x[:, 1] = -a / 3
    x = x.to(torch.float32).reshape(8, -1)
    f = F.by_name(fmt)
    want = torch.tensor([_reference_exponent(v, f, rule) for v in x[:, ::32].double().reshape(-1).tolist()],
                        dtype=torch.float64).reshape(8, -1)
    top = _reference_exponent(float(a.max()), f, rule)
    assert sorted(set(want.reshape(-1).tolist())) == list(range(-127, top + 1))       # every exponent
    op = no.operators.get("mxfp4_quantize" if fmt == "e2m1" else "mxfp8_quantize")
    params = dict(scale_rule=rule) if fmt == "e2m1" else dict(fmt=fmt, scale_rule=rule)
    for via_log2 in (False, True):
        q, s = K._launch_mx(x, fmt, rule, 32, per_row=True, via_log2=via_log2)
        E = F.to_bits(F.decode(s), F.e8m0).double() - 127
        if not via_log2:
            assert torch.equal(E, want)
        else:
            assert bool(((E - want).abs() <= 1).all())
        v = no.check(op.reference, (q, s), (x,), params, mode="fixed")
        assert v.status == "accept", f"log2 {via_log2}:\n{v.explain()}"


# ------------------------------------------------------------------ against a fixed tolerance

def _assert_close_rejects(got, want, atol):
    try:
        torch.testing.assert_close(got, want, atol=atol, rtol=0.0)
        return False
    except AssertionError:
        return True


def test_one_spacing_tolerance_misses_a_tie_numoracle_rejects(K, X):
    """Ties away from zero at 0.25 store 0.5 where RN-even stores 0: one e2m1 spacing apart,
    so assert_close with atol = 0.5 passes it."""
    x = torch.zeros(1, 32, dtype=torch.float32)
    x[0, 0], x[0, 1] = 6.0, 0.25
    q, s = K.mxfp4_quant_ties_away(x)
    want, _ = X.torch_mx_quantize(x, "e2m1")
    lay = F.Packed(F.e2m1)
    assert not _assert_close_rejects(F.decode(q, lay), F.decode(want, lay), 0.5)
    v = no.check(no.operators.get("mxfp4_quantize").reference, (q, s), (x,), mode="fixed")
    assert v.status == "reject" and v.n_rejected == 1


def test_one_spacing_tolerance_rejects_a_correct_kernel_numoracle_accepts(K, X):
    """Next to a power of two a kernel that takes fp32 log2 picks the exponent above (log2
    rounds onto the integer): a correct choice, codes half the size of the bit rule's."""
    x = torch.ones(1, 32, dtype=torch.float32)
    x[0, 0] = 2.0 ** 10 * (1 - 2.0 ** -24)
    q, s = K.mxfp8_quant_log2(x)
    want_q, want_s = X.torch_mx_quantize(x, "e4m3fn")
    assert float(F.decode(s)) == 2 * float(F.decode(want_s))
    assert _assert_close_rejects(F.decode(q), F.decode(want_q), 0.125)
    for mode in ("statistical", "fixed"):
        assert no.check(no.operators.get("mxfp8_quantize").reference, (q, s), (x,), mode=mode).status == "accept"


# ------------------------------------------------------------------ outputs named

NAMED = {"mxfp8_quantize": ["codes", "scales"], "mxfp4_quantize": ["codes", "scales"],
         "nvfp4_quantize": ["codes", "scales", "tensor_scale"]}


@pytest.mark.parametrize("name", sorted(NAMED))
def test_outputs_named_as_the_reference_names_them(name):
    """The quantizers return fields of one object (q.codes, q.scales, NVFP4's q.tensor_scale):
    named by the reference (outputs=...), not out0, out1, in the verdict and its explanation."""
    op = no.operators.get(name)
    assert list(op.reference.output_names) == NAMED[name]
    inputs, params = op.example(0, torch.bfloat16, "normal", rows=2, cols=64)
    v = no.check(op.reference, op.kernels["correct"](*inputs, **params), inputs, params, mode="fixed")
    assert [o.name for o in v.outputs] == NAMED[name] and v.status == "accept"
    assert "out0" not in v.explain() and "out1" not in v.explain()


def test_a_case_saved_with_positional_output_names_replays_named(tmp_path):
    """A case saved before the quantizers' outputs had names (outputs out0/out1, a failure class
    of 'out1') still replays, its failure class and outputs named as the reference names them."""
    import json
    from numoracle import corpus as C
    from numoracle.runner import judge
    from numoracle.runner.replay import replay
    op = no.operators.get("mxfp8_quantize")
    inputs, params = op.example(0, torch.bfloat16, "normal", rows=3, cols=128)
    out = judge(op, op.faulty_kernel("wrong_rounding"), inputs, params)
    assert out.status == "reject" and out.failure_class[0] == "scales"
    path = C.save(tmp_path, op, "faulty:wrong_rounding", out, backend="interpreter", mode="fixed")
    meta = json.loads((path / "case.json").read_text())
    assert [o["name"] for o in meta["outputs"]] == ["codes", "scales"]
    for j, o in enumerate(meta["outputs"]):          # as it was saved before
        o["name"] = f"out{j}"
    meta["failure_class"][0] = "out1"
    (path / "case.json").write_text(json.dumps(meta))
    r = replay(path, backend="interpreter")
    assert r["status"] == "reproduced" and r["outputs"] == ["codes", "scales"]
    assert r["failure_class"][0] == "scales"
    assert "out1" not in r["verdicts"]["fixed"].explain()


# ------------------------------------------------------------------ pipeline and machinery

def test_pipeline_quantize_then_matmul_against_unquantized_input(X):
    op_q = no.operators.get("mxfp8_quantize")
    op_m = no.operators.get("mx_scaled_matmul")
    for seed in range(2):
        (x, b, b_s), params = X.example_pipeline(seed, torch.bfloat16, "normal", rows=3, cols=128)
        a, a_s = op_q.kernels["correct"](x, fmt=params["fmt"], scale_rule=params["scale_rule"])
        for kname in ("correct", "scale_after_dot", "split_k"):
            c = op_m.kernels[kname](a, a_s, b, b_s, out=params["out"])
            for mode in ("statistical", "fixed"):
                v = no.check(X.mx_quant_then_matmul, c, (x, b, b_s), params, mode=mode)
                assert v.status == "accept", v.explain()
        # the quantization error is what makes the interval wide
        w = no.check(op_m.reference, c, (a, a_s, b, b_s), {"out": params["out"]}, mode="fixed")
        width = (v.outputs[0].hi - v.outputs[0].lo).median()
        assert width > 10 * (w.outputs[0].hi - w.outputs[0].lo).median()
    bad = op_m.faulty_kernel("scale_bias")(a, a_s, b, b_s, out=params["out"])
    assert no.check(X.mx_quant_then_matmul, bad, (x, b, b_s), params).status == "reject"


def test_mutation_finds_sites_in_the_mx_kernels_and_mutants_load():
    from numoracle.studies.mutation import engine, mutators
    for mod in ("numoracle.operators.kernels.mx_quant", "numoracle.operators.kernels.mx_matmul"):
        source = engine._module_source(mod)
        sites = mutators.enumerate_sites(source)
        kinds = {s.kind for s in sites}
        if mod.endswith("quant"):
            assert {"rounding_rule_changed", "constant_changed", "fp8_max_changed", "clamp_removed"} <= kinds
        else:
            assert "scale_index_changed" in kinds
        assert len(kinds) >= 6
        m = engine.load_source(mod, mutators.apply_site(source, sites[0]), "test")
        assert callable(getattr(m, "mxfp4_quant", None) or getattr(m, "mx_matmul"))


def test_scale_after_the_dot_overflowing_its_intermediate_is_uncertified_not_rejected():
    # found by the long adversarial search (seed 1265, format_boundary): the scale-after-dot
    # variant computes (dot of the codes) * 2^Ea * 2^Eb, and dot * 2^Ea overflowed fp32 to inf
    # where the product, 2.2e38, is finite: the reference's certificate now covers that plan's
    # intermediates, so those elements are uncertified, not a false alarm
    from numoracle.runner.execute import execute
    from numoracle.strategies import Case
    op = no.operators.resolve("mx_scaled_matmul")
    case = Case("mx_scaled_matmul", "bf16", 9, 64, "format_boundary", 0, (), (("out", "fp32"),), (), 1265)
    inputs, params = case.materialize("cpu", op)
    for spec in ("scale_after_dot", "correct"):
        ran = execute(op.kernels[spec], inputs, params)
        assert ran.ok, ran.error
        v = no.check(op.reference, ran.outputs, inputs, params, mode="fixed")
        assert v.status == "uncertified", (spec, v.explain())
        assert any("scale after the dot" in s.label for s in v.certificate.failing), v.certificate.failing
    after = execute(op.kernels["scale_after_dot"], inputs, params).outputs
    assert not torch.isfinite(after[0] if isinstance(after, (list, tuple)) else after).all()
