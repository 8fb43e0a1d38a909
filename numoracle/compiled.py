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
eagerly on devices other than those in ``QUANTIZER_DEVICES``.

On CUDA and the CPU (``FLAGS_ONLY_DEVICES``) the compiled function returns the flags
alone (any rejected, any uncertified, any non-finite input): a verdict's
status.  The regions, masks and explanation are computed from the verdict's
own copies of the tensors when first asked for (``Plan._regions``; an accepted
verdict holds the caller's tensors instead, with fingerprints that the compiled
function computes as it reads them: ``HOLD_ACCEPTED``); a
signature whose verdicts mostly need them (a fuzzing loop scoring every case)
switches to the compiled regions function as its verdict.  On CUDA, where a
small verdict's time is the host launching a dozen kernels, the flags
function runs as a CUDA graph (``NUMORACLE_CUDAGRAPHS``: ``auto``, the default, for signatures
of at most ``CUDAGRAPH_MAX_ELEMENTS`` elements, inputs and outputs; ``always``;
``never``).  numoracle captures it itself, once (``_Captured``): a verdict then
copies its tensors into the graph's and replays it, with none of torch.compile's
per-call wrappers (on the H200, rms_norm at 1e6: 0.16 ms per verdict, against
0.26-0.50 ms with Inductor's CUDA-graph trees).  A graph keeps its buffers (and a
copy of its inputs) between calls, hence the size limit.
"""

from __future__ import annotations

import contextlib
import functools
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
# 2**25: rms_norm and softmax at 1e7 (2e7 judged elements) are captured.  rms_norm at 1e7 on the
# H200, interleaved: 0.425 and 0.448 ms per verdict launched, 0.360 and 0.363 captured
# (docs/results/2026-11-30-h200-variants-cg-1e7.json)
CUDAGRAPH_MAX_ELEMENTS = 1 << 25
# how a flags function becomes a CUDA graph: "capture" (numoracle captures the compiled function
# once, on its own copies of the inputs: ``_Captured``) or "inductor" (Inductor's CUDA-graph trees,
# ``triton.cudagraphs``, whose replay checks and bookkeeping run in Python on every call)
CUDAGRAPH_BY = "capture"
CAPTURE_DEVICES = {"cuda"}      # device types where numoracle captures graphs itself
# device types where the compiled verdict returns the flags alone (regions computed when asked
# for).  The CPU too since float tiling (FLOAT_TILING_CPU) and held tensors (HOLD_ACCEPTED): on
# one core, interleaved, ms per verdict with the regions returned / flags alone, at 1e6 and 1e7:
# softmax 47 / 42 and 650 / 423, the quantizer 55 / 37 and 720-917 / 370, rms_norm, layer_norm
# and cross_entropy within the noise of each other (docs/results/2026-11-30-cpu-flags-only-
# vs-regions.txt).  At 1e7 the regions' float64 tensors, written and page-faulted, cost more than
# the dead arithmetic that Inductor's C++ recomputes in the flags' loops; before float tiling
# that arithmetic made rms_norm at 1e6 slower flags alone (63.9 ns/element against 52.2)
FLAGS_ONLY_DEVICES = {"cuda", "cpu"}
# whether a flags function reduces each mask along its last axis first (then over rows).  A
# reduction per row has the iteration space of the loops that compute the mask, so a compiler
# may fuse the rounding-interval check into them instead of storing the regions for a flat
# reduction of its own.  Off: in Inductor's C++ (rms_norm, 16x4096) the check's loop stays
# flat, and stores its masks for a row reduction of their own; not yet measured on a GPU
# (benchmarks/variants.py --variant rows:compiled.FLAGS_BY_ROW=True)
FLAGS_BY_ROW = False


def _any(mask: torch.Tensor) -> torch.Tensor:
    """Whether any element of a traced mask is set (``FLAGS_BY_ROW``: row by row first)."""
    if FLAGS_BY_ROW and mask.ndim >= 2:
        return mask.any(dim=-1).any()
    return mask.any()


# device types where a verdict traced under nonfinite="error" zeroes its non-finite inputs and
# taints what depends on them (under "uncertified" it always does): none.  Elsewhere the inputs
# are used as given: a non-finite one sets the policy flag, and the verdict is then judged
# eagerly, which raises, so what the compiled code computed from it is never read.  The taint
# costs a row reduction that splits the loops after it.  Per verdict without it, on the H200 at
# 1e8: softmax 3.01 -> 2.53 ms, cross_entropy 2.44 -> 1.56, quantizer 2.74 -> 2.41, layer_norm
# 3.24 -> 3.62 (docs/results/2026-11-30-h200-variants-sanitise-1e8.json); on one core of this
# project's CPU at 1e6, interleaved: layer_norm 74 -> 60 ms, softmax 52 -> 44, cross_entropy
# 28 -> 20, and with FLOAT_TILING_CPU rms_norm 51 -> 41 and the quantizer 56 -> 54 (without it
# those two were slower unsanitised, 32-lane tiled: -cpu-variants-sanitise-1e6.txt).  A verdict
# whose unsanitised code fails to compile (Inductor's Triton for rms_norm at 1e8 on the H200: a
# loop-carried bool turned int8) is compiled sanitised instead (Plan.unsanitised_failed says why).
SANITISE_DEVICES: set = set()

# whether an accepted flags-only verdict holds the caller's tensors (with a fingerprint of each,
# computed by the compiled function as it reads them) instead of copies of them.  Its regions,
# kernel values and certificate are computed from those tensors when first asked for, after
# their fingerprints are checked (``TensorsChanged`` if the caller overwrote one meanwhile).  A
# verdict that rejects, is uncertified or saw a non-finite input copies them, as before: its
# explanation is what is read.  The copy was 9% of the H200's time for a verdict at 1e8, and a
# launch of 9-33 us on the device at 1e6.
HOLD_ACCEPTED = True
# the integer type whose values are a tensor's bits, per element size (``_fingerprint``)
_BITS = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def _as_bits(t: torch.Tensor):
    """t's elements as integers of their size (a view), or None where there are none (complex)."""
    if t.is_complex() or t.element_size() not in _BITS:
        return None
    return t.view(_BITS[t.element_size()])


def _fingerprint(t: torch.Tensor) -> torch.Tensor:
    """An int64 that a change of t's bits almost surely changes: the sum of each element's bit
    pattern times a weight cycling with its position (so that moved values count too), along
    the last axis first, where a verdict's row loops read t."""
    bits = _as_bits(t).to(torch.int64)
    if bits.dim() == 0:
        return bits
    cycle = torch.arange(bits.shape[-1], device=t.device, dtype=torch.int64) % 61 + 1
    rows = (bits * cycle).sum(-1).reshape(-1)
    cycle = torch.arange(rows.numel(), device=t.device, dtype=torch.int64) % 59 + 1
    return (rows * cycle).sum()


def _fingerprints(tensors) -> list:
    """The tensors' fingerprints, read to the host."""
    return torch.stack([_fingerprint(t) for t in tensors]).tolist()


def _holdable(tensors) -> bool:
    """Whether the tensors have fingerprints: integer-viewable, on one device."""
    return (bool(tensors) and len({t.device for t in tensors}) == 1
            and all(_as_bits(t) is not None for t in tensors))


def _guard(name, tensors, prints):
    """A function that raises ``TensorsChanged`` once the tensors no longer have the
    fingerprints ``prints``; None where the verdict keeps copies (``prints`` None)."""
    if prints is None:
        return None

    def guard():
        from .errors import TensorsChanged
        now = _fingerprints(tensors)
        changed = [i for i, (a, b) in enumerate(zip(now, prints)) if a != b]
        if changed:
            which = (f"tensors {', '.join(map(str, changed))} were" if len(changed) > 1
                     else f"tensor {changed[0]} was")
            raise TensorsChanged(
                f"numoracle: a tensor that {name}'s accepted verdict judged changed after check() "
                f"returned ({which} overwritten; inputs then outputs, counted from 0). Its "
                f"regions, kernel values and certificate are computed from the tensors when "
                f"first asked for: read them before reusing the buffers, pass check() copies, "
                f"or set numoracle.compiled.HOLD_ACCEPTED = False to have every verdict copy them.")
    return guard


# a flags-only signature whose verdicts mostly need their regions (at least this many, and at
# least half of them) switches to its compiled regions function as its verdict
REGIONS_WANTED = 3

# device types where compiled quantizer judgements were checked equal to eager ones
# (scripts/compiled_parity.py --quantizer-devices); elsewhere they are judged eagerly
QUANTIZER_DEVICES = {"cpu", "cuda"}

# Inductor options of every compiled verdict.  The calculus rounds by casts (formats.round,
# representable): a compiled cast must round as torch's eager cast does.
# - emulate_precision_casts: otherwise Inductor may keep a value cast to bf16/fp16 in fp32
#   inside a fused kernel, skipping its rounding;
# - pattern_matcher off: torch 2.11's pattern ``pointless_convert`` replaces any chain of two
#   float casts by one, so x.to(float32).to(float64) became x (on the H200, 1.57 million of
#   2.35 million inputs of scripts/cuda_rounding_check.py rounded wrongly; none with it off).
#   The patterns rewrite graphs for AMP, attention and matrix products, none of which a verdict
#   has (rms_norm and softmax at 1e8 on the H200: 3.60 and 3.78 ms with them, 3.69 and 3.83 without).
COMPILE_OPTIONS = {"emulate_precision_casts": True, "pattern_matcher": False}


# Whether a CPU verdict is compiled with ``cpu_options`` (256-bit vectors beside 512-bit ones).
# Off: built that way, GCC 12's code for one graph lost its float64 -> float32 -> float64
# roundings (the quantizer's code bounds with unsanitised inputs: the source has four
# convert<float,1,double,2>, the binary no vcvtpd2ps, and all 2048 bounds came out unrounded),
# where Inductor's default 512-bit build of the same graph rounds (docs/results/
# 2026-11-30-cpu-unsanitised-inputs-probe.txt).  The calculus rounds by such casts everywhere,
# so a build that may drop them is not used, at the cost of its 1.1-1.6x
# (benchmarks/variants.py --variant s256:compiled.NARROW_CPU_VECTORS=True measures it).
NARROW_CPU_VECTORS = False


def cpu_options() -> dict:
    """Inductor options of a verdict compiled for the CPU: 256-bit vectors where the CPU also
    has 512-bit ones.  A verdict's loops hold hundreds of float64 values per element and are
    tiled by their narrowest dtype (bf16: 32 lanes with AVX-512, 4 registers per float64
    value), so they spill; with AVX2 they are tiled 16 wide.  One core of this project's AMD
    EPYC, per verdict at 1e7, best of 5, twice interleaved (benchmarks/variants.py
    --variant s256:inductor.cpp.simdlen=256): rms_norm 626 -> 479 ms, layer_norm 972 -> 795,
    softmax 857 -> 795, cross_entropy 406 -> 280, quantizer 749 -> 632.  Nothing where there
    is no 256-bit ISA beside a 512-bit one (Inductor would not vectorise at all)."""
    try:
        from torch._inductor import cpu_vec_isa
        widths = {isa.bit_width() for isa in cpu_vec_isa.valid_vec_isa_list()}
    except Exception:                  # another torch's internals: keep Inductor's choice
        return {}
    return {"cpp.simdlen": 256} if {256, 512} <= widths else {}


# Whether a CPU verdict's loops are tiled by float32's vector width where every loop body of a
# kernel holds bf16 or fp16 values.  Inductor tiles such a kernel by the 16-bit width (32 lanes
# with AVX-512; TilingSelect.select_tiling), so each of a verdict's hundreds of float64 values
# takes four registers and the loops spill; whether a kernel is tiled so depends on whether
# some loop body of it happens to hold no 16-bit value (adding one float64 term to the sums'
# slack flipped rms_norm's main loop to 32 lanes: 51 -> 69 ms per verdict at 1e6, one core).
# numoracle asks for float32's width (16 lanes) while it compiles (``_float_tiling``), and
# compiles with cpp.simdlen=512 (the width Inductor picks anyway) so that its cached kernels
# are not shared with those of other settings.
FLOAT_TILING_CPU = True
_tiling_lock = threading.RLock()


def _float_tiling_options() -> dict:
    """The Inductor options that go with ``_float_tiling``: where the CPU's widest vectors are
    512 bits, cpp.simdlen=512 (what Inductor picks by itself), else none (and no patch)."""
    try:
        from torch._inductor import cpu_vec_isa
        from torch._inductor.codegen import cpp as C
        widths = {isa.bit_width() for isa in cpu_vec_isa.valid_vec_isa_list()}
        C.TilingSelect.select_tiling, C.get_loop_body_lowp_fp
    except Exception:                  # another torch's internals: keep Inductor's choice
        return {}
    return {"cpp.simdlen": 512} if widths and max(widths) == 512 else {}


@contextlib.contextmanager
def _float_tiling(active: bool):
    """While a CPU verdict compiles: Inductor's tiling sees no 16-bit dtype in its loop bodies
    (only the choice of vector width; the code computes the same values)."""
    if not active:
        yield
        return
    from torch._inductor.codegen import cpp as C
    select, lowp = C.TilingSelect.select_tiling, C.get_loop_body_lowp_fp

    def select_as_float(self, *args, **kwargs):
        C.get_loop_body_lowp_fp = lambda body: (None, True)
        try:
            return select(self, *args, **kwargs)
        finally:
            C.get_loop_body_lowp_fp = lowp
    with _tiling_lock:
        C.TilingSelect.select_tiling = select_as_float
        try:
            yield
        finally:
            C.TilingSelect.select_tiling = select


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


def _cudagraphs(device: str, elements: int) -> bool:
    """Whether the flags function of a signature on ``device`` runs as a CUDA graph."""
    raw = os.environ.get("NUMORACLE_CUDAGRAPHS", "auto").strip().lower()
    if raw not in ("auto", "always", "never"):
        raise InvalidArgument(f"NUMORACLE_CUDAGRAPHS={raw!r}: expected auto, always or never; unset it for auto.")
    if device != "cuda" or raw == "never":
        return False
    return raw == "always" or elements <= CUDAGRAPH_MAX_ELEMENTS


def clear() -> None:
    """Forget every plan (and its compiled function)."""
    with _lock:
        _plans.clear()


_COMPILER: list = []


def _can_compile() -> bool:
    """torch.compile with Inductor's exact casts (``emulate_precision_casts``) is available."""
    if not _COMPILER:
        try:
            import torch._inductor.config as cfg
            _COMPILER.append(hasattr(cfg, "emulate_precision_casts"))
        except Exception:            # a torch without Inductor
            _COMPILER.append(False)
    return _COMPILER[0]


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
    judged = sum(t.numel() for t in tensors)
    with _lock:
        plan = _plans.get(key)
        if plan is None:
            plan = _plans[key] = Plan(program, params, prof, p, tuple(modes), nonfinite, structs,
                                      len(inputs), elements, pol, tensors[0].device.type if tensors else "cpu",
                                      judged)
        plan.calls += 1
    return plan


def _decoder(t, fmt, device, guard=None):
    """A function that decodes a kernel output (``t``: the verdict's own copy, or the
    caller's tensor checked by ``guard``, in the kernel's format) as ``check.evaluate`` does."""
    def decode():
        if guard is not None:
            guard()
        y = F.decode(t, fmt)
        return y if y.device == device else y.to(device)
    return decode


def _judged(name, fmt, kernel, region, shape, device, modes, flags):
    """A ``check.Judged`` from a compiled verdict's flags (any rejected per mode,
    any uncertified): its region (``region()`` -> centre, fixed, stat, taint) is
    computed when first needed, and its rejected masks from it by the same
    ``judge_masks`` (all False, without a pass, where the flags say so)."""
    from .check import Judged, judge_masks
    out = Judged(name, fmt, kernel, None, None, None, None, modes, (), None, flags=list(flags), lazy=region,
                 shape=shape)

    def mask(k):
        if not flags[k]:
            return lambda: torch.zeros(shape, dtype=torch.bool, device=device)
        return lambda: judge_masks(fmt, *out.region(), out.taint_mask(), out.kernel(), (modes[k],))[0][0]
    out.rejected = tuple(mask(k) for k in range(len(modes)))
    return out


def _part(region, j, k=None):
    """Output j's part of a verdict's regions (``region()``): all of it, or its k-th tensor."""
    r = region()[j]
    return r if k is None else r[k]


def _detail(eager, j, i):
    return eager()[1][j].detail(i)


def _quantizer_judgement(name, fmt, kernel, part, detail, shape, flags):
    """A quantizer output's ``OutputJudgement`` from a compiled verdict's flags (any
    rejected, any uncertified); ``part(k)`` is the k-th of its judgement's tensors
    (centre, lo, hi, qlo, qhi, rejected, uncertified), computed when first needed."""
    from .verdict import OutputJudgement
    return OutputJudgement(
        name, fmt, kernel, lambda: part(0), None, None, None, None, lambda: part(5), lambda: part(6),
        lambda: ~torch.isfinite(kernel()) & ~part(6), lambda: part(5), detail=detail,
        bounds=lambda: tuple(part(k) for k in range(1, 5)), shape=shape, flags=tuple(flags))


class _Captured:
    """A compiled flags function (already run once: compiled and tuned) captured as a CUDA
    graph on copies of its first arguments.  A call copies its arguments into those (one
    launch per dtype) and replays the graph; it returns a copy of the flags, ordered after
    the replay, so that a later call cannot overwrite them before they are read.  Calls
    from several threads (or streams) take turns: each waits for the previous replay."""

    def __init__(self, fn, tensors):
        self.device = tensors[0].device
        self.lock = threading.Lock()
        with torch.cuda.device(self.device):
            self.inputs = [t.clone() for t in tensors]
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):       # a warm-up off the capture: lazy state, allocator
                fn(*self.inputs)
            torch.cuda.current_stream().wait_stream(side)
            self.graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(self.graph):
                self.whats, self.flags = fn(*self.inputs)
            self.done = torch.cuda.Event()
            self.done.record()

    def __call__(self, *tensors):
        with self.lock, torch.cuda.device(self.device):
            torch.cuda.current_stream().wait_event(self.done)
            _copy_into(self.inputs, tensors)
            self.graph.replay()
            flags = self.flags.clone()
            self.done.record()
        return self.whats, flags


def _close(a: torch.Tensor, b: torch.Tensor, radius: torch.Tensor | None = None) -> bool:
    """Equal up to float64 evaluation order: within 2**-40 relative, or, for a centre,
    within 2**-12 of its region's worst-case radius; non-finite values exactly.  A centre
    can lose all relative accuracy to cancellation (layer_norm's x - mean near the mean: its
    mean summed in another order moved centres by up to 7e-13 relative at 16 rows), while
    its radius holds every rounding of the reference (at least a unit roundoff of the
    operands of each fp32 step): a float64 reordering moves the centre by about 2**-41 of the
    operands, far below 2**-12 of the radius, and a lost fp32 rounding by up to half an fp32
    step, a fair part of it."""
    fin = torch.isfinite(a) & torch.isfinite(b)
    tol = 2.0 ** -40 * (a.abs() + b.abs())
    if radius is not None:
        tol = tol + 2.0 ** -12 * torch.where(torch.isfinite(radius), radius, torch.zeros_like(radius))
    near = (a - b).abs() <= tol
    same = (a == b) | (a.isnan() & b.isnan())
    return bool(torch.where(fin, near, same).all())


def _brief(message: str, head: int = 200, tail: int = 500) -> str:
    """A compiler's error for a warning: its start (the exception's type) and its end, where
    Inductor and Triton say what went wrong (a subprocess's traceback comes between)."""
    message = message.strip()
    if len(message) <= head + tail + 5:
        return message
    return f"{message[:head]} ... {message[-tail:]}"


def _copy_into(dsts, srcs) -> None:
    """dst.copy_(src) for each pair (of one dtype), as their bits: one launch per element size
    on a GPU (torch's fused copy takes one dtype at a time, and falls back to a launch per
    tensor on a mixed list).  As bits, fp8 values copy as fast as bytes: the quantizer's
    fused copy at 1e6 (bf16, fp8, fp32) took 33 us of the H200's time as its own dtypes."""
    groups: dict = {}
    for d, s in zip(dsts, srcs):
        bits = _as_bits(s) if s.dtype == d.dtype else None
        if bits is not None:
            d, s = _as_bits(d), bits
        ds, ss = groups.setdefault(s.dtype, ([], []))
        ds.append(d)
        ss.append(s)
    for ds, ss in groups.values():
        torch._foreach_copy_(ds, ss)


def _copies(tensors) -> list:
    """Copies of the tensors, in one launch per dtype where they are on a GPU."""
    if not tensors or tensors[0].device.type != "cuda":
        return [t.clone() for t in tensors]
    out = [torch.empty_like(t) for t in tensors]
    _copy_into(out, tensors)
    return out


class Plan:
    """One signature: its eager facts (site labels, output names) and, once
    compiled, the compiled function."""

    def __init__(self, program, params, prof, p, modes, nonfinite, structs, n_inputs, elements, pol, device,
                 judged):
        self.program, self.params, self.prof, self.p = program, dict(params), prof, p
        self.modes, self.nonfinite, self.structs, self.n_inputs = modes, nonfinite, structs, n_inputs
        self.elements, self.policy = elements, pol
        # every judged tensor's elements: a CUDA graph keeps a copy of them all (and its
        # intermediates), so its size limit counts inputs too (cross_entropy's 1e8 logits
        # have 24k outputs)
        self.judged = judged
        self.calls = 0
        self.sites = None          # [(label, kind, fmt, limit, elements)] from an eager run
        self.failed = None         # why this signature stays eager
        self.has_quantizer = False
        self.device = device
        self.fn = None             # the compiled verdict (flags only)
        self.graphs = False        # whether it runs as a CUDA graph
        self.whole = True          # whether the program traces whole (no graph break)
        self.split = None          # why it does not (the whole trace's error)
        # whether its traced inputs are sanitised (SANITISE_DEVICES), and, where they are only
        # because the unsanitised code failed to compile, that error
        self.sanitise = nonfinite != "error" or device in SANITISE_DEVICES
        self.unsanitised_failed = None
        self.sites_checked = False  # the traced sites were compared with the eager run's
        self.compared = False       # a compiled call was compared with the same code run eagerly
        self.regions_fn = None     # the compiled regions (see _regions)
        self.region_calls = 0      # flags-only verdicts of this signature whose regions were needed
        self.flag_calls = 0        # flags-only verdicts of this signature
        self.full = False          # whether self.fn returns the regions with the flags
        self.region_failed = None  # why the regions stay eager
        # whether the flags-only function prefixes its flags with the fingerprints of the tensors
        # it judged, so that an accepted verdict holds them instead of copies (HOLD_ACCEPTED)
        self.hold = False

    @property
    def ready(self) -> bool:
        if self.failed is not None or self.sites is None:
            return False
        if self.policy == "always":
            return True
        return self.calls > AUTO_EAGER_CALLS and self.elements >= AUTO_MIN_ELEMENTS

    def learn(self, sites, names, fmts, quant_outputs, ref_device) -> None:
        """Record what an eager run of this signature found: its sites, and per
        output its name, format and whether a quantizer produced it; the
        reference's device."""
        has_quantizer = any(quant_outputs)
        self.has_quantizer = has_quantizer
        self.names, self.fmts, self.quant_outputs = tuple(names), tuple(fmts), tuple(quant_outputs)
        self.ref_device = ref_device
        if has_quantizer and self.device not in QUANTIZER_DEVICES:
            self.failed = f"quantizer outputs are judged eagerly on {self.device}"
            return
        self.sites = [(s.label, s.kind, s.fmt, s.limit, s.elements) for s in sites]

    # ---- the traced function
    def _core(self, full: bool, graphs: bool = False):
        """The verdict as one function of the signature's tensors, compiled.  With
        ``full`` it returns every output's region (and a quantizer output's
        judgement) beside the flags; without, only the flags (what a verdict's
        status needs): the regions are then dead values that the compiled code
        never writes.  While ``self.whole`` the program is traced whole, with
        tensor guards only (and as a CUDA graph with ``graphs``); otherwise in
        pieces around its graph breaks, with all of Dynamo's guards."""
        fn = self._function(full)
        # a code object of its own, so that each signature has its own compile cache
        code = fn.__code__
        with _lock:
            _serial[0] += 1
            code = code.replace(co_name=f"numoracle_{'regions' if full else 'verdict'}_{_serial[0]}")
        fn = types.FunctionType(code, fn.__globals__, code.co_name, fn.__defaults__, fn.__closure__)
        options = dict(COMPILE_OPTIONS)
        if self.device == "cpu" and NARROW_CPU_VECTORS:
            options.update(cpu_options())
        elif self.device == "cpu" and FLOAT_TILING_CPU:
            options.update(_float_tiling_options())
        keep = getattr(torch.compiler, "keep_tensor_guards_unsafe", None)
        if keep is not None and self.whole:
            # the plan's key already fixes everything but the tensors that a whole trace depends
            # on (program, parameters, profile, p, modes, policy, formats): Dynamo's guards on
            # globals and closures would only repeat it, on every call (a fifth of a small
            # verdict's host time).  Not around a graph break: the frame resumed after it takes
            # the value read to the host (cross_entropy's count of kept rows) as a constant,
            # and only its guard makes a new count recompile instead of reusing the old one
            options["guard_filter_fn"] = keep
        if graphs and self.whole and CUDAGRAPH_BY == "inductor":
            # a CUDA graph only for a program traced whole: around a graph break, the pieces
            # replay slower than they launch
            options["triton.cudagraphs"] = True
        return torch.compile(fn, dynamic=False, fullgraph=self.whole, options=options)

    def _call(self, make, tensors):
        """make() compiled and called on tensors: (function, outputs).  A program that
        cannot be traced whole is from then on compiled in pieces (``self.whole``)."""
        fn = make()
        tiling = (self.device == "cpu" and FLOAT_TILING_CPU and not NARROW_CPU_VECTORS
                  and bool(_float_tiling_options()))
        try:
            with _float_tiling(tiling):
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
            with _float_tiling(tiling):
                return fn, fn(*tensors)

    def _function(self, full: bool):
        """The verdict's tensor code, uncompiled (``_core`` compiles it; run as it
        is, it is the eager fallback for the regions)."""
        from .check import evaluate, judge_masks
        from .oracles import quantizer as QZ
        program, params, prof, p, modes, nonfinite = (self.program, self.params, self.prof, self.p,
                                                      self.modes, self.nonfinite)
        sanitise = self.sanitise
        structs, n_in = self.structs, self.n_inputs
        hold = self.hold and not full

        def numoracle_verdict(*tensors):
            args = [t if kind == "tensor" else (t, fmt) for (kind, fmt), t in zip(structs, tensors)]
            refs, ctx, policy, decoded, names, regions = evaluate(
                program, args[:n_in], args[n_in:], params, prof, p, nonfinite, traced=True,
                sanitise=sanitise)
            quant = QZ.judge_tensors(refs, decoded) if any(reg is None for reg in regions) else {}
            outs, flags = [], []
            for j, (reg, y) in enumerate(zip(regions, decoded)):
                if reg is None:             # a quantizer output: its two-step judgement, in every mode
                    centre, lo, hi, qlo, qhi, rejected, unc = quant[j]
                    outs.append((centre, lo, hi, qlo, qhi, rejected, unc))
                    flags += [_any(rejected), _any(unc)]
                    continue
                # the rejected masks only feed the flags: a verdict computes them eagerly, from the
                # regions, when they are asked for
                rejected, _ = judge_masks(reg.fmt, reg.centre, reg.fixed, reg.stat, reg.taint, y, modes)
                flags += [_any(r) for r in rejected] + [_any(reg.taint)]
                outs.append((reg.centre, reg.fixed, reg.stat, reg.taint))
            # the sites' statistics are not returned (so not computed): the certificate is
            # filled in from an eager run when it is read
            whats = tuple((s.what, s.kind) for s in ctx.sites)
            # every flag in one tensor, so that the verdict waits for the device once: per output
            # (any rejected per mode, any uncertified), then whether any input was non-finite
            flags.append(torch.zeros((), dtype=torch.bool, device=refs[0].c.device) if policy is None
                         else policy)
            flags = torch.stack(flags)
            if full:
                return whats, flags, outs
            if hold:
                # one tensor, read to the host at once: the fingerprints, then the flags
                flags = torch.cat([torch.stack([_fingerprint(t) for t in tensors]), flags.to(torch.int64)])
            return whats, flags
        return numoracle_verdict

    def run(self, inputs, outputs):
        """(outputs as ``check.Judged``, certificate, input policy), or None
        when this call must be judged eagerly.

        On a device in ``FLAGS_ONLY_DEVICES`` the compiled function returns the
        flags alone, elsewhere the regions too.  The tensors judged are copied
        (in their own formats: a quarter of the float64 values' size for bf16),
        so that the regions, the masks and the explanation, computed when first
        asked for, describe this call even when the caller reuses its buffers;
        an accepted flags-only verdict holds them instead, with their
        fingerprints (``HOLD_ACCEPTED``)."""
        from .certificates import Certificate
        from .check import NONFINITE_POLICY_TEXT
        tensors = []
        for x in list(inputs) + list(outputs):
            tensors += _struct(x)[1]
        if (not self.full and self.regions_fn is not None and self.region_calls >= REGIONS_WANTED
                and 2 * self.region_calls >= self.flag_calls):
            # most verdicts of this signature read their regions (a fuzzing loop scoring every
            # case, a campaign measuring margins): one function returning them beats two
            self.fn, self.full, self.graphs = self.regions_fn, True, False
        try:
            if self.fn is None:
                self.full = self.device not in FLAGS_ONLY_DEVICES
                self.hold = HOLD_ACCEPTED and not self.full and _holdable(tensors)
                # a CUDA graph's outputs are overwritten by its next replay: only the flags,
                # read at once, may come from one (never regions that a verdict keeps)
                self.graphs = not self.full and _cudagraphs(self.device, self.judged)
                self.fn, (whats, flags, *regions) = self._call(
                    lambda: self._core(full=self.full, graphs=self.graphs), tensors)
                if self.graphs and self.whole and CUDAGRAPH_BY == "capture" and self.device in CAPTURE_DEVICES:
                    try:
                        self.fn = _Captured(self.fn, tensors)
                    except Exception as exc:   # the compiled function still runs, launched as it is
                        self.graphs = False
                        warnings.warn(f"numoracle: {self.program.name}'s compiled verdict runs without a CUDA "
                                      f"graph; capturing it failed ({_brief(type(exc).__name__ + ': ' + str(exc))}).",
                                      RuntimeWarning, stacklevel=4)
            else:
                whats, flags, *regions = self.fn(*tensors)
            if not self.compared:
                # fully on the first call with finite inputs: with a non-finite one only the flag
                # that says so (the verdict is then judged eagerly, and the values of code traced
                # without sanitised inputs are meaningless)
                nonfinite = bool(flags[-1])
                self._compare_with_eager(tensors, flags, regions, policy_only=nonfinite)
                self.compared = not nonfinite
            full = self.full
            if not self.sites_checked:
                self._check_sites(whats)
                self.sites_checked = True
            # copied while the device computes the flags (held, an accept is not copied, and any
            # other verdict is copied after the read); the flags are read at once (a CUDA
            # graph's next replay reuses their buffer)
            hold = self.hold and not full
            kept = None if hold else _copies(tensors)
            values = flags.tolist()
            prints = values[:len(tensors)] if hold else None
            flags = [bool(v) for v in values[len(tensors) if hold else 0:]]
            if hold and any(flags):
                # not a plain accept: its explanation is what is read, copies describe this call
                kept, prints = _copies(tensors), None
            kept = tensors if kept is None else kept
            self.flag_calls += not full
        except Exception as exc:      # never let the fast path change a verdict: judge eagerly
            self._fail(exc)
            return None
        policy = "finite"
        if flags[-1]:
            if self.nonfinite == "error":
                return None               # the eager path raises the usual message
            policy = NONFINITE_POLICY_TEXT
        guard = _guard(self.program.name, kept, prints)
        region = (lambda: regions[0]) if full else self._regions(kept, flags, guard)
        args = [t if kind == "tensor" else (t, fmt) for (kind, fmt), t in zip(self.structs, kept)]
        eager = self._eager(args[:self.n_inputs], args[self.n_inputs:], guard)
        judged = []
        at = 0
        for j, (name, fmt, t) in enumerate(zip(self.names, self.fmts, kept[self.n_inputs:])):
            kernel = _decoder(t, fmt, self.ref_device, guard)
            shape = tuple(t.shape)
            if self.quant_outputs[j]:
                n = 2
                judged.append(_quantizer_judgement(name, fmt, kernel, functools.partial(_part, region, j),
                                                   functools.partial(_detail, eager, j), shape,
                                                   flags[at:at + n]))
            else:
                n = len(self.modes) + 1
                judged.append(_judged(name, fmt, kernel, functools.partial(_part, region, j), shape,
                                      self.ref_device, self.modes, flags[at:at + n]))
            at += n
        return judged, Certificate(inputs=policy, compute=lambda: eager()[0]), policy

    def _compare_with_eager(self, tensors, flags, regions, policy_only=False) -> None:
        """The first compiled call against the same tensor code run eagerly: equal flags, and
        (where the compiled function returns them) equal masks and bounds, centres and radii
        within float64 evaluation-order differences.  A compiler that miscompiles a verdict
        (on this project's AVX-512 CPU, a 256-bit build once dropped float64 -> float32 ->
        float64 roundings) then leaves its signature eager instead of judging wrongly."""
        _, want, *want_regions = self._function(full=self.full)(*tensors)
        if policy_only:
            flags, want, regions = flags[-1:], want[-1:], []
        self._compare(flags, want, regions, want_regions)

    @staticmethod
    def _compare(flags, want, regions, want_regions) -> None:
        """Compiled flags (and regions, where returned) against the same code's eager ones."""
        if not torch.equal(flags.cpu(), want.cpu()):
            raise RuntimeError(f"the compiled flags {flags.tolist()} differ from the eager ones {want.tolist()}")
        for got, ref in zip(regions[:1], want_regions[:1]):
            for j, (g, r) in enumerate(zip(got, ref)):
                for k, (a, b) in enumerate(zip(g, r)):
                    # masks, and a quantizer's code bounds (parts 3 and 4 of its seven), exactly;
                    # a region's centre (part 0 of its four) against its radius (part 1)
                    exact = not a.is_floating_point() or (len(g) == 7 and k in (3, 4))
                    radius = torch.maximum(g[1], r[1]) if len(g) == 4 and k == 0 else None
                    if not (torch.equal(a, b) if exact else _close(a, b, radius)):
                        raise RuntimeError(f"output {j}'s compiled regions (part {k}) differ from the eager ones")

    def _check_sites(self, whats) -> None:
        if len(whats) != len(self.sites) or any(
                kind != s[1] or not s[0].startswith(what) for (what, kind), s in zip(whats, self.sites)):
            raise RuntimeError(f"the traced program has sites {[w for w, _ in whats]} where the eager "
                               f"run had {[s[0] for s in self.sites]}")

    def _fail(self, exc) -> None:
        self.failed = f"{type(exc).__name__}: {exc}"
        warnings.warn(f"numoracle: judging {self.program.name} eagerly; compiling its verdict failed "
                      f"({_brief(self.failed)}). Set NUMORACLE_COMPILE=never to skip compiling.",
                      RuntimeWarning, stacklevel=4)

    def _regions(self, kept, flags, guard=None):
        """A function computing, once, every output's region from the verdict's own
        copies.  The same tensor code, run eagerly; compiled once this signature's
        regions have been needed as often as a verdict is judged eagerly before it
        is compiled (an explained reject costs no compile; a campaign that reads
        every reject's masks gets them compiled).  Its flags must equal the ones
        the verdict was given."""
        done = []

        def get():
            if not done:
                if guard is not None:
                    guard()
                with _lock:
                    self.region_calls += 1
                    compile_now = self.regions_fn is None and self.region_failed is None and (
                        self.region_calls > (1 if self.policy == "always" else AUTO_EAGER_CALLS))
                try:
                    if compile_now:
                        self.regions_fn, (_, again, outs) = self._call(lambda: self._core(full=True), kept)
                        # its first call against the same code run eagerly, as a verdict's is
                        # (_compare_with_eager): a flags-only verdict compares its flags alone
                        _, want, *want_regions = self._function(full=True)(*kept)
                        self._compare(again, want, [outs], want_regions)
                    else:
                        _, again, outs = (self.regions_fn or self._function(full=True))(*kept)
                except Exception as exc:
                    if self.regions_fn is None and not compile_now:
                        raise
                    self.region_failed = f"{type(exc).__name__}: {exc}"
                    self.regions_fn = None
                    warnings.warn(f"numoracle: computing {self.program.name}'s regions eagerly; the compiled "
                                  f"function failed ({_brief(self.region_failed)}).", RuntimeWarning, stacklevel=2)
                    _, again, outs = self._function(full=True)(*kept)
                again = [bool(v) for v in again.tolist()]
                if again != flags:
                    raise RuntimeError(
                        f"numoracle: {self.program.name}'s regions give the flags {again} where its verdict "
                        f"had {flags}; this is a bug in numoracle's compiled path, please report it. "
                        f"NUMORACLE_COMPILE=never judges eagerly.")
                done.append(outs)
            return done[0]
        return get

    def _eager(self, inputs, outputs, guard=None):
        """What the compiled graph leaves out, from one eager run when first asked for:
        (the certificate's site records, the quantizer outputs' judgements with their
        explanation details)."""
        done = []

        def get():
            if not done:
                if guard is not None:
                    guard()
                from .check import evaluate
                from .oracles import quantizer as QZ
                refs, ctx, _, decoded, names, regions = evaluate(self.program, inputs, outputs, self.params,
                                                                 self.prof, self.p, self.nonfinite)
                quant = QZ.judge(refs, decoded, names) if self.has_quantizer else {}
                done.append((ctx.sites, quant))
            return done[0]
        return get
