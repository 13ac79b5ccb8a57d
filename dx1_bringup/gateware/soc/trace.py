"""One tile's trace FIFO writer: command start and end events, timestamped, into the TRACE block's FIFO."""

from __future__ import annotations

from amaranth import Cat, Module, ResetInserter, Signal
from amaranth.lib import wiring
from amaranth.lib.fifo import SyncFIFOBuffered
from amaranth.lib.wiring import In, Out

from ...spec.registers import Register
from ..regfile import field_word

__all__ = ["TraceWriter"]


class TraceWriter(wiring.Component):
    """Writes a start event when a command is dispatched and an end event when its completion is written.

    An event is 64 bits: ``timestamp`` (the cycle counter's low word), then TRACE.DATA_HI's fields (tag,
    opcode, status for an end, ``end``).  Events are taken while ``enable`` and registered first, so the
    dispatch logic does not reach the FIFO's write port in the same cycle; a start and an end in the same
    cycle are written start first, the end a cycle later.  ``clear`` empties the FIFO and drops a held
    event.  ``count`` is the FIFO's level; ``data_lo``/``data_hi`` the oldest event (0 when empty), which
    ``pop`` (DATA_HI read) removes.

    Parameters
    ----------
    depth:
        Events the FIFO holds; later ones are dropped while it is full.
    data_hi:
        The spec's TRACE.DATA_HI register, whose fields place the event's high word.
    """

    def __init__(self, depth: int, data_hi: Register):
        self.depth = depth
        self.data_hi = data_hi
        super().__init__({
            "timestamp": In(32), "enable": In(1), "clear": In(1),
            "start": In(1), "start_tag": In(16), "start_opcode": In(8),
            "end": In(1), "end_tag": In(16), "end_opcode": In(8), "end_status": In(8),
            "count": Out(32), "data_lo": Out(32), "data_hi_word": Out(32), "pop": In(1),
        })

    def elaborate(self, platform):
        m = Module()
        m.submodules.fifo = fifo = ResetInserter(self.clear)(SyncFIFOBuffered(width=64, depth=self.depth))
        start = Signal(64)
        end = Signal(64)
        start_valid = Signal()
        end_valid = Signal()
        m.d.sync += [
            start.eq(Cat(self.timestamp, field_word(self.data_hi, tag=self.start_tag, opcode=self.start_opcode[:7],
                                                    end=0))),
            end.eq(Cat(self.timestamp, field_word(self.data_hi, tag=self.end_tag, status=self.end_status,
                                                  opcode=self.end_opcode[:7], end=1))),
            start_valid.eq(self.start & self.enable & ~self.clear),
            end_valid.eq(self.end & self.enable & ~self.clear),
        ]
        held = Signal(64)
        held_valid = Signal()
        # Dispatches are a command fetch apart and completion writes a bus write apart, so one held event
        # is enough.
        with m.If(held_valid):
            m.d.comb += [fifo.w_data.eq(held), fifo.w_en.eq(1)]
            m.d.sync += held_valid.eq(0)
        with m.Elif(start_valid):
            m.d.comb += [fifo.w_data.eq(start), fifo.w_en.eq(1)]
            m.d.sync += [held.eq(end), held_valid.eq(end_valid)]
        with m.Elif(end_valid):
            m.d.comb += [fifo.w_data.eq(end), fifo.w_en.eq(1)]
        with m.If(self.clear):
            m.d.sync += held_valid.eq(0)
        m.d.comb += [
            self.count.eq(fifo.level),
            self.data_lo.eq(fifo.r_data[:32] & fifo.r_rdy.replicate(32)),
            self.data_hi_word.eq(fifo.r_data[32:] & fifo.r_rdy.replicate(32)),
            fifo.r_en.eq(self.pop),
        ]
        return m
