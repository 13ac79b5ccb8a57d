"""`make rtl`: regenerate every generated file from its one source.

Verilog for each module in :data:`dx1_bringup.gateware.RTL_MODULES` goes to
rtl/; the C header, the driver's Python accessors, the JSON description and
the Markdown references come from :mod:`dx1_bringup.spec`.  A file is only
rewritten when its content changes, so CI can check for drift with git.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from .gateware import RTL_MODULES
from .gen import write_all

ROOT = Path(__file__).resolve().parents[1]


def main() -> int:
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


if __name__ == "__main__":
    sys.exit(main())
