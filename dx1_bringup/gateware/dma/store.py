"""The DMA's STORE path: local row requests to the tile, and the rows split into beats for the data FIFO."""

from __future__ import annotations

from amaranth import Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from ..stream import AXIStreamSignature
from ..tile import ADDR_BITS
from .params import BEAT_BYTES
from .walker import RowWalker

__all__ = ["StoreEngine"]


class StoreEngine(wiring.Component):
    """Reads a STORE's scratchpad or accumulator rows (``acc``) in command order and splits them into beats.

    ``start`` with ``request`` high begins a move: one read request a row goes out on ``spm_rreq``/
    ``acc_rreq`` at the walker's addresses.  While ``is_store``, a row answered on ``spm_rresp``/
    ``acc_rresp`` is taken once the previous one is (nearly) sent, and its beats leave on ``beat`` with
    ``push`` while the data FIFO has room (``fifo_ready``).

    Parameters
    ----------
    array:
        The tile's array size: a scratchpad row is ``array`` bytes, an accumulator row ``4 * array``.
    """

    def __init__(self, array: int):
        self.array = array
        super().__init__({
            "spm_rreq": Out(AXIStreamSignature(ADDR_BITS)), "spm_rresp": In(AXIStreamSignature(8 * array)),
            "acc_rreq": Out(AXIStreamSignature(ADDR_BITS)), "acc_rresp": In(AXIStreamSignature(32 * array)),
            "start": In(1), "request": In(1), "local_addr": In(ADDR_BITS), "acc": In(1), "is_store": In(1),
            "rows": In(16), "cols": In(16), "row_stride": In(16), "col_stride": In(16),
            "fifo_ready": In(1), "beat": Out(8 * BEAT_BYTES), "push": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        n, acc = self.array, self.acc
        spm_beats, acc_beats = 8 * n // 64, 32 * n // 64
        m.submodules.walker = walker = RowWalker()
        rq_valid = Signal()
        rq_addr = Signal(ADDR_BITS)
        rq_ready = Signal()
        rq_active = Signal()
        m.d.comb += [
            rq_ready.eq(Mux(acc, self.acc_rreq.tready, self.spm_rreq.tready)),
            self.spm_rreq.tvalid.eq(rq_valid & ~acc), self.spm_rreq.tdata.eq(rq_addr),
            self.acc_rreq.tvalid.eq(rq_valid & acc), self.acc_rreq.tdata.eq(rq_addr),
            walker.start.eq(self.start), walker.local_addr.eq(self.local_addr),
            walker.rows.eq(self.rows), walker.cols.eq(self.cols),
            walker.row_stride.eq(self.row_stride), walker.col_stride.eq(self.col_stride),
            walker.advance.eq(rq_active & (~rq_valid | rq_ready)),
        ]
        with m.If(rq_valid & rq_ready):
            m.d.sync += rq_valid.eq(0)
        with m.If(walker.advance):
            m.d.sync += [rq_valid.eq(1), rq_addr.eq(walker.addr)]
            with m.If(walker.last):
                m.d.sync += rq_active.eq(0)

        sp_buf = Signal(32 * n)
        sp_cnt = Signal(range(acc_beats + 1))
        sp_take = Signal()
        resp_valid = Signal()
        resp_data = Signal(32 * n)
        m.d.comb += [
            resp_valid.eq(Mux(acc, self.acc_rresp.tvalid, self.spm_rresp.tvalid)),
            resp_data.eq(Mux(acc, self.acc_rresp.tdata, self.spm_rresp.tdata)),
            self.push.eq((sp_cnt != 0) & self.fifo_ready),
            sp_take.eq(self.is_store & ((sp_cnt == 0) | ((sp_cnt == 1) & self.push))),
            self.acc_rresp.tready.eq(sp_take & acc),
            self.spm_rresp.tready.eq(sp_take & ~acc),
            self.beat.eq(sp_buf[:64]),
        ]
        with m.If(self.push):
            m.d.sync += [sp_buf.eq(sp_buf >> 64), sp_cnt.eq(sp_cnt - 1)]
        with m.If(sp_take & resp_valid):
            m.d.sync += [sp_buf.eq(resp_data), sp_cnt.eq(Mux(acc, acc_beats, spm_beats))]
        with m.If(self.start):
            m.d.sync += [rq_active.eq(self.request), sp_cnt.eq(0)]
        return m
