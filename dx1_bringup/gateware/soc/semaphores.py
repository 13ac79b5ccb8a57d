"""The SoC's semaphores: one SIGNAL or WAIT a cycle from the tiles' command processors, lowest tile first."""

from __future__ import annotations

from amaranth import Module, Signal, signed, unsigned
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

__all__ = ["SemaphoreArbiter"]


class SemaphoreArbiter(wiring.Component):
    """Grants one semaphore request a cycle and computes the semaphore's new value.

    Tile ``t`` asks with ``valid{t}``, ``index{t}`` and ``delta{t}`` (a signed amount to add); the lowest
    tile asking gets ``grant{t}``, and ``set[i]`` with ``set_value[i]`` (the low ``value_bits`` bits of
    ``values[i] + delta``) writes semaphore ``i`` (``set_value`` is only meaningful where ``set`` is high).

    Parameters
    ----------
    tiles, semaphores:
        How many command processors ask, and how many semaphores there are.
    value_bits:
        Width of a semaphore's value.
    """

    def __init__(self, tiles: int, semaphores: int, value_bits: int):
        self.tiles, self.semaphores, self.value_bits = tiles, semaphores, value_bits
        index_bits = max(1, (semaphores - 1).bit_length())
        super().__init__({
            **{f"valid{t}": In(1) for t in range(tiles)},
            **{f"index{t}": In(index_bits) for t in range(tiles)},
            **{f"delta{t}": In(signed(18)) for t in range(tiles)},
            **{f"grant{t}": Out(1) for t in range(tiles)},
            "values": In(data.ArrayLayout(unsigned(32), semaphores)),
            "set": Out(semaphores), "set_value": Out(data.ArrayLayout(unsigned(value_bits), semaphores)),
        })

    def elaborate(self, platform):
        m = Module()
        # The granted request is picked first and added once per semaphore: an adder a semaphore, not one a
        # semaphore for every requester (with the link's landers, three requesters tripled the adders).
        index = Signal.like(self.index0)
        delta = Signal.like(self.delta0)
        granted = Signal()
        for t in range(self.tiles):
            valid = getattr(self, f"valid{t}")
            with m.If(valid & ~granted):
                m.d.comb += [getattr(self, f"grant{t}").eq(1), index.eq(getattr(self, f"index{t}")),
                             delta.eq(getattr(self, f"delta{t}"))]
            granted_next = Signal(name=f"granted{t}")
            m.d.comb += granted_next.eq(granted | valid)
            granted = granted_next
        for i in range(self.semaphores):
            m.d.comb += [self.set[i].eq(granted & (index == i)),
                         self.set_value[i].eq((self.values[i] + delta)[:self.value_bits])]
        return m
