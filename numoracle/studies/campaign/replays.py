"""Historical change-pair replays (docs/operators.md): each upstream fault and its
correction re-created as a faulty kernel of ours (``Operator.faulty``) and the
corrected control (a registered kernel of the same operator).

A replay passes when numoracle rejects the faulty kernel on some generated
input — confirmed in fixed-input mode — **and** accepts the corrected control
on every run.  For each pair we record which input groups exposed the fault,
how many control runs were rejected (the goal is none), and what the
fixed-tolerance baselines did on the same runs."""
from __future__ import annotations

import time
import traceback
from dataclasses import dataclass, field


from ...check import check, check_modes
from ...runner.execute import execute
from . import correct as C


@dataclass(frozen=True)
class Pair:
    pair: int
    source: str
    title: str
    operator: str
    faulty: str                       # name in Operator.faulty
    control: str = "correct"          # name in Operator.kernels
    params: dict = field(default_factory=dict)   # fixed parameters the fault concerns
    note: str = ""


PAIRS = (
    Pair(1, "Liger CE", "true-class gradient from the bf16-rounded softmax minus 1 (cancellation as p -> 1)",
         "cross_entropy_backward", "rounded_label_grad"),
    Pair(2, "Liger RMSNorm backward", "dW partial sums reduced in bf16", "rms_norm_backward", "bf16_dw_sum"),
    Pair(3, "Liger LayerNorm", "variance summed over the padded lanes when H is not a power of two",
         "layer_norm", "padded_variance"),
    Pair(3, "Liger LayerNorm backward", "fp16 mapped to bf16 in the backward", "layer_norm_backward", "fp16_as_bf16"),
    Pair(4, "Liger RMSNorm (Gemma)", "(1 + w) offset missing", "rms_norm", "offset_dropped",
         params={"casting": "gemma", "offset": 1.0}),
    Pair(5, "Liger RMSNorm (Llama)", "x·rstd multiplied by w in fp32 instead of rounded to x's format first",
         "rms_norm", "unrounded_multiply", params={"casting": "llama", "offset": 0.0}),
    Pair(5, "Unsloth RMSNorm (Llama)", "normalised value multiplied by w in fp32, not rounded first",
         "rms_layernorm", "fp32_multiply", params={"gemma": False}),
    Pair(6, "Liger GeGLU backward", "db from the unrounded fp32 gelu(a)", "geglu_backward", "unrounded_gelu"),
    Pair(7, "Liger KLDiv", "log(y_true) at y_true = 0 gives NaN; mean divided by the wrong count",
         "kl_div", "no_eps_clamp"),
    Pair(8, "Liger CE", "loss divided by the non-ignored count for reduction='sum' too", "cross_entropy",
         "always_divides", params={"reduction": "sum"}),
    Pair(9, "Liger CE (reduction='none')", "every row's gradient scaled by grad_output[0]", "cross_entropy_backward",
         "row0_grad_output", note="exposed only by the cases whose example draws reduction='none'"),
    Pair(10, "Liger CE", "softmax computed in the logits' format (no fp32 widening)", "cross_entropy",
         "storage_format"),
    Pair(11, "Unsloth CE", "label logit softcapped in bf16 while the logsumexp used fp32 logits",
         "cross_entropy_loss", "label_lowp"),
    Pair(12, "Unsloth GeGLU", "wrong GELU variant (tanh where erf is meant)", "geglu_exact", "tanh_form"),
    Pair(13, "vLLM block fp8 matmul", "BLOCK_K larger than the scale group applies the wrong scales",
         "w8a8_block_fp8_matmul", "bk_over_group"),
    Pair(14, "vLLM group quant (UE8M0)", "absmax floored instead of the scale before the power-of-two round-up",
         "per_token_group_quant_fp8", "floor_absmax", params={"ue8m0": True}),
    Pair(15, "sglang/vLLM group quant", "fp8 max hard-coded to 224 on an e4m3fn device", "per_token_group_quant_fp8",
         "max224"),
    Pair(16, "rounding parity", "an fp8 tie rounded away from even", "per_token_group_quant_fp8", "ties_away"),
)


def available(pairs=PAIRS):
    """The pairs whose operator and faulty kernel are registered, and the reasons for the others."""
    from ... import operators
    ok, missing = [], []
    for p in pairs:
        if p.operator not in operators.REGISTRY:
            missing.append((p, f"operator {p.operator!r} is not registered"))
        elif p.faulty not in operators.get(p.operator).faulty:
            missing.append((p, f"{p.operator} has no faulty kernel {p.faulty!r} "
                               f"(it has {sorted(operators.get(p.operator).faulty)})"))
        else:
            ok.append(p)
    return ok, missing


def _run(kernel, inputs, params, dev):
    ran = execute(kernel, inputs, params, device=dev)
    if not ran.ok:
        raise RuntimeError(ran.traceback or ran.error)
    return ran.outputs


def replay(p: Pair, n_cases: int, backend: str, dev: str, baselines=None) -> dict:
    """Run the faulty and the control kernel of one pair over the same cases."""
    from ... import operators
    op = operators.get(p.operator)
    faulty = op.faulty_kernel(p.faulty)
    control = op.kernels[p.control]
    t0 = time.time()
    res = {"pair": p.pair, "source": p.source, "title": p.title, "operator": p.operator, "faulty": p.faulty,
           "control": p.control, "params": p.params, "cases": 0, "faulty_rejections": 0,
           "faulty_statistical_only": 0, "control_rejections": 0, "exposed_by": [], "errors": 0,
           "first_counterexample": None, "baselines": {}, "baseline_control_false_alarms": {}}
    exposed: dict[str, int] = {}
    for case in C.cases(op, n_cases):
        seed, group, fmt, rows, cols = case.seed, case.group, case.fmt, case.rows, case.cols
        try:
            inputs, params = case.materialize(dev, op)
            params = {**params, **p.params}
            yf = _run(faulty, inputs, params, dev)
            yc = _run(control, inputs, params, dev)
            res["cases"] += 1
            vf = check(op.reference, yf, inputs, params, mode="statistical", backend=backend)
            if vf.status == "reject":
                if vf.confirmation == "confirmed":
                    res["faulty_rejections"] += 1
                    exposed[group] = exposed.get(group, 0) + 1
                    if res["first_counterexample"] is None:
                        res["first_counterexample"] = {"seed": seed, "group": group, "format": fmt,
                                                       "shape": [rows, cols], "params": params,
                                                       "explain": vf.explain()[:2500]}
                else:
                    res["faulty_statistical_only"] += 1
            for vc in check_modes(op.reference, yc, inputs, params, modes=C.MODES, backend=backend).values():
                if vc.status == "reject":
                    res["control_rejections"] += 1
            if baselines is not None:
                for name, (caught, false_alarm) in baselines(op, inputs, params, yf, yc).items():
                    res["baselines"][name] = res["baselines"].get(name, False) or bool(caught)
                    res["baseline_control_false_alarms"][name] = (
                        res["baseline_control_false_alarms"].get(name, 0) + int(bool(false_alarm)))
        except Exception:
            res["errors"] += 1
            res.setdefault("error_examples", []).append(traceback.format_exc()[-800:])
    res["exposed_by"] = sorted(exposed, key=lambda g: -exposed[g])
    res["exposed_counts"] = exposed
    res["faulty_rejected"] = res["faulty_rejections"] > 0
    res["passed"] = res["faulty_rejected"] and res["control_rejections"] == 0
    res["seconds"] = round(time.time() - t0, 2)
    return res


def key(p) -> str:
    """A replay's identity (a Pair or a replay's result): its number alone is not one, since
    pairs 3 and 5 each have two entries (an operator and its backward, or two sources)."""
    if isinstance(p, dict):
        return f"{p['pair']}:{p['operator']}/{p['faulty']}"
    return f"{p.pair}:{p.operator}/{p.faulty}"


def run(n_cases: int, backend, dev: str, baselines=None, log=print, done=None, on_pair=None,
        ops=None) -> list[dict]:
    """Every pair's replay, in order (``ops``: only the pairs of these operators); ``done``
    (``key(result)`` -> result) are those a resumed campaign has already, and
    ``on_pair(result)`` is called as each new one ends."""
    ok, missing = available()
    why = {id(q): reason for q, reason in missing}
    done = done or {}
    out = []
    for p in PAIRS if ops is None else [q for q in PAIRS if q.operator in set(ops)]:
        if key(p) in done:
            out.append(done[key(p)])
            continue
        if id(p) not in why:
            r = replay(p, n_cases, backend, dev, baselines)
        else:
            r = {"pair": p.pair, "source": p.source, "title": p.title, "operator": p.operator, "faulty": p.faulty,
                 "skipped": why[id(p)], "faulty_rejected": False, "passed": False}
        out.append(r)
        if on_pair is not None:
            on_pair(r)
        if log:
            if "skipped" in r:
                log(f"pair {p.pair:2d} {p.operator}/{p.faulty}: skipped ({r['skipped']})")
            else:
                log(f"pair {p.pair:2d} {p.operator}/{p.faulty}: faulty rejected on {r['faulty_rejections']}/{r['cases']} "
                    f"(by {', '.join(r['exposed_by'][:3]) or '-'}), control rejected {r['control_rejections']} "
                    f"({r['seconds']}s)")
    return out
