"""The serial transport: a DX-1 board behind its UART bridge (USB-UART cable, or any pyserial URL).

Nothing here has run against hardware yet: the bridge is being built to the
framing below, and every test so far talks to :class:`ModelBridge`, the
Python implementation of the bridge side in this module.

Wire protocol
-------------
All multi-byte fields are big-endian.  The constants live here, in one place,
so that a test can cross-check them against the gateware's.

==============================  ==========  ===============================================================
Constant                        Value       Meaning
==============================  ==========  ===============================================================
``UARTBONE_WRITE``              ``0x01``    ``[0x01, n, addr_word(4), n words(4 each)]``; no answer
``UARTBONE_READ``               ``0x02``    ``[0x02, n, addr_word(4)]``, answered by n words
``UARTBONE_MAX_WORDS``          ``255``     largest ``n`` of one UARTBone frame (``n`` is one byte)
``AXI_ERROR_WORD``              ``0xFFFFFFFF``  what a UARTBone read word carries after an AXI error
``REG_BASE``                    ``0x0``     byte address of register offset 0 (``addr_word = byte >> 2``)
``REG_BYTES``                   ``0x10000`` size of the register space
``MEM_BASE``                    ``0x80000000``  byte address of device-memory offset 0
``BURST_WRITE``                 ``0x81``    header, payload, ``crc32(payload)``; answered by one status byte
``BURST_READ``                  ``0x82``    header; answered by a status byte, then if ACK payload and its CRC
``BURST_HEADER``                ``">BII"``  ``[cmd, byte_addr(4), length(4)]``, followed by ``crc32`` of those 9 bytes
``BURST_MAX_PAYLOAD``           ``4096``    largest ``length`` of one burst
``REG_WRITE``                   ``0x83``    ``[0x83, byte_addr(4), n, n words(4 each), crc32]``; one status byte back
``REG_READ``                    ``0x84``    ``[0x84, byte_addr(4), n, crc32]``; status, then if ACK n words and CRC
``REG_MAX_WORDS``               ``255``     largest ``n`` of one register frame (``n`` is one byte, 0 is refused)
``STATUS_ACK``                  ``0x00``    done
``STATUS_NAK_CRC``              ``0x01``    header or payload CRC wrong; nothing written
``STATUS_NAK_RANGE``            ``0x02``    address or length refused
``STATUS_BUS_ERROR``            ``0x03``    the AXI bus answered an error
==============================  ==========  ===============================================================

CRC-32 is :func:`zlib.crc32` (IEEE 802.3, reflected, initial and final XOR ``0xFFFFFFFF``).  A register
frame's CRC covers every byte before it, command byte included; a burst's header CRC covers the header's
first 9 bytes and its payload CRC the payload alone.

Register traffic: CRC register frames (the default) or UARTBone
---------------------------------------------------------------
By default (``regs="crc"``) registers move in CRC register frames: the
bridge writes nothing unless the frame's CRC checks, answers every write with
a status byte, and answers a read with a status byte and the words with their
own CRC, so a corrupted register access is retried like a burst and a read
never returns a wrong value.  Words are at consecutive addresses, 1 to
``REG_MAX_WORDS`` a frame, inside the register space, word-aligned; anything
else is ``STATUS_NAK_RANGE``.  After ``STATUS_NAK_CRC`` the bridge ignores the
line until it has been quiet (the frame's bytes may have shifted).

Register writes keep most of the speed of posted UARTBone writes: a write is
sent at once and the transport goes on without waiting; its status is read,
and checked, by the next exchange that waits for an answer anyway (a register
read, a memory access), whose answers follow the statuses on the line.  The
bridge answers a write with a single byte and never stalls on it, so any number
of write frames can go ahead of a read; the transport waits for the statuses on
its own (a round trip counted in ``LinkStats.write_flushes``) only after
``MAX_POSTED_WRITES`` writes in a row, in :meth:`SerialTransport.flush` and on
close.  If any answer of such an exchange is wrong or missing, the exchange is
retried after a resynchronisation, the unconfirmed writes first, in their
order.  So a write's failure is reported by the exchange that collects its
status (as :class:`TransportError`, after the retries).  The bridge runs frames
in the order they arrive (after a bad CRC it drops the rest of the window), so
a read or memory access runs after the writes issued ahead of it, and its
answer is accepted only if all their statuses are ACKs.

A retried write is written again: a lost status may mean that the write was
done.  Every register the driver writes takes that: values are absolute
(``DOORBELL`` takes the absolute ring index, ``RING_BASE``, ``CONTROL`` and the
masks are plain values) and ``IRQ_STATUS`` is write-one-to-clear, so a second
write changes nothing.  A retried read is read again, with its side effects:
``CYCLES_LO`` latches ``CYCLES_HI`` again (read both in one frame, with
:meth:`~SerialTransport.read_u32s`, to get a consistent pair), and a TRACE
``DATA_HI`` read whose answer was lost pops a second event, so the event whose
answer was lost is gone (the value returned is always one the device gave,
never a corrupted one).  An AXI error is ``STATUS_BUS_ERROR``; the transport
raises :class:`TransportError` once the same exchange has drawn it twice in a
row (a single one may be a NAK_CRC with a flipped bit).

Residual risks: the status byte has no check, so a flipped bit can turn a
``STATUS_NAK_CRC`` into ``STATUS_ACK`` and a doubled ACK can stand in for a
frame whose command byte was lost (each needs two faults, about 1e-7 a frame
at 1e-4); unconfirmed writes sent back to back can reach the registers out of
order when a frame's command byte is lost and a later frame is still taken
(the retry then writes them again in order); and a lost command byte makes the
bridge read the frame's address bytes as commands (see the last section).

With ``regs="uartbone"`` registers move in LiteX's UARTBone frames, for a
bridge that speaks only those.  They carry no CRC: a flipped bit in a register
read's answer returns a wrong value, and a register write has no answer at all,
so a corrupted or lost write goes unseen.  The transport detects what the
framing allows: a read whose answer is short (lost bytes: timeout) or followed
by extra bytes (duplicated bytes, or a desynchronised bridge) is retried after
a resynchronisation, and ``MEM_BYTES`` is read twice at open.  Retrying a read
repeats its side effects as above.  A register read of ``0xFFFFFFFF`` is
ambiguous: it is either the value or an AXI error; no register of the map
reads all ones in normal operation except perhaps ``GLOBAL.SCRATCH``.

Memory traffic is protected
---------------------------
Device memory moves in CRC bursts of at most ``BURST_MAX_PAYLOAD`` bytes.
Several bursts go out back to back (a *window*) before their answers are read,
so that the cable's latency is paid once per window, not per burst.  How many
is set by the bridge: while it sends an answer it takes no byte from the line,
and its receive FIFO (``BRIDGE_RX_FIFO``, 16 bytes) holds what arrives
meanwhile, so a read window is two bursts (the second 13-byte header waits in
the FIFO while the first is answered; a third would overflow it and be lost),
a verified write window one burst, and a plain write window, whose answers
are single status bytes, eight bursts (``MAX_WINDOW``).  A window
is committed only when every answer is an ACK (with a good payload CRC for
reads) and nothing more arrived: a header the bridge never recognised leaves
one answer missing, so the whole window fails instead of an answer being
matched to the wrong burst.  A failed window is retried from its start after
a resynchronisation (flush the input, then wait until the line stays quiet for
``quiet`` seconds, longer than the bridge's inter-byte timeout after which it
drops a partial frame; LiteX's UARTBone uses 100 ms), with a smaller window:
the window shrinks to a single small burst on failures and grows back on
success, so that a noisy line still gets data through.  Bursts are idempotent
(writes of the same bytes to the same addresses, reads of memory), so redoing
a window is safe.  After ``retries`` retries of one window without progress
the transport raises :class:`TransportError` naming the last failure.  A read
whose payload CRC fails is never returned.

The status byte has no check: one flipped bit turns ``STATUS_NAK_CRC`` (0x01)
or ``STATUS_NAK_RANGE`` (0x02) into ``STATUS_ACK`` (0x00), and a doubled ACK
can stand in for a burst the bridge never saw, so an ACK alone does not prove
a write.  With ``verify_writes`` (the default) each write burst is followed in
the same window by a read burst of the same range, and the window commits only
if the CRC-checked read-back equals the data.  The line is full duplex but the
bridge is not: while it sends an answer it takes no byte, so the next write
burst must wait for the read-back, and a verified write moves at about half
the line rate (49% at 6.25 Mbaud in `make bench`, against 99% unverified).

Residual risks of the bursts, all of them from the framing: the burst commands differ from
the UARTBone ones only in bit 7 (0x81/0x01, 0x82/0x02), so one flipped bit makes
a burst header a UARTBone frame whose address is built from the burst's
address and length bytes (``byte_addr[23:0] << 10``: inside the register space
for device-memory offsets below 64); and a desynchronised bridge may read
payload bytes as UARTBone commands and write registers or memory.  Neither is
detectable from the host.

Device strings
--------------
``serial:URL[@BAUD][,timeout=SECONDS][,retries=N][,regs=crc|uartbone]``, where
URL is anything :func:`serial.serial_for_url` opens: ``serial:/dev/ttyUSB0@115200``,
``serial:socket://127.0.0.1:5555@3000000``, ``serial:rfc2217://host:4000``.
The default baud rate is 3 000 000.  ``timeout`` (default 1 s) is how late an
answer may be on top of its transmission time, ``retries`` (default 5) how
often one exchange is retried; the simulated board, which moves about a
kilobyte per wall-clock second, needs ``timeout=60`` or so.  ``regs`` (default
``crc``) picks the register framing; ``uartbone`` for a LiteX-style bridge.
"""

from __future__ import annotations

import random
import socket
import struct
import threading
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import serial

from . import regs as regmap
from .errors import TransportError
from .transport import Transport

__all__ = [
    "UARTBONE_WRITE", "UARTBONE_READ", "UARTBONE_MAX_WORDS", "AXI_ERROR_WORD", "REG_BASE", "REG_BYTES", "MEM_BASE",
    "BURST_WRITE", "BURST_READ", "BURST_HEADER", "BURST_MAX_PAYLOAD", "STATUS_ACK", "STATUS_NAK_CRC",
    "STATUS_NAK_RANGE", "STATUS_BUS_ERROR", "REG_WRITE", "REG_READ", "REG_MAX_WORDS", "MAX_POSTED_WRITES",
    "REG_FRAMINGS", "reg_write_frame", "reg_read_frame", "MAX_WINDOW", "BRIDGE_RX_FIFO", "READ_WINDOW_BURSTS",
    "DEFAULT_BAUD", "DEFAULT_TIMEOUT", "burst_header",
    "burst_write_frame", "burst_read_frame", "uartbone_read_frame", "uartbone_write_frame", "LinkStats",
    "SerialSpec", "SerialTransport", "parse_serial_device", "parse_serial_spec", "LineFaults", "ModelBridge",
    "loopback_model_transport",
]

UARTBONE_WRITE = 0x01
UARTBONE_READ = 0x02
UARTBONE_MAX_WORDS = 255
AXI_ERROR_WORD = 0xFFFF_FFFF
REG_BASE = 0x0000_0000
REG_BYTES = 0x1_0000
MEM_BASE = 0x8000_0000
BURST_WRITE = 0x81
BURST_READ = 0x82
BURST_HEADER = ">BII"
BURST_MAX_PAYLOAD = 4096
STATUS_ACK = 0x00
STATUS_NAK_CRC = 0x01
STATUS_NAK_RANGE = 0x02
STATUS_BUS_ERROR = 0x03
REG_WRITE = 0x83
REG_READ = 0x84
REG_MAX_WORDS = 255

_HEADER = struct.Struct(BURST_HEADER)
_CRC = struct.Struct(">I")
_UARTBONE = struct.Struct(">BBI")
_REG_HEADER = struct.Struct(">BIB")
_STATUS_TEXT = {STATUS_NAK_CRC: "NAK: bad CRC", STATUS_NAK_RANGE: "NAK: bad address or length",
                STATUS_BUS_ERROR: "bus error"}
#: Smallest window the transport shrinks to on a noisy line: a 16-byte burst is 34 bytes on the wire.
_MIN_WINDOW = 16
#: Largest window: 8 bursts in flight, well inside the buffers of a USB-UART bridge chip and the OS.
MAX_WINDOW = 8 * BURST_MAX_PAYLOAD
#: Bytes the bridge's receive FIFO holds while it is busy sending an answer (it takes no byte meanwhile).
BRIDGE_RX_FIFO = 16
#: Read bursts of one window: the bridge takes the first header at once, and only one more 13-byte header
#: fits its receive FIFO while it sends the first answer; a third would overflow it and be lost.
READ_WINDOW_BURSTS = 2
#: Register writes sent before the transport waits for their statuses (see the module docstring).
MAX_POSTED_WRITES = 16
#: Register framings of :class:`SerialTransport`: CRC register frames (the default) or LiteX's UARTBone.
REG_FRAMINGS = ("crc", "uartbone")
#: Default baud rate of the board's UART.
DEFAULT_BAUD = 3_000_000
#: Default seconds an answer may be late, on top of its transmission time.
DEFAULT_TIMEOUT = 1.0


def burst_header(cmd: int, byte_addr: int, length: int) -> bytes:
    """The 13-byte header of a CRC burst: command, address, length and the CRC-32 of those 9 bytes."""
    head = _HEADER.pack(cmd, byte_addr, length)
    return head + _CRC.pack(zlib.crc32(head))


def burst_write_frame(byte_addr: int, data: bytes) -> bytes:
    """A whole CRC burst write: header, payload and the payload's CRC-32 (answered by one status byte)."""
    return burst_header(BURST_WRITE, byte_addr, len(data)) + data + _CRC.pack(zlib.crc32(data))


def burst_read_frame(byte_addr: int, length: int) -> bytes:
    """A CRC burst read (answered by a status byte, then on ACK ``length`` bytes and their CRC-32)."""
    return burst_header(BURST_READ, byte_addr, length)


def reg_write_frame(byte_addr: int, words: list[int]) -> bytes:
    """A CRC register write of 1..255 words to ``byte_addr`` (answered by one status byte)."""
    frame = _REG_HEADER.pack(REG_WRITE, byte_addr, len(words)) + struct.pack(f">{len(words)}I", *words)
    return frame + _CRC.pack(zlib.crc32(frame))


def reg_read_frame(byte_addr: int, n: int) -> bytes:
    """A CRC register read of ``n`` (1..255) words (answered by a status byte, then on ACK the words and their CRC)."""
    frame = _REG_HEADER.pack(REG_READ, byte_addr, n)
    return frame + _CRC.pack(zlib.crc32(frame))


def uartbone_read_frame(byte_addr: int, n: int) -> bytes:
    """A UARTBone read of ``n`` (1..255) words from ``byte_addr`` (answered by ``4 * n`` bytes)."""
    return _UARTBONE.pack(UARTBONE_READ, n, byte_addr >> 2)


def uartbone_write_frame(byte_addr: int, words: list[int]) -> bytes:
    """A UARTBone write of 1..255 words to ``byte_addr`` (no answer)."""
    return _UARTBONE.pack(UARTBONE_WRITE, len(words), byte_addr >> 2) + struct.pack(f">{len(words)}I", *words)


@dataclass(frozen=True)
class SerialSpec:
    """What a ``serial:`` device string names: the pyserial URL and the transport's options."""

    url: str
    baud: int = DEFAULT_BAUD
    timeout: float = DEFAULT_TIMEOUT
    retries: int = 5
    regs: str = "crc"


_SPEC_HELP = ("expected serial:URL[@BAUD][,timeout=SECONDS][,retries=N][,regs=crc|uartbone], for example "
              "serial:/dev/ttyUSB0@115200 or serial:socket://127.0.0.1:5555@6250000,timeout=60")
_URL_HELP = ("expected serial:URL or serial:URL@BAUD, for example serial:/dev/ttyUSB0@115200 or "
             "serial:socket://127.0.0.1:5555")


def parse_serial_device(spec: str) -> SerialSpec:
    """Parse ``serial:URL[@BAUD][,timeout=SECONDS][,retries=N][,regs=crc|uartbone]``.

    ``BAUD`` defaults to :data:`DEFAULT_BAUD`; ``timeout`` (seconds an answer may be
    late on top of its transmission time, default :data:`DEFAULT_TIMEOUT`),
    ``retries`` (default 5) and ``regs`` (the register framing, default ``crc``;
    ``uartbone`` for a LiteX-style bridge) are :class:`SerialTransport`'s parameters.  A slow
    line, such as the simulated board, which moves about a kilobyte per
    wall-clock second, needs a longer timeout: ``serial:socket://127.0.0.1:PORT@6250000,timeout=60``.

    Raises
    ------
    ValueError
        No URL, a BAUD that is not a positive integer, an unknown option, or an option value out of range.
    """
    rest = spec[len("serial:"):] if spec.startswith("serial:") else spec
    rest, *options = rest.split(",")
    url, sep, baud = rest.rpartition("@")
    if not sep:
        url, baud = rest, str(DEFAULT_BAUD)
    if not url or not baud.isdigit() or int(baud) == 0:
        raise ValueError(f"device {spec!r}: {_URL_HELP}")
    values: dict[str, Any] = {}
    for option in options:
        key, eq, text = option.partition("=")
        if key not in ("timeout", "retries", "regs") or not eq:
            raise ValueError(f"device {spec!r}: unknown option {option!r}; {_SPEC_HELP}")
        if key in values:
            raise ValueError(f"device {spec!r}: option {key!r} given twice")
        if key == "regs":
            if text not in REG_FRAMINGS:
                raise ValueError(f"device {spec!r}: regs must be 'crc' or 'uartbone', not {text!r}")
            values[key] = text
            continue
        try:
            value: Any = float(text) if key == "timeout" else int(text)
        except ValueError:
            value = None
        if value is None or value < 0 or (key == "timeout" and not (0 < value < float("inf"))):
            what = "a positive number of seconds" if key == "timeout" else "a non-negative integer"
            raise ValueError(f"device {spec!r}: {key} must be {what}, not {text!r}") from None
        values[key] = value
    return SerialSpec(url, int(baud), **values)


def parse_serial_spec(spec: str) -> tuple[str, int]:
    """Split ``serial:URL[@BAUD][,OPTIONS]`` into the pyserial URL and the baud rate (see :func:`parse_serial_device`).

    Raises
    ------
    ValueError
        As :func:`parse_serial_device`.
    """
    parsed = parse_serial_device(spec)
    return parsed.url, parsed.baud


@dataclass
class LinkStats:
    """What a :class:`SerialTransport` has done on its line.

    Attributes
    ----------
    round_trips:
        Exchanges that waited for an answer: one per register read frame, one per burst window (retries included).
    posted_writes:
        Register writes sent without waiting for an answer (UARTBone writes have none; a CRC register write's
        status is read by a later exchange).
    write_flushes:
        Round trips (counted in ``round_trips`` too) that only collected the statuses of CRC register writes.
    retries:
        Exchanges retried after a failure.
    resyncs:
        Times the input was flushed and the line waited quiet (after a failure, or bytes nobody asked for).
    bytes_sent, bytes_received:
        Bytes written to and read from the port (bytes a resynchronisation flushes unread are not counted).
    """

    round_trips: int = 0
    posted_writes: int = 0
    write_flushes: int = 0
    retries: int = 0
    resyncs: int = 0
    bytes_sent: int = 0
    bytes_received: int = 0

    def summary(self) -> str:
        """One line for people."""
        return (f"{self.round_trips} round trips ({self.write_flushes} for write statuses), "
                f"{self.posted_writes} posted register writes, "
                f"{self.retries} retries, {self.resyncs} resyncs, {self.bytes_sent} bytes sent, "
                f"{self.bytes_received} received")


class _Failure(Exception):
    """One failed exchange on the line, retried after a resynchronisation."""


class _BusError(_Failure):
    """The bridge answered a register frame with STATUS_BUS_ERROR: retried once, then raised."""


class SerialTransport(Transport):
    """A transport to a board's UART bridge (see the module docstring for the protocol).

    Parameters
    ----------
    url:
        Anything :func:`serial.serial_for_url` opens (``/dev/ttyUSB0``, ``socket://HOST:PORT``,
        ``rfc2217://HOST:PORT``, ``loop://``).
    baud:
        Line rate; also sizes the read timeouts of long transfers.
    timeout:
        Seconds an answer may be late, on top of its transmission time at ``baud`` (positive).
    retries:
        Retries of one exchange without progress before :class:`TransportError`.
    quiet:
        Seconds of silence that resynchronise the line; must exceed the bridge's
        inter-byte timeout.
    verify_writes:
        Follow every write burst by a read burst of the same bytes and compare (see the module docstring).
    regs:
        Register framing: ``"crc"`` (CRC register frames, writes confirmed) or ``"uartbone"`` (LiteX's frames,
        for a bridge that speaks only those).

    Attributes
    ----------
    stats:
        A :class:`LinkStats`: round trips, retries and bytes on the line so far.
    round_trips, retries_done:
        ``stats.round_trips`` and ``stats.retries``, under their older names.
    """

    def __init__(self, url: str, baud: int = DEFAULT_BAUD, timeout: float = DEFAULT_TIMEOUT, retries: int = 5, *,
                 quiet: float = 0.2, verify_writes: bool = True, regs: str = "crc"):
        if regs not in REG_FRAMINGS:
            raise ValueError(f"regs must be 'crc' or 'uartbone', not {regs!r}")
        if retries < 0:
            raise ValueError(f"retries must not be negative, not {retries!r}")
        if not timeout > 0:
            raise ValueError(f"timeout must be a positive number of seconds, not {timeout!r}")
        self.url = url
        self.timeout = timeout
        self.retries = retries
        self.quiet = quiet
        self.verify_writes = verify_writes
        self.regs = regs
        self.stats = LinkStats()
        # CRC register writes whose status is not yet checked, as (byte address, frame), in the order sent.
        self._posted: list[tuple[int, bytes]] = []
        # Whether those frames are on the line (a resynchronisation throws their statuses away: send them again).
        self._posted_sent = False
        # 10 bit times per byte: start, 8 data bits, stop.
        self._byte_time = 10.0 / baud
        self._window = MAX_WINDOW
        self._last_failure = ""
        try:
            self.port = serial.serial_for_url(url, baudrate=baud, timeout=timeout)
        except (serial.SerialException, ValueError) as e:
            raise TransportError(f"cannot open serial port {url!r}: {e}") from e
        # pyserial's socket:// leaves Nagle on, which holds back a posted register write
        # that follows another until the peer's delayed ACK: tens of milliseconds each.
        sock = getattr(self.port, "_socket", None)
        if isinstance(sock, socket.socket):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            if self.regs == "crc":
                mem_bytes = self._read_regs(REG_BASE + regmap.Global.MEM_BYTES, 1)[0]
            else:
                mem_bytes = self._read_stable(REG_BASE + regmap.Global.MEM_BYTES)
            super().__init__(REG_BYTES, mem_bytes)
        except BaseException:
            self.port.close()
            raise

    @property
    def round_trips(self) -> int:
        return self.stats.round_trips

    @property
    def retries_done(self) -> int:
        return self.stats.retries

    # -- line primitives --------------------------------------------------------------------------

    def _send(self, data: bytes) -> None:
        try:
            self.port.write(data)
            self.port.flush()
        except serial.SerialException as e:
            raise TransportError(f"serial port {self.url!r} failed: {e}") from e
        self.stats.bytes_sent += len(data)

    def _recv(self, n: int, wait: float) -> bytes:
        """Read ``n`` bytes, giving up after ``wait`` seconds; shorter on a timeout."""
        try:
            self.port.timeout = wait
            data = bytes(self.port.read(n))
        except serial.SerialException as e:
            raise TransportError(f"serial port {self.url!r} failed: {e}") from e
        self.stats.bytes_received += len(data)
        return data

    def _pending(self) -> int:
        try:
            return self.port.in_waiting
        except serial.SerialException as e:
            raise TransportError(f"serial port {self.url!r} failed: {e}") from e

    def _resync(self) -> None:
        """Drop whatever is in flight and wait until the line stays quiet for ``quiet`` seconds."""
        self.stats.resyncs += 1
        self._posted_sent = False
        while True:
            try:
                self.port.reset_input_buffer()
            except serial.SerialException as e:
                raise TransportError(f"serial port {self.url!r} failed: {e}") from e
            if not self._recv(1, self.quiet):
                return

    def _exchange(self, what: str, attempt: Callable[[], bool]) -> None:
        """Run ``attempt`` until it reports success, resynchronising and retrying on :class:`_Failure`.

        ``attempt`` returns whether it made progress even if not finished; progress
        resets the retry count, so a long transfer on a noisy line is not bounded
        by ``retries`` in total, only per piece.
        """
        failures = 0
        bus_error = False
        if self._pending() and not self._posted:
            # Bytes nobody asked for: an earlier exchange went wrong after it was accepted.
            self._resync()
        while True:
            try:
                if attempt():
                    return
                failures = 0
                bus_error = False
            except _Failure as e:
                self._last_failure = str(e)
                failures += 1
                if isinstance(e, _BusError) and bus_error:
                    # The same answer twice: a real AXI error, not a corrupted status.  The unconfirmed
                    # writes were all sent again by this attempt; none of them is sent a third time.
                    self._posted.clear()
                    self._resync()
                    found = "" if str(e).startswith(what) else f" (found by the {what})"
                    raise TransportError(f"serial link to {self.url!r}: {e}, twice in a row{found}") from None
                bus_error = isinstance(e, _BusError)
                if failures > self.retries:
                    self._posted.clear()
                    raise TransportError(f"serial link to {self.url!r}: {what} failed after {self.retries} "
                                         f"retries; last failure: {e}") from None
                self.stats.retries += 1
                self._window = max(_MIN_WINDOW, self._window // 4)
                self._resync()

    # -- windows: the unconfirmed register writes go first ------------------------------------------------

    def _send_window(self, frames: bytes, answer_bytes: int) -> float:
        """Send ``frames`` as one window and return how long to wait for each of its answers.

        The unconfirmed CRC register writes go first (again, after a resynchronisation
        threw their statuses away), and their statuses, which come first, are read and
        checked here; :meth:`_committed` forgets them once the whole window succeeded.
        """
        prefix = b"" if self._posted_sent else b"".join(frame for _, frame in self._posted)
        self._send(prefix + frames)
        self._posted_sent = True
        self.stats.round_trips += 1
        line = sum(len(frame) + 1 for _, frame in self._posted) + len(frames) + answer_bytes
        wait = self.timeout + line * self._byte_time
        for at, _ in self._posted:
            self._reg_status(f"register write at 0x{at:x}", wait)
        return wait

    def _reg_status(self, what: str, wait: float) -> None:
        status = self._recv(1, wait)
        if not status:
            raise _Failure(f"{what}: no status byte")
        if status[0] == STATUS_BUS_ERROR:
            raise _BusError(f"{what}: the bridge answered a bus error")
        if status[0] != STATUS_ACK:
            raise _Failure(f"{what}: {_STATUS_TEXT.get(status[0], f'unknown status 0x{status[0]:02x}')}")

    def flush(self) -> None:
        """Wait for the statuses of the register writes sent so far (one round trip if there are any).

        Raises
        ------
        TransportError
            A write failed after the retries, or drew a bus error.
        """
        self._check_open()
        self._flush()

    def _flush(self) -> None:
        if not self._posted:
            return

        def attempt() -> bool:
            self._send_window(b"", 0)
            self.stats.write_flushes += 1
            return self._committed()

        self._exchange(f"{len(self._posted)} register writes from 0x{self._posted[0][0]:x} on", attempt)

    # -- registers ----------------------------------------------------------------------------------

    def _read_regs(self, addr: int, count: int) -> list[int]:
        words: list[int] = []

        if self.regs == "crc":
            def attempt() -> bool:
                n = min(REG_MAX_WORDS, count - len(words))
                at = addr + 4 * len(words)
                wait = self._send_window(reg_read_frame(at, n), 4 * n + 5)
                self._reg_status(f"register read at 0x{at:x}", wait)
                body = self._checked(f"register read at 0x{at:x}", 4 * n, wait)
                self._committed()
                words.extend(struct.unpack(f">{n}I", body))
                return len(words) == count

            self._exchange(f"register read at 0x{addr:x}", attempt)
            return words

        def attempt() -> bool:
            n = min(UARTBONE_MAX_WORDS, count - len(words))
            at = addr + 4 * len(words)
            self._send(uartbone_read_frame(at, n))
            self.stats.round_trips += 1
            answer = self._recv(4 * n, self.timeout + 4 * n * self._byte_time)
            if len(answer) != 4 * n:
                raise _Failure(f"register read at 0x{at:x}: {len(answer)} of {4 * n} answer bytes arrived")
            if self._pending():
                raise _Failure(f"register read at 0x{at:x}: more bytes than the {4 * n} of the answer arrived")
            words.extend(struct.unpack(f">{n}I", answer))
            return len(words) == count

        self._exchange(f"register read at 0x{addr:x}", attempt)
        return words

    def _read_stable(self, addr: int) -> int:
        """Read a register that does not change until two reads in a row agree: a corrupted answer rarely repeats."""
        values: list[int] = []

        def attempt() -> bool:
            values.append(self._read_regs(addr, 1)[0])
            if len(values) == 1:
                return False
            if values[-1] != values[-2]:
                raise _Failure(f"register 0x{addr:x} read 0x{values[-2]:08x} then 0x{values[-1]:08x}")
            return True

        self._exchange(f"register read at 0x{addr:x}", attempt)
        return values[-1]

    def _read32(self, addr: int) -> int:
        return self._read_regs(addr, 1)[0]

    def read_u32s(self, addr: int, count: int) -> list[int]:
        """Read ``count`` consecutive registers in frames of up to 255 words (one round trip each)."""
        if count < 0:
            raise ValueError(f"register count must not be negative, not {count}")
        if not count:
            return []
        self._check_reg(addr)
        self._check_reg(addr + 4 * (count - 1))
        return self._read_regs(addr, count)

    def _write32(self, addr: int, value: int) -> None:
        if self.regs == "crc":
            if len(self._posted) >= MAX_POSTED_WRITES:
                self._flush()
            frame = reg_write_frame(addr, [value])
            if not self._posted and self._pending():
                self._resync()  # bytes nobody asked for: they would be taken for this write's status
            if self._posted_sent or not self._posted:
                self._send(frame)
                self._posted_sent = True
            # else the earlier writes wait to be sent again by the next window: this one goes with them, in order
            self._posted.append((addr, frame))
            self.stats.posted_writes += 1
            return
        if self._pending():
            self._resync()
        self._send(uartbone_write_frame(addr, [value]))
        self.stats.posted_writes += 1

    # -- device memory (CRC bursts) ------------------------------------------------------------------

    def _pieces(self, start: int, end: int, bursts: int) -> list[tuple[int, int]]:
        """Split ``start .. end`` into the bursts of one window, at most ``bursts`` of them: (offset, length) pairs."""
        stop = min(end, start + self._window, start + bursts * BURST_MAX_PAYLOAD)
        return [(p, min(BURST_MAX_PAYLOAD, stop - p)) for p in range(start, stop, BURST_MAX_PAYLOAD)]

    def _status(self, at: int, wait: float) -> None:
        status = self._recv(1, wait)
        if not status:
            raise _Failure(f"burst at 0x{at:x}: no status byte")
        if status[0] != STATUS_ACK:
            raise _Failure(f"burst at 0x{at:x}: {_STATUS_TEXT.get(status[0], f'unknown status 0x{status[0]:02x}')}")

    def _payload(self, at: int, k: int, wait: float) -> bytes:
        """The answer to a read burst of ``k`` bytes: status, payload and its CRC, checked."""
        self._status(at, wait)
        return self._checked(f"burst read at 0x{at:x}", k, wait)

    def _checked(self, what: str, k: int, wait: float) -> bytes:
        """``k`` answer bytes followed by their CRC-32, checked; the ``k`` bytes."""
        body = self._recv(k + 4, wait)
        if len(body) != k + 4:
            raise _Failure(f"{what}: {len(body)} of {k + 4} bytes arrived")
        if zlib.crc32(body[:k]) != _CRC.unpack(body[k:])[0]:
            raise _Failure(f"{what}: payload CRC mismatch")
        return body[:k]

    def _committed(self) -> bool:
        if self._pending():
            raise _Failure("more bytes than the answers of the window arrived")
        self._posted.clear()
        self._window = min(MAX_WINDOW, self._window * 2)
        return True

    def _read_block(self, addr: int, n: int) -> bytes:
        out = bytearray()

        def attempt() -> bool:
            pieces = self._pieces(len(out), n, READ_WINDOW_BURSTS)
            wait = self._send_window(b"".join(burst_read_frame(MEM_BASE + addr + p, k) for p, k in pieces),
                                     sum(k + 5 for _, k in pieces))
            got = bytearray()
            for p, k in pieces:
                got += self._payload(addr + p, k, wait)
            self._committed()
            out.extend(got)
            return len(out) == n

        self._exchange(f"memory read of {n} bytes at 0x{addr:x}", attempt)
        return bytes(out)

    def _write_block(self, addr: int, data: bytes) -> None:
        done = 0

        def attempt() -> bool:
            nonlocal done
            # While the bridge sends a read-back it takes no byte, so the next write must wait for it.
            pieces = self._pieces(done, len(data), 1 if self.verify_writes else MAX_WINDOW // BURST_MAX_PAYLOAD)
            frames = []
            for p, k in pieces:
                chunk = data[p:p + k]
                frames.append(burst_write_frame(MEM_BASE + addr + p, chunk))
                if self.verify_writes:
                    frames.append(burst_read_frame(MEM_BASE + addr + p, k))
            answers = sum(k + 6 if self.verify_writes else 1 for _, k in pieces)
            wait = self._send_window(b"".join(frames), answers)
            for p, k in pieces:
                self._status(addr + p, wait)
                if self.verify_writes and self._payload(addr + p, k, wait) != data[p:p + k]:
                    raise _Failure(f"burst write at 0x{addr + p:x}: the read-back differs from what was written")
            self._committed()
            done = pieces[-1][0] + pieces[-1][1]
            return done == len(data)

        self._exchange(f"memory write of {len(data)} bytes at 0x{addr:x}", attempt)

    def _close(self) -> None:
        try:
            self._flush()  # the last writes' statuses: a failed write must not go unseen
        finally:
            self.port.close()


# -- the bridge side, in Python -------------------------------------------------------------------------


@dataclass
class LineFaults:
    """Faults a :class:`ModelBridge` injects into the bytes it receives and sends.

    Parameters
    ----------
    bit_error_rate:
        Probability that a bit is flipped (at most one flip per byte is drawn: exact enough below 1e-2).
    drop_rate, dup_rate:
        Probability per byte that it is lost, or delivered twice.
    seed:
        Seed of the fault sequence.
    scope:
        ``"all"``: every byte in both directions; ``"bursts"``: only the bytes of CRC-checked frames (bursts
        and CRC register frames) after their command byte, and their answers: everything but UARTBone.

    Attributes
    ----------
    flipped, dropped, duplicated:
        Faults injected so far.
    """

    bit_error_rate: float = 0.0
    drop_rate: float = 0.0
    dup_rate: float = 0.0
    seed: int = 0
    scope: str = "all"
    flipped: int = 0
    dropped: int = 0
    duplicated: int = 0
    _rng: random.Random = field(init=False, repr=False)

    def __post_init__(self) -> None:
        if self.scope not in ("all", "bursts"):
            raise ValueError(f"fault scope must be 'all' or 'bursts', not {self.scope!r}")
        self._rng = random.Random(self.seed)
        self._p_flip = 1.0 - (1.0 - self.bit_error_rate) ** 8

    @property
    def active(self) -> bool:
        return bool(self.bit_error_rate or self.drop_rate or self.dup_rate)

    def apply(self, data: bytes) -> bytes:
        """``data`` as the faulty line delivers it."""
        if not self.active:
            return data
        out = bytearray()
        rng = self._rng
        for b in data:
            r = rng.random()
            if r < self._p_flip:
                self.flipped += 1
                out.append(b ^ (1 << rng.randrange(8)))
            elif r < self._p_flip + self.drop_rate:
                self.dropped += 1
            elif r < self._p_flip + self.drop_rate + self.dup_rate:
                self.duplicated += 1
                out += bytes((b, b))
            else:
                out.append(b)
        return out


class ModelBridge:
    """The board's UART bridge in Python, serving a register/memory target on a local TCP port.

    Parameters
    ----------
    target:
        Has ``read32(addr)``, ``write32(addr, value)``, ``mem_read(addr, n)`` and ``mem_write(addr, data)``
        (a ``dx1_bringup.model.DeviceModel``).
    mem_bytes:
        Size of the target's device memory.
    bus_errors:
        Exceptions of ``target`` that mean an AXI error.
    faults:
        Faults injected on the line; ``None`` for a clean line.
    idle_timeout:
        Seconds without a byte after which a partial frame is dropped (LiteX UARTBone: 100 ms).

    Notes
    -----
    One client at a time, one thread.  After an unknown command byte, and after
    answering a NAK (bad header or payload CRC, refused address or length), the
    input is discarded until the line goes idle: a framing error means that the
    following bytes are not where frames start, and read as frames they would
    run payload bytes as UARTBone commands.  The host resynchronises by waiting
    for that idle line, so the board's bridge must behave the same way.  A CRC
    register frame is answered as the gateware answers it: after a bad CRC the
    input is discarded until idle; a refused range (the frame was whole and its
    CRC good) and a bus error are answered and the next frame is taken at once.
    """

    def __init__(self, target: Any, mem_bytes: int, bus_errors: tuple[type[BaseException], ...], *,
                 faults: LineFaults | None = None, idle_timeout: float = 0.05):
        self.target = target
        self.mem_bytes = mem_bytes
        self.bus_errors = bus_errors
        self.faults = faults or LineFaults()
        self.idle_timeout = idle_timeout
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._stop = threading.Event()
        self._conn: socket.socket | None = None
        self._raw = bytearray()  # received, not yet through the faults
        self._inbox = bytearray()  # delivered by the faulty line, not yet parsed
        self._thread = threading.Thread(target=self._serve, name="dx1-model-bridge", daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        """The pyserial URL of the bridge."""
        return f"socket://127.0.0.1:{self.port}"

    def close(self) -> None:
        self._stop.set()
        self._listener.close()
        if self._conn is not None:
            # shutdown wakes the bridge thread out of recv at once; close alone would leave it to its timeout.
            try:
                self._conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass  # the client already went away
            self._conn.close()
        self._thread.join(timeout=5)

    # -- line -------------------------------------------------------------------------------------

    def _fill(self, want: int, wait: float, faulty: bool) -> bool:
        """Deliver up to ``want`` received bytes to the inbox (through the faults if ``faulty``); False on timeout.

        Faults are applied as bytes are delivered, not as they are received, so that
        scope ``"bursts"`` can tell which frame a byte belongs to.
        """
        assert self._conn is not None
        if not self._raw:
            self._conn.settimeout(wait)
            try:
                chunk = self._conn.recv(1 << 16)
            except TimeoutError:
                return False
            if not chunk:
                raise ConnectionError("client closed the connection")
            self._raw += chunk
        raw = bytes(self._raw[:want])
        del self._raw[:want]
        self._inbox += self.faults.apply(raw) if faulty else raw
        return True

    def _take(self, n: int, faulty: bool) -> bytes | None:
        """``n`` bytes of the current frame, or ``None`` when the line goes idle first."""
        while len(self._inbox) < n:
            if not self._fill(n - len(self._inbox), self.idle_timeout, faulty):
                return None
        data = bytes(self._inbox[:n])
        del self._inbox[:n]
        return data

    def _next_command(self) -> int:
        while not self._inbox:
            if self._stop.is_set():
                raise ConnectionError("bridge stopped")
            self._fill(1, 0.1, self.faults.scope == "all")
        cmd = self._inbox[0]
        del self._inbox[0]
        return cmd

    def _discard_until_idle(self) -> None:
        self._inbox.clear()
        self._raw.clear()
        while self._fill(1 << 16, self.idle_timeout, False):
            self._inbox.clear()

    def _answer(self, data: bytes, faulty: bool) -> None:
        assert self._conn is not None
        self._conn.sendall(self.faults.apply(data) if faulty else data)

    # -- protocol -----------------------------------------------------------------------------------

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                self._listener.settimeout(0.1)
                self._conn, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            self._conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self._raw.clear()
            self._inbox.clear()
            try:
                while True:
                    self._frame()
            except (ConnectionError, OSError):
                self._conn.close()

    def _frame(self) -> None:
        cmd = self._next_command()
        faulty_regs = self.faults.scope == "all"
        if cmd in (UARTBONE_WRITE, UARTBONE_READ):
            head = self._take(5, faulty_regs)
            if head is None:
                return
            n, addr_word = head[0], int.from_bytes(head[1:], "big")
            if cmd == UARTBONE_READ:
                words = [self._bus_read(((addr_word + i) << 2) & 0xFFFF_FFFF) for i in range(n)]
                self._answer(b"".join(_CRC.pack(w) for w in words), faulty_regs)
                return
            for i in range(n):
                word = self._take(4, faulty_regs)
                if word is None:
                    return
                self._bus_write(((addr_word + i) << 2) & 0xFFFF_FFFF, int.from_bytes(word, "big"))
        elif cmd in (BURST_WRITE, BURST_READ):
            self._burst(cmd)
        elif cmd in (REG_WRITE, REG_READ):
            self._reg_frame(cmd)
        else:
            self._discard_until_idle()

    def _burst(self, cmd: int) -> None:
        rest = self._take(12, True)
        if rest is None:
            return
        _, addr, length = _HEADER.unpack(bytes((cmd,)) + rest[:8])
        if zlib.crc32(bytes((cmd,)) + rest[:8]) != _CRC.unpack(rest[8:])[0]:
            self._answer(bytes((STATUS_NAK_CRC,)), True)
            self._discard_until_idle()
            return
        offset = addr - MEM_BASE
        if not (0 < length <= BURST_MAX_PAYLOAD and 0 <= offset and offset + length <= self.mem_bytes):
            self._answer(bytes((STATUS_NAK_RANGE,)), True)
            self._discard_until_idle()
            return
        if cmd == BURST_READ:
            try:
                payload = self.target.mem_read(offset, length)
            except self.bus_errors:
                self._answer(bytes((STATUS_BUS_ERROR,)), True)
                return
            self._answer(bytes((STATUS_ACK,)) + payload + _CRC.pack(zlib.crc32(payload)), True)
            return
        body = self._take(length + 4, True)
        if body is None:
            return
        if zlib.crc32(body[:length]) != _CRC.unpack(body[length:])[0]:
            self._answer(bytes((STATUS_NAK_CRC,)), True)
            # A lost or doubled byte shifts everything after it: what follows cannot be trusted as frames.
            self._discard_until_idle()
            return
        try:
            self.target.mem_write(offset, body[:length])
        except self.bus_errors:
            self._answer(bytes((STATUS_BUS_ERROR,)), True)
            return
        self._answer(bytes((STATUS_ACK,)), True)

    def _reg_frame(self, cmd: int) -> None:
        head = self._take(5, True)
        if head is None:
            return
        addr, n = struct.unpack(">IB", head)
        # A write's words come before the CRC; the count is only trusted once the CRC checks.
        body = self._take(4 * n + 4 if cmd == REG_WRITE else 4, True)
        if body is None:
            return
        if zlib.crc32(bytes((cmd,)) + head + body[:-4]) != _CRC.unpack(body[-4:])[0]:
            self._answer(bytes((STATUS_NAK_CRC,)), True)
            self._discard_until_idle()
            return
        if not (0 < n <= REG_MAX_WORDS and addr % 4 == 0 and REG_BASE <= addr and addr + 4 * n <= REG_BASE + REG_BYTES):
            self._answer(bytes((STATUS_NAK_RANGE,)), True)
            return
        ok = True
        if cmd == REG_WRITE:
            # Every word is tried, as on the board; the refused ones are not written.
            for i, value in enumerate(struct.unpack(f">{n}I", body[:-4])):
                try:
                    self.target.write32(addr - REG_BASE + 4 * i, value)
                except (*self.bus_errors, ValueError):
                    ok = False
            self._answer(bytes((STATUS_ACK if ok else STATUS_BUS_ERROR,)), True)
            return
        values = []
        for i in range(n):
            try:
                values.append(self.target.read32(addr - REG_BASE + 4 * i))
            except (*self.bus_errors, ValueError):
                ok = False
        if not ok:
            self._answer(bytes((STATUS_BUS_ERROR,)), True)
            return
        payload = struct.pack(f">{n}I", *values)
        self._answer(bytes((STATUS_ACK,)) + payload + _CRC.pack(zlib.crc32(payload)), True)

    def _bus_read(self, byte_addr: int) -> int:
        try:
            if REG_BASE <= byte_addr < REG_BASE + REG_BYTES:
                return self.target.read32(byte_addr - REG_BASE)
            return int.from_bytes(self.target.mem_read(byte_addr - MEM_BASE, 4), "little")
        except (*self.bus_errors, ValueError):
            return AXI_ERROR_WORD

    def _bus_write(self, byte_addr: int, value: int) -> None:
        # UARTBone has no answer to a write: an AXI error is lost, as on the board.
        try:
            if REG_BASE <= byte_addr < REG_BASE + REG_BYTES:
                self.target.write32(byte_addr - REG_BASE, value)
            elif byte_addr >= MEM_BASE:
                self.target.mem_write(byte_addr - MEM_BASE, value.to_bytes(4, "little"))
        except (*self.bus_errors, ValueError):
            pass


class _LoopbackTransport(SerialTransport):
    """A :class:`SerialTransport` that owns its :class:`ModelBridge` and stops it on close."""

    def __init__(self, bridge: ModelBridge, **kwargs: Any):
        self.bridge = bridge
        try:
            super().__init__(bridge.url, **kwargs)
        except BaseException:
            bridge.close()
            raise

    def _close(self) -> None:
        try:
            super()._close()
        finally:
            self.bridge.close()


def loopback_model_transport(fault_rate: float = 0.0, seed: int = 0, *, scope: str = "all",
                             config: Any = None, **kwargs: Any) -> SerialTransport:
    """A :class:`SerialTransport` to a fresh golden model behind a :class:`ModelBridge` on 127.0.0.1.

    Parameters
    ----------
    fault_rate:
        Bit error rate of the line; bytes are also dropped and duplicated at this rate each.
    seed:
        Seed of the faults.
    scope:
        Which traffic the faults hit (see :class:`LineFaults`).
    config:
        A ``dx1_bringup.spec.SocConfig``; ``None`` for the default device.
    kwargs:
        Passed to :class:`SerialTransport`; the defaults here suit a local socket (short timeouts).

    Returns
    -------
    SerialTransport
        With attribute ``bridge``; closing it stops the bridge.
    """
    from dx1_bringup.model.device import BusError, DeviceModel

    faults = LineFaults(fault_rate, fault_rate, fault_rate, seed=seed, scope=scope)
    model = DeviceModel(config)
    bridge = ModelBridge(model, model.config.mem_bytes, (BusError,), faults=faults, idle_timeout=0.02)
    options: dict[str, Any] = {"timeout": 0.1, "quiet": 0.04}
    options.update(kwargs)
    return _LoopbackTransport(bridge, **options)
