"""Dependency tracking: the commands in flight in each unit, and the hazards a new command has against them."""

from __future__ import annotations

from amaranth import Array, Const, Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from .slots import FOOTPRINT_LAYOUT, SLOT_LAYOUT, conflict

__all__ = ["InFlightSlots", "HazardTracker", "TILE_SLOTS", "DMA_SLOTS"]

#: Compute commands the processor tracks while the tile core runs them.
TILE_SLOTS = 4
#: DMA commands the processor tracks while the DMA runs them.
DMA_SLOTS = 2


class InFlightSlots(wiring.Component):
    """The commands one unit runs, oldest first: a FIFO of :data:`~.slots.SLOT_LAYOUT` entries.

    A unit completes its commands in order, so ``push`` appends ``slot`` (at dispatch) and ``pop`` drops
    ``oldest`` (when its completion is taken); ``count`` entries are held.  ``conflict`` is high (combinationally)
    while ``footprint`` conflicts with the footprint of any entry held.

    Parameters
    ----------
    depth:
        How many commands the unit may hold.
    """

    def __init__(self, depth: int):
        if not isinstance(depth, int) or isinstance(depth, bool) or depth < 1:
            raise ValueError(f"In-flight slot depth must be a positive integer, not {depth!r}")
        self.depth = depth
        super().__init__({
            "push": In(1), "slot": In(SLOT_LAYOUT), "pop": In(1),
            "count": Out(range(depth + 1)), "oldest": Out(SLOT_LAYOUT),
            "footprint": In(FOOTPRINT_LAYOUT), "conflict": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        depth = self.depth
        slots = Array(Signal(SLOT_LAYOUT, name=f"slot{i}") for i in range(depth))
        valid = Array(Signal(name=f"valid{i}") for i in range(depth))
        wr = Signal(range(depth))
        rd = Signal(range(depth))
        with m.If(self.push):
            m.d.sync += [slots[wr].eq(self.slot), valid[wr].eq(1), wr.eq(Mux(wr == depth - 1, 0, wr + 1))]
        with m.If(self.pop):
            m.d.sync += [valid[rd].eq(0), rd.eq(Mux(rd == depth - 1, 0, rd + 1))]
        m.d.sync += self.count.eq(self.count + self.push - self.pop)
        m.d.comb += self.oldest.eq(slots[rd])

        result = Const(0)
        for i in range(depth):
            result = result | (valid[i] & conflict(self.footprint, slots[i].footprint))
        m.d.comb += self.conflict.eq(result)
        return m


class HazardTracker(wiring.Component):
    """The tile core's and the DMA's commands in flight, and the decode step that checks a new command against
    the other unit's.

    ``tile_hazard`` is high when the command with ``footprint`` conflicts with a command in flight in the DMA,
    ``dma_hazard`` when it conflicts with one in the tile core (each unit runs its own commands in order).
    Both are registered: slots only gain a command when the current one is dispatched, so a hazard a cycle
    old can only be one that has since cleared, and the command then waits a cycle more.
    """

    def __init__(self):
        super().__init__({
            "footprint": In(FOOTPRINT_LAYOUT), "slot": In(SLOT_LAYOUT),
            "tile_push": In(1), "tile_pop": In(1), "dma_push": In(1), "dma_pop": In(1),
            "tile_count": Out(range(TILE_SLOTS + 1)), "dma_count": Out(range(DMA_SLOTS + 1)),
            "tile_oldest": Out(SLOT_LAYOUT), "dma_oldest": Out(SLOT_LAYOUT),
            "tile_hazard": Out(1), "dma_hazard": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        m.submodules.tile = tile = InFlightSlots(TILE_SLOTS)
        m.submodules.dma = dma = InFlightSlots(DMA_SLOTS)
        m.d.comb += [
            tile.push.eq(self.tile_push), tile.pop.eq(self.tile_pop), tile.slot.eq(self.slot),
            dma.push.eq(self.dma_push), dma.pop.eq(self.dma_pop), dma.slot.eq(self.slot),
            tile.footprint.eq(self.footprint), dma.footprint.eq(self.footprint),
            self.tile_count.eq(tile.count), self.dma_count.eq(dma.count),
            self.tile_oldest.eq(tile.oldest), self.dma_oldest.eq(dma.oldest),
        ]
        m.d.sync += [self.tile_hazard.eq(dma.conflict), self.dma_hazard.eq(tile.conflict)]
        return m
