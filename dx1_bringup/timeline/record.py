"""Recording a timeline of what a program does to an open device.

:func:`record` attaches a :class:`Timeline` to the device as an observer
(:meth:`~dx1_driver.Device.observe`), so the program keeps using the device itself:

- **host** tracks: ``submit``, ``wait`` (a queue's wait or ``wait_any``), ``reset`` (the device's or a
  tile's), ``recover``, ``upload`` (``write_mem``), ``download`` (``read_mem``/``read_array``) as spans of
  the calls,
  ``doorbell`` (the DOORBELL register writes) and one track per transport request kind (``read32``,
  ``write32``, ``read_u32s``, ``read_block``, ``write_block``, ``wait_irq``), seen through the
  transport's ``observer`` hook;
- per tile, the TRACE block's start/end events as slices on ``load``, ``compute``, ``store`` and
  ``control`` tracks by opcode, and counter tracks of the PERF counters (counted from the start, and on
  across a tile or device reset: ``reset_tile``, ``recover``, ``reset``);
- ``events lost`` per tile: completions the host collected whose start or end event never arrived.

After every wait the TRACE buffers are drained and the PERF counters sampled, so a run longer than the
trace depth loses nothing while at most a ring of commands is in flight.  Device cycles (GLOBAL
CYCLES, which also stamps the TRACE events) are put on host time through the clock snapshots taken with
each sample: piecewise linearly between two snapshots, on the line through the first and the last
outside them (and everywhere, if the clock went back: a device reset).  A simulator's clock only moves
while it serves a request, and a board's runs steadily: the snapshots follow either.  Each snapshot is
only as sure as the read that took it (the device's count is from somewhere inside the round trip):
:attr:`Timeline.clock_error_ns` is the largest half round trip, :attr:`Timeline.line_error_ns` how far the
snapshots lie from the straight line alone.
"""

from __future__ import annotations

import bisect
import contextlib
import dataclasses
import itertools
import time
from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from dx1_driver import Call, CommandError, Completion, Device, Observer, PerfCounters, TraceKind, Transport, regs

from . import writers
from .model import TimelineData

__all__ = ["COUNTERS", "HOST", "Timeline", "record", "record_link", "tile_group", "unit_of"]

#: The group of the host's tracks.
HOST = "host"

_UNITS = {regs.Opcode.LOAD: "load", regs.Opcode.GEMM: "compute", regs.Opcode.POSTOP: "compute",
          regs.Opcode.STORE: "store", regs.Opcode.COPY: "store"}

#: The PERF counters drawn as counter tracks (PerfCounters attribute, track name).
COUNTERS = (("bytes_read", "bytes read"), ("bytes_written", "bytes written"), ("macs", "MACs"),
            ("stall_dep", "stall dep cycles"), ("stall_mem", "stall mem cycles"))

_ZERO = PerfCounters(**dict.fromkeys((f.name for f in dataclasses.fields(PerfCounters)), 0))

#: TRACE timestamps are the low 32 bits of GLOBAL CYCLES.
_STAMP_BITS = 32

#: The host track each observed call is drawn on (:data:`dx1_driver.observe.CALLS`); others are not drawn.
_TRACKS = {"submit": "submit", "wait": "wait", "wait_any": "wait", "reset": "reset", "reset_tile": "reset",
           "recover": "recover", "write_mem": "upload", "read_mem": "download"}
#: Calls that zero a tile's PERF block: sampled before, counted on from 0 after.
_RESETS = ("reset", "reset_tile", "recover")


def _span_args(call: Call) -> dict[str, int]:
    """The arguments drawn on a call's host slice."""
    args = call.args
    if call.name == "write_mem":
        return {"addr": args["addr"], "bytes": len(args["data"])}
    if call.name == "read_mem":
        return {"addr": args["addr"], "bytes": args["n"]}
    if call.name == "wait_any":
        return {"queues": len(args["queues"]), "at_least": args["at_least"]}
    drawn = {} if call.tile is None else {"tile": call.tile}
    if call.name == "submit":
        drawn["commands"] = len(args["commands"])
    elif call.name == "wait" and call.error is None:
        drawn["completions"] = len(call.result)
    return drawn


def unit_of(opcode: regs.Opcode | int) -> str:
    """The tile track a command of ``opcode`` is drawn on: load, compute, store (STORE, COPY) or control."""
    return _UNITS.get(opcode, "control")


def tile_group(tile: int) -> str:
    """The group of ``tile``'s tracks."""
    return f"tile {tile}"


@dataclass(frozen=True)
class _Snapshot:
    host_ns: int  # midpoint of the read
    cycles: int
    spread_ns: int  # half the read's round trip: the count is from within host_ns +- spread_ns


class Timeline(Observer):
    """The timeline of one device, filled as the program runs; :meth:`finish` writes it.

    Parameters
    ----------
    device:
        An open device with a trace FIFO (GLOBAL FEATURES.trace); its TRACE blocks are started
        (cleared) here and stopped by :meth:`finish`, and the timeline observes it until then.
        ``None``: the host tracks of ``transport`` alone.
    transport:
        With ``device`` ``None``: the transport whose requests are drawn.

    Raises
    ------
    ValueError
        Neither a device nor a transport.
    dx1_driver.DriverError
        The device has no trace buffer.
    """

    def __init__(self, device: Device | None, transport: Transport | None = None):
        self.device = device
        self.transport = device.transport if device is not None else transport
        if self.transport is None:
            raise ValueError("a timeline needs a device or, for the host tracks alone, a transport")
        self.data = TimelineData()
        self.origin_ns = time.monotonic_ns()
        self.tiles = list(range(device.caps.tiles)) if device is not None else []
        self.requests: dict[str, int] = {}
        self.events = {t: 0 for t in self.tiles}
        self.completed = {t: 0 for t in self.tiles}
        self.lost = {t: 0 for t in self.tiles}
        self._open: dict[int, dict[tuple[int, int], deque[int]]] = {t: {} for t in self.tiles}
        # (tile, cycle, kind, opcode, tag, status) of every drained event, in drain order
        self._raw: list[tuple[int, int, str, regs.Opcode | int, int, int]] = []
        self._doorbells = {device.queue_bases[t] + regs.Queue.DOORBELL: t for t in self.tiles}
        self._previous_observer = self.transport.observer
        self.snapshots: list[_Snapshot] = []
        self._counts: list[int] = []  # the snapshots' cycles, and whether they never fall (see host_ns)
        self._rising = False
        #: PERF at the start, and each counter's count since then (kept across a tile reset, see :meth:`sample`).
        self.perf_start: dict[int, PerfCounters] = {}
        self.perf_totals = {t: dict.fromkeys((attr for attr, _ in COUNTERS), 0) for t in self.tiles}
        # Listen first: the timeline's own requests (here, its drains and samples) are drawn too.
        self.transport.observer = self._observe
        self.finished = False
        for t in self.tiles:
            device.trace(t).start(clear=True)
            self.perf_start[t] = device.perf(t).read()
        self._perf_last = dict(self.perf_start)
        if device is not None:
            self._snapshot()
            device.observe(self)

    # -- host ---------------------------------------------------------------------------------------

    def now(self) -> int:
        """Nanoseconds since the timeline began."""
        return time.monotonic_ns() - self.origin_ns

    def _observe(self, kind: str, addr: int, nbytes: int, start_ns: int, end_ns: int) -> None:
        if self._previous_observer is not None:  # whoever listened before still hears every request
            self._previous_observer(kind, addr, nbytes, start_ns, end_ns)
        start, end = start_ns - self.origin_ns, end_ns - self.origin_ns
        self.requests[kind] = self.requests.get(kind, 0) + 1
        self.data.add_slice(HOST, kind, kind, start, end, {"addr": addr, "bytes": nbytes})
        if kind == "write32" and addr in self._doorbells:
            self.data.add_slice(HOST, "doorbell", "doorbell", start, end, {"tile": self._doorbells[addr]})

    def before(self, call: Call) -> None:
        if call.name in _RESETS:
            self.sample()  # so that only what runs between this sample and the reset is missed

    def after(self, call: Call) -> None:
        track = _TRACKS.get(call.name)
        if track is None:
            return
        self.data.add_slice(HOST, track, track, call.start_ns - self.origin_ns, call.end_ns - self.origin_ns,
                            _span_args(call))
        if call.name == "wait":
            done = call.error.completions if isinstance(call.error, CommandError) else call.result
            if done is not None:
                self.completions(call.tile, done)
        if call.error is not None:
            return
        if call.name in ("wait", "wait_any"):
            self.sample()
        elif call.name == "reset":
            for t in self.tiles:
                self.tile_reset(t)
        elif call.name in _RESETS:
            self.tile_reset(call.tile)

    # -- device -------------------------------------------------------------------------------------

    def _snapshot(self) -> None:
        before = time.monotonic_ns()
        cycles = self.device.cycles()
        after = time.monotonic_ns()
        self.snapshots.append(_Snapshot((before + after) // 2 - self.origin_ns, cycles, (after - before) // 2))

    def completions(self, tile: int, done: Iterable[Completion]) -> None:
        """Count completions the host collected from ``tile`` (for the loss count)."""
        self.completed[tile] += sum(1 for _ in done)

    def sample(self) -> None:
        """Drain every TRACE buffer, then snapshot the clock and sample the PERF counters (host alone: nothing)."""
        if self.device is None:
            return
        drained = {t: self.device.trace(t).drain() for t in self.tiles}
        self._snapshot()
        now = self.snapshots[-1]
        for t, events in drained.items():
            self.events[t] += len(events)
            for e in events:
                # Every event drained happened before the snapshot taken after the drain.
                cycles = now.cycles - ((now.cycles - e.timestamp) % (1 << _STAMP_BITS))
                self._raw.append((t, cycles, e.kind.value, e.opcode, e.tag, int(e.status)))
        for t in self.tiles:
            raw = self.device.perf(t).read()
            step = raw.since(self._perf_last[t])
            self._perf_last[t] = raw
            for attr, name in COUNTERS:
                self.perf_totals[t][attr] += getattr(step, attr)
                self.data.add_sample(tile_group(t), name, now.host_ns, self.perf_totals[t][attr])
            self.lost[t] = max(0, 2 * self.completed[t] - self.events[t])
            self.data.add_sample(tile_group(t), "events lost", now.host_ns, self.lost[t])

    def tile_reset(self, tile: int) -> None:
        """Note that ``tile``'s PERF block was zeroed (a tile or device reset): count on from 0.

        Sample before the reset, so only what the tile did between that sample and the reset is missed.
        """
        self._perf_last[tile] = _ZERO

    # -- the clock fit ------------------------------------------------------------------------------

    @property
    def ns_per_cycle(self) -> float:
        """Slope of the line through the first and last clock snapshots (1.0 if the clock did not move)."""
        if not self.snapshots:
            return 1.0
        first, last = self.snapshots[0], self.snapshots[-1]
        return (last.host_ns - first.host_ns) / (last.cycles - first.cycles) if last.cycles > first.cycles else 1.0

    def _line_ns(self, cycles: int) -> int:
        first = self.snapshots[0]
        return first.host_ns + round((cycles - first.cycles) * self.ns_per_cycle)

    def host_ns(self, cycles: int) -> int:
        """Host time (ns from the origin) of device cycle ``cycles`` (see the module docstring)."""
        if len(self._counts) != len(self.snapshots):
            self._counts = [s.cycles for s in self.snapshots]
            self._rising = all(a <= b for a, b in itertools.pairwise(self._counts))
        counts = self._counts
        if not (self._rising and counts[0] <= cycles <= counts[-1]):
            return self._line_ns(cycles)
        i = bisect.bisect_left(counts, cycles)
        if counts[i] == cycles:
            return self.snapshots[i].host_ns  # the first snapshot that saw this count
        a, b = self.snapshots[i - 1], self.snapshots[i]
        return a.host_ns + round((cycles - a.cycles) * (b.host_ns - a.host_ns) / (b.cycles - a.cycles))

    @property
    def clock_error_ns(self) -> int:
        """How sure the device's place on host time is: the largest half round trip of a clock snapshot."""
        return max(s.spread_ns for s in self.snapshots) if self.snapshots else 0

    @property
    def line_error_ns(self) -> int:
        """How far the clock snapshots lie from the straight line through the first and the last (host ns)."""
        return max(abs(self._line_ns(s.cycles) - s.host_ns) for s in self.snapshots) if self.snapshots else 0

    def _device_slices(self) -> None:
        """Pair start and end events by tile, opcode and tag into slices on the tile's unit tracks."""
        for tile, cycles, kind, opcode, tag, status in self._raw:
            starts = self._open[tile].setdefault((int(opcode), tag), deque())
            if kind == TraceKind.START.value:
                starts.append(cycles)
                continue
            if not starts:
                continue  # its start event was lost (counted in events lost)
            begin = starts.popleft()
            name = opcode.name if isinstance(opcode, regs.Opcode) else f"opcode 0x{opcode:02x}"
            self.data.add_slice(tile_group(tile), unit_of(opcode), name, self.host_ns(begin), self.host_ns(cycles),
                                {"tag": tag, "status": status, "start_cycle": begin, "end_cycle": cycles})

    # -- the end ------------------------------------------------------------------------------------

    def finish(self, path: str | Path, fmt: str | None = None) -> str:
        """Take the last samples, stop the TRACE blocks, write the trace and return the one-line summary."""
        if self.finished:
            raise RuntimeError("this timeline is finished already")
        self.finished = True
        self.sample()
        if self.device is not None:
            self.device.unobserve(self)
        for t in self.tiles:
            self.device.trace(t).stop()
        self.transport.observer = self._previous_observer
        self._device_slices()
        writers.write(self.data, path, fmt)
        return self.summary(path)

    def summary(self, path: str | Path) -> str:
        """The one-line summary: slices per track (over its lanes), samples per counter track, events lost and
        how well the device clock lines up with host time (``timeline FILE: host: submit 3, ...; tile 0: ...``)."""
        groups: dict[str, list[str]] = {}
        for group, name, lanes in self.data.slice_tracks():
            groups.setdefault(group, []).append(f"{name} {self.data.slice_count(group, name)}"
                                                + (f" ({lanes} lanes)" if lanes > 1 else ""))
        for (group, name), track in self.data.tracks.items():
            if track.counter:
                groups.setdefault(group, []).append(f"{name} {len(track.samples)} samples")
        line = f"timeline {path}: " + "; ".join(f"{g}: {', '.join(parts)}" for g, parts in groups.items())
        if self.device is None:
            return line + " (host tracks only)"
        return (line + f"; events lost {sum(self.lost.values())}; device clock on host time through "
                f"{len(self.snapshots)} snapshots, each within {self.clock_error_ns / 1000:.0f} us (a straight line at "
                f"{self.ns_per_cycle:.1f} ns/cycle would be off by up to {self.line_error_ns / 1000:.0f} us)")


@contextlib.contextmanager
def record(device: Device, path: str | Path, fmt: str | None = None, *,
           summary: list[str] | None = None) -> Iterator[Device]:
    """Record what the ``with`` block does to ``device`` (yielded); write the trace to ``path`` at its end.

    Parameters
    ----------
    device:
        An open device with a trace FIFO; it stays open.
    path, fmt:
        Where the trace goes and its format (``"perfetto"`` or ``"json"``; default by suffix, see
        :func:`~.writers.format_for`).
    summary:
        If given, the one-line summary is appended to it.
    """
    fmt = writers.format_for(path, fmt)
    timeline = Timeline(device)
    try:
        yield device
    finally:
        line = timeline.finish(path, fmt)
        if summary is not None:
            summary.append(line)


@contextlib.contextmanager
def record_link(transport: Transport, path: str | Path, fmt: str | None = None, *,
                summary: list[str] | None = None) -> Iterator[Transport]:
    """Record every request over ``transport`` during the ``with`` block (the host tracks alone).

    For a program that owns the device itself, such as bring-up (which resets the device, clears the
    PERF counters and reads the TRACE registers in its register walk): only transport requests are drawn.
    """
    fmt = writers.format_for(path, fmt)
    timeline = Timeline(None, transport)
    try:
        yield transport
    finally:
        line = timeline.finish(path, fmt)
        if summary is not None:
            summary.append(line)

