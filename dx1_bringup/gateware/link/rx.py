"""A link port's receiver: frames off the wire, checked by their CRC-32; DATA frames kept in the port's buffers
in sequence for the DMA, control frames handed to the transmitter and the DMA."""

from __future__ import annotations

from amaranth import Cat, Module, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out
from amaranth.utils import exact_log2

from ...spec.chip_link import ChipLinkConfig, FrameKind
from .crc import WordCrc32
from .frame import control_field, data_field, frame_buffer, payload_words
from .tx import SEQ_BITS, _add_mod
from .wire import WORD_BITS, link_wire

__all__ = ["LinkReceiver"]


class _State:
    IDLE, HEADER1, PAYLOAD, TRAILER, CONTROL_TRAILER = range(5)


class LinkReceiver(wiring.Component):
    """Takes frames off ``wire`` and checks each by its trailer (the CRC-32 of every word before it).

    * A DATA frame is written into a free buffer (one of ``credits``) as it arrives and
      kept if its CRC holds and its ``seq`` is the one expected next, or it is a SEND's
      ``first`` frame (the receiver takes a new SEND at whatever ``seq`` it has): then
      ``accepted`` pulses and the next ``seq`` is expected.  A frame whose CRC fails
      pulses ``crc_error`` and asks for a NAK of the expected ``seq`` (``nak_req``);
      a good frame out of sequence is dropped.  A frame cut short by the next frame's
      first beat counts as a CRC failure.
    * The oldest kept frame is offered to the DMA: ``frame_valid``, its two ``header``
      words, its payload word ``pay_addr`` on ``pay_data`` a cycle later; ``consume``
      frees its buffer and asks for an ACK of its ``seq`` (``ack_req``).
    * Intact control frames pulse ``ack``/``nak`` (for the transmitter) or ``done``
      (for the DMA) with their ``seq`` and ``status``; a control frame with a bad CRC is dropped.
    * While ``up`` is low nothing is taken off the wire (kept frames stay for the DMA).
    """

    def __init__(self, config: ChipLinkConfig):
        if not isinstance(config, ChipLinkConfig):
            raise TypeError(f"Link receiver config must be a ChipLinkConfig, not {config!r}")
        if config.width != WORD_BITS // 8:
            raise ValueError(f"The link gateware receives {WORD_BITS // 8} bytes a cycle (one device-memory beat), "
                             f"not a width of {config.width}")
        self.config = config
        word_bits = exact_log2(config.max_payload // 8)
        super().__init__({
            "wire": In(link_wire()), "up": In(1),
            "ack": Out(1), "ack_seq": Out(SEQ_BITS), "nak": Out(1), "nak_seq": Out(SEQ_BITS),
            "done": Out(1), "done_seq": Out(SEQ_BITS), "done_status": Out(8),
            "frame_valid": Out(1), "header": Out(2 * WORD_BITS),
            "pay_addr": In(max(1, word_bits)), "pay_data": Out(WORD_BITS), "consume": In(1),
            "ack_req": Out(1), "ack_req_seq": Out(SEQ_BITS), "nak_req": Out(1), "nak_req_seq": Out(SEQ_BITS),
            "accepted": Out(1), "crc_error": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        cfg = self.config
        buf = frame_buffer(m, cfg)
        slots, slot_words, slot_bits, word_bits = buf.slots, buf.slot_words, buf.slot_bits, buf.word_bits
        headers, payloads = buf.headers, buf.payloads
        hdr_w, pay_w = headers.write_port(), payloads.write_port()
        hdr_r0, hdr_r1 = headers.read_port(domain="comb"), headers.read_port(domain="comb")
        pay_r = payloads.read_port()
        m.submodules.crc = crc = WordCrc32(WORD_BITS // 8)

        count = Signal(range(slots + 1))
        rd_slot, wr_slot = Signal(slot_bits), Signal(slot_bits)
        expected = Signal(SEQ_BITS)

        # ---- delivery to the DMA --------------------------------------------------------------------------------
        m.d.comb += [
            hdr_r0.addr.eq(rd_slot << 1), hdr_r1.addr.eq(rd_slot << 1 | 1),
            self.header.eq(Cat(hdr_r0.data, hdr_r1.data)), self.frame_valid.eq(count != 0),
            pay_r.addr.eq(rd_slot << word_bits | self.pay_addr[:word_bits]), self.pay_data.eq(pay_r.data),
        ]
        consumed = Signal()
        m.d.comb += [consumed.eq(self.consume & (count != 0)),
                     self.ack_req.eq(consumed), self.ack_req_seq.eq(data_field(self.header, "seq"))]
        with m.If(consumed):
            m.d.sync += rd_slot.eq(_add_mod(rd_slot, 1, slots))

        # ---- parsing ----------------------------------------------------------------------------------------------
        state = Signal(range(5))
        beat = Signal()
        word = self.wire.data
        m.d.comb += [beat.eq(self.wire.valid & self.up), crc.data.eq(word)]
        hdr0 = Signal(WORD_BITS)
        words, idx = Signal(word_bits + 2), Signal(word_bits + 1)
        storing = Signal()
        ctrl = Signal(WORD_BITS)
        crc_ok = Signal()
        m.d.comb += crc_ok.eq(word == crc.value)
        bad = Signal()  # a DATA frame fails (CRC, or cut short)
        commit = Signal()
        m.d.comb += [
            hdr_w.addr.eq(wr_slot << 1 | ~self.wire.first), hdr_w.data.eq(word),
            pay_w.addr.eq(wr_slot << word_bits | idx[:word_bits]), pay_w.data.eq(word),
        ]
        in_data_frame = (state == _State.HEADER1) | (state == _State.PAYLOAD) | (state == _State.TRAILER)
        with m.If(beat & self.wire.first):
            m.d.comb += [crc.start.eq(1), bad.eq(in_data_frame)]
            kind = word[:4]
            with m.If(kind == FrameKind.DATA):
                m.d.comb += hdr_w.en.eq(count < slots)
                m.d.sync += [state.eq(_State.HEADER1), hdr0.eq(word), storing.eq(count < slots)]
            with m.Elif((kind == FrameKind.ACK) | (kind == FrameKind.NAK) | (kind == FrameKind.DONE)):
                m.d.sync += [state.eq(_State.CONTROL_TRAILER), ctrl.eq(word)]
            with m.Else():
                m.d.sync += state.eq(_State.IDLE)
        with m.Elif(beat):
            with m.Switch(state):
                with m.Case(_State.HEADER1):
                    n = payload_words(Cat(hdr0, word))
                    m.d.comb += [crc.feed.eq(1), hdr_w.en.eq(storing)]
                    m.d.sync += [words.eq(n), idx.eq(0)]
                    length_ok = (n != 0) & (n <= slot_words) & (data_field(Cat(hdr0, word), "payload_bytes")[:3] == 0)
                    with m.If(length_ok):
                        m.d.sync += state.eq(_State.PAYLOAD)
                    with m.Else():
                        m.d.comb += bad.eq(1)
                        m.d.sync += state.eq(_State.IDLE)
                with m.Case(_State.PAYLOAD):
                    m.d.comb += [crc.feed.eq(1), pay_w.en.eq(storing)]
                    m.d.sync += idx.eq(idx + 1)
                    with m.If(idx + 1 == words):
                        m.d.sync += state.eq(_State.TRAILER)
                with m.Case(_State.TRAILER):
                    seq = data_field(Cat(hdr0, 0), "seq")
                    in_order = (seq == expected) | data_field(Cat(hdr0, 0), "first")
                    m.d.sync += state.eq(_State.IDLE)
                    with m.If(~crc_ok):
                        m.d.comb += bad.eq(1)
                    with m.Elif(storing & in_order):
                        m.d.comb += commit.eq(1)
                        m.d.sync += expected.eq(seq + 1)
                with m.Case(_State.CONTROL_TRAILER):
                    m.d.sync += state.eq(_State.IDLE)
                    with m.If(crc_ok):
                        kind = ctrl[:4]
                        m.d.comb += [self.ack.eq(kind == FrameKind.ACK), self.nak.eq(kind == FrameKind.NAK),
                                     self.done.eq(kind == FrameKind.DONE)]
        m.d.comb += [
            self.ack_seq.eq(control_field(ctrl, "seq")), self.nak_seq.eq(control_field(ctrl, "seq")),
            self.done_seq.eq(control_field(ctrl, "seq")), self.done_status.eq(control_field(ctrl, "status")),
            self.crc_error.eq(bad), self.nak_req.eq(bad), self.nak_req_seq.eq(expected),
            self.accepted.eq(commit),
        ]
        with m.If(commit):
            m.d.sync += wr_slot.eq(_add_mod(wr_slot, 1, slots))
        m.d.sync += count.eq(count + commit - consumed)
        with m.If(~self.up):
            m.d.sync += state.eq(_State.IDLE)
        return m
