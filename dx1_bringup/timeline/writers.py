"""Writers of a :class:`~.model.TimelineData`: Perfetto's native protobuf format and Chrome JSON.

Perfetto: one ``TrackDescriptor`` per group (``host``, ``tile 0``, ...) and one per track under it, slices
as ``TYPE_SLICE_BEGIN``/``TYPE_SLICE_END`` track events with their arguments as debug annotations,
counters as ``TYPE_COUNTER`` events on counter tracks; built with ``perfetto``'s ``TraceProtoBuilder``.
Chrome JSON (``chrome://tracing``, also opened by Perfetto's UI): a process per group, a thread per
slice track, ``X`` events in microseconds and ``C`` events for counters.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import TrackEvent
from perfetto.trace_builder.proto_builder import TraceProtoBuilder

from ..cli.args import writable_file
from .model import TimelineData

__all__ = ["FORMATS", "add_timeline_arguments", "format_for", "write", "write_chrome", "write_perfetto"]

#: The formats :func:`write` knows.
FORMATS = ("perfetto", "json")

#: Every packet of the trace is on one sequence (one writer).
_SEQUENCE = 1


def add_timeline_arguments(parser: argparse.ArgumentParser) -> None:
    """Add ``--timeline FILE`` and ``--timeline-format`` to a command's parser (``dx1 gemm``, ``dx1 bringup``)."""
    parser.add_argument("--timeline", metavar="FILE", type=writable_file, default=None,
                        help="write a timeline of the run to FILE for ui.perfetto.dev: host calls and transport "
                             "requests, and (dx1 gemm) each tile's TRACE events and PERF counters")
    parser.add_argument("--timeline-format", choices=FORMATS, default=None,
                        help="the --timeline format: Perfetto protobuf, or Chrome JSON (default: json for a .json "
                             "FILE, else perfetto)")


def format_for(path: str | Path, fmt: str | None = None) -> str:
    """The format to write ``path`` in: ``fmt`` if given, else ``"json"`` for a ``.json`` suffix, else Perfetto."""
    if fmt is None:
        return "json" if Path(path).suffix.lower() == ".json" else "perfetto"
    if fmt not in FORMATS:
        raise ValueError(f"trace format must be one of {', '.join(FORMATS)}, not {fmt!r}")
    return fmt


def write(data: TimelineData, path: str | Path, fmt: str | None = None) -> None:
    """Write ``data`` to ``path`` in ``fmt`` (see :func:`format_for`)."""
    if format_for(path, fmt) == "json":
        write_chrome(data, path)
    else:
        write_perfetto(data, path)


def write_perfetto(data: TimelineData, path: str | Path) -> None:
    """Write ``data`` as a Perfetto protobuf trace (``perfetto_trace_pb2.Trace``) to ``path``."""
    builder = TraceProtoBuilder()
    groups: dict[str, int] = {}
    next_uuid = 1
    for (group, name), track in data.tracks.items():
        if group not in groups:
            groups[group] = next_uuid
            packet = builder.add_packet()
            packet.track_descriptor.uuid = next_uuid
            packet.track_descriptor.name = group
            next_uuid += 1
        uuid = next_uuid
        next_uuid += 1
        packet = builder.add_packet()
        packet.track_descriptor.uuid = uuid
        packet.track_descriptor.parent_uuid = groups[group]
        packet.track_descriptor.name = name
        if track.counter:
            packet.track_descriptor.counter.SetInParent()
            for time_ns, value in track.samples:
                event = _event(builder, time_ns, uuid, TrackEvent.TYPE_COUNTER)
                event.counter_value = value
            continue
        for s in track.slices:
            event = _event(builder, s.start_ns, uuid, TrackEvent.TYPE_SLICE_BEGIN)
            event.name = s.name
            for key, value in s.args:
                annotation = event.debug_annotations.add()
                annotation.name = key
                annotation.int_value = value
            _event(builder, s.end_ns, uuid, TrackEvent.TYPE_SLICE_END)
    Path(path).write_bytes(builder.serialize())


def _event(builder: TraceProtoBuilder, time_ns: int, uuid: int, kind: int) -> TrackEvent:
    packet = builder.add_packet()
    packet.timestamp = time_ns
    packet.trusted_packet_sequence_id = _SEQUENCE
    packet.track_event.type = kind
    packet.track_event.track_uuid = uuid
    return packet.track_event


def write_chrome(data: TimelineData, path: str | Path) -> None:
    """Write ``data`` as Chrome JSON trace events (times in microseconds) to ``path``."""
    events: list[dict] = []
    pids: dict[str, int] = {}
    for tid, ((group, name), track) in enumerate(data.tracks.items(), start=1):
        if group not in pids:
            pids[group] = len(pids) + 1
            events.append({"ph": "M", "name": "process_name", "pid": pids[group], "args": {"name": group}})
        pid = pids[group]
        if track.counter:
            events += [{"ph": "C", "name": name, "pid": pid, "ts": time_ns / 1000, "args": {name: value}}
                       for time_ns, value in track.samples]
            continue
        events.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "args": {"name": name}})
        events += [{"ph": "X", "name": s.name, "pid": pid, "tid": tid, "ts": s.start_ns / 1000,
                    "dur": (s.end_ns - s.start_ns) / 1000, "args": dict(s.args)} for s in track.slices]
    Path(path).write_text(json.dumps({"traceEvents": events, "displayTimeUnit": "ns"}) + "\n")
