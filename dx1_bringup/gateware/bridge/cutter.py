"""Cutting a byte range of device memory into AXI4 INCR bursts of whole beats, with each beat's byte strobes."""

from __future__ import annotations

from amaranth import Cat, Const, Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out
from amaranth.utils import exact_log2

from ...spec import BUS_BYTES
from ..axi import MAX_BURST, PAGE_BYTES
from .bus import BEAT_BITS

__all__ = ["BurstCutter"]


class BurstCutter(wiring.Component):
    """The next burst of the beats that cover ``length`` bytes from ``byte_addr`` on.

    ``start`` begins the range (``byte_addr`` and ``length`` as they are in that
    cycle); then ``addr`` and ``len`` (beats minus one, as AXI's ``AxLEN``) are
    the next burst: at most ``MAX_BURST`` beats, never across a ``PAGE_BYTES``
    page.  ``next`` says it was issued; ``done`` is high once every beat has
    been.
    """

    def __init__(self):
        super().__init__({
            "start": In(1),
            "byte_addr": In(32),
            "length": In(13),
            "next": In(1),
            "addr": Out(31),
            "len": Out(8),
            "done": Out(1),
            "beat": In(10),
            "strb": Out(BUS_BYTES),
        })

    def elaborate(self, platform):
        m = Module()
        lo = self.byte_addr[:BEAT_BITS]     # the range's start in its first beat
        hi = Signal(14)                     # its end, from the first beat's start
        nbeats = Signal(10)
        left = Signal(10)           # beats not yet issued
        cut = Signal(9)             # beats of the next burst
        to_page = Signal(10)
        capped = Signal(10)
        cur = self.addr
        m.d.comb += [
            hi.eq(lo + self.length), nbeats.eq((hi + BUS_BYTES - 1) >> BEAT_BITS),
            to_page.eq(PAGE_BYTES // BUS_BYTES - cur[BEAT_BITS:exact_log2(PAGE_BYTES)]),
            capped.eq(Mux(left < MAX_BURST, left, MAX_BURST)),
            cut.eq(Mux(to_page < capped, to_page, capped)),
            self.len.eq(cut - 1),
            self.done.eq(left == 0),
            self.strb.eq(Cat(*[((self.beat * BUS_BYTES + j) >= lo) & ((self.beat * BUS_BYTES + j) < hi)
                               for j in range(BUS_BYTES)])),
        ]
        with m.If(self.start):
            m.d.sync += [cur.eq(Cat(Const(0, BEAT_BITS), self.byte_addr[BEAT_BITS:31])), left.eq(nbeats)]
        with m.Elif(self.next):
            m.d.sync += [cur.eq(cur + (cut << BEAT_BITS)), left.eq(left - cut)]
        return m
