"""The DMA's read side: read bursts from device memory, and their count."""

from __future__ import annotations

from amaranth import Module, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out
from amaranth.utils import exact_log2

from ..axi import BURST_INCR, MAX_BURST, AXI4Signature
from .burst import BurstGenerator
from .params import BEAT_BYTES, MAX_READS

__all__ = ["ReadEngine"]


class ReadEngine(wiring.Component):
    """Issues the read bursts of a LOAD or COPY on the read channels of ``bus`` (its write channels are not
    driven).  A burst is loaded into the address register only while fewer than :data:`~.params.MAX_READS`
    are open (address taken, last beat not yet), so at most ``MAX_READS + 1`` addresses are out unanswered.

    ``start`` with ``base``, ``stride``, ``segments`` and ``seg_beats`` begins a job (see
    :class:`~.burst.BurstGenerator`); no new burst goes out while ``hold`` or ``abort`` is high.  Read beats
    are accepted while ``take`` is high (``beat`` marks each one) and counted in ``bytes_read``.  ``done``:
    every burst of the job was issued and answered; ``quiet``: no burst is open or waiting for its address
    handshake.
    """

    def __init__(self, addr_width: int = 32, id_width: int = 4):
        super().__init__({
            "bus": Out(AXI4Signature(addr_width=addr_width, data_width=8 * BEAT_BYTES, id_width=id_width)),
            "start": In(1), "base": In(addr_width), "stride": In(addr_width), "segments": In(16), "seg_beats": In(30),
            "hold": In(1), "abort": In(1), "take": In(1), "beat": Out(1),
            "bytes_read": Out(32), "done": Out(1), "quiet": Out(1),
        })
        self.addr_width = addr_width

    def elaborate(self, platform):
        m = Module()
        bus = self.bus
        m.submodules.bursts = bursts = BurstGenerator(self.addr_width)
        reads_out = Signal(range(MAX_READS + 1))
        ar_hs = Signal()
        m.d.comb += [
            bursts.start.eq(self.start), bursts.base.eq(self.base), bursts.stride.eq(self.stride),
            bursts.segments.eq(self.segments), bursts.seg_beats.eq(self.seg_beats), bursts.max_beats.eq(MAX_BURST),
            bursts.allow.eq((reads_out < MAX_READS) & ~self.hold & ~self.abort),
            bus.arvalid.eq(bursts.valid), bus.araddr.eq(bursts.addr), bus.arlen.eq(bursts.len),
            bursts.ready.eq(bus.arready),
            bus.arid.eq(0), bus.arsize.eq(exact_log2(BEAT_BYTES)), bus.arburst.eq(BURST_INCR),
            bus.rready.eq(self.take),
            ar_hs.eq(bus.arvalid & bus.arready),
            self.beat.eq(bus.rvalid & bus.rready),
        ]
        m.d.sync += reads_out.eq(reads_out + ar_hs - (self.beat & bus.rlast))
        with m.If(self.beat):
            m.d.sync += self.bytes_read.eq(self.bytes_read + BEAT_BYTES)
        m.d.comb += [self.done.eq(~bursts.active & ~bus.arvalid & (reads_out == 0)),
                     self.quiet.eq(~bus.arvalid & (reads_out == 0))]
        return m
