"""``python -m dx1_bringup.replay FILE [--device D]``: replay a capture; exit 0 if it agrees, 1 at a mismatch.

Exit status 2 for a capture that cannot be replayed (truncated, corrupted, another spec version or
configuration) or a device that cannot be opened.
"""

from __future__ import annotations

import argparse
import sys
import time

from dx1_driver import Device, DriverError

from .capture import CaptureError, load_capture
from .replay import replay


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m dx1_bringup.replay", description=__doc__.splitlines()[0])
    ap.add_argument("capture", help="capture file (dx1-capture JSON lines)")
    ap.add_argument("--device", default="model", help="device string to replay on (default: model)")
    args = ap.parse_args(argv)
    prog = ap.prog
    try:
        capture = load_capture(args.capture)
    except (OSError, CaptureError) as e:
        print(f"{prog}: {e}", file=sys.stderr)
        return 2
    try:
        device = Device.open(args.device)
    except (ValueError, DriverError) as e:
        print(f"{prog}: {e}", file=sys.stderr)
        return 2
    start = time.monotonic()
    with device:
        try:
            result = replay(capture, device)
        except CaptureError as e:
            print(f"{prog}: {e}", file=sys.stderr)
            return 2
    took = time.monotonic() - start
    if result.ok:
        print(f"{args.capture}: {result.events} events, {result.commands} commands replayed on {args.device} in "
              f"{took:.2f} s: every completion and downloaded byte agrees")
        return 0
    print(f"{args.capture}: mismatch on {args.device} at {result.mismatch}")
    return 1


if __name__ == "__main__":
    sys.exit(main())
