"""Per-tile reset sequencing: drain a tile's bus masters, then reset its units without touching the other tile."""

from __future__ import annotations

from amaranth import Module
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

__all__ = ["TileReset"]


class TileReset(wiring.Component):
    """Resets one tile's DMA and tile core (and, for the host's reset, its command processor) safely.

    An AXI master must not be reset while a burst of its is open at the memory: the memory would
    wait for its beats for ever.  So a reset first drains: the DMA aborts (``dma_abort``: it issues no
    new burst and finishes the open ones with null-strobe write beats and dropped read beats) and,
    for the host's reset, the command processor starts no fetch or completion write
    (``cp_quiesce``).  Once the masters are quiet, one cycle of reset follows.

    * ``host_reset`` (a pulse, QUEUE.RESET written): drain the DMA and the command processor, then
      pulse ``reset_units`` and ``reset_cp`` together.
    * ``abort_req`` (a level, from the command processor's watchdog): drain the DMA, then pulse
      ``reset_units`` and ``abort_done``.  A host reset during the drain turns it into a host reset.

    Device memory, the tile core's scratchpad and accumulator contents and everything of the other
    tile are outside this reset.
    """

    def __init__(self):
        super().__init__({
            "host_reset": In(1), "abort_req": In(1), "cp_quiet": In(1), "dma_quiet": In(1),
            "cp_quiesce": Out(1), "dma_abort": Out(1),
            "reset_units": Out(1), "reset_cp": Out(1), "abort_done": Out(1), "busy": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        with m.FSM(name="tile_reset") as fsm:
            with m.State("IDLE"):
                with m.If(self.host_reset):
                    m.next = "RESET_DRAIN"
                with m.Elif(self.abort_req):
                    m.next = "ABORT_DRAIN"
            with m.State("RESET_DRAIN"):
                m.d.comb += [self.cp_quiesce.eq(1), self.dma_abort.eq(1)]
                with m.If(self.cp_quiet & self.dma_quiet):
                    m.d.comb += [self.reset_units.eq(1), self.reset_cp.eq(1)]
                    m.next = "IDLE"
            with m.State("ABORT_DRAIN"):
                m.d.comb += self.dma_abort.eq(1)
                with m.If(self.host_reset):
                    m.next = "RESET_DRAIN"
                with m.Elif(self.dma_quiet):
                    m.d.comb += [self.reset_units.eq(1), self.abort_done.eq(1)]
                    m.next = "IDLE"
        m.d.comb += self.busy.eq(~fsm.ongoing("IDLE"))
        return m
