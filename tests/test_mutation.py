"""Mutation engine: sites, mutated sources that compile and run, equivalence by
evidence, and a CI-sized campaign on softmax (interpreter backend)."""

import ast

import pytest

from numoracle.studies.mutation import MUTATORS, apply_site, enumerate_sites, kill_table, run_campaign

SRC = '''
import triton
import triton.language as tl
LOG2E = tl.constexpr(1.4426950408889634)


@triton.jit
def k(x_ptr, y_ptr, n_cols, EPS: tl.constexpr, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=0.0).to(tl.float32)
    m = tl.max(x, axis=0)
    e = tl.exp(x - m)
    s = tl.sum(tl.where(mask, e, 0.0), axis=0) / n_cols
    tl.store(y_ptr + row * n_cols + cols, e / (s + EPS), mask=mask)


def wrapper(x):
    return x
'''


def test_sites_cover_the_operators_and_each_mutant_changes_one_site():
    sites = enumerate_sites(SRC)
    kinds = {s.kind for s in sites}
    for k in ("widening_dropped", "reduction_in_storage", "truncating_store", "double_rounding",
              "addend_dropped", "eps_changed", "divisor_changed", "mask_off_by_one", "mask_removed",
              "exp_to_exp2", "max_subtraction_dropped", "load_padding_changed", "constant_changed"):
        assert k in kinds, k
    assert kinds <= set(MUTATORS)
    assert all(s.func in ("k", "<module>") for s in sites)          # never the plain-Python wrapper
    # no rounding mutant inside address arithmetic
    assert not any(s.kind == "earlier_downcast" and "row * n_cols" in s.detail for s in sites)
    base = ast.dump(ast.parse(SRC))
    seen = set()
    for s in sites:
        new = apply_site(SRC, s)
        compile(new, "<m>", "exec")
        assert ast.dump(ast.parse(new)) != base, s
        seen.add(new)
    assert len(seen) >= len(sites) - 3          # a few sites may coincide (same text twice)


def test_specific_rewrites():
    sites = {(s.kind, s.detail): s for s in enumerate_sites(SRC)}
    s = next(v for (k, d), v in sites.items() if k == "widening_dropped")
    assert ".to(tl.float32)" not in apply_site(SRC, s).split("def k")[1]
    s = next(v for (k, d), v in sites.items() if k == "truncating_store")
    assert "fp_downcast_rounding='rtz'" in apply_site(SRC, s)
    s = next(v for (k, d), v in sites.items() if k == "max_subtraction_dropped")
    assert "tl.exp(x)" in apply_site(SRC, s)
    s = next(v for (k, d), v in sites.items() if k == "constant_changed" and "too few" in d)
    assert "tl.constexpr(1.44)" in apply_site(SRC, s)


CAST_STORE = '''
import triton
import triton.language as tl


@triton.jit
def k(x_ptr, y_ptr, n):
    offs = tl.arange(0, 16)
    acc = tl.load(x_ptr + offs, mask=offs < n, other=0.0).to(tl.float32) * 3.0
    tl.store(y_ptr + offs, acc.to(y_ptr.dtype.element_ty), mask=offs < n)
'''


def test_store_mutants_change_the_cast_the_stored_value_already_has():
    """``tl.store(p, acc.to(T))``: a rounding mode on a second cast of the rounded value would
    convert T to T (an equivalent mutant, found on a user's matmul kernel), so the store
    mutants rewrite that cast: it truncates, or it is reached through fp16."""
    sites = {s.kind: s for s in enumerate_sites(CAST_STORE)}
    trunc = apply_site(CAST_STORE, sites["truncating_store"])
    assert "acc.to(y_ptr.dtype.element_ty, fp_downcast_rounding='rtz')" in trunc, trunc
    dbl = apply_site(CAST_STORE, sites["double_rounding"])
    assert "acc.to(tl.float16).to(y_ptr.dtype.element_ty)" in dbl, dbl
    # an integer cast stays as it was and is wrapped
    src = CAST_STORE.replace("acc.to(y_ptr.dtype.element_ty)", "acc.to(tl.int32)")
    trunc = apply_site(src, {s.kind: s for s in enumerate_sites(src)}["truncating_store"])
    assert "acc.to(tl.int32).to((y_ptr + offs).dtype.element_ty, fp_downcast_rounding='rtz')" in trunc, trunc


def test_no_rounding_mutant_of_a_loop_counter_plus_arange():
    """``rk = k0 + tl.arange(0, BK)`` is an index (k0 counts a range loop): rounding k0 to the
    storage format first only crashes the kernel.  A float product still gets its mutant."""
    src = CAST_STORE.replace(
        "    offs = tl.arange(0, 16)\n    acc = tl.load(x_ptr + offs, mask=offs < n, other=0.0).to(tl.float32) * 3.0\n",
        "    acc = tl.zeros((16,), dtype=tl.float32)\n"
        "    for k0 in range(0, n, 16):\n"
        "        rk = k0 + tl.arange(0, 16)\n"
        "        a = tl.load(x_ptr + rk).to(tl.float32)\n"
        "        b = tl.load(x_ptr + rk + n).to(tl.float32)\n"
        "        acc += a * b\n"
        "    offs = tl.arange(0, 16)\n")
    assert "for k0" in src
    details = [s.detail for s in enumerate_sites(src) if s.kind == "earlier_downcast"]
    assert not any("k0" in d for d in details), details
    assert any(d.startswith("a * b") for d in details), details


@pytest.fixture(scope="module")
def softmax_campaign():
    # CI-sized: three groups, one case each, one mutant per mutation operator that applies
    return run_campaign("softmax", groups=["calibration", "shifted_mean", "scaled_up"], per_group=1,
                        rows=3, cols=40, max_mutants=12, n_cal=3)


def test_campaign_on_softmax(softmax_campaign):
    c = softmax_campaign
    st = c.counts()
    assert st["total"] == 12 and st["load_error"] == 0
    assert st["effective"] >= 4
    # numoracle: no false alarm on the correct kernel or its variant, on any run
    fa = c.false_alarms()["numoracle"]
    n_kernels = len(c.kernel_runs)
    assert n_kernels >= 2 and sum(v[1] for v in fa.values()) == n_kernels * 3
    assert sum(v[0] for v in fa.values()) == 0, c.numoracle_false_alarm_runs()
    eff = [m for m in c.mutants if m.status == "effective"]
    assert sum(m.killed["numoracle"] for m in eff) >= len(eff) - 1
    # the truncating store is an effective mutant that assert_close's bf16 defaults miss
    trunc = [m for m in c.mutants if m.site.kind == "truncating_store"]
    assert trunc and trunc[0].status == "effective" and trunc[0].killed["numoracle"]
    assert not trunc[0].killed["assert_close"]
    for m in c.mutants:
        if m.status == "equivalent":
            assert not any(m.killed.values())
    table = kill_table(c)
    assert "truncating_store" in table and "frontier" in table
    d = c.to_dict()
    assert d["frontier"]["configurations"] == 400 and len(d["mutants"]) == 12


def test_cli_json(softmax_campaign, capsys):
    import json

    from numoracle.cli import main
    rc = main(["mutate", "softmax", "--groups", "calibration", "--cases-per-group", "1", "--rows", "2",
               "--cols", "24", "--max-mutants", "3", "--calibration-runs", "2", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert rc == 0 and out["op"] == "softmax" and len(out["mutants"]) == 3
    assert main(["mutate", "softmax", "--operators", "no_such_operator"]) == 2


def test_a_choice_is_flipped_to_its_opposite_and_to_the_fast_tie_break():
    src = '''
import triton
import triton.language as tl


@triton.jit
def pick(x_ptr, i_ptr, BLOCK: tl.constexpr):
    x = tl.load(x_ptr + tl.arange(0, BLOCK))
    tl.store(i_ptr, tl.argmax(x, 0))
    tl.store(i_ptr + 1, tl.argmin(x, 0, tie_break_left=False))
'''
    sites = [s for s in enumerate_sites(src) if s.kind == "choice_flipped"]
    stores = sorted(tuple(line.strip() for line in apply_site(src, s).splitlines() if "tl.store" in line)
                    for s in sites)
    assert stores == sorted([
        ("tl.store(i_ptr, tl.argmin(x, 0))", "tl.store(i_ptr + 1, tl.argmin(x, 0, tie_break_left=False))"),
        ("tl.store(i_ptr, tl.argmax(x, 0, tie_break_left=False))",
         "tl.store(i_ptr + 1, tl.argmin(x, 0, tie_break_left=False))"),
        ("tl.store(i_ptr, tl.argmax(x, 0))", "tl.store(i_ptr + 1, tl.argmax(x, 0, tie_break_left=False))"),
        ("tl.store(i_ptr, tl.argmax(x, 0))", "tl.store(i_ptr + 1, tl.argmin(x, 0, tie_break_left=True))")])
