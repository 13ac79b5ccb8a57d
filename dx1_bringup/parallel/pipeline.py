"""Pipeline parallelism: consecutive layers as stages on the ranks of a device group, micro-batches flowing through.

Rank ``s`` of a :class:`~..collectives.DeviceGroup` is stage ``s``: it holds a graph session per layer of its
stage (weights resident) and runs every micro-batch through them in order.  Stage ``s`` receives a
micro-batch's activation from stage ``s - 1`` and sends its result to stage ``s + 1`` with the group's
:meth:`~..collectives.Rank.send` / :meth:`~..collectives.Rank.recv` (over the chip link between neighbouring
chips of a board, else host-staged), between buffers in the two ranks' device memories.

Schedules (Narayanan et al., "Efficient Large-Scale Language Model Training on GPU Clusters Using
Megatron-LM", arXiv 2104.04473): inference runs only forward passes, so both schedules run every stage's
micro-batches in order and differ in how many are in flight at once.  ``gpipe`` injects micro-batch ``i``
as soon as stage 0 is free; ``1f1b`` admits micro-batch ``i`` only once micro-batch ``i - p`` has left the
last stage (the warm-up window of 1F1B: at most ``p`` activations alive, instead of up to ``m``).  Both have
the bubble ``(p - 1) / (m + p - 1)`` of the total when the stages are balanced.

The measured bubble is in device cycles: every (stage, micro-batch) pass's CYCLES, measured on its device,
placed on the schedule's dependencies (a stage takes micro-batch ``i`` when it has finished ``i - 1`` and the
stage before has finished ``i``; for ``1f1b`` also when ``i - p`` has left); the bubble is the share of
``p x`` the makespan in which the stages are idle.  Separate devices have no common clock, so the
makespan is rebuilt from the passes' own cycles; a host-staged transfer takes no device cycles.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ..collectives import Buffer, DeviceGroup, Rank
from ..runtime.graph import Graph, GraphSession

__all__ = ["SCHEDULES", "bubble_formula", "balanced_stages", "Timeline", "replay", "PipelineParallel",
           "PipelineStats"]

#: The schedules by name.
SCHEDULES = ("gpipe", "1f1b")


def bubble_formula(stages: int, micro: int) -> float:
    """The pipeline bubble's share of the total time with balanced stages: ``(p - 1) / (m + p - 1)``."""
    return (stages - 1) / (micro + stages - 1)


def balanced_stages(costs: Sequence[float], stages: int) -> list[range]:
    """Consecutive layers in ``stages`` stages, the costliest stage as cheap as can be (layer costs ``costs``).

    Raises
    ------
    ValueError
        Fewer layers than stages.
    """
    n = len(costs)
    if isinstance(stages, bool) or not isinstance(stages, int) or not 1 <= stages <= n:
        raise ValueError(f"the stages must be from 1 to the {n} layers, not {stages!r}")
    prefix = np.concatenate([[0.0], np.cumsum(costs)])
    inf = float("inf")
    # best[k][i]: the least costliest stage over layers 0 .. i - 1 in k stages; cut[k][i] where the last begins.
    best = [[inf] * (n + 1) for _ in range(stages + 1)]
    cut = [[0] * (n + 1) for _ in range(stages + 1)]
    best[0][0] = 0.0
    for k in range(1, stages + 1):
        for i in range(k, n + 1):
            for j in range(k - 1, i):
                value = max(best[k - 1][j], prefix[i] - prefix[j])
                if value < best[k][i]:
                    best[k][i], cut[k][i] = value, j
    bounds, i = [], n
    for k in range(stages, 0, -1):
        bounds.append(range(cut[k][i], i))
        i = cut[k][i]
    return bounds[::-1]


@dataclass
class Timeline:
    """Where every (stage, micro-batch) pass sits on the rebuilt schedule, in device cycles."""

    start: np.ndarray
    end: np.ndarray

    @property
    def makespan(self) -> float:
        return float(self.end.max()) if self.end.size else 0.0

    @property
    def busy(self) -> np.ndarray:
        """Per stage, the cycles it computed."""
        return (self.end - self.start).sum(axis=1)

    @property
    def bubble(self) -> float:
        """The idle share of ``stages x makespan``."""
        total = self.makespan * self.start.shape[0]
        return 1 - float(self.busy.sum()) / total if total else 0.0

    @property
    def imbalance(self) -> float:
        """The busiest stage's cycles over the mean stage's, minus one."""
        mean = float(self.busy.mean())
        return float(self.busy.max()) / mean - 1 if mean else 0.0


def replay(cycles: np.ndarray, schedule: str) -> Timeline:
    """Place passes of ``cycles[stage, micro]`` device cycles on ``schedule``'s dependencies (module docstring)."""
    if schedule not in SCHEDULES:
        raise ValueError(f"the schedule must be one of {', '.join(SCHEDULES)}, not {schedule!r}")
    p, m = cycles.shape
    start, end = np.zeros((p, m)), np.zeros((p, m))
    for i in range(m):
        for s in range(p):
            ready = max(end[s, i - 1] if i else 0.0, end[s - 1, i] if s else 0.0)
            if schedule == "1f1b" and s == 0 and i >= p:
                ready = max(ready, end[p - 1, i - p])
            start[s, i], end[s, i] = ready, ready + cycles[s, i]
    return Timeline(start, end)


@dataclass
class PipelineStats:
    """One batch through the pipeline: every pass's cycles, its rebuilt timeline, and what the host saw."""

    schedule: str
    #: ``cycles[stage, micro]``: the device CYCLES of each pass.
    cycles: np.ndarray
    timeline: Timeline
    #: The most micro-batches in flight at once (admitted to stage 0 and not yet out of the last stage).
    peak_in_flight: int
    wall_seconds: float

    @property
    def formula(self) -> float:
        return bubble_formula(*self.cycles.shape)

    @property
    def efficiency(self) -> float:
        """The throughput over the ideal one (every stage busy all the time): ``1 - bubble``."""
        return 1 - self.timeline.bubble


class PipelineParallel:
    """Stage ``s`` (rank ``s`` of ``group``) runs ``stages[s]``'s graphs in order; each maps ``x`` to ``out``.

    Every graph takes one float32 input ``x`` and gives one float32 output ``out`` of the same shape, so a
    stage's output is the next stage's input.

    ``timeout`` bounds every wait of a stage for its neighbour (and of stage 0 for a place in the window).  A
    stage's first wait spans the pipeline's fill, the passes of every stage before it, so it is generous; the
    sessions' device timeout is ``device_timeout``.

    Raises
    ------
    ValueError
        The stages and the ranks differ in number, a stage is empty, or a schedule is unknown.
    """

    def __init__(self, group: DeviceGroup, stages: list[list[Graph]], *, schedule: str = "1f1b",
                 tiles: int | None = None, timeout: float = 60.0, device_timeout: float = 5.0):
        if len(stages) != group.size or not all(stages):
            raise ValueError(f"{len(stages)} stages for a group of {group.size} ranks: one non-empty stage a rank")
        if schedule not in SCHEDULES:
            raise ValueError(f"the schedule must be one of {', '.join(SCHEDULES)}, not {schedule!r}")
        shape = stages[0][0].values["x"].shape
        self.group, self.stages, self.schedule, self.timeout, self.shape = group, stages, schedule, timeout, shape
        self.sessions: list[list[GraphSession]] = [[] for _ in stages]
        self._buffers: list[int | None] = [None] * group.size

        def open_stage(rank: Rank) -> None:
            for graph in stages[rank.rank]:
                self.sessions[rank.rank].append(GraphSession(rank.dev, graph, tiles=tiles,
                                                                timeout=device_timeout))
            self._buffers[rank.rank] = rank.dev.alloc(int(np.prod(shape)) * 4)

        try:
            group.run(open_stage)
        except BaseException:
            self.close()
            raise

    def run(self, inputs: list[np.ndarray]) -> tuple[list[np.ndarray], PipelineStats]:
        """Every micro-batch of ``inputs`` through every stage: the outputs in order and the :class:`PipelineStats`."""
        p, m = self.group.size, len(inputs)
        cycles = np.zeros((p, m))
        outputs: list[np.ndarray | None] = [None] * m
        window = threading.Semaphore(p if self.schedule == "1f1b" else m)
        lock = threading.Lock()
        flight = {"now": 0, "peak": 0}

        def stage(rank: Rank) -> None:
            s, dev = rank.rank, rank.dev
            buf = Buffer(s, self._buffers[s], np.int32, self.shape)
            for i in range(m):
                if s == 0:
                    if not window.acquire(timeout=self.timeout):
                        raise TimeoutError(f"stage 0 waited {self.timeout} s to admit micro-batch {i}")
                    with lock:
                        flight["now"] += 1
                        flight["peak"] = max(flight["peak"], flight["now"])
                    x = inputs[i]
                else:
                    rank.recv(buf, s - 1, timeout=self.timeout)
                    x = dev.read_array(buf.addr, self.shape, np.int32).view(np.float32)
                for session in self.sessions[s]:
                    out, st = session.run({"x": np.ascontiguousarray(x, dtype=np.float32)})
                    x = out["out"]
                    cycles[s, i] += st.cycles
                if s < p - 1:
                    dev.write_mem(buf.addr, np.ascontiguousarray(x).view(np.int32))
                    rank.send(buf, s + 1, timeout=self.timeout)
                else:
                    outputs[i] = x
                    with lock:
                        flight["now"] -= 1
                    window.release()

        started = time.perf_counter()
        self.group.run(stage)
        wall = time.perf_counter() - started
        return ([o for o in outputs if o is not None],
                PipelineStats(self.schedule, cycles, replay(cycles, self.schedule), flight["peak"], wall))

    def close(self) -> None:
        """Close every stage's sessions and free its activation buffer (each on its rank's thread)."""
        def close_stage(rank: Rank) -> None:
            for session in self.sessions[rank.rank]:
                session.close()
            self.sessions[rank.rank] = []
            if self._buffers[rank.rank] is not None:
                rank.dev.free(self._buffers[rank.rank])
                self._buffers[rank.rank] = None

        if not self.group.closed:
            self.group.run(close_stage)

    def __enter__(self) -> PipelineParallel:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
