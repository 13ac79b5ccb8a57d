"""One link port: transmitter, receiver, the control frames between them, its up state and its counters."""

from __future__ import annotations

from amaranth import Module, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out, connect, flipped

from ...spec.chip_link import ChipLinkConfig
from .control import ControlQueue
from .frame import frame_stream
from .rx import LinkReceiver
from .tx import SEQ_BITS, LinkTransmitter
from .wire import WORD_BITS, link_wire

__all__ = ["COUNTERS", "LinkPort"]

#: The port's counters, each a 32-bit count of events (wrapping): DATA frames sent for the first time, DATA frames
#: kept by the receiver, NAKs acted on (each a resend from the NAKed frame on), frames received with a bad CRC,
#: cycles a frame waited for a credit.
COUNTERS = ("tx_frames", "rx_frames", "retries", "crc_errors", "credit_stalls")


class LinkPort(wiring.Component):
    """A link port of a chip: ``tx``/``rx`` are its two wires, ``force_down`` holds it down (no traffic).

    ``up`` is high while the port is not forced down, the peer's signal arrives on ``rx`` and the
    peer hears this end's; cutting either direction, or forcing either end down, brings both ends down.

    The sending DMA offers DATA frames on ``frames`` and learns their SEND's end from the peer's
    DONE (``done``, ``done_seq``, ``done_status``) or from ``failed`` (a frame past the retry
    limit), ending it with ``abort``.  The receiving DMA takes kept frames (``frame_valid``,
    ``header``, ``pay_addr``/``pay_data``, ``consume``) and sends its DONE (``done_req_*``).
    ``inject``/``inject_count`` corrupt the CRC of the next frame sent for the first time and
    its resends while the count (``inject_left``) lasts.  The counters (:data:`COUNTERS`) count while ``clear`` is low.
    """

    def __init__(self, config: ChipLinkConfig):
        if not isinstance(config, ChipLinkConfig):
            raise TypeError(f"Link port config must be a ChipLinkConfig, not {config!r}")
        self.config = config
        self._tx = LinkTransmitter(config)
        self._rx = LinkReceiver(config)
        super().__init__({
            "tx": Out(link_wire()), "rx": In(link_wire()), "force_down": In(1), "up": Out(1),
            "frames": In(frame_stream()), "failed": Out(1), "abort": In(1), "idle": Out(1), "next_seq": Out(SEQ_BITS),
            "done": Out(1), "done_seq": Out(SEQ_BITS), "done_status": Out(8),
            "frame_valid": Out(1), "header": Out(2 * WORD_BITS),
            "pay_addr": In(len(self._rx.pay_addr)), "pay_data": Out(WORD_BITS), "consume": In(1),
            "done_req_valid": In(1), "done_req_seq": In(SEQ_BITS), "done_req_status": In(8), "done_req_ready": Out(1),
            "inject": In(1), "inject_count": In(8), "inject_left": Out(8),
            "clear": In(1), **{name: Out(32) for name in COUNTERS},
        })

    def elaborate(self, platform):
        m = Module()
        m.submodules.tx = tx = self._tx
        m.submodules.rx = rx = self._rx
        m.submodules.control = control = ControlQueue()
        up = Signal()
        # Up: not forced down, the peer's signal arrives, and the peer hears this end's.  The signal goes out
        # while this end is not forced down, and ``hears`` while the peer's arrives, so a cut wire in either
        # direction or a forced end downs both ends (and coming up takes a round trip).
        m.d.comb += [up.eq(~self.force_down & self.rx.up & self.rx.hears), self.up.eq(up), tx.up.eq(up),
                     rx.up.eq(up)]
        m.d.comb += [self.tx.up.eq(~self.force_down), self.tx.hears.eq(self.rx.up), self.tx.valid.eq(tx.wire.valid),
                     self.tx.first.eq(tx.wire.first), self.tx.data.eq(tx.wire.data)]
        connect(m, flipped(self.rx), rx.wire)
        connect(m, flipped(self.frames), tx.frames)
        connect(m, control.ctrl, tx.ctrl)
        m.d.comb += [
            tx.ack.eq(rx.ack), tx.ack_seq.eq(rx.ack_seq), tx.nak.eq(rx.nak), tx.nak_seq.eq(rx.nak_seq),
            tx.inject.eq(self.inject), tx.inject_count.eq(self.inject_count), self.inject_left.eq(tx.inject_left),
            tx.abort.eq(self.abort),
            self.failed.eq(tx.failed), self.idle.eq(tx.idle), self.next_seq.eq(tx.next_seq),
            self.done.eq(rx.done), self.done_seq.eq(rx.done_seq), self.done_status.eq(rx.done_status),
            self.frame_valid.eq(rx.frame_valid), self.header.eq(rx.header), rx.pay_addr.eq(self.pay_addr),
            self.pay_data.eq(rx.pay_data), rx.consume.eq(self.consume),
            control.ack_req.eq(rx.ack_req), control.ack_seq.eq(rx.ack_req_seq),
            control.nak_req.eq(rx.nak_req), control.nak_seq.eq(rx.nak_req_seq),
            control.done_valid.eq(self.done_req_valid), control.done_seq.eq(self.done_req_seq),
            control.done_status.eq(self.done_req_status), self.done_req_ready.eq(control.done_ready),
        ]
        events = {"tx_frames": tx.sent_new, "rx_frames": rx.accepted, "retries": tx.nak_taken,
                  "crc_errors": rx.crc_error, "credit_stalls": tx.credit_stall}
        for name in COUNTERS:
            counter = getattr(self, name)
            with m.If(self.clear):
                m.d.sync += counter.eq(0)
            with m.Elif(events[name]):
                m.d.sync += counter.eq(counter + 1)
        return m
