"""``dx1 info``: the spec's configuration and register blocks, and what discovery finds on a device."""

from __future__ import annotations

import argparse
from typing import Any

from . import args as types
from .devices import open_device

__all__ = ["add_parser", "cmd_info"]


def cmd_info(args: argparse.Namespace) -> int:
    from ..spec import MAGIC, SPEC_VERSION, SocConfig, register_map

    config = SocConfig()
    regs = register_map(config)
    print(f"dx1-mini spec {SPEC_VERSION >> 16}.{SPEC_VERSION & 0xFFFF}, magic {MAGIC:#010x}")
    print(f"tiles {config.tiles}, array {config.tile.array}x{config.tile.array}, scratchpad "
          f"{config.tile.spm_rows} rows x {config.tile.spm_row_bytes} B, accumulators {config.tile.acc_rows} rows x "
          f"{config.tile.acc_row_bytes} B, device memory {config.mem_bytes // 1024} KiB")
    for block in regs.blocks:
        print(f"  {block.base:#06x} {block.name:<8} {len(block.registers):3} registers  next {block.next:#06x}")
    if args.device is None:
        return 0
    dev = open_device(args.device, "dx1 info")
    if dev is None:
        return 2
    with dev:
        caps = dev.caps
        features = [name for name in ("postop", "copy", "trace") if getattr(caps, name)]
        print(f"device {args.device}: hw {caps.hw_version >> 16}.{caps.hw_version & 0xFFFF}, tiles {caps.tiles}, "
              f"array {caps.array}x{caps.array}, scratchpad {caps.spm_rows} rows, accumulators {caps.acc_rows} rows, "
              f"device memory {caps.mem_bytes // 1024} KiB, {caps.semaphores} semaphores, "
              f"features {' '.join(features) or 'none'}")
        for block in dev.blocks:
            kind = block.type.name if block.type is not None else f"unknown 0x{block.id:08x}"
            print(f"  {block.base:#06x} {kind:<8} version {block.version >> 16}.{block.version & 0xFFFF}")
    return 0


def add_parser(sub: Any) -> None:
    """Add ``info`` to the ``dx1`` subcommands."""
    info = sub.add_parser("info", help="the spec's configuration and register blocks (and a device's)",
                          description="print the spec's configuration and register blocks; with --device, also "
                                      "what discovery finds on that device")
    info.add_argument("--device", type=types.device, default=None,
                      help="also open this device and print what discovery finds (model, ...)")
    info.set_defaults(func=cmd_info)
