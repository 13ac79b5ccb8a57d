"""Read bursts of the link DMA that never wait for their data to be taken: each is issued only once the buffer it
fills has room for every beat of it."""

from __future__ import annotations

from amaranth import Module, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out
from amaranth.utils import exact_log2

from ...spec.chip_link import LINK_BURST
from ..axi import BURST_INCR, AXI4Signature
from ..dma.burst import BurstGenerator
from ..dma.params import BEAT_BYTES

__all__ = ["READ_BURST", "ReservedReads"]

#: Longest read burst of the link DMA (the spec's, which its timing counts on): half its data FIFO, so one burst's
#: beats arrive while the last is taken.
READ_BURST = LINK_BURST


class ReservedReads(wiring.Component):
    """Reads ``beats`` beats from ``base`` on the read channels of ``bus`` in page-legal bursts of at most
    :data:`READ_BURST`, each issued only while ``room`` (free entries of the buffer the beats go to) covers it
    and every beat already asked for.

    A link DMA's read waits for credits from another chip; if its burst could stall the memory's read side
    until they came, chips in a ring could each hold their memory for the next (a deadlock across the ring).
    Reserving the room first, every beat is taken the cycle it arrives: ``beat`` marks it.
    ``abort`` ends the job: no new burst, beats of issued ones still arrive.  ``done``: every burst was issued and
    answered; ``issued``: every burst was issued (a new job may start while their beats arrive); ``error``: a
    beat had an error response.
    """

    def __init__(self, depth: int, addr_width: int = 32, id_width: int = 4):
        self.depth = depth
        self.addr_width = addr_width
        super().__init__({
            "bus": Out(AXI4Signature(addr_width=addr_width, data_width=8 * BEAT_BYTES, id_width=id_width)),
            "start": In(1), "base": In(addr_width), "beats": In(30), "abort": In(1),
            "room": In(range(depth + 1)), "beat": Out(1), "error": Out(1), "done": Out(1), "issued": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        bus = self.bus
        m.submodules.bursts = bursts = BurstGenerator(self.addr_width, segmented=False)
        asked = Signal(range(self.depth + READ_BURST + 1))  # beats issued, not yet arrived
        cancelled = Signal()  # an abort ends the job: the bursts not yet issued never will be
        m.d.comb += [
            bursts.start.eq(self.start), bursts.base.eq(self.base), bursts.seg_beats.eq(self.beats),
            bursts.max_beats.eq(READ_BURST),
            bursts.allow.eq(~self.abort & ~cancelled & ~self.start & (asked + bursts.beats <= self.room)),
            bus.arvalid.eq(bursts.valid), bus.araddr.eq(bursts.addr), bus.arlen.eq(bursts.len),
            bursts.ready.eq(bus.arready),
            bus.arid.eq(0), bus.arsize.eq(exact_log2(BEAT_BYTES)), bus.arburst.eq(BURST_INCR),
            bus.rready.eq(1), self.beat.eq(bus.rvalid), self.error.eq(bus.rvalid & (bus.rresp != 0)),
        ]
        m.d.sync += asked.eq(asked + bursts.issue * bursts.beats - self.beat)
        with m.If(self.start):
            m.d.sync += cancelled.eq(0)
        with m.Elif(self.abort):
            m.d.sync += cancelled.eq(1)
        m.d.comb += [self.done.eq((~bursts.active | cancelled) & ~bus.arvalid & (asked == 0)),
                     self.issued.eq(~bursts.active | cancelled)]
        return m
