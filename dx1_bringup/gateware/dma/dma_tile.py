"""A test top: the DMA wired to a tile core, so the DMA's testbenches can move data and compute on it."""

from __future__ import annotations

from amaranth import Module
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out, connect, flipped

from ...spec import COMMAND_BITS, TileConfig
from ..axi import AXI4Signature
from ..stream import AXIStreamSignature
from ..tile import LOCAL_PORTS, TileCore
from .core import Dma
from .params import BEAT_BYTES

__all__ = ["DmaTile"]


class DmaTile(wiring.Component):
    """A test top: a :class:`Dma` wired to a :class:`~.tile.TileCore`.

    ``axi`` is the DMA's memory port, ``dma_cmd``/``dma_done`` its command and
    status streams, and ``tile_cmd``/``tile_done`` the tile core's (so a test
    can also run GEMMs and post-ops on what the DMA moved).
    """

    def __init__(self, config: TileConfig, addr_width: int = 32, id_width: int = 4):
        self.config = config
        self.dma = Dma(config, addr_width=addr_width, id_width=id_width)
        super().__init__({
            "axi": Out(AXI4Signature(addr_width=addr_width, data_width=8 * BEAT_BYTES, id_width=id_width)),
            "dma_cmd": In(AXIStreamSignature(COMMAND_BITS)),
            "dma_done": Out(AXIStreamSignature(8)),
            "tile_cmd": In(AXIStreamSignature(COMMAND_BITS)),
            "tile_done": Out(AXIStreamSignature(32)),
            "dma_busy": Out(1),
            "dma_bytes_read": Out(32),
            "dma_bytes_written": Out(32),
            "tile_busy": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        m.submodules.dma = dma = self.dma
        m.submodules.tile = tile = TileCore(self.config)
        connect(m, flipped(self.axi), dma.axi)
        connect(m, flipped(self.dma_cmd), dma.cmd)
        connect(m, flipped(self.dma_done), dma.done)
        connect(m, flipped(self.tile_cmd), tile.cmd)
        connect(m, flipped(self.tile_done), tile.done)
        for name in LOCAL_PORTS:
            connect(m, getattr(dma, name), getattr(tile, name))
        m.d.comb += [
            self.dma_busy.eq(dma.busy), self.dma_bytes_read.eq(dma.bytes_read),
            self.dma_bytes_written.eq(dma.bytes_written), self.tile_busy.eq(tile.busy),
        ]
        return m
