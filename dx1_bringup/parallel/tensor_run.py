"""Running tensor-parallel graphs: one graph session per rank of a device group, the all-reduces over the group.

:class:`TensorParallel` opens a :class:`~..runtime.graph.GraphSession` for each rank's graph on that rank's
thread, with a collective runner that hands each :class:`~..runtime.graph.Collective` to the rank's
:meth:`~..collectives.Rank.all_reduce`, ``reduce_scatter`` or ``all_gather`` (their fingerprints, deadlines and
typed errors included) on the value's place in the rank's device memory.
:meth:`TensorParallel.run` runs one forward pass on every rank at once.

The device cycles of a forward are those of its critical path: per device segment (the stretches between
host operators and collectives, the same on every rank) the slowest rank's CYCLES, plus per collective the
most any rank's cycle counter advanced during it (``dev.cycles()``), summed.  A host-staged collective takes
no device cycles (host memory accesses, no commands: 0 on the golden model, a cycle or two on ``sim``); over a
chip link (``model:chips=N``) its SEND and WAIT commands count.  Its wall time is reported too.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..collectives import Buffer, DeviceGroup, Rank
from ..runtime.graph import Collective, Graph, GraphSession, RunStats

__all__ = ["TensorParallel", "ParallelStats", "collective_runner"]


def collective_runner(rank, size: int):
    """A graph session's collective runner for ``rank`` of ``size`` ranks: a :class:`~..collectives.Rank` or a
    :class:`~.distributed.ProcessRank` (anything with ``rank`` and the three collectives on a Buffer)."""
    def run(op: Collective, addr: int, shape: tuple[int, int], dtype: np.dtype) -> None:
        if op.kind != "all_reduce" and shape[0] % size:
            raise ValueError(f"{op.name}: a {op.kind} splits whole rows, so the group's {size} ranks must divide "
                             f"the {shape[0]} rows")
        getattr(rank, op.kind)(Buffer(rank.rank, addr, dtype, shape))

    return run


@dataclass
class ParallelStats:
    """One forward pass over the ranks: each rank's :class:`RunStats`, and the critical path's device cycles."""

    per_rank: list[RunStats]
    #: Per device segment the slowest rank's CYCLES, and per collective the slowest rank's cycles, summed.
    cycles: int
    #: The collectives' part of ``cycles``.
    collective_cycles: int
    #: Wall seconds the collectives took, summed over the pass (rank 0's view).
    collective_seconds: float
    #: How many collectives a pass ran (rank 0's).
    collectives: int
    wall_seconds: float

    @property
    def imbalance(self) -> float:
        """The busiest rank's device cycles over the mean's, minus one."""
        totals = [s.cycles for s in self.per_rank]
        mean = sum(totals) / len(totals)
        return max(totals) / mean - 1 if mean else 0.0


class TensorParallel:
    """Rank ``r`` of ``group`` runs ``graphs[r]``; every graph has the same inputs, outputs and segments.

    ``collective_rank`` maps a rank of the group to what runs its collectives when they span more than the
    group (a :class:`~.distributed.BoardRank`: this process's board as part of a torchrun world), with ``rank``,
    ``size`` and the three collectives; by default the group's rank itself.

    Raises
    ------
    ValueError
        The group and the graphs differ in number, or a graph does not fit its rank's device.
    """

    def __init__(self, group: DeviceGroup, graphs: list[Graph], *, tiles: int | None = None, timeout: float = 10.0,
                 collective_rank: Callable[[Rank], Any] | None = None):
        if len(graphs) != group.size:
            raise ValueError(f"{len(graphs)} graphs for a group of {group.size} ranks: one graph per rank")
        self.group, self.graphs = group, graphs
        self._collective_rank = collective_rank
        self._seconds = [0.0] * group.size
        self._counts = [0] * group.size
        self._cycles: list[list[int]] = [[] for _ in range(group.size)]
        self.sessions: list[GraphSession | None] = [None] * group.size

        def open_session(rank: Rank) -> None:
            self.sessions[rank.rank] = GraphSession(rank.dev, graphs[rank.rank], tiles=tiles, timeout=timeout,
                                                    collective=self._collective(rank))

        try:
            group.run(open_session)
        except BaseException:
            self.close()
            raise

    def _collective(self, rank: Rank):
        if self._collective_rank is None:
            inner = collective_runner(rank, self.group.size)
        else:
            wider = self._collective_rank(rank)
            inner = collective_runner(wider, wider.size)

        def collective(op: Collective, addr: int, shape: tuple[int, int], dtype: np.dtype) -> None:
            start, cycles = time.perf_counter(), rank.dev.cycles()
            inner(op, addr, shape, dtype)
            self._cycles[rank.rank].append(rank.dev.cycles() - cycles)
            self._seconds[rank.rank] += time.perf_counter() - start
            self._counts[rank.rank] += 1

        return collective

    def run(self, inputs: dict[str, np.ndarray]) -> tuple[list[dict[str, np.ndarray]], ParallelStats]:
        """One forward pass on every rank: each rank's outputs, and the pass's :class:`ParallelStats`."""
        self._seconds = [0.0] * self.group.size
        self._counts = [0] * self.group.size
        self._cycles = [[] for _ in range(self.group.size)]
        start = time.perf_counter()
        results = self.group.run(lambda rank: self.sessions[rank.rank].run(inputs))
        wall = time.perf_counter() - start
        stats = [s for _, s in results]
        segments = {len(s.segment_cycles) for s in stats}
        if len(segments) != 1:
            raise ValueError(f"the ranks' graphs have different device segments ({sorted(segments)}): they must "
                             f"be cut from one graph")
        critical = sum(max(s.segment_cycles[i] for s in stats) for i in range(segments.pop()))
        collective = sum(max(c) for c in zip(*self._cycles, strict=True))
        return ([out for out, _ in results],
                ParallelStats(stats, critical + collective, collective, self._seconds[0], self._counts[0], wall))

    def close(self) -> None:
        """Close every rank's session (on its own thread)."""
        def close_session(rank: Rank) -> None:
            session = self.sessions[rank.rank]
            if session is not None:
                session.close()
                self.sessions[rank.rank] = None

        if not self.group.closed and any(s is not None for s in self.sessions):
            self.group.run(close_session)

    def __enter__(self) -> TensorParallel:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
