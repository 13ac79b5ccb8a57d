"""The vector unit's transpose buffer: ``array`` x ``array`` int8 blocks in by rows, out by columns."""

from __future__ import annotations

from amaranth import Module, Mux, Signal, unsigned
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

__all__ = ["TransposeBuffer"]


class TransposeBuffer(wiring.Component):
    """Transposes ``array`` x ``array`` int8 blocks (the TRANSPOSE command), double-buffered.

    ``array`` loads (``load`` with ``row``: source row i on the i-th) fill a bank; then its ``array`` reads
    give the block's transposed rows in order: while ``col_valid``, ``col`` shows output row k (lane j
    ``src[j][k]``) and ``read`` takes it, showing row k + 1 the next cycle (the k-th read takes output row k).
    There are two banks: the next block fills while this one drains, so loads and reads of back-to-back blocks
    overlap, one of each a cycle.  ``load_ready`` is low only while both banks hold a block not yet wholly
    read; a ``load`` then, or a ``read`` without ``col_valid``, is ignored.  The spec reads each block whole
    before writing it, one block after the other: a sequencer that overlaps block b + 1's loads with block b's
    writes must first check that block b's destination rows are not among block b + 1's source rows.

    A bank is a register a source row; each read shifts every row one lane down, so output row k is always the
    rows' lane 0 and no column multiplexer is needed.
    """

    def __init__(self, array: int):
        if not isinstance(array, int) or isinstance(array, bool) or not 1 <= array <= 16:
            raise ValueError(f"Transpose buffer lanes must be an integer from 1 to 16, not {array!r}")
        self.array = array
        rows = data.ArrayLayout(unsigned(8), array)
        super().__init__({
            "load": In(1),
            "row": In(rows),
            "load_ready": Out(1),
            "read": In(1),
            "col": Out(rows),
            "col_valid": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        n = self.array
        full = Signal(2, name="full")  # bank b holds a whole block not yet wholly read
        fill = Signal(name="fill")      # the bank loads go to
        drain = Signal(name="drain")    # the bank reads come from
        loaded = Signal(range(n), name="loaded")
        taken = Signal(range(n), name="taken")
        banks = [[Signal(8 * n, name=f"bank{b}_row{i}", reset_less=True) for i in range(n)] for b in range(2)]

        m.d.comb += [
            self.load_ready.eq(~Mux(fill, full[1], full[0])),
            self.col_valid.eq(Mux(drain, full[1], full[0])),
        ]
        for j in range(n):
            m.d.comb += self.col[j].eq(Mux(drain, banks[1][j][:8], banks[0][j][:8]))

        load = Signal(name="do_load")
        read = Signal(name="do_read")
        m.d.comb += [load.eq(self.load & self.load_ready), read.eq(self.read & self.col_valid)]
        set_full = Signal(2, name="set_full")
        clear_full = Signal(2, name="clear_full")
        with m.If(load):
            m.d.sync += loaded.eq(Mux(loaded == n - 1, 0, loaded + 1))
            with m.If(loaded == n - 1):
                m.d.comb += set_full.eq(Mux(fill, 0b10, 0b01))
                m.d.sync += fill.eq(~fill)
        with m.If(read):
            m.d.sync += taken.eq(Mux(taken == n - 1, 0, taken + 1))
            with m.If(taken == n - 1):
                m.d.comb += clear_full.eq(Mux(drain, 0b10, 0b01))
                m.d.sync += drain.eq(~drain)
        m.d.sync += full.eq((full & ~clear_full) | set_full)

        for b, bank in enumerate(banks):
            for i, reg in enumerate(bank):
                with m.If(load & (fill == b) & (loaded == i)):
                    m.d.sync += reg.eq(self.row.as_value())
                with m.Elif(read & (drain == b)):
                    m.d.sync += reg.eq(reg >> 8)
        return m
