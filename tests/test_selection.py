"""Index outputs (no.argmax, no.argmin, no.topk; docs/design.md §4.7): the admissibility of a
choice decided exactly from the boxes, soundness against emulated correct kernels in near
ties, planted faults, values judged at the kernel's own choice, and the messages."""

from __future__ import annotations

import itertools

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import numoracle as no
from numoracle import formats as F
from numoracle.calculus import select as S
from numoracle.errors import InvalidArgument
from numoracle.selftest.emulator import Plan, emulate

# ---------------------------------------------------------------- exactness on small boxes

boxes = st.integers(1, 5).flatmap(lambda n: st.lists(
    st.tuples(st.integers(0, 3), st.integers(0, 2)), min_size=n, max_size=n))


def _tensors(bx):
    lo = torch.tensor([[float(a) for a, _ in bx]], dtype=torch.float64)
    hi = torch.tensor([[float(a + w) for a, w in bx]], dtype=torch.float64)
    return lo, hi


def _assignments(bx):
    """Every assignment of integer values inside the boxes: the boxes' ends are integers, so
    every order a real assignment can make is made by one of these."""
    return itertools.product(*[range(a, a + w + 1) for a, w in bx])


def _realisable(bx, k, ordered, ties):
    """The choices some values inside the boxes make correct."""
    n = len(bx)
    out = set()
    for v in _assignments(bx):
        if k is None:
            top = max(v)
            winners = [i for i in range(n) if v[i] == top]
            out.update(winners[:1] if ties == "first" else winners)
            continue
        for seq in itertools.permutations(range(n), k):
            rest = [v[j] for j in range(n) if j not in seq]
            chain = [v[i] for i in seq]
            if rest and min(chain) < max(rest):
                continue
            if ordered and any(a < b for a, b in zip(chain, chain[1:])):
                continue
            out.add(seq if ordered else tuple(sorted(seq)))
    return out


def _candidates(n, k, ordered):
    if k is None:
        return [(i,) for i in range(n)]
    return list(itertools.permutations(range(n), k)) if ordered else list(itertools.combinations(range(n), k))


@settings(max_examples=300, deadline=None)
@given(bx=boxes, ties=st.sampled_from(S.TIES))
def test_argmax_admissible_exactly_when_some_values_make_it_win(bx, ties):
    lo, hi = _tensors(bx)
    real = _realisable(bx, None, True, ties)
    for (i,) in _candidates(len(bx), None, True):
        rejected, _ = S.judge_choice(lo, hi, torch.tensor([[i]]), None, True, ties)
        assert bool(rejected[0, 0]) == (i not in real), (bx, ties, i, real)
    assert S.admissible_one(lo, hi, ties)[0].nonzero().reshape(-1).tolist() == sorted(real)


@settings(max_examples=200, deadline=None)
@given(bx=boxes, k=st.integers(1, 3), ordered=st.booleans())
def test_topk_admissible_exactly_when_some_values_make_it_the_top(bx, k, ordered):
    n = len(bx)
    k = min(k, n)
    lo, hi = _tensors(bx)
    real = _realisable(bx, k, ordered, "any")
    for cand in _candidates(n, k, ordered):
        rejected, rival = S.judge_choice(lo, hi, torch.tensor([list(cand)]), k, ordered, "any")
        assert bool(rejected.any()) == (cand not in real), (bx, k, ordered, cand, real)
        # a rejected place names an index that beats it
        assert bool(((rival >= 0) | ~rejected).all())


@settings(max_examples=200, deadline=None)
@given(bx=boxes, k=st.one_of(st.none(), st.integers(1, 3)), ordered=st.booleans(), ties=st.sampled_from(S.TIES))
def test_alternatives_flag_every_row_with_another_admissible_choice(bx, k, ordered, ties):
    n = len(bx)
    if k is not None:
        k, ties = min(k, n), "any"
    lo, hi = _tensors(bx)
    c = (lo + hi) / 2
    own = S.own_choice(c, F.fp32, True, k)
    real = _realisable(bx, k, ordered, ties)
    own_key = (int(own[0, 0]),) if k is None else tuple(own[0].tolist()) if ordered else tuple(sorted(own[0].tolist()))
    assert (own_key[0] if k is None else own_key) in real
    more = bool(S.alternatives(lo, hi, own, k, ordered, ties)[0, 0])
    if k is None or not ordered or k == 1:
        assert more == (len(real) > 1), (bx, k, ordered, real)
    else:
        assert more or len(real) == 1, (bx, k, real)


def test_out_of_range_and_repeated_indices_are_rejected():
    lo = torch.tensor([[0.0, 1.0, 2.0, 3.0]], dtype=torch.float64)
    hi = lo + 10
    rejected, rival = S.judge_choice(lo, hi, torch.tensor([[4]]), None, True, "any")
    assert rejected.tolist() == [[True]] and rival.tolist() == [[-1]]
    rejected, rival = S.judge_choice(lo, hi, torch.tensor([[-1]]), None, True, "any")
    assert rejected.tolist() == [[True]]
    rejected, rival = S.judge_choice(lo, hi, torch.tensor([[2, 2]]), 2, True, "any")
    assert rejected.tolist() == [[False, True]] and rival.tolist()[0][1] == -1


# ---------------------------------------------------------------- programs

@no.reference
def pick(x, w):
    """The index of the largest row-scaled score, as a greedy sampler computes it."""
    s = no.sum(x.to(F.fp32) * w.to(F.fp32), axis=-1)
    return no.argmax(s, axis=-1)


@no.reference
def route(logits, *, k=2):
    """MoE routing: softmax over experts in fp32, the top k, their weights renormalised."""
    lg = logits.to(F.fp32)
    e = no.exp(lg - no.max(lg, axis=-1, keepdims=True))
    p = e / no.sum(e, axis=-1, keepdims=True)
    w, ids = no.topk(p, k)
    return (w / no.sum(w, axis=-1, keepdims=True)), ids


@no.reference
def greedy_logit(x):
    """The largest value's exp in fp32 (a library call: inexact), the choice not stored."""
    s = no.exp(x.to(F.fp32))
    i = no.argmax(s, axis=-1)
    return no.gather(s, i, axis=-1)


def _tied(seed, shape, levels=4, dtype=torch.bfloat16):
    """Values from a few levels, so that rows hold exact and near ties."""
    g = torch.Generator().manual_seed(seed)
    base = torch.randint(0, levels, shape, generator=g).double() / levels
    jitter = torch.randint(-1, 2, shape, generator=g).double() * 2.0 ** -9
    return (base + jitter).to(dtype)


def _cancelling(seed, rows, n, d):
    """Every candidate of a row a permutation of one set of terms of many magnitudes and both
    signs: the exact sums tie, the fp32 sums differ with the order, so that a correct kernel's
    choice depends on its summation order."""
    g = torch.Generator().manual_seed(seed)
    base = torch.tensor([2.0 ** (k % 24) for k in range(d)])
    base = base * torch.where(torch.rand(d, generator=g) < 0.5, -1.0, 1.0) * (1 + torch.randint(0, 4, (d,), generator=g) / 8)
    rows_ = [torch.stack([base[torch.randperm(d, generator=g)] for _ in range(n)]) for _ in range(rows)]
    return torch.stack(rows_).to(torch.bfloat16)


ORDERS = ["random", "sequential", "tree", "worst"]


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 10**6), rows=st.integers(1, 6), n=st.integers(1, 40), d=st.integers(1, 24),
       family=st.sampled_from(["tied", "cancelling"]), order=st.sampled_from(ORDERS))
def test_emulated_correct_argmax_is_accepted_in_near_ties(seed, rows, n, d, family, order):
    x = _tied(seed, (rows, n, d)) if family == "tied" else _cancelling(seed, rows, n, d)
    w = _tied(seed + 1, (d,)) if family == "tied" else torch.ones(d, dtype=torch.bfloat16)
    idx = emulate(pick, (x, w), plan=Plan(seed=seed, order=order))
    for mode in ("fixed", "statistical"):
        v = no.check(pick, idx, (x, w), mode=mode)
        assert v.status == "accept", v.explain()


def test_the_near_ties_make_correct_kernels_choose_otherwise_than_the_reference():
    """What makes the soundness test above bite: correct kernels' choices that differ from
    the reference's own (each of them accepted there)."""
    differ = total = 0
    for seed in range(12):
        x, w = _cancelling(seed, 4, 6, 30), torch.ones(30, dtype=torch.bfloat16)
        for order in ORDERS:
            idx = emulate(pick, (x, w), plan=Plan(seed=seed, order=order))
            v = no.check(pick, idx, (x, w), mode="fixed")
            assert v.status == "accept", v.explain()
            differ += int((v.outputs[0].kernel != v.outputs[0].centre).sum())
            total += v.outputs[0].numel
    assert differ >= total // 5, (differ, total)


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10**6), rows=st.integers(1, 6), n=st.integers(2, 16), k=st.integers(1, 4),
       order=st.sampled_from(ORDERS), math=st.sampled_from(["random", "extreme"]))
def test_emulated_correct_routing_is_accepted(seed, rows, n, k, order, math):
    k = min(k, n)
    lg = _tied(seed, (rows, n), levels=3) * 4
    out = emulate(route, (lg,), {"k": k}, plan=Plan(seed=seed, order=order, math=math))
    v = no.check(route, out, (lg,), {"k": k}, mode="fixed")
    assert v.status == "accept", v.explain()


def test_a_kernel_that_takes_another_admissible_index_is_judged_at_its_own_choice():
    # two experts with equal logits: either may be first; the weights follow the kernel's order
    lg = torch.tensor([[1.0, 3.0, 3.0, 0.0]], dtype=torch.bfloat16)
    p = torch.softmax(lg.double(), -1)
    for ids in ([1, 2], [2, 1]):
        ids_t = torch.tensor([ids])
        w = torch.gather(p, -1, ids_t)
        w = (w / w.sum(-1, keepdim=True)).float()
        v = no.check(route, (w, ids_t), (lg,), mode="fixed")
        assert v.status == "accept", v.explain()
    # the right indices, but the weights of other experts: the weights are rejected
    w = torch.gather(p, -1, torch.tensor([[1, 0]]))
    w = (w / w.sum(-1, keepdim=True)).float()
    v = no.check(route, (w, torch.tensor([[1, 2]])), (lg,), mode="fixed")
    assert v.status == "reject" and int(v.outputs[0].rejected.sum()) == 2 and not bool(v.outputs[1].rejected.any())


@no.reference
def scaled_pick(x, w):
    """The index of the largest product, exact in fp32 (bf16 products): ties stay ties."""
    return no.argmax(x.to(F.fp32) * w.to(F.fp32), axis=-1)


def _faults(x, w):
    s = x.double() * w.double()
    right = s.argmax(-1)
    n = s.shape[-1]
    return {
        "argmin": s.argmin(-1),
        "off by one": (right + 1) % n,
        "last of a tie": n - 1 - s.flip(-1).argmax(-1),
        "out of range": torch.full_like(right, n),
    }


@pytest.mark.parametrize("fault", ["argmin", "off by one", "last of a tie", "out of range"])
def test_planted_faults_in_a_choice_are_rejected(fault):
    x = torch.tensor([[1.0, 3.0, 3.0, -1.0], [0.5, 0.25, 2.0, 2.0]], dtype=torch.bfloat16)
    w = torch.tensor([1.0, 1.0, 1.0, 2.0], dtype=torch.bfloat16)
    bad = _faults(x, w)[fault]
    assert no.check(scaled_pick, _faults(x, w)["argmin"] * 0 + (x.double() * w.double()).argmax(-1),
                    (x, w), mode="fixed").status == "accept"
    v = no.check(scaled_pick, bad, (x, w), mode="fixed")
    assert v.status == "reject", (fault, v.explain())


def test_ties_first_against_any():
    x = torch.tensor([[[1.0], [2.0], [2.0]]], dtype=torch.bfloat16)
    w = torch.tensor([1.0], dtype=torch.bfloat16)

    @no.reference
    def pick_any(x, w):
        return no.argmax(no.sum(x.to(F.fp32) * w.to(F.fp32), axis=-1), axis=-1, ties="any")
    assert no.check(pick, torch.tensor([1]), (x, w)).status == "accept"
    assert no.check(pick, torch.tensor([2]), (x, w)).status == "reject"
    assert no.check(pick_any, torch.tensor([2]), (x, w)).status == "accept"
    assert no.check(pick_any, torch.tensor([0]), (x, w)).status == "reject"


def test_argmin_and_smallest_topk():
    @no.reference
    def low(x):
        s = x.to(F.fp32)
        _, ids = no.topk(s, 2, largest=False)
        return no.argmin(s, axis=-1), ids

    x = torch.tensor([[3.0, -1.0, 2.0, -4.0]], dtype=torch.bfloat16)
    assert no.check(low, (torch.tensor([3]), torch.tensor([[3, 1]])), (x,)).status == "accept"
    v = no.check(low, (torch.tensor([1]), torch.tensor([[1, 3]])), (x,), mode="fixed")
    assert v.status == "reject" and bool(v.outputs[0].rejected.all()) and bool(v.outputs[1].rejected.any())


def test_an_unstored_choice_makes_values_read_at_it_uncertified_only_where_another_may_win():
    x = torch.tensor([[1.0, 2.0, 0.5], [2.0, 2.0, 1.0]], dtype=torch.bfloat16)
    y = x.float().exp().max(-1).values
    v = no.check(greedy_logit, y, (x,), mode="fixed")
    assert v.status == "uncertified"
    assert v.outputs[0].uncertified.tolist() == [False, True]
    assert "another index may win" in v.explain()
    # the decided row is still judged
    y_bad = y.clone()
    y_bad[0] = 5.0
    assert no.check(greedy_logit, y_bad, (x,), mode="fixed").status == "reject"


def test_index_outputs_given_wrong_are_refused_with_what_was_expected():
    x = torch.ones(2, 3, 2, dtype=torch.bfloat16)
    w = torch.ones(2, dtype=torch.bfloat16)
    with pytest.raises(InvalidArgument, match="expected an integer tensor"):
        no.check(pick, torch.zeros(2), (x, w))
    with pytest.raises(InvalidArgument, match=r"produces \(2,\) indices"):
        no.check(pick, torch.zeros(2, 1, dtype=torch.long), (x, w))

    @no.reference
    def too_many(x):
        return no.topk(x.to(F.fp32), 5)[1]
    with pytest.raises(InvalidArgument, match="from 1 to the axis' size 2"):
        no.check(too_many, torch.zeros(2, 3, 5, dtype=torch.long), (x,))

    @no.reference
    def bad_ties(x):
        return no.argmax(x.to(F.fp32), ties="last")
    with pytest.raises(InvalidArgument, match="ties='last'"):
        no.check(bad_ties, torch.zeros(2, 3, dtype=torch.long), (x,))


def test_explanation_of_a_rejected_choice():
    x = torch.tensor([[[1.0, 2.0], [3.0, 0.5], [-1.0, 0.0]]], dtype=torch.bfloat16)
    w = torch.tensor([1.0, 2.0], dtype=torch.bfloat16)
    text = no.check(pick, torch.tensor([2]), (x, w), mode="fixed").explain()
    lines = text.split("\n")
    assert lines[2:8] == [
        "Worst element y[0] (an index output)",
        f"  chosen    = argmax of 3 fp32 values [pick:{pick.fn.__code__.co_firstlineno + 4}]",
        "  kernel    = index 2, value in [-1.00000012, -0.99999994]",
        "  reference = index 0, value in [4.99999952, 5.00000048]",
        "  why       = index 0's value is at least 4.99999952, above index 2's at most -0.99999994: index 2 "
        "cannot be the largest",
        "  admissible = 1 of 3 indices: 0"]
    assert "Indices other than the reference's own choice: 1 / 1" in text
    d = no.check(pick, torch.tensor([2]), (x, w), mode="fixed").to_dict()
    assert d["outputs"][0]["format"] == "index" and d["worst"]["kernel"] == 2.0


# ---------------------------------------------------------------- a user's Triton router

ROOT = __import__("pathlib").Path(__file__).resolve().parents[1]
ROUTER = "tests.fixtures.user_router_op:op"


def test_a_user_router_kernel_is_accepted_and_its_reversed_top_k_found_shrunk_and_replayed(tmp_path, monkeypatch,
                                                                                          capsys):
    import json

    from numoracle.cli import main
    monkeypatch.chdir(ROOT)
    rc = main(["check", ROUTER, "--backend", "interpreter", "--json", "--quiet", "--corpus", str(tmp_path)])
    res = json.loads(capsys.readouterr().out)
    assert rc == 0 and res["totals"]["cases"] >= 20, res["totals"]
    assert res["totals"]["accept"] == res["totals"]["cases"], res["totals"]

    rc = main(["check", ROUTER, "--backend", "interpreter", "--kernel", "faulty:reversed", "--json", "--quiet",
               "--corpus", str(tmp_path), "--shrink-seconds", "20"])
    res = json.loads(capsys.readouterr().out)
    ce = res["counterexample"]
    assert rc == 1 and ce["status"] == "reject" and ce["failure_class"][:2] == ["ids", "outside"]
    assert ce["shape"][0][0] == 1, ce["shape"]                    # one row tells it
    worst = ce["verdict"]["worst"]
    assert worst["output"] == "ids" and ce["verdict"]["outputs"][1]["format"] == "index"
    rc = main(["replay", res["saved"], "--brief"])
    assert rc == 1                                               # the reject reproduces
    capsys.readouterr()


def test_the_plan_reader_takes_a_choice_as_reached_by_its_row_s_sites(monkeypatch):
    # before, the indices had no sites: the kernel's exp and sum were "where the reference has none"
    import torch

    from numoracle import backends
    from numoracle.plan import check_plan
    backends.select("interpreter")
    monkeypatch.chdir(ROOT)
    from tests.fixtures import user_router_op as U
    inputs, _ = U.example(0, torch.bfloat16, "normal", 4, 64)
    report = check_plan(U.op, "correct", inputs, {"k": 2})
    assert report.ok, report.summary() + "".join(f"\n{d.message}" for d in report.disagreements)


def test_torch_spellings_of_a_choice_point_to_the_language():
    from numoracle.errors import LanguageMisuse

    @no.reference
    def method(x):
        return x.to(F.fp32).argmax(-1)

    @no.reference
    def function(x):
        return torch.topk(x.to(F.fp32), 2)

    x = torch.ones(2, 4, dtype=torch.bfloat16)
    with pytest.raises(LanguageMisuse, match=r"no\.argmax\(x, axis=-1\)"):
        no.check(method, torch.zeros(2, dtype=torch.long), (x,))
    with pytest.raises(LanguageMisuse, match=r"no\.topk\(x, k, axis=-1\)"):
        no.check(function, torch.zeros(2, 2, dtype=torch.long), (x,))


def test_a_kernel_asking_for_the_fast_tie_break_meets_a_reference_that_promises_the_first():
    from numoracle import backends
    backends.select("interpreter")
    from tests.fixtures import user_router as U

    @no.reference
    def greedy_first(logits):
        return no.argmax(logits.to(F.fp32), axis=-1)

    @no.reference
    def greedy_any(logits):
        return no.argmax(logits.to(F.fp32), axis=-1, ties="any")

    logits = torch.tensor([[1.0, 3.0, 3.0, 0.0], [2.0, -1.0, 0.5, 2.0], [0.0, 1.0, 2.0, 0.5]], dtype=torch.bfloat16)
    left, fast = U.greedy(logits), U.greedy(logits, left=False)
    assert no.check(greedy_first, left, (logits,)).status == "accept"
    v = no.check(greedy_first, fast, (logits,), mode="fixed")
    # the two tied rows are rejected, the row without a tie is not
    assert v.status == "reject" and v.outputs[0].rejected.tolist() == [True, True, False], v.explain()
    assert no.check(greedy_any, fast, (logits,)).status == "accept"


def test_an_accepted_verdict_shows_its_most_contested_choice_and_the_runner_up():
    @no.reference
    def am(x):
        return no.argmax(no.exp(x.to(F.fp32)), axis=-1)

    # row 1's two largest values are one bf16 ulp apart; the other rows are far from a tie
    x = torch.tensor([[0.0, 1.0, 2.0], [1.0, 1.0078125, 0.0], [5.0, 0.0, 1.0]], dtype=torch.bfloat16)
    v = no.check(am, x.float().exp().argmax(-1), (x,))
    lines = v.explain().split("\n")
    assert lines[2] == "Closest to its bounds: element y[1] (an index output)"
    # the margin to the runner-up, negative, in fp32 ulps: what a search's target() climbs toward a tie
    from numoracle.runner.outcomes import excess_ulps
    assert -1e6 < excess_ulps(v) < 0 and v.to_dict()["worst"]["excess_ulp"] == excess_ulps(v)
    assert lines[4].startswith("  kernel    = index 1, value in [2.7396")    # exp(1.0078125) = 2.73960...
    assert lines[6].startswith("  runner-up = index 0, value in [2.7182")
    assert lines[7] == "  admissible = 1 of 3 indices: 1"


@pytest.mark.parametrize("left", [True, False])
def test_the_skeleton_reads_a_kernel_s_argmax_and_its_tie_rule(left):
    from numoracle import backends
    from numoracle.plan import skeleton
    backends.select("interpreter")
    from tests.fixtures import user_router as U

    @no.reference
    def greedy(logits):
        return no.argmax(logits.to(F.fp32), axis=-1)

    def kernel(logits):
        return U.greedy(logits, left=left)

    logits = torch.randn(5, 100, generator=torch.Generator().manual_seed(0)).to(torch.bfloat16)
    text = skeleton(greedy, kernel, (logits,))
    want = 'no.argmax(logits.to(fp32), axis=-1, keepdims=True' + ("" if left else ', ties="any"') + ")"
    assert want in text and "TODO" not in text.split('"""')[-1], text
    ns = {}
    exec(compile(text, "<skeleton>", "exec"), ns)
    tied = logits.clone()
    tied[:, 7] = tied[:, 3] = 10.0                      # every row ties at its largest value
    for x in (logits, tied):
        assert no.check(ns["greedy_plan"], kernel(x), (x,), mode="fixed").status == "accept"


def test_a_kept_axis_is_squeezed_and_the_choice_still_judged_and_read_at_the_kernel_s_index():
    @no.reference
    def g(x):
        s = no.exp(x.to(F.fp32))
        i = no.argmax(s, axis=-1, keepdims=True)
        return no.gather(s, i.squeeze(-1), axis=-1), i.squeeze(-1)

    x = torch.tensor([[0.0, 2.0, 2.0], [1.0, 0.5, 0.0]], dtype=torch.bfloat16)
    s = x.float().exp()
    for ids, status in (([1, 0], "accept"), ([2, 0], "accept"), ([0, 0], "reject")):
        ids = torch.tensor(ids)
        v = no.check(g, (s.gather(-1, ids[:, None]).squeeze(-1), ids), (x,), mode="fixed")
        assert v.status == status, v.explain()
    with pytest.raises(InvalidArgument, match="only an argmax or argmin kept with keepdims=True"):
        @no.reference
        def bad(x):
            return no.topk(x.to(F.fp32), 2)[1].squeeze(-1)
        no.check(bad, torch.zeros(2, dtype=torch.long), (x,))
