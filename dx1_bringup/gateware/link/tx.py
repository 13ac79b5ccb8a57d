"""A link port's transmitter: DATA frames into a replay buffer, sent with their CRC while credits last, sent again
from the buffer on NAK (go-back-N) up to the retry limit; control frames between them."""

from __future__ import annotations

from amaranth import Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out
from amaranth.utils import exact_log2

from ...spec.chip_link import SEQ_MODULO, ChipLinkConfig
from .crc import WordCrc32
from .frame import data_field, frame_buffer, frame_stream, payload_words
from .wire import WORD_BITS, link_wire

__all__ = ["LinkTransmitter", "control_stream"]

SEQ_BITS = exact_log2(SEQ_MODULO)


def control_stream() -> wiring.Signature:
    """Control frames' header words (ACK, NAK, DONE) to send; each becomes a header and its CRC trailer."""
    return wiring.Signature({"data": Out(WORD_BITS), "valid": Out(1), "ready": In(1)})


class _Emit:
    """What the transmitter's output stage puts on the wire this cycle."""
    NONE, HEADER0, HEADER1, PAYLOAD, TRAILER, CONTROL, CONTROL_TRAILER = range(7)


class _Pick:
    """The transmitter's frame sequencer: what it reads for the output stage next."""
    IDLE, CONTROL_TRAILER, HEADER1, PAYLOAD, TRAILER = range(5)


def _add_mod(a, b, modulo: int):
    """``(a + b) % modulo`` for ``a, b < modulo`` (one comparison, no divider)."""
    total = a + b
    return Mux(total >= modulo, total - modulo, total)[:len(a)]


class LinkTransmitter(wiring.Component):
    """Sends the DATA frames it is given, reliably, and the control frames the port asks for.

    * ``frames``: a DATA frame's header words, then its payload words (``last`` on the
      frame's last word).  A word is taken only while a replay slot is free (a credit: the
      peer's receiver has as many buffers as this port has slots); the frame's ``seq``
      field is written here.  A frame offered while no slot is free raises
      ``credit_stall`` for each cycle it waits.
    * Frames are sent from the replay buffer, oldest unsent first, each followed by its
      CRC-32 trailer; control frames (``ctrl``, one header word each) go first at every
      frame boundary.  ``ack`` frees every slot up to ``ack_seq``; ``nak`` sends again
      every frame from ``nak_seq`` on, after the frame being sent.  When one frame is
      NAKed a ``1 + retries``-th time, the buffer is emptied and ``failed`` rises (the
      SEND ends with LINK_CRC); words offered meanwhile are taken and dropped.
    * ``abort`` (the DMA ended its SEND) drops a partly stored frame and clears ``failed``.
    * While ``up`` is low nothing is sent, the buffer is emptied and offered words are dropped.
    * A SEND's ``first`` frame goes alone: no frame after it is sent until it is acknowledged
      (so a SEND that fails on it has sent one frame, whatever the timing).
    * ``inject`` with ``inject_count`` (LINK.CONTROL ``corrupt``): the next SEND's first frame,
      and its resends, go out with a corrupted trailer (the CRC inverted) while the count
      lasts (``inject_left`` counts down; past the retry limit the rest waits for the next
      SEND's first frame), so the peer sees exactly that many CRC errors.
    * Pulses for the port's counters: ``sent_new`` (a frame's first sending starts),
      ``sent_again``, ``nak_taken`` (a NAK that sends frames again: not the one past the limit);
      ``next_seq``, the ``seq`` the next frame stored gets; ``idle`` while nothing is stored,
      unacknowledged or on the wire.
    """

    def __init__(self, config: ChipLinkConfig):
        if not isinstance(config, ChipLinkConfig):
            raise TypeError(f"Link transmitter config must be a ChipLinkConfig, not {config!r}")
        if config.width != WORD_BITS // 8:
            raise ValueError(f"The link gateware sends {WORD_BITS // 8} bytes a cycle (one device-memory beat), "
                             f"not a width of {config.width}")
        self.config = config
        super().__init__({
            "wire": Out(link_wire()), "up": In(1),
            "frames": In(frame_stream()), "ctrl": In(control_stream()),
            "ack": In(1), "ack_seq": In(SEQ_BITS), "nak": In(1), "nak_seq": In(SEQ_BITS),
            "inject": In(1), "inject_count": In(8), "inject_left": Out(8),
            "failed": Out(1), "abort": In(1), "next_seq": Out(SEQ_BITS),
            "credit_stall": Out(1), "sent_new": Out(1), "sent_again": Out(1), "nak_taken": Out(1), "idle": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        cfg = self.config
        buf = frame_buffer(m, cfg)
        slots, slot_words, slot_bits, word_bits = buf.slots, buf.slot_words, buf.slot_bits, buf.word_bits
        headers, payloads = buf.headers, buf.payloads
        hdr_w, pay_w = headers.write_port(), payloads.write_port()
        hdr_r, pay_r = headers.read_port(), payloads.read_port()
        m.submodules.crc = crc = WordCrc32(WORD_BITS // 8)

        # ---- the replay buffer's pointers: sequence numbers, and slots in the same order -------------------------
        # The oldest unacknowledged frame, the next to send, the next never sent; frames stored, not acknowledged.
        base, sent, high = Signal(SEQ_BITS), Signal(SEQ_BITS), Signal(SEQ_BITS)
        count = Signal(range(slots + 1))
        base_slot, send_slot, store_slot = Signal(slot_bits), Signal(slot_bits), Signal(slot_bits)
        stored = Signal(SEQ_BITS)
        m.d.comb += [stored.eq(base + count), self.next_seq.eq(stored)]
        down = ~self.up

        # ---- storing frames ---------------------------------------------------------------------------------------
        failed = Signal()
        store_idx = Signal(range(slot_words + 2))
        dropping = Signal()
        word_taken = Signal()
        commit = Signal()
        m.d.comb += [
            dropping.eq(failed | down),
            self.frames.ready.eq(dropping | (count < slots)),
            word_taken.eq(self.frames.valid & self.frames.ready),
            commit.eq(word_taken & self.frames.last & ~dropping),
            self.credit_stall.eq(self.frames.valid & ~self.frames.ready),
            self.failed.eq(failed),
        ]
        word0 = Signal(WORD_BITS)
        m.d.comb += [word0.eq(self.frames.data), data_field(word0, "seq").eq(stored)]
        m.d.comb += [
            hdr_w.addr.eq(store_slot << 1 | store_idx[0]),
            hdr_w.data.eq(Mux(store_idx == 0, word0, self.frames.data)),
            hdr_w.en.eq(word_taken & ~dropping & (store_idx < 2)),
            pay_w.addr.eq(store_slot << word_bits | (store_idx - 2)[:word_bits]),
            pay_w.data.eq(self.frames.data),
            pay_w.en.eq(word_taken & ~dropping & (store_idx >= 2)),
        ]
        with m.If(word_taken):
            m.d.sync += store_idx.eq(Mux(self.frames.last, 0, store_idx + 1))
        # Which slots hold a SEND's first frame (word 0's ``first`` bit, kept from the word stored).
        slot_first = Signal(slots)
        storing_first = Signal()
        with m.If(word_taken & (store_idx == 0)):
            m.d.sync += storing_first.eq(data_field(self.frames.data, "first"))
        with m.If(commit):
            m.d.sync += [store_slot.eq(_add_mod(store_slot, 1, slots)), slot_first.bit_select(store_slot, 1).eq(
                Mux(store_idx == 0, data_field(self.frames.data, "first"), storing_first))]

        # ---- fault injection: the next frame sent for the first time, and its resends, while the count lasts ------
        inj_bound = Signal()
        inj_seq, inj_left = Signal(SEQ_BITS), Signal(8)
        m.d.comb += self.inject_left.eq(inj_left)
        with m.If(self.inject):
            m.d.sync += [inj_bound.eq(0), inj_left.eq(self.inject_count)]

        # A SEND's first frame goes alone: nothing after it is sent until it is acknowledged.
        first_waits = Signal()
        m.d.comb += first_waits.eq((count != 0) & slot_first.bit_select(base_slot, 1) & (sent != base))

        # ---- acknowledgements and NAKs (one control frame at a time from the port's receiver) ---------------------
        freed = Signal(range(slots + 1))
        ack_dist = Signal(SEQ_BITS)
        m.d.comb += ack_dist.eq(self.ack_seq - base)
        with m.If(self.ack & (ack_dist < count)):
            m.d.comb += freed.eq(ack_dist + 1)
        rewind, rewind_seq, rewind_slot = Signal(), Signal(SEQ_BITS), Signal(slot_bits)
        nak_last, nak_times, nak_active = Signal(SEQ_BITS), Signal(5), Signal()
        nak_dist, sent_dist = Signal(SEQ_BITS), Signal(SEQ_BITS)
        m.d.comb += [nak_dist.eq(self.nak_seq - base), sent_dist.eq(sent - base)]
        take_nak = Signal()
        times = Signal(5)
        exhausted = Signal()
        m.d.comb += [
            # While a SEND's first frame is alone on the wire a NAK can only be for it: the receiver names the seq it
            # expects, which after a SEND that failed or a link that went down need not be the first frame's.
            take_nak.eq(self.nak & ((nak_dist < sent_dist) | first_waits) & ~failed & self.up),
            times.eq(Mux(nak_active & (nak_last == self.nak_seq), nak_times + 1, 1)),
            exhausted.eq(take_nak & (times > cfg.retries)),
            self.nak_taken.eq(take_nak & ~exhausted),
        ]
        with m.If(self.ack & nak_active & (self.ack_seq == nak_last)):
            m.d.sync += nak_active.eq(0)
        with m.If(take_nak):
            m.d.sync += [nak_last.eq(self.nak_seq), nak_times.eq(times), nak_active.eq(1)]
            with m.If(~exhausted & first_waits):
                m.d.sync += [rewind.eq(1), rewind_seq.eq(base), rewind_slot.eq(base_slot)]
            with m.Elif(~exhausted):
                m.d.sync += [rewind.eq(1), rewind_seq.eq(self.nak_seq),
                             rewind_slot.eq(_add_mod(base_slot, nak_dist[:slot_bits] if slots > 1 else 0, slots))]

        # ---- the sequencer: control frames first, then the oldest unsent DATA frame ------------------------------
        pick = Signal(range(5))
        emit = Signal(range(7))
        emit_corrupt = Signal()
        ctrl_word = Signal(WORD_BITS)
        pay_idx = Signal(word_bits + 1)
        pay_words = Signal(word_bits + 1)
        frame_corrupt = Signal()
        frame_stale = Signal()  # the buffer was emptied while this frame was on the wire: it ends, sent stays
        frame_end = Signal()
        m.d.sync += emit.eq(_Emit.NONE)
        m.d.comb += [hdr_r.addr.eq(send_slot << 1), pay_r.addr.eq(send_slot << word_bits | pay_idx[:word_bits])]
        with m.Switch(pick):
            with m.Case(_Pick.IDLE):
                with m.If(self.up & ~rewind):
                    with m.If(self.ctrl.valid):
                        m.d.comb += self.ctrl.ready.eq(1)
                        m.d.sync += [ctrl_word.eq(self.ctrl.data), emit.eq(_Emit.CONTROL),
                                     pick.eq(_Pick.CONTROL_TRAILER)]
                    with m.Elif((sent != stored) & ~failed & ~first_waits):
                        new = sent == high
                        corrupt = (inj_left != 0) & Mux(inj_bound, inj_seq == sent, new & slot_first.bit_select(
                            send_slot, 1))
                        m.d.sync += [emit.eq(_Emit.HEADER0), pick.eq(_Pick.HEADER1), frame_corrupt.eq(corrupt),
                                     pay_idx.eq(0), frame_stale.eq(0)]
                        with m.If(corrupt):
                            m.d.sync += [inj_left.eq(inj_left - 1), inj_bound.eq(1), inj_seq.eq(sent)]
                        with m.If(new):
                            m.d.comb += self.sent_new.eq(1)
                            m.d.sync += high.eq(high + 1)
                        with m.Else():
                            m.d.comb += self.sent_again.eq(1)
            with m.Case(_Pick.CONTROL_TRAILER):
                m.d.sync += [emit.eq(_Emit.CONTROL_TRAILER), pick.eq(_Pick.IDLE)]
            with m.Case(_Pick.HEADER1):
                m.d.comb += hdr_r.addr.eq(send_slot << 1 | 1)
                m.d.sync += [emit.eq(_Emit.HEADER1), pick.eq(_Pick.PAYLOAD)]
            with m.Case(_Pick.PAYLOAD):
                m.d.sync += [emit.eq(_Emit.PAYLOAD), pay_idx.eq(pay_idx + 1)]
                with m.If(pay_idx + 1 == pay_words):
                    m.d.sync += pick.eq(_Pick.TRAILER)
            with m.Case(_Pick.TRAILER):
                m.d.comb += frame_end.eq(1)
                m.d.sync += [emit.eq(_Emit.TRAILER), emit_corrupt.eq(frame_corrupt), pick.eq(_Pick.IDLE)]
                with m.If(~frame_stale):
                    m.d.sync += [sent.eq(sent + 1), send_slot.eq(_add_mod(send_slot, 1, slots))]
        with m.If(emit == _Emit.HEADER0):
            m.d.sync += pay_words.eq(payload_words(hdr_r.data))
        # A NAK's rewind applies between frames.
        with m.If(rewind & ((pick == _Pick.IDLE) | frame_end)):
            m.d.sync += [sent.eq(rewind_seq), send_slot.eq(rewind_slot), rewind.eq(0)]

        # ---- the output stage -------------------------------------------------------------------------------------
        first = (emit == _Emit.HEADER0) | (emit == _Emit.CONTROL)
        trailer = Signal(WORD_BITS)
        m.d.comb += trailer.eq(crc.value ^ Mux(emit_corrupt & (emit == _Emit.TRAILER), 0xFFFF_FFFF, 0))
        with m.Switch(emit):
            with m.Case(_Emit.HEADER0, _Emit.HEADER1):
                m.d.comb += self.wire.data.eq(hdr_r.data)
            with m.Case(_Emit.PAYLOAD):
                m.d.comb += self.wire.data.eq(pay_r.data)
            with m.Case(_Emit.CONTROL):
                m.d.comb += self.wire.data.eq(ctrl_word)
            with m.Case(_Emit.TRAILER, _Emit.CONTROL_TRAILER):
                m.d.comb += self.wire.data.eq(trailer)
        m.d.comb += [
            self.wire.up.eq(self.up), self.wire.valid.eq((emit != _Emit.NONE) & self.up),
            self.wire.first.eq(first & self.up),
            crc.data.eq(self.wire.data), crc.start.eq(first),
            crc.feed.eq((emit == _Emit.HEADER1) | (emit == _Emit.PAYLOAD)),
        ]

        # ---- pointers: acknowledged slots leave, committed frames arrive; emptied on failure or when down ----------
        m.d.sync += [count.eq(count + commit - freed), base.eq(base + freed),
                     base_slot.eq(_add_mod(base_slot, freed, slots) if slots > 1 else 0)]
        with m.If(exhausted):
            # What is left of the injection waits for the next SEND's first frame.
            m.d.sync += [failed.eq(1), inj_bound.eq(0)]
        with m.If(self.abort):
            m.d.sync += [failed.eq(0), store_idx.eq(0)]
        with m.If(exhausted | down):
            # Every stored frame is dropped; the sequence numbers go on from the next one never stored.
            m.d.sync += [count.eq(0), base.eq(stored), sent.eq(stored), high.eq(stored), rewind.eq(0),
                         nak_active.eq(0), base_slot.eq(store_slot), send_slot.eq(store_slot), frame_stale.eq(1)]
        with m.If(down):
            m.d.sync += [pick.eq(_Pick.IDLE), emit.eq(_Emit.NONE), store_idx.eq(0)]
        m.d.comb += self.idle.eq((count == 0) & (pick == _Pick.IDLE) & (emit == _Emit.NONE) & (store_idx == 0))
        return m
