"""What numoracle asks of torch.compile (Inductor) for a verdict.

The calculus rounds by casts (``formats.round``, ``representable``): a compiled cast must
round as torch's eager cast does.
- ``emulate_precision_casts``: otherwise Inductor may keep a value cast to bf16/fp16 in
  fp32 inside a fused kernel, skipping its rounding;
- ``pattern_matcher`` off: torch 2.11's pattern ``pointless_convert`` replaces any chain of
  two float casts by one, so x.to(float32).to(float64) became x.  The patterns rewrite
  graphs for AMP, attention and matrix products, none of which a verdict has.
- the C++ compiler neither contracts a product and a sum into one rounding nor reassociates
  (Inductor's defaults, named here so that the environment variables cannot change them):
  ``formats._magic`` rounds by (x + S) - S and ``formats._ufp`` needs two rounded products.

On a CPU whose widest vectors are 512 bits, a verdict's loops are tiled by float32's width
(``float_tiling``): Inductor tiles a kernel whose loop bodies all hold bf16 or fp16 values
by the 16-bit width (32 lanes), so each of a verdict's hundreds of float64 values takes
four registers and the loops spill.  (Measurements: docs/results/INDEX.md, "CPU tiling".)
"""

from __future__ import annotations

import contextlib
import functools
import threading

COMPILE_OPTIONS = {"emulate_precision_casts": True, "pattern_matcher": False,
                   "cpp.enable_floating_point_contract_flag": "off", "cpp.enable_unsafe_math_opt_flag": False}

_COMPILER: list = []
_tiling_lock = threading.RLock()


def can_compile() -> bool:
    """torch.compile with Inductor's exact casts (``emulate_precision_casts``) is available."""
    if not _COMPILER:
        try:
            import torch._inductor.config as cfg
            _COMPILER.append(hasattr(cfg, "emulate_precision_casts"))
        except Exception:            # a torch without Inductor
            _COMPILER.append(False)
    return _COMPILER[0]


# torch releases whose Inductor compiles a verdict traced with symbolic sizes for the CPU as the
# eager code computes it: on torch 2.11 the compiled regions of rms_norm were off by up to 0.4%
# of their centres (the comparison with eager code caught it, one wasted compile per kind);
# torch 2.13 agrees (docs/results/2026-12-02-throughput-shapes.md)
SYMBOLIC_CPU_FROM = (2, 13)


@functools.cache
def symbolic_cpu() -> bool:
    """Whether this torch compiles verdicts with symbolic sizes for CPU tensors."""
    import torch
    try:
        version = tuple(int(p) for p in torch.__version__.split("+")[0].split(".")[:2])
    except ValueError:
        return False
    return version >= SYMBOLIC_CPU_FROM


def float_tiling_options() -> dict:
    """The Inductor options that go with ``float_tiling``: where the CPU's widest vectors
    are 512 bits, cpp.simdlen=512 (what Inductor picks by itself, named so that numoracle's
    cached kernels are not shared with other settings' ones), else none (and no patch)."""
    try:
        from torch._inductor import cpu_vec_isa
        from torch._inductor.codegen import cpp as C
        widths = {isa.bit_width() for isa in cpu_vec_isa.valid_vec_isa_list()}
        C.TilingSelect.select_tiling, C.get_loop_body_lowp_fp
    except Exception:                  # another torch's internals: keep Inductor's choice
        return {}
    return {"cpp.simdlen": 512} if widths and max(widths) == 512 else {}


@contextlib.contextmanager
def float_tiling(active: bool):
    """While a CPU verdict compiles: Inductor's tiling sees no 16-bit dtype in its loop
    bodies (only the choice of vector width changes; the code computes the same values)."""
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


def brief(message: str, head: int = 200, tail: int = 500) -> str:
    """A compiler's error for a warning: its start (the exception's type) and its end, where
    Inductor and Triton say what went wrong (a subprocess's traceback comes between)."""
    message = message.strip()
    if len(message) <= head + tail + 5:
        return message
    return f"{message[:head]} ... {message[-tail:]}"
