"""One tile's PERF counters: cycles, busy and stall counts, and the units' own counters since the last clear."""

from __future__ import annotations

from types import SimpleNamespace

from amaranth import Module, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

__all__ = ["PerfCounters", "COUNTED", "KEPT"]

#: The handshake bits of the DMA's memory port that the counters watch.
_WATCHED = ("arvalid", "arready", "rvalid", "rready", "rlast", "awvalid", "awready", "wvalid", "wready",
            "bvalid", "bready")

#: The counters kept here, each counting the cycles in which its condition held.
COUNTED = ("CYCLES", "BUSY_LOAD", "BUSY_STORE", "STALL_DEP", "STALL_MEM")
#: The 32-bit counters the units keep, reported since the last clear.
KEPT = ("BUSY_COMPUTE", "BYTES_READ", "BYTES_WRITTEN", "BUSY_VECTOR", "TABLE_HITS", "TABLE_UNDERFLOWS",
        "TABLE_OVERFLOWS")


class PerfCounters(wiring.Component):
    """The PERF block of one tile.

    Counted here, each cycle (32 bits, wrapping): ``CYCLES``; ``BUSY_LOAD`` while the DMA has a read burst
    open or offered; ``BUSY_STORE`` while it has a write burst open or offered or a write beat offered;
    ``STALL_DEP`` while ``waiting_dep`` (a decoded command waits); ``STALL_MEM`` while the DMA waits for the
    memory (a read burst open and no beat, or a write beat or read address not taken).  The ``dma_*`` inputs
    are the handshake bits of the DMA's memory port.

    Kept by the units (``busy_compute``, ``bytes_read``, ``bytes_written``, ``macs``, and the vector unit's
    ``busy_vector``, ``table_hits``, ``table_underflows``, ``table_overflows``) and reported relative
    to their value at the last ``clear``; ``reset_units`` (the units' counters restart from 0) resets the
    reference too.  Reading ``MACS_LO`` (``macs_lo_read``) latches the high word into ``macs_hi``.
    """

    def __init__(self):
        super().__init__({
            "clear": In(1), "reset_units": In(1), "waiting_dep": In(1),
            **{f"dma_{name}": In(1) for name in _WATCHED},
            **{f"{name.lower()}_source": In(32) for name in KEPT},
            "macs_source": In(48), "macs_lo_read": In(1),
            **{name.lower(): Out(32) for name in COUNTED + KEPT},
            "macs_lo": Out(32), "macs_hi": Out(32),
        })

    def elaborate(self, platform):
        m = Module()
        ax = SimpleNamespace(**{name: getattr(self, f"dma_{name}") for name in _WATCHED})
        reads_open = Signal(9)
        writes_open = Signal(9)
        m.d.sync += [
            reads_open.eq(reads_open + (ax.arvalid & ax.arready) - (ax.rvalid & ax.rready & ax.rlast)),
            writes_open.eq(writes_open + (ax.awvalid & ax.awready) - (ax.bvalid & ax.bready)),
        ]
        reading = (reads_open != 0) | ax.arvalid
        writing = (writes_open != 0) | ax.awvalid | ax.wvalid
        waiting = ((reads_open != 0) & ~ax.rvalid) | (ax.wvalid & ~ax.wready) | (ax.arvalid & ~ax.arready)
        increments = {"CYCLES": 1, "BUSY_LOAD": reading, "BUSY_STORE": writing, "STALL_DEP": self.waiting_dep,
                      "STALL_MEM": waiting}
        for name in COUNTED:
            count = getattr(self, name.lower())
            m.d.sync += count.eq(count + increments[name])
            with m.If(self.clear):
                m.d.sync += count.eq(0)
        for name in (k.lower() for k in KEPT):
            source = getattr(self, f"{name}_source")
            base = Signal(32, name=f"{name}_base")
            with m.If(self.clear):
                m.d.sync += base.eq(source)
            with m.If(self.reset_units):
                m.d.sync += base.eq(0)
            m.d.comb += getattr(self, name).eq(source - base)
        macs_base = Signal(48)
        macs = Signal(48)
        m.d.comb += macs.eq(self.macs_source - macs_base)
        with m.If(self.clear):
            m.d.sync += [macs_base.eq(self.macs_source), self.macs_hi.eq(0)]
        with m.If(self.reset_units):
            m.d.sync += macs_base.eq(0)
        with m.If(self.macs_lo_read):
            m.d.sync += self.macs_hi.eq(macs[32:])
        m.d.comb += self.macs_lo.eq(macs[:32])
        return m
