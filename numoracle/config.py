"""numoracle's settings: one frozen object with named, documented fields.

    import numoracle as no

    fast = no.settings(compile="always")          # the current settings, one field changed
    no.check(program, outputs=y, inputs=x, settings=fast)
    with no.settings(hold_accepted=False):        # for a block
        ...
    no.settings.register_profile("ci", compile="never")
    no.settings.load_profile("ci")                # the default from now on

A ``settings`` is immutable; ``settings(...)`` makes a new one from a parent (the current
settings unless ``parent=`` names one) with some fields changed, and each field is
validated when it is given.  Used as a context manager it is the current settings inside
the block (per thread and async task).  ``settings.default`` is the current settings.

Environment variables are read once, when this module is imported, and validated then:
each field names its variable below (``NUMORACLE_COMPILE`` and so on); they set the
``"default"`` profile.  Nothing else in numoracle reads its own environment variables.
"""

from __future__ import annotations

import contextvars
import os
from dataclasses import dataclass
from typing import Any, Callable

from .errors import InvalidArgument


@dataclass(frozen=True)
class Field:
    name: str
    default: Any
    doc: str
    check: Callable[[Any], Any]     # the value as stored, or raises InvalidArgument
    env: str | None = None          # the environment variable that sets its default


def _choice(name: str, choices: tuple, aliases: dict | None = None):
    def check(v):
        raw = v
        if isinstance(v, str):
            v = v.strip().lower()
            v = (aliases or {}).get(v, v)
        if v not in choices:
            raise InvalidArgument(f"{name}={raw!r}: expected one of {choices}.")
        return v
    return check


def _count(name: str, minimum: int = 0):
    def check(v):
        if isinstance(v, str) and v.strip().lstrip("-").isdigit():
            v = int(v)
        if isinstance(v, bool) or not isinstance(v, int) or v < minimum:
            raise InvalidArgument(f"{name}={v!r}: expected an integer >= {minimum}.")
        return v
    return check


def _flag(name: str):
    def check(v):
        if isinstance(v, str) and v.strip().lower() in _TRUE | _FALSE:
            return v.strip().lower() in _TRUE
        if not isinstance(v, bool):
            raise InvalidArgument(f"{name}={v!r}: expected True or False.")
        return v
    return check


def _probability(name: str):
    def check(v):
        try:
            f = float(v)
        except (TypeError, ValueError):
            f = float("nan")
        if isinstance(v, bool) or not 0 < f < 1:
            raise InvalidArgument(f"{name}={v!r}: the false-alarm budget must lie strictly between 0 and 1 "
                                  f"(default 1e-6).")
        return f
    return check


def _seconds(name: str, zero: str = "no limit"):
    def check(v):
        try:
            f = float(v)
        except (TypeError, ValueError):
            f = float("nan")
        if isinstance(v, bool) or not (f >= 0 and f != float("inf")):
            raise InvalidArgument(f"{name}={v!r}: expected a finite number of seconds >= 0 (0: {zero}).")
        return f
    return check


def _optional_count(name: str, minimum: int = 1):
    inner = _count(name, minimum)

    def check(v):
        if v is None or (isinstance(v, str) and v.strip().lower() in ("", "none")):
            return None
        return inner(v)
    return check


def _optional_text(name: str):
    def check(v):
        if v is None or (isinstance(v, str) and v.strip() == ""):
            return None
        if not isinstance(v, str):
            raise InvalidArgument(f"{name}={v!r}: expected a string or None.")
        return v.strip()
    return check


_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}
_POLICY_ALIASES = {**{t: "always" for t in _TRUE}, **{f: "never" for f in _FALSE}, "": "auto"}

FIELDS = (
    Field("compile", "auto",
          "when a verdict runs compiled (torch.compile of the calculus): 'auto' compiles a signature of at least "
          "compile_min_elements elements (inputs and outputs) once it has been judged eager_calls eagerly; 'always' from its "
          "second call; 'never' keeps every verdict eager",
          _choice("compile", ("auto", "always", "never"), _POLICY_ALIASES), env="NUMORACLE_COMPILE"),
    Field("compile_min_elements", 1 << 20,
          "under compile='auto', the fewest elements (its inputs' and outputs') of a signature worth compiling (compiling costs "
          "tens of seconds)",
          _count("compile_min_elements")),
    Field("eager_calls", 2,
          "under compile='auto', the eager verdicts of a signature before it is compiled",
          _count("eager_calls")),
    Field("compile_shapes_after", 20.0,
          "under compile='auto' or 'always', the seconds of eager verdicts after which one kind of signature "
          "(the same program, formats, parameters, mode and tensors' number of dimensions, size-1 dimensions, "
          "dtypes and devices, any sizes) is compiled once with symbolic sizes, to serve every later shape of "
          "that kind not compiled on its own (a stream of new shapes: fuzzing, property tests); 0: never",
          _seconds("compile_shapes_after", zero="never"), env="NUMORACLE_COMPILE_SHAPES_AFTER"),
    Field("cuda_graphs", "auto",
          "whether a compiled verdict on CUDA runs as a CUDA graph: 'auto' for signatures of at most "
          "cuda_graph_max_elements judged elements, 'always', 'never'",
          _choice("cuda_graphs", ("auto", "always", "never")), env="NUMORACLE_CUDAGRAPHS"),
    Field("cuda_graph_max_elements", 1 << 25,
          "the most judged elements (inputs and outputs) of a signature run as a CUDA graph under "
          "cuda_graphs='auto' (a graph keeps a copy of them and its intermediates between calls)",
          _count("cuda_graph_max_elements")),
    Field("cpu_verdict_max_elements", 1 << 15,
          "a verdict (check, check_modes) of tensors on a GPU with at most this many elements, inputs and "
          "outputs, is computed on the CPU from copies of them: a small eager verdict on a GPU waits on its "
          "thousand-odd kernel launches (docs/performance.md, \"Small verdicts of GPU tensors\"); its masks "
          "(Verdict.rejected, Verdict.uncertified) come back on the outputs' device; 0: always on the tensors' device",
          _count("cpu_verdict_max_elements")),
    Field("hold_accepted", True,
          "an accepted compiled verdict holds the caller's tensors, with fingerprints, instead of copying them; "
          "its regions and masks are computed from them when first asked for and raise TensorsChanged if the "
          "caller overwrote them meanwhile (False: every verdict copies)",
          _flag("hold_accepted")),
    Field("keep_cpu_memory", True,
          "before the first eager verdict on CPU tensors, raise glibc malloc's mmap and trim thresholds (to "
          "32 MiB and 256 MiB), once for the process: a verdict frees and remakes about a hundred tensors of "
          "the judged size, and malloc would otherwise hand each back to the system and page-fault it in again "
          "(a third to two thirds of an eager verdict's time at 65k-262k elements; numoracle.heap).  The process then keeps up to 256 MiB of "
          "freed memory for reuse.  False leaves malloc as it is; not glibc: no effect",
          _flag("keep_cpu_memory"), env="NUMORACLE_KEEP_CPU_MEMORY"),
    Field("nonfinite", "error",
          "what a non-finite input does: 'error' raises InvalidArgument, 'uncertified' judges the other "
          "elements and reports those that depend on it as uncertified",
          _choice("nonfinite", ("error", "uncertified"))),
    Field("p", 1e-6,
          "the statistical mode's false-alarm budget per verdict",
          _probability("p")),
    Field("isolate", False,
          "run kernels in a supervised worker process (numoracle.runner.worker): a kernel that crashes, exits or "
          "hangs in C is that case's outcome (a crash, a timeout), not the end of the run.  The command line "
          "turns it on for fuzz, campaign, mutate, stress-tolerances and replay (--no-isolate turns it off); "
          "in-process runs bound hangs in Python only",
          _flag("isolate"), env="NUMORACLE_ISOLATE"),
    Field("kernel_timeout", 60.0,
          "the per-case kernel time limit in seconds where a caller gives none (the studies, replay): a kernel "
          "past it is a timeout outcome (in the worker process it is killed; in-process the alarm interrupts "
          "Python code only); 0 for none",
          _seconds("kernel_timeout")),
    Field("plan_check", False,
          "a verdict that knows its kernel (the runner's cases; no.check(..., kernel=launcher)) carries the "
          "plan check's line in its assumptions (numoracle.plan.assumption: the kernel's precision plan read "
          "from its compiled Triton IR and checked against the reference, once per kernel, input signature "
          "and parameters, 0.1-1.5 s each, about 5 s more for the first in a process in interpreter mode); "
          "off by default: a fuzz run that draws many shapes would pay it for each",
          _flag("plan_check"), env="NUMORACLE_PLAN_CHECK"),
    Field("autotune_config", None,
          "which config an autotuned kernel runs on the interpreter backend (no benchmarking there): an index "
          "('1') or keyword values ('BLOCK_SIZE=128,num_warps=4'); None for the first",
          _optional_text("autotune_config"), env="NUMORACLE_AUTOTUNE_CONFIG"),
    # what a property test draws and how long it may search: numoracle's part of a profile
    # (Hypothesis's part - examples, seed, database - is Hypothesis's settings profile of the
    # same name: numoracle.profiles)
    Field("max_rows", 8,
          "the most rows a property test draws (within the operator's domain); None: the domain's",
          _optional_count("max_rows")),
    Field("max_cols", 256,
          "the most columns a property test draws (within the operator's domain); None: the domain's",
          _optional_count("max_cols")),
    Field("time_budget", 0.0,
          "wall-clock seconds a property test searches before it stops cleanly (cases drawn so far stand); "
          "0 for none (Hypothesis's max_examples ends it)",
          _seconds("time_budget")),
    Field("shrink_seconds", 30.0,
          "wall-clock seconds spent shrinking a finding (Hypothesis's structural shrink, then the elements')",
          _seconds("shrink_seconds")),
)
_BY_NAME = {f.name: f for f in FIELDS}


class settings:
    """numoracle's settings (see the module docstring); fields: ``settings.fields()``."""

    __slots__ = ("_values",)

    def __init__(self, parent: "settings | None" = None, **changes):
        unknown = sorted(set(changes) - set(_BY_NAME))
        if unknown:
            raise InvalidArgument(f"settings({', '.join(unknown)}=...): no such field; numoracle's settings are "
                                  f"{sorted(_BY_NAME)}.")
        if parent is not None and not isinstance(parent, settings):
            raise InvalidArgument(f"settings(parent={parent!r}): expected a numoracle settings object.")
        base = (parent if parent is not None else _current())._values if _ENV_READ else {}
        values = dict(base)
        for k, v in changes.items():
            values[k] = _BY_NAME[k].check(v)
        object.__setattr__(self, "_values", values)

    def __getattr__(self, name):
        try:
            return object.__getattribute__(self, "_values")[name]
        except KeyError:
            raise AttributeError(f"numoracle settings have no field {name!r}; fields: {sorted(_BY_NAME)}") from None

    def __setattr__(self, name, value):
        raise AttributeError(f"numoracle settings are immutable: make a new one, settings({name}=...), or "
                             f"use it for a block: with settings({name}=...): ...")

    def __eq__(self, other):
        return isinstance(other, settings) and self._values == other._values

    def __hash__(self):
        return hash(tuple(sorted(self._values.items())))

    def __repr__(self):
        changed = [f"{k}={v!r}" for k, v in self._values.items() if v != _BY_NAME[k].default]
        return f"settings({', '.join(changed)})"

    def to_dict(self) -> dict:
        return dict(self._values)

    # ---- a block
    def __enter__(self):
        token = _STACK.set(self)
        _TOKENS.set(_TOKENS.get() + (token,))
        return self

    def __exit__(self, *exc):
        tokens = _TOKENS.get()
        _TOKENS.set(tokens[:-1])
        _STACK.reset(tokens[-1])
        return False

    # ---- profiles
    @staticmethod
    def register_profile(name: str, parent: "settings | None" = None, **changes) -> None:
        """Register the settings ``settings(parent, **changes)`` under ``name``."""
        if not isinstance(name, str) or not name:
            raise InvalidArgument(f"register_profile({name!r}): a profile's name is a non-empty string.")
        _PROFILES[name] = settings(parent if parent is not None else _DEFAULT, **changes)

    @staticmethod
    def get_profile(name: str) -> "settings":
        try:
            return _PROFILES[name]
        except KeyError:
            raise InvalidArgument(f"no numoracle settings profile {name!r}; registered: {sorted(_PROFILES)} "
                                  f"(register one with settings.register_profile).") from None

    @staticmethod
    def load_profile(name: str) -> None:
        """Make the profile ``name`` the default settings (outside any ``with`` block)."""
        global _LOADED
        _LOADED = settings.get_profile(name)

    @staticmethod
    def fields() -> tuple:
        """The fields: name, default, what it does, its environment variable."""
        return FIELDS


class _Default:
    """``settings.default``: the current settings (a class-level property)."""

    def __get__(self, obj, owner):
        return _current()


settings.default = _Default()


def _current() -> settings:
    inner = _STACK.get()
    return inner if inner is not None else _LOADED


def current() -> settings:
    """The settings in force here: the innermost ``with settings(...)`` block's, else the
    loaded profile's."""
    return _current()


def resolve(given) -> settings:
    """``given`` (a settings object) or, when None, the current settings."""
    if given is None:
        return _current()
    if not isinstance(given, settings):
        raise InvalidArgument(f"settings={given!r}: expected a numoracle settings object, e.g. "
                              f"numoracle.settings(compile='never').")
    return given


def _from_environment() -> settings:
    values = {}
    for f in FIELDS:
        raw = os.environ.get(f.env) if f.env else None
        if raw is None:
            values[f.name] = f.default
            continue
        try:
            values[f.name] = f.check(raw)
        except InvalidArgument as exc:
            raise InvalidArgument(f"environment variable {f.env}={raw!r}: {exc} Unset it for the default "
                                  f"({f.default!r}).") from None
    s = object.__new__(settings)
    object.__setattr__(s, "_values", values)
    return s


_STACK: contextvars.ContextVar = contextvars.ContextVar("numoracle_settings", default=None)
_TOKENS: contextvars.ContextVar = contextvars.ContextVar("numoracle_settings_tokens", default=())
_ENV_READ = False
_DEFAULT = _from_environment()
_LOADED = _DEFAULT
_ENV_READ = True
_PROFILES: dict = {"default": _DEFAULT}
