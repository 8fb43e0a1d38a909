"""``python -m numoracle``: the same command line as the ``numoracle`` script."""

import sys

from .cli import main

sys.exit(main())
