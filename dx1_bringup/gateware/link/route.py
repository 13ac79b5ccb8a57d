"""A tile's DMA commands split between its DMA and the link ports, completing in order."""

from __future__ import annotations

from amaranth import Module, Mux, Signal
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from ...spec import COMMAND_BITS, LINK_PORTS, Opcode
from ..layouts import HEADER_LAYOUT, command_layout
from ..stream import AXIStreamSignature
from .sender import SEND_REQUEST

__all__ = ["SendRouter"]


class SendRouter(wiring.Component):
    """Sends a command processor's DMA-route commands to the tile's DMA (``dma_cmd``) or, a SEND, to the
    request of its link ``port`` (``send{p}``), and their status bytes back on ``done``.

    The command processor expects its DMA commands to complete in order, so a SEND waits until every
    earlier DMA command has completed and a DMA command until the earlier SEND has; a tile has one SEND
    in flight at a time.  ``send_done`` (the status of this tile's SEND from whichever port ran it)
    is always taken; one that comes when no SEND is in flight (its tile was reset meanwhile) is dropped.
    ``sending`` is high while this tile's SEND is in flight (for the queue's watchdog).  ``cmd.tready``
    depends on the command (its opcode and port) and on the readies of the DMA and of the ports, not on
    ``cmd.tvalid``; a port's ``ready`` must likewise not wait for its ``valid``.
    """

    def __init__(self):
        super().__init__({
            "cmd": In(AXIStreamSignature(COMMAND_BITS)), "done": Out(AXIStreamSignature(8)),
            "dma_cmd": Out(AXIStreamSignature(COMMAND_BITS)), "dma_done": In(AXIStreamSignature(8)),
            **{f"send{p}": Out(SEND_REQUEST) for p in range(LINK_PORTS)},
            "send_done": In(1), "send_status": In(8), "sending": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        hdr = data.View(HEADER_LAYOUT, self.cmd.tdata)
        sd = data.View(command_layout(Opcode.SEND), self.cmd.tdata)
        is_send = hdr.opcode == Opcode.SEND
        dma_pending = Signal(range(4))  # the DMA holds one command and runs another; one more in its done
        send_pending = Signal()
        send_status = Signal(8)
        send_finished = Signal()
        dma_in = Signal()
        m.d.comb += dma_in.eq(self.dma_cmd.tvalid & self.dma_cmd.tready)
        dma_out = self.dma_done.tvalid & self.dma_done.tready
        m.d.comb += [
            self.dma_cmd.tdata.eq(self.cmd.tdata),
            self.dma_cmd.tvalid.eq(self.cmd.tvalid & ~is_send & ~send_pending),
        ]
        send_taken = Signal()
        send_ready = Signal()  # the port the command names would take a SEND
        for p in range(LINK_PORTS):
            req = getattr(self, f"send{p}")
            m.d.comb += [
                req.valid.eq(self.cmd.tvalid & is_send & (sd.port == p) & (dma_pending == 0) & ~send_pending),
                req.src_addr.eq(sd.src_addr), req.dst_addr.eq(sd.dst_addr), req.length.eq(sd.length),
                req.op.eq(sd.op), req.sem.eq(sd.sem), req.count.eq(sd.count),
            ]
            with m.If(req.valid & req.ready):
                m.d.comb += send_taken.eq(1)
            with m.If(sd.port == p):
                m.d.comb += send_ready.eq(req.ready)
        # Ready does not wait for valid (the command processor's valid comes late, from its hazard checks): it
        # says what would take this command, so the processor's dispatch never goes through the link and back.
        m.d.comb += self.cmd.tready.eq(~send_pending & Mux(is_send, send_ready & (dma_pending == 0),
                                                             self.dma_cmd.tready))
        m.d.sync += dma_pending.eq(dma_pending + dma_in - dma_out)
        with m.If(send_taken):
            m.d.sync += send_pending.eq(1)
        m.d.comb += self.sending.eq(send_pending)

        # Completions: the DMA's pass through; a SEND's status waits in a register for the processor.
        with m.If(self.send_done & send_pending & ~send_finished):
            m.d.sync += [send_finished.eq(1), send_status.eq(self.send_status)]
        with m.If(send_finished):
            m.d.comb += [self.done.tvalid.eq(1), self.done.tdata.eq(send_status)]
            with m.If(self.done.tready):
                m.d.sync += [send_finished.eq(0), send_pending.eq(0)]
        with m.Else():
            m.d.comb += [self.done.tvalid.eq(self.dma_done.tvalid), self.done.tdata.eq(self.dma_done.tdata),
                         self.dma_done.tready.eq(self.done.tready)]
        return m
