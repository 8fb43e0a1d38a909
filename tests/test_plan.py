"""numoracle plan: a kernel's precision plan read from its compiled Triton IR on the CPU, and the
check of a reference program's sites against it."""

import functools
import json
import os

import pytest
import torch

from numoracle import backends

# kernels run (where a test runs them) on the repaired interpreter; the plan compiles them in its
# helper process, out of interpreter mode
backends.select("interpreter")

import numoracle as no  # noqa: E402
from numoracle import operators  # noqa: E402
from numoracle.cli import main  # noqa: E402
from numoracle.formats import fp32  # noqa: E402
from numoracle.plan import check_plan, extract_plan, mlir, reference_plan  # noqa: E402
from numoracle.plan import _triton as T  # noqa: E402
from numoracle.plan.capture import capture  # noqa: E402

import test_plan_kernels as PK  # noqa: E402


def _line(module, text: str) -> int:
    """The line of ``module``'s source holding ``text`` (so that tests do not pin line numbers)."""
    with open(module.__file__, encoding="utf-8") as f:
        return next(i for i, line in enumerate(f, 1) if text in line)


SUM_LINE = _line(PK, "tl.sum(x * x")

TTIR = '''#loc = loc("/k.py":3:1)
#loc1 = loc("/k.py":7:12)
#loc2 = loc("/usr/triton/language/standard.py":287:12)
#loc3 = loc("s"(#loc1))
#loc4 = loc(callsite(#loc2 at #loc3))
module {
  tt.func public @k(%x_ptr: !tt.ptr<bf16> {tt.divisibility = 16 : i32} loc("x_ptr"(#loc)), %n: i32 loc("n"(#loc))) attributes {noinline = false} {
    %cst = arith.constant dense<0.000000e+00> : tensor<128xbf16> loc(#loc)
    %c1 = arith.constant 1 : i32 loc(#loc)
    %x = tt.splat %x_ptr : !tt.ptr<bf16> -> tensor<128x!tt.ptr<bf16>> loc(#loc1)
    %v = tt.load %x : tensor<128x!tt.ptr<bf16>> loc(#loc1)
    %w = arith.extf %v : tensor<128xbf16> to tensor<128xf32> loc(#loc1)
    %s:2 = scf.for %i = %c1 to %n step %c1 iter_args(%a = %w, %b = %w) -> (tensor<128xf32>, tensor<128xf32>)  : i32 {
      %t = arith.addf %a, %b : tensor<128xf32> loc(#loc1)
      scf.yield %t, %b : tensor<128xf32>, tensor<128xf32> loc(#loc1)
    } loc(#loc1)
    %r = "tt.reduce"(%s#0) <{axis = 0 : i32}> ({
    ^bb0(%p: f32 loc(#loc4), %q: f32 loc(#loc4)):
      %pq = arith.addf %p, %q : f32 loc(#loc4)
      tt.reduce.return %pq : f32 loc(#loc4)
    }) : (tensor<128xf32>) -> f32 loc(#loc4)
    tt.return loc(#loc)
  } loc(#loc)
} loc(#loc)
'''


def test_the_mlir_reader_gives_types_regions_and_the_users_source_line_of_a_reduce():
    m = mlir.parse(TTIR)
    f = m.function("k")
    assert [n for n, _ in f.args] == ["%x_ptr", "%n"]
    assert f.args[0][1].pointer and f.args[0][1].elem == "bf16"
    ops = {op.name: op for op in f.walk()}
    assert ops["arith.extf"].result_type.elem == "f32" and ops["arith.extf"].result_type.shape == (128,)
    loop = ops["scf.for"]
    assert loop.results == ["%s#0", "%s#1"] and loop.defines == ["%i", "%a", "%b"]
    assert loop.operands == ["%c1", "%n", "%c1", "%w", "%w"]
    red = ops["tt.reduce"]
    assert red.operands == ["%s#0"] and red.attr("axis") == "0" and red.result_type.elem == "f32"
    assert [o.name for o in red.regions[0]] == ["arith.addf", "tt.reduce.return"]
    frames = mlir.frames(red.loc, m.aliases)
    # the combine is Triton's own code, called from the user's line 7 (a variable named s)
    assert frames[0].file.endswith("standard.py") and (frames[1].file, frames[1].line, frames[1].name) == \
        ("/k.py", 7, "s")


def test_argument_types_follow_tritons_specialization():
    a = torch.empty(8, dtype=torch.bfloat16)
    assert T.arg_type(a, specialize=True, align=True)[:2] == ("*bf16", a.data_ptr() % 16 == 0)
    assert T.arg_type(a[1:], specialize=True, align=True) == ("*bf16", False, None)
    assert T.arg_type(1, specialize=True, align=True) == ("constexpr", False, 1)   # ints equal to 1 are constants
    assert T.arg_type(1, specialize=False, align=True) == ("i32", False, None)
    assert T.arg_type(32, specialize=True, align=True) == ("i32", True, None)       # divisible by 16
    assert T.arg_type(2 ** 40, specialize=True, align=True)[0] == "i64"
    assert T.arg_type(0.5, specialize=True, align=True) == ("fp32", False, None)
    assert T.arg_type(None, specialize=True, align=True) == ("constexpr", False, None)


def test_a_capture_records_the_launch_and_runs_no_kernel():
    x = torch.ones((5, 3), dtype=torch.bfloat16)
    cap = capture(PK.column_sums, [x], {})
    assert len(cap.launches) == 1
    l = cap.launches[0]
    assert l.name == "partial_rows_kernel" and l.grid == (3,)
    assert l.signature["x_ptr"] == "*bf16" and l.signature["part_ptr"] == "*fp32"
    assert l.constexprs == {"ROWS": 2, "BLOCK": 4}
    # the per-program partial rows were never written: the host sum read the zeros they started as
    assert [h.op.rsplit(".", 1)[-1] for h in cap.host_steps] == ["sum", "to"]
    assert cap.host_steps[0].detail["n"] == 3


def test_an_autotuned_launch_is_captured_in_each_configuration():
    x = torch.ones(100, dtype=torch.bfloat16)
    c0, c1 = capture(PK.tuned_copy, [x], {}, config=0), capture(PK.tuned_copy, [x], {}, config=1)
    assert c0.configs == 2
    (l0,), (l1,) = c0.launches, c1.launches
    assert (l0.constexprs["BLOCK"], l0.options["num_warps"], l0.config) == (64, 1, (0, 2))
    assert (l1.constexprs["BLOCK"], l1.options["num_warps"], l1.config) == (128, 4, (1, 2))
    assert l0.grid(dict(BLOCK=64)) == (2,)


def test_a_heuristic_value_becomes_a_constexpr():
    (l,) = capture(PK.heuristic_add, [torch.ones(20)], {}).launches
    assert l.constexprs == {"BLOCK": 32}


def test_the_plan_reads_the_accumulator_format_and_the_reduction_order():
    x = torch.randn(4, 96).to(torch.bfloat16)
    for acc, fmt in (("fp32", "fp32"), ("bf16", "bf16")):
        kp = extract_plan(functools.partial(PK.sum_squares, acc=acc), [x], {})
        (red,) = [s for s in kp.sites() if s.kind == "reduce"]
        assert red.fmt == fmt and red.detail["n"] == 128 and red.detail["combine"] == "addf"
        # 128 values over 4 warps of 32 lanes: one per thread, then a tree of depth 7
        assert (red.detail["elements_per_thread"], red.detail["lanes"], red.detail["warps"]) == (1, 32, 4)
        assert red.where.file.endswith("test_plan_kernels.py") and red.where.line == SUM_LINE


@no.reference
def sum_squares_ref(x, *, acc="fp32", num_warps=4):
    xf = x.to(fp32)
    return no.sum(xf * xf, axis=-1)


@no.reference
def sum_squares_tree(x, *, acc="fp32", num_warps=4):
    xf = x.to(fp32)
    return no.sum(xf * xf, axis=-1, order="tree")


def test_a_bf16_accumulation_is_flagged_with_the_kernel_and_the_reference_line():
    x = torch.randn(4, 96).to(torch.bfloat16)
    assert check_plan(sum_squares_ref, PK.sum_squares, [x], {"acc": "fp32"}).ok
    r = check_plan(sum_squares_ref, PK.sum_squares, [x], {"acc": "bf16"})
    kinds = {d.kind for d in r.disagreements}
    assert kinds == {"rounding", "reduction-format"}, r.explain()
    d = next(d for d in r.disagreements if d.kind == "reduction-format")
    assert "bf16" in d.message and "fp32" in d.message
    assert d.kernel[0].startswith(f"test_plan_kernels.py:{SUM_LINE}") and d.reference[0].startswith(
        f"test_plan.py:{_line(__import__(__name__), 'return no.sum(xf * xf, axis=-1)')}")
    assert r.exit_code() == 1


def test_an_order_model_narrower_than_the_kernels_tree_is_flagged():
    x = torch.randn(2, 4096).to(torch.bfloat16)
    # 4096 values over 4 warps: 32 per thread added in sequence, then 7 tree levels: depth 38 > log2(4096)
    r = check_plan(sum_squares_tree, PK.sum_squares, [x], {"acc": "fp32"})
    (d,) = r.disagreements
    assert d.kind == "order" and "38" in d.message and "12" in d.message, r.explain()
    assert check_plan(sum_squares_ref, PK.sum_squares, [x], {"acc": "fp32"}).ok


@no.reference
def scaled_exp_ref(x, *, s=0.5, rounding="rtne", exp="exp"):
    return (no.exp(x.to(fp32)) * s).to(x.format)


def test_exp_and_exp2_of_x_log2e_are_one_function_exp2_alone_is_another():
    x = torch.randn(200).to(torch.bfloat16)
    assert check_plan(scaled_exp_ref, PK.scaled_exp, [x], {"exp": "exp"}).ok
    assert check_plan(scaled_exp_ref, PK.scaled_exp, [x], {"exp": "exp2_log2e"}).ok
    r = check_plan(scaled_exp_ref, PK.scaled_exp, [x], {"exp": "exp2"})
    (d,) = r.disagreements
    assert d.kind == "function" and "exp2" in d.message and "log2(e)" in d.message


def test_a_truncating_cast_is_flagged():
    x = torch.randn(200).to(torch.bfloat16)
    r = check_plan(scaled_exp_ref, PK.scaled_exp, [x], {"rounding": "rtz"})
    assert [d.kind for d in r.disagreements] == ["rounding-mode"], r.explain()


@no.reference
def dot_ref(a, b, *, precision="tf32"):
    return no.matmul(a, b, acc=fp32)


def test_a_tf32_dot_on_fp32_operands_is_flagged():
    a, b = torch.randn(16, 16), torch.randn(16, 16)
    assert check_plan(dot_ref, PK.dot16, [a, b], {"precision": "ieee"}).ok
    r = check_plan(dot_ref, PK.dot16, [a, b], {"precision": "tf32"})
    assert any(d.kind == "dot" and "TF32" in d.message for d in r.disagreements), r.explain()


@no.reference
def fp8_dot_ref(a, b):
    return no.matmul(a.to(fp32), b.to(fp32), acc=fp32)


@no.reference
def fp8_dot_tf32(a, b):
    return no.matmul(a.to(fp32), b.to(fp32), acc="tf32")


def test_an_fp8_dot_on_wgmma_accumulates_imprecisely_where_a_reference_models_fp32():
    b = torch.randn(32, 64).to(torch.float8_e4m3fn)
    small = torch.randn(16, 32).to(torch.float8_e4m3fn)
    r = check_plan(fp8_dot_ref, PK.fp8_dot, [small, b], {})
    # 16 rows: mma.sync on operands converted exactly to fp16, an fp32 accumulation
    assert r.ok and any("mma v2" in n.message for n in r.notes), r.explain()
    big = torch.randn(64, 32).to(torch.float8_e4m3fn)
    r = check_plan(fp8_dot_ref, PK.fp8_dot, [big, b], {})
    (d,) = r.disagreements
    assert d.kind == "dot" and "wgmma" in d.message and "maxNumImpreciseAcc" in d.message
    assert check_plan(fp8_dot_tf32, PK.fp8_dot, [big, b], {}).ok


@no.reference
def column_sums_ref(x, *, rows_per_program=2):
    return no.sum(x.to(fp32), axis=0).to(x.format)


def test_partial_sums_per_program_and_a_host_sum_are_one_reduction_of_the_reference():
    x = torch.randn(7, 40).to(torch.bfloat16)
    r = check_plan(column_sums_ref, PK.column_sums, [x], {})
    assert r.ok, r.explain()


@no.reference
def sum_squares_twice(x, *, acc="fp32", num_warps=4):
    xf = x.to(fp32)
    return no.sum(no.sum(xf * xf, axis=-1, keepdims=True) * xf, axis=-1)


def test_a_reference_that_sums_more_often_than_the_kernel_is_flagged():
    x = torch.randn(4, 96).to(torch.bfloat16)
    r = check_plan(sum_squares_twice, PK.sum_squares, [x], {"acc": "fp32"})
    (d,) = r.disagreements
    assert d.kind == "reduction" and "2 reduction(s) in fp32 in the reference and 1 in the kernel" in d.message


@no.reference
def halves(x):
    h = x.shape[-1] // 2
    xf = x.to(fp32)
    return no.cat([xf[..., :h] * 2.0, xf[..., h:] + 1.0], axis=-1).to(x.format)


def test_the_reference_counts_the_sites_each_element_passes():
    x = torch.randn(3, 8).to(torch.bfloat16)
    rp = reference_plan(halves, [x], {})
    prof = rp.output_profile(0)
    assert prof["round"]["bf16"][0] == 1          # one rounding per element, whichever half


# --------------------------------------------------------------------------- registered kernels

@pytest.mark.parametrize("name", ["rms_norm", "softmax", "swiglu", "cross_entropy", "w8a8_block_fp8_matmul"])
def test_registered_correct_kernels_and_variants_agree_with_their_reference(name):
    op = operators.get(name)
    inputs, params = op.example(0)
    for k in op.kernel_specs:
        if k in operators.UPSTREAM_KERNELS or k == "1oversqrt":
            continue
        r = check_plan(op, k, inputs, params)
        assert r.ok, f"{name}/{k}: {r.explain()}"


def test_a_1_over_sqrt_variant_is_reported_against_an_rsqrt_reference():
    op = operators.get("rms_norm")
    r = check_plan(op, "1oversqrt", *op.example(0))
    (d,) = r.disagreements
    assert d.kind == "function" and "rsqrt" in d.message and "sqrt" in d.message
    assert d.kernel[0].startswith("rms_norm.py:49") and d.reference[0].startswith("references.py:")


@pytest.mark.parametrize("name,faulty,kind", [
    ("rms_norm", "unrounded_multiply", "rounding"),
    ("cross_entropy", "storage_format", "reduction-format"),
    ("per_token_group_quant_fp8", "ties_away", "integer-rounding"),
    ("geglu_exact", "tanh_form", "function"),
    ("cross_entropy_backward", "rounded_label_grad", "rounding"),
    # the block-scaled quantizers (seed 0: the OCP floor rule)
    ("mxfp8_quantize", "wrong_rounding", "integer-rounding"),
    ("mxfp8_quantize", "nan_on_overflow", "rounding-overflow"),
    ("mxfp4_quantize", "ties_away", "rounding-mode"),
    ("nvfp4_quantize", "ties_away", "rounding-mode"),
    ("nvfp4_quantize", "scale_truncated", "bits"),
])
def test_faulty_kernels_that_change_the_plan_are_flagged(name, faulty, kind):
    op = operators.get(name)
    r = check_plan(op, f"faulty:{faulty}", *op.example(0))
    assert kind in {d.kind for d in r.disagreements}, r.explain()


@pytest.mark.parametrize("name,faulty", [("rms_norm", "offset_dropped"), ("w8a8_block_fp8_matmul", "wrong_scale_block"),
                                         ("per_token_group_quant_fp8", "max224")])
def test_faulty_kernels_with_the_same_plan_are_not_flagged(name, faulty):
    op = operators.get(name)
    assert check_plan(op, f"faulty:{faulty}", *op.example(0)).ok


def test_a_users_kernels_rounding_by_hand_and_bf16_sum_are_flagged_and_a_misplaced_eps_is_not():
    from fixtures import user_kernels as U
    op = operators.get("rms_norm")
    inputs, params = op.example(0)
    assert check_plan(op, U.rms_norm_ok, inputs, params).ok
    r = check_plan(op, U.rms_norm_truncating_store, inputs, params)
    assert [d.kind for d in r.disagreements] == ["bits"], r.explain()
    r = check_plan(op, U.rms_norm_bf16_accumulation, inputs, params)
    assert "reduction-format" in {d.kind for d in r.disagreements}, r.explain()
    # rsqrt(ms) + eps: the same roundings and functions in another order, an algorithm's fault
    assert check_plan(op, U.rms_norm_eps_after_rsqrt, inputs, params).ok


# --------------------------------------------------------------------------- command line

def test_the_command_prints_one_line_per_site_and_exits_by_the_check(capsys):
    assert main(["plan", "rms_norm"]) == 0
    out = capsys.readouterr().out
    assert "rms_norm.py:47 (78)" in out and "rsqrt.approx" in out and "no disagreement" in out
    assert main(["plan", "rms_norm", "--kernel", "1oversqrt"]) == 1
    out = capsys.readouterr().out
    assert "DISAGREE function" in out and "references.py:86" in out and "rms_norm.py:49" in out
    assert main(["plan", "rms_norm", "--kernel", "faulty:unrounded_multiply", "--json"]) == 1
    data = json.loads(capsys.readouterr().out)
    assert data["check"]["disagreements"][0]["kind"] == "rounding"
    assert data["plan"]["kernels"][0]["kernel"] == "_rms_norm_fwd_kernel"


def test_the_check_names_outputs_as_the_reference_names_them(capsys):
    """`DISAGREE rounding [output y]`, not `[output 0]`; the JSON keeps the index ("outputs")
    and gives the names beside it ("output_names")."""
    assert main(["plan", "rms_norm", "--kernel", "faulty:unrounded_multiply", "--param", "casting=llama",
                 "--dtype", "bf16"]) == 1
    out = capsys.readouterr().out
    assert "DISAGREE rounding [output y]:" in out and "[output 0]" not in out, out
    assert main(["plan", "rms_norm", "--kernel", "faulty:unrounded_multiply", "--param", "casting=llama",
                 "--dtype", "bf16", "--json"]) == 1
    d = json.loads(capsys.readouterr().out)["check"]["disagreements"][0]
    assert d["kind"] == "rounding" and d["outputs"] == [0] and d["output_names"] == ["y"]
    # the verdict's own rounding of a wider reference output names the output too
    from numoracle.plan.check import compare_output
    (d,) = compare_output(1, [], {}, {"round": {}}, "fp32", "bf16", "rstd")
    assert d.outputs == [1] and "the verdict's rounding of output rstd to bf16" in d.reference[0]


def test_the_command_says_what_was_wrong_with_its_arguments(capsys):
    assert main(["plan", "no_such_op"]) == 2
    assert "unknown operator 'no_such_op'" in capsys.readouterr().err
    assert main(["plan", "rms_norm", "--kernel", "nope"]) == 2
    assert "faulty kernels" in capsys.readouterr().err
    assert main(["plan", "rms_norm", "--param", "eps"]) == 2
    assert "NAME=VALUE" in capsys.readouterr().err


@pytest.mark.slow
def test_the_command_compiles_in_its_own_process_without_the_interpreter():
    import subprocess
    import sys
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    p = subprocess.run([sys.executable, "-m", "numoracle", "plan", "softmax", "--kernel", "exp2"],
                       capture_output=True, text=True, env=env, timeout=300)
    assert p.returncode == 0, p.stderr
    assert "exp in fp32: ex2.approx" in p.stdout
