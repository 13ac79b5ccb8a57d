"""Dispatch: sends a decoded command to its unit once nothing it depends on is in flight."""

from __future__ import annotations

from amaranth import Module
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from ...spec import ErrorCode, Opcode
from .decode import Route
from .hazards import DMA_SLOTS, TILE_SLOTS

__all__ = ["Dispatcher"]


class Dispatcher(wiring.Component):
    """Decides, each cycle, whether the decoded command is dispatched (``dispatched``), and where.

    Nothing is dispatched while ``halted`` or ``aborting``.  By ``route``:

    * tile core / DMA: when the unit has a free slot (``tile_count``/``dma_count``) and no hazard against
      the other unit's commands in flight, ``tile_valid``/``dma_valid`` offers the command; its ready
      dispatches it and pushes its slot (``tile_push``/``dma_push``).
    * local (``local_push``, once the local completion is free, ``~local_valid``): a refused command at once;
      NOP at once; FENCE once nothing is ``in_flight``; SIGNAL once nothing is in flight, by
      ``sem_signal``; WAIT by ``sem_wait``; either of those when the semaphore request is ``sem_done``.

    ``stall``: a decoded command waits (the PERF block's STALL_DEP).
    """

    def __init__(self):
        super().__init__({
            "decoded": In(1), "halted": In(1), "aborting": In(1),
            "route": In(2), "status": In(8), "opcode": In(8),
            "tile_count": In(range(TILE_SLOTS + 1)), "dma_count": In(range(DMA_SLOTS + 1)),
            "tile_hazard": In(1), "dma_hazard": In(1), "local_valid": In(1), "in_flight": In(1),
            "tile_valid": Out(1), "tile_ready": In(1), "dma_valid": Out(1), "dma_ready": In(1),
            "sem_signal": Out(1), "sem_wait": Out(1), "sem_done": In(1),
            "tile_push": Out(1), "dma_push": Out(1), "local_push": Out(1), "dispatched": Out(1), "stall": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        opcode, dispatched = self.opcode, self.dispatched
        with m.If(self.decoded & ~self.halted & ~self.aborting):
            with m.Switch(self.route):
                with m.Case(Route.TILE):
                    with m.If((self.tile_count < TILE_SLOTS) & ~self.tile_hazard):
                        m.d.comb += self.tile_valid.eq(1)
                        m.d.comb += [self.tile_push.eq(self.tile_ready), dispatched.eq(self.tile_ready)]
                with m.Case(Route.DMA):
                    with m.If((self.dma_count < DMA_SLOTS) & ~self.dma_hazard):
                        m.d.comb += self.dma_valid.eq(1)
                        m.d.comb += [self.dma_push.eq(self.dma_ready), dispatched.eq(self.dma_ready)]
                with m.Case(Route.LOCAL):
                    with m.If(~self.local_valid):
                        with m.If(self.status != ErrorCode.OK):
                            m.d.comb += dispatched.eq(1)
                        with m.Elif((opcode == Opcode.FENCE) | (opcode == Opcode.NOP)):
                            m.d.comb += dispatched.eq((opcode == Opcode.NOP) | ~self.in_flight)
                        with m.Elif(opcode == Opcode.SIGNAL):
                            with m.If(~self.in_flight):
                                m.d.comb += [self.sem_signal.eq(1), dispatched.eq(self.sem_done)]
                        with m.Else():  # WAIT
                            m.d.comb += [self.sem_wait.eq(1), dispatched.eq(self.sem_done)]
        m.d.comb += [self.local_push.eq(dispatched & (self.route == Route.LOCAL)),
                     self.stall.eq(self.decoded & ~self.halted & ~self.aborting & ~dispatched)]
        return m
