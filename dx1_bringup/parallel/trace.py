"""Perfetto timelines of parallel runs: a track per rank (tensor parallelism) or per stage (pipeline parallelism).

Separate devices share no clock, so the time axis is device cycles (drawn as nanoseconds, one a cycle) on a
clock the ranks agree on: for tensor parallelism the collectives are the points where every rank waits for
the slowest, so device segment ``i`` starts on every rank when the slowest rank finished segment ``i - 1``
(each rank's slice lasts its own CYCLES, the rest of the stretch is its wait); for pipeline parallelism the
passes sit where the schedule's dependencies put them (:func:`~.pipeline.replay`).
"""

from __future__ import annotations

from collections.abc import Sequence

from ..timeline import TimelineData
from .pipeline import Timeline

__all__ = ["tensor_trace", "pipeline_trace"]


def tensor_trace(segments: Sequence[Sequence[int]], names: Sequence[str]) -> TimelineData:
    """``segments[r][i]``: rank ``r``'s CYCLES of device segment ``i``; ``names[r]``: its device (or host)."""
    data = TimelineData()
    start = 0
    for i in range(len(segments[0])):
        slowest = max(seg[i] for seg in segments)
        for r, seg in enumerate(segments):
            group = f"rank {r}: {names[r]}"
            data.add_slice(group, "device", f"segment {i}", start, start + seg[i], {"cycles": seg[i]})
            if seg[i] < slowest:
                data.add_slice(group, "waiting", f"waits for the slowest rank before collective {i}",
                               start + seg[i], start + slowest, {"cycles": slowest - seg[i]})
        start += slowest
    return data


def pipeline_trace(timeline: Timeline, names: Sequence[str]) -> TimelineData:
    """Every (stage, micro-batch) pass of ``timeline`` on its stage's track; ``names[s]``: stage ``s``'s device."""
    data = TimelineData()
    stages, micro = timeline.start.shape
    for s in range(stages):
        for i in range(micro):
            a, b = int(timeline.start[s, i]), int(timeline.end[s, i])
            data.add_slice(f"stage {s}: {names[s]}", "passes", f"micro-batch {i}", a, b, {"cycles": b - a})
    return data
