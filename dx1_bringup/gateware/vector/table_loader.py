"""The TABLE command's loader: scratchpad rows into the lookup table, one int16 entry a cycle."""

from __future__ import annotations

from amaranth import Module, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from ...spec import TABLE_ENTRIES

__all__ = ["TableLoader"]


class TableLoader(wiring.Component):
    """Loads the lookup table from scratchpad row ``src_addr`` on, from ``start`` until ``done``.

    Entry j (int16, little-endian) is lanes ``2*(j % (n/2))`` and the next of row ``src_addr + j // (n/2)``
    (the spec's TABLE).  The loader reads the rows on a scratchpad read port (``spm_addr`` while ``spm_use``,
    ``spm_data`` a cycle later), each as its last entry is written, so after one cycle of priming an entry
    goes to the table port (``table_we``, ``table_index``, ``table_data``) every cycle; ``done`` comes with
    the last.  ``busy`` is high from the cycle after ``start`` until ``done``.

    Parameters
    ----------
    array:
        Lanes of a scratchpad row (an even number).
    """

    def __init__(self, array: int):
        self.array = array
        super().__init__({
            "start": In(1), "src_addr": In(16), "busy": Out(1), "done": Out(1),
            "spm_use": Out(1), "spm_addr": Out(16), "spm_data": In(8 * array),
            "table_we": Out(1), "table_index": Out(range(TABLE_ENTRIES)), "table_data": Out(16),
        })

    def elaborate(self, platform):
        m = Module()
        per_row = self.array // 2
        addr = Signal(16)
        primed = Signal()
        entry = Signal(range(per_row))
        advance = Signal()
        m.d.comb += [
            self.spm_use.eq(self.busy),
            advance.eq(primed & (entry == per_row - 1)),
            self.spm_addr.eq(addr + advance),
            self.table_we.eq(primed),
            self.done.eq(primed & (self.table_index == TABLE_ENTRIES - 1)),
        ]
        with m.Switch(entry):
            for k in range(per_row):
                with m.Case(k):
                    m.d.comb += self.table_data.eq(self.spm_data[16 * k:16 * k + 16])
        with m.If(self.start):
            m.d.sync += [self.busy.eq(1), primed.eq(0), addr.eq(self.src_addr), entry.eq(0),
                         self.table_index.eq(0)]
        with m.Elif(self.busy):
            m.d.sync += primed.eq(1)
            with m.If(primed):
                m.d.sync += [self.table_index.eq(self.table_index + 1), entry.eq(entry + 1)]
                with m.If(advance):
                    m.d.sync += [addr.eq(addr + 1), entry.eq(0)]
            with m.If(self.done):
                m.d.sync += [self.busy.eq(0), primed.eq(0)]
        return m
