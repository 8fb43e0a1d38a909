"""The runner (docs/design.md §9): case -> kernel on a backend -> reference -> verdict,
with outcomes for kernels that raise, return NaN, hang or crash (run in a supervised
worker process: ``runner.worker``), Hypothesis
``target()`` toward the region's edge, per-group statistics, an exit reason,
element-level shrinking and saving to a corpus."""

from .engine import Progress as Progress
from .engine import fuzz as fuzz
from .execute import KernelTimeout as KernelTimeout
from .execute import UserInterrupt as UserInterrupt
from .execute import execute as execute
from .execute import interrupts as interrupts
from .execute import judge as judge
from .execute import run_case as run_case
from .kernels import resolve as resolve_kernel
from .outcomes import EXIT_REASONS as EXIT_REASONS
from .outcomes import FINDINGS as FINDINGS
from .outcomes import STATUSES as STATUSES
from .outcomes import GroupStats as GroupStats
from .outcomes import Outcome as Outcome
from .outcomes import RunResult as RunResult
from .outcomes import boundary_score as boundary_score
from .outcomes import failure_class as failure_class
from .replay import replay as replay
from .shrink import minimize as minimize

__all__ = ["fuzz", "judge", "run_case", "resolve_kernel", "execute", "interrupts", "KernelTimeout", "UserInterrupt", "Progress",
           "Outcome", "RunResult", "GroupStats", "STATUSES", "FINDINGS", "EXIT_REASONS", "boundary_score",
           "failure_class", "minimize", "replay"]
