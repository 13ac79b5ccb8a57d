"""The queue's watchdog: aborts the units when a command in flight makes no progress for too long."""

from __future__ import annotations

from amaranth import Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from ...spec import ErrorCode
from .hazards import DMA_SLOTS, TILE_SLOTS
from .slots import ErrorReportSignature

__all__ = ["Watchdog"]


class Watchdog(wiring.Component):
    """Counts the cycles in which a command is in flight in the tile core or the DMA and nothing moves.

    A cycle counts while a unit holds a command (``tile_count``/``dma_count``), ``progress`` is low and no
    unit completion is taken (``tile_pop``/``dma_pop``); any of those clears the count, and so does
    ``budget`` 0 (off).  When the count reaches ``budget``, ``error`` reports ``TIMEOUT`` at the oldest
    command in flight (the one furthest behind ``head`` in ring order, of ``tile_oldest``/``dma_oldest``),
    and ``aborting`` rises: ``abort_req`` is high until ``abort_done`` (the units were drained and reset),
    then ``flushing`` is high until the completion writer (``writer_idle``) has completed every command
    still in flight with TIMEOUT.
    """

    def __init__(self):
        super().__init__({
            "budget": In(32), "progress": In(1), "tile_pop": In(1), "dma_pop": In(1),
            "tile_count": In(range(TILE_SLOTS + 1)), "dma_count": In(range(DMA_SLOTS + 1)),
            "head": In(16), "mask": In(16), "tile_oldest": In(16), "dma_oldest": In(16),
            "abort_done": In(1), "writer_idle": In(1),
            "aborting": Out(1), "flushing": Out(1), "abort_req": Out(1), "error": Out(ErrorReportSignature()),
        })

    def elaborate(self, platform):
        m = Module()
        aborting, flushing = self.aborting, self.flushing
        watched = Signal()
        idle_cycles = Signal(32)
        fire = Signal()
        m.d.comb += [
            watched.eq((self.tile_count != 0) | (self.dma_count != 0)),
            fire.eq(watched & (self.budget != 0) & (idle_cycles >= self.budget) & ~aborting),
            self.abort_req.eq(aborting & ~flushing),
        ]
        with m.If(~watched | self.progress | self.tile_pop | self.dma_pop | (self.budget == 0) | aborting):
            m.d.sync += idle_cycles.eq(0)
        with m.Else():
            m.d.sync += idle_cycles.eq(idle_cycles + 1)
        t_age = (self.head - self.tile_oldest) & self.mask
        d_age = (self.head - self.dma_oldest) & self.mask
        oldest = Mux((self.dma_count == 0) | ((self.tile_count != 0) & (t_age > d_age)),
                     self.tile_oldest, self.dma_oldest)
        m.d.comb += [self.error.valid.eq(fire), self.error.code.eq(ErrorCode.TIMEOUT), self.error.index.eq(oldest)]
        with m.If(fire):
            m.d.sync += aborting.eq(1)
        with m.If(self.abort_done):
            m.d.sync += flushing.eq(1)
        with m.If(flushing & ~watched & self.writer_idle):
            m.d.sync += [aborting.eq(0), flushing.eq(0)]
        return m
