"""The capture file: a recorded session with a device, event by event, that any backend can replay.

A capture is a header and a list of events in the order the host did them:

* :class:`Upload`: bytes written to device memory;
* :class:`DmaWindow`: a queue's DMA window set to ``[base, limit)``;
* :class:`Submit`: 32-byte commands written into a queue's ring (not yet visible to the device);
* :class:`Doorbell`: the commands submitted since the last doorbell are published;
* :class:`Wait`: the host waited for completions of a queue (the oldest ones, or by tag) and saw these
  (index, tag, opcode, status);
* :class:`Download`: bytes read from device memory, with the bytes seen;
* :class:`RegWrite`: a register written by the program (a link window, a semaphore), not by the driver's queues.

A capture of several devices (the chips of a board, ``sim:chips=4``, or the ranks of a group) is one stream:
every event names its ``chip`` (the rank, 0 to N - 1; 0 is left out of the file), and the events of all chips
are in the one order the recorder heard them.  That order replays: :data:`AT_START` events are recorded as the
host starts them (whatever they cause comes after them), every other event when it has finished (whatever
follows it may depend on it), so a replay that starts each event once the one before it has reached that point
meets every dependency between the chips (:func:`dx1_bringup.replay.replay`).

The header names the format and its version, the spec version (:data:`dx1_bringup.spec.SPEC_VERSION`),
the device's configuration as the driver discovered it (its :class:`~dx1_driver.Capabilities`; of several
devices, chip 0's, and every chip's in rank order under ``chips``), and the log2 of the ring entries the
queues used (completion indices depend on it).

Encoding: JSON lines, UTF-8, one object a line, binary payloads in hex.  Lines make a capture
writable as it happens (a crashed run leaves every event before the crash), readable with ``grep`` and
a text diff, and checkable line by line; hex doubles the payload, which is fine for captures of
command streams (a megabyte of device memory is two megabytes of text).  The first line is the
header; the last is a trailer with the number of events and the SHA-256 of every byte before it, so
a capture that ends early is *truncated* (no trailer, or fewer events than it says) and one whose
bytes changed is *corrupted* (the digest differs, or a line is not an event): :func:`load_capture`
says which, and refuses a capture of another format version or spec version.  A capture from another
configuration is refused by :func:`Capture.check_config` (which :func:`~dx1_bringup.replay.replay`
calls) with the fields that differ.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ..spec import COMMAND_BYTES, SPEC_VERSION

__all__ = ["FORMAT", "FORMAT_VERSION", "AT_START", "CaptureError", "Upload", "DmaWindow", "Submit", "Doorbell",
           "Wait", "Seen", "Download", "RegWrite", "Event", "Capture", "CaptureWriter", "load_capture"]

#: The format's name, in every header.
FORMAT = "dx1-capture"
#: Bumped whenever a reader of the previous version could misread a capture of this one: 2 added the
#: ``chip`` of every event, the ``chips`` of the header and :class:`RegWrite`.
FORMAT_VERSION = 2
#: Format versions this reader reads (a version 1 capture is one chip's, without register writes).
READABLE_FORMATS = (1, FORMAT_VERSION)
#: Spec versions whose captures replay here: 1.3 and 1.4 only added commands, registers and error codes to
#: 1.2 (1.1's command fields were renamed by 1.2, so its captures are refused).
READABLE_SPECS = (0x0001_0002, 0x0001_0003, SPEC_VERSION)


class CaptureError(ValueError):
    """A capture file that cannot be replayed here; the message says why (truncated, corrupted, version, ...)."""


@dataclass(frozen=True)
class Upload:
    """``data`` written to device memory at ``addr``."""

    addr: int
    data: bytes
    chip: int = 0
    kind = "upload"


@dataclass(frozen=True)
class DmaWindow:
    """Queue ``queue``'s DMA window set to bytes ``[base, limit)``."""

    queue: int
    base: int
    limit: int
    chip: int = 0
    kind = "dma_window"


@dataclass(frozen=True)
class Submit:
    """``commands`` (32 bytes each) written into queue ``queue``'s ring, published by the next :class:`Doorbell`."""

    queue: int
    commands: tuple[bytes, ...]
    chip: int = 0
    kind = "submit"

    def __post_init__(self) -> None:
        for i, cmd in enumerate(self.commands):
            if len(cmd) != COMMAND_BYTES:
                raise CaptureError(f"submit to queue {self.queue}: command {i} is {len(cmd)} bytes, "
                                   f"not {COMMAND_BYTES}")


@dataclass(frozen=True)
class Doorbell:
    """Queue ``queue``'s doorbell: the device may run everything submitted to it."""

    queue: int
    chip: int = 0
    kind = "doorbell"


@dataclass(frozen=True)
class Seen:
    """One completion as the host saw it (the timestamp is left out: it differs between backends)."""

    index: int
    tag: int
    opcode: int
    status: int


@dataclass(frozen=True)
class Wait:
    """The host waited for queue ``queue``'s completions and saw ``completions``, in ring order.

    ``completions`` is ``None`` in a stream not yet run (the fuzzer's): wait for everything outstanding.
    ``by_tag``: the host asked for these completions' tags (the oldest outstanding completion of each),
    not for the oldest ``len(completions)``.
    """

    queue: int
    completions: tuple[Seen, ...] | None
    by_tag: bool = False
    chip: int = 0
    kind = "wait"


@dataclass(frozen=True)
class Download:
    """``length`` bytes read from device memory at ``addr``; ``data`` is what was seen (``None``: not yet run)."""

    addr: int
    length: int
    data: bytes | None
    chip: int = 0
    kind = "download"


@dataclass(frozen=True)
class RegWrite:
    """``value`` written to the register at byte address ``addr`` of the register space (block base + offset)."""

    addr: int
    value: int
    chip: int = 0
    kind = "reg_write"


Event = Upload | DmaWindow | Submit | Doorbell | Wait | Download | RegWrite
_KINDS: dict[str, type] = {cls.kind: cls for cls in (Upload, DmaWindow, Submit, Doorbell, Wait, Download, RegWrite)}
#: The events recorded as the host starts them; every other kind is recorded when it has finished.
AT_START = (Submit, Doorbell, RegWrite)


def _encode(event: Event) -> dict[str, Any]:
    obj = _encode_fields(event)
    if event.chip:
        obj["chip"] = event.chip
    return obj


def _encode_fields(event: Event) -> dict[str, Any]:
    if isinstance(event, Upload):
        return {"kind": event.kind, "addr": event.addr, "data": event.data.hex()}
    if isinstance(event, Submit):
        return {"kind": event.kind, "queue": event.queue, "commands": [c.hex() for c in event.commands]}
    if isinstance(event, Wait):
        if event.completions is None:
            raise CaptureError(f"a wait on queue {event.queue} without the completions seen cannot be written; "
                               f"run the stream first (replay.execute)")
        return {"kind": event.kind, "queue": event.queue,
                "completions": [[c.index, c.tag, c.opcode, c.status] for c in event.completions],
                **({"by_tag": True} if event.by_tag else {})}
    if isinstance(event, Download):
        if event.data is None:
            raise CaptureError(f"a download of {event.length} bytes at 0x{event.addr:x} without the bytes seen "
                               f"cannot be written; run the stream first (replay.execute)")
        return {"kind": event.kind, "addr": event.addr, "length": event.length, "data": event.data.hex()}
    return {"kind": event.kind, **{k: v for k, v in asdict(event).items() if k != "chip"}}


def _decode(obj: dict[str, Any], chips: int) -> Event:
    kind = obj.pop("kind")
    chip = obj.get("chip", 0)
    if not isinstance(chip, int) or not 0 <= chip < chips:
        raise ValueError(f"chip {chip!r} is not one of the capture's {chips} chip(s)")
    if kind == "upload":
        return Upload(obj["addr"], bytes.fromhex(obj["data"]), chip)
    if kind == "submit":
        return Submit(obj["queue"], tuple(bytes.fromhex(c) for c in obj["commands"]), chip)
    if kind == "wait":
        return Wait(obj["queue"], tuple(Seen(*c) for c in obj["completions"]), bool(obj.get("by_tag", False)), chip)
    if kind == "download":
        data = bytes.fromhex(obj["data"])
        if len(data) != obj["length"]:
            raise ValueError(f"download holds {len(data)} bytes but says {obj['length']}")
        return Download(obj["addr"], obj["length"], data, chip)
    if kind not in _KINDS:
        raise ValueError(f"unknown event kind {kind!r}; expected one of {sorted(_KINDS)}")
    return _KINDS[kind](**obj)


@dataclass
class Capture:
    """A header and its events.

    Attributes
    ----------
    config:
        The device's capabilities as discovered (:func:`dataclasses.asdict` of
        :class:`~dx1_driver.Capabilities`).
    ring_log2:
        Log2 of the ring entries of every queue.
    spec_version:
        The spec version it was recorded with.
    note:
        Free text: where the capture came from.
    chip_configs:
        Recorded on several devices: every chip's capabilities, in rank order (``config`` is chip 0's);
        empty for one device.
    """

    config: dict[str, Any]
    ring_log2: int
    events: list[Event] = field(default_factory=list)
    spec_version: int = SPEC_VERSION
    note: str = ""
    chip_configs: list[dict[str, Any]] = field(default_factory=list)

    @property
    def chips(self) -> int:
        """The devices it was recorded on."""
        return max(1, len(self.chip_configs))

    def configs(self) -> list[dict[str, Any]]:
        """Every chip's capabilities, in rank order."""
        return list(self.chip_configs) or [self.config]

    def header(self) -> dict[str, Any]:
        header = {"format": FORMAT, "format_version": FORMAT_VERSION, "spec_version": self.spec_version,
                  "config": self.config, "ring_log2": self.ring_log2, "note": self.note}
        if self.chips > 1:
            header["chips"] = self.chip_configs
        return header

    def check_config(self, config: dict[str, Any], where: str = "this device", *, chip: int = 0) -> None:
        """Refuse to replay chip ``chip`` on a device of another configuration.

        Raises
        ------
        CaptureError
            ``config`` (capabilities as a dict) differs from the capture's; the message names each field.
        """
        want = self.configs()[chip]
        differ = [f"{k} {want.get(k)!r} in the capture, {config.get(k)!r} on {where}"
                  for k in sorted(set(want) | set(config)) if want.get(k) != config.get(k)]
        if differ:
            raise CaptureError(f"the capture was recorded on another configuration: {'; '.join(differ)}")

    def save(self, path: str | Path) -> None:
        """Write the capture to ``path`` (see the module docstring for the encoding)."""
        with CaptureWriter(path, self.configs(), self.ring_log2, note=self.note) as writer:
            for event in self.events:
                writer.write(event)

    @property
    def commands(self) -> int:
        """Commands submitted, over every queue."""
        return sum(len(e.commands) for e in self.events if isinstance(e, Submit))


class CaptureWriter:
    """Writes a capture a line at a time, so a run that stops leaves every event before it.

    ``configs`` is every chip's capabilities in rank order (one for one device).  Use as a context manager;
    :meth:`close` writes the trailer that makes the capture complete.  :meth:`write` may be called from
    several threads (the ranks of a group): each event is one whole line, in the order the calls took the lock.
    """

    def __init__(self, path: str | Path, configs: list[dict[str, Any]], ring_log2: int, *, note: str = ""):
        if not configs:
            raise ValueError("a capture needs the configuration of at least one chip")
        self.path = Path(path)
        self.chips = len(configs)
        self._file = self.path.open("wb")
        self._digest = hashlib.sha256()
        self._events = 0
        self._lock = threading.Lock()
        self._line(Capture(configs[0], ring_log2, note=note,
                           chip_configs=list(configs) if len(configs) > 1 else []).header())

    def _line(self, obj: dict[str, Any]) -> None:
        data = (json.dumps(obj, separators=(",", ":")) + "\n").encode()
        self._digest.update(data)
        self._file.write(data)

    def write(self, event: Event) -> None:
        if not 0 <= event.chip < self.chips:
            raise CaptureError(f"an event of chip {event.chip} in a capture of {self.chips} chip(s)")
        with self._lock:
            self._line(_encode(event))
            self._events += 1

    def write_all(self, events: Iterable[Event]) -> None:
        for event in events:
            self.write(event)

    def close(self) -> None:
        with self._lock:
            if self._file.closed:
                return
            trailer = {"kind": "end", "events": self._events, "sha256": self._digest.hexdigest()}
            self._file.write((json.dumps(trailer, separators=(",", ":")) + "\n").encode())
            self._file.close()

    def __enter__(self) -> CaptureWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def load_capture(path: str | Path) -> Capture:
    """Read and check a capture.

    Raises
    ------
    CaptureError
        The file is not a capture, is truncated (no trailer, or fewer events than the trailer counts),
        corrupted (the SHA-256 differs, or a line is no event), of another format version, or recorded
        with another spec version.
    """
    path = Path(path)
    raw = path.read_bytes()
    lines = raw.splitlines(keepends=True)
    if not lines:
        raise CaptureError(f"{path}: empty file, not a {FORMAT} capture")
    try:
        header = json.loads(lines[0])
    except ValueError:
        raise CaptureError(f"{path}: the first line is not JSON, so this is not a {FORMAT} capture (or its header "
                           f"is corrupted)") from None
    if not isinstance(header, dict) or header.get("format") != FORMAT:
        raise CaptureError(f"{path}: not a {FORMAT} capture (header format is "
                           f"{header.get('format') if isinstance(header, dict) else header!r})")
    if header.get("format_version") not in READABLE_FORMATS:
        raise CaptureError(f"{path}: capture format version {header.get('format_version')!r}, but this reader "
                           f"reads versions {', '.join(map(str, READABLE_FORMATS))}")
    if header.get("spec_version") not in READABLE_SPECS:
        got = header.get("spec_version")
        got_text = f"{got >> 16}.{got & 0xFFFF}" if isinstance(got, int) else repr(got)
        raise CaptureError(f"{path}: the capture was recorded with spec version {got_text}, but this framework "
                           f"implements spec {SPEC_VERSION >> 16}.{SPEC_VERSION & 0xFFFF}")
    trailer = None
    if lines[-1].endswith(b"\n"):
        try:
            last = json.loads(lines[-1])
        except ValueError:
            last = None
        if isinstance(last, dict) and last.get("kind") == "end":
            trailer = last
    body = lines[1:-1] if trailer is not None else lines[1:]
    if trailer is None:
        raise CaptureError(f"{path}: truncated: it ends after {len(body)} event lines without the trailer "
                           f"(a capture ends with an 'end' line)")
    if trailer.get("events") != len(body):
        raise CaptureError(f"{path}: truncated or corrupted: the trailer counts {trailer.get('events')} events, "
                           f"the file holds {len(body)}")
    digest = hashlib.sha256(b"".join(lines[:-1])).hexdigest()
    if digest != trailer.get("sha256"):
        raise CaptureError(f"{path}: corrupted: the SHA-256 of its contents is {digest}, the trailer says "
                           f"{trailer.get('sha256')}")
    chip_configs = header.get("chips", [])
    if not isinstance(chip_configs, list) or len(chip_configs) == 1 or \
            not all(isinstance(c, dict) for c in chip_configs):
        raise CaptureError(f"{path}: corrupted header: 'chips' must list the configuration of every chip (two or "
                           f"more), not {chip_configs!r}")
    chips = max(1, len(chip_configs))
    events: list[Event] = []
    for n, line in enumerate(body, start=2):
        try:
            events.append(_decode(json.loads(line), chips))
        except (ValueError, KeyError, TypeError) as e:
            raise CaptureError(f"{path}: corrupted: line {n} is not a valid event ({e})") from None
    return Capture(header["config"], header["ring_log2"], events, header["spec_version"], header.get("note", ""),
                   chip_configs)
