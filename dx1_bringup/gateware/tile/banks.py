"""The two weight banks of the systolic array, as the loader and the streamer hand them to each other."""

from __future__ import annotations

from amaranth import Module, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

__all__ = ["Bank", "WeightBanks"]


class Bank:
    """States of one weight bank; each moves EMPTY -> LOADING -> FULL -> STREAMING -> DRAINING."""

    EMPTY, LOADING, FULL, STREAMING, DRAINING = range(5)


class WeightBanks(wiring.Component):
    """Tracks which bank may be loaded (``empty``) and which streamed (``full``), one bit a bank.

    Events name their bank and take effect on the next cycle: ``load_start``
    (LOADING), ``loaded`` (FULL), ``stream_start`` (STREAMING) and
    ``stream_end`` (DRAINING).  A draining bank becomes EMPTY after ``2 * size``
    cycles, once its last activations have left the array.  Events on one
    bank in one cycle apply in that order, the last winning.

    Parameters
    ----------
    size:
        The array's size.
    """

    def __init__(self, size: int):
        self.size = size
        super().__init__({
            "load_start": In(1), "load_bank": In(1),
            "loaded": In(1), "loaded_bank": In(1),
            "stream_start": In(1), "stream_end": In(1), "stream_bank": In(1),
            "empty": Out(2),
            "full": Out(2),
        })

    def elaborate(self, platform):
        m = Module()
        n = self.size
        state = [Signal(range(5), name=f"bank{b}_state") for b in range(2)]
        drain = [Signal(range(2 * n + 1), name=f"bank{b}_drain") for b in range(2)]
        for b in range(2):
            m.d.comb += [self.empty[b].eq(state[b] == Bank.EMPTY), self.full[b].eq(state[b] == Bank.FULL)]
            with m.If((state[b] == Bank.DRAINING) & (drain[b] == 0)):
                m.d.sync += state[b].eq(Bank.EMPTY)
            with m.Elif(state[b] == Bank.DRAINING):
                m.d.sync += drain[b].eq(drain[b] - 1)

        def set_bank(event, bank, to):
            for b in range(2):
                with m.If(event & (bank == b)):
                    m.d.sync += state[b].eq(to)
                    if to == Bank.DRAINING:
                        # The bank's last activations need 2n-1 cycles to leave the array.
                        m.d.sync += drain[b].eq(2 * n)

        set_bank(self.load_start, self.load_bank, Bank.LOADING)
        set_bank(self.loaded, self.loaded_bank, Bank.FULL)
        set_bank(self.stream_start, self.stream_bank, Bank.STREAMING)
        set_bank(self.stream_end, self.stream_bank, Bank.DRAINING)
        return m
