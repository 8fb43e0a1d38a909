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


# two loops one after the other, as Triton prints them: MLIR numbers each region's values afresh,
# so the second body reuses the first's names (%v, %s, %i) for other values
SIBLINGS = '''module {
  tt.func public @k(%x_ptr: !tt.ptr<f32>, %n: i32) {
    %c0 = arith.constant 0 : i32
    %c1 = arith.constant 1 : i32
    %cst = arith.constant 0.000000e+00 : f32
    %a = scf.for %i = %c0 to %n step %c1 iter_args(%s = %cst) -> (f32)  : i32 {
      %v = arith.addf %s, %cst : f32
      scf.yield %v : f32
    }
    %b = scf.for %i = %c0 to %n step %c1 iter_args(%s = %a) -> (f32)  : i32 {
      %v = arith.mulf %s, %s : f32
      scf.yield %v : f32
    }
    %p = tt.addptr %x_ptr, %c1 : !tt.ptr<f32>, i32
    tt.store %p, %b : !tt.ptr<f32>
    tt.return
  }
}
'''


def test_the_mlir_reader_keeps_apart_the_values_sibling_regions_print_with_one_name():
    from numoracle.plan import kernel as K
    kir = K.KernelIR(SIBLINGS)
    first, second = [op for op in kir.ops if op.name == "scf.for"]
    assert first.defines == ["%i", "%s"] and len(set(second.defines) | {"%i", "%s"}) == 4
    assert second.operands[3] == "%a"                      # the second loop starts from the first's result
    for loop, body in ((first, "arith.addf"), (second, "arith.mulf")):
        (y,) = [o for o in loop.regions[0] if o.name == "scf.yield"]
        add = kir.def_op(y.operands[0])
        assert add.name == body and add.parent is loop
        # the body's operand is its own loop's iter_arg
        carried = [o for o in add.operands if kir.defs[o][0] == "block"]
        assert carried and all(kir.defs[o][1] is loop for o in carried)
    assert set(K.loop_levels(kir)) == {kir.def_op([o for o in first.regions[0] if o.name == "scf.yield"][0]
                                                  .operands[0])}
    # the store's pointer is the argument's pointer type (tt.addptr's first type)
    (p,) = [op for op in kir.ops if op.name == "tt.addptr"]
    assert p.result_type.pointer and kir.fmt_of(p.results[0]) is None
    assert [(s.kind, s.fmt) for s in K.extract(kir) if s.kind == "store"] == [("store", "fp32")]


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
    # a grid function is the grid it gives for the launch's arguments and configuration
    # (it was listed as "<function ... at 0x...>", and loops could not bound the program ids)
    assert (l0.grid, l1.grid) == ((2,), (1,))


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


def test_every_store_is_a_site_with_its_pointee_format_and_rounds_nothing():
    x = torch.randn(4, 96).to(torch.bfloat16)
    kp = extract_plan(PK.sum_squares, [x], {})
    # tt.addptr's result is the pointer (its first type), not the offset (its last)
    assert all(op.result_type.pointer for op in kp.compiled[0].ir.ops if op.name == "tt.addptr")
    (st,) = [s for s in kp.sites() if s.kind == "store"]
    assert (st.fmt, st.src_fmt, st.detail["arg"], st.rounds) == ("fp32", "fp32", "%out_ptr", False)
    assert st.where.line == _line(PK, "tl.store(out_ptr + row, tl.sum(x * x")
    assert st.to_dict()["format"] == "fp32" and st.text() == "store fp32 to %out_ptr"
    # a bf16 output: the store writes the value the cast before it rounded, one rounding in all
    y = torch.randn(200).to(torch.bfloat16)
    kp = extract_plan(PK.scaled_exp, [y], {"rounding": "rtz"})
    (st,) = [s for s in kp.sites() if s.kind == "store"]
    assert st.text() == "store bf16 to %y_ptr" and not st.rounds
    r = check_plan(scaled_exp_ref, PK.scaled_exp, [y], {})
    assert r.ok, r.explain()
    assert check_plan(scaled_exp_ref, PK.scaled_exp, [y], {"rounding": "rtz"}).exit_code() == 1


def test_autotuned_and_heuristic_kernels_compile_in_the_helper_process():
    from numoracle.plan.extract import _compilable_here
    x = torch.ones(100, dtype=torch.bfloat16)
    for config, block, warps in ((0, 64, 1), (1, 128, 4)):
        kp = extract_plan(PK.tuned_copy, [x], {}, config=config)
        ((launch, c),) = kp.distinct()
        # an interpreted kernel in this process: compiled by the helper, which finds the module's
        # name bound to the Autotuner and compiles the @triton.jit function it wraps
        assert not _compilable_here(launch.kernel)
        assert (launch.constexprs["BLOCK"], c.options["num_warps"], launch.config) == (block, warps, (config, 2))
        assert [s.text() for s in c.sites if s.kind in ("load", "store")] == ["load bf16 from %x_ptr",
                                                                              "store fp32 to %y_ptr"]
    kp = extract_plan(PK.heuristic_add, [torch.ones(20)], {})
    ((launch, c),) = kp.distinct()
    assert launch.constexprs == {"BLOCK": 32} and [s.kind for s in c.sites] == ["load", "arith", "store"]


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
def chunked_ref(x, *, acc="fp32", vector=True, chunk=64):
    xf = x.to(fp32)
    return no.sum(xf * xf, axis=-1)


def _chunked_ref_of_order(order):
    @no.reference
    def chunked_ordered(x, *, acc="fp32", vector=True, chunk=64):
        xf = x.to(fp32)
        return no.sum(xf * xf, axis=-1, order=order)
    return chunked_ordered


@pytest.mark.parametrize("vector", [True, False], ids=["vector-accumulator", "scalar-running-sum"])
def test_a_vector_accumulator_reduced_after_its_loop_is_one_reduction_of_the_row(vector):
    """acc += x·x over a row's chunks, then tl.sum(acc) (Triton's layer-norm tutorial), is one
    sum of the row, as s += tl.sum(x·x) is: 300 columns in 5 chunks of 64, each term through 4
    additions in the loop and a tree of depth 6 (64 lanes of 2 warps)."""
    x = torch.randn(4, 300).to(torch.bfloat16)
    p = {"vector": vector}
    r = check_plan(chunked_ref, PK.chunked_sum_squares, [x], p)
    assert r.ok, r.explain()
    assert check_plan(_chunked_ref_of_order(10), PK.chunked_sum_squares, [x], p).ok
    (d,) = check_plan(_chunked_ref_of_order(9), PK.chunked_sum_squares, [x], p).disagreements
    assert d.kind == "order" and "up to 10 roundings" in d.message and "allows 9" in d.message, d.message
    # a tree over 300 allows ceil(log2 300) = 9
    (d,) = check_plan(_chunked_ref_of_order("tree"), PK.chunked_sum_squares, [x], p).disagreements
    assert d.kind == "order" and "'tree' over 300 allows 9" in d.message, d.message


def test_a_bf16_vector_accumulator_still_disagrees_with_an_fp32_sum():
    x = torch.randn(4, 300).to(torch.bfloat16)
    r = check_plan(chunked_ref, PK.chunked_sum_squares, [x], {"acc": "bf16"})
    kinds = {d.kind for d in r.disagreements}
    assert kinds == {"rounding", "reduction-format"}, r.explain()
    d = next(d for d in r.disagreements if d.kind == "reduction-format")
    assert "accumulates in bf16 where the reference sums in fp32" in d.message
    assert any("add in bf16" in k for k in d.kernel) and any("reduce addf in bf16" in k for k in d.kernel)


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


@no.reference
def capped_ref(x, *, way="tanh"):
    t = no.tanh(x.to(fp32))
    return (no.exp(t) + t).to(x.format)


@no.reference
def capped_ref_without_tanh(x, *, way="tanh"):
    t = x.to(fp32)
    return (no.exp(t) + t).to(x.format)


def test_a_function_on_one_side_only_says_which_side_lacks_it():
    x = torch.randn(200).to(torch.bfloat16)
    assert check_plan(capped_ref, PK.capped_exp, [x], {}).ok
    # tanh built from a sigmoid: the kernel's other function (exp) is the reference's too
    (d,) = check_plan(capped_ref, PK.capped_exp, [x], {"way": "sigmoid"}).disagreements
    assert d.kind == "function" and d.message.startswith(
        "the reference has tanh, which the kernel never calls: it builds the value from other operations"), d.message
    assert d.reference and not d.kernel
    (d,) = check_plan(capped_ref_without_tanh, PK.capped_exp, [x], {}).disagreements
    assert d.message == "the kernel computes tanh, which the reference does not have" and d.kernel
    assert check_plan(capped_ref_without_tanh, PK.capped_exp, [x], {"way": "none"}).ok


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
    (d,) = r.disagreements
    assert d.kind == "dot" and "TF32" in d.message, r.explain()
    # the fix is said in the reference language
    assert 'no.matmul(..., input_precision="tf32")' in d.message, d.message


@no.reference
def widened_dot_ref(a, b):
    return no.matmul(a.to(fp32), b.to(fp32), acc=fp32)


def test_a_tf32_dot_of_tiles_widened_from_bf16_needs_no_tf32_in_the_reference():
    """bf16 loads widened to fp32 hold bf16 values: TF32 holds them, their products are exact, and
    the reference's plain no.matmul agrees; fp32 inputs to the same kernel are read as TF32."""
    a, b = torch.randn(16, 16).to(torch.bfloat16), torch.randn(16, 16).to(torch.bfloat16)
    r = check_plan(widened_dot_ref, PK.widened_dot16, [a, b], {})
    assert r.ok, r.explain()
    r = check_plan(widened_dot_ref, PK.widened_dot16, [a.float(), b.float()], {})
    (d,) = r.disagreements
    assert d.kind == "dot" and 'input_precision="tf32"' in d.message, r.explain()


@no.reference
def dot_ref_tf32(a, b, *, precision="tf32"):
    return no.matmul(a, b, acc=fp32, input_precision="tf32")


def test_a_reference_that_reads_tf32_operands_agrees_with_a_tf32_dot_only():
    a, b = torch.randn(16, 16), torch.randn(16, 16)
    r = check_plan(dot_ref_tf32, PK.dot16, [a, b], {"precision": "tf32"})
    assert r.ok, r.explain()
    r = check_plan(dot_ref_tf32, PK.dot16, [a, b], {"precision": "ieee"})
    (d,) = r.disagreements
    assert d.kind == "dot" and "keeps fp32 operands" in d.message and "drop input_precision" in d.message, r.explain()


@no.reference
def dot_ref_x3(a, b, *, precision="tf32x3"):
    return no.matmul(a, b, acc=fp32, input_precision="tf32x3")


@pytest.mark.parametrize("ref, precision, says", [
    (dot_ref, "tf32x3", "the reference models fp32 operands"),
    (dot_ref_tf32, "tf32x3", "the reference models TF32 operands"),
    (dot_ref_x3, "tf32", "uses inputPrecision=tf32"),
    (dot_ref_x3, "ieee", "uses inputPrecision=ieee"),
])
def test_a_tf32x3_dot_agrees_only_with_a_reference_that_splits(ref, precision, says):
    """Triton splits fp32 tiles under inputPrecision=tf32x3 (three TF32 dots, the tiles' sums added
    in fp32): a reference says so with input_precision="tf32x3", and the plan check tells every
    other pairing apart, naming the fix."""
    a, b = torch.randn(16, 16), torch.randn(16, 16)
    assert check_plan(dot_ref_x3, PK.dot16, [a, b], {"precision": "tf32x3"}).ok
    r = check_plan(ref, PK.dot16, [a, b], {"precision": precision})
    (d,) = r.disagreements
    assert d.kind == "dot" and says in d.message and 'input_precision="tf32x3"' in d.message, r.explain()


@no.reference
def dot_ref_split(a, b, *, precision="tf32x3"):
    return no.matmul(a, b, acc=fp32, input_precision=precision)


@pytest.mark.parametrize("precision", ["tf32x3", "bf16x3", "bf16x6"])
def test_each_split_precision_agrees_with_its_own_reference_on_tensor_cores(precision):
    """The kernel's dot runs on tensor cores under every split (Triton 3.9 gives bf16x3's dots
    their operands' locations, which the plan reader follows): the same precision in the
    reference agrees; another split disagrees, naming both."""
    a, b = torch.randn(16, 16), torch.randn(16, 16)
    r = check_plan(dot_ref_split, PK.dot16, [a, b], {"precision": precision})
    assert r.ok, r.explain()
    assert any("runs on tensor cores" in n.message for n in r.notes), r.explain()
    other = "bf16x6" if precision == "bf16x3" else "bf16x3"

    @no.reference
    def other_ref(a, b, *, precision="tf32x3"):
        return no.matmul(a, b, acc=fp32, input_precision=other)
    (d,) = check_plan(other_ref, PK.dot16, [a, b], {"precision": precision}).disagreements
    assert f"inputPrecision={precision}" in d.message and other in d.message, d.message


def test_a_tf32x3_dot_of_widened_tiles_still_splits():
    """fp32 tiles widened from bf16 hold TF32 values, but Triton still splits them and adds each
    tile's sum in fp32 (rounded to nearest, outside the tensor core's accumulation): the plain
    reference disagrees, the splitting one agrees."""
    @no.reference
    def widened(a, b, *, precision="tf32"):
        return no.matmul(a.to(fp32), b.to(fp32), acc=fp32)

    @no.reference
    def widened_x3(a, b, *, precision="tf32x3"):
        return no.matmul(a.to(fp32), b.to(fp32), acc=fp32, input_precision=precision)

    a, b = torch.randn(16, 16).to(torch.bfloat16), torch.randn(16, 16).to(torch.bfloat16)
    r = check_plan(widened, PK.widened_dot16, [a, b], {"precision": "tf32x3"})
    (d,) = r.disagreements
    assert d.kind == "dot" and "inputPrecision=tf32x3" in d.message, r.explain()
    assert check_plan(widened_x3, PK.widened_dot16, [a, b], {"precision": "tf32x3"}).ok


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
    # the fix is said in the reference language a user writes
    assert "no.matmul(..., acc=tf32)" in d.message, d.message
    r = check_plan(fp8_dot_tf32, PK.fp8_dot, [big, b], {})
    assert r.ok, r.explain()
    # the tensor-core note names the reference's accumulation, not always fp32
    assert any("the reference's tf32 accumulation bound" in n.message for n in r.notes), r.explain()


@no.reference
def matmul_fp32(a, b, *, splits=2):
    return no.matmul(a, b, acc=fp32)


@no.reference
def matmul_fp32_ftz(a, b, *, splits=2):
    return no.matmul(a, b, acc=fp32, ftz=True)


@no.reference
def row_sum_ref(x, *, square=False, block=32):
    xf = x.to(fp32)
    return no.sum(xf * xf if square else xf, axis=-1, ftz=True)


@no.reference
def row_squares_no_sum(x, *, square=False, block=32):
    xf = x.to(fp32)
    return (xf * xf)[..., 0]


def test_partials_added_atomically_are_one_accumulation_with_the_partial():
    # split-K: each program's dot over its K slice is atomically added into C, which the
    # reference's any-order matmul encloses; this was "1 reduction in the kernel, 0 in the reference"
    a, b = torch.randn(20, 64).to(torch.bfloat16), torch.randn(64, 24).to(torch.bfloat16)
    r = check_plan(matmul_fp32_ftz, PK.split_k_matmul, [a, b], {"splits": 2})
    assert r.ok, r.explain()
    # an fp32 atomic add flushes subnormals on NVIDIA GPUs: a reference that keeps them disagrees
    r = check_plan(matmul_fp32, PK.split_k_matmul, [a, b], {"splits": 2})
    (d,) = r.disagreements
    assert d.kind == "flush" and "no.matmul(..., ftz=True)" in d.message, r.explain()
    assert check_plan(matmul_fp32, PK.tiled_matmul, [a, b], {}).ok     # tl.dot alone keeps them
    # a row split over programs: tl.sum of each block, the partials added atomically
    x = torch.randn(3, 100).to(torch.bfloat16)
    for square in (False, True):
        r = check_plan(row_sum_ref, PK.split_row_sum, [x], {"square": square})
        assert r.ok, r.explain()
    # the link does not hide a sum the reference lacks
    r = check_plan(row_squares_no_sum, PK.split_row_sum, [x], {"square": True})
    assert not r.ok and any(d.kind == "reduction" for d in r.disagreements), r.explain()


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


def test_triton36s_emulated_dot_scaled_is_read_through_the_select_around_its_scaled_operands():
    """Triton 3.6's TTGIR for tl.dot_scaled on sm90 (saved: tests/fixtures/plan_ir) wraps each
    bf16 operand·scale product in ``arith.select %scale_is_nan, %nan, %product`` before the
    tt.dot; 3.9's does not. The products are read through the select's value operands."""
    from numoracle.plan import kernel as K
    base = os.path.join(os.path.dirname(__file__), "fixtures", "plan_ir", "mx_dot_scaled_triton36")
    with open(base + ".ttir", encoding="utf-8") as f:
        ttir = f.read()
    with open(base + ".ttgir", encoding="utf-8") as f:
        ttgir = f.read()
    kir = K.KernelIR(ttir, ttgir)
    g = kir.gmodule.function(kir.func.name)
    defs = {r: o for o in g.walk() for r in o.results}
    (dot,) = [o for o in g.walk() if o.name == "tt.dot"]
    assert [defs[v].name for v in dot.operands[:2]] == ["arith.select", "arith.select"]
    sites = K.extract(kir)
    (ds,) = [s for s in sites if s.kind == "dot"]
    assert ds.detail["scaled"] and ds.detail["emulated"] == "operands scaled in bf16"
    muls = [s for s in sites if s.detail.get("companion")]
    assert [(s.kind, s.op, s.fmt, s.rounds) for s in muls] == [("arith", "arith.mulf", "bf16", True)] * 2
    assert all(s.where.file.endswith("mx_matmul.py") for s in muls)


def test_a_power_of_two_built_from_bits_and_converted_by_value_is_read_as_an_encoding_misused():
    x, s = torch.randn(32).to(torch.bfloat16), torch.randint(100, 150, (32,), dtype=torch.uint8)
    kp = extract_plan(PK.pow2_scaled, [x, s], {"bitcast": True})
    assert [x.detail.get("encoding") for x in kp.sites() if x.kind == "bits"] == ["pow2"]
    kp = extract_plan(PK.pow2_scaled, [x, s], {"bitcast": False})
    (b,) = [x for x in kp.sites() if x.kind == "bits"]
    assert (b.op, b.src_fmt, b.fmt, b.detail["encoding"], b.detail["exponents"]) == \
        ("arith.sitofp", "i32", "fp32", "by-value", [-127, 127])
    assert "by value" in b.text() and b.where.line == _line(PK, "scale = bits.to(tl.float32)")
    from numoracle.plan.check import compare_output
    from numoracle.plan.cones import Cones
    cones = Cones(kp)
    (d,) = [d for d in compare_output(0, cones.output(kp.capture.outputs[0][0]), cones.items, {"round": {
        "bf16": (1, [])}}, "bf16", "bf16") if d.kind == "bits"]
    assert d.severity == "disagreement" and "by value, not by a bitcast" in d.message


# --------------------------------------------------------------------------- command line

def test_the_command_prints_one_line_per_site_and_exits_by_the_check(capsys):
    assert main(["plan", "rms_norm"]) == 0
    out = capsys.readouterr().out
    assert "rms_norm.py:47 (78)" in out and "rsqrt.approx" in out and "no disagreement" in out
    # every store with its format, in the listing, with --all and in the JSON
    assert "store fp32 to %rstd_ptr" in out and "store bf16 to %y_ptr" in out, out
    assert main(["plan", "rms_norm", "--all"]) == 0
    out = capsys.readouterr().out
    assert "store fp32 to %rstd_ptr" in out and "store bf16 to %y_ptr" in out
    assert main(["plan", "rms_norm", "--json"]) == 0
    sites = json.loads(capsys.readouterr().out)["plan"]["kernels"][0]["sites"]
    assert [(s["format"], s["detail"]["arg"]) for s in sites if s["kind"] == "store"] == [("fp32", "%rstd_ptr"),
                                                                                         ("bf16", "%y_ptr")]
    assert main(["plan", "rms_norm", "--kernel", "1oversqrt"]) == 1
    out = capsys.readouterr().out
    assert "DISAGREE function" in out and "references.py:86" in out and "rms_norm.py:49" in out
    assert main(["plan", "rms_norm", "--kernel", "faulty:unrounded_multiply", "--json"]) == 1
    data = json.loads(capsys.readouterr().out)
    assert data["check"]["disagreements"][0]["kind"] == "rounding"
    assert data["plan"]["kernels"][0]["kernel"] == "_rms_norm_fwd_kernel"


def test_the_default_listing_leaves_out_only_loads_and_exact_casts(capsys, monkeypatch):
    """The listing is what a reference is written from, one line per rounding: every fp32
    add and multiply is there (they were once left out with the loads, so a bias add or
    ``h = x + r`` had no line)."""
    monkeypatch.syspath_prepend(os.path.join(os.path.dirname(__file__), "user_project"))
    assert main(["plan", "tests_user_op.ops:my_op", "--all"]) == 0
    every = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("  ")]
    assert main(["plan", "tests_user_op.ops:my_op"]) == 0
    shown = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("  ")]
    left_out = [ln for ln in every if ln not in shown]
    assert left_out and all(" load " in ln or ("cast" in ln and "(exact)" in ln) for ln in left_out), left_out
    assert sum("add in fp32" in ln and "(exact)" not in ln for ln in shown) == 2, shown
    assert sum(ln.rstrip().endswith("mul in fp32") for ln in shown) == 3, shown


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


@no.reference
def welford_norm_ref(x, *, BLOCK=64):
    """The Welford/Chan combine as the kernel runs it, its element count a Python number."""
    xf, n_cols = x.to(fp32), x.shape[-1]
    n_a, mean, m2 = 0.0, None, None
    for start in range(0, n_cols, BLOCK):
        xb = xf[:, start:start + BLOCK]
        n_b = float(min(n_cols - start, BLOCK))
        mean_b = no.sum(xb, axis=-1, keepdims=True) / n_b
        d = xb - mean_b
        m2_b = no.sum(d * d, axis=-1, keepdims=True)
        n = n_a + n_b
        if mean is None:
            mean, m2 = mean_b, m2_b
        else:
            delta = mean_b - mean
            mean = mean + delta * (n_b / n)
            m2 = m2 + m2_b + delta * delta * (n_a * n_b / n)
        n_a = n
    var = m2 / n_a
    return ((xf - mean) * (1.0 / no.sqrt(var + 1e-5))).to(x.format), var[:, 0]


def test_a_count_kept_in_a_float_is_no_accumulation_but_data_summed_in_a_loop_is():
    """A Welford combine keeps its element count in an fp32 loop variable (n = n + n_b, n_b the
    tile's size): exact below 2^24, so no reduction level, and a reference that counts in
    Python agrees with it (it read as one reduction more than the reference).  A count read
    from the data (a tl.sum of the mask) stays a loop accumulation."""
    x = (torch.randn(4, 96) * 4).to(torch.bfloat16)
    r = check_plan(welford_norm_ref, PK.welford_norm, [x], {})
    assert r.ok, r.explain()
    (d,) = check_plan(welford_norm_ref, PK.welford_norm_data_count, [x], {}).disagreements
    assert d.kind == "reduction" and "3 reduction(s) in fp32 in the kernel and 2" in d.message, d.message


def test_an_fp32_division_reads_as_the_approximate_division_it_compiles_to():
    """Triton's fp32 `/` is div.full (not correctly rounded): the plan's line says so, as it
    does for sqrt.approx, so that a reader does not take it for an IEEE division."""
    x = (torch.randn(4, 96) * 4).to(torch.bfloat16)
    kp = extract_plan(PK.welford_norm, [x], {})
    divs = [s for s in kp.sites() if s.kind == "arith" and s.detail.get("name") == "div" and s.rounds]
    assert divs
    assert all(s.text().startswith("div in fp32: div.full.f32: approximate, not correctly rounded")
               for s in divs), [s.text() for s in divs]


def test_the_plan_reads_every_shipped_profile_s_call_label():
    """The reference plan reads a math call from the calculus's site label: every error model a
    shipped profile writes (a constant, a line, a capped line, correctly rounded) must parse."""
    from numoracle import mathlib
    from numoracle.calculus.tracked import _ulps_text
    from numoracle.plan.reference import _CALL
    for name in ("interpreter", "h200", "cuda_documented"):
        for fn, model in mathlib.load(name).functions.items():
            label = f"{fn} (correctly rounded)" if model.b == 0 and model.a <= 0.5 else f"{fn} ({_ulps_text(model)})"
            m = _CALL.match(label)
            assert m and m.group(1) == fn, (name, label)
