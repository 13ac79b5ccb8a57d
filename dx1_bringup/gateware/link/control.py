"""The control frames a link port owes its peer: the newest ACK, the newest NAK and the DMA's DONE, in that order."""

from __future__ import annotations

from amaranth import Module, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from ...spec.chip_link import FrameKind
from .frame import control_word
from .tx import SEQ_BITS, control_stream

__all__ = ["ControlQueue"]


class ControlQueue(wiring.Component):
    """Holds the control frames to send and offers them to the transmitter one at a time.

    An ACK says every frame up to its ``seq`` was consumed, so a newer ACK replaces one not yet
    sent (and a NAK likewise: it names the frame expected next).  The DMA's DONE (``done_valid``,
    ``done_seq``, ``done_status``, taken with ``done_ready``) waits in one register.  NAK goes
    first (it stops the peer sending frames the receiver drops), then ACK (credits), then DONE.
    """

    def __init__(self):
        super().__init__({
            "ack_req": In(1), "ack_seq": In(SEQ_BITS), "nak_req": In(1), "nak_seq": In(SEQ_BITS),
            "done_valid": In(1), "done_seq": In(SEQ_BITS), "done_status": In(8), "done_ready": Out(1),
            "ctrl": Out(control_stream()),
        })

    def elaborate(self, platform):
        m = Module()
        pending = {name: (Signal(name=f"{name}_pending"), Signal(SEQ_BITS, name=f"{name}_seq"))
                   for name in ("ack", "nak", "done")}
        done_status = Signal(8)
        (ack_p, ack_s), (nak_p, nak_s), (done_p, done_s) = pending["ack"], pending["nak"], pending["done"]
        with m.If(nak_p):
            m.d.comb += [self.ctrl.valid.eq(1), self.ctrl.data.eq(control_word(FrameKind.NAK, nak_s))]
        with m.Elif(ack_p):
            m.d.comb += [self.ctrl.valid.eq(1), self.ctrl.data.eq(control_word(FrameKind.ACK, ack_s))]
        with m.Elif(done_p):
            m.d.comb += [self.ctrl.valid.eq(1), self.ctrl.data.eq(control_word(FrameKind.DONE, done_s, done_status))]
        taken = self.ctrl.valid & self.ctrl.ready
        with m.If(taken):
            with m.If(nak_p):
                m.d.sync += nak_p.eq(0)
            with m.Elif(ack_p):
                m.d.sync += ack_p.eq(0)
            with m.Else():
                m.d.sync += done_p.eq(0)
        for name, req, seq in (("ack", self.ack_req, self.ack_seq), ("nak", self.nak_req, self.nak_seq)):
            flag, held = pending[name]
            with m.If(req):
                m.d.sync += [flag.eq(1), held.eq(seq)]
        m.d.comb += self.done_ready.eq(~done_p)
        with m.If(self.done_valid & ~done_p):
            m.d.sync += [done_p.eq(1), done_s.eq(self.done_seq), done_status.eq(self.done_status)]
        return m
