"""A user's flash attention: ``no.matmul`` over batch dimensions (one program's heads), the
online softmax's reference, and the plan check that tells a one-softmax reference from the
kernel's loop (tests/fixtures/user_attention.py)."""

import pytest
import torch

from numoracle import backends

backends.select("interpreter")

import numoracle as no  # noqa: E402
from numoracle.errors import InvalidArgument  # noqa: E402
from numoracle.formats import bf16, fp32  # noqa: E402
from numoracle.plan import check_plan  # noqa: E402
from numoracle.selftest.emulator import Plan, emulate  # noqa: E402

from tests.fixtures import user_attention as A  # noqa: E402
from tests.fixtures.exp_kernels import exp2_kernel, exp_kernel, ref_exp, ref_exp2, ref_exp2_log2e  # noqa: E402


@no.reference
def bmm(a, b):
    return no.matmul(a, b, acc=fp32).to(bf16)


def _bf16(*shape, seed):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)).to(torch.bfloat16)


@pytest.mark.parametrize("shapes", [((3, 5, 24), (3, 24, 7)), ((5, 24), (2, 24, 7)), ((2, 1, 5, 24), (3, 24, 7))])
def test_a_batched_matmul_has_each_matrix_products_region(shapes):
    """Every output element's region is the one of its own matrix product: the batched region
    equals the 2-d regions computed one pair at a time (batch dimensions broadcast)."""
    sa, sb = shapes
    a, b = _bf16(*sa, seed=1), _bf16(*sb, seed=2)
    y = (a.double() @ b.double()).to(torch.bfloat16)
    got = no.check(bmm, y, (a, b), mode="fixed")
    assert got.status == "accept", got.explain()
    batch = torch.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    A2 = a.expand(*batch, *a.shape[-2:]).reshape(-1, *a.shape[-2:])
    B2 = b.expand(*batch, *b.shape[-2:]).reshape(-1, *b.shape[-2:])
    lo, hi = got.outputs[0].lo.reshape(-1, *y.shape[-2:]), got.outputs[0].hi.reshape(-1, *y.shape[-2:])
    for i in range(A2.shape[0]):
        one = no.check(bmm, y.reshape(-1, *y.shape[-2:])[i], (A2[i], B2[i]), mode="fixed").outputs[0]
        assert torch.equal(one.lo, lo[i]) and torch.equal(one.hi, hi[i]), i


def test_emulated_batched_matmuls_are_accepted_and_a_wrong_head_is_rejected():
    a, b = _bf16(2, 6, 40, seed=3), _bf16(2, 40, 5, seed=4)
    for seed in range(4):
        y = emulate(bmm, (a, b), plan=Plan.adversarial(seed=seed))
        assert no.check(bmm, y, (a, b), mode="fixed").status == "accept"
    # the second head computed with the first head's b
    y = emulate(bmm, (a, b[[0, 0]]), plan=Plan(seed=0))
    v = no.check(bmm, y, (a, b), mode="fixed")
    assert v.status == "reject" and not bool(v.outputs[0].rejected[0].any()) and bool(v.outputs[0].rejected[1].any())


def test_a_matmul_whose_b_is_not_k_by_n_says_to_transpose_it():
    q = _bf16(2, 5, 16, seed=5)
    with pytest.raises(InvalidArgument, match=r"a of shape \[2, 5, 16\] has K=16 columns but b of shape \[2, 5, 16\] "
                                              r"has 5 rows .*b.transpose\(-1, -2\)"):
        no.check(bmm, q, (q, q))


@pytest.mark.parametrize("n", [16, 40])
def test_the_online_reference_accepts_the_kernel_and_rejects_a_missing_rescale(n):
    """One key block (16) or three (40): the kernel is accepted in both modes; without the
    rescale of its accumulator it is rejected once there is more than one block."""
    x, p = A.inputs(n, seed=0)
    for mode, v in no.check_modes(A.attention_online, A.attention(*x, **p), x, p).items():
        assert v.status == "accept", (mode, v.explain())
    bad = no.check(A.attention_online, A.attention_noalpha(*x, **p), x, p, mode="fixed")
    assert bad.status == ("reject" if n > 16 else "accept")


def test_a_one_softmax_reference_rejects_the_kernel_once_it_loops():
    """The finding the plan check explains: at the final maximum the reference's fp16 roundings of
    p are other roundings than the kernel's at each block's running maximum."""
    x, p = A.inputs(40, seed=0)
    assert no.check(A.attention_one, A.attention(*x, **p), x, p, mode="fixed").status == "reject"


def _plan(reference, n):
    x, p = A.inputs(n, seed=0)
    return check_plan(reference, A.attention, x, p).to_dict()


def test_the_plan_check_names_the_online_softmax_a_one_softmax_reference_does_not_model():
    r = _plan(A.attention_one, 40)
    assert [d["kind"] for d in r["disagreements"]] == ["online-softmax"], r["disagreements"]
    d = r["disagreements"][0]
    assert "runs 3 times on this example" in d["message"] and "rounding each step's terms to fp16" in d["message"]
    assert [k.split(" ", 1)[1] for k in d["kernel"]] == ["exp of the maximum's change", "accumulator rescaled",
                                                         "terms rounded to fp16"]
    assert len(d["reference"]) == 1 and "exp2" in d["reference"][0]


def test_the_plan_check_accepts_the_online_reference_and_one_key_block():
    """The online reference has the rescale's exp2 at a line of its own; with one key block
    the kernel's loop runs once and the one-softmax reference is its plan.  The kernel's exp2
    (log2 e folded into the scale it receives) is the reference's exp2, not a disagreement."""
    for reference, n in ((A.attention_online, 40), (A.attention_one, 16)):
        r = _plan(reference, n)
        assert r["ok"] and not r["disagreements"], (reference.name, r["disagreements"])


@pytest.mark.parametrize("kernel, reference, hint", [
    (exp_kernel, ref_exp, None), (exp_kernel, ref_exp2_log2e, None), (exp2_kernel, ref_exp2, None),
    (exp2_kernel, ref_exp2_log2e, "exp2 of x without the log2(e) factor is 2^x, not e^x"),
    (exp2_kernel, ref_exp, "exp2 of x without the log2(e) factor is 2^x, not e^x"),
    (exp_kernel, ref_exp2, "the reference's exp2 takes no product by log2(e) as its argument")])
def test_an_exp2_is_exp_where_its_argument_is_a_product_by_log2e_on_either_side(kernel, reference, hint):
    r = check_plan(reference, kernel, (torch.zeros(16, dtype=torch.float16),)).to_dict()
    if hint is None:
        assert r["ok"], r["disagreements"]
    else:
        assert [d["kind"] for d in r["disagreements"]] == ["function"] and hint in r["disagreements"][0]["message"]


def test_a_reference_parameter_with_a_default_the_domain_does_not_vary_is_not_the_kernels_keyword():
    """The online reference's ``block`` is its loop's alone: cases never pass it, so a kernel
    without it is not refused; once the domain varies it, every case passes it, and it is."""
    from numoracle.operators.choose import resolve
    op = no.Operator("attention_online", A.attention_online, kernels={"correct": A.attention}, example=A.example)
    assert resolve(op, A.attention)[0] is A.attention
    varied = no.Operator("attention_online", A.attention_online, kernels={"correct": A.attention}, example=A.example,
                         domain=no.Domain(params={"block": (16, 32)}))
    with pytest.raises(InvalidArgument, match="cannot be called as attention_online's kernels are"):
        resolve(varied, A.attention)


def test_the_skeleton_of_an_online_softmax_points_to_the_loop_it_cannot_write():
    from numoracle.plan import skeleton
    op = no.Operator("attention_online", A.attention_online, kernels={"correct": A.attention}, example=A.example)
    text = skeleton(op, "correct", *A.inputs(40))
    todos = [line for line in text.splitlines() if line.strip().startswith("TODO_")]
    assert len(todos) == 2 and all("online softmax's loop-carried value" in t and '"Flash attention"' in t
                                   for t in todos), todos


@pytest.mark.parametrize("n", [5, 40])
def test_causal_attention_masked_with_minus_infinity_is_certified_and_judged(n):
    """The reference masks with -inf as the kernel does: every element certified, the causal
    kernel accepted, one that masks each query's own key too, or none, rejected."""
    x, p = A.inputs(n, seed=1)
    params = {**p, "causal": True}
    for mode, v in no.check_modes(A.attention_online, A.attention_causal(*x, **p), x, params).items():
        assert v.status == "accept" and not bool(v.outputs[0].uncertified.any()), (mode, v.explain())
    for fault in (A.attention_causal_no_diagonal, A.attention):
        assert no.check(A.attention_online, fault(*x, **p), x, params, mode="fixed").status == "reject", fault


@no.reference
def linear_relu_ref(a, b, bias):
    return no.maximum(no.matmul(a, b, acc=fp32) + bias.to(fp32), 0.0).to(a.format)


@pytest.mark.parametrize("k", [1, 40])
def test_a_bias_folded_into_the_tensor_core_dot_is_a_note_and_a_dot_over_one_term_is_a_dot(k):
    """With K = 1 the bias add becomes the dot's accumulator input (the plan has no fp32 add at
    the bias line): a note, since the tensor core adds it; and the reference's dot over K = 1,
    which rounds nothing, still counts as the kernel's one dot (it was a disagreement)."""
    import test_plan_kernels as PK
    g = torch.Generator().manual_seed(0)
    a, b, bias = (torch.randn(*s, generator=g).to(torch.bfloat16) for s in ((4, k), (k, 24), (24,)))
    r = check_plan(linear_relu_ref, PK.linear_relu, (a, b, bias)).to_dict()
    assert r["ok"] and not r["disagreements"], r["disagreements"]
    folded = [n for n in r["notes"] if "starts its accumulation from data loaded at test_plan_kernels.py:" in n["message"]]
    assert len(folded) == (1 if k == 1 else 0), r["notes"]
