"""The host bridge: a UART speaking LiteX's UARTBone framing, plus CRC-checked bursts and register frames, onto AXI.

The wire format is :mod:`dx1_bringup.spec.link`'s; this module is the gateware that serves it.
"""

from __future__ import annotations

from amaranth import Cat, Const, Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.fifo import SyncFIFOBuffered
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out
from amaranth.utils import exact_log2

from ..spec import (
    AXI_ERROR_WORD,
    BURST_MAX_PAYLOAD,
    BUS_BYTES,
    CRC_POLY,
    MEM_BASE,
    REG_BASE,
    REG_BYTES,
    TIMEOUT_BITS,
    FrameCommand,
    FrameStatus,
)
from .axi import BURST_INCR, MAX_BURST, PAGE_BYTES, RESP_OKAY, AXI4LiteSignature, AXI4Signature
from .uart import UartRx, UartTx, check_baud

__all__ = ["UartBridge", "crc32_update"]

BUF_WORDS = (BURST_MAX_PAYLOAD + BUS_BYTES) // BUS_BYTES   # room for an unaligned start
BEAT_BITS = exact_log2(BUS_BYTES)   # byte-lane bits of a device-memory address
REG_BITS = exact_log2(REG_BYTES)    # address bits of the register port
MEM_BIT = exact_log2(MEM_BASE)      # device memory is the top half of the address space: this bit decodes it


def _crc32_matrix() -> list[tuple[int, int]]:
    """For each bit of the next CRC-32 register, the register bits and byte bits it is the XOR of (as masks).

    The CRC is linear: run the bitwise algorithm on each unit vector (register
    bit j, or byte bit j) alone and record which output bits it reaches.
    """
    def step(crc: int, byte: int) -> int:
        for i in range(8):
            crc = (crc >> 1) ^ (CRC_POLY if (crc ^ (byte >> i)) & 1 else 0)
        return crc
    rows = [[0, 0] for _ in range(32)]
    for j in range(32):
        out = step(1 << j, 0)
        for i in range(32):
            if out >> i & 1:
                rows[i][0] |= 1 << j
    for j in range(8):
        out = step(0, 1 << j)
        for i in range(32):
            if out >> i & 1:
                rows[i][1] |= 1 << j
    return [tuple(r) for r in rows]


_CRC32_ROWS = _crc32_matrix()


def crc32_update(crc, byte):
    """The CRC-32 register after one more byte (LSB first), as an Amaranth expression (an XOR network)."""
    bits = []
    for crc_mask, byte_mask in _CRC32_ROWS:
        bits.append((crc & crc_mask).xor() ^ (byte & byte_mask).xor())
    return Cat(*bits)


class UartBridge(wiring.Component):
    """A UART host bridge onto the SoC's register port (AXI4-Lite) and device-memory port (AXI4).

    The UART is 8N1 at ``baud``.  The frames, status bytes, header layouts,
    limits and address windows are those of :mod:`dx1_bringup.spec.link`
    (``docs/link.md``); this is how the bridge serves them.

    *UARTBone* (``FrameCommand.UARTBONE_*``, wire-compatible with LiteX's
    ``UARTBone``, so ``litex_server --uart`` can drive it): ``n`` 0 means 256
    (LiteX's own gateware never ends such a frame, and its host never sends
    one).  Consecutive words go to consecutive addresses (the ``_FIXED``
    commands: all to one).  A word's value is stored little-endian on the bus
    (the value's low byte at the lowest byte address), as a CPU would.

    *Burst* (``BURST_WRITE``, ``BURST_READ``; device memory only, byte-exact):
    a write's payload is buffered and only written to memory once its CRC
    checks; ``BUS_ERROR`` after a write means possibly partly written.  The
    range must lie inside the memory window.  Memory is reached with INCR
    bursts of whole bus beats (at most 256 beats, never across a 4 KiB page),
    with byte strobes for unaligned ends.  A NAK for the header (``NAK_CRC``
    or ``NAK_RANGE``, sent right after the header's CRC) makes the bridge
    discard everything until the line has been quiet for the timeout, so a
    host must wait that long before its next frame (a read header with a good
    CRC and a refused range is the exception: nothing follows it).

    *Register frame* (``REG_WRITE``, ``REG_READ``; register space only): the
    words of a write are buffered and only written to the registers once the
    frame's CRC checks; every word is tried, the refused ones are not written.
    A read reads every word, and answers ``BUS_ERROR`` if any got an AXI error.
    ``byte_addr`` is word-aligned and the range inside the register window.
    Since the count is not checked before the CRC, a write frame is received
    whole before any answer.  After a bad CRC (a lost or doubled byte may have
    shifted everything after it) the bridge discards everything until the line
    has been quiet for the timeout, as after a burst header NAK; after
    ``NAK_RANGE`` (good CRC) and ``BUS_ERROR`` it takes the next frame at once.

    Address map: the register window (32-bit accesses on ``regs``) and the
    memory window (``mem`` at the offset from ``MEM_BASE``).  A UARTBone write
    anywhere else is dropped and a read answers ``AXI_ERROR_WORD`` per word; a
    read that gets an AXI error response also answers ``AXI_ERROR_WORD`` for
    that word (write errors are not reported: UARTBone has no write answer;
    register frames report both).

    Robustness: a frame that stops for ``TIMEOUT_BITS`` bit times is dropped
    and the bridge waits for a command byte again; bytes that are not a
    command are ignored; a receive framing error drops the frame.  The bridge
    waits for every AXI response it asks for, so a slave that never answers
    stops it (AXI has no way to abandon a transaction).

    Parameters
    ----------
    clk_freq:
        Clock frequency in Hz.
    baud:
        UART bit rate; at least 8 clock cycles a bit.
    """

    def __init__(self, clk_freq: int, baud: int):
        check_baud("UART bridge", clk_freq, baud)
        self.clk_freq, self.baud = clk_freq, baud
        self.timeout_cycles = TIMEOUT_BITS * clk_freq // baud
        super().__init__({
            "rx": In(1, init=1),
            "tx": Out(1, init=1),
            "regs": Out(AXI4LiteSignature(addr_width=REG_BITS)),
            "mem": Out(AXI4Signature(data_width=8 * BUS_BYTES, id_width=4)),
        })

    def elaborate(self, platform):
        m = Module()
        regs, mem = self.regs, self.mem

        # ---- UART and receive FIFO ------------------------------------------------------------
        m.submodules.uart_rx = urx = UartRx(self.clk_freq, self.baud)
        m.submodules.uart_tx = utx = UartTx(self.clk_freq, self.baud)
        m.submodules.rx_fifo = fifo = SyncFIFOBuffered(width=8, depth=16)
        m.d.comb += [
            urx.rx.eq(self.rx), self.tx.eq(utx.tx),
            urx.data.tready.eq(1),
            fifo.w_en.eq(urx.data.tvalid), fifo.w_data.eq(urx.data.tdata),
        ]
        have = fifo.r_rdy
        byte = fifo.r_data
        take = Signal()
        m.d.comb += fifo.r_en.eq(take)
        got = Signal()
        m.d.comb += got.eq(have & take)

        tx_valid = Signal()
        tx_data = Signal(8)
        sent = Signal()
        m.d.comb += [utx.data.tvalid.eq(tx_valid), utx.data.tdata.eq(tx_data),
                     sent.eq(tx_valid & utx.data.tready)]

        rx_err = Signal()           # a framing error since the frame began
        with m.If(urx.frame_error):
            m.d.sync += rx_err.eq(1)

        # ---- inter-byte timeout ----------------------------------------------------------------
        waiting = Signal()          # in the middle of a frame, waiting for a byte
        quiet = Signal(range(self.timeout_cycles + 1))
        timed_out = Signal()
        m.d.comb += timed_out.eq(quiet == self.timeout_cycles)
        with m.If(~waiting | got):
            m.d.sync += quiet.eq(0)
        with m.Elif(~timed_out):
            m.d.sync += quiet.eq(quiet + 1)

        # ---- frame registers -------------------------------------------------------------------
        cmd = Signal(8)
        count = Signal(13)          # bytes of a field, words of a UARTBone frame, bytes of a payload
        shreg = Signal(32)          # big-endian fields, shifted in a byte at a time
        shreg_next = Signal(32)
        m.d.comb += shreg_next.eq(Cat(byte, shreg[:24]))
        words = Signal(9)           # UARTBone: words left
        waddr = Signal(32)          # UARTBone: word address
        word = Signal(32)           # UARTBone: data word
        incr = Signal()
        baddr = Signal(32)          # burst: byte address
        blen = Signal(32)           # burst: length in bytes
        crc = Signal(32, init=0xFFFF_FFFF)
        status = Signal(8)
        bus_err = Signal()
        rx_crc_ok = Signal()
        m.d.comb += rx_crc_ok.eq(shreg_next == ~crc)
        reg_frame = Signal()        # a CRC register frame rather than a burst
        m.d.comb += reg_frame.eq((cmd == FrameCommand.REG_WRITE) | (cmd == FrameCommand.REG_READ))
        reg_err = Signal()          # register frame: the response of the current word is an error

        # UARTBone decode of the current word
        byte_addr = Signal(32)
        in_regs = Signal()
        in_mem = Signal()
        m.d.comb += [
            byte_addr.eq(Cat(Const(0, 2), waddr[:30])),
            in_regs.eq(byte_addr[REG_BITS:] == REG_BASE >> REG_BITS),
            in_mem.eq(byte_addr[MEM_BIT]),
        ]

        # ---- burst buffer: one beat a word, byte-writable, beat-aligned -------------------------------
        m.submodules.buf = buf = Memory(shape=8 * BUS_BYTES, depth=BUF_WORDS, init=[])
        wp = buf.write_port(granularity=8)
        rp = buf.read_port()
        lo = Signal(BEAT_BITS)      # offset of the first payload byte in the first beat
        idx = Signal(13)            # buffer byte index (lo + payload byte)
        hi = Signal(14)             # lo + length
        nbeats = Signal(10)
        m.d.comb += [hi.eq(lo + blen[:13]), nbeats.eq((hi + BUS_BYTES - 1) >> BEAT_BITS)]
        # A register frame keeps word i in buffer bytes 4i .. 4i+3 as on the wire (most significant first).
        reg_half = Signal(32)
        m.d.comb += reg_half.eq(Mux(count[0], rp.data[32:], rp.data[:32]))
        reg_word = Signal(32)       # register frame: word ``count`` from the buffer, as a value
        m.d.comb += reg_word.eq(Cat(reg_half[24:], reg_half[16:24], reg_half[8:16], reg_half[:8]))

        # ---- burst cutting ---------------------------------------------------------------------
        cur = Signal(31)            # AXI address of the next burst (beat aligned)
        beat = Signal(10)           # buffer word of the next beat
        left = Signal(10)           # beats not yet issued
        cut = Signal(9)             # beats of the burst being cut
        to_page = Signal(10)
        capped = Signal(10)
        in_burst = Signal(9)        # W beats sent in this burst
        m.d.comb += [
            to_page.eq(PAGE_BYTES // BUS_BYTES - cur[BEAT_BITS:exact_log2(PAGE_BYTES)]),
            capped.eq(Mux(left < MAX_BURST, left, MAX_BURST)),
            cut.eq(Mux(to_page < capped, to_page, capped)),
        ]
        strb = Signal(BUS_BYTES)
        m.d.comb += strb.eq(Cat(*[((beat * BUS_BYTES + j) >= lo) & ((beat * BUS_BYTES + j) < hi)
                                  for j in range(BUS_BYTES)]))

        # ---- AXI outputs (registers) -----------------------------------------------------------
        m.d.comb += [
            mem.awid.eq(0), mem.arid.eq(0), mem.awsize.eq(BEAT_BITS), mem.arsize.eq(BEAT_BITS),
            mem.awburst.eq(BURST_INCR), mem.arburst.eq(BURST_INCR),
            regs.wstrb.eq(0xF),
        ]
        # UARTBone's single memory beat comes from registers; burst beats come from the buffer
        mw_valid = Signal()
        mw_data = Signal(8 * BUS_BYTES)
        mw_strb = Signal(BUS_BYTES)
        m.d.comb += [mem.wvalid.eq(mw_valid), mem.wdata.eq(mw_data), mem.wstrb.eq(mw_strb), mem.wlast.eq(1)]
        with m.If(mem.wvalid & mem.wready):
            m.d.sync += mw_valid.eq(0)
        with m.If(regs.wvalid & regs.wready):
            m.d.sync += regs.wvalid.eq(0)
        for ch in (regs, mem):
            with m.If(ch.awvalid & ch.awready):
                m.d.sync += ch.awvalid.eq(0)
            with m.If(ch.arvalid & ch.arready):
                m.d.sync += ch.arvalid.eq(0)

        send_idx = Signal()         # the read port follows idx (sending) rather than beat (writing)
        rd_ok = Signal()            # rp.data matches its address
        m.d.comb += rp.addr.eq(Mux(send_idx, idx >> BEAT_BITS, beat))
        m.d.sync += rd_ok.eq(1)
        lane_byte = Signal(8)
        with m.Switch(idx[:BEAT_BITS]):
            for k in range(BUS_BYTES):
                with m.Case(k):
                    m.d.comb += lane_byte.eq(rp.data[8 * k:8 * k + 8])

        def recv_state(on_byte):
            m.d.comb += waiting.eq(1)
            with m.If(timed_out):
                m.next = "IDLE"
            with m.Elif(rx_err):
                m.next = "DISCARD"
            with m.Else():
                m.d.comb += take.eq(1)
                with m.If(have):
                    on_byte()

        def start_bone_word():
            """Start the bus access of the current UARTBone word (write: ``word`` holds its data)."""
            with m.If(cmd[0]):      # write
                with m.If(in_regs):
                    m.d.sync += [regs.awvalid.eq(1), regs.wvalid.eq(1), regs.awaddr.eq(byte_addr[:16]),
                                 regs.wdata.eq(word)]
                    m.next = "BONE_WRESP_REGS"
                with m.Elif(in_mem):
                    m.d.sync += [mem.awvalid.eq(1), mw_valid.eq(1), mem.awaddr.eq(byte_addr[BEAT_BITS:31] << BEAT_BITS),
                                 mem.awlen.eq(0), mw_data.eq(Cat(word, word)),
                                 mw_strb.eq(Mux(byte_addr[2], 0xF0, 0x0F))]
                    m.next = "BONE_WRESP_MEM"
                with m.Else():
                    m.next = "BONE_NEXT"
            with m.Else():
                with m.If(in_regs):
                    m.d.sync += [regs.arvalid.eq(1), regs.araddr.eq(byte_addr[:16])]
                    m.next = "BONE_RRESP_REGS"
                with m.Elif(in_mem):
                    m.d.sync += [mem.arvalid.eq(1), mem.araddr.eq(byte_addr[BEAT_BITS:31] << BEAT_BITS),
                                 mem.arlen.eq(0)]
                    m.next = "BONE_RRESP_MEM"
                with m.Else():
                    m.d.sync += [word.eq(AXI_ERROR_WORD), count.eq(0)]
                    m.next = "BONE_SEND"

        with m.FSM(name="bridge_fsm"):
            with m.State("IDLE"):
                m.d.comb += take.eq(1)
                m.d.sync += [count.eq(0), crc.eq(crc32_update(Const(0xFFFF_FFFF, 32), byte)), bus_err.eq(0),
                             rx_err.eq(0)]
                with m.If(have):
                    m.d.sync += cmd.eq(byte)
                    with m.Switch(byte):
                        with m.Case(FrameCommand.UARTBONE_WRITE, FrameCommand.UARTBONE_READ,
                                    FrameCommand.UARTBONE_WRITE_FIXED, FrameCommand.UARTBONE_READ_FIXED):
                            # bits [1:0] 01 or 10: UARTBONE_WRITE, UARTBONE_READ increment; the _FIXED ones do not
                            m.d.sync += incr.eq(byte[1] ^ byte[0])
                            m.next = "BONE_LEN"
                        with m.Case(FrameCommand.BURST_WRITE, FrameCommand.BURST_READ):
                            m.next = "HDR"
                        with m.Case(FrameCommand.REG_WRITE, FrameCommand.REG_READ):
                            m.next = "REG_HDR"

            # ---- UARTBone ----------------------------------------------------------------------
            with m.State("BONE_LEN"):
                def on_len():
                    m.d.sync += [words.eq(Mux(byte == 0, 256, byte)), count.eq(0)]
                    m.next = "BONE_ADDR"
                recv_state(on_len)
            with m.State("BONE_ADDR"):
                def on_addr():
                    m.d.sync += [shreg.eq(shreg_next), count.eq(count + 1)]
                    with m.If(count == 3):
                        m.d.sync += [waddr.eq(shreg_next), count.eq(0)]
                        with m.If(cmd[0]):
                            m.next = "BONE_DATA"
                        with m.Else():
                            m.next = "BONE_ACCESS"
                recv_state(on_addr)
            with m.State("BONE_DATA"):
                def on_data():
                    m.d.sync += [shreg.eq(shreg_next), count.eq(count + 1)]
                    with m.If(count == 3):
                        m.d.sync += [word.eq(shreg_next), count.eq(0)]
                        m.next = "BONE_ACCESS"
                recv_state(on_data)
            with m.State("BONE_ACCESS"):
                start_bone_word()
            with m.State("BONE_WRESP_REGS"):
                m.d.comb += regs.bready.eq(~regs.awvalid & ~regs.wvalid)
                with m.If(regs.bvalid & regs.bready):
                    m.next = "BONE_NEXT"
            with m.State("BONE_WRESP_MEM"):
                m.d.comb += mem.bready.eq(~mem.awvalid & ~mem.wvalid)
                with m.If(mem.bvalid & mem.bready):
                    m.next = "BONE_NEXT"
            with m.State("BONE_RRESP_REGS"):
                m.d.comb += regs.rready.eq(~regs.arvalid)
                with m.If(regs.rvalid & regs.rready):
                    m.d.sync += [word.eq(Mux(regs.rresp == RESP_OKAY, regs.rdata, AXI_ERROR_WORD)), count.eq(0)]
                    m.next = "BONE_SEND"
            with m.State("BONE_RRESP_MEM"):
                m.d.comb += mem.rready.eq(~mem.arvalid)
                with m.If(mem.rvalid & mem.rready):
                    half = Mux(byte_addr[2], mem.rdata[32:], mem.rdata[:32])
                    m.d.sync += [word.eq(Mux(mem.rresp == RESP_OKAY, half, AXI_ERROR_WORD)), count.eq(0)]
                    m.next = "BONE_SEND"
            with m.State("BONE_SEND"):
                m.d.comb += [tx_valid.eq(1), tx_data.eq(word[24:])]
                with m.If(sent):
                    m.d.sync += [word.eq(word << 8), count.eq(count + 1)]
                    with m.If(count == 3):
                        m.next = "BONE_NEXT"
            with m.State("BONE_NEXT"):
                m.d.sync += [words.eq(words - 1), waddr.eq(waddr + incr), count.eq(0)]
                with m.If(words == 1):
                    m.next = "IDLE"
                with m.Elif(cmd[0]):
                    m.next = "BONE_DATA"
                with m.Else():
                    m.next = "BONE_ACCESS"

            # ---- burst header --------------------------------------------------------------------
            with m.State("HDR"):
                def on_hdr():
                    m.d.sync += [shreg.eq(shreg_next), count.eq(count + 1)]
                    with m.If(count < 8):
                        m.d.sync += crc.eq(crc32_update(crc, byte))
                    with m.If(count == 3):
                        m.d.sync += baddr.eq(shreg_next)
                    with m.If(count == 7):
                        m.d.sync += blen.eq(shreg_next)
                    with m.If(count == 11):
                        m.next = "HDR_CHECK"
                        with m.If(~rx_crc_ok):
                            m.d.sync += status.eq(FrameStatus.NAK_CRC)
                        with m.Elif(~baddr[MEM_BIT] | (blen == 0) | (blen > BURST_MAX_PAYLOAD) |
                                    (Cat(baddr, Const(0, 1)) + blen > (1 << 32))):
                            m.d.sync += status.eq(FrameStatus.NAK_RANGE)
                        with m.Else():
                            m.d.sync += status.eq(FrameStatus.ACK)
                recv_state(on_hdr)
            with m.State("HDR_CHECK"):
                m.d.sync += [
                    lo.eq(baddr[:BEAT_BITS]), idx.eq(baddr[:BEAT_BITS]), count.eq(0), crc.eq(0xFFFF_FFFF),
                    cur.eq(Cat(Const(0, BEAT_BITS), baddr[BEAT_BITS:31])), beat.eq(0),
                ]
                with m.If(status != FrameStatus.ACK):
                    m.next = "NAK_HEADER"
                with m.Elif(cmd[0]):
                    m.next = "PAYLOAD"
                with m.Else():
                    m.next = "RD_SETUP"
            with m.State("NAK_HEADER"):
                m.d.comb += [tx_valid.eq(1), tx_data.eq(status)]
                with m.If(sent):
                    with m.If((status == FrameStatus.NAK_RANGE) & ~cmd[0]):
                        m.next = "IDLE"         # a read header with a good CRC: nothing more follows
                    with m.Else():
                        m.next = "DISCARD"
            with m.State("DISCARD"):
                m.d.comb += [waiting.eq(1), take.eq(1)]
                with m.If(timed_out):
                    m.next = "IDLE"

            # ---- burst write ---------------------------------------------------------------------
            with m.State("PAYLOAD"):
                def on_payload():
                    m.d.comb += [wp.addr.eq(idx >> BEAT_BITS), wp.data.eq(Cat(*([byte] * BUS_BYTES))),
                                 wp.en.eq(Const(1, BUS_BYTES) << idx[:BEAT_BITS])]
                    m.d.sync += [crc.eq(crc32_update(crc, byte)), idx.eq(idx + 1), count.eq(count + 1)]
                    with m.If(count + 1 == blen):
                        m.d.sync += count.eq(0)
                        m.next = "PAYLOAD_CRC"
                recv_state(on_payload)
            with m.State("PAYLOAD_CRC"):
                def on_pcrc():
                    m.d.sync += [shreg.eq(shreg_next), count.eq(count + 1)]
                    with m.If(count == 3):
                        m.d.sync += [left.eq(nbeats),
                                     status.eq(Mux(rx_crc_ok, FrameStatus.ACK, FrameStatus.NAK_CRC))]
                        with m.If(reg_frame):
                            m.next = "REG_CHECK"
                        with m.Else():
                            m.next = "WR_SETUP"
                recv_state(on_pcrc)
            with m.State("WR_SETUP"):
                with m.If((status != FrameStatus.ACK) | (left == 0)):
                    m.next = "STATUS"
                    with m.If(bus_err):
                        m.d.sync += status.eq(FrameStatus.BUS_ERROR)
                with m.Else():
                    m.d.sync += [mem.awvalid.eq(1), mem.awaddr.eq(cur), mem.awlen.eq(cut - 1),
                                 cur.eq(cur + (cut << BEAT_BITS)), left.eq(left - cut), in_burst.eq(cut - 1)]
                    m.next = "WR_FETCH"
            with m.State("WR_FETCH"):
                m.next = "WR_BEAT"      # rp.data follows beat one cycle later
            with m.State("WR_BEAT"):
                m.d.comb += [mem.wvalid.eq(1), mem.wdata.eq(rp.data), mem.wstrb.eq(strb),
                             mem.wlast.eq(in_burst == 0)]
                with m.If(mem.wready):
                    m.d.sync += [beat.eq(beat + 1), in_burst.eq(in_burst - 1)]
                    with m.If(in_burst == 0):
                        m.next = "WR_RESP"
                    with m.Else():
                        m.next = "WR_FETCH"
            with m.State("WR_RESP"):
                m.d.comb += mem.bready.eq(~mem.awvalid)
                with m.If(mem.bvalid & mem.bready):
                    with m.If(mem.bresp != RESP_OKAY):
                        m.d.sync += bus_err.eq(1)
                    m.next = "WR_SETUP"

            # ---- burst read ----------------------------------------------------------------------
            with m.State("RD_SETUP"):
                m.d.sync += left.eq(nbeats)
                m.next = "RD_ADDR"
            with m.State("RD_ADDR"):
                with m.If(left == 0):
                    m.d.sync += [status.eq(Mux(bus_err, FrameStatus.BUS_ERROR, FrameStatus.ACK)), count.eq(0)]
                    m.next = "STATUS"
                with m.Else():
                    m.d.sync += [mem.arvalid.eq(1), mem.araddr.eq(cur), mem.arlen.eq(cut - 1),
                                 cur.eq(cur + (cut << BEAT_BITS)), left.eq(left - cut)]
                    m.next = "RD_DATA"
            with m.State("RD_DATA"):
                m.d.comb += mem.rready.eq(~mem.arvalid)
                with m.If(mem.rvalid & mem.rready):
                    m.d.comb += [wp.addr.eq(beat), wp.data.eq(mem.rdata), wp.en.eq(0xFF)]
                    m.d.sync += beat.eq(beat + 1)
                    with m.If(mem.rresp != RESP_OKAY):
                        m.d.sync += bus_err.eq(1)
                    with m.If(mem.rlast):
                        m.next = "RD_ADDR"

            # ---- register frames: header, then (write) the words into the buffer, then the frame's CRC --
            with m.State("REG_HDR"):
                def on_reg_hdr():
                    m.d.sync += [shreg.eq(shreg_next), count.eq(count + 1), crc.eq(crc32_update(crc, byte))]
                    with m.If(count == 3):
                        m.d.sync += baddr.eq(shreg_next)
                    with m.If(count == 4):
                        m.d.sync += [words.eq(byte), blen.eq(byte << 2), lo.eq(0), idx.eq(0), count.eq(0)]
                        with m.If(cmd[0] & (byte != 0)):
                            m.next = "PAYLOAD"      # the words, into the buffer; the CRC runs on
                        with m.Else():
                            m.next = "PAYLOAD_CRC"
                recv_state(on_reg_hdr)
            with m.State("REG_CHECK"):
                m.d.sync += [count.eq(0), beat.eq(0), bus_err.eq(0)]
                with m.If(status != FrameStatus.ACK):
                    m.next = "NAK_HEADER"           # a bad CRC: discard until the line is quiet
                with m.Elif((words == 0) | (baddr[REG_BITS:] != REG_BASE >> REG_BITS) | (baddr[:2] != 0) |
                            (baddr[:REG_BITS] + blen[:11] > REG_BYTES)):
                    m.d.sync += status.eq(FrameStatus.NAK_RANGE)
                    m.next = "STATUS"               # the frame was whole: the next one may follow at once
                with m.Elif(cmd[0]):
                    m.next = "REG_FETCH"
                with m.Else():
                    m.next = "REG_READ"
            with m.State("REG_FETCH"):
                m.next = "REG_WRITE"                # rp.data follows beat one cycle later
            with m.State("REG_WRITE"):
                m.d.sync += [regs.awvalid.eq(1), regs.wvalid.eq(1), regs.awaddr.eq(baddr[:16]),
                             regs.wdata.eq(reg_word)]
                m.next = "REG_WRESP"
            with m.State("REG_WRESP"):
                m.d.comb += [regs.bready.eq(~regs.awvalid & ~regs.wvalid), reg_err.eq(regs.bresp != RESP_OKAY)]
                with m.If(regs.bvalid & regs.bready):
                    m.d.sync += [count.eq(count + 1), baddr.eq(baddr + 4), beat.eq((count + 1) >> 1),
                                 bus_err.eq(bus_err | reg_err)]
                    with m.If(count + 1 == words):
                        m.d.sync += status.eq(Mux(bus_err | reg_err, FrameStatus.BUS_ERROR, FrameStatus.ACK))
                        m.next = "STATUS"
                    with m.Else():
                        m.next = "REG_FETCH"
            with m.State("REG_READ"):
                m.d.sync += [regs.arvalid.eq(1), regs.araddr.eq(baddr[:16])]
                m.next = "REG_RRESP"
            with m.State("REG_RRESP"):
                m.d.comb += [regs.rready.eq(~regs.arvalid), reg_err.eq(regs.rresp != RESP_OKAY)]
                with m.If(regs.rvalid & regs.rready):
                    value = regs.rdata
                    be = Cat(value[24:], value[16:24], value[8:16], value[:8])
                    m.d.comb += [wp.addr.eq(count >> 1), wp.data.eq(Cat(be, be)),
                                 wp.en.eq(Mux(count[0], 0xF0, 0x0F))]
                    m.d.sync += [count.eq(count + 1), baddr.eq(baddr + 4), bus_err.eq(bus_err | reg_err)]
                    with m.If(count + 1 == words):
                        m.d.sync += [status.eq(Mux(bus_err | reg_err, FrameStatus.BUS_ERROR, FrameStatus.ACK)),
                                     count.eq(0)]
                        m.next = "STATUS"           # then, on ACK, the 4n bytes from the buffer and their CRC
                    with m.Else():
                        m.next = "REG_READ"

            # ---- status and read payload -----------------------------------------------------------
            with m.State("STATUS"):
                m.d.comb += [tx_valid.eq(1), tx_data.eq(status)]
                with m.If(sent):
                    m.d.sync += [count.eq(0), crc.eq(0xFFFF_FFFF), rd_ok.eq(0)]
                    with m.If((status == FrameStatus.ACK) & ~cmd[0]):
                        m.next = "SEND_PAYLOAD"
                    with m.Else():
                        m.next = "IDLE"
            with m.State("SEND_PAYLOAD"):
                m.d.comb += [send_idx.eq(1), tx_valid.eq(rd_ok), tx_data.eq(lane_byte)]
                with m.If(sent):
                    m.d.sync += [crc.eq(crc32_update(crc, lane_byte)), idx.eq(idx + 1), count.eq(count + 1),
                                 rd_ok.eq(0)]
                    with m.If(count + 1 == blen):
                        m.d.sync += count.eq(0)
                        m.next = "SEND_CRC"
            with m.State("SEND_CRC"):
                m.d.comb += [tx_valid.eq(1), tx_data.eq((~crc)[24:])]
                with m.If(sent):
                    m.d.sync += [crc.eq(crc << 8 | 0xFF), count.eq(count + 1)]
                    with m.If(count == 3):
                        m.next = "IDLE"
        return m
