"""Assumption profiles (DESIGN §6): what a verdict is conditional on."""

from __future__ import annotations

from dataclasses import dataclass, field

from .errors import InvalidArgument

BACKENDS = ("interpreter", "gpu")


@dataclass(frozen=True)
class Assumptions:
    backend: str
    math_profile: str
    rounding: str = "round-to-nearest-even at every site"
    fma: str = "multiply-adds may be contracted into one FMA or not (both admitted)"
    ftz: str = "no flush-to-zero in arithmetic"
    inputs: str = "inputs finite"
    implementation: tuple = field(default=(
        "the kernel follows the annotated formats, order models and math calls",))

    def lines(self) -> list[str]:
        return [f"backend: {self.backend} (math profile {self.math_profile})", f"rounding: {self.rounding}",
                f"fma: {self.fma}", f"ftz: {self.ftz}", f"domain: {self.inputs}",
                *(f"implementation: {x}" for x in self.implementation)]

    def to_dict(self) -> dict:
        return {"backend": self.backend, "math_profile": self.math_profile, "rounding": self.rounding,
                "fma": self.fma, "ftz": self.ftz, "inputs": self.inputs,
                "implementation": list(self.implementation)}


DEFAULT_PROFILE = {"interpreter": "interpreter", "gpu": "h200"}


def for_backend(backend: str, profile: str | None = None) -> Assumptions:
    if backend not in BACKENDS:
        raise InvalidArgument(f"backend={backend!r}: expected one of {BACKENDS}.")
    prof = profile or DEFAULT_PROFILE[backend]
    if backend == "gpu":
        return Assumptions(backend, prof, ftz="approximate math functions flush subnormals (libdevice FTZ)")
    return Assumptions(backend, prof, fma="the interpreter never contracts; fused evaluations are admitted too")
