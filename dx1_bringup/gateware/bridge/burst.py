"""The burst frame engine: CRC-checked, byte-exact reads and writes of device memory through the burst buffer."""

from __future__ import annotations

from amaranth import Cat, Const, Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from ...spec import BURST_MAX_PAYLOAD, FrameStatus
from ..stream import AXIStreamSignature
from .buffer import BUFFER_PORT
from .bus import BEAT_BITS, BUS_PORT, MEM_BIT
from .crc import CRC_PORT
from .cutter import BurstCutter
from .receiver import RX_PORT, receive

__all__ = ["BurstEngine"]


def _refused(baddr, blen):
    """Whether a burst of ``blen`` bytes at ``baddr`` is refused: empty, longer than the buffer, or not inside the
    memory window (its end past the address space included)."""
    return ~baddr[MEM_BIT] | (blen == 0) | (blen > BURST_MAX_PAYLOAD) | (Cat(baddr, Const(0, 1)) + blen > (1 << 32))


class BurstEngine(wiring.Component):
    """Serves one burst frame from ``start`` (``cmd`` is ``BURST_WRITE`` or ``BURST_READ``) until ``busy`` falls.

    The header (command byte, big-endian byte address and length, CRC) is
    checked when its CRC has come: ``NAK_CRC``, or ``NAK_RANGE`` unless the
    range lies inside the memory window and the length is 1 to
    ``BURST_MAX_PAYLOAD``.  A NAK is sent at once and the line discarded until
    quiet (except after a read header with a good CRC, which nothing follows).
    A write's payload goes into the buffer and, once its CRC checks, to memory;
    a read fills the buffer from memory, then answers its status and (ACK) the
    payload and CRC.  ``BUS_ERROR`` replaces ACK after an error response.
    Memory is reached with INCR bursts of whole beats, at most ``MAX_BURST``
    beats and never across a ``PAGE_BYTES`` page, with byte strobes for
    unaligned ends.
    """

    def __init__(self):
        super().__init__({
            "start": In(1),
            "cmd": In(8),
            "busy": Out(1),
            "rx": In(RX_PORT),
            "tx": Out(AXIStreamSignature(8)),
            "crc": In(CRC_PORT),
            "buf": In(BUFFER_PORT),
            "bus": In(BUS_PORT),
        })

    def elaborate(self, platform):
        m = Module()
        rx, tx, crc, buf, bus = self.rx, self.tx, self.crc, self.buf, self.bus
        write = Signal()
        count = Signal(4)           # header bytes
        baddr = Signal(32)          # byte address
        blen = Signal(32)           # length in bytes
        status = Signal(8)
        bus_err = Signal()

        m.submodules.cutter = cutter = BurstCutter()
        lo = baddr[:BEAT_BITS]      # offset of the first payload byte in the first beat
        beat = Signal(10)           # buffer word of the next beat
        in_burst = Signal(9)        # W beats sent in this burst
        m.d.comb += [cutter.byte_addr.eq(baddr), cutter.length.eq(blen), cutter.beat.eq(beat)]

        def issue(request):
            m.d.comb += [request.eq(1), bus.mem_addr.eq(cutter.addr), bus.mem_len.eq(cutter.len), cutter.next.eq(1)]

        with m.FSM(name="burst_fsm") as fsm:
            m.d.comb += self.busy.eq(~fsm.ongoing("IDLE"))
            with m.State("IDLE"):
                m.d.sync += [count.eq(0), bus_err.eq(0)]
                with m.If(self.start):
                    m.d.sync += write.eq(self.cmd[0])
                    m.next = "HEADER"
            with m.State("HEADER"):
                def on_header():
                    m.d.sync += count.eq(count + 1)
                    with m.If(count < 8):
                        m.d.comb += [crc.feed.eq(1), crc.data.eq(rx.byte)]
                    with m.If(count == 3):
                        m.d.sync += baddr.eq(rx.field)
                    with m.If(count == 7):
                        m.d.sync += blen.eq(rx.field)
                    with m.If(count == 11):
                        m.next = "CHECK"
                        m.d.sync += status.eq(Mux(rx.field != crc.value, FrameStatus.NAK_CRC,
                                                  Mux(_refused(baddr, blen), FrameStatus.NAK_RANGE, FrameStatus.ACK)))
                receive(m, rx, on_header)
            with m.State("CHECK"):
                m.d.comb += crc.restart.eq(1)
                m.d.sync += beat.eq(0)
                with m.If(status != FrameStatus.ACK):
                    m.next = "NAK"
                with m.Elif(write):
                    m.d.comb += [buf.receive.eq(1), buf.offset.eq(lo), buf.length.eq(blen)]
                    m.next = "PAYLOAD"
                with m.Else():
                    m.next = "RD_SETUP"
            with m.State("NAK"):
                m.d.comb += [tx.tvalid.eq(1), tx.tdata.eq(status)]
                with m.If(tx.tready):
                    # a read header with a good CRC: nothing more follows
                    m.d.comb += rx.discard.eq(~((status == FrameStatus.NAK_RANGE) & ~write))
                    m.next = "IDLE"

            # ---- write: the payload into the buffer, then (CRC good) into memory ------------------
            with m.State("PAYLOAD"):
                with m.If(rx.abort):
                    m.next = "IDLE"
                with m.Elif(buf.received):
                    m.d.comb += cutter.start.eq(1)
                    m.d.sync += status.eq(Mux(buf.crc_ok, FrameStatus.ACK, FrameStatus.NAK_CRC))
                    m.next = "WR_SETUP"
            with m.State("WR_SETUP"):
                with m.If((status != FrameStatus.ACK) | cutter.done):
                    m.next = "STATUS"
                    with m.If(bus_err):
                        m.d.sync += status.eq(FrameStatus.BUS_ERROR)
                with m.Else():
                    issue(bus.mem_write)
                    m.d.sync += in_burst.eq(cutter.len)
                    m.next = "WR_FETCH"
            with m.State("WR_FETCH"):
                m.d.comb += buf.r_addr.eq(beat)
                m.next = "WR_BEAT"      # buf.r_data follows beat one cycle later
            with m.State("WR_BEAT"):
                m.d.comb += [buf.r_addr.eq(beat), bus.mem_stream.eq(1), bus.mem_wdata.eq(buf.r_data),
                             bus.mem_wstrb.eq(cutter.strb), bus.mem_wlast.eq(in_burst == 0)]
                with m.If(bus.mem_wready):
                    m.d.sync += [beat.eq(beat + 1), in_burst.eq(in_burst - 1)]
                    with m.If(in_burst == 0):
                        m.next = "WR_RESP"
                    with m.Else():
                        m.next = "WR_FETCH"
            with m.State("WR_RESP"):
                m.d.comb += bus.mem_b_wait.eq(1)
                with m.If(bus.mem_b_done):
                    with m.If(bus.mem_b_err):
                        m.d.sync += bus_err.eq(1)
                    m.next = "WR_SETUP"

            # ---- read: memory into the buffer, then the status, payload and CRC -------------------
            with m.State("RD_SETUP"):
                m.d.comb += cutter.start.eq(1)
                m.next = "RD_ADDR"
            with m.State("RD_ADDR"):
                with m.If(cutter.done):
                    m.d.sync += status.eq(Mux(bus_err, FrameStatus.BUS_ERROR, FrameStatus.ACK))
                    m.next = "STATUS"
                with m.Else():
                    issue(bus.mem_read)
                    m.next = "RD_DATA"
            with m.State("RD_DATA"):
                m.d.comb += bus.mem_r_wait.eq(1)
                with m.If(bus.mem_r_done):
                    m.d.comb += [buf.w_addr.eq(beat), buf.w_data.eq(bus.mem_rdata), buf.w_en.eq(0xFF)]
                    m.d.sync += beat.eq(beat + 1)
                    with m.If(bus.mem_r_err):
                        m.d.sync += bus_err.eq(1)
                    with m.If(bus.mem_rlast):
                        m.next = "RD_ADDR"

            with m.State("STATUS"):
                m.d.comb += [tx.tvalid.eq(1), tx.tdata.eq(status)]
                with m.If(tx.tready):
                    with m.If((status == FrameStatus.ACK) & ~write):
                        m.d.comb += [buf.send.eq(1), buf.offset.eq(lo), buf.length.eq(blen)]
                        m.next = "SEND"
                    with m.Else():
                        m.next = "IDLE"
            with m.State("SEND"):
                with m.If(buf.sent):
                    m.next = "IDLE"
        return m
