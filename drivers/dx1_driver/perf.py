"""A tile's PERF block: its performance counters, read as one typed snapshot."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from . import regs
from .tile_block import TileBlock

__all__ = ["Perf", "PerfCounters"]

#: The counters' width in bits: every PERF counter is a 32-bit wrapping register but MACS (MACS_LO, MACS_HI).
_WIDTH = 32
_MACS_WIDTH = 64


@dataclass(frozen=True)
class PerfCounters:
    """The PERF counters of one tile at one moment (raw, wrapping values; see the spec's PERF block).

    Each attribute is the register of the same name in lower case; ``macs`` joins MACS_LO and MACS_HI.
    """

    cycles: int
    busy_load: int
    busy_compute: int
    busy_store: int
    macs: int
    stall_dep: int
    stall_mem: int
    bytes_read: int
    bytes_written: int
    busy_vector: int
    table_hits: int
    table_underflows: int
    table_overflows: int

    def since(self, earlier: PerfCounters) -> PerfCounters:
        """What each counter counted from ``earlier`` to this snapshot, modulo the counter's width."""
        return PerfCounters(**{
            f.name: (getattr(self, f.name) - getattr(earlier, f.name)) % (1 << _width(f.name))
            for f in dataclasses.fields(self)})

    def as_dict(self) -> dict[str, int]:
        """The counters by register name (``"MACS"`` for the 64-bit pair), as reports print them."""
        return {name.upper(): value for name, value in dataclasses.asdict(self).items()}


def _width(name: str) -> int:
    return _MACS_WIDTH if name == "macs" else _WIDTH


#: Every register the snapshot reads, in address order: one block read covers them.
_FIRST, _LAST = regs.Perf.CYCLES, regs.Perf.TABLE_OVERFLOWS


class Perf(TileBlock):
    """The PERF block of one tile: its counters."""

    def read(self) -> PerfCounters:
        """Every counter, read in one burst of consecutive registers in address order.

        MACS_LO comes before MACS_HI, and reading MACS_LO latches MACS_HI, so the two
        words of ``macs`` always belong together.
        """
        words = self.transport.read_u32s(self.base + _FIRST, (_LAST - _FIRST) // 4 + 1)

        def reg(offset: int) -> int:
            return words[(offset - _FIRST) // 4]

        p = regs.Perf
        return PerfCounters(
            cycles=reg(p.CYCLES), busy_load=reg(p.BUSY_LOAD), busy_compute=reg(p.BUSY_COMPUTE),
            busy_store=reg(p.BUSY_STORE), macs=reg(p.MACS_LO) | reg(p.MACS_HI) << 32, stall_dep=reg(p.STALL_DEP),
            stall_mem=reg(p.STALL_MEM), bytes_read=reg(p.BYTES_READ), bytes_written=reg(p.BYTES_WRITTEN),
            busy_vector=reg(p.BUSY_VECTOR), table_hits=reg(p.TABLE_HITS), table_underflows=reg(p.TABLE_UNDERFLOWS),
            table_overflows=reg(p.TABLE_OVERFLOWS))

    def clear(self) -> None:
        """Set every counter of the block to 0."""
        self._set(regs.Perf.CONTROL, regs.set_field(0, regs.Perf.CONTROL_CLEAR, 1))
