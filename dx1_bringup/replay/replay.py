"""Run a capture's events on a device, and replay a capture: the same completions and bytes, or the first difference.

:class:`Session` runs events one at a time on an open :class:`~dx1_driver.Device` and returns each as
observed there (a :class:`Wait` with the completions that came, a :class:`Download` with the bytes read),
so the same code records a stream (the fuzzer, the converter of old reproducers) and replays one.
:func:`replay` runs a whole capture and compares every observation with the recorded one.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from dx1_driver import CommandQueue, Device, DeviceTimeout, DriverError

from ..spec import COMMANDS, Opcode, unpack_command
from .capture import Capture, DmaWindow, Doorbell, Download, Event, Seen, Submit, Upload, Wait

__all__ = ["describe_command", "first_difference", "Session", "Mismatch", "ReplayResult", "compare", "stuck", "record",
           "replay"]

#: Seconds a wait may go without a completion before the replay calls the command stuck.
WAIT_TIMEOUT = 60.0


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
            return Wait(event.queue, tuple(Seen(c.index, c.tag, c.opcode, c.status) for c in done), event.by_tag)
        elif isinstance(event, Download):
            return Download(event.addr, event.length, dev.read_mem(event.addr, event.length))
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


def replay(capture: Capture, device: Device, *, timeout: float = WAIT_TIMEOUT) -> ReplayResult:
    """Re-execute ``capture`` on ``device`` (open and reset) and check every completion and downloaded byte.

    Raises
    ------
    CaptureError
        The device's configuration differs from the capture's.
    """
    session = Session(device, capture.ring_log2, timeout=timeout)
    capture.check_config(session.config())
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
