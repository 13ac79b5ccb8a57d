"""Differential fuzzing: one seeded stream on two or more devices, compared completion by completion, byte by byte.

The first device is the reference (by default the golden model).  Each batch of events
(:mod:`dx1_bringup.fuzz.generate`) runs on it, then on every other device, event by event, and each
observation (the completions of a wait, the bytes of a download) must equal the reference's.  At the
first difference, or a device that stops answering, the runner writes the segment so far, with the
reference's observations, as a capture (:mod:`dx1_bringup.replay.capture`) and names the command that
replays it.  Downloads of batches that agreed are left out of the capture: they hold nothing a replay
needs to reproduce the state.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
from dx1_driver import Capabilities, Device, DeviceTimeout, DriverError

from ..replay.capture import Capture, Download, Event, Wait
from ..replay.replay import Mismatch, Session, compare, record, stuck
from ..spec import ErrorCode, Opcode, SocConfig, TileConfig
from .generate import StreamParams, batch_events, dump_events, setup_events
from .layout import Layout

__all__ = ["FuzzReport", "layout_for", "fuzz", "record_stream", "write_report"]

#: Log2 of the ring entries of the fuzzer's queues (a batch has at most 63 commands a queue).
RING_LOG2 = 6
#: Seconds between progress lines.
PROGRESS_EVERY = 5.0


def layout_for(caps: Capabilities) -> Layout:
    """The layout of a device of these capabilities.

    Raises
    ------
    ValueError
        The device has not two tiles, or too little memory for the windows and dump areas.
    """
    if caps.tiles != 2:
        raise ValueError(f"the fuzzer drives two tiles at once; this device has {caps.tiles}")
    config = SocConfig(tiles=caps.tiles, tile=TileConfig(caps.array, caps.spm_rows, caps.acc_rows, caps.vector),
                       mem_bytes=caps.mem_bytes, semaphores=caps.semaphores)
    lay = Layout(config=config)
    lay.check()
    return lay


@dataclass
class FuzzReport:
    """What a fuzz run did and found (``build/fuzz.json`` holds it)."""

    seed: int
    devices: list[str]
    commands: int = 0
    batches: int = 0
    segments: int = 0
    seconds: float = 0.0
    #: Seconds each device spent running events (the reference's and the others').
    device_seconds: dict[str, float] = field(default_factory=dict)
    #: Completions seen on the reference, by opcode name and status name.
    coverage: dict[str, dict[str, int]] = field(default_factory=dict)
    mismatch: str | None = None
    repro: str | None = None
    replay_command: str | None = None

    @property
    def ok(self) -> bool:
        return self.mismatch is None

    @property
    def commands_per_second(self) -> float:
        return self.commands / self.seconds if self.seconds else 0.0

    def summary(self) -> str:
        verdict = "0 mismatches" if self.ok else f"MISMATCH: {self.mismatch}"
        return (f"fuzz seed {self.seed} on {' vs '.join(self.devices)}: {self.commands} commands in {self.batches} "
                f"batches ({self.segments} segments), {self.seconds:.1f} s, {self.commands_per_second:.0f} "
                f"commands/s; {verdict}")

    def to_json(self) -> dict:
        return {**asdict(self), "ok": self.ok, "commands_per_second": round(self.commands_per_second, 1)}


def _name(code: int, enum: type) -> str:
    try:
        return enum(code).name
    except ValueError:
        return "undefined"


class _Run:
    """The state of one run: the devices' sessions, the segment's history, the counters."""

    def __init__(self, devices: Sequence[Device], names: Sequence[str], report: FuzzReport,
                 timeout: float):
        self.devices, self.names, self.report, self.timeout = devices, names, report, timeout
        self.coverage: Counter[tuple[str, str]] = Counter()
        self.sessions: list[Session] = []
        self.history: list[Event] = []

    def start_segment(self) -> None:
        for dev in self.devices:
            dev.reset()
        self.sessions = [Session(dev, RING_LOG2, timeout=self.timeout) for dev in self.devices]
        self.history = []

    def run(self, events: list[Event]) -> Mismatch | None:
        """Run ``events`` on every device; the first difference from the reference (device 0), or ``None``."""
        base = len(self.history)
        reference: list[Event] = []
        start = time.monotonic()
        ref = self.sessions[0]
        for position, event in enumerate(events):
            try:
                reference.append(ref.run(event))
            except (DeviceTimeout, DriverError) as e:
                self.history += reference
                return stuck(ref, base + position, event, e)
        self._spent(0, start)
        self.history += reference
        for c in (c for e in reference if isinstance(e, Wait) for c in e.completions or ()):
            self.coverage[_name(c.opcode, Opcode), _name(c.status, ErrorCode)] += 1
        for d in range(1, len(self.devices)):
            session = self.sessions[d]
            start = time.monotonic()
            try:
                for position, event in enumerate(events):
                    before = session.completed.get(getattr(event, "queue", -1), 0)
                    try:
                        seen = session.run(event)
                    except (DeviceTimeout, DriverError) as e:
                        return stuck(session, base + position, event, e)
                    mismatch = compare(session, base + position, reference[position], seen, before)
                    if mismatch is not None:
                        return mismatch
            finally:
                self._spent(d, start)
        # Every device agreed: the downloads are checked and a reproducer needs none of them.
        del self.history[base:]
        self.history += [e for e in reference if not isinstance(e, Download)]
        return None

    def _spent(self, d: int, start: float) -> None:
        seconds = self.report.device_seconds
        key = f"{d}:{self.names[d]}"
        seconds[key] = seconds.get(key, 0.0) + time.monotonic() - start


def fuzz(devices: Sequence[Device], names: Sequence[str], *, commands: int, seed: int,
         params: StreamParams | None = None, segment_commands: int = 5000, repro_dir: str | Path = "build",
         timeout: float = 60.0, progress: Callable[[str], None] | None = None) -> FuzzReport:
    """Run about ``commands`` random commands on every device; stop at the first difference.

    Parameters
    ----------
    devices, names:
        Open devices (the first is the reference) and their device strings (for messages and the
        replay command).
    commands:
        The command budget; the run stops after the batch that reaches it (plus each segment's
        setup and dump commands).
    seed:
        Seeds everything: segment ``s`` draws from ``numpy.random.default_rng([seed, s])``.
    params:
        How the batches are drawn (default :class:`~dx1_bringup.fuzz.generate.StreamParams`).
    segment_commands:
        Random commands per segment; each segment starts from a reset device (a reproducer is one).
    repro_dir:
        Where the reproducer capture goes.
    timeout:
        Seconds a device may go without a completion before it counts as stuck.
    progress:
        Called with a progress line every few seconds.

    Raises
    ------
    ValueError
        Fewer than two devices, or devices of different configurations, or a device the fuzzer cannot drive.
    """
    if len(devices) < 2 or len(devices) != len(names):
        raise ValueError(f"the fuzzer compares at least two devices, each with its name; got {len(devices)} devices "
                         f"and names {list(names)}")
    for dev, name in zip(devices[1:], names[1:], strict=True):
        if dev.caps != devices[0].caps:
            raise ValueError(f"device {name} ({dev.caps}) differs in configuration from the reference "
                             f"{names[0]} ({devices[0].caps})")
    if commands < 1 or segment_commands < 1:
        raise ValueError(f"the command budget and the commands per segment must be at least 1, not {commands} "
                         f"and {segment_commands}")
    params = StreamParams() if params is None else params
    lay = layout_for(devices[0].caps)
    report = FuzzReport(seed, list(names))
    run = _Run(devices, names, report, timeout)
    start = last = time.monotonic()
    mismatch = None
    while report.commands < commands and mismatch is None:
        rng = np.random.default_rng([seed, report.segments])
        run.start_segment()
        tags = [0, 0x8000]
        mismatch = run.run(setup_events(lay, rng, tags))
        in_segment = 0
        while mismatch is None and in_segment < segment_commands and report.commands < commands:
            events = batch_events(lay, rng, params, tags)
            mismatch = run.run(events)
            n = sum(len(getattr(e, "commands", ())) for e in events)
            in_segment += n
            report.commands += n
            report.batches += 1
            now = time.monotonic()
            if progress is not None and now - last >= PROGRESS_EVERY:
                last = now
                progress(f"fuzz: {report.commands}/{commands} commands, segment {report.segments}, "
                         f"{report.commands / (now - start):.0f} commands/s, "
                         f"{'0 mismatches' if mismatch is None else '1 mismatch'}")
        if mismatch is None:
            mismatch = run.run(dump_events(lay, tags))
        report.segments += 1
    report.seconds = time.monotonic() - start
    report.coverage = {}
    for (opcode, status), n in sorted(run.coverage.items()):
        report.coverage.setdefault(opcode, {})[status] = n
    if mismatch is not None:
        segment = report.segments - 1
        path = Path(repro_dir) / f"fuzz-repro-seed{seed}-segment{segment}.capture"
        path.parent.mkdir(parents=True, exist_ok=True)
        Capture(run.sessions[0].config(), RING_LOG2, run.history,
                note=f"fuzz seed {seed} segment {segment}: {names[0]} vs {', '.join(names[1:])}; {mismatch}"
                ).save(path)
        report.mismatch = str(mismatch)
        report.repro = str(path)
        report.replay_command = f"dx1 replay {path} --device {names[-1]}"
    return report


def record_stream(device: Device, commands: int, *, seed: int, params: StreamParams | None = None,
                  timeout: float = 60.0) -> Capture:
    """Segment 0 of seed ``seed``'s stream, with batches until it holds ``commands`` random commands, as a capture.

    The segment (setup, batches, dump; :mod:`dx1_bringup.fuzz.generate`) is recorded on ``device`` (reset
    here), so its waits and downloads hold what that device did; no other device runs it.

    Raises
    ------
    ValueError
        ``commands`` is below 1, or the fuzzer cannot drive the device.
    """
    if commands < 1:
        raise ValueError(f"a recorded stream needs at least 1 random command, not {commands}")
    params = StreamParams() if params is None else params
    lay = layout_for(device.caps)
    rng = np.random.default_rng([seed, 0])
    tags = [0, 0x8000]
    events = setup_events(lay, rng, tags)
    drawn = 0
    while drawn < commands:
        batch = batch_events(lay, rng, params, tags)
        drawn += sum(len(getattr(e, "commands", ())) for e in batch)
        events += batch
    events += dump_events(lay, tags)
    device.reset()
    return record(events, device, RING_LOG2, timeout=timeout,
                  note=f"fuzz seed {seed} segment 0: {drawn} random commands recorded on one device")


def write_report(report: FuzzReport, path: str | Path) -> None:
    """Write ``report`` as JSON to ``path``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report.to_json(), indent=1) + "\n")
