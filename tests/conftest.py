"""Under pytest-xdist (the README's ``-n auto``) each worker process gets one of the
machine's cores: torch's own thread pool would otherwise put two threads on every core."""

import os

if os.environ.get("PYTEST_XDIST_WORKER"):
    import torch

    torch.set_num_threads(1)
