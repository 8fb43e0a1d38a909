"""The plan reader on a kernel's arithmetic on float encodings (numoracle/plan/encoding.py): an
exponent read from the bits, a power of two built from bits and an e2m1 rounding by comparisons
are what a block-scaled quantizer's reference models; the same code with a wrong shift, a wrong
tie rule, a wrong threshold or the other rounding of the exponent is not."""

import functools

import torch

from numoracle import backends

backends.select("interpreter")

import numoracle as no  # noqa: E402
from numoracle.formats import fp32  # noqa: E402
from numoracle.plan import check_plan, extract_plan  # noqa: E402

import test_plan_kernels as PK  # noqa: E402


@no.reference
def mxfp4_unpacked(x):
    q = no.quantize_mx(x.to(fp32), "e2m1", "floor", block=32)
    return q.codes, q.scales


X = [torch.linspace(-3.0, 5.0, 64, dtype=torch.float32).reshape(1, 64)]


def _sites(**kw):
    kp = extract_plan(functools.partial(PK.block_e2m1, **kw), X, {})
    return [s for s in kp.sites() if s.kind in ("bits", "cast")]


def test_the_exponent_field_is_floor_of_log2_and_the_bits_of_two_to_minus_e_a_power_of_two():
    sites = _sites()
    enc = {(s.src_fmt, s.fmt): s.detail.get("encoding") for s in sites if s.kind == "bits"}
    assert enc == {("fp32", "i32"): "exponent", ("i32", "fp32"): "pow2"}, sites
    assert [s.detail.get("rounding") for s in sites if s.detail.get("encoding") == "exponent"] == ["floor"]
    # the mantissa test that adds one unless amax is a power of two makes it ceil
    ceil = _sites(rule="ceil")
    assert [s.detail.get("rounding") for s in ceil if s.detail.get("encoding") == "exponent"] == ["ceil"]


def test_comparisons_with_e2m1s_midpoints_are_a_rounding_to_e2m1_and_their_predicates_its_ties():
    by_hand = [s for s in _sites() if s.op == "compare-round"]
    assert [(s.kind, s.fmt, s.rounding) for s in by_hand] == [("cast", "e2m1", "rtne")]
    assert [s.rounding for s in _sites(ties="away") if s.op == "compare-round"] == ["rna"]
    # 0.3 is no midpoint of e2m1's grid: comparisons, but no rounding to e2m1
    off = [s for s in _sites(low=0.3) if s.op == "compare-round"]
    assert [(s.kind, s.rounds) for s in off] == [("bits", False)]


def test_the_hand_made_quantizer_agrees_with_quantize_mx_and_each_change_is_flagged():
    assert check_plan(mxfp4_unpacked, PK.block_e2m1, X).ok
    kinds = lambda **kw: {d.kind for d in check_plan(mxfp4_unpacked, functools.partial(PK.block_e2m1, **kw),  # noqa
                                                     X).disagreements}
    # not the exponent field: arithmetic on the encoding, and no floor(log2 amax) to be seen
    assert kinds(shift=22) == {"bits", "function", "integer-rounding"}
    assert kinds(rule="ceil") == {"integer-rounding"}          # ceil where the OCP rule floors
    assert kinds(ties="away") == {"rounding-mode"}
    assert kinds(low=0.3) == {"rounding"}                      # e2m1 0 times in the kernel, 1 in the reference
