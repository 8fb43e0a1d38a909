"""Reference skeletons from kernels' compiled plans: completed with naming changes only, they are
accepted on the correct kernels and reject planted faults on the repaired interpreter; their
exact centre, compared with the intended float64 math, tells an algorithmic difference."""

import importlib.util
import re

import pytest
import torch

from numoracle import backends

backends.select("interpreter")

import numoracle as no  # noqa: E402
from numoracle import operators  # noqa: E402
from numoracle.cli import main  # noqa: E402
from numoracle.formats import fp32  # noqa: E402
from numoracle.studies.mutation.engine import _module_source, load_source, parse_spec  # noqa: E402
from numoracle.studies.mutation.mutators import apply_site, enumerate_sites  # noqa: E402
from numoracle.operators import pick_outputs  # noqa: E402
from numoracle.plan import compare_centre, skeleton  # noqa: E402

DTYPES = (torch.bfloat16, torch.float16, torch.float32)


def _own(tmp_path, op_name, text, new_name):
    """The user's copy of a skeleton: renamed (the function), saved and imported."""
    text = re.sub(r"def \w+_plan\(", f"def {new_name}(", text)
    path = tmp_path / f"{new_name}.py"
    path.write_text(text)
    spec = importlib.util.spec_from_file_location(new_name, path)
    m = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(m)
    return getattr(m, new_name)


def _mutant(op, kind, contains):
    mod, fn, pick = parse_spec(op.kernel_specs["correct"])
    src = _module_source(mod)
    site = next(s for s in enumerate_sites(src, kinds=[kind]) if contains in s.detail)
    m = load_source(mod, apply_site(src, site), f"skeleton-test-{kind}")
    return pick_outputs(getattr(m, fn), pick[0] if pick else None)


def _statuses(ref, kernel, op, params_extra=None, seeds=range(3), dtypes=DTYPES):
    out = []
    for dt in dtypes:
        for seed in seeds:
            inputs, params = op.example(seed, dtype=dt)
            params = {**params, **(params_extra or {})}
            outs = kernel(*inputs, **params)
            for mode in ("statistical", "fixed"):
                out.append(no.check(ref, outs, inputs, params, backend="interpreter", mode=mode).status)
    return out


SKELETONS = ["softmax", "rms_norm", "swiglu", "layer_norm", "geglu"]


@pytest.mark.parametrize("name", SKELETONS)
def test_a_skeleton_renamed_is_accepted_on_the_correct_kernel(tmp_path, name):
    op = operators.get(name)
    text = skeleton(op, "correct", *op.example(0))
    assert "TODO" not in text and "@no.reference" in text
    ref = _own(tmp_path, name, text, f"my_{name}")
    statuses = _statuses(ref, op.kernels["correct"], op)
    assert set(statuses) == {"accept"}, statuses


def test_skeletons_reject_the_planted_faults(tmp_path):
    rms = operators.get("rms_norm")
    ref = _own(tmp_path, "rms_norm", skeleton(rms, "correct", *rms.example(0)), "my_rms_norm")
    assert set(_statuses(ref, rms.faulty_kernel("unrounded_multiply"), rms, dtypes=DTYPES[:1])) == {"reject"}
    # with an offset, the skeleton has the weight's offset; the kernel that drops it is rejected
    inputs, params = rms.example(0)
    ref1 = _own(tmp_path, "rms_norm", skeleton(rms, "correct", inputs, {**params, "offset": 1.0}), "my_rms_norm_1")
    assert set(_statuses(ref1, rms.kernels["correct"], rms, {"offset": 1.0}, dtypes=DTYPES[:1])) == {"accept"}
    assert set(_statuses(ref1, rms.faulty_kernel("offset_dropped"), rms, {"offset": 1.0},
                         dtypes=DTYPES[:1])) == {"reject"}
    ln = operators.get("layer_norm")
    ref = _own(tmp_path, "layer_norm", skeleton(ln, "correct", *ln.example(0)), "my_layer_norm")
    assert "reject" in _statuses(ref, ln.faulty_kernel("padded_variance"), ln, dtypes=DTYPES[:1])
    sm = operators.get("softmax")
    ref = _own(tmp_path, "softmax", skeleton(sm, "correct", *sm.example(0)), "my_softmax")
    assert "reject" in _statuses(ref, _mutant(sm, "truncating_store", "truncates"), sm, dtypes=DTYPES[:1])
    sw = operators.get("swiglu")
    ref = _own(tmp_path, "swiglu", skeleton(sw, "correct", *sw.example(0)), "my_swiglu")
    assert "reject" in _statuses(ref, _mutant(sw, "later_downcast", ".to("), sw, dtypes=DTYPES[:1])


def _gelu_tanh(a, b):
    z = 0.7978845608028654 * (a + 0.044715 * a ** 3)
    return 0.5 * a * (1 + torch.tanh(z)) * b


def _rms_norm(x, w, *, eps=1e-6, offset=0.0, casting="llama"):
    rstd = torch.rsqrt((x * x).mean(-1, keepdim=True) + eps)
    return x * rstd * (w + offset), rstd.squeeze(-1)


def test_a_skeletons_centre_tells_an_algorithmic_difference_from_the_intended_math(tmp_path):
    gg = operators.get("geglu")
    inputs, params = gg.example(0)
    ok = _own(tmp_path, "geglu", skeleton(gg, "correct", inputs, params), "my_geglu")
    assert compare_centre(ok, _gelu_tanh, inputs, params).ok
    # a kernel whose sqrt(2/pi) is 1% off: its skeleton follows it, its verdicts cannot tell;
    # the intended float64 math can
    off = _mutant(gg, "constant_changed", "0.7978845608028654 -> 0.8058")
    bad = _own(tmp_path, "geglu", skeleton(gg, off, inputs, params), "my_geglu_off")
    rep = compare_centre(bad, _gelu_tanh, inputs, params)
    assert not rep.ok and rep.outputs[0]["outside"] > 0, rep.explain()
    rms = operators.get("rms_norm")
    inputs, params = rms.example(0)
    ok = _own(tmp_path, "rms_norm", skeleton(rms, "correct", inputs, params), "my_rms")
    assert compare_centre(ok, _rms_norm, inputs, params).ok
    wrong = _mutant(rms, "divisor_changed", "divide by n_cols - 1")
    bad = _own(tmp_path, "rms_norm", skeleton(rms, wrong, inputs, params), "my_rms_wrong")
    rep = compare_centre(bad, _rms_norm, inputs, params)
    assert not rep.ok and "differs from the kernel's algorithm" in rep.explain()
    # the skeleton names its outputs as the operator's reference does, and the report says them
    assert [(o["output"], o["name"]) for o in rep.outputs] == [(0, "y"), (1, "rstd")]
    assert "  output rstd: " in rep.explain(), rep.explain()


def test_the_command_writes_a_skeleton(tmp_path, capsys):
    path = tmp_path / "softmax_mine.py"
    assert main(["plan", "softmax", "--skeleton", str(path), "--name", "softmax_mine"]) == 0
    text = path.read_text()
    assert "def softmax_mine(x):" in text and "no.exp(" in text and "no.sum(" in text
    compile(text, str(path), "exec")


def test_a_dot_accumulated_over_a_k_loop_is_one_matmul(tmp_path):
    """``acc += tl.dot(a, b)`` over the K tiles from zero is ``no.matmul`` over the whole K (it was
    a TODO), accepted on the kernel; the TODOs the skeleton leaves say what each stands for."""
    import test_plan_kernels as PK
    g = torch.Generator().manual_seed(0)
    a, b = (torch.randn(20, 40, generator=g).to(torch.bfloat16), torch.randn(40, 24, generator=g).to(torch.bfloat16))
    text = skeleton(no.reference(lambda a, b: no.matmul(a, b).to(a.format)), PK.tiled_matmul, [a, b], name="mm_plan")
    assert "TODO" not in text and "no.matmul(a, b, acc=fp32)" in text, text
    ref = _own(tmp_path, "mm", text, "my_mm")
    c = PK.tiled_matmul(a, b)
    for mode in ("statistical", "fixed"):
        assert no.check(ref, c, (a, b), mode=mode).status == "accept"
    off = c.clone()
    off[0, 0] = torch.nextafter(c[0, 0], torch.tensor(float("inf"), dtype=c.dtype)) * 1.0625   # a few ulps up
    assert no.check(ref, off, (a, b), mode="fixed").status == "reject"
    # from C's values, the sum starts elsewhere: left to the user, and the docstring says what it is;
    # a reference without a usable name still gives a function Python accepts
    text = skeleton(no.reference(lambda a, b: no.matmul(a, b).to(a.format)),
                    lambda a, b: PK.tiled_matmul(a, b, init_from_c=True), [a, b])
    assert "TODO_1" in text and "  TODO_1: the loop-carried value at " in text, text
    assert "def lambda_plan(a, b):" in text, text


@pytest.mark.parametrize("case", ["tf32", "ieee", "tf32x3", "widened", "widened_tf32x3"])
def test_a_dot_that_reads_fp32_operands_as_tf32_says_so(tmp_path, case):
    """``tl.dot`` on fp32 operands reads them as TF32 by default: the skeleton's ``no.matmul`` says
    ``input_precision="tf32"``, and not for ``"ieee"`` nor for fp32 tiles widened from bf16 loads
    (TF32 holds their values); ``"tf32x3"`` splits every fp32 tile, widened ones too.  Its own
    plan check agrees each time."""
    import test_plan_kernels as PK
    from numoracle.plan import check_plan
    a, b = torch.randn(16, 16), torch.randn(16, 16)
    kernel, params = PK.dot16, {"precision": case}
    if case.startswith("widened"):
        a, b = a.to(torch.bfloat16), b.to(torch.bfloat16)
        kernel, params = PK.widened_dot16, {"precision": "tf32x3" if case.endswith("x3") else "tf32"}
    text = skeleton(no.reference(lambda a, b: no.matmul(a, b)), kernel, [a, b], params, name="dot_plan")
    assert ('input_precision="tf32"' in text) == (case == "tf32"), text
    assert ('input_precision="tf32x3"' in text) == case.endswith("tf32x3"), text
    ref = _own(tmp_path, "dot", text, f"my_dot_{case}")
    assert check_plan(ref, kernel, [a, b], params).ok


def test_a_partial_added_by_an_fp32_atomic_is_a_flushing_accumulation(tmp_path):
    """Split-K (each program's dot over a K slice atomically added into C) and a row split over
    programs (tl.sum per block, atomically added): the skeleton writes the one no.matmul /
    no.sum with ftz=True (fp32 atomics flush subnormals on NVIDIA GPUs), and its own plan check
    agrees."""
    import test_plan_kernels as PK
    from numoracle.plan import check_plan
    g = torch.Generator().manual_seed(0)
    a, b = (torch.randn(20, 64, generator=g).to(torch.bfloat16), torch.randn(64, 24, generator=g).to(torch.bfloat16))
    text = skeleton(no.reference(lambda a, b: no.matmul(a, b)), PK.split_k_matmul, [a, b], name="mm_plan")
    assert "no.matmul(a, b, acc=fp32, ftz=True)" in text and "atomic add in fp32" in text and "TODO" not in text, text
    ref = _own(tmp_path, "mm_atomic", text, "mm_plan")
    assert check_plan(ref, PK.split_k_matmul, [a, b], {}).ok
    assert no.check(ref, PK.split_k_matmul(a, b), (a, b), mode="fixed").status == "accept"
    x = torch.randn(3, 100, generator=g).to(torch.bfloat16)
    text = skeleton(no.reference(lambda x: no.sum(x.to(fp32), axis=-1)), PK.split_row_sum, [x], name="rows_plan")
    assert "ftz=True)" in text and "no.sum(" in text, text
