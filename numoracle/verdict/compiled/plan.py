"""One signature's compiled verdict: its eager facts (site labels, output names), the
traced function (the same tensor code as the eager path), its compiled forms, and how a
compiled call becomes judgements."""

from __future__ import annotations

import contextlib
import functools
import threading
import types
import warnings

import torch

from ... import formats as F
from ...calculus.tracked import any_of
from ...certificates import Certificate
from ...oracles import quantizer as QZ
from ..evaluation import NONFINITE_POLICY_TEXT, decode_outputs, evaluate
from ..judgement import OutputJudgement, RegionJudgement, RegionTensors, judge_masks
from . import graphs, holding
from .compare import Mismatch, check_sites, compare
from .inductor import (
    COMPILE_OPTIONS,
    brief,
    float_tiling,
    float_tiling_options,
    vector_code,
    vector_code_options,
)

# a flags-only signature whose verdicts mostly need their regions (at least this many, and at
# least half of them) switches to its compiled regions function as its verdict
REGIONS_WANTED = 3
# the most traces of one symbolic plan: the general one, the one for a power-of-two size (exact
# scalings), one more
SYMBOLIC_TRACES = 3

_serial = [0]
_serial_lock = threading.Lock()


def struct(x):
    """(static description, tensors) of one input or output, or None when it is neither a
    tensor nor a (tensor, format) pair (such arguments keep a verdict eager)."""
    if isinstance(x, tuple) and len(x) == 2 and isinstance(x[1], F.Format) and isinstance(x[0], torch.Tensor):
        return ("pair", x[1]), [x[0]]
    if isinstance(x, torch.Tensor):
        return ("tensor", None), [x]
    return None


def _decoder(t, fmt, device, guard=None):
    """A function that decodes a kernel output (``t``: the verdict's own copy, or the
    caller's tensor checked by ``guard``, in the kernel's format) as the eager path does."""
    def decode():
        if guard is not None:
            guard()
        y = F.decode(t, fmt)
        return y if y.device == device else y.to(device)
    return decode


class _QuantizerParts:
    """A quantizer output's judgement tensors from a compiled verdict: ``part(k)`` is the
    k-th of (centre, lo, hi, qlo, qhi, rejected, uncertified), computed when first needed."""

    def __init__(self, kernel, part):
        self._kernel, self._part = kernel, part

    def kernel(self): return self._kernel()
    def centre(self): return self._part(0)
    def bounds(self): return tuple(self._part(k) for k in range(1, 5))
    def rejected(self): return self._part(5)
    def uncertified(self): return self._part(6)
    def special(self): return ~torch.isfinite(self._kernel()) & ~self._part(6)
    def fixed_rejected(self): return self._part(5)


def _part(region, j, k=None):
    """Output j's part of a verdict's regions (``region()``): all of it, or its k-th tensor."""
    r = region()[j]
    return r if k is None else r[k]


class Plan:
    """One signature: its eager facts and, once compiled, the compiled function."""

    def __init__(self, program, params, prof, p, modes, nonfinite, structs, n_inputs, settings,
                 device, judged, symbolic=False):
        self.program, self.params, self.prof, self.p = program, dict(params), prof, p
        self.modes, self.nonfinite, self.structs, self.n_inputs = modes, nonfinite, structs, n_inputs
        self.settings = settings
        self.policy = settings.compile
        # every judged tensor's elements: a CUDA graph keeps a copy of them all (and its
        # intermediates), so its size limit counts inputs too
        self.judged = judged
        self.calls = 0
        self.sites = None          # [(label, kind, fmt, limit, elements)] from an eager run
        self.failed = None         # why this signature stays eager
        self.has_quantizer = False
        self.device = device
        self.fn = None             # the compiled verdict (flags only, at first)
        self.graphs = False        # whether it runs as a CUDA graph
        self.whole = True          # whether the program traces whole (no graph break)
        self.split = None          # why it does not (the whole trace's error)
        # traced under nonfinite="error", the inputs are used as given: a non-finite one sets the
        # policy flag and the verdict is judged eagerly (which raises), so what the compiled code
        # computed from it is never read.  Zeroing and tainting them would cost a row reduction
        # that splits the loops after it.  Where that code fails to compile, the sanitised code is
        # compiled instead (``unsanitised_failed`` says why).
        self.sanitise = nonfinite != "error"
        self.unsanitised_failed = None
        self.sites_checked = False  # the traced sites were compared with the eager run's
        self.compared = False       # a compiled call was compared with the same code run eagerly
        self.regions_fn = None      # the compiled regions (see _regions)
        self.region_calls = 0       # flags-only verdicts of this signature whose regions were needed
        self.flag_calls = 0         # flags-only verdicts of this signature
        self.full = False           # whether self.fn returns the regions with the flags
        self.region_failed = None   # why the regions stay eager
        # whether the flags-only function prefixes its flags with the fingerprints of the tensors it
        # judged, so that an accepted verdict holds them instead of copies (settings.hold_accepted)
        self.hold = False
        # traced with symbolic sizes: one plan for every shape of a kind (``compiled.plan_for``),
        # compiled once its eager verdicts have taken settings.compile_shapes_after seconds
        self.symbolic = symbolic
        self.kind = None            # a signature's plan: the plan of its kind, once made
        self.kind_key = None        # ... and its kind's key (compiled.plan_for)
        self.compiled_calls = 0
        self._sites_ok = None       # the traced sites last found equal to the eager run's
        self._traces = set()        # every traced site list found equal to an eager run's

    @property
    def ready(self) -> bool:
        if self.failed is not None or self.sites is None:
            return False
        if self.symbolic:
            return True             # made once its kind's eager verdicts took long enough
        if self.policy == "always":
            return True
        # the elements judged, inputs too: a reduction's verdict (cross_entropy: one loss per row) costs
        # what its inputs' size does
        return self.calls > self.settings.eager_calls and self.judged >= self.settings.compile_min_elements

    def learn(self, sites, names, fmts, quant_outputs, ref_device) -> None:
        """Record what an eager run of this signature found: its sites, and per output its
        name, format and whether a quantizer produced it; the reference's device."""
        self.has_quantizer = any(quant_outputs)
        self.names, self.fmts, self.quant_outputs = tuple(names), tuple(fmts), tuple(quant_outputs)
        self.ref_device = ref_device
        self.sites = [(s.label, s.kind, s.fmt, s.limit, s.elements) for s in sites]
        if self.kind is not None and self.kind is not self:
            self.kind.learn(sites, names, fmts, quant_outputs, ref_device)

    # ---- the traced function
    def _core(self, full: bool):
        """The verdict as one function of the signature's tensors, compiled.  With ``full``
        it returns every output's region (and a quantizer output's judgement) beside the
        flags; without, only the flags (what a verdict's status needs): the regions are then
        dead values that the compiled code never writes.  While ``self.whole`` the program is
        traced whole, with tensor guards only; otherwise in pieces around its graph breaks,
        with all of Dynamo's guards."""
        fn = self._function(full)
        # a code object of its own, so that each signature has its own compile cache
        code = fn.__code__
        with _serial_lock:
            _serial[0] += 1
            code = code.replace(co_name=f"numoracle_{'regions' if full else 'verdict'}_{_serial[0]}")
        fn = types.FunctionType(code, fn.__globals__, code.co_name, fn.__defaults__, fn.__closure__)
        options = dict(COMPILE_OPTIONS)
        if self.device == "cpu":
            options.update(float_tiling_options())
            options.update(vector_code_options())
        keep = getattr(torch.compiler, "keep_tensor_guards_unsafe", None)
        if self.symbolic:
            # every guard stays: the shape guards (a size that is a power of two, sizes equal to one
            # another) choose between traces that compute different bounds
            return torch.compile(fn, dynamic=True, fullgraph=self.whole, options=options)
        if keep is not None and self.whole:
            # the plan's key already fixes everything but the tensors that a whole trace depends
            # on (program, parameters, profile, p, modes, policy, formats): Dynamo's guards on
            # globals and closures would only repeat it, on every call.  Not around a graph
            # break: the frame resumed after it takes the value read to the host (cross_entropy's
            # count of kept rows) as a constant, and only its guard makes a new count recompile
            options["guard_filter_fn"] = keep
        return torch.compile(fn, dynamic=False, fullgraph=self.whole, options=options)

    def _call(self, make, tensors):
        """make() compiled and called on tensors: (function, outputs).  A program that cannot
        be traced whole is from then on compiled in pieces (``self.whole``)."""
        fn = make()
        tiling = self.device == "cpu" and bool(float_tiling_options())
        try:
            with float_tiling(tiling), self._codegen():
                return fn, fn(*tensors)
        except Exception as exc:
            if not self.sanitise:
                # another trace, another kernel: compiled with sanitised inputs it may well build
                self.unsanitised_failed = f"{type(exc).__name__}: {exc}"[:2000]
                self.sanitise = True
                return self._call(make, tensors)
            if not self.whole:
                raise
            self.split = f"{type(exc).__name__}: {exc}"[:2000]
            self.whole = False
            self.graphs = False
            fn = make()
            with float_tiling(tiling), self._codegen():
                return fn, fn(*tensors)

    @contextlib.contextmanager
    def _codegen(self):
        """Around every call of a compiled function, any of which may compile (a symbolic plan
        traces again for a power-of-two size): ``_tracing``, and on the CPU Inductor's vector
        code for masks and widenings (``inductor.vector_code``)."""
        with vector_code(self.device == "cpu"), self._tracing():
            yield

    def _tracing(self):
        """While a symbolic plan's function runs (and may trace again for another kind of
        size): Python floats stay constants (only sizes are symbolic), so that labels and
        format constants are not traced as symbols; and a plan traced more than
        ``SYMBOLIC_TRACES`` times (a program that makes Python numbers of its sizes would
        be traced for each) raises, which leaves its kind eager."""
        if not self.symbolic:
            return contextlib.nullcontext()
        import torch._dynamo.config as cfg
        wanted = {"specialize_float": True, "recompile_limit": SYMBOLIC_TRACES, "fail_on_recompile_limit_hit": True}
        return cfg.patch(**{k: v for k, v in wanted.items() if hasattr(cfg, k)})

    def _function(self, full: bool):
        """The verdict's tensor code, uncompiled (``_core`` compiles it; run as it is, it is
        the eager fallback for the regions)."""
        program, params, prof, p, modes, nonfinite = (self.program, self.params, self.prof, self.p,
                                                      self.modes, self.nonfinite)
        sanitise, symbolic = self.sanitise, self.symbolic
        structs, n_in = self.structs, self.n_inputs
        hold = self.hold and not full

        def numoracle_verdict(*tensors):
            args = [t if kind == "tensor" else (t, fmt) for (kind, fmt), t in zip(structs, tensors)]
            ev = evaluate(program, args[:n_in], params, prof, p, nonfinite, traced=True, sanitise=sanitise,
                          symbolic=symbolic)
            decoded = decode_outputs(ev, args[n_in:])
            quant = QZ.judge_tensors(ev.refs, decoded) if any(reg is None for reg in ev.regions) else {}
            outs, flags = [], []
            for j, (reg, y) in enumerate(zip(ev.regions, decoded)):
                if reg is None:             # a quantizer output: its two-step judgement, in every mode
                    centre, lo, hi, qlo, qhi, rejected, unc = quant[j]
                    outs.append((centre, lo, hi, qlo, qhi, rejected, unc))
                    flags += [any_of(rejected), any_of(unc)]
                    continue
                # the rejected masks only feed the flags: a verdict computes them eagerly, from the
                # regions, when they are asked for
                rejected, _ = judge_masks(reg.fmt, reg.centre, reg.fixed, reg.stat, reg.taint, y, modes)
                flags += [any_of(r) for r in rejected] + [any_of(reg.taint)]
                outs.append((reg.centre, reg.fixed, reg.stat, reg.taint))
            # the sites' statistics are not returned (so not computed): the certificate is
            # filled in from an eager run when it is read
            sites = tuple((s.what, s.kind) for s in ev.ctx.sites)
            # every flag in one tensor, so that the verdict waits for the device once: per output
            # (any rejected per mode, any uncertified), then whether any input was non-finite
            flags.append(torch.zeros((), dtype=torch.bool, device=ev.refs[0].c.device) if ev.policy is None
                         else ev.policy)
            flags = torch.stack(flags)
            if full:
                return sites, flags, outs
            if hold:
                # one tensor, read to the host at once: the fingerprints, then the flags
                flags = torch.cat([torch.stack([holding.fingerprint(t) for t in tensors]),
                                   flags.to(torch.int64)])
            return sites, flags
        return numoracle_verdict

    def run(self, inputs, outputs):
        """(judgements, certificate, input policy), or None when this call must be judged
        eagerly.

        The compiled function returns the flags alone at first.  The tensors judged are
        copied (in their own formats), so that the regions, the masks and the explanation,
        computed when first asked for, describe this call even when the caller reuses its
        buffers; an accepted verdict holds them instead, with their fingerprints
        (settings.hold_accepted)."""
        tensors = []
        for x in list(inputs) + list(outputs):
            tensors += struct(x)[1]
        if (not self.full and self.regions_fn is not None and self.region_calls >= REGIONS_WANTED
                and 2 * self.region_calls >= self.flag_calls):
            # most verdicts of this signature read their regions (a fuzzing loop scoring every
            # case, a campaign measuring margins): one function returning them beats two
            self.fn, self.full, self.graphs = self.regions_fn, True, False
        try:
            if self.fn is None:
                self.hold = self.settings.hold_accepted and holding.holdable(tensors)
                self.graphs = not self.symbolic and graphs.wanted(self.settings, self.device, self.judged)
                self.fn, (sites, flags, *regions) = self._call(lambda: self._core(full=False), tensors)
                if self.graphs and self.whole:
                    try:
                        self.fn = graphs.Captured(self.fn, tensors)
                    except Exception as exc:   # the compiled function still runs, launched as it is
                        self.graphs = False
                        warnings.warn(f"numoracle: {self.program.name}'s compiled verdict runs without a CUDA "
                                      f"graph; capturing it failed ({brief(type(exc).__name__ + ': ' + str(exc))}).",
                                      RuntimeWarning, stacklevel=4)
            else:
                with self._codegen():
                    sites, flags, *regions = self.fn(*tensors)
            # a signature's sites are checked once (a value read to the host, a count, may name
            # itself in a label and change between calls); a symbolic plan's once per trace
            new_trace = (sites != self._sites_ok and sites not in self._traces) if self.symbolic \
                else not self.sites_checked
            if new_trace:
                try:
                    check_sites(sites, self.sites)
                except RuntimeError:
                    if not self.symbolic:
                        raise
                    # another trace of a symbolic plan (a size that is a power of two takes exact
                    # scalings): this call is judged eagerly, which teaches the plan its sites
                    return None
                self._traces.add(sites)
                self.sites_checked = True
            self._sites_ok = sites
            self.compiled_calls += 1
            # a symbolic plan is compared again on each new trace and on its 2nd, 4th, 8th, ...
            # call (other shapes)
            again = self.symbolic and (new_trace or self.compiled_calls & (self.compiled_calls - 1) == 0)
            if not self.compared or again:
                # fully on the first call with finite inputs: with a non-finite one only the flag
                # that says so (the verdict is then judged eagerly, and the values of code traced
                # without sanitised inputs are meaningless)
                nonfinite = bool(flags[-1])
                self._compare_with_eager(tensors, flags, regions, policy_only=nonfinite)
                self.compared = not nonfinite
            full = self.full
            # copied while the device computes the flags (held, an accept is not copied, and any
            # other verdict is copied after the read); the flags are read at once (a CUDA
            # graph's next replay reuses their buffer)
            hold = self.hold and not full
            kept = None if hold else holding.copies(tensors)
            values = flags.tolist()
            prints = values[:len(tensors)] if hold else None
            flags = [bool(v) for v in values[len(tensors) if hold else 0:]]
            if hold and any(flags):
                # not a plain accept: its explanation is what is read, copies describe this call
                kept, prints = holding.copies(tensors), None
            kept = tensors if kept is None else kept
            self.flag_calls += not full
        except Exception as exc:      # never let the fast path change a verdict: judge eagerly
            self._fail(exc)
            return None
        if self._any_uncertified(flags):
            # the traced calculus takes every general path; the eager one certifies some elements
            # it cannot (a value certainly past its format's range is that infinity, design §4.1),
            # and elements it leaves uncertified are rare: they are judged eagerly
            return None
        policy = "finite"
        if flags[-1]:
            if self.nonfinite == "error":
                return None               # the eager path raises the usual message
            policy = NONFINITE_POLICY_TEXT
        guard = holding.guard(self.program.name, kept, prints)
        region = (lambda: regions[0]) if full else self._regions(kept, flags, guard)
        if not full and any(flags[:-1]):
            # a verdict that is not a plain accept reads its regions before it is given (a reject's
            # confirmation and explanation read them anyway): computed again, they must give its
            # flags.  A miscompile that the first call's flags did not show (radii too small, where
            # that call's values lay near the centres) is caught here, and the signature judged eagerly
            try:
                region()
            except Mismatch as exc:
                self._fail(exc)
                return None
        args = [t if kind == "tensor" else (t, fmt) for (kind, fmt), t in zip(self.structs, kept)]
        eager = self._eager(args[:self.n_inputs], args[self.n_inputs:], guard)
        judged = []
        at = 0
        for j, (name, fmt, t) in enumerate(zip(self.names, self.fmts, kept[self.n_inputs:])):
            kernel = _decoder(t, fmt, self.ref_device, guard)
            shape = tuple(t.shape)
            part = functools.partial(_part, region, j)
            if self.quant_outputs[j]:
                n = 2
                judged.append(OutputJudgement(
                    name=name, fmt=fmt, shape=shape, parts=_QuantizerParts(kernel, part),
                    flags=tuple(flags[at:at + n]), detail=functools.partial(_detail, eager, j)))
            else:
                n = len(self.modes) + 1
                judged.append(RegionJudgement(
                    name=name, fmt=fmt, shape=shape, modes=self.modes, device=self.ref_device, kernel=kernel,
                    region=functools.partial(_region_tensors, part), flags=list(flags[at:at + n])))
            at += n
        return judged, Certificate(inputs=policy, compute=lambda: eager()[0]), policy

    def _any_uncertified(self, flags) -> bool:
        """Whether a call's flags (per output: any rejected per mode, or a quantizer's one, then
        any uncertified) say an element is uncertified."""
        at = 0
        for quant in self.quant_outputs:
            at += 2 if quant else len(self.modes) + 1
            if flags[at - 1]:
                return True
        return False

    def _compare_with_eager(self, tensors, flags, regions, policy_only=False) -> None:
        """The first compiled call against the same tensor code run eagerly: equal flags, and
        (where the compiled function returns them) equal masks and bounds, centres and radii
        within float64 evaluation-order differences."""
        _, want, *want_regions = self._function(full=self.full)(*tensors)
        if policy_only:
            flags, want, regions = flags[-1:], want[-1:], []
        compare(flags, want, regions, want_regions)

    def _fail(self, exc) -> None:
        self.failed = f"{type(exc).__name__}: {exc}"
        warnings.warn(f"numoracle: judging {self.program.name} eagerly; compiling its verdict failed "
                      f"({brief(self.failed)}). Judge with settings(compile='never') to skip compiling.",
                      RuntimeWarning, stacklevel=4)

    def _regions(self, kept, flags, guard=None):
        """A function computing, once, every output's region from the verdict's own copies.
        The same tensor code, run eagerly; compiled once this signature's regions have been
        needed as often as a verdict is judged eagerly before it is compiled (an explained
        reject costs no compile; a campaign that reads every reject's masks gets them
        compiled).  Its flags must equal the ones the verdict was given."""
        done = []

        def get():
            if not done:
                if guard is not None:
                    guard()
                with _serial_lock:
                    self.region_calls += 1
                    compile_now = self.regions_fn is None and self.region_failed is None and (
                        self.region_calls > (1 if self.policy == "always" else self.settings.eager_calls))
                try:
                    if compile_now:
                        self.regions_fn, (_, again, outs) = self._call(lambda: self._core(full=True), kept)
                        # its first call against the same code run eagerly, as a verdict's is
                        _, want, *want_regions = self._function(full=True)(*kept)
                        compare(again, want, [outs], want_regions)
                    else:
                        with self._codegen():
                            _, again, outs = (self.regions_fn or self._function(full=True))(*kept)
                except Exception as exc:
                    if self.regions_fn is None and not compile_now:
                        raise
                    self.region_failed = f"{type(exc).__name__}: {exc}"
                    self.regions_fn = None
                    warnings.warn(f"numoracle: computing {self.program.name}'s regions eagerly; the compiled "
                                  f"function failed ({brief(self.region_failed)}).", RuntimeWarning, stacklevel=2)
                    _, again, outs = self._function(full=True)(*kept)
                again = [bool(v) for v in again.tolist()]
                if again != flags:
                    raise Mismatch(
                        f"numoracle: {self.program.name}'s regions give the flags {again} where its verdict "
                        f"had {flags}; this is a bug in numoracle's compiled path or in torch.compile, please "
                        f"report it. settings(compile='never') judges eagerly.")
                done.append(outs)
            return done[0]
        return get

    def _eager(self, inputs, outputs, guard=None):
        """What the compiled graph leaves out, from one eager run when first asked for: (the
        certificate's site records, the quantizer outputs' judgements with their explanation
        details)."""
        done = []

        def get():
            if not done:
                if guard is not None:
                    guard()
                ev = evaluate(self.program, inputs, self.params, self.prof, self.p, self.nonfinite)
                quant = QZ.judge(ev.refs, decode_outputs(ev, outputs), ev.names) if self.has_quantizer else {}
                done.append((ev.ctx.sites, quant))
            return done[0]
        return get


def _region_tensors(part) -> RegionTensors:
    centre, fixed, stat, taint = part()
    return RegionTensors(centre=centre, fixed=fixed, stat=stat, taint=taint)


def _detail(eager, j, i):
    return eager()[1][j].detail(i)
