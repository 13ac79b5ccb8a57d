"""The serial transport: a DX-1 board behind its UART bridge (USB-UART cable, or any pyserial URL).

Nothing here has run against hardware yet: every test so far talks to the
simulated board's RTL or to ``dx1_bringup.model.bridge.ModelBridge``.  The wire
format (frames, status bytes, limits) is ``docs/link.md``, generated into
:mod:`.link`; the frames are built by :mod:`.frames`; device strings are parsed
by :mod:`.serial_device`.  This module is how the transport uses them.

Register traffic: CRC register frames (the default) or UARTBone
---------------------------------------------------------------
By default (``regs="crc"``) registers move in CRC register frames: the
bridge writes nothing unless the frame's CRC checks, answers every write with
a status byte, and answers a read with a status byte and the words with their
own CRC, so a corrupted register access is retried like a burst and a read
never returns a wrong value.  Words are at consecutive addresses, 1 to
``REG_MAX_WORDS`` a frame, inside the register space, word-aligned; anything
else is ``NAK_RANGE``.  After ``NAK_CRC`` the bridge ignores the
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
never a corrupted one).  An AXI error is ``BUS_ERROR``; the transport
raises :class:`~.errors.BusErrorResponse` (a :class:`TransportError`) once the same
exchange has drawn it twice in a row (a single one may be a NAK_CRC with a flipped bit).

Residual risks: the status byte has no check, so a flipped bit can turn a
``NAK_CRC`` into ``ACK`` and a doubled ACK can stand in for a
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
repeats its side effects as above.  A register read of ``AXI_ERROR_WORD`` is
ambiguous: it is either the value or an AXI error; no register of the map
reads all ones in normal operation except perhaps ``GLOBAL.SCRATCH``.

Memory traffic is protected
---------------------------
Device memory moves in CRC bursts of at most ``BURST_MAX_PAYLOAD`` bytes.
Several bursts go out back to back (a *window*) before their answers are read,
so that the cable's latency is paid once per window, not per burst.  How many
is set by the bridge: while it sends an answer it takes no byte from the line,
and its receive FIFO (``BRIDGE_RX_FIFO``, 16 bytes) holds what arrives
meanwhile, so a read window is two bursts (the second header waits in
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
the transport raises :class:`TransportError` naming the last failure.  A line
that never goes quiet (a babbling device) ends a resynchronisation after
``timeout + 20 * quiet`` seconds with :class:`LinkTimeout`, so no request
blocks forever.  A read
whose payload CRC fails is never returned.

The status byte has no check: one flipped bit turns ``NAK_CRC`` or
``NAK_RANGE`` into ``ACK``, and a doubled ACK
can stand in for a burst the bridge never saw, so an ACK alone does not prove
a write.  With ``verify_writes`` (the default) each write burst is followed in
the same window by a read burst of the same range, and the window commits only
if the CRC-checked read-back equals the data.  The line is full duplex but the
bridge is not: while it sends an answer it takes no byte, so the next write
burst must wait for the read-back, and a verified write moves at about half
the line rate (49% at 6.25 Mbaud in `make bench`, against 99% unverified).

Residual risks of the bursts, all of them from the framing: the burst commands differ from
the UARTBone ones only in bit 7 (``BURST_WRITE``/``UARTBONE_WRITE``,
``BURST_READ``/``UARTBONE_READ``), so one flipped bit makes
a burst header a UARTBone frame whose address is built from the burst's
address and length bytes (``byte_addr[23:0] << 10``: inside the register space
for device-memory offsets below 64); and a desynchronised bridge may read
payload bytes as UARTBone commands and write registers or memory.  Neither is
detectable from the host.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Callable
from dataclasses import dataclass

import serial

from . import link
from . import regs as regmap
from .errors import BusErrorResponse, LinkTimeout, TransportError
from .frames import (
    BURST_FRAME_HEADER_BYTES,
    burst_read_frame,
    burst_write_frame,
    crc_ok,
    reg_read_frame,
    reg_write_frame,
    uartbone_read_frame,
    uartbone_write_frame,
    unpack_words,
)
from .link import FrameStatus
from .serial_device import DEFAULT_BAUD, DEFAULT_RETRIES, DEFAULT_TIMEOUT, REG_FRAMINGS
from .transport import Transport

__all__ = ["LinkStats", "SerialTransport", "MAX_WINDOW", "READ_WINDOW_BURSTS", "MAX_POSTED_WRITES"]

_STATUS_TEXT = {FrameStatus.NAK_CRC: "NAK: bad CRC", FrameStatus.NAK_RANGE: "NAK: bad address or length",
                FrameStatus.BUS_ERROR: "bus error"}
#: Smallest window the transport shrinks to on a noisy line: a 16-byte burst is 34 bytes on the wire.
_MIN_WINDOW = 16
#: Largest window: 8 bursts in flight, well inside the buffers of a USB-UART bridge chip and the OS.
MAX_WINDOW = 8 * link.BURST_MAX_PAYLOAD
#: Read bursts of one window: the bridge takes the first header at once, and only as many more headers as fit
#: its receive FIFO while it sends the first answer (one); the next would overflow it and be lost.
READ_WINDOW_BURSTS = 1 + link.BRIDGE_RX_FIFO // BURST_FRAME_HEADER_BYTES
#: Register writes sent before the transport waits for their statuses (see the module docstring).
MAX_POSTED_WRITES = 16
#: Bytes an answer with a CRC adds to what it carries: the status byte and the CRC.
_CHECKED_ANSWER = 1 + link.CRC_BYTES


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
    """The bridge answered a register frame or a burst with BUS_ERROR: retried once, then raised."""


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

    def __init__(self, url: str, baud: int = DEFAULT_BAUD, timeout: float = DEFAULT_TIMEOUT,
                 retries: int = DEFAULT_RETRIES, *,
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
                mem_bytes = self._read_regs(link.REG_BASE + regmap.Global.MEM_BYTES, 1)[0]
            else:
                mem_bytes = self._read_stable(link.REG_BASE + regmap.Global.MEM_BYTES)
            super().__init__(link.REG_BYTES, mem_bytes)
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
        seconds = self.timeout + 20 * self.quiet
        deadline = time.monotonic() + seconds
        while True:
            if time.monotonic() > deadline:
                raise LinkTimeout("resync", 0, seconds, f"the line from {self.url!r} never stayed quiet for "
                                  f"{self.quiet} s")
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
                    raise BusErrorResponse(f"serial link to {self.url!r}: {e}, twice in a row{found}") from None
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
        if status[0] == FrameStatus.BUS_ERROR:
            raise _BusError(f"{what}: the bridge answered a bus error")
        if status[0] != FrameStatus.ACK:
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
                n = min(link.REG_MAX_WORDS, count - len(words))
                at = addr + 4 * len(words)
                wait = self._send_window(reg_read_frame(at, n), link.WORD_BYTES * n + _CHECKED_ANSWER)
                self._reg_status(f"register read at 0x{at:x}", wait)
                body = self._checked(f"register read at 0x{at:x}", link.WORD_BYTES * n, wait)
                self._committed()
                words.extend(unpack_words(body))
                return len(words) == count

            self._exchange(f"register read at 0x{addr:x}", attempt)
            return words

        def attempt() -> bool:
            n = min(link.UARTBONE_MAX_WORDS, count - len(words))
            at = addr + 4 * len(words)
            self._send(uartbone_read_frame(at, n))
            self.stats.round_trips += 1
            k = link.WORD_BYTES * n
            answer = self._recv(k, self.timeout + k * self._byte_time)
            if len(answer) != k:
                raise _Failure(f"register read at 0x{at:x}: {len(answer)} of {k} answer bytes arrived")
            if self._pending():
                raise _Failure(f"register read at 0x{at:x}: more bytes than the {k} of the answer arrived")
            words.extend(unpack_words(answer))
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
        stop = min(end, start + self._window, start + bursts * link.BURST_MAX_PAYLOAD)
        return [(p, min(link.BURST_MAX_PAYLOAD, stop - p)) for p in range(start, stop, link.BURST_MAX_PAYLOAD)]

    def _status(self, at: int, wait: float) -> None:
        status = self._recv(1, wait)
        if not status:
            raise _Failure(f"burst at 0x{at:x}: no status byte")
        if status[0] == FrameStatus.BUS_ERROR:
            raise _BusError(f"burst at 0x{at:x}: the bridge answered a bus error")
        if status[0] != FrameStatus.ACK:
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
        if not crc_ok(body):
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
            wait = self._send_window(b"".join(burst_read_frame(link.MEM_BASE + addr + p, k) for p, k in pieces),
                                     sum(k + _CHECKED_ANSWER for _, k in pieces))
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
            pieces = self._pieces(done, len(data), 1 if self.verify_writes else MAX_WINDOW // link.BURST_MAX_PAYLOAD)
            frames = []
            for p, k in pieces:
                chunk = data[p:p + k]
                frames.append(burst_write_frame(link.MEM_BASE + addr + p, chunk))
                if self.verify_writes:
                    frames.append(burst_read_frame(link.MEM_BASE + addr + p, k))
            answers = sum(1 + (k + _CHECKED_ANSWER if self.verify_writes else 0) for _, k in pieces)
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
