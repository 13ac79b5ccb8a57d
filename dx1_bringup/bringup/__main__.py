"""``python -m dx1_bringup.bringup --device D``: the same as ``dx1 bringup``."""

import sys

from .cli import main

sys.exit(main())
