"""The UARTBone frame engine: LiteX's ``UARTBone`` framing, word by word onto the register and memory ports."""

from __future__ import annotations

from amaranth import Cat, Const, Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from ...spec import AXI_ERROR_WORD, REG_BASE
from ..stream import AXIStreamSignature
from .bus import BEAT_BITS, BUS_PORT, MEM_BIT, REG_BITS
from .receiver import RX_PORT, receive

__all__ = ["UartBoneEngine"]


class UartBoneEngine(wiring.Component):
    """Serves one UARTBone frame from ``start`` (``cmd`` is its command byte) until ``busy`` falls.

    The frame is the command byte, ``n`` (0 means 256), a big-endian word
    address, and for a write ``n`` big-endian data words; a read answers ``n``
    big-endian words.  Words go to consecutive word addresses, or all to one
    when bit 1 of ``cmd`` equals bit 0 (the ``_FIXED`` commands); bit 0 set is
    a write.  Each word is one bus access, finished before the next: a
    register-window word on ``bus``'s register port, a memory-window word as a
    one-beat burst with the word's lanes strobed (little-endian, as a CPU
    stores it); elsewhere a write is dropped and a read answers
    ``AXI_ERROR_WORD``, as does a read with an error response.  A frame that
    ``rx`` aborts ends at once.
    """

    def __init__(self):
        super().__init__({
            "start": In(1),
            "cmd": In(8),
            "busy": Out(1),
            "rx": In(RX_PORT),
            "tx": Out(AXIStreamSignature(8)),
            "bus": In(BUS_PORT),
        })

    def elaborate(self, platform):
        m = Module()
        rx, tx, bus = self.rx, self.tx, self.bus
        write = Signal()
        incr = Signal()
        count = Signal(2)           # bytes of a word
        words = Signal(9)           # words left
        waddr = Signal(32)          # word address
        word = Signal(32)           # data word
        byte_addr = Signal(32)
        in_regs = Signal()
        in_mem = Signal()
        m.d.comb += [
            byte_addr.eq(Cat(Const(0, 2), waddr[:30])),
            in_regs.eq(byte_addr[REG_BITS:] == REG_BASE >> REG_BITS),
            in_mem.eq(byte_addr[MEM_BIT]),
        ]
        mem_addr = byte_addr[BEAT_BITS:31] << BEAT_BITS

        def on_word(then):
            def on_byte():
                m.d.sync += count.eq(count + 1)
                with m.If(count == 3):
                    then()
            return on_byte

        with m.FSM(name="uartbone_fsm") as fsm:
            m.d.comb += self.busy.eq(~fsm.ongoing("IDLE"))
            with m.State("IDLE"):
                with m.If(self.start):
                    # bits [1:0] 01 or 10: UARTBONE_WRITE, UARTBONE_READ increment; the _FIXED ones do not
                    m.d.sync += [write.eq(self.cmd[0]), incr.eq(self.cmd[1] ^ self.cmd[0])]
                    m.next = "LEN"
            with m.State("LEN"):
                def on_len():
                    m.d.sync += [words.eq(Mux(rx.byte == 0, 256, rx.byte)), count.eq(0)]
                    m.next = "ADDR"
                receive(m, rx, on_len)
            with m.State("ADDR"):
                def addr_done():
                    m.d.sync += waddr.eq(rx.field)
                    with m.If(write):
                        m.next = "DATA"
                    with m.Else():
                        m.next = "ACCESS"
                receive(m, rx, on_word(addr_done))
            with m.State("DATA"):
                def data_done():
                    m.d.sync += word.eq(rx.field)
                    m.next = "ACCESS"
                receive(m, rx, on_word(data_done))
            with m.State("ACCESS"):
                with m.If(write & in_regs):
                    m.d.comb += [bus.reg_write.eq(1), bus.reg_addr.eq(byte_addr[:REG_BITS]), bus.reg_wdata.eq(word)]
                    m.next = "WRESP_REGS"
                with m.Elif(write & in_mem):
                    m.d.comb += [bus.mem_write.eq(1), bus.mem_beat.eq(1), bus.mem_addr.eq(mem_addr),
                                 bus.mem_wdata.eq(Cat(word, word)), bus.mem_wstrb.eq(Mux(byte_addr[2], 0xF0, 0x0F))]
                    m.next = "WRESP_MEM"
                with m.Elif(write):
                    m.next = "NEXT"
                with m.Elif(in_regs):
                    m.d.comb += [bus.reg_read.eq(1), bus.reg_addr.eq(byte_addr[:REG_BITS])]
                    m.next = "RRESP_REGS"
                with m.Elif(in_mem):
                    m.d.comb += [bus.mem_read.eq(1), bus.mem_addr.eq(mem_addr)]
                    m.next = "RRESP_MEM"
                with m.Else():
                    m.d.sync += [word.eq(AXI_ERROR_WORD), count.eq(0)]
                    m.next = "SEND"
            with m.State("WRESP_REGS"):
                m.d.comb += bus.reg_b_wait.eq(1)
                with m.If(bus.reg_b_done):
                    m.next = "NEXT"
            with m.State("WRESP_MEM"):
                m.d.comb += bus.mem_b_wait.eq(1)
                with m.If(bus.mem_b_done):
                    m.next = "NEXT"
            with m.State("RRESP_REGS"):
                m.d.comb += bus.reg_r_wait.eq(1)
                with m.If(bus.reg_r_done):
                    m.d.sync += [word.eq(Mux(bus.reg_r_err, AXI_ERROR_WORD, bus.reg_rdata)), count.eq(0)]
                    m.next = "SEND"
            with m.State("RRESP_MEM"):
                m.d.comb += bus.mem_r_wait.eq(1)
                with m.If(bus.mem_r_done):
                    half = Mux(byte_addr[2], bus.mem_rdata[32:], bus.mem_rdata[:32])
                    m.d.sync += [word.eq(Mux(bus.mem_r_err, AXI_ERROR_WORD, half)), count.eq(0)]
                    m.next = "SEND"
            with m.State("SEND"):
                m.d.comb += [tx.tvalid.eq(1), tx.tdata.eq(word[24:])]
                with m.If(tx.tready):
                    m.d.sync += [word.eq(word << 8), count.eq(count + 1)]
                    with m.If(count == 3):
                        m.next = "NEXT"
            with m.State("NEXT"):
                m.d.sync += [words.eq(words - 1), waddr.eq(waddr + incr), count.eq(0)]
                with m.If(words == 1):
                    m.next = "IDLE"
                with m.Elif(write):
                    m.next = "DATA"
                with m.Else():
                    m.next = "ACCESS"
        return m
