"""What every per-tile register block object (PERF, TRACE) holds: the device, the tile and the block's base."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .device import Device

__all__ = ["TileBlock"]


class TileBlock:
    """A register block of one tile, found by :class:`~dx1_driver.Device` while it walks the register blocks.

    Parameters
    ----------
    device:
        The open device.
    tile:
        The tile the block belongs to (the n-th block of a type is tile n's).
    base:
        The block's register address.
    """

    def __init__(self, device: Device, tile: int, base: int):
        self.device = device
        self.tile = tile
        self.base = base
