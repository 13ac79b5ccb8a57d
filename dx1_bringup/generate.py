"""``dx1 rtl`` (``make rtl``): regenerate every generated file from its one source.

Verilog for each module in :data:`dx1_bringup.gateware.RTL_MODULES` goes to
rtl/; the C header, the driver's Python accessors, the JSON description and
the Markdown references come from :mod:`dx1_bringup.spec`.  A file is only
rewritten when its content changes, so CI can check for drift with git.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]

__all__ = ["add_parser", "cmd_rtl"]


def cmd_rtl(args: argparse.Namespace) -> int:
    """Write each generated file whose content changed, printing one line a file; exit 0."""
    # Imported here: elaborating the gateware needs Amaranth, which no other dx1 command loads.
    from .gateware import RTL_MODULES
    from .gen import write_all

    for i, mod in enumerate(RTL_MODULES, 1):
        start = time.perf_counter()
        print(f"[{i}/{len(RTL_MODULES)}] {mod.path.relative_to(ROOT)}: {mod.doc} ...", end=" ", flush=True)
        text = mod.verilog()
        changed = not mod.path.exists() or mod.path.read_text() != text
        if changed:
            mod.path.write_text(text)
        print(f"{'written' if changed else 'unchanged'} ({time.perf_counter() - start:.1f} s)")
    for path in write_all(ROOT):
        print(f"spec -> {path.relative_to(ROOT) if path.is_absolute() else path}")
    return 0


def add_parser(sub: Any) -> None:
    """Add ``rtl`` to the ``dx1`` subcommands."""
    p = sub.add_parser("rtl", help="regenerate rtl/ and the spec's generated files (make rtl)",
                       description="regenerate the Verilog in rtl/, the driver's registers, the C header and the "
                                   "spec's docs from their one source")
    p.set_defaults(func=cmd_rtl)
