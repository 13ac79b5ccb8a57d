"""Command fetch: reads one command from the ring with one AXI burst and holds it until it is dispatched."""

from __future__ import annotations

from amaranth import Module, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out
from amaranth.utils import exact_log2

from ...spec import BUS_BYTES, COMMAND_BYTES, ErrorCode
from ..axi import BURST_INCR, RESP_OKAY, AXI4Signature
from .slots import ErrorReportSignature

__all__ = ["CommandFetch"]


class CommandFetch(wiring.Component):
    """Fetches the command at ``ring_base + 32*head`` when ``start`` is high and no command is held.

    The command is read with one 4-beat INCR burst on the read channels of ``bus`` (its write channels are
    not driven).  On the last beat, ``fetched`` pulses and the command is held in ``cmd`` with its ring
    ``index`` and ``phase`` (``valid`` high) until ``taken``; an error response on any beat instead reports
    ``BUS_ERROR`` at ``head`` on ``error`` and holds nothing.  ``idle`` is high while no burst is open.
    """

    def __init__(self):
        super().__init__({
            "bus": Out(AXI4Signature(id_width=4)),
            "ring_base": In(32), "head": In(16), "ring_phase": In(1), "start": In(1), "taken": In(1),
            "cmd": Out(8 * COMMAND_BYTES), "index": Out(16), "phase": Out(1), "valid": Out(1),
            "fetched": Out(1), "error": Out(ErrorReportSignature()), "idle": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        bus = self.bus
        beat = Signal(range(COMMAND_BYTES // BUS_BYTES))
        bad_so_far = Signal()
        m.d.comb += [bus.arid.eq(0), bus.arlen.eq(COMMAND_BYTES // BUS_BYTES - 1), bus.arsize.eq(exact_log2(BUS_BYTES)),
                     bus.arburst.eq(BURST_INCR), bus.araddr.eq(self.ring_base + (self.head << 5)),
                     self.error.code.eq(ErrorCode.BUS_ERROR), self.error.index.eq(self.head)]
        with m.FSM(name="fetch"):
            with m.State("IDLE"):
                m.d.comb += self.idle.eq(1)
                with m.If(self.start & ~self.valid):
                    m.next = "ADDR"
            with m.State("ADDR"):
                m.d.comb += bus.arvalid.eq(1)
                with m.If(bus.arready):
                    m.d.sync += [beat.eq(0), bad_so_far.eq(0)]
                    m.next = "DATA"
            with m.State("DATA"):
                m.d.comb += bus.rready.eq(1)
                with m.If(bus.rvalid):
                    m.d.sync += [beat.eq(beat + 1), self.cmd.word_select(beat, 8 * BUS_BYTES).eq(bus.rdata)]
                    bad = bad_so_far | (bus.rresp != RESP_OKAY)
                    m.d.sync += bad_so_far.eq(bad)
                    with m.If(bus.rlast):
                        with m.If(bad):
                            m.d.comb += self.error.valid.eq(1)
                        with m.Else():
                            m.d.sync += [self.valid.eq(1), self.index.eq(self.head), self.phase.eq(self.ring_phase)]
                            m.d.comb += self.fetched.eq(1)
                        m.next = "IDLE"
        with m.If(self.taken):
            m.d.sync += self.valid.eq(0)
        return m
