"""Fixed-tolerance baselines: what users compare kernels with today (docs/design.md §10,
docs/facts.md "What users compare with today").

Every baseline judges the *same* run numoracle judges: the kernel's stored
outputs, and the float64 reference value of each output element that
``numoracle.check`` computed for that run (the region's centre, the
exact-input value of the operator's math).  Where a rule compares with an
"expected" tensor of the output's dtype (``assert_close``, allclose-style
suites, k-ulp), expected = that reference rounded once to the output format,
as a user casting an fp64/fp32 reference to the kernel's dtype would get.

Each baseline returns a :class:`BaselineResult`: ``ok`` (the run passes) and
``ratio`` (the run's worst error divided by what the rule allows; ``ok`` iff
``ratio <= 1``, ``inf`` for a non-finite output where a finite one is expected).

The baselines:

* ``assert_close`` — ``torch.testing.assert_close`` defaults per output dtype:
  |y − e| ≤ atol + rtol·|e| with (rtol, atol) fp16 (1e-3, 1e-5), bf16 (1.6e-2,
  1e-5), fp32 (1.3e-6, 1e-5); fp8 compared bit for bit.
* ``upstream`` — the operator's own upstream test-suite rule (table
  :data:`UPSTREAM`, keyed by operator name); operators without an entry use
  KernelBench's allclose (atol = rtol = 1e-2 for 16-bit, 1e-4 for fp32), and
  the result says ``fallback``.
* ``tuned`` — a tolerance tuned on the calibration input group the way a careful
  maintainer would (rule in :meth:`TunedTolerance.fit`).
* ``ulp`` — |y − e| ≤ k ulps of the output format at e (k = 2 by default).
* ``flash2x`` — flash-attention's rule: max |y − ref64| ≤ 2 · max |lp − ref64|
  per output, where lp is the same operator computed in low precision (the
  storage dtype): a plain-PyTorch function per operator where one is listed in
  :data:`LOW_PRECISION`, else the operator's reference program run by the
  emulator with every widening dropped (all math in the storage format,
  reductions pairwise in that format, math calls correctly rounded).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from .. import formats as F
from ..errors import InvalidArgument

__all__ = ["BaselineResult", "Observed", "AssertClose", "Upstream", "TunedTolerance", "UlpRule",
           "FlashTwoX", "UPSTREAM", "LOW_PRECISION", "ASSERT_CLOSE_DEFAULTS", "default_baselines",
           "observe", "required_atol"]


@dataclass
class BaselineResult:
    ok: bool
    ratio: float
    note: str = ""

    def to_dict(self) -> dict:
        r = self.ratio
        return {"ok": self.ok, "ratio": r if math.isfinite(r) else str(r), "note": self.note}


@dataclass
class Observed:
    """One judged run as the baselines see it.  ``outputs`` holds, per output,
    (kernel values float64, reference centre float64, output format).  The
    raw inputs/params are kept for rules that recompute the operator (flash2x)."""
    op: str
    outputs: list
    inputs: tuple = ()
    params: dict = field(default_factory=dict)
    reference: object = None
    _lp: list | None = field(default=None, repr=False)

    def expected(self, j: int) -> torch.Tensor:
        y, c, fmt = self.outputs[j]
        return F.round(c, fmt)


def observe(op_name, verdict, inputs=(), params=None, reference=None) -> Observed:
    """An :class:`Observed` from a numoracle verdict of the run (same outputs, same reference)."""
    outs = [(o.kernel, o.centre, o.fmt) for o in verdict.outputs]
    return Observed(op_name, outs, tuple(inputs), dict(params or {}), reference)


def _allclose_ratio(y, e, atol, rtol) -> float:
    """max |y − e| / (atol + rtol·|e|), with assert_close's handling of non-finite values:
    equal infinities match, a NaN or an inf against a finite value fails."""
    if y.numel() == 0:
        return 0.0
    both_inf = torch.isinf(y) & torch.isinf(e) & (y == e)
    bad = (~torch.isfinite(y) | ~torch.isfinite(e)) & ~both_inf
    if bool(bad.any()):
        return math.inf
    allowed = atol + rtol * e.abs()
    err = torch.where(both_inf, torch.zeros_like(y), (y - e).abs())
    zero_allowed = allowed == 0
    if bool((zero_allowed & (err > 0)).any()):
        return math.inf
    r = torch.where(zero_allowed, torch.zeros_like(err), err / torch.where(zero_allowed, 1.0, allowed))
    return float(r.max())


def required_atol(obs: Observed, rtols) -> list:
    """For each rtol, the least atol for which |y − e| ≤ atol + rtol·|e| holds on every
    element of every output of the run (inf when an output is non-finite where its
    expected value is finite).  A grid configuration (atol, rtol) passes iff
    atol ≥ required_atol(rtol) — the tolerance stress uses this."""
    need = [0.0] * len(rtols)
    for j in range(len(obs.outputs)):
        y, _, _ = obs.outputs[j]
        e = obs.expected(j)
        if y.numel() == 0:
            continue
        both_inf = torch.isinf(y) & torch.isinf(e) & (y == e)
        if bool(((~torch.isfinite(y) | ~torch.isfinite(e)) & ~both_inf).any()):
            return [math.inf] * len(rtols)
        err = torch.where(both_inf, torch.zeros_like(y), (y - e).abs()).reshape(-1)
        ae = torch.where(both_inf, torch.zeros_like(e), e.abs()).reshape(-1)
        r = torch.as_tensor(list(rtols), dtype=torch.float64, device=err.device)
        req = (err[None, :] - r[:, None] * ae[None, :]).amax(dim=1).clamp(min=0.0)
        for i, v in enumerate(req.tolist()):
            need[i] = max(need[i], v)
    return need


# ---- assert_close defaults ------------------------------------------------------------

# (rtol, atol) of torch.testing.assert_close by dtype (docs/facts.md).
ASSERT_CLOSE_DEFAULTS = {"fp16": (1e-3, 1e-5), "bf16": (1.6e-2, 1e-5), "fp32": (1.3e-6, 1e-5),
                         "fp64": (1e-7, 1e-7)}


class AssertClose:
    """``torch.testing.assert_close`` with its default tolerances for each output's dtype."""
    name = "assert_close"

    def judge(self, obs: Observed) -> BaselineResult:
        worst = 0.0
        for j, (y, _, fmt) in enumerate(obs.outputs):
            e = obs.expected(j)
            if fmt.name in ASSERT_CLOSE_DEFAULTS:
                rtol, atol = ASSERT_CLOSE_DEFAULTS[fmt.name]
            else:            # fp8/fp4/e8m0: assert_close compares these bit for bit
                rtol, atol = 0.0, 0.0
            worst = max(worst, _allclose_ratio(y, e, atol, rtol))
        return BaselineResult(worst <= 1.0, worst)


# ---- upstream suites ------------------------------------------------------------------

@dataclass(frozen=True)
class Rule:
    """One upstream test's acceptance rule.  kind: "allclose" (|y−e| ≤ atol + rtol|e|),
    "one_sided" (max(e − y) ≤ atol, Unsloth RMSNorm), "l2" (‖y − e‖₂ ≤ atol, Unsloth
    LayerNorm), "mean_rel" (mean|y − e| / mean|e| < rtol, vLLM block fp8 matmul)."""
    kind: str
    atol: float = 0.0
    rtol: float = 0.0
    source: str = ""


def _allclose(atol, rtol, source):
    return Rule("allclose", atol, rtol, source)


# Keyed by operator name, then output dtype ("*" for any).  From docs/facts.md.
UPSTREAM = {
    "rms_norm": {"*": _allclose(0.2, 0.02, "Liger test_rms_norm (bf16)")},
    "swiglu": {"*": _allclose(1e4, 1e-2, "Liger test_swiglu (bf16)")},
    "geglu": {"*": _allclose(1.0, 0.0, "Liger test_geglu (atol 1.0)")},
    "fused_linear_cross_entropy": {"*": _allclose(5.0, 50.0, "Liger test_fused_linear_cross_entropy sum (bf16)")},
    "cross_entropy": {"*": _allclose(1e-8, 5e-2, "Liger test_cross_entropy (bf16)")},
    "rms_layernorm": {"*": Rule("one_sided", 0.05, 0.0, "Unsloth RMSNorm: max(ref - out) <= 0.05")},
    "layernorm": {"*": Rule("l2", 0.1, 0.0, "Unsloth LayerNorm: L2 distance <= 0.1")},
    "per_token_group_quant_fp8": {"*": _allclose(1e-8, 0.15, "vLLM group quant: allclose(rtol=0.15)")},
    "w8a8_block_fp8_matmul": {"*": Rule("mean_rel", 0.0, 1e-3, "vLLM block fp8 matmul: mean relative error < 1e-3")},
}


def _kernelbench(fmt) -> Rule:
    t = 1e-4 if fmt.name in ("fp32", "fp64") else 1e-2
    return _allclose(t, t, "KernelBench allclose (fallback: no upstream entry for this operator)")


def _rule_ratio(rule: Rule, y, e) -> float:
    if rule.kind == "allclose":
        return _allclose_ratio(y, e, rule.atol, rule.rtol)
    if not bool(torch.isfinite(y).all()) and bool(torch.isfinite(e).all()):
        return math.inf
    d = y - e
    if rule.kind == "one_sided":
        worst = float((e - y).max()) if y.numel() else 0.0
        return max(worst, 0.0) / rule.atol
    if rule.kind == "l2":
        return float(torch.linalg.vector_norm(d)) / rule.atol
    if rule.kind == "mean_rel":
        den = float(e.abs().mean()) if e.numel() else 0.0
        num = float(d.abs().mean()) if d.numel() else 0.0
        if den == 0.0:
            return 0.0 if num == 0.0 else math.inf
        return (num / den) / rule.rtol
    raise InvalidArgument(f"unknown rule kind {rule.kind!r}")


class Upstream:
    """The operator's own upstream test tolerance (:data:`UPSTREAM`), applied to every output;
    KernelBench's allclose where the operator has no entry (``note`` says which)."""
    name = "upstream"

    def __init__(self, table=None):
        self.table = UPSTREAM if table is None else table

    def rule(self, op: str, fmt) -> Rule:
        entry = self.table.get(op)
        if entry is None:
            return _kernelbench(fmt)
        return entry.get(fmt.name, entry.get("*")) or _kernelbench(fmt)

    def judge(self, obs: Observed) -> BaselineResult:
        worst, notes = 0.0, set()
        for j, (y, _, fmt) in enumerate(obs.outputs):
            rule = self.rule(obs.op, fmt)
            notes.add(rule.source)
            worst = max(worst, _rule_ratio(rule, y, obs.expected(j)))
        return BaselineResult(worst <= 1.0, worst, "; ".join(sorted(notes)))


# ---- tuned on the calibration group ---------------------------------------------------

class TunedTolerance:
    """A per-output (atol, rtol) tuned on runs of the correct kernel over the calibration group.

    The rule (:meth:`fit`), what a careful maintainer does with a fresh kernel: run it on N
    calibration cases, look at the worst errors, and add a safety margin (default 2×).  Per
    output, elements are split at ``split`` × max|e| of their run (default 1e-3): for the
    ordinary-sized ones the worst *relative* error sets rtol = margin · max |y−e|/|e|; for
    the near-zero ones the worst *absolute* error sets atol = margin · max |y−e|.  By
    construction every calibration run passes |y − e| ≤ atol + rtol·|e|.  rtol is never set
    below margin · u, u = 2^-p the unit roundoff of the output format (the error of a correctly
    rounded result): a maintainer who observed no error at all still allows the last bit.
    """
    name = "tuned"

    def __init__(self, per_output=None, margin=2.0, split=1e-3, n_runs=0):
        self.per_output = list(per_output or [])      # [(atol, rtol)] by output index
        self.margin, self.split, self.n_runs = margin, split, n_runs

    @classmethod
    def fit(cls, observations, margin: float = 2.0, split: float = 1e-3) -> "TunedTolerance":
        if margin < 1.0:
            raise InvalidArgument(f"margin={margin}: expected ≥ 1 (a tolerance tighter than the "
                                  f"observed error rejects its own calibration runs).")
        observations = list(observations)
        if not observations:
            raise InvalidArgument("TunedTolerance.fit needs at least one calibration run of the correct kernel.")
        n_out = len(observations[0].outputs)
        abs_max, rel_max = [0.0] * n_out, [0.0] * n_out
        for obs in observations:
            for j in range(n_out):
                y, _, _ = obs.outputs[j]
                e = obs.expected(j)
                ok = torch.isfinite(y) & torch.isfinite(e)
                if not bool(ok.any()):
                    continue
                y, e = y[ok], e[ok]
                err = (y - e).abs()
                thr = split * float(e.abs().max())
                big = e.abs() >= thr
                if bool(big.any()) and thr > 0:
                    rel_max[j] = max(rel_max[j], float((err[big] / e[big].abs()).max()))
                small = ~big if thr > 0 else torch.ones_like(big)
                if bool(small.any()):
                    abs_max[j] = max(abs_max[j], float(err[small].max()))
        fmts = [o[2] for o in observations[0].outputs]
        per = [(margin * a, margin * max(r, 2.0 ** -f.precision)) for a, r, f in zip(abs_max, rel_max, fmts)]
        return cls(per, margin, split, len(observations))

    def judge(self, obs: Observed) -> BaselineResult:
        if len(self.per_output) != len(obs.outputs):
            raise InvalidArgument(f"tuned tolerance has {len(self.per_output)} output(s), the run "
                                  f"{len(obs.outputs)}; fit it on runs of the same operator.")
        worst = 0.0
        for j, (atol, rtol) in enumerate(self.per_output):
            worst = max(worst, _allclose_ratio(obs.outputs[j][0], obs.expected(j), atol, rtol))
        return BaselineResult(worst <= 1.0, worst)

    def to_dict(self) -> dict:
        return {"per_output": [{"atol": a, "rtol": r} for a, r in self.per_output],
                "margin": self.margin, "split": self.split, "calibration_runs": self.n_runs}


# ---- k ulps ---------------------------------------------------------------------------

class UlpRule:
    """|y − e| ≤ k · ulp_fmt(e), e the reference rounded to the output format."""

    def __init__(self, k: float = 2.0):
        if not k > 0:
            raise InvalidArgument(f"k={k}: expected a positive number of ulps.")
        self.k = k
        self.name = f"ulp{k:g}"

    def judge(self, obs: Observed) -> BaselineResult:
        worst = 0.0
        for j, (y, _, fmt) in enumerate(obs.outputs):
            e = obs.expected(j)
            if y.numel() == 0:
                continue
            both_inf = torch.isinf(y) & torch.isinf(e) & (y == e)
            if bool(((~torch.isfinite(y) | ~torch.isfinite(e)) & ~both_inf).any()):
                return BaselineResult(False, math.inf)
            u = F.ulp(torch.where(both_inf, torch.zeros_like(e), e).abs(), fmt)
            err = torch.where(both_inf, torch.zeros_like(y), (y - e).abs())
            worst = max(worst, float((err / (self.k * u)).max()))
        return BaselineResult(worst <= 1.0, worst)


# ---- flash-attention's 2x rule --------------------------------------------------------

def _lp_rms_norm(x, w, *, eps=1e-6, offset=0.0, casting="llama"):
    r = torch.rsqrt((x * x).mean(-1, keepdim=True) + eps)
    return x * r * (w + offset), r.squeeze(-1)


def _lp_layer_norm(x, w, b, *, eps=1e-5):
    mu = x.mean(-1, keepdim=True)
    d = x - mu
    rstd = torch.rsqrt((d * d).mean(-1, keepdim=True) + eps)
    return d * rstd * w + b, mu.squeeze(-1), rstd.squeeze(-1)


def _lp_softmax(x):
    return torch.softmax(x, dim=-1)


def _lp_swiglu(a, b):
    return torch.nn.functional.silu(a) * b


def _lp_geglu(a, b, *, approximate="tanh"):
    return torch.nn.functional.gelu(a, approximate=approximate) * b


def _lp_cross_entropy(logits, labels, *, ignore_index=-100, reduction="mean"):
    loss = torch.nn.functional.cross_entropy(logits, labels, ignore_index=ignore_index, reduction="none")
    if reduction == "mean":
        loss = loss / max(int((labels != ignore_index).sum()), 1)
    return loss


# Plain PyTorch in the inputs' dtype, by operator name (what flash-attention's tests call the
# reference "computed in low precision").  Other operators use the emulator (module docstring).
LOW_PRECISION = {"rms_norm": _lp_rms_norm, "layer_norm": _lp_layer_norm, "softmax": _lp_softmax,
                 "swiglu": _lp_swiglu, "geglu": _lp_geglu, "cross_entropy": _lp_cross_entropy}


def low_precision_outputs(obs: Observed) -> list:
    """The operator computed in low precision on the run's inputs, as float64 tensors."""
    if obs._lp is not None:
        return obs._lp
    fn = LOW_PRECISION.get(obs.op)
    outs = None
    if fn is not None:
        try:
            with torch.no_grad():
                outs = fn(*obs.inputs, **obs.params)
        except TypeError:
            outs = None               # a parameter the plain function does not take
    if outs is None:
        from ..selftest.emulator import Plan, emulate
        if obs.reference is None:
            raise InvalidArgument(f"flash2x needs the reference program of {obs.op} (no plain "
                                  f"PyTorch function is listed for it in LOW_PRECISION).")
        plan = Plan(seed=0, order="tree", fma=False, math="exact", faults=("no_widening",))
        outs = emulate(obs.reference, tuple(t.cpu() for t in obs.inputs), obs.params, plan)
    if not isinstance(outs, (tuple, list)):
        outs = (outs,)
    res = []
    for o, (y, _, fmt) in zip(outs, obs.outputs):
        if o.dtype == torch.uint8 and fmt.torch_dtype is None:
            v = F.decode(o, fmt)
        else:
            v = o.detach().to(torch.float64)
        res.append(v.to(y.device).reshape(y.shape))
    obs._lp = res
    return res


class FlashTwoX:
    """max |y − ref64| ≤ factor · max |lp − ref64| for every output (factor 2)."""

    def __init__(self, factor: float = 2.0):
        self.factor = factor
        self.name = "flash2x" if factor == 2.0 else f"flash{factor:g}x"

    def judge(self, obs: Observed) -> BaselineResult:
        """``ok`` with ``ratio`` NaN and a "not applicable" note when no low-precision reference
        can be computed for the operator (e.g. a quantizer the emulator cannot run)."""
        try:
            lp = low_precision_outputs(obs)
        except Exception as exc:       # the emulator cannot run this reference (yet)
            return BaselineResult(True, math.nan, f"not applicable: {type(exc).__name__}: {exc}"[:200])
        worst = 0.0
        for (y, c, _), l in zip(obs.outputs, lp):
            if y.numel() == 0:
                continue
            fin = torch.isfinite(c)
            if bool((~torch.isfinite(y) & fin).any()):
                return BaselineResult(False, math.inf)
            ky = float((y - c)[fin].abs().max()) if bool(fin.any()) else 0.0
            le = (l - c)[fin].abs()
            le = float(torch.nan_to_num(le, nan=math.inf).max()) if le.numel() else 0.0
            allowed = self.factor * le
            if allowed == 0.0:
                r = 0.0 if ky == 0.0 else math.inf
            else:
                r = ky / allowed
            worst = max(worst, r)
        return BaselineResult(worst <= 1.0, worst)


def default_baselines(tuned: TunedTolerance | None = None, k_ulp: float = 2.0) -> list:
    """The fixed baselines of docs/design.md §10, in report order (``tuned`` only when given)."""
    out = [AssertClose(), Upstream()]
    if tuned is not None:
        out.append(tuned)
    out += [UlpRule(k_ulp), FlashTwoX()]
    return out
