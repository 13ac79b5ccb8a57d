"""The wire between two chips' link ports: its signature and its delay line (the link's latency)."""

from __future__ import annotations

from amaranth import Module, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

__all__ = ["WORD_BITS", "link_wire", "LinkWire"]

#: Bits of one beat of the link gateware: one 8-byte frame word a cycle (the width the link DMA's 64-bit device
#: memory bus can feed).
WORD_BITS = 64


def link_wire() -> wiring.Signature:
    """One direction of a link port, as the sending chip drives it.

    ``up`` is the sender's signal (high while its port is not forced down), ``hears`` says the sender receives
    its peer's signal (so a wire cut in one direction downs both ends), ``valid`` marks a beat of a
    frame and ``first`` its first beat (a framing bit beside the data, as 64b/66b's sync header: a receiver that
    lost a frame's end finds the next frame's start), ``data`` is one little-endian frame word.  No ready: the
    wire cannot stall, the sender holds credits for the receiver's buffers instead.
    """
    return wiring.Signature({"up": Out(1), "hears": Out(1), "valid": Out(1), "first": Out(1),
                             "data": Out(WORD_BITS)})


class LinkWire(wiring.Component):
    """``latency`` cycles of delay from ``tx`` to ``rx``; ``cut`` drops everything (``up`` and ``hears`` too) while
    high.

    Parameters
    ----------
    latency:
        Cycles from a beat on ``tx`` to the same beat on ``rx`` (at least 1: the wire is registered).
    """

    def __init__(self, latency: int):
        if not isinstance(latency, int) or isinstance(latency, bool) or latency < 1:
            raise TypeError(f"Wire latency must be a positive integer, not {latency!r}")
        self.latency = latency
        super().__init__({"tx": In(link_wire()), "rx": Out(link_wire()), "cut": In(1)})

    def elaborate(self, platform):
        m = Module()
        up, hears = self.tx.up & ~self.cut, self.tx.hears & ~self.cut
        valid, first, data = self.tx.valid & ~self.cut, self.tx.first, self.tx.data
        for i in range(self.latency):
            up_d, hears_d, valid_d = Signal(name=f"up{i}"), Signal(name=f"hears{i}"), Signal(name=f"valid{i}")
            first_d, data_d = Signal(name=f"first{i}"), Signal(WORD_BITS, name=f"data{i}")
            m.d.sync += [up_d.eq(up), hears_d.eq(hears), valid_d.eq(valid), first_d.eq(first & valid),
                         data_d.eq(data)]
            up, hears, valid, first, data = up_d, hears_d, valid_d, first_d, data_d
        m.d.comb += [self.rx.up.eq(up), self.rx.hears.eq(hears), self.rx.valid.eq(valid), self.rx.first.eq(first),
                     self.rx.data.eq(data)]
        return m
