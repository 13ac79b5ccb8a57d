"""The timeline of collectives over the chip link: a group per chip with its queue's commands, a track per link
direction with its SENDs, and each collective's span per rank, on the devices' cycle counters.

The events come from the link algorithm (``DeviceGroup.link_log``, a list it appends a :class:`LinkEvent` to
per command); times are device cycles, written as nanoseconds one for one (the viewers' unit).
"""

from __future__ import annotations

from dataclasses import dataclass

from .model import TimelineData

__all__ = ["LinkEvent", "link_timeline"]


@dataclass(frozen=True)
class LinkEvent:
    """One link command of rank ``rank``: ``kind`` SEND (to rank ``peer``) or WAIT (from ``peer``), from cycle
    ``start`` to its completion at ``end``, in collective ``op`` number ``seq`` at ``step``."""

    rank: int
    op: str
    seq: int
    step: str
    kind: str
    peer: int
    nbytes: int
    start: int
    end: int


def link_timeline(events: list[LinkEvent]) -> TimelineData:
    """Tracks of ``events``: ``chip R``/``queue`` (every command), ``chip R``/``link R->P`` (its SENDs), and
    ``collectives``/``rank R`` (each collective from its first command's start to its last one's end)."""
    data = TimelineData()
    spans: dict[tuple[int, str, int], list[int]] = {}
    for e in sorted(events, key=lambda e: (e.rank, e.start, e.end)):
        group = f"chip {e.rank}"
        args = {"bytes": e.nbytes, "peer": e.peer, "seq": e.seq}
        data.add_slice(group, "queue", f"{e.kind} {e.step}", e.start, e.end, args)
        if e.kind == "SEND":
            data.add_slice(group, f"link {e.rank}->{e.peer}", f"{e.op} #{e.seq}: {e.step}", e.start, e.end, args)
        span = spans.setdefault((e.rank, e.op, e.seq), [e.start, e.end])
        span[0], span[1] = min(span[0], e.start), max(span[1], e.end)
    for (rank, op, seq), (start, end) in sorted(spans.items(), key=lambda item: (item[0][0], item[1][0])):
        data.add_slice("collectives", f"rank {rank}", f"{op} #{seq}", start, end)
    return data
