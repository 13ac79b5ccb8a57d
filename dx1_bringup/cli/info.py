"""``dx1 info``: the spec's configuration and register blocks, and what discovery finds on a device."""

from __future__ import annotations

import argparse
import textwrap
from typing import Any

from .. import argtypes as types
from .devices import open_device

__all__ = ["add_parser", "cmd_info"]


def cmd_info(args: argparse.Namespace) -> int:
    from ..spec import MAGIC, SPEC_HISTORY, SPEC_VERSION, VERSIONS_EXPLAINED, SocConfig, register_map

    # The device first: one that does not open is refused before anything is printed.
    dev = None if args.device is None else open_device(args.device, "dx1 info")
    if args.device is not None and dev is None:
        return 2
    config = SocConfig()
    regs = register_map(config)
    print(f"dx1-mini spec {_version(SPEC_VERSION)}, magic {MAGIC:#010x}")
    print(textwrap.fill(VERSIONS_EXPLAINED, 110, initial_indent="  ", subsequent_indent="  "))
    for version, change in SPEC_HISTORY:
        print(textwrap.fill(f"{_version(version)}: {change}", 110, initial_indent="    ",
                            subsequent_indent="         "))
    print(f"tiles {config.tiles}, array {config.tile.array}x{config.tile.array}, scratchpad "
          f"{config.tile.spm_rows} rows x {config.tile.spm_row_bytes} B, accumulators {config.tile.acc_rows} rows x "
          f"{config.tile.acc_row_bytes} B, device memory {config.mem_bytes // 1024} KiB")
    for block in regs.blocks:
        print(f"  {block.base:#06x} {block.name:<8} {len(block.registers):3} registers  version "
              f"{_version(block.spec.version)}  next {block.next:#06x}")
    if dev is None:
        return 0
    with dev:
        caps = dev.caps
        features = [name for name in ("postop", "copy", "trace", "vector") if getattr(caps, name)]
        print(f"device {args.device}: hw {_version(caps.hw_version)}, tiles {caps.tiles}, "
              f"array {caps.array}x{caps.array}, scratchpad {caps.spm_rows} rows, accumulators {caps.acc_rows} rows, "
              f"device memory {caps.mem_bytes // 1024} KiB, {caps.semaphores} semaphores, "
              f"features {' '.join(features) or 'none'}")
        for block in dev.blocks:
            kind = block.type.name if block.type is not None else f"unknown 0x{block.id:08x}"
            print(f"  {block.base:#06x} {kind:<8} version {_version(block.version)}")
    return 0


def _version(v: int) -> str:
    return f"{v >> 16}.{v & 0xFFFF}"


def add_parser(sub: Any) -> None:
    """Add ``info`` to the ``dx1`` subcommands."""
    info = sub.add_parser("info", help="the spec's configuration and register blocks (and a device's)",
                          description="print the spec's configuration and register blocks; with --device, also "
                                      "what discovery finds on that device")
    info.add_argument("--device", type=types.device, default=None,
                      help="also open this device and print what discovery finds (model, ...)")
    info.set_defaults(func=cmd_info)
