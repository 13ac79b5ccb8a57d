"""The DMA's LOAD path: beats from the data FIFO assembled into local rows and written to the tile."""

from __future__ import annotations

from amaranth import Cat, Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from ..stream import AXIStreamSignature
from ..tile import ADDR_BITS
from .params import BEAT_BYTES
from .walker import RowWalker

__all__ = ["LoadEngine"]


class LoadEngine(wiring.Component):
    """Assembles a LOAD's beats into scratchpad or accumulator rows (``acc``) and writes them in command order.

    While ``run`` the engine takes beats from the data FIFO (``fifo_take``) as long as the row they complete
    can go out; a row goes out on ``spm_wr``/``acc_wr`` (address, then the row) at the walker's next
    address.  A beat with a read error (``fifo_err``) pulses ``read_error``; from it on (``rd_err``) rows
    are dropped, but their beats still taken.  ``done``: every row of the move was taken and none waits.

    Parameters
    ----------
    array:
        The tile's array size: a scratchpad row is ``array`` bytes, an accumulator row ``4 * array``.
    """

    def __init__(self, array: int):
        self.array = array
        super().__init__({
            "spm_wr": Out(AXIStreamSignature(ADDR_BITS + 8 * array)),
            "acc_wr": Out(AXIStreamSignature(ADDR_BITS + 32 * array)),
            "start": In(1), "local_addr": In(ADDR_BITS), "acc": In(1),
            "rows": In(16), "cols": In(16), "row_stride": In(16), "col_stride": In(16),
            "run": In(1), "rd_err": In(1),
            "fifo_data": In(8 * BEAT_BYTES), "fifo_err": In(1), "fifo_ready": In(1), "fifo_take": Out(1),
            "read_error": Out(1), "done": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        n, acc = self.array, self.acc
        spm_beats, acc_beats = 8 * n // 64, 32 * n // 64
        m.submodules.walker = walker = RowWalker()
        wr_valid = Signal()
        wr_addr = Signal(ADDR_BITS)
        wr_data = Signal(32 * n)
        wr_ready = Signal()
        m.d.comb += [
            wr_ready.eq(Mux(acc, self.acc_wr.tready, self.spm_wr.tready)),
            self.spm_wr.tvalid.eq(wr_valid & ~acc), self.spm_wr.tdata.eq(Cat(wr_data[:8 * n], wr_addr)),
            self.acc_wr.tvalid.eq(wr_valid & acc), self.acc_wr.tdata.eq(Cat(wr_data, wr_addr)),
            walker.start.eq(self.start), walker.local_addr.eq(self.local_addr),
            walker.rows.eq(self.rows), walker.cols.eq(self.cols),
            walker.row_stride.eq(self.row_stride), walker.col_stride.eq(self.col_stride),
        ]
        walked = Signal()
        asm = Signal(32 * n)
        assembled = Signal(32 * n)
        a_cnt = Signal(range(acc_beats))
        a_last = Signal()
        pop = self.fifo_take
        m.d.comb += [
            assembled.eq(asm), assembled.word_select(a_cnt, 64).eq(self.fifo_data),
            a_last.eq(a_cnt == Mux(acc, acc_beats - 1, spm_beats - 1)),
            pop.eq(self.run & ~walked & self.fifo_ready & (~a_last | ~wr_valid | wr_ready)),
            self.read_error.eq(pop & self.fifo_err),
            walker.advance.eq(pop & a_last),
        ]
        with m.If(wr_valid & wr_ready):
            m.d.sync += wr_valid.eq(0)
        with m.If(pop):
            with m.If(a_last):
                m.d.sync += a_cnt.eq(0)
                with m.If(~self.fifo_err & ~self.rd_err):
                    m.d.sync += [wr_valid.eq(1), wr_data.eq(assembled), wr_addr.eq(walker.addr)]
                with m.If(walker.last):
                    m.d.sync += walked.eq(1)
            with m.Else():
                m.d.sync += [a_cnt.eq(a_cnt + 1), asm.eq(assembled)]
        with m.If(self.start):
            m.d.sync += [walked.eq(0), a_cnt.eq(0)]
        m.d.comb += self.done.eq(walked & ~wr_valid)
        return m
