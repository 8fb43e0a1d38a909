"""Executors for campaigns and fuzzing (issue 9): work units (operator,
kernel, input group, seed range) run in local processes or on Dask
distributed, results streamed back and merged once per unit id.

- ``map_units(units, fn, executor="local"|"dask", scheduler=None, ...)``
  yields ``(unit, result)`` as units complete (``core``);
- ``campaign.run_correct_stage`` / ``campaign.campaign``: the campaign's
  correct stage on an executor, the same ``data["correct"]`` as the serial one;
- ``fuzz.fuzz_units`` / ``fuzz.run_fuzz``: the runner over seed ranges of
  input groups, corpus cases written on the client;
- ``python -m numoracle.studies.executors campaign|fuzz|workers``: the same from the
  shell (``workers`` starts one pinned Dask worker per GPU of this host).
"""
from .core import EXECUTORS as EXECUTORS
from .core import Unit as Unit
from .core import UnitFailed as UnitFailed
from .core import map_units as map_units
from .core import prepare_worker as prepare_worker
from .core import serve_workers as serve_workers
from .core import start_cluster as start_cluster
from .core import visible_gpus as visible_gpus


def add_arguments(p) -> None:
    """``--executor/--scheduler/--workers`` for a subcommand's parser."""
    p.add_argument("--executor", default="local", choices=EXECUTORS,
                   help="local: one process per visible GPU (gpu; --workers above the GPU count share them) or "
                        "--workers processes (interpreter, default 1); "
                        "dask: a Dask distributed cluster (--scheduler ADDRESS, or one started on this host)")
    p.add_argument("--scheduler", default=None, metavar="ADDRESS",
                   help="Dask scheduler to connect to (tcp://host:8786); default: start a local cluster")
    p.add_argument("--workers", type=int, default=None,
                   help="processes / Dask workers on this host (default: one per GPU; more share the GPUs in turn, "
                        "which pays off where a case is mostly host work, as for small kernels; 1 on the "
                        "interpreter for local, half the cores for dask)")


def wants_executor(args) -> bool:
    """Whether a ``numoracle campaign`` / ``numoracle fuzz`` invocation goes
    through the executor rather than the serial, in-process path: ``--executor
    dask``, ``--workers N``, or (``local``, the default) more than one GPU
    visible on the gpu backend -- one process per GPU."""
    if getattr(args, "executor", "local") != "local" or getattr(args, "scheduler", None):
        return True
    if getattr(args, "workers", None) is not None:
        return True
    if getattr(args, "backend", "interpreter") in ("gpu", "auto"):
        from ... import backends
        if backends.interpret_requested():
            return False
        try:
            return len(visible_gpus()) > 1
        except Exception:
            return False
    return False


__all__ = ["EXECUTORS", "Unit", "UnitFailed", "map_units", "prepare_worker", "serve_workers", "start_cluster",
           "visible_gpus", "add_arguments", "wants_executor"]
