"""Run a capture's events on a device, and replay a capture: the same completions and bytes, or the first difference.

:class:`Session` runs events one at a time on an open :class:`~dx1_driver.Device` and returns each as
observed there (a :class:`Wait` with the completions that came, a :class:`Download` with the bytes read),
so the same code records a stream (the fuzzer, the converter of old reproducers) and replays one.
:func:`replay` runs a whole capture and compares every observation with the recorded one.

A capture of several chips replays on as many devices, one thread a chip, each running its chip's events
in order; an event starts only once the event before it in the capture (of any chip) has reached the point
where it was recorded (started, for :data:`~.capture.AT_START` kinds; finished, for the others).  That keeps
every order the recording had between the chips, over the link or through the host, while a chip that
waits on the device (a full ring, a WAIT for a peer's SEND) does not hold up the chips it waits for.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

from dx1_driver import CommandQueue, Device, DeviceTimeout, DriverError

from ..spec import COMMANDS, Opcode, unpack_command
from .capture import (
    AT_START,
    Capture,
    CaptureError,
    DmaWindow,
    Doorbell,
    Download,
    Event,
    RegWrite,
    Seen,
    Submit,
    Upload,
    Wait,
)

__all__ = ["describe_command", "first_difference", "Session", "Mismatch", "ReplayResult", "compare", "stuck", "record",
           "replay"]

#: Seconds a wait may go without a completion before the replay calls the command stuck.
WAIT_TIMEOUT = 60.0
#: Seconds a failed replay of several chips still waits for the other chips' threads to stop.
_GRACE = 2.0


def describe_command(cmd: bytes) -> str:
    """A command decoded field by field through the spec, for example ``LOAD tag=3 flags=0x1 mem_addr=0x12000 ...``."""
    opcode, fields = unpack_command(cmd)
    try:
        name = Opcode(opcode).name
    except ValueError:
        name = f"opcode 0x{opcode:02x} (undefined)"
    spec = COMMANDS.get(opcode)
    reserved = int.from_bytes(cmd, "little") & spec.reserved_mask if spec is not None else 0
    parts = [f"{k}={v:#x}" if k in ("flags",) or k.endswith("_addr") or k.endswith("stride") else f"{k}={v}"
             for k, v in fields.items() if k != "opcode"]
    if reserved:
        parts.append(f"reserved_bits={reserved:#x}")
    return f"{name} {' '.join(parts)}"


def first_difference(expected: bytes, got: bytes, addr: int = 0, context: int = 8) -> str:
    """Where two byte strings first differ, with up to ``context`` bytes of each from there, in hex."""
    n = min(len(expected), len(got))
    i = next((k for k in range(n) if expected[k] != got[k]), n)
    if i == n and len(expected) == len(got):
        return "no difference"
    differ = sum(a != b for a, b in zip(expected, got, strict=False)) + abs(len(expected) - len(got))
    return (f"first difference at 0x{addr + i:x} (offset {i}): expected {expected[i:i + context].hex(' ')}, "
            f"got {got[i:i + context].hex(' ')} ({differ} of {max(len(expected), len(got))} bytes differ)")


class Session:
    """Events run on one device, with the state between them (queues, commands awaiting a doorbell).

    Parameters
    ----------
    device:
        An open device, reset (every queue at ring index 0).
    ring_log2:
        Log2 of the ring entries of every queue it opens.
    timeout:
        Seconds a doorbell's submission or a wait may go without progress.

    Attributes
    ----------
    commands:
        Per queue, every command published so far, in order: completion ``k`` of a queue belongs to
        ``commands[queue][k]``.
    completed:
        Per queue, how many completions were collected.
    """

    def __init__(self, device: Device, ring_log2: int, *, timeout: float = WAIT_TIMEOUT):
        self.device = device
        self.ring_log2 = ring_log2
        self.timeout = timeout
        self.pending: dict[int, list[bytes]] = {}
        self.commands: dict[int, list[bytes]] = {}
        self.completed: dict[int, int] = {}
        # Every queue opened now, in tile order, as the Recorder does: the rings land at the same addresses.
        for tile in range(device.caps.tiles):
            self.queue(tile)

    def queue(self, tile: int) -> CommandQueue:
        """Tile ``tile``'s queue, opened with the session's ring size on first use."""
        self.commands.setdefault(tile, [])
        self.completed.setdefault(tile, 0)
        return self.device.queue(tile, ring_log2=self.ring_log2)

    def run(self, event: Event) -> Event:
        """Run ``event``; return it as observed on this device.

        Raises
        ------
        DeviceTimeout, DriverError
            From the driver: a completion that never came, a lost or duplicated one.
        """
        dev = self.device
        if isinstance(event, Upload):
            dev.write_mem(event.addr, event.data)
        elif isinstance(event, DmaWindow):
            self.queue(event.queue).set_dma_window(event.base, event.limit)
        elif isinstance(event, Submit):
            self.queue(event.queue)
            self.pending.setdefault(event.queue, []).extend(event.commands)
        elif isinstance(event, Doorbell):
            todo = self.pending.pop(event.queue, [])
            q = self.queue(event.queue)
            self.commands[event.queue].extend(todo)
            q.submit(todo, timeout=self.timeout)
        elif isinstance(event, Wait):
            q = self.queue(event.queue)
            if event.completions is None:
                what: int | list[int] | None = None
            elif event.by_tag:
                what = [c.tag for c in event.completions]
            else:
                what = len(event.completions)
            done = q.wait(what, timeout=self.timeout, check=False)
            self.completed[event.queue] += len(done)
            return Wait(event.queue, tuple(Seen(c.index, c.tag, c.opcode, c.status) for c in done), event.by_tag,
                        event.chip)
        elif isinstance(event, Download):
            return Download(event.addr, event.length, dev.read_mem(event.addr, event.length), event.chip)
        elif isinstance(event, RegWrite):
            dev.write_reg(0, event.addr, event.value)
        else:
            raise TypeError(f"not a capture event: {event!r}")
        return event

    def config(self) -> dict[str, Any]:
        """The device's capabilities, as a capture header holds them."""
        return asdict(self.device.caps)


@dataclass(frozen=True)
class Mismatch:
    """The first event whose observation differs from the capture.

    Attributes
    ----------
    event:
        Its position among the capture's events (0-based).
    kind:
        The event's kind (``wait``, ``download``, ...).
    message:
        What differs, in a sentence: for a completion the command decoded field by field, for bytes the
        first difference.
    command:
        The command involved (a completion's, or the one that never completed), if any.
    """

    event: int
    kind: str
    message: str
    command: bytes | None = None

    def __str__(self) -> str:
        return f"event {self.event} ({self.kind}): {self.message}"


@dataclass(frozen=True)
class ReplayResult:
    """What a replay found: ``mismatch`` is ``None`` when every completion and byte agreed."""

    events: int
    commands: int
    mismatch: Mismatch | None

    @property
    def ok(self) -> bool:
        return self.mismatch is None


def compare(session: Session, position: int, recorded: Event, seen: Event, before: int) -> Mismatch | None:
    """The difference between a recorded observation and the one ``session`` just made, or ``None``.

    ``before`` is how many completions the event's queue had collected before this wait.
    """
    if isinstance(recorded, Wait) and isinstance(seen, Wait) and recorded.completions is not None:
        for k, (want, got) in enumerate(zip(recorded.completions, seen.completions or (), strict=False)):
            if want != got:
                cmd = session.commands[recorded.queue][before + k]
                differ = ", ".join(f"{name} {getattr(want, name)} expected, {getattr(got, name)} seen"
                                   for name in ("index", "tag", "opcode", "status")
                                   if getattr(want, name) != getattr(got, name))
                return Mismatch(position, recorded.kind, f"queue {recorded.queue} completion {before + k} "
                                f"({differ}) of command {describe_command(cmd)}", cmd)
        if len(recorded.completions) != len(seen.completions or ()):
            return Mismatch(position, recorded.kind, f"queue {recorded.queue}: {len(recorded.completions)} "
                            f"completions expected, {len(seen.completions or ())} seen")
    if isinstance(recorded, Download) and isinstance(seen, Download) and recorded.data is not None \
            and recorded.data != seen.data:
        return Mismatch(position, recorded.kind, f"download of {recorded.length} bytes at 0x{recorded.addr:x}: "
                        f"{first_difference(recorded.data, seen.data or b'', recorded.addr)}")
    return None


def stuck(session: Session, position: int, event: Event, error: Exception) -> Mismatch:
    """The mismatch of an event the device did not finish (a timeout or a completion the driver refused)."""
    cmd = None
    if isinstance(event, Wait | Doorbell):
        q = event.queue
        index = session.completed.get(q, 0)
        # Completions arrive in order: the first one not collected yet belongs to the oldest stuck command.
        # Only a device that still answers is asked (after a link error, the next request may hang as well).
        if isinstance(error, DeviceTimeout):
            try:
                index += session.queue(q).poll()
            except DriverError:
                index = None
        if index is not None and index < len(session.commands.get(q, [])):
            cmd = session.commands[q][index]
    what = f"; the oldest command without its completion is {describe_command(cmd)}" if cmd is not None else ""
    return Mismatch(position, event.kind, f"{type(error).__name__}: {error}{what}", cmd)


def record(events: list[Event], device: Device, ring_log2: int, *, note: str = "",
           timeout: float = WAIT_TIMEOUT) -> Capture:
    """Run ``events`` on ``device`` (open and reset) and return them as a capture of what it saw there."""
    session = Session(device, ring_log2, timeout=timeout)
    return Capture(session.config(), ring_log2, [session.run(e) for e in events], note=note)


def replay(capture: Capture, devices: Device | Sequence[Device], *, timeout: float = WAIT_TIMEOUT) -> ReplayResult:
    """Re-execute ``capture`` on ``devices`` (open and reset: one device, or one a chip of the capture in rank
    order, as ``Device.open_board`` opens a board) and check every completion and downloaded byte.

    Raises
    ------
    CaptureError
        The number of devices or a device's configuration differs from the capture's.
    """
    devs = [devices] if isinstance(devices, Device) else list(devices)
    if len(devs) != capture.chips:
        raise CaptureError(f"the capture was recorded on {capture.chips} chip(s), but {len(devs)} device(s) were "
                           f"given to replay it on")
    sessions = [Session(dev, capture.ring_log2, timeout=timeout) for dev in devs]
    for chip, session in enumerate(sessions):
        capture.check_config(session.config(), f"{devs[chip].name} (chip {chip})" if len(devs) > 1
                             else "this device", chip=chip)
    if len(sessions) > 1:
        return _Board(capture, sessions).run()
    session = sessions[0]
    for position, event in enumerate(capture.events):
        before = session.completed.get(getattr(event, "queue", -1), 0)
        try:
            seen = session.run(event)
        except (DeviceTimeout, DriverError) as e:
            return ReplayResult(position + 1, capture.commands, stuck(session, position, event, e))
        mismatch = compare(session, position, event, seen, before)
        if mismatch is not None:
            return ReplayResult(position + 1, capture.commands, mismatch)
    return ReplayResult(len(capture.events), capture.commands, None)


class _Board:
    """A capture of several chips replayed: one thread a chip, each event started in the capture's order once the
    one before it reached its recording point (see the module docstring); the first failure stops every chip."""

    def __init__(self, capture: Capture, sessions: list[Session]):
        self.capture = capture
        self.sessions = sessions
        self.released = 0  # events 0 .. released - 1 have reached their recording point
        self.failed: Mismatch | None = None
        self.cond = threading.Condition()
        # A chip waits for its turn no longer than the event before it may take, and a little more.
        self.turn_timeout = sessions[0].timeout + 5.0

    def run(self) -> ReplayResult:
        events = self.capture.events
        threads = [threading.Thread(target=self._chip, args=(chip,), name=f"dx1-replay-chip{chip}", daemon=True)
                   for chip in range(len(self.sessions))]
        for thread in threads:
            thread.start()
        with self.cond:
            while self.failed is None and self.released < len(events) and any(t.is_alive() for t in threads):
                self.cond.wait(1.0)
        deadline = time.monotonic() + (_GRACE if self.failed is not None else self.turn_timeout)
        for thread in threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        if self.failed is not None:
            return ReplayResult(self.failed.event + 1, self.capture.commands, self.failed)
        return ReplayResult(len(events), self.capture.commands, None)

    def _release(self, position: int) -> None:
        with self.cond:
            self.released = max(self.released, position + 1)
            self.cond.notify_all()

    def _fail(self, chip: int, mismatch: Mismatch) -> None:
        mismatch = replace(mismatch, message=f"chip {chip}: {mismatch.message}")
        with self.cond:
            if self.failed is None or mismatch.event < self.failed.event:
                self.failed = mismatch
            self.cond.notify_all()

    def _turn(self, chip: int, position: int) -> bool:
        """Wait until event ``position`` may start; False if the replay failed (or the turn never came)."""
        with self.cond:
            waited = self.released
            deadline = time.monotonic() + self.turn_timeout
            while self.failed is None and self.released < position:
                left = deadline - time.monotonic()
                if self.released != waited:
                    waited, deadline = self.released, time.monotonic() + self.turn_timeout
                elif left <= 0:
                    break
                self.cond.wait(max(0.0, left))
            if self.failed is not None:
                return False
            if self.released >= position:
                return True
        kind = self.capture.events[self.released].kind
        self._fail(chip, Mismatch(position, self.capture.events[position].kind,
                                  f"its turn did not come within {self.turn_timeout:g} s: event {self.released} "
                                  f"({kind}) has not reached its recording point"))
        return False

    def _chip(self, chip: int) -> None:
        session = self.sessions[chip]
        for position, event in enumerate(self.capture.events):
            if event.chip != chip:
                continue
            if not self._turn(chip, position):
                return
            at_start = isinstance(event, AT_START)
            if at_start:
                self._release(position)
            before = session.completed.get(getattr(event, "queue", -1), 0)
            try:
                seen = session.run(event)
            except (DeviceTimeout, DriverError) as e:
                self._fail(chip, stuck(session, position, event, e))
                return
            except Exception as e:  # a refused argument (an address outside memory, ...): the replay fails
                self._fail(chip, Mismatch(position, event.kind, f"{type(e).__name__}: {e}"))
                return
            mismatch = compare(session, position, event, seen, before)
            if mismatch is not None:
                self._fail(chip, mismatch)
                return
            if not at_start:
                self._release(position)
