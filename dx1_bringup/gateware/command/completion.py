"""The completion writer: one 8-byte completion entry a command, written to the completion ring."""

from __future__ import annotations

from amaranth import Cat, Const, Module, Signal
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out
from amaranth.utils import exact_log2

from ...spec import BUS_BYTES, COMPLETION_BYTES, ErrorCode
from ..axi import BURST_INCR, RESP_OKAY, AXI4Signature
from ..stream import AXIStreamSignature
from .slots import SLOT_LAYOUT, ErrorReportSignature

__all__ = ["CompletionWriter"]


class CompletionWriter(wiring.Component):
    """Writes each command's completion entry (tag, status, opcode, timestamp, phase) at ``cq_base + 8*index``.

    Sources, in priority order, each taken only while ``quiesce`` is low and the writer is idle:

    1. the local completion: a command the processor completed itself, given by ``local_push`` with its
       ``local_slot`` and ``local_status`` and held (``local_valid``) until written;
    2. while ``flushing``, the oldest DMA then tile command in flight (``dma_pending``/``tile_pending``,
       ``dma_oldest``/``tile_oldest``), completed with ``TIMEOUT``;
    3. unless ``aborting``, a DMA status on ``dma_done``, then a tile core completion on ``tile_done``.

    A unit's completion taken pulses ``dma_pop``/``tile_pop``.  The entry goes out on the write channels of
    ``bus`` (its read channels are not driven) as one single-beat burst; when its response is an error,
    ``error`` reports ``BUS_ERROR`` at the entry's index, else ``irq_completion`` pulses; either way
    ``trace_end`` pulses with the entry's tag, opcode and status.  ``idle``: no entry is being written.
    """

    def __init__(self):
        super().__init__({
            "bus": Out(AXI4Signature(id_width=4)),
            "cq_base": In(32), "timestamp": In(32), "quiesce": In(1), "aborting": In(1), "flushing": In(1),
            "local_push": In(1), "local_slot": In(SLOT_LAYOUT), "local_status": In(8), "local_valid": Out(1),
            "tile_pending": In(1), "tile_oldest": In(SLOT_LAYOUT), "tile_done": In(AXIStreamSignature(32)),
            "tile_pop": Out(1),
            "dma_pending": In(1), "dma_oldest": In(SLOT_LAYOUT), "dma_done": In(AXIStreamSignature(8)),
            "dma_pop": Out(1),
            "busy": Out(1), "idle": Out(1), "error": Out(ErrorReportSignature()), "irq_completion": Out(1),
            "trace_end": Out(1), "trace_end_tag": Out(16), "trace_end_opcode": Out(8), "trace_status": Out(8),
        })

    def elaborate(self, platform):
        m = Module()
        bus = self.bus
        local = Signal(SLOT_LAYOUT)
        local_status = Signal(8)
        with m.If(self.local_push):
            m.d.sync += [self.local_valid.eq(1), local.eq(self.local_slot), local_status.eq(self.local_status)]

        cpl_addr = Signal(32)
        cpl_data = Signal(64)
        cpl_index = Signal(16)
        cpl_tag = Signal(16)
        cpl_opcode = Signal(8)

        def entry(slot, tag, opcode, st):
            word = Cat(tag, st, opcode, self.timestamp[:31], slot.phase)
            return [cpl_addr.eq(self.cq_base + (slot.ring_index << 3)), cpl_data.eq(word),
                    cpl_index.eq(slot.ring_index), cpl_tag.eq(tag), cpl_opcode.eq(opcode)]

        done_word = data.View(data.StructLayout({"tag": 16, "status": 8, "opcode": 8}), self.tile_done.tdata)
        m.d.comb += [bus.awid.eq(0), bus.awlen.eq(0), bus.awsize.eq(exact_log2(BUS_BYTES)), bus.awburst.eq(BURST_INCR),
                     bus.awaddr.eq(cpl_addr), bus.wdata.eq(cpl_data), bus.wstrb.eq((1 << COMPLETION_BYTES) - 1),
                     bus.wlast.eq(1), self.error.code.eq(ErrorCode.BUS_ERROR), self.error.index.eq(cpl_index)]
        aw_done = Signal()
        w_done = Signal()
        with m.FSM(name="complete"):
            with m.State("IDLE"):
                m.d.comb += self.idle.eq(1)
                with m.If(self.local_valid & ~self.quiesce):
                    m.d.sync += entry(local, local.tag, local.opcode, local_status)
                    m.d.sync += self.local_valid.eq(0)
                    m.next = "WRITE"
                with m.Elif(self.flushing & self.dma_pending & ~self.quiesce):
                    slot = self.dma_oldest
                    m.d.sync += entry(slot, slot.tag, slot.opcode, Const(ErrorCode.TIMEOUT, 8))
                    m.d.comb += self.dma_pop.eq(1)
                    m.next = "WRITE"
                with m.Elif(self.flushing & self.tile_pending & ~self.quiesce):
                    slot = self.tile_oldest
                    m.d.sync += entry(slot, slot.tag, slot.opcode, Const(ErrorCode.TIMEOUT, 8))
                    m.d.comb += self.tile_pop.eq(1)
                    m.next = "WRITE"
                with m.Elif(self.dma_done.tvalid & ~self.aborting & ~self.quiesce):
                    slot = self.dma_oldest
                    m.d.sync += entry(slot, slot.tag, slot.opcode, self.dma_done.tdata)
                    m.d.comb += [self.dma_done.tready.eq(1), self.dma_pop.eq(1)]
                    m.next = "WRITE"
                with m.Elif(self.tile_done.tvalid & ~self.aborting & ~self.quiesce):
                    slot = self.tile_oldest
                    m.d.sync += entry(slot, done_word.tag, done_word.opcode, done_word.status)
                    m.d.comb += [self.tile_done.tready.eq(1), self.tile_pop.eq(1)]
                    m.next = "WRITE"
                m.d.sync += [aw_done.eq(0), w_done.eq(0)]
            with m.State("WRITE"):
                m.d.comb += [self.busy.eq(1), bus.awvalid.eq(~aw_done), bus.wvalid.eq(~w_done)]
                with m.If(bus.awready & ~aw_done):
                    m.d.sync += aw_done.eq(1)
                with m.If(bus.wready & ~w_done):
                    m.d.sync += w_done.eq(1)
                with m.If((aw_done | bus.awready) & (w_done | bus.wready)):
                    m.next = "RESP"
            with m.State("RESP"):
                m.d.comb += [self.busy.eq(1), bus.bready.eq(1)]
                with m.If(bus.bvalid):
                    with m.If(bus.bresp != RESP_OKAY):
                        m.d.comb += self.error.valid.eq(1)
                    with m.Else():
                        m.d.comb += self.irq_completion.eq(1)
                    m.d.comb += self.trace_end.eq(1)
                    m.next = "IDLE"
        m.d.comb += [self.trace_end_tag.eq(cpl_tag), self.trace_end_opcode.eq(cpl_opcode),
                     self.trace_status.eq(cpl_data[16:24])]
        return m
