"""The burst buffer: a frame's payload between the line and the bus, checked and sent with its CRC."""

from __future__ import annotations

from amaranth import Cat, Const, Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from ...spec import BURST_MAX_PAYLOAD, BUS_BYTES
from ..stream import AXIStreamSignature
from .bus import BEAT_BITS
from .crc import CRC_PORT
from .receiver import RX_PORT

__all__ = ["BUFFER_PORT", "BUF_WORDS", "PayloadBuffer"]

BUF_WORDS = (BURST_MAX_PAYLOAD + BUS_BYTES) // BUS_BYTES   # room for an unaligned start
LENGTH_BITS = 13            # payload bytes: up to BURST_MAX_PAYLOAD

#: The buffer as a frame engine sees it (flipped).  Strobes and their fields are ORed over the engines.
BUFFER_PORT = wiring.Signature({
    "receive": In(1),       # take ``length`` payload bytes into bytes ``offset`` on, then the frame's CRC
    "receive_crc": In(1),   # take only the frame's CRC
    "send": In(1),          # send ``length`` bytes from byte ``offset`` on, then their CRC
    "offset": In(BEAT_BITS),
    "length": In(LENGTH_BITS),
    "received": Out(1),     # the CRC's last byte is taken this cycle; ``crc_ok``: it matches
    "crc_ok": Out(1),
    "sent": Out(1),         # the CRC's last byte is sent this cycle
    # the word side, one bus beat a word: a write port with byte enables and a read port (data a cycle later)
    "w_addr": In(range(BUF_WORDS)), "w_data": In(8 * BUS_BYTES), "w_en": In(BUS_BYTES),
    "r_addr": In(range(BUF_WORDS)), "r_data": Out(8 * BUS_BYTES),
})


class PayloadBuffer(wiring.Component):
    """A block RAM of ``BUF_WORDS`` bus beats, filled and emptied a byte at a time on the line's side.

    Byte ``i`` of the buffer is lane ``i % BUS_BYTES`` of word ``i // BUS_BYTES``.
    ``receive`` takes ``length`` payload bytes from ``rx`` into bytes
    ``offset`` on, feeding each to the frame's CRC, then the four CRC bytes;
    ``received`` and ``crc_ok`` then say the frame is whole and whether the
    CRC matches (``receive_crc`` takes the CRC alone).  If the frame aborts
    (``rx.abort``), the buffer stops at once.  ``send`` restarts the CRC and
    sends ``length`` bytes from byte ``offset`` on, then their CRC, on ``tx``;
    ``sent`` marks the last one.  The engines use the word side meanwhile.
    """

    def __init__(self):
        super().__init__({
            "frames": Out(BUFFER_PORT),
            "rx": In(RX_PORT),
            "crc": In(CRC_PORT),
            "tx": Out(AXIStreamSignature(8)),
        })

    def elaborate(self, platform):
        m = Module()
        port, rx, crc, tx = self.frames, self.rx, self.crc, self.tx
        m.submodules.buf = buf = Memory(shape=8 * BUS_BYTES, depth=BUF_WORDS, init=[])
        wp = buf.write_port(granularity=8)
        rp = buf.read_port()

        idx = Signal(LENGTH_BITS)   # buffer byte of the next payload byte
        count = Signal(LENGTH_BITS)  # payload bytes, then CRC bytes, done
        length = Signal(LENGTH_BITS)
        sending = Signal()          # the read port follows idx rather than the engines
        rd_ok = Signal()            # rp.data matches its address
        m.d.sync += rd_ok.eq(1)
        m.d.comb += [
            wp.addr.eq(port.w_addr), wp.data.eq(port.w_data), wp.en.eq(port.w_en),
            rp.addr.eq(Mux(sending, idx >> BEAT_BITS, port.r_addr)),
            port.r_data.eq(rp.data),
            port.crc_ok.eq(rx.field == crc.value),
        ]
        lane_byte = Signal(8)
        with m.Switch(idx[:BEAT_BITS]):
            for k in range(BUS_BYTES):
                with m.Case(k):
                    m.d.comb += lane_byte.eq(rp.data[8 * k:8 * k + 8])

        with m.FSM(name="buffer_fsm"):
            with m.State("IDLE"):
                m.d.sync += [idx.eq(port.offset), count.eq(0), length.eq(port.length), rd_ok.eq(0)]
                m.d.comb += crc.restart.eq(port.send)
                with m.If(port.receive):
                    m.next = "RECEIVE"
                with m.Elif(port.receive_crc):
                    m.next = "RECEIVE_CRC"
                with m.Elif(port.send):
                    m.next = "SEND"
            with m.State("RECEIVE"):
                m.d.comb += rx.listen.eq(1)
                with m.If(rx.abort):
                    m.next = "IDLE"
                with m.Elif(rx.valid):
                    m.d.comb += [wp.addr.eq(idx >> BEAT_BITS), wp.data.eq(Cat(*([rx.byte] * BUS_BYTES))),
                                 wp.en.eq(Const(1, BUS_BYTES) << idx[:BEAT_BITS]),
                                 crc.feed.eq(1), crc.data.eq(rx.byte)]
                    m.d.sync += [idx.eq(idx + 1), count.eq(count + 1)]
                    with m.If(count + 1 == length):
                        m.d.sync += count.eq(0)
                        m.next = "RECEIVE_CRC"
            with m.State("RECEIVE_CRC"):
                m.d.comb += rx.listen.eq(1)
                with m.If(rx.abort):
                    m.next = "IDLE"
                with m.Elif(rx.valid):
                    m.d.sync += count.eq(count + 1)
                    with m.If(count == 3):
                        m.d.comb += port.received.eq(1)
                        m.next = "IDLE"
            with m.State("SEND"):
                m.d.comb += [sending.eq(1), tx.tvalid.eq(rd_ok), tx.tdata.eq(lane_byte)]
                with m.If(tx.tvalid & tx.tready):
                    m.d.comb += [crc.feed.eq(1), crc.data.eq(lane_byte)]
                    m.d.sync += [idx.eq(idx + 1), count.eq(count + 1), rd_ok.eq(0)]
                    with m.If(count + 1 == length):
                        m.d.sync += count.eq(0)
                        m.next = "SEND_CRC"
            with m.State("SEND_CRC"):
                m.d.comb += [tx.tvalid.eq(1), tx.tdata.eq(crc.value[24:])]
                with m.If(tx.tready):
                    m.d.comb += crc.shift.eq(1)
                    m.d.sync += count.eq(count + 1)
                    with m.If(count == 3):
                        m.d.comb += port.sent.eq(1)
                        m.next = "IDLE"
        return m
