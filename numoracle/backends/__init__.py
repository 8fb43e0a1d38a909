"""Backends: where kernels run (docs/design.md §7), as objects.

A ``Backend`` is resolved once from a name — ``"gpu"`` (CUDA), ``"interpreter"``
(Triton's interpreter on CPU tensors, made GPU-faithful) or ``"auto"`` (the GPU when
there is one) — and passed down: its ``device``, its assumption and math-library
profiles, and how it prepares kernels.

- ``resolve(name)``: the Backend, without side effects (a verdict on saved outputs needs
  no more);
- ``select(name)``: resolved and prepared — for the interpreter, ``TRITON_INTERPRET`` set
  and the GPU-faithful repairs installed (``interpreter.install()``) — before any kernel
  is imported or run.  The CLI, the pytest plugin, the runner and the studies call it.

``TRITON_INTERPRET`` is decided here and nowhere else (``interpreter.install`` sets it
when unset; ``Backend.environment()`` gives a worker process's).
"""

from __future__ import annotations

import dataclasses
import os
import sys
import warnings
from dataclasses import dataclass

from ..assumptions import BACKENDS
from ..errors import InvalidArgument

RUNNING = BACKENDS                     # where a kernel runs: what verdicts and saved cases record
NAMES = RUNNING + ("auto",)            # what a caller may name


def _cuda_available() -> bool:
    import torch

    return torch.cuda.is_available()


def interpret_requested() -> bool:
    """Whether this process's environment asks Triton to interpret kernels."""
    return os.environ.get("TRITON_INTERPRET", "").strip().lower() in ("1", "true", "on", "yes")


@dataclass(frozen=True)
class Backend:
    """Where kernels run and what their verdicts assume."""
    name: str             # "interpreter" | "gpu"
    device: str           # the torch device type kernels and verdicts use: "cpu" | "cuda"
    math_profile: str     # the math-library profile's name (numoracle.mathlib)

    def __str__(self) -> str:
        return self.name

    def assumptions(self):
        """The assumption profile verdicts on this backend are conditional on; on the
        interpreter, with a caution (and a warning, once) when this process interprets
        kernels without numoracle's repairs (``bare_interpreter``)."""
        from ..assumptions import for_backend
        found = for_backend(self.name, self.math_profile)
        if self.name == "interpreter" and bare_interpreter():
            warnings.warn(f"numoracle: {BARE_INTERPRETER}", BareInterpreterWarning, stacklevel=_caller_level())
            found = dataclasses.replace(found, caution=BARE_INTERPRETER)
        return found

    def profile(self):
        """The loaded math-library profile."""
        from ..mathlib import load
        return load(self.math_profile)

    def prepare(self) -> "Backend":
        """Make kernels run as this backend says (idempotent); returns self.  The
        interpreter: ``TRITON_INTERPRET`` set and the repairs installed, which must come
        before the modules that define kernels are imported.  The GPU: CUDA present."""
        if self.name == "gpu":
            if not _cuda_available():
                raise InvalidArgument("backend='gpu' but torch sees no CUDA device; use --backend interpreter "
                                      "to run kernels through Triton's interpreter on the CPU.")
            return self
        from . import interpreter
        interpreter.install()
        return self

    def prepared(self) -> bool:
        """Whether kernels run as this backend says right now (the interpreter's repairs
        installed; a CUDA device present)."""
        if self.name == "gpu":
            return _cuda_available()
        from . import interpreter
        return interpreter.is_installed()

    def environment(self) -> dict:
        """The environment variables a worker process running this backend's kernels needs
        before it imports Triton."""
        return {"TRITON_INTERPRET": "1"} if self.name == "interpreter" else {}

    def to_dict(self) -> dict:
        return {"name": self.name, "device": self.device, "math_profile": self.math_profile}


def resolve(backend="auto", *, profile: str | None = None) -> Backend:
    """The Backend named by ``backend`` (a name, or a Backend returned as it is), with the
    math profile ``profile`` or the backend's default (the GPU's calibrated one when it has
    one); nothing is installed or imported."""
    if isinstance(backend, Backend):
        return backend if profile is None or profile == backend.math_profile else \
            Backend(backend.name, backend.device, profile)
    if backend not in NAMES:
        raise InvalidArgument(f"backend={backend!r}: expected one of {NAMES} (or a numoracle.backends.Backend).")
    if backend == "auto":
        backend = "gpu" if _cuda_available() and not interpret_requested() else "interpreter"
    from ..assumptions import default_profile
    return Backend(backend, "cuda" if backend == "gpu" else "cpu", profile or default_profile(backend))


# what a verdict says when the outputs it judges may come from the unrepaired interpreter
BARE_INTERPRETER = (
    "this process runs Triton's interpreter (TRITON_INTERPRET) without numoracle's repairs, and a kernel "
    "run there does not compute what a GPU computes: its fp32 -> bf16 stores truncate, bf16 arithmetic runs "
    "on bit patterns, fp8 casts round ties away (docs/design.md section 7). A reject of such outputs may be "
    "the interpreter's, not the kernel's. Call numoracle.backends.select('interpreter') before importing "
    "the module that defines the kernel, then run it again.")


_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep


def _caller_level() -> int:
    """The ``stacklevel`` of the first frame outside numoracle (a warning names the user's
    line, and is shown once per line of theirs)."""
    frame, level = sys._getframe(1), 1
    while frame is not None and frame.f_code.co_filename.startswith(_PACKAGE):
        frame, level = frame.f_back, level + 1
    return level


class BareInterpreterWarning(UserWarning):
    """A verdict on the interpreter in a process whose Triton interprets kernels without
    numoracle's repairs."""


def bare_interpreter() -> bool:
    """Whether this process interprets Triton kernels without numoracle's repairs: Triton
    imported and interpreting (its knob, or ``TRITON_INTERPRET``), and
    ``interpreter.install()`` not in effect.  A process that never imported Triton ran no
    kernel, so it is not asked to (importing it costs seconds)."""
    if "triton" not in sys.modules:
        return False
    from . import _triton_compat as compat
    knob = compat.interpret_knob()
    if not (interpret_requested() if knob is None else knob):
        return False
    from . import interpreter
    return not interpreter.is_installed()


_SELECTED: list = []


def select(backend="auto", *, profile: str | None = None) -> Backend:
    """``resolve(backend)`` prepared: what to call before a kernel is imported or run."""
    b = resolve(backend, profile=profile).prepare()
    _SELECTED[:] = [b]
    return b


def selected() -> Backend | None:
    """The backend this process selected last, or None."""
    return _SELECTED[0] if _SELECTED else None


def before_kernel_import() -> None:
    """Called before numoracle imports a module that defines kernels: when no backend has
    been selected yet, select "auto" (the interpreter where there is no GPU), so that the
    kernels are decorated as the backend will run them."""
    if not _SELECTED:
        select("auto")


# what a launch on a machine without a GPU says when its kernel was decorated for one
NO_DRIVER = "active drivers"
NO_DRIVER_HINT = ("the kernel was decorated as a compiled GPU kernel, but there is no GPU here: choose the interpreter "
                  "before the module defining the kernel is imported (numoracle.backends.select('interpreter'), "
                  "--backend interpreter, or TRITON_INTERPRET=1 in the environment)")


__all__ = ["NAMES", "RUNNING", "Backend", "BareInterpreterWarning", "bare_interpreter", "resolve", "select"]
