"""The DMA's write side: write bursts to device memory, their data from the data FIFO, and their responses."""

from __future__ import annotations

from amaranth import Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.fifo import SyncFIFOBuffered
from amaranth.lib.wiring import In, Out
from amaranth.utils import exact_log2

from ..axi import BURST_INCR, MAX_BURST, RESP_OKAY, AXI4Signature
from .burst import BurstGenerator
from .params import BEAT_BYTES, COPY_BURST, DATA_DEPTH, WLEN_DEPTH

__all__ = ["WriteEngine"]


class WriteEngine(wiring.Component):
    """Issues the write bursts of a STORE or COPY on the write channels of ``bus`` (its read channels are not
    driven) and sends their beats from the data FIFO (``fifo_*``).

    ``start`` with ``base``, ``stride``, ``segments`` and ``seg_beats`` begins a job (see
    :class:`~.burst.BurstGenerator`; without ``segmented``, one run of ``seg_beats`` from ``base``); no new
    burst goes out while ``hold`` or ``abort`` is high.  Burst lengths wait in a FIFO of
    :data:`~.params.WLEN_DEPTH` for their data; once a burst's address is out, its beats stream back to back,
    so its data never waits for the bus.

    The memory's write channel serves a burst from its address to its last beat.  A COPY's data comes from
    the memory's read channel, so a COPY burst whose address went out before its data was read would hold
    the write channel while it waits for the read channel, which another master may hold while it waits
    for the write channel (the other tile's COPY, its data FIFO full): a deadlock.  So while ``is_copy`` a
    burst is at most :data:`~.params.COPY_BURST` beats and its address waits until all its beats are in the
    data FIFO (``copy_beat`` counts them in) and claimed by no earlier burst; then its write beats depend
    on nothing but the FIFO.  A STORE's data comes from the tile core, which never waits for the bus.

    A beat goes out with null strobes when it carries a read error (``fifo_err``, which also pulses
    ``read_error``), after an earlier one (``rd_err``), or while ``abort``; others count in
    ``bytes_written``.  An error response pulses ``error``.  No beat is sent while ``is_load``.  ``done``:
    every burst was issued, sent and answered; ``quiet``: no burst is open or waiting for its address;
    ``issued``: every burst of the job was issued (a new job may start: the issued bursts keep their data).
    """

    def __init__(self, addr_width: int = 32, id_width: int = 4, *, segmented: bool = True):
        self.segmented = segmented
        segments = {"stride": In(addr_width), "segments": In(16)} if segmented else {}
        super().__init__({
            "bus": Out(AXI4Signature(addr_width=addr_width, data_width=8 * BEAT_BYTES, id_width=id_width)),
            "start": In(1), "base": In(addr_width), **segments, "seg_beats": In(30),
            "hold": In(1), "abort": In(1), "is_copy": In(1), "is_load": In(1), "copy_beat": In(1), "rd_err": In(1),
            "fifo_data": In(8 * BEAT_BYTES), "fifo_err": In(1), "fifo_ready": In(1), "fifo_take": Out(1),
            "read_error": Out(1), "error": Out(1), "bytes_written": Out(32), "done": Out(1), "quiet": Out(1),
            "issued": Out(1),
        })
        self.addr_width = addr_width

    def elaborate(self, platform):
        m = Module()
        bus = self.bus
        m.submodules.bursts = bursts = BurstGenerator(self.addr_width, segmented=self.segmented)
        if self.segmented:
            m.d.comb += [bursts.stride.eq(self.stride), bursts.segments.eq(self.segments)]
        m.submodules.wlen_fifo = wlen_fifo = SyncFIFOBuffered(width=8, depth=WLEN_DEPTH)
        writes_out = Signal(16)
        unclaimed = Signal(range(DATA_DEPTH + 1))  # COPY beats in the data FIFO that no issued burst claims
        m.d.comb += [
            bursts.start.eq(self.start), bursts.base.eq(self.base), bursts.seg_beats.eq(self.seg_beats),
            bursts.max_beats.eq(Mux(self.is_copy, COPY_BURST, MAX_BURST)),
            bursts.allow.eq(wlen_fifo.w_rdy & (~self.is_copy | (unclaimed >= bursts.beats)) & ~self.hold & ~self.abort),
            bus.awvalid.eq(bursts.valid), bus.awaddr.eq(bursts.addr), bus.awlen.eq(bursts.len),
            bursts.ready.eq(bus.awready),
        ]
        m.d.sync += unclaimed.eq(unclaimed + (self.is_copy & self.copy_beat)
                                 - Mux(self.is_copy & bursts.issue, bursts.beats, 0))
        with m.If(self.start):
            m.d.sync += unclaimed.eq(0)
        aw_hs = Signal()
        b_hs = Signal()
        m.d.comb += [
            bus.awid.eq(0), bus.awsize.eq(exact_log2(BEAT_BYTES)), bus.awburst.eq(BURST_INCR),
            wlen_fifo.w_en.eq(bursts.issue), wlen_fifo.w_data.eq(bursts.beats - 1),
            aw_hs.eq(bus.awvalid & bus.awready),
            bus.bready.eq(1),
            b_hs.eq(bus.bvalid & bus.bready),
            self.error.eq(b_hs & (bus.bresp != RESP_OKAY)),
        ]
        m.d.sync += writes_out.eq(writes_out + aw_hs - b_hs)

        # Write data: FIFO beats, burst lengths from the address side.
        w_cur = Signal()
        w_len = Signal(8)
        w_cnt = Signal(8)
        w_hs = Signal()
        w_bad = Signal()
        m.d.comb += [
            bus.wvalid.eq(w_cur & (self.fifo_ready | self.abort) & ~self.is_load),
            bus.wdata.eq(self.fifo_data),
            w_bad.eq(self.fifo_err | self.rd_err | self.abort),
            bus.wstrb.eq(Mux(w_bad, 0, 0xFF)),
            bus.wlast.eq(w_cnt == w_len),
            w_hs.eq(bus.wvalid & bus.wready),
            self.fifo_take.eq(w_hs),
            self.read_error.eq(w_hs & self.fifo_err),
        ]
        with m.If(w_hs):
            m.d.sync += w_cnt.eq(w_cnt + 1)
            with m.If(~w_bad):
                m.d.sync += self.bytes_written.eq(self.bytes_written + BEAT_BYTES)
        with m.If(~w_cur | (w_hs & bus.wlast)):
            m.d.comb += wlen_fifo.r_en.eq(1)
            m.d.sync += [w_cur.eq(wlen_fifo.r_rdy), w_len.eq(wlen_fifo.r_data), w_cnt.eq(0)]
        quiet = ~bus.awvalid & (writes_out == 0) & ~w_cur & ~wlen_fifo.r_rdy
        m.d.comb += [self.done.eq(~bursts.active & quiet), self.quiet.eq(quiet), self.issued.eq(~bursts.active)]
        return m
