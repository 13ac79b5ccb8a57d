"""Activation memory planning by liveness: values whose lifetimes do not overlap share device memory.

Every device-resident value lives from the operator that writes it (or, for a value the host uploads,
from the first operator that reads it) to the last operator that reads it (or to the end, for a graph
output).  :func:`plan_arena` places the values in one arena, largest first, each at the lowest offset
that no value alive at the same time occupies (the greedy-by-size heuristic of TFLite's arena planner),
so consecutive layers reuse memory and nothing is ever round-tripped through the host to make room.
"""

from __future__ import annotations

from dataclasses import dataclass

from ...spec import align_up

__all__ = ["Lifetime", "ArenaPlan", "plan_arena"]


@dataclass(frozen=True)
class Lifetime:
    """A value of ``size`` bytes alive from operator ``first`` to operator ``last`` (inclusive)."""

    name: str
    size: int
    first: int
    last: int

    def overlaps(self, other: Lifetime) -> bool:
        return self.first <= other.last and other.first <= self.last


@dataclass(frozen=True)
class ArenaPlan:
    """Where each value sits in the arena, and the arena's size (both in bytes)."""

    offsets: dict[str, int]
    size: int
    #: Bytes the values would take without sharing (for the plan's summary).
    unshared: int


def plan_arena(lifetimes: list[Lifetime], alignment: int) -> ArenaPlan:
    """Offsets for every value such that values alive at the same time never overlap.

    Raises
    ------
    ValueError
        A lifetime that ends before it starts, a size below 1, or a repeated name.
    """
    names = [lt.name for lt in lifetimes]
    if len(set(names)) != len(names):
        repeated = sorted({n for n in names if names.count(n) > 1})
        raise ValueError(f"every value must be planned once; repeated: {repeated}")
    for lt in lifetimes:
        if lt.size < 1 or lt.last < lt.first:
            raise ValueError(f"value {lt.name!r}: size must be >= 1 and its lifetime must not end before it starts "
                             f"(size {lt.size}, operators {lt.first}..{lt.last})")
    placed: list[tuple[Lifetime, int]] = []
    offsets: dict[str, int] = {}
    for lt in sorted(lifetimes, key=lambda v: (-v.size, v.first, v.name)):
        size = align_up(lt.size, alignment)
        busy = sorted((off, off + align_up(other.size, alignment)) for other, off in placed if other.overlaps(lt))
        offset = 0
        for start, end in busy:
            if offset + size <= start:
                break
            offset = max(offset, end)
        placed.append((lt, offset))
        offsets[lt.name] = offset
    size = max((off + align_up(lt.size, alignment) for lt, off in placed), default=0)
    return ArenaPlan(offsets, size, sum(align_up(lt.size, alignment) for lt in lifetimes))
