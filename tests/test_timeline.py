"""The timeline (dx1_bringup.timeline): a GEMM's trace, parsed back with Perfetto's own protobuf classes."""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from pathlib import Path

import numpy as np
import pytest
from dx1_driver import Device, regs
from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import Trace, TrackEvent

from dx1_bringup.backends import ModelTransport
from dx1_bringup.cli import main
from dx1_bringup.replay import Recorder, load_capture, replay
from dx1_bringup.runtime import gemm_run, reference
from dx1_bringup.runtime.operands import gemm_problem
from dx1_bringup.spec import SocConfig
from dx1_bringup.timeline import COUNTERS, HOST, Timeline, record, tile_group, unit_of

UNITS = ("load", "compute", "store", "control")


def parse(path: Path) -> tuple[dict[int, tuple[str, str]], dict[int, list]]:
    """Tracks by uuid as ``(group, name)`` and each track's events in file order."""
    trace = Trace()
    trace.ParseFromString(path.read_bytes())
    names: dict[int, str] = {}
    parents: dict[int, int] = {}
    events: dict[int, list] = defaultdict(list)
    for packet in trace.packet:
        if packet.HasField("track_descriptor"):
            d = packet.track_descriptor
            names[d.uuid] = d.name
            if d.HasField("parent_uuid"):
                parents[d.uuid] = d.parent_uuid
        elif packet.HasField("track_event"):
            events[packet.track_event.track_uuid].append((packet.timestamp, packet.track_event))
    return {uuid: (names[parent], names[uuid]) for uuid, parent in parents.items()}, events


def slices(tracks: dict[int, tuple[str, str]], events: dict[int, list], group: str, base: str) -> list[str]:
    """Names of the slices on ``base`` and its lanes (``base 2``, ...) in ``group``."""
    found = []
    for uuid, (g, name) in tracks.items():
        if g == group and (name == base or name.startswith(f"{base} ") and name[len(base) + 1:].isdigit()):
            found += [e.name for _, e in events[uuid] if e.type == TrackEvent.TYPE_SLICE_BEGIN]
    return found


def run_traced(device: Device, path: Path, m: int, k: int, n: int, tile_ids: list[int] | None = None, **kwargs):
    """A GEMM through a timeline; also counts every transport request independently of it."""
    seen: Counter[str] = Counter()
    device.transport.observer = lambda kind, *_: seen.update([kind])
    a, b, bias, post = gemm_problem(m, k, n, 3)
    summary: list[str] = []
    with record(device, path, summary=summary, **kwargs) as traced:
        c, stats = gemm_run.run_gemm(traced, a, b, bias, post, tile_ids=tile_ids, timeout=120)
        timeline = next(o for o in traced.observers if isinstance(o, Timeline))
    device.transport.observer = None
    assert np.array_equal(c, reference.reference_gemm(a, b, bias, post))
    return stats, timeline, seen, summary[0]


def check_trace(device: Device, path: Path, stats, timeline, seen: Counter[str]) -> None:
    tracks, events = parse(path)
    groups = {g for g, _ in tracks.values()}
    assert groups == {HOST} | {tile_group(t) for t in range(device.caps.tiles)}
    # Host: one slice per transport request of each kind, counted by an observer of our own.
    for kind, count in seen.items():
        assert len(slices(tracks, events, HOST, kind)) == count, kind
    assert set(seen) >= {"read32", "write32", "read_u32s", "read_block", "write_block"}
    assert len(slices(tracks, events, HOST, "upload")) == 3  # A, B, bias
    assert len(slices(tracks, events, HOST, "download")) == 1  # C
    submits = len(slices(tracks, events, HOST, "submit"))
    assert submits >= len(stats.commands) and len(slices(tracks, events, HOST, "doorbell")) == submits
    assert slices(tracks, events, HOST, "wait")
    for t, commands in stats.commands.items():
        group = tile_group(t)
        per_unit = {u: slices(tracks, events, group, u) for u in UNITS}
        # Every command is one slice, on the track of its unit.
        assert sum(len(v) for v in per_unit.values()) == commands
        for unit, names in per_unit.items():
            assert all(unit_of(regs.Opcode[name]) == unit for name in names)
        assert len(per_unit["compute"]) > 0 and len(per_unit["load"]) > 0 and len(per_unit["store"]) > 0
        # The last sample of each counter is the PERF counter now, counted from the start.
        delta = device.perf(t).read().since(timeline.perf_start[t])
        last = {name: events[uuid][-1][1].counter_value for uuid, (g, name) in tracks.items() if g == group
                and events[uuid] and events[uuid][-1][1].type == TrackEvent.TYPE_COUNTER}
        assert last == {**{name: getattr(delta, attr) for attr, name in COUNTERS}, "events lost": 0}
        assert last["MACs"] == stats.delta(t).macs > 0
    for uuid, evs in events.items():
        stamps = [ts for ts, _ in evs]
        assert stamps == sorted(stamps), tracks[uuid]
        kinds = [e.type for _, e in evs]
        if kinds[0] != TrackEvent.TYPE_COUNTER:  # slices begin and end in turn: lanes never overlap
            assert kinds == [TrackEvent.TYPE_SLICE_BEGIN, TrackEvent.TYPE_SLICE_END] * (len(kinds) // 2)


def test_model_trace_has_every_command_request_and_counter(tmp_path: Path) -> None:
    device = Device(ModelTransport())
    path = tmp_path / "gemm.pftrace"
    stats, timeline, seen, summary = run_traced(device, path, 256, 512, 256)
    check_trace(device, path, stats, timeline, seen)
    # Longer than the trace buffer holds, yet nothing lost: it is drained after every wait.
    depth = SocConfig().trace_depth
    for t, commands in stats.commands.items():
        assert 2 * commands > 3 * depth
        assert timeline.events[t] == 2 * commands and timeline.lost[t] == 0
    assert summary.startswith(f"timeline {path}: host: ") and "events lost 0" in summary
    assert f"load {len(slices(*parse(path), 'tile 0', 'load'))}" in summary


def test_counters_keep_counting_across_a_tile_reset(tmp_path: Path) -> None:
    """A tile reset zeroes PERF; the counter tracks go on from where they were instead of wrapping."""
    device = Device(ModelTransport())
    path = tmp_path / "reset.pftrace"
    a, b, bias, post = gemm_problem(64, 64, 64, 3)
    with record(device, path) as traced:
        _, first = gemm_run.run_gemm(traced, a, b, bias, post, tile_ids=[0])
        traced.queue(0).reset_tile()
        _, second = gemm_run.run_gemm(traced, a, b, bias, post, tile_ids=[0])
    tracks, events = parse(path)
    macs = next(uuid for uuid, track in tracks.items() if track == (tile_group(0), "MACs"))
    values = [e.counter_value for _, e in events[macs]]
    assert values == sorted(values) and values[-1] == first.macs + second.macs > 0


def test_loss_is_counted_when_the_buffer_overflows(tmp_path: Path) -> None:
    """A 16-event buffer cannot hold a ring of commands between drains: the loss is counted and drawn."""
    device = Device(ModelTransport(SocConfig(trace_depth=16)))
    path = tmp_path / "lossy.pftrace"
    stats, timeline, _, summary = run_traced(device, path, 128, 128, 128)
    lost = sum(timeline.lost.values())
    assert lost > 0 and lost == sum(2 * stats.commands[t] - timeline.events[t] for t in stats.commands)
    assert f"events lost {lost};" in summary
    tracks, events = parse(path)
    drawn = sum(events[uuid][-1][1].counter_value for uuid, (_, name) in tracks.items() if name == "events lost")
    assert drawn == lost


def test_device_events_lie_inside_the_clock_snapshots(tmp_path: Path) -> None:
    device = Device(ModelTransport())
    _, timeline, _, _ = run_traced(device, tmp_path / "t.pftrace", 64, 64, 64)
    first, last = timeline.snapshots[0], timeline.snapshots[-1]
    cycles = [c for _, c, *_ in timeline._raw]
    assert cycles and first.cycles <= min(cycles) and max(cycles) <= last.cycles
    assert timeline.host_ns(first.cycles) == first.host_ns
    # Piecewise through every snapshot (the first to see its count), and in order: a later cycle is never
    # earlier on the host.
    seen = {}
    for s in timeline.snapshots:
        seen.setdefault(s.cycles, s.host_ns)
    assert len(seen) >= 2 and all(abs(timeline.host_ns(c) - t) <= 1 for c, t in seen.items())
    times = [timeline.host_ns(c) for c in sorted(cycles)]
    assert times == sorted(times)
    # Each snapshot is as sure as its read's round trip, the error the largest of them; a typical read is a
    # small part of the run (the median: one read preempted on a loaded machine may take milliseconds).
    spreads = sorted(s.spread_ns for s in timeline.snapshots)
    assert 0 < timeline.clock_error_ns == spreads[-1]
    assert spreads[len(spreads) // 2] < (last.host_ns - first.host_ns) / 10


def test_chrome_json_has_the_same_slices(tmp_path: Path) -> None:
    device = Device(ModelTransport())
    path = tmp_path / "gemm.json"
    stats, _, seen, _ = run_traced(device, path, 64, 64, 64)
    trace = json.loads(path.read_text())["traceEvents"]
    pids = {e["pid"]: e["args"]["name"] for e in trace if e["ph"] == "M" and e["name"] == "process_name"}
    threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in trace if e["ph"] == "M" and e["name"] == "thread_name"}
    per_tile = Counter(pids[e["pid"]] for e in trace if e["ph"] == "X" and pids[e["pid"]] != HOST)
    assert per_tile == {tile_group(t): c for t, c in stats.commands.items()}
    host = Counter(threads[e["pid"], e["tid"]] for e in trace if e["ph"] == "X" and pids[e["pid"]] == HOST)
    assert all(host[kind] == count for kind, count in seen.items())


def test_gemm_cli_writes_a_trace_and_prints_its_summary(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "t.pftrace"
    assert main(["gemm", "32", "32", "32", "--timeline", str(path)]) == 0
    out = capsys.readouterr().out
    assert f"  timeline {path}: host: " in out and "events lost 0" in out
    tracks, _ = parse(path)
    assert (tile_group(0), "compute") in tracks.values()


def test_trace_to_an_unwritable_place_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "no" / "t.pftrace"
    assert main(["gemm", "4", "4", "4", "--timeline", str(missing)]) == 2
    refused = f"argument --timeline: cannot write {missing} (it must be a file in an existing writable folder)"
    assert refused in capsys.readouterr().err
    assert main(["bringup", "--timeline", str(missing)]) == 2
    assert refused in capsys.readouterr().err


def test_bringup_trace_has_every_transport_request(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "b.json"
    assert main(["bringup", "--timeline", str(path), "--report", str(tmp_path / "r.json"), "--seed", "1",
                 "--mem-bytes", "4096"]) == 0
    assert f"timeline {path}: host: read32 " in capsys.readouterr().out
    trace = json.loads(path.read_text())["traceEvents"]
    kinds = {e["args"]["name"] for e in trace if e["ph"] == "M" and e["name"] == "thread_name"}
    assert kinds == {"read32", "write32", "read_u32s", "read_block", "write_block", "wait_irq"}


@pytest.mark.verilator
def test_sim_trace_has_every_command_request_and_counter(sim_transport, tmp_path: Path) -> None:
    device = Device(sim_transport)
    path = tmp_path / "sim.pftrace"
    stats, timeline, seen, _ = run_traced(device, path, 64, 64, 64)
    check_trace(device, path, stats, timeline, seen)
    assert "wait_irq" in seen
    assert all(timeline.lost[t] == 0 and timeline.events[t] == 2 * c for t, c in stats.commands.items())


@pytest.mark.verilator
def test_sim_trace_loses_nothing_over_more_than_the_trace_depth(sim_transport, tmp_path: Path) -> None:
    """One tile, 292 small commands (8x8 @ 8x1040): 584 events through a 256-event buffer, drained as it runs."""
    device = Device(sim_transport)
    path = tmp_path / "long.pftrace"
    stats, timeline, seen, summary = run_traced(device, path, 8, 8, 1040, tile_ids=[0])
    assert 2 * stats.commands[0] > 2 * SocConfig().trace_depth
    check_trace(device, path, stats, timeline, seen)
    assert timeline.events[0] == 2 * stats.commands[0] and timeline.lost[0] == 0 and "events lost 0;" in summary


def test_a_capture_and_a_timeline_observe_one_run_together(tmp_path: Path) -> None:
    """Both listen through the device's observer hook: the capture replays and the timeline has the run."""
    device = Device(ModelTransport())
    a, b, bias, post = gemm_problem(40, 24, 24, 5)
    summary: list[str] = []
    capture, trace = tmp_path / "run.capture", tmp_path / "run.json"
    with Recorder(device, capture), record(device, trace, summary=summary) as traced:
        assert traced is device and len(device.observers) == 2
        c, stats = gemm_run.run_gemm(device, a, b, bias, post)
    assert device.observers == ()
    np.testing.assert_array_equal(c, reference.reference_gemm(a, b, bias, post))
    assert replay(load_capture(capture), Device(ModelTransport())).ok
    submits = sum(e.kind == "submit" for e in load_capture(capture).events)
    assert f"submit {submits}" in summary[0] and "events lost 0" in summary[0]
    assert sum(stats.commands.values()) > 0
