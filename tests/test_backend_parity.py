"""The evidence kernel (scripts/parity_kernel.py) on the repaired interpreter,
and multiply-add contraction: a fused and an unfused chain are both accepted
against a reference whose assumption profile admits FMA contraction, while a
chain off by more is rejected (docs/design.md §6, docs/facts.md)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest
import torch

import numoracle as no
from numoracle.assumptions import for_backend

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "parity_kernel.py"


@pytest.fixture(scope="module")
def P():
    spec = importlib.util.spec_from_file_location("parity_kernel", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def interp_run(P):
    inputs = P.make_inputs(4096, seed=1)
    bits, meta = P.run(inputs, "interpreter")
    return inputs, bits, meta


def test_evidence_kernel_exact_outputs_match_gpu_semantics(P, interp_run):
    inputs, bits, meta = interp_run
    assert meta["backend"] == "interpreter"
    want = P.expected_exact(inputs)
    for name, (_, kind, _) in P.OUTPUTS.items():
        if kind != "exact":
            continue
        same = (bits[name] == want[name]) | (P._nan(name, bits[name]) & P._nan(name, want[name]))
        assert same.all(), f"{name}: {int((~same).sum())} elements differ from the exactly rounded result"
    # the inputs really contain exact ties of each store format (the hard cases)
    x = inputs["x"]
    assert np.any(P.bf16_to_f32(P.f32_to_bf16_rne(x)) != x)


def test_evidence_kernel_math_within_profile_and_mad_unfused(P, interp_run):
    from numoracle import mathlib

    inputs, bits, _ = interp_run
    prof = mathlib.load("interpreter")
    for name in ("tanh", "rsqrt_ld", "rsqrt_tl"):
        s = P.math_summary(name, inputs, bits[name], prof)
        assert s["within_profile"], (name, s)
    for name in ("bf_mad", "mad1", "mad2"):
        s = P.mad_summary(name, inputs, bits[name], bits["mad1"])
        # the interpreter never contracts: every element is the unfused value; the inputs make
        # fusing visible (many elements where the fused value differs)
        assert s["neither"] == 0 and s["only_fused"] == 0 and s["only_unfused"] > 0, (name, s)


def test_compare_reports_a_planted_difference(P, interp_run, tmp_path, capsys):
    inputs, bits, meta = interp_run
    a = tmp_path / "a.npz"
    b = tmp_path / "b.npz"
    for path, outs in ((a, bits), (b, {**bits, "st_bf16": bits["st_bf16"] ^ np.uint16(1)})):
        arrays = {f"in_{k}": (v.view(np.uint32) if v.dtype == np.float32 else v) for k, v in inputs.items()}
        arrays.update({f"out_{k}": v for k, v in outs.items()})
        arrays["meta"] = np.array(P.json.dumps(meta))
        np.savez_compressed(path, **arrays)
    assert P.compare(str(a), str(a)) == 0
    assert P.compare(str(a), str(b)) == 1
    assert "st_bf16" in capsys.readouterr().out


# --------------------------------------------------------------------------- FMA contraction

@no.reference
def mad_chain(u, v, w):
    y1 = u * v + w
    return y1 * v + u


def _chain_inputs(n=256, seed=5):
    rng = np.random.default_rng(seed)
    u = rng.standard_normal(n).astype(np.float32)
    v = rng.standard_normal(n).astype(np.float32)
    w = (-u * v * rng.uniform(0.5, 1.5, n)).astype(np.float32)    # cancellation: fused differs visibly
    return u, v, w


def test_fused_and_unfused_chains_both_accepted(P):
    assert "contract" in for_backend("interpreter").fma and "contract" in for_backend("gpu").fma
    u, v, w = _chain_inputs()
    fused = P.fma_f32(P.fma_f32(u, v, w), v, u)
    unfused = P.mad_f32_unfused(P.mad_f32_unfused(u, v, w), v, u)
    assert np.mean(fused != unfused) > 0.2      # the two evaluations really differ
    ins = tuple(torch.from_numpy(a) for a in (u, v, w))
    for backend in ("interpreter", "gpu"):
        for label, y in (("fused", fused), ("unfused", unfused)):
            verdict = no.check(mad_chain, torch.from_numpy(y.copy()), ins, backend=backend, mode="fixed")
            assert verdict.status == "accept", f"{label} on {backend}: {verdict.explain()}"


def test_chain_off_by_more_is_rejected(P):
    u, v, w = _chain_inputs()
    ins = tuple(torch.from_numpy(a) for a in (u, v, w))
    # the first multiply-add kept in bf16: an evaluation neither fused nor unfused fp32 allows
    y1 = torch.from_numpy(P.mad_f32_unfused(u, v, w)).to(torch.bfloat16).float().numpy()
    bad = P.mad_f32_unfused(y1, v, u)
    verdict = no.check(mad_chain, torch.from_numpy(bad.copy()), ins, backend="interpreter", mode="fixed")
    assert verdict.status == "reject" and verdict.n_rejected > 0
    # and an output a few ulps beyond the unfused chain's rounding errors
    unfused = P.mad_f32_unfused(P.mad_f32_unfused(u, v, w), v, u).astype(np.float64)
    scale = np.abs(u * v).astype(np.float64) * np.abs(v) + np.abs(u) + np.abs(w * v)
    off = (unfused + 64 * scale * 2.0**-24).astype(np.float32)
    verdict = no.check(mad_chain, torch.from_numpy(off), ins, backend="interpreter", mode="fixed")
    assert verdict.status == "reject"
