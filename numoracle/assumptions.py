"""Assumption profiles (docs/design.md §6): what a verdict is conditional on."""

from __future__ import annotations

from dataclasses import dataclass, field

from .errors import InvalidArgument

# the backends a kernel runs on: what verdicts and saved cases record (numoracle.backends adds "auto")
BACKENDS = ("interpreter", "gpu")


@dataclass(frozen=True)
class Assumptions:
    backend: str
    math_profile: str
    rounding: str = "round-to-nearest-even at every site"
    fma: str = "multiply-adds may be contracted into one FMA or not (both admitted)"
    ftz: str = "no flush-to-zero in arithmetic"
    inputs: str = "inputs finite"
    # how tl.dot adds, where it is not "rounding" (the tensor-core model of GPU profiles)
    dot: str | None = None
    implementation: tuple = field(default=(
        "the kernel follows the annotated formats, order models and math calls",))
    # the static check of that last assumption (numoracle.plan.assumption), when it was made:
    # settings.plan_check and a verdict that knows its kernel (docs/plan.md)
    plan: str | None = None
    # not an assumption but a doubt about where the outputs came from, printed on a line of its
    # own: the process ran Triton's interpreter without numoracle's repairs (backends.bare_interpreter)
    caution: str | None = None

    def lines(self) -> list[str]:
        return [f"backend: {self.backend} (math profile {self.math_profile})", f"rounding: {self.rounding}",
                f"fma: {self.fma}", f"ftz: {self.ftz}", *([f"dot: {self.dot}"] if self.dot else []),
                f"domain: {self.inputs}",
                *(f"implementation: {x}" for x in self.implementation),
                *([f"plan: {self.plan}"] if self.plan else [])]

    def to_dict(self) -> dict:
        return {"backend": self.backend, "math_profile": self.math_profile, "rounding": self.rounding,
                "fma": self.fma, "ftz": self.ftz, "dot": self.dot, "inputs": self.inputs,
                "implementation": list(self.implementation), "plan": self.plan, "caution": self.caution}


DEFAULT_PROFILE = {"interpreter": "interpreter", "gpu": "h200"}
# GPUs with a calibrated math profile (a substring of torch.cuda.get_device_name -> profile);
# any other CUDA device gets the conservative profile from CUDA's documented bounds.  The H100
# is the H200's chip (sm_90, the same libdevice): its own calibration lies inside the h200
# bounds everywhere and 18,600 campaign runs judged with them had no false alarm
# (docs/results/2026-12-07-h100-h200-profile.md).
CALIBRATED_GPUS = {"H200": "h200", "H100": "h200"}
UNKNOWN_GPU_PROFILE = "cuda_documented"


def gpu_profile(device_name: str | None = None) -> str:
    """The math profile for a GPU: its calibrated profile if there is one, else
    ``cuda_documented``.  ``device_name`` defaults to CUDA device 0's name; with
    no CUDA device (judging saved GPU outputs elsewhere) the H200 profile."""
    if device_name is None:
        try:
            import torch

            if not torch.cuda.is_available():
                return DEFAULT_PROFILE["gpu"]
            device_name = torch.cuda.get_device_name(0)
        except Exception:  # pragma: no cover - a broken CUDA setup
            return DEFAULT_PROFILE["gpu"]
    for key, prof in CALIBRATED_GPUS.items():
        if key.lower() in device_name.lower():
            return prof
    return UNKNOWN_GPU_PROFILE


def default_profile(backend: str) -> str:
    """The math profile a backend's verdicts use unless told otherwise."""
    return gpu_profile() if backend == "gpu" else DEFAULT_PROFILE[backend]


def for_backend(backend: str, profile: str | None = None) -> Assumptions:
    if backend not in BACKENDS:
        raise InvalidArgument(f"backend={backend!r}: expected one of {BACKENDS}.")
    prof = profile or default_profile(backend)
    dot = {}
    try:
        from .mathlib import load
        if load(prof).dot == "tensor_core":
            dot = {"dot": TENSOR_CORE_DOT}
    except InvalidArgument:
        pass     # an unreadable profile file fails where the verdict loads it, with its own message
    if backend == "gpu":
        return Assumptions(backend, prof, ftz="approximate math functions flush subnormals (libdevice FTZ)", **dot)
    return Assumptions(backend, prof, fma="the interpreter never contracts; fused evaluations are admitted too",
                       **dot)


TENSOR_CORE_DOT = ("tl.dot of 16-bit or TF32 operands into fp32 adds as sm_90 tensor cores do (blocks of products "
                   "truncated and rounded toward zero), or in round-to-nearest; fp32 operands read as TF32 "
                   "(no.matmul(..., input_precision=\"tf32\")) lose their low 13 bits, as on an H100; "
                   "input_precision=\"tf32x3\", \"bf16x3\" or \"bf16x6\" splits them into parts as Triton does "
                   "(docs/design.md §4.4)")
