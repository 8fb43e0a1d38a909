"""The adversarial soundness search: every registered operator (forward and backward), every
kernel and behaviour-preserving variant, run on the repaired Triton interpreter, on inputs
drawn where bounds and certificates are easiest to get wrong (``ADVERSARIAL_GROUPS``:
subnormals, format boundaries, cancellation, one huge value per row, all-equal, alternating
signs; scaled by 2^+-24 and with special values injected by ``strategies.cases``), with
``hypothesis.target`` pushing the kernel's value toward its region's edge.

A fixed-mode reject of a correct kernel (a reject the fixed-input mode confirms, or NaN/inf
where the reference is certainly finite) fails the test, with the case saved as a corpus case
(``--numoracle-corpus DIR``, else the repository's ``corpora/``) to replay.  Statistical-only
rejects are counted, never failures.  The default tier runs a CI-sized search; the ``slow``
tier a long one."""
from __future__ import annotations

import collections
from pathlib import Path

import pytest
from hypothesis import HealthCheck, Phase, given, settings, target
from hypothesis import strategies as st

from numoracle import backends, corpus, operators
from numoracle.runner.execute import judge
from numoracle.strategies import ADVERSARIAL_GROUPS, soundness_cases

# the CI tier's examples per operator and its shapes; the slow tier's
CI = {"examples": 12, "max_rows": 4, "max_cols": 48}
LONG = {"examples": 60, "max_rows": 16, "max_cols": 256}
FAILING = ("reject", "nan")


@pytest.fixture(scope="module", autouse=True)
def _interp():
    backends.select("interpreter")


def _corpus_root(config) -> Path:
    given_ = config.getoption("--numoracle-corpus", default=None)
    return Path(given_) if given_ else Path(__file__).resolve().parent.parent / "corpora"


def search(op_name: str, tier: dict, corpus_root: Path, derandomize: bool) -> collections.Counter:
    """Run the search for one operator: statuses per outcome, 'statistical_only' included."""
    op = operators.get(op_name)
    kernels = sorted(op.kernel_specs)
    strategy = soundness_cases(op_name, max_rows=tier["max_rows"], max_cols=tier["max_cols"])
    seen: collections.Counter = collections.Counter()

    # no shrinking: the first failing case is saved as it was found (each shrink step would
    # save another one); Hypothesis's database is off (corpora are the record)
    @settings(max_examples=tier["examples"], deadline=None, derandomize=derandomize, database=None,
              phases=(Phase.explicit, Phase.generate, Phase.target),
              suppress_health_check=list(HealthCheck))
    @given(case=strategy, kernel=st.sampled_from(kernels))
    def prop(case, kernel):
        inputs, params = case.materialize()
        out = judge(op, op.kernels[kernel], inputs, params, case.config, mode="statistical", case=case,
                    classify=False)
        seen[out.status] += 1
        if out.score is not None:
            target(min(out.score, 10.0), label="position toward the region's edge")
        if out.status in FAILING:
            path = corpus.save(corpus_root, op, op.kernel_specs[kernel], out, backend="interpreter",
                               mode="fixed", expect="accept", kernel_config=dict(case.config))
            raise AssertionError(f"{op_name} kernel {kernel!r}: a correct kernel rejected in fixed mode on {case!r}; "
                                 f"saved as {path}\n{out.verdict.explain()}")
    prop()
    return seen


@pytest.mark.parametrize("op_name", operators.names())
def test_no_correct_kernel_is_rejected_in_fixed_mode_ci(op_name, request):
    seen = search(op_name, CI, _corpus_root(request.config), derandomize=True)
    print(f"\n{op_name}: {dict(seen)}")
    assert sum(seen.values()) == CI["examples"]


@pytest.mark.slow
@pytest.mark.parametrize("op_name", operators.names())
def test_no_correct_kernel_is_rejected_in_fixed_mode_long(op_name, request):
    seen = search(op_name, LONG, _corpus_root(request.config), derandomize=False)
    print(f"\n{op_name}: {dict(seen)}")
    assert sum(seen.values()) == LONG["examples"]


@pytest.mark.parametrize("dtype", ["bfloat16", "float16", "float32"])
def test_the_adversarial_families_draw_what_they_say(dtype):
    import torch

    from numoracle import formats as F
    from numoracle.strategies import fill
    dt = getattr(torch, dtype)
    fmt = F.from_dtype(dt)
    x = {g: fill((8, 64), g, 1, dtype=dt).double() for g in ADVERSARIAL_GROUPS}
    assert all(bool(torch.isfinite(v).all()) for v in x.values())
    sub = x["subnormal"].abs()
    assert bool(((sub > 0) & (sub < fmt.min_normal)).any()) and bool((sub < 8 * fmt.min_normal).all())
    assert bool((x["format_boundary"].abs() == fmt.max_finite).any())
    c = x["cancellation"]
    assert bool((c.sum(-1).abs() < 1e-2 * c.abs().sum(-1)).all())
    h = x["one_huge"].abs()
    assert bool((h.amax(-1) > 2.0 ** 14 * h.median(-1).values).all())
    assert bool((x["all_equal"] == x["all_equal"].reshape(-1)[0]).all())
    a = x["alternating"]
    assert bool((a[:, 0::2] > 0).all()) and bool((a[:, 1::2] < 0).all())
