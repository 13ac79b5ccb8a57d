"""The TRANSPOSE command's sequencer: per block, n scratchpad rows into the transpose buffer, n rows back out."""

from __future__ import annotations

from amaranth import Cat, Module, Signal
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from ...spec import COMMAND_BITS, Opcode
from ..layouts import command_layout
from ..pipeline import delay_valid_ctl

__all__ = ["TransposeSequencer"]


class TransposeSequencer(wiring.Component):
    """Runs one TRANSPOSE ``command`` from ``start`` until ``done``, block after block.

    For block b the rows ``src_addr + b*src_stride + i`` (i < n) are read on a scratchpad read port
    (``spm_read``, ``spm_addr``) and, a cycle later as they arrive, loaded into the transpose buffer
    (``load``).  Once the block's last row is in, the buffer's columns are asked for one a cycle (``read``);
    ``read_latency`` cycles after each, the column is written to row ``dst_addr + b*dst_stride + j``
    (``w_en``, ``w_addr``; the data is the buffer's).  The next block is read only after the last write, so
    a block's rows see the writes of the blocks before it.  ``done`` comes with the command's last write;
    ``busy`` is high from the cycle after ``start`` until then.

    Parameters
    ----------
    array:
        Rows of a block (the array size).
    read_latency:
        Cycles from the buffer's ``read`` to its column.
    """

    def __init__(self, array: int, read_latency: int):
        self.array = array
        self.read_latency = read_latency
        super().__init__({
            "start": In(1), "command": In(COMMAND_BITS), "busy": Out(1), "done": Out(1),
            "spm_read": Out(1), "spm_addr": Out(16), "load": Out(1), "read": Out(1),
            "w_en": Out(1), "w_addr": Out(16),
        })

    def elaborate(self, platform):
        m = Module()
        n = self.array
        t = data.View(command_layout(Opcode.TRANSPOSE), self.command)
        src, dst, src_stride, dst_stride, left = (Signal(16, name=name) for name in (
            "src", "dst", "src_stride", "dst_stride", "left"))
        index = Signal(range(n))
        reading, writing = Signal(), Signal()  # the block's rows are being read / its columns asked for
        m.d.sync += self.load.eq(self.spm_read)
        m.d.comb += [self.spm_read.eq(reading), self.spm_addr.eq(src + index), self.read.eq(writing)]
        w_valid, w_ctl = delay_valid_ctl(m, self.read, Cat(index, index == n - 1), self.read_latency, "transpose")
        last_write = Signal()
        m.d.comb += [
            self.w_en.eq(w_valid), self.w_addr.eq(dst + w_ctl[:len(index)]),
            last_write.eq(w_valid & w_ctl[len(index)]), self.done.eq(last_write & (left == 1)),
        ]
        with m.If(self.start):
            m.d.sync += [self.busy.eq(1), reading.eq(1), writing.eq(0), index.eq(0), left.eq(t.blocks),
                         src.eq(t.src_addr), dst.eq(t.dst_addr), src_stride.eq(t.src_stride),
                         dst_stride.eq(t.dst_stride)]
        with m.Elif(reading):
            m.d.sync += index.eq(index + 1)
            with m.If(index == n - 1):
                m.d.sync += [reading.eq(0), index.eq(0)]
        with m.Elif(self.load & ~self.spm_read & ~writing):  # the block's last row arrives: ask for columns next
            m.d.sync += writing.eq(1)
        with m.Elif(writing):
            m.d.sync += index.eq(index + 1)
            with m.If(index == n - 1):
                m.d.sync += [writing.eq(0), index.eq(0)]
        with m.If(last_write):
            m.d.sync += [left.eq(left - 1), src.eq(src + src_stride), dst.eq(dst + dst_stride)]
            with m.If(left == 1):
                m.d.sync += self.busy.eq(0)
            with m.Else():
                m.d.sync += reading.eq(1)
        return m
