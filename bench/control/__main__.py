"""Entry point of ``python -m bench.control``."""

import sys

from .run import main

sys.exit(main())
