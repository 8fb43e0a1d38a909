"""The compiled verdict: the error calculus fused by ``torch.compile``.

Run eagerly, a verdict makes on the order of a hundred full-size float64 passes
(each form term, rounding and range check is its own torch operation).  The
calculus has no element-wise Python: its Python structure depends only on the
program, the shapes, the formats and the parameters.  So a program judged
repeatedly on one *signature* (those, plus the mode, p, math profile and
input policy) is traced once and compiled into a few fused loops (C++ on the
CPU, Triton kernels on a GPU).

The compiled function is the same code as the eager path: the reference
program under the calculus (with ``Context.traced`` set, every data-dependent
shortcut takes its general path, which computes the same values), the regions,
and the rounding-interval check.  The site labels of the certificate (which
name the reference-program line) come from an eager run of the same signature:
the first call of a signature is always eager.

Policy (environment variable ``NUMORACLE_COMPILE``):

- ``auto`` (default): compile a signature of at least 2**20 output elements
  once it has been judged twice eagerly (compiling costs tens of seconds; it
  pays back over a fuzzing run or a test loop on one shape);
- ``always``: compile every signature from its second call on;
- ``never``: eager only.

Whatever fails to compile (an unsupported program, a compiler missing) is
judged eagerly, with one warning per signature.  Quantizer outputs are judged
eagerly.
"""

from __future__ import annotations

import os
import threading
import types
import warnings

import torch

from . import formats as F
from .errors import InvalidArgument

POLICIES = ("auto", "always", "never")
_ALIASES = {"1": "always", "true": "always", "yes": "always", "on": "always",
            "0": "never", "false": "never", "no": "never", "off": "never", "": "auto"}
AUTO_MIN_ELEMENTS = 1 << 20
AUTO_EAGER_CALLS = 2

# device types where compiled quantizer judgements were checked equal to eager ones
# (scripts/compiled_parity.py --quantizer-devices); elsewhere they are judged eagerly
QUANTIZER_DEVICES = {"cpu", "cuda"}

_lock = threading.Lock()
_plans: dict = {}
_serial = [0]


def policy() -> str:
    raw = os.environ.get("NUMORACLE_COMPILE", "auto")
    v = _ALIASES.get(raw.strip().lower(), raw.strip().lower())
    if v not in POLICIES:
        raise InvalidArgument(f"NUMORACLE_COMPILE={raw!r}: expected one of {POLICIES} "
                              f"(or 1/0); unset it for 'auto'.")
    return v


def clear() -> None:
    """Forget every plan (and its compiled function)."""
    with _lock:
        _plans.clear()


def _can_compile() -> bool:
    """torch.compile with Inductor's exact casts (``emulate_precision_casts``) is available."""
    try:
        import torch._inductor.config as cfg
    except Exception:            # a torch without Inductor
        return False
    return hasattr(cfg, "emulate_precision_casts")


# --------------------------------------------------------------------------- signatures

def _struct(x):
    """(static description, tensors) of one input or output, or None when it is
    neither a tensor nor a (tensor, format) pair (such arguments stay eager)."""
    if isinstance(x, tuple) and len(x) == 2 and isinstance(x[1], F.Format) and isinstance(x[0], torch.Tensor):
        return ("pair", x[1]), [x[0]]
    if isinstance(x, torch.Tensor):
        return ("tensor", None), [x]
    return None


def _tensor_key(t: torch.Tensor):
    return (tuple(t.shape), tuple(t.stride()), t.dtype, t.device.type, t.device.index)


def _param_key(params: dict):
    items = []
    for k, v in sorted(params.items()):
        if isinstance(v, (bool, int, float, str, type(None))):
            items.append((k, type(v).__name__, v))
        elif isinstance(v, F.Format):
            items.append((k, "fmt", v.name))
        else:
            return None             # tensors, lists, objects: not part of a static signature
    return tuple(items)


def plan_for(program, inputs, outputs, params, prof, p, modes, nonfinite):
    """The plan of this call's signature (counting the call), or None when the
    policy or the arguments keep it eager."""
    pol = policy()
    if pol == "never" or not modes or not _can_compile():
        return None
    structs, tensors = [], []
    for x in list(inputs) + list(outputs):
        st = _struct(x)
        if st is None:
            return None
        structs.append(st[0])
        tensors += st[1]
    pk = _param_key(params)
    if pk is None:
        return None
    key = (program, getattr(prof, "name", id(prof)), float(p), tuple(modes), nonfinite, len(inputs),
           tuple((s[0], None if s[1] is None else s[1].name) for s in structs),
           tuple(_tensor_key(t) for t in tensors), pk)
    elements = sum(t.numel() for t in tensors[len(inputs):]) if tensors else 0
    with _lock:
        plan = _plans.get(key)
        if plan is None:
            plan = _plans[key] = Plan(program, params, prof, p, tuple(modes), nonfinite, structs,
                                      len(inputs), elements, pol, tensors[0].device.type if tensors else "cpu")
        plan.calls += 1
    return plan


def _decoder(raw, fmt, device):
    """A function that decodes a kernel output as ``check.evaluate`` does, from a
    copy in the kernel's own format (a quarter of the float64 values' size for
    bf16), so that a caller reusing its output buffer does not change the verdict."""
    t = (raw[0] if isinstance(raw, tuple) else raw).clone()

    def decode():
        y = F.decode(t, fmt)
        return y if y.device == device else y.to(device)
    return decode


def _judged(name, fmt, kernel, centre, fixed, stat, taint, modes, flags):
    """A ``check.Judged`` from a compiled graph's region (flags: any rejected per
    mode, any uncertified): its rejected masks are computed when first asked
    for, by the same ``judge_masks`` (all False, without a pass, where the
    flags say so)."""
    from .check import Judged, judge_masks
    out = Judged(name, fmt, kernel, centre, fixed, stat, taint, modes, (), None, flags=list(flags))

    def mask(k):
        if not flags[k]:
            return lambda: torch.zeros(centre.shape, dtype=torch.bool, device=centre.device)
        return lambda: judge_masks(fmt, centre, fixed, stat, out.taint_mask(), out.kernel(), (modes[k],))[0][0]
    out.rejected = tuple(mask(k) for k in range(len(modes)))
    return out


class Plan:
    """One signature: its eager facts (site labels, output names) and, once
    compiled, the compiled function."""

    def __init__(self, program, params, prof, p, modes, nonfinite, structs, n_inputs, elements, pol, device):
        self.program, self.params, self.prof, self.p = program, dict(params), prof, p
        self.modes, self.nonfinite, self.structs, self.n_inputs = modes, nonfinite, structs, n_inputs
        self.elements, self.policy = elements, pol
        self.calls = 0
        self.sites = None          # [(label, kind, fmt, limit, elements)] from an eager run
        self.failed = None         # why this signature stays eager
        self.has_quantizer = False
        self.device = device
        self.fn = None

    @property
    def ready(self) -> bool:
        if self.failed is not None or self.sites is None:
            return False
        if self.policy == "always":
            return True
        return self.calls > AUTO_EAGER_CALLS and self.elements >= AUTO_MIN_ELEMENTS

    def learn(self, sites, has_quantizer: bool) -> None:
        """Record what an eager run of this signature found."""
        self.has_quantizer = has_quantizer
        if has_quantizer and self.device not in QUANTIZER_DEVICES:
            self.failed = f"quantizer outputs are judged eagerly on {self.device}"
            return
        self.sites = [(s.label, s.kind, s.fmt, s.limit, s.elements) for s in sites]

    # ---- the traced function
    def _core(self):
        from .check import evaluate, judge_masks
        from .oracles import quantizer as QZ
        program, params, prof, p, modes, nonfinite = (self.program, self.params, self.prof, self.p,
                                                      self.modes, self.nonfinite)
        structs, n_in = self.structs, self.n_inputs

        def numoracle_verdict(*tensors):
            args = [t if kind == "tensor" else (t, fmt) for (kind, fmt), t in zip(structs, tensors)]
            refs, ctx, policy, decoded, names, regions = evaluate(
                program, args[:n_in], args[n_in:], params, prof, p, nonfinite, traced=True)
            quant = QZ.judge_tensors(refs, decoded) if any(reg is None for reg in regions) else {}
            outs, flags = [], []
            for j, (reg, y) in enumerate(zip(regions, decoded)):
                # the decoded kernel output and its non-finite mask are not returned (not written):
                # the verdict decodes the kernel's own tensor when they are asked for
                if reg is None:             # a quantizer output: its two-step judgement, in every mode
                    centre, lo, hi, qlo, qhi, rejected, unc = quant[j]
                    outs.append(("quantizer", (centre, lo, hi, qlo, qhi, rejected, unc)))
                    flags += [rejected.any(), unc.any()]
                    continue
                # the rejected masks only feed the flags here: a verdict computes them eagerly,
                # from the regions returned, when they are asked for (not writing them saves
                # about 7% of a CPU verdict: Inductor's C++ writes bool tensors element by element)
                rejected, _ = judge_masks(reg.fmt, reg.centre, reg.fixed, reg.stat, reg.taint, y, modes)
                flags += [r.any() for r in rejected] + [reg.taint.any()]
                outs.append(("region", (reg.centre, reg.fixed, reg.stat, reg.taint)))
            # the sites' statistics are not returned (so not computed): the certificate is
            # filled in from an eager run when it is read
            whats = tuple((s.what, s.kind) for s in ctx.sites)
            names = tuple(names)
            fmts = tuple(r.fmt.name for r in refs)
            # every flag in one tensor, so that the verdict waits for the device once: per output
            # (any rejected per mode, any uncertified), then whether any input was non-finite
            flags.append(torch.zeros((), dtype=torch.bool, device=refs[0].c.device) if policy is None
                         else policy)
            return outs, whats, names, fmts, torch.stack(flags)

        # a code object of its own, so that each signature has its own compile cache
        code = numoracle_verdict.__code__
        with _lock:
            _serial[0] += 1
            code = code.replace(co_name=f"numoracle_verdict_{_serial[0]}")
        fn = types.FunctionType(code, numoracle_verdict.__globals__, code.co_name,
                                numoracle_verdict.__defaults__, numoracle_verdict.__closure__)
        # emulate_precision_casts: without it Inductor may keep a value cast to bf16/fp16 inside a
        # fused kernel in fp32, skipping the rounding the calculus relies on (format roundings
        # are casts); with it every cast rounds as torch's eager cast does
        return torch.compile(fn, dynamic=False, options={"emulate_precision_casts": True})

    def run(self, inputs, outputs):
        """(outputs as ``check.Judged``, certificate, input policy), or None
        when this call must be judged eagerly."""
        from .certificates import Certificate
        from .check import NONFINITE_POLICY_TEXT, Judged
        from .verdict import OutputJudgement
        tensors = []
        for x in list(inputs) + list(outputs):
            tensors += _struct(x)[1]
        try:
            if self.fn is None:
                self.fn = self._core()
            outs, whats, names, fmts, flags = self.fn(*tensors)
            if len(whats) != len(self.sites) or any(
                    kind != s[1] or not s[0].startswith(what) for (what, kind), s in zip(whats, self.sites)):
                raise RuntimeError(f"the traced program has sites {[w for w, _ in whats]} where the eager "
                                   f"run had {[s[0] for s in self.sites]}")
        except Exception as exc:      # never let the fast path change a verdict: judge eagerly
            self.failed = f"{type(exc).__name__}: {exc}"
            warnings.warn(f"numoracle: judging {self.program.name} eagerly; compiling its verdict failed "
                          f"({self.failed[:300]}). Set NUMORACLE_COMPILE=never to skip compiling.",
                          RuntimeWarning, stacklevel=3)
            return None
        flags = [bool(v) for v in flags.tolist()]
        policy = "finite"
        if flags[-1]:
            if self.nonfinite == "error":
                return None               # the eager path raises the usual message
            policy = NONFINITE_POLICY_TEXT
        eager = self._eager(list(inputs), list(outputs))
        judged = []
        at = 0
        for j, (name, fmt, raw, (kind, t)) in enumerate(zip(names, fmts, outputs, outs)):
            fmt = F.by_name(fmt)
            kernel = _decoder(raw, fmt, t[0].device)
            if kind == "region":
                n = len(self.modes) + 1
                judged.append(_judged(name, fmt, kernel, *t, self.modes, flags[at:at + n]))
            else:
                n = 2
                centre, lo, hi, qlo, qhi, rejected, unc = t
                judged.append(OutputJudgement(
                    name, fmt, kernel, centre, lo, hi, qlo, qhi, rejected, unc,
                    (lambda k, u: lambda: ~torch.isfinite(k()) & ~u)(kernel, unc), rejected,
                    detail=(lambda j: lambda i: eager()[1][j].detail(i))(j)))
            at += n
        return judged, Certificate(inputs=policy, compute=lambda: eager()[0]), policy

    def _eager(self, inputs, outputs):
        """What the compiled graph leaves out, from one eager run when first asked for:
        (the certificate's site records, the quantizer outputs' judgements with their
        explanation details)."""
        done = []

        def get():
            if not done:
                from .check import evaluate
                from .oracles import quantizer as QZ
                refs, ctx, _, decoded, names, regions = evaluate(self.program, inputs, outputs, self.params,
                                                                 self.prof, self.p, self.nonfinite)
                quant = QZ.judge(refs, decoded, names) if self.has_quantizer else {}
                done.append((ctx.sites, quant))
            return done[0]
        return get
