"""The local row addresses of a LOAD or STORE, in command order."""

from __future__ import annotations

from amaranth import Module, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from ..tile import ADDR_BITS

__all__ = ["RowWalker"]


class RowWalker(wiring.Component):
    """Walks ``local_addr + r*row_stride + c*col_stride`` for r < ``rows``, c < ``cols``, c fastest.

    ``start`` loads ``local_addr`` (r = c = 0); ``advance`` steps to the next address.  ``addr`` is the
    current one, and ``last`` is high while it is the last of the move.
    """

    def __init__(self):
        super().__init__({
            "start": In(1), "local_addr": In(ADDR_BITS), "advance": In(1),
            "rows": In(16), "cols": In(16), "row_stride": In(16), "col_stride": In(16),
            "addr": Out(ADDR_BITS), "last": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        base = Signal(ADDR_BITS)
        r = Signal(16)
        c = Signal(16)
        m.d.comb += self.last.eq((r + 1 == self.rows) & (c + 1 == self.cols))
        with m.If(self.advance):
            with m.If(c + 1 == self.cols):
                m.d.sync += [c.eq(0), r.eq(r + 1), base.eq(base + self.row_stride),
                             self.addr.eq(base + self.row_stride)]
            with m.Else():
                m.d.sync += [c.eq(c + 1), self.addr.eq(self.addr + self.col_stride)]
        with m.If(self.start):
            m.d.sync += [base.eq(self.local_addr), self.addr.eq(self.local_addr), r.eq(0), c.eq(0)]
        return m
