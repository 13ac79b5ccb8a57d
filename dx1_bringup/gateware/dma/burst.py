"""The DMA's address generator: cuts strided runs of beats into legal AXI bursts."""

from __future__ import annotations

from amaranth import Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out
from amaranth.utils import exact_log2

from ..axi import MAX_BURST, PAGE_BYTES
from .params import BEAT_BYTES

__all__ = ["BurstGenerator"]


class BurstGenerator(wiring.Component):
    """Cuts ``segments`` runs of ``seg_beats`` beats, ``stride`` bytes apart from ``base``, into AXI bursts.

    A burst is at most ``max_beats`` (at most 256) beats and never crosses a 4 KiB page.  ``start`` loads a
    new job (``active`` until its last burst is issued).  ``valid``, ``addr`` and ``len`` are registers, an
    address channel's outputs: the next burst is loaded (``issue``, of ``beats`` beats) when the channel is
    empty or being taken (``ready``) and ``allow`` is high.

    Parameters
    ----------
    addr_width:
        Width of the addresses.
    segmented:
        Whether a job may have several segments; without (the link DMA's one run of beats), there are no
        ``stride`` and ``segments`` ports and no segment registers: a job is one run of ``seg_beats`` from ``base``.
    """

    def __init__(self, addr_width: int, *, segmented: bool = True):
        self.addr_width, self.segmented = addr_width, segmented
        segments = {"stride": In(addr_width), "segments": In(16)} if segmented else {}
        super().__init__({
            "start": In(1), "base": In(addr_width), **segments,
            "seg_beats": In(30), "max_beats": In(range(MAX_BURST + 1)), "allow": In(1),
            "valid": Out(1), "addr": Out(addr_width), "len": Out(8), "ready": In(1),
            "active": Out(1), "issue": Out(1), "beats": Out(range(MAX_BURST + 1)),
        })

    def elaborate(self, platform):
        m = Module()
        active, valid, beats = self.active, self.valid, self.beats
        addr = Signal(self.addr_width)
        seg_left = Signal(30)
        if self.segmented:
            seg_base = Signal(self.addr_width)
            stride = Signal(self.addr_width)
            seg_beats = Signal(30)
            segs_left = Signal(16)
        to_page = Signal(range(PAGE_BYTES // BEAT_BYTES + 1))
        capped = Signal(range(MAX_BURST + 1))
        page_bits = exact_log2(PAGE_BYTES)
        beat_bits = exact_log2(BEAT_BYTES)
        m.d.comb += [
            to_page.eq(PAGE_BYTES // BEAT_BYTES - addr[beat_bits:page_bits]),
            capped.eq(Mux(seg_left < self.max_beats, seg_left, self.max_beats)),
            beats.eq(Mux(to_page < capped, to_page, capped)),
            self.issue.eq(active & (~valid | self.ready) & self.allow),
        ]
        with m.If(valid & self.ready):
            m.d.sync += valid.eq(0)
        with m.If(self.issue):
            m.d.sync += [
                valid.eq(1), self.addr.eq(addr), self.len.eq(beats - 1),
                addr.eq(addr + (beats << beat_bits)), seg_left.eq(seg_left - beats),
            ]
            with m.If(seg_left == beats):
                if not self.segmented:
                    m.d.sync += active.eq(0)
                else:
                    with m.If(segs_left == 1):
                        m.d.sync += active.eq(0)
                    with m.Else():
                        m.d.sync += [
                            seg_base.eq(seg_base + stride), addr.eq(seg_base + stride),
                            seg_left.eq(seg_beats), segs_left.eq(segs_left - 1),
                        ]
        with m.If(self.start):
            if self.segmented:
                m.d.sync += [
                    active.eq(1), addr.eq(self.base), seg_base.eq(self.base), stride.eq(self.stride),
                    seg_left.eq(self.seg_beats), seg_beats.eq(self.seg_beats), segs_left.eq(self.segments),
                ]
            else:
                m.d.sync += [active.eq(1), addr.eq(self.base), seg_left.eq(self.seg_beats)]
        return m
