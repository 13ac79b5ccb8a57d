"""What a timeline holds: named tracks in groups, each with slices or counter samples, on host time.

The recorder (:mod:`.record`) fills a :class:`TimelineData`; the writers (:mod:`.writers`) turn it into a
Perfetto protobuf trace or Chrome JSON.  Times are nanoseconds of ``time.monotonic_ns()`` from the
timeline's origin.
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["Slice", "Track", "TimelineData"]


@dataclass(frozen=True)
class Slice:
    """One span on a track: ``[start_ns, end_ns]`` with its name and integer arguments."""

    name: str
    start_ns: int
    end_ns: int
    args: tuple[tuple[str, int], ...] = ()


@dataclass
class Track:
    """A slice track (``counter`` false: :attr:`slices`) or a counter track (:attr:`samples`)."""

    group: str
    name: str
    counter: bool = False
    #: The lane of a slice track: 1 for the track itself, 2 for ``"<name> 2"``, ...
    lane: int = 1
    slices: list[Slice] = field(default_factory=list)
    #: ``(time_ns, value)`` samples of a counter track, in time order.
    samples: list[tuple[int, int]] = field(default_factory=list)


class TimelineData:
    """Tracks in groups (``"host"``, ``"tile 0"``, ...), in the order they were first used.

    A slice that overlaps the last one of its track goes to a lane of its own (``"compute"``,
    ``"compute 2"``, ...), so each track's slices never overlap and viewers draw them all.
    """

    def __init__(self) -> None:
        self.tracks: dict[tuple[str, str], Track] = {}

    def _track(self, group: str, name: str, counter: bool, lane: int = 1) -> Track:
        track = self.tracks.get((group, name))
        if track is None:
            track = self.tracks[group, name] = Track(group, name, counter, lane)
        return track

    def add_slice(self, group: str, track: str, name: str, start_ns: int, end_ns: int,
                  args: dict[str, int] | None = None) -> None:
        """Add a slice to the first lane of ``track`` in ``group`` whose last slice ends by ``start_ns``."""
        if end_ns < start_ns:
            raise ValueError(f"slice {name!r} on {group}/{track} ends at {end_ns} ns, before it starts at "
                             f"{start_ns} ns")
        lane = 1
        while True:
            lane_track = self._track(group, track if lane == 1 else f"{track} {lane}", False, lane)
            if not lane_track.slices or lane_track.slices[-1].end_ns <= start_ns:
                break
            lane += 1
        lane_track.slices.append(Slice(name, start_ns, end_ns, tuple(sorted((args or {}).items()))))

    def add_sample(self, group: str, track: str, time_ns: int, value: int) -> None:
        """Add a sample to the counter ``track`` of ``group`` (samples must come in time order)."""
        t = self._track(group, track, True)
        if t.samples and time_ns < t.samples[-1][0]:
            raise ValueError(f"counter {group}/{track}: sample at {time_ns} ns comes before the last one at "
                             f"{t.samples[-1][0]} ns")
        t.samples.append((time_ns, value))

    def lanes(self, group: str, track: str) -> list[Track]:
        """The lanes of slice track ``track`` in ``group``, in order (empty if it has none)."""
        found = []
        while (lane := self.tracks.get((group, track if not found else f"{track} {len(found) + 1}"))) is not None:
            found.append(lane)
        return found

    def slice_tracks(self) -> list[tuple[str, str, int]]:
        """``(group, track, lanes)`` of every slice track, its lanes counted once, in first-use order."""
        return [(group, name, len(self.lanes(group, name))) for (group, name), t in self.tracks.items()
                if not t.counter and t.lane == 1]

    def slice_count(self, group: str, track: str) -> int:
        """Slices on ``track`` of ``group`` over all its lanes."""
        return sum(len(lane.slices) for lane in self.lanes(group, track))
