"""What an operator is (docs/design.md §3.1): a reference program, one or more kernels, the
input domain, an example builder and optional faulty kernels, in one object.  The built-in
operators are made with it, and so is yours:

    import numoracle as no

    my_rms_norm = no.Operator(
        "my_rms_norm", reference=rms_norm_ref,
        kernels={"correct": "mypkg.kernels:rms_norm"},          # or the function itself
        example=make_inputs,                                      # (seed, dtype, family, rows, cols) -> (inputs, params)
        domain=no.Domain(rows=(1, 64), cols=(1, 4096), formats=("bf16",), params={"eps": (1e-6,)}),
        faulty={"truncating_store": "mypkg.kernels:rms_norm_rtz"})

Everything that takes an operator name takes such an object (``numoracle.operators.resolve``),
and on the command line its ``package.module:attribute``.  A kernel is a callable taking the
reference's inputs as torch tensors plus the parameters as keywords, returning the outputs
the reference returns, in its order (``Operator.kernel_signature()`` prints it)."""

from __future__ import annotations

import importlib
import inspect
import math
import sys
from dataclasses import dataclass, field
from typing import Callable

import torch

from ..errors import InvalidArgument

UPSTREAM_KERNELS = ("liger",)      # kernels of an upstream package itself, attached when it is installed


@dataclass(frozen=True)
class Domain:
    """The inputs an operator is defined on, for strategies and studies: shape ranges, the
    formats its kernels accept, and choices for each keyword parameter (the first choice is
    the default).  Choices fill only the parameters an example leaves open: parameters that
    the example returns are tied to its inputs (a group size to the scales' layout) and win
    over drawn ones.  ``cols_multiple_of`` is for operators whose rows split into groups (a
    quantizer's group size)."""
    rows: tuple = (1, 64)
    cols: tuple = (1, 512)
    cols_multiple_of: int = 1
    formats: tuple = ("bf16", "fp16", "fp32")
    params: dict = field(default_factory=dict)

    def __post_init__(self):
        for name, (lo, hi) in (("rows", self.rows), ("cols", self.cols)):
            if not (isinstance(lo, int) and isinstance(hi, int) and 1 <= lo <= hi):
                raise InvalidArgument(f"Domain({name}={(lo, hi)!r}): expected a (lo, hi) range of sizes, "
                                      f"1 <= lo <= hi.")
        if isinstance(self.formats, str) or not self.formats:
            raise InvalidArgument(f"Domain(formats={self.formats!r}): give a non-empty tuple of format names, "
                                  f"e.g. ('bf16', 'fp16').")
        from .. import formats as F
        for name in self.formats:
            try:
                F.by_name(name)    # a name no format has is refused here, not at the first draw
            except InvalidArgument as exc:
                raise InvalidArgument(f"Domain(formats={tuple(self.formats)!r}): {exc}") from None
        for k, v in self.params.items():
            if not isinstance(v, (tuple, list)) or not v:
                raise InvalidArgument(f"Domain(params={{{k!r}: {v!r}}}): give a non-empty tuple of choices "
                                      f"(the first is the default).")

    def outside(self, case) -> str | None:
        """Why a case (``strategies.cases.Case``) lies outside this domain (its shape, format
        or a drawn parameter), or None where it lies inside: a finding kept from a run before
        the domain changed."""
        if case.fmt not in self.formats:
            return f"format {case.fmt} is not among {tuple(self.formats)}"
        for name, (lo, hi), v in (("rows", self.rows, case.rows), ("cols", self.cols, case.cols)):
            if not lo <= v <= hi:
                return f"{name}={v} is outside {(lo, hi)}"
        for name, value in case.params:
            choices = self.params.get(name)
            if choices is not None and value not in choices:
                return f"parameter {name}={value!r} is not among {tuple(choices)}"
        return None

    def fit(self, rows: int, cols: int) -> tuple:
        """(rows, cols) moved into this domain: cols a multiple of ``cols_multiple_of`` and of
        every integer choice of a parameter named ``group*`` (a quantizer's group size splits
        the columns, so each choice must divide them)."""
        rows = min(max(rows, self.rows[0]), self.rows[1])
        m = max(int(self.cols_multiple_of), 1)
        for name, vals in self.params.items():
            if name.startswith("group"):
                for v in vals:
                    if isinstance(v, int) and not isinstance(v, bool) and v > 0:
                        m = m * v // math.gcd(m, v)
        cols = max(cols, self.cols[0])
        cols = ((cols + m - 1) // m) * m
        if cols > self.cols[1]:
            cols = (self.cols[1] // m) * m
        return rows, cols


def _spec_of(kernel) -> str:
    """A kernel's spec string: itself, or a callable's ``module:qualname``."""
    if isinstance(kernel, str):
        return kernel
    return f"{getattr(kernel, '__module__', '?')}:{getattr(kernel, '__qualname__', getattr(kernel, '__name__', '?'))}"


def load_kernel(spec):
    """A kernel from its spec: a callable as it is, or ``module:function[:picked outputs]``
    (imported after a backend is chosen: ``backends.before_kernel_import``)."""
    if callable(spec):
        return spec
    from ..backends import before_kernel_import
    before_kernel_import()
    mod, fn, *pick = spec.split(":")
    return pick_outputs(getattr(importlib.import_module(mod), fn), pick[0] if pick else None)


def pick_outputs(f, pick: str | None):
    """f, or f keeping only the outputs named by ``pick`` ("0" or "0,2": a spec's third
    field), for a kernel that returns more than its operator judges."""
    if not pick:
        return f
    idx = [int(i) for i in pick.split(",")]

    def kernel(*args, **params):
        out = f(*args, **params)
        return tuple(out[i] for i in idx) if len(idx) > 1 else out[idx[0]]
    kernel.__name__ = f.__name__
    kernel.__numoracle_picks__ = (f, pick)       # how a worker process makes it again (runner.worker)
    return kernel


def _check_example_signature(name: str, example) -> None:
    """Every caller passes an example builder five positional arguments (``Operator.example``):
    one that cannot take them would fail only at the first case, deep in a run."""
    try:
        sig = inspect.signature(example)
    except (TypeError, ValueError):          # a builtin or an object without a readable signature
        return
    try:
        sig.bind(0, torch.bfloat16, "normal", 4, 96)
    except TypeError as exc:
        raise InvalidArgument(
            f"Operator({name!r}, example={getattr(example, '__name__', example)!r}): its signature "
            f"{sig} cannot take the five positional arguments every case gives ({exc}); expected "
            f"example(seed, dtype, family, rows, cols) -> (inputs, params), e.g. "
            f"def example(seed, dtype, family, rows, cols): return (fill((rows, cols), family, seed, "
            f"dtype=dtype),), {{}}") from None


class Operator:
    """A reference program, its kernels (``"correct"`` plus behaviour-preserving variants:
    name -> callable or ``"package.module:function"``), an example builder ``example(seed,
    dtype, family, rows, cols) -> (inputs, params)``, the input ``domain`` and optional
    ``faulty`` kernels (kept apart from ``kernels``: mutation and stress studies count
    their kills).  ``source`` names where its precision plan comes from."""

    def __init__(self, name: str, reference, kernels: dict, example: Callable | None = None, *,
                 domain: Domain | None = None, faulty: dict | None = None, source: str = "user",
                 backward: bool = False):
        from ..reference import Reference, reference as as_reference
        if not isinstance(name, str) or not name or any(ch in name for ch in "/:\\ "):
            raise InvalidArgument(f"Operator(name={name!r}): expected a name without '/', ':' or spaces "
                                  f"(it names corpus directories).")
        if not isinstance(reference, Reference):
            if not callable(reference):
                raise InvalidArgument(f"Operator({name!r}, reference={reference!r}): expected a @no.reference "
                                      f"program.")
            reference = as_reference(reference)
        if not isinstance(kernels, dict) or not kernels or not all(
                isinstance(v, str) or callable(v) for v in kernels.values()):
            raise InvalidArgument(f"Operator({name!r}, kernels=...): expected a dict of kernel name -> callable or "
                                  f"'package.module:function', with at least one kernel ('correct').")
        if example is not None and not callable(example):
            raise InvalidArgument(f"Operator({name!r}, example={example!r}): expected a function "
                                  f"(seed, dtype, family, rows, cols) -> (inputs, params).")
        if example is not None:
            _check_example_signature(name, example)
        self.name, self.reference, self.source, self.backward = name, reference, source, backward
        self.domain = domain if domain is not None else Domain()
        if not isinstance(self.domain, Domain):
            raise InvalidArgument(f"Operator({name!r}, domain={domain!r}): expected a numoracle.Domain.")
        unknown = set(self.domain.params) - set(reference.param_names)
        if unknown:
            raise InvalidArgument(f"Operator({name!r}): the domain gives choices for {sorted(unknown)}, which "
                                  f"{reference.name} does not take (it takes {reference.param_names}).")
        # the reference holds every verdict's parameters to the domain's choices
        reference.declare_choices({k: v for k, v in self.domain.params.items() if k not in reference.param_choices})
        self._kernel_objects = dict(kernels)
        self.kernel_specs = {k: _spec_of(v) for k, v in kernels.items()}
        self._faulty_objects = dict(faulty or {})
        self.faulty = {k: _spec_of(v) for k, v in self._faulty_objects.items()}
        self.make_example = example
        self._kernels = None
        # where the object was made: ``package.module:attribute`` is found from it (spec)
        self.module = sys._getframe(1).f_globals.get("__name__")
        self._spec = None

    def __repr__(self):
        return f"<Operator {self.name} ({self.source}): {', '.join(self.kernel_specs)}>"

    @property
    def formats(self) -> tuple:
        return tuple(self.domain.formats)

    @property
    def kernels(self) -> dict:
        """name -> callable (imported on first use)."""
        if self._kernels is None or set(self._kernels) != set(self.kernel_specs):
            self._kernels = {k: load_kernel(self._kernel_objects.get(k, v)) for k, v in self.kernel_specs.items()}
        return self._kernels

    def attach(self, name: str, spec: str) -> None:
        """Add a kernel (an upstream package's, when it is installed)."""
        self.kernel_specs[name] = spec
        self._kernel_objects[name] = spec
        self._kernels = None

    def example(self, seed: int = 0, dtype=torch.bfloat16, family: str = "normal", rows=None, cols=None):
        """(inputs, params) for one case; ``family`` is a family or an input-group name.  A size
        not given is the default 4 x 96 moved into the domain (``Domain.fit``)."""
        if rows is None or cols is None:
            r, c = self.domain.fit(4 if rows is None else rows, 96 if cols is None else cols)
            rows, cols = (r if rows is None else rows), (c if cols is None else cols)
        self.require_example()
        return self.make_example(seed, dtype, family, rows, cols)

    def require_example(self) -> None:
        """Refuse, with what to write, an operator without an example builder where inputs are
        drawn (a case, a fuzz run, a campaign): only ``no.check`` on the user's own tensors runs
        without one."""
        if self.make_example is None:
            raise InvalidArgument(
                f"operator {self.name} has no example builder, and drawing cases needs one to make its inputs; "
                f"give Operator({self.name!r}, ..., example=f) with f(seed, dtype, family, rows, cols) -> "
                f"(inputs, params), e.g. def f(seed, dtype, family, rows, cols): return (fill((rows, cols), "
                f"family, seed, dtype=dtype), ...), {{}} with numoracle.strategies.fill (docs/tutorial.md).")

    def fixed_params(self, given: dict) -> dict:
        """``{name: (value,)}`` choices fixing each given parameter, checked against the
        reference (``Reference.check_params``): what ``--param NAME=VALUE`` passes to the
        strategies."""
        self.reference.check_params(dict(given))
        return {k: (v,) for k, v in given.items()}

    def has_kernel(self, spec: str) -> bool:
        """Whether ``spec`` names one of this operator's kernels: a kernel or variant, or a
        faulty kernel (``faulty:NAME`` or ``NAME``)."""
        return spec in self.kernel_specs or spec.removeprefix("faulty:") in self.faulty

    def faulty_kernel(self, name: str):
        if name not in self.faulty:
            raise InvalidArgument(f"{self.name} has faulty kernels {sorted(self.faulty)}, not {name!r}.")
        return load_kernel(self._faulty_objects.get(name, self.faulty[name]))

    @property
    def spec(self) -> str | None:
        """How to find this operator again in another process: its registered name, or the
        ``package.module:attribute`` that holds it; None if neither is known."""
        if self._spec is not None:
            return self._spec
        from . import REGISTRY
        if REGISTRY.get(self.name) is self:
            return self.name
        mod = sys.modules.get(self.module or "")
        for attr, value in vars(mod).items() if mod is not None else ():
            if value is self:
                return f"{self.module}:{attr}"
        return None

    def kernel_signature(self) -> str:
        """The signature a kernel of this operator must have, as a line of Python."""
        ref = self.reference
        params = []
        launch = tuple(getattr(ref, "launch_params", ()) or ())
        for p in ref.param_names:
            if p in launch:                  # read from the kernel's launch, never passed to it
                continue
            choices = self.domain.params.get(p)
            default = ref.param_defaults.get(p, choices[0] if choices else None)
            params.append(f"{p}={default!r}" if p in ref.param_defaults or choices else p)
        outs = ", ".join(ref.output_names) if ref.output_names else "outputs"
        args = ", ".join(ref.input_names)
        read = f"  (the reference reads {', '.join(launch)} from its launch)" if launch else ""
        return f"kernel({args}{', *, ' + ', '.join(params) if params else ''}) -> {outs}{read}"

    def to_dict(self) -> dict:
        return {"name": self.name, "source": self.source, "formats": list(self.formats),
                "spec": self.spec, "signature": self.kernel_signature(),
                "domain": {"rows": list(self.domain.rows), "cols": list(self.domain.cols),
                           "cols_multiple_of": self.domain.cols_multiple_of,
                           "params": {k: list(v) for k, v in self.domain.params.items()}},
                "kernels": [k for k in self.kernel_specs if k == "correct"],
                "variants": [k for k in self.kernel_specs if k not in ("correct",) + UPSTREAM_KERNELS],
                "upstream": [k for k in self.kernel_specs if k in UPSTREAM_KERNELS],
                "faulty": sorted(self.faulty), "backward": self.backward}


def operator(name: str, *, reference, kernels: dict, **kw):
    """``Operator`` as a decorator of its example builder::

        @no.operator("my_rms_norm", reference=ref, kernels={"correct": my_kernel})
        def my_rms_norm(seed, dtype, family, rows, cols):
            ...
            return (x, w), {"eps": 1e-6}
    """
    def make(example):
        op = Operator(name, reference, kernels, example, **kw)
        op.module = getattr(example, "__module__", op.module)
        return op
    return make


__all__ = ["Domain", "Operator", "UPSTREAM_KERNELS", "load_kernel", "operator", "pick_outputs"]
