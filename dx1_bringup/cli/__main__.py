"""``python -m dx1_bringup.cli``: the same as ``dx1``."""

import sys

from . import main

sys.exit(main())
