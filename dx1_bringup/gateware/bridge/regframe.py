"""The register frame engine: CRC-checked reads and writes of up to 255 register words through the burst buffer."""

from __future__ import annotations

from amaranth import Cat, Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from ...spec import REG_BASE, REG_BYTES, FrameStatus
from ..stream import AXIStreamSignature
from .buffer import BUF_WORDS, BUFFER_PORT
from .bus import BUS_PORT, REG_BITS
from .crc import CRC_PORT
from .receiver import RX_PORT, receive

__all__ = ["RegFrameEngine"]


def _swap(word):
    """A 32-bit value as its big-endian bytes in lanes 0..3 (the wire's order)."""
    return Cat(word[24:], word[16:24], word[8:16], word[:8])


class RegFrameEngine(wiring.Component):
    """Serves one register frame from ``start`` (``cmd`` is ``REG_WRITE`` or ``REG_READ``) until ``busy`` falls.

    The frame is the command byte, a big-endian byte address, ``n``, for a
    write ``n`` big-endian words, and a CRC over all of it; word ``i`` sits in
    buffer bytes ``4i .. 4i+3`` as on the wire.  Nothing is checked before the
    CRC has come.  A bad CRC answers ``NAK_CRC`` and discards the line until
    quiet; ``NAK_RANGE`` (``n`` 0, an unaligned address, or a range outside the
    register window) is answered at once.  Otherwise every word is tried, one
    register access at a time (a write's refused words are not written), and
    the answer is ``BUS_ERROR`` if any got an error response, else ACK, then
    for a read the ``4n`` bytes and their CRC.
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
        count = Signal(9)           # header bytes, then words done
        baddr = Signal(32)          # byte address of the next word
        words = Signal(8)
        status = Signal(8)
        bus_err = Signal()
        beat = Signal(range(BUF_WORDS))     # buffer word of the next word to write
        err = Signal()              # the response of the current word is an error
        last = Signal()             # the current word is the frame's last
        half = Mux(count[0], buf.r_data[32:], buf.r_data[:32])
        m.d.comb += last.eq(count + 1 == words)

        with m.FSM(name="reg_frame_fsm") as fsm:
            m.d.comb += self.busy.eq(~fsm.ongoing("IDLE"))
            with m.State("IDLE"):
                m.d.sync += count.eq(0)
                with m.If(self.start):
                    m.d.sync += write.eq(self.cmd[0])
                    m.next = "HEADER"
            with m.State("HEADER"):
                def on_header():
                    m.d.comb += [crc.feed.eq(1), crc.data.eq(rx.byte)]
                    m.d.sync += count.eq(count + 1)
                    with m.If(count == 3):
                        m.d.sync += baddr.eq(rx.field)
                    with m.If(count == 4):
                        m.d.sync += [words.eq(rx.byte), count.eq(0)]
                        m.d.comb += [buf.offset.eq(0), buf.length.eq(rx.byte << 2)]
                        with m.If(write & (rx.byte != 0)):
                            m.d.comb += buf.receive.eq(1)       # the words, into the buffer; the CRC runs on
                        with m.Else():
                            m.d.comb += buf.receive_crc.eq(1)
                        m.next = "PAYLOAD"
                receive(m, rx, on_header)
            with m.State("PAYLOAD"):
                with m.If(rx.abort):
                    m.next = "IDLE"
                with m.Elif(buf.received):
                    m.d.sync += status.eq(Mux(buf.crc_ok, FrameStatus.ACK, FrameStatus.NAK_CRC))
                    m.next = "CHECK"
            with m.State("CHECK"):
                m.d.sync += [count.eq(0), beat.eq(0), bus_err.eq(0)]
                with m.If(status != FrameStatus.ACK):
                    m.next = "NAK"                  # a bad CRC: discard until the line is quiet
                with m.Elif((words == 0) | (baddr[REG_BITS:] != REG_BASE >> REG_BITS) | (baddr[:2] != 0) |
                            (baddr[:REG_BITS] + (words << 2) > REG_BYTES)):
                    m.d.sync += status.eq(FrameStatus.NAK_RANGE)
                    m.next = "STATUS"               # the frame was whole: the next one may follow at once
                with m.Elif(write):
                    m.next = "FETCH"
                with m.Else():
                    m.next = "READ"
            with m.State("NAK"):
                m.d.comb += [tx.tvalid.eq(1), tx.tdata.eq(status)]
                with m.If(tx.tready):
                    m.d.comb += rx.discard.eq(1)
                    m.next = "IDLE"

            with m.State("FETCH"):
                m.d.comb += buf.r_addr.eq(beat)
                m.next = "WRITE"                    # buf.r_data follows beat one cycle later
            with m.State("WRITE"):
                m.d.comb += [buf.r_addr.eq(beat), bus.reg_write.eq(1), bus.reg_addr.eq(baddr[:REG_BITS]),
                             bus.reg_wdata.eq(_swap(half))]
                m.next = "WRESP"
            with m.State("WRESP"):
                m.d.comb += [bus.reg_b_wait.eq(1), err.eq(bus.reg_b_err)]
                with m.If(bus.reg_b_done):
                    m.d.sync += [count.eq(count + 1), baddr.eq(baddr + 4), beat.eq((count + 1) >> 1),
                                 bus_err.eq(bus_err | err)]
                    with m.If(last):
                        m.d.sync += status.eq(Mux(bus_err | err, FrameStatus.BUS_ERROR, FrameStatus.ACK))
                        m.next = "STATUS"
                    with m.Else():
                        m.next = "FETCH"
            with m.State("READ"):
                m.d.comb += [bus.reg_read.eq(1), bus.reg_addr.eq(baddr[:REG_BITS])]
                m.next = "RRESP"
            with m.State("RRESP"):
                m.d.comb += [bus.reg_r_wait.eq(1), err.eq(bus.reg_r_err)]
                with m.If(bus.reg_r_done):
                    be = _swap(bus.reg_rdata)
                    m.d.comb += [buf.w_addr.eq(count >> 1), buf.w_data.eq(Cat(be, be)),
                                 buf.w_en.eq(Mux(count[0], 0xF0, 0x0F))]
                    m.d.sync += [count.eq(count + 1), baddr.eq(baddr + 4), bus_err.eq(bus_err | err)]
                    with m.If(last):
                        m.d.sync += [status.eq(Mux(bus_err | err, FrameStatus.BUS_ERROR, FrameStatus.ACK)),
                                     count.eq(0)]
                        m.next = "STATUS"           # then, on ACK, the 4n bytes from the buffer and their CRC
                    with m.Else():
                        m.next = "READ"

            with m.State("STATUS"):
                m.d.comb += [tx.tvalid.eq(1), tx.tdata.eq(status)]
                with m.If(tx.tready):
                    with m.If((status == FrameStatus.ACK) & ~write):
                        m.d.comb += [buf.send.eq(1), buf.offset.eq(0), buf.length.eq(words << 2)]
                        m.next = "SEND"
                    with m.Else():
                        m.next = "IDLE"
            with m.State("SEND"):
                with m.If(buf.sent):
                    m.next = "IDLE"
        return m
