"""Opening the device a command names, with the message a user sees when it does not open."""

from __future__ import annotations

import sys

__all__ = ["open_device"]


def open_device(device: str, prog: str):
    """Open ``device`` for the command ``prog``; print why not (to standard error) and return None if it fails."""
    from dx1_driver import Device, DriverError

    if device == "sim":
        print("  starting a private simulator of the SoC RTL (the first run builds it: minutes) ...",
              flush=True)
    try:
        return Device.open(device)
    except (ValueError, DriverError) as exc:
        print(f"{prog}: {exc}", file=sys.stderr)
        return None
