"""Under pytest-xdist (the README's ``-n auto``) each worker process gets one of the
machine's cores: torch's own thread pool would otherwise put two threads on every core."""

import os

if os.environ.get("PYTEST_XDIST_WORKER"):
    import torch

    torch.set_num_threads(1)

# a kind of signature compiles with symbolic sizes once its eager verdicts have taken
# settings.compile_shapes_after seconds in a process: in a test worker that would be whichever
# test happens to cross the line, minutes of compiling.  The tests of that path set it themselves.
import numoracle  # noqa: E402

numoracle.settings.register_profile("numoracle-tests", compile_shapes_after=0)
numoracle.settings.load_profile("numoracle-tests")
