"""``numoracle workers SCHEDULER``: start this host's Dask workers for a campaign or a
fuzzing run elsewhere (one per GPU, each pinned to its device; or CPU workers for the
interpreter) and block.  Dask's scheduler protocol pickles tasks: connect workers only to
a scheduler you trust (see docs/design.md §10)."""

from __future__ import annotations

from ..backends import RUNNING
from . import common



def add_arguments(p) -> None:
    p.add_argument("scheduler_address", metavar="SCHEDULER", help="the Dask scheduler (tcp://host:8786)")
    common.add_backend(p, default="gpu", choices=RUNNING)
    p.add_argument("--workers", type=common.positive_int, default=None,
                   help="workers on this host (default: one per visible GPU, more share them in turn; half the cores "
                        "on the interpreter)")
    p.add_argument("--memory-limit", default="0", help="host memory per worker (e.g. 16GiB; 0: no limit)")


def run(args) -> int:
    from ..studies.executors.core import serve_workers
    serve_workers(args.scheduler_address, backend=args.backend, workers=args.workers,
                  memory_limit=0 if args.memory_limit == "0" else args.memory_limit)
    return 0
