"""The tile core's result writer: the array's output rows read-modify-written into the accumulator buffer."""

from __future__ import annotations

from amaranth import Cat, Module, Mux, Signal, unsigned
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out
from amaranth.utils import exact_log2

from ...spec import ErrorCode, Opcode, TileConfig
from .completions import COMPLETION
from .streamer import row_ctl_layout

__all__ = ["ResultWriter"]


class ResultWriter(wiring.Component):
    """Adds each output row of the array to its accumulator row (or replaces it), and completes the GEMM.

    For every ``out_valid`` row the accumulator row its ``out_ctl`` names is
    read at once (``acc_addr``; ``acc_data`` a cycle later, from a read port
    transparent to the write port, so back-to-back rows to one address add
    up), and the next cycle (``writing``) the sum, or the row alone without
    ``accumulate``, is written (``w_*``), 32 bits a lane, wrapping.  The job's
    ``last`` row also completes its GEMM on ``done``.

    Parameters
    ----------
    config:
        The tile's sizes.
    """

    def __init__(self, config: TileConfig):
        self.config = config
        n, acc_bits = config.array, exact_log2(config.acc_rows)
        super().__init__({
            "out": In(data.ArrayLayout(unsigned(32), n)), "out_valid": In(1), "out_ctl": In(row_ctl_layout(config)),
            "acc_addr": Out(acc_bits), "acc_data": In(32 * n),
            "writing": Out(1), "w_addr": Out(acc_bits), "w_data": Out(32 * n),
            "done": Out(COMPLETION),
        })

    def elaborate(self, platform):
        m = Module()
        n = self.config.array
        layout = row_ctl_layout(self.config)
        m.d.comb += self.acc_addr.eq(self.out_ctl.acc_addr)
        ctl = Signal(layout)
        psum = Signal.like(self.out)
        m.d.sync += [self.writing.eq(self.out_valid), ctl.eq(self.out_ctl), psum.eq(self.out)]
        old = data.View(data.ArrayLayout(unsigned(32), n), self.acc_data)
        summed = Signal(32 * n)
        m.d.comb += summed.eq(Cat(
            Mux(ctl.accumulate, old[lane] + psum[lane], psum[lane])[:32] for lane in range(n)))
        with m.If(self.writing):
            m.d.comb += [self.w_addr.eq(ctl.acc_addr), self.w_data.eq(summed)]
            with m.If(ctl.last):
                m.d.comb += [self.done.valid.eq(1), self.done.tag.eq(ctl.tag), self.done.status.eq(ErrorCode.OK),
                             self.done.opcode.eq(Opcode.GEMM)]
        return m
