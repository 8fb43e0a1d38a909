"""The launch configuration of one kernel call: the constexprs (``BLOCK_SIZE``) and compile
options (``num_warps``) of every ``@triton.jit`` launch the call makes, as they reach the
kernel (after an autotuner or a heuristic chose them), recorded while the launches run.

A reference program reads them through ``no.launch()`` parameters (docs/design.md §3): a
reduction's order or depth that the launch decides (an autotuned tile) is then written from
the tile the outputs were computed with.  Values are plain (int, float, bool, str, None);
a name the call's launches gave different values maps to the list of them.

``compiling`` measures, beside, the time Triton spends making a specialization the process had
not launched before (compiling it, or loading it from Triton's on-disk cache): a fuzzing run's
new shapes and formats meet new specializations, and that time is the kernel's, not the call's."""

from __future__ import annotations

import contextlib
import inspect
import time
import weakref

from ..backends import _triton_compat as compat
from ..reference import note_launch_value as _note

# launch keywords that are compile options rather than kernel arguments, as Triton reads them
OPTIONS = ("num_warps", "num_stages", "num_ctas", "maxnreg")


# a kernel function's signature, made once: inspect.signature is three quarters of a
# launch record's cost (25 of 33 us on the development CPU); weak keys, since mutation
# testing makes kernels by the thousand
_SIGNATURES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _signature(fn) -> inspect.Signature:
    sig = _SIGNATURES.get(fn)
    if sig is None:
        sig = _SIGNATURES[fn] = inspect.signature(fn)
    return sig


def _record(found: dict, kernel, args, kwargs) -> None:
    fn = getattr(kernel, "fn", None)
    if not inspect.isfunction(fn):
        return
    sig = _signature(fn)
    bound = sig.bind_partial(*args, **{k: v for k, v in kwargs.items() if k not in OPTIONS})
    bound.apply_defaults()
    for p in sig.parameters.values():
        if compat.is_constexpr(p.annotation) and p.name in bound.arguments:
            _note(found, p.name, bound.arguments[p.name])
    for name in OPTIONS:
        if name in kwargs:
            _note(found, name, kwargs[name])


@contextlib.contextmanager
def recorded():
    """Within it every launch is recorded into the yielded dict ({name: value}) and runs.
    An autotuner's benchmark launches of the configurations it did not choose are forgotten:
    its chosen configuration's values stand."""
    found: dict = {}
    classes = [c for c in (compat.jit_function_class(), compat.interpreted_function_class()) if c is not None]
    tuner = compat.autotuner_class()
    saved = {c: c.__dict__.get("run") for c in classes + ([tuner] if tuner is not None else [])}

    def wrap_tuned(orig):
        def run(self, *args, **kwargs):
            before = {k: (list(v) if isinstance(v, list) else v) for k, v in found.items()}
            out = orig(self, *args, **kwargs)
            cfg = getattr(self, "best_config", None)
            chosen = cfg.all_kwargs() if cfg is not None and hasattr(cfg, "all_kwargs") else None
            if chosen is not None:
                for name, value in chosen.items():
                    if name in before:
                        found[name] = before[name]
                    else:
                        found.pop(name, None)
                    _note(found, name, value)
            return out
        return run

    def wrap(orig):
        def run(self, *args, **kwargs):
            try:
                _record(found, self, args, {k: v for k, v in kwargs.items() if k not in ("grid", "warmup")})
            except (TypeError, ValueError):       # a launch that does not bind: Triton will say why
                pass
            return orig(self, *args, **kwargs)
        return run

    try:
        for c in classes:
            c.run = wrap(getattr(c, "run"))
        if tuner is not None:
            tuner.run = wrap_tuned(getattr(tuner, "run"))
        yield found
    finally:
        for c, orig in saved.items():
            if orig is None:
                try:
                    del c.run
                except AttributeError:
                    pass
            else:
                c.run = orig


class Compiles:
    """What ``compiling`` measured: the calls of Triton's compile step and their seconds."""
    __slots__ = ("count", "seconds")

    def __init__(self):
        self.count = 0
        self.seconds = 0.0


@contextlib.contextmanager
def compiling():
    """Within it every compile step of a ``@triton.jit`` launch (``JITFunction._do_compile``:
    a specialization missing from the process's kernel cache) is timed into the yielded
    ``Compiles``.  Nothing is measured where Triton has no such step (its interpreter, a
    version without it)."""
    got = Compiles()
    jit = compat.jit_function_class()
    orig = jit.__dict__.get("_do_compile") if jit is not None else None
    if orig is None:
        yield got
        return

    def _do_compile(self, *args, **kwargs):
        t = time.perf_counter()
        try:
            return orig(self, *args, **kwargs)
        finally:
            got.count += 1
            got.seconds += time.perf_counter() - t

    jit._do_compile = _do_compile
    try:
        yield got
    finally:
        jit._do_compile = orig
