"""What every per-tile register block object (PERF, TRACE) holds: the transport, the tile and the block's base."""

from __future__ import annotations

from .transport import Transport

__all__ = ["TileBlock"]


class TileBlock:
    """A register block of one tile, found by :class:`~dx1_driver.Device` while it walks the register blocks.

    Parameters
    ----------
    transport:
        How the block's registers are reached (the device's transport).
    tile:
        The tile the block belongs to (the n-th block of a type is tile n's).
    base:
        The block's register address.
    """

    def __init__(self, transport: Transport, tile: int, base: int):
        self.transport = transport
        self.tile = tile
        self.base = base

    def _reg(self, offset: int) -> int:
        return self.transport.read32(self.base + offset)

    def _set(self, offset: int, value: int) -> None:
        self.transport.write32(self.base + offset, value)
