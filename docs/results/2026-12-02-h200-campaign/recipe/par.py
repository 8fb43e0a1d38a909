"""Run numoracle's CLI with the local executor's GPU list replaced by NO_PAR copies of GPU 0,
so that `--executor local --workers N` starts N unit-worker processes sharing the one H200.
(numoracle's local executor otherwise starts one worker per visible GPU.)  Nothing else changes."""
import os
import sys

from numoracle.studies.executors import core

_N = int(os.environ.get("NO_PAR", "1"))
core.visible_gpus = lambda: ["0"] * _N

if __name__ == "__main__":
    from numoracle.cli import main
    sys.exit(main(sys.argv[1:]))
