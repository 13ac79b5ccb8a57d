"""``python -m dx1_bringup.replay FILE [--device D]``: replay a capture, the same as ``dx1 replay``.

Exit 0 if every completion and downloaded byte agrees, 1 at a mismatch, 2 for a capture that cannot be
replayed (truncated, corrupted, another spec version or configuration) or a device that cannot be opened.
"""

from __future__ import annotations

import sys

from .cli import replay_main as main

__all__ = ["main"]

if __name__ == "__main__":
    sys.exit(main())
