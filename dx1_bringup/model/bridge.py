"""The board's UART bridge in Python: the bridge side of the link, serving a register/memory target on TCP.

:class:`ModelBridge` answers the frames of :mod:`dx1_bringup.spec.link` as the
gateware (:class:`~dx1_bringup.gateware.bridge.UartBridge`) answers them, in front
of the device model or any target with the same four methods, with
:class:`~dx1_bringup.faults.LineFaults` on the line.  The driver's serial
transport cannot tell it from a cable: :func:`dx1_bringup.backends.loopback_model_transport`
opens one on a fresh :class:`~dx1_bringup.model.device.DeviceModel`.
"""

from __future__ import annotations

import socket
import struct
import threading
import zlib
from typing import Any

from ..faults import LineFaults
from ..spec import (
    AXI_ERROR_WORD,
    BURST_HEADER,
    BURST_MAX_PAYLOAD,
    CRC_BYTES,
    LINK_BYTE_ORDER,
    MEM_BASE,
    REG_BASE,
    REG_BYTES,
    REG_HEADER,
    REG_MAX_WORDS,
    UARTBONE_HEADER,
    WORD_BYTES,
    FrameCommand,
    FrameStatus,
    struct_format,
)

__all__ = ["ModelBridge"]

_BURST = struct.Struct(struct_format(LINK_BYTE_ORDER, BURST_HEADER))
_REG = struct.Struct(struct_format(LINK_BYTE_ORDER, REG_HEADER))
_UARTBONE = struct.Struct(struct_format(LINK_BYTE_ORDER, UARTBONE_HEADER))


def _crc(data: bytes) -> bytes:
    return zlib.crc32(data).to_bytes(CRC_BYTES, LINK_BYTE_ORDER)


def _word(value: int) -> bytes:
    return value.to_bytes(WORD_BYTES, LINK_BYTE_ORDER)


def _status(status: FrameStatus) -> bytes:
    return bytes((status,))


class ModelBridge:
    """The board's UART bridge in Python, serving a register/memory target on a local TCP port.

    Parameters
    ----------
    target:
        Has ``read32(addr)``, ``write32(addr, value)``, ``mem_read(addr, n)`` and ``mem_write(addr, data)``
        (a :class:`~dx1_bringup.model.device.DeviceModel`).
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
        self._drop_in: int | None = None  # received bytes until the connection is cut (drop_after)
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

    def drop_after(self, n: int) -> None:
        """Cut the client's connection once ``n`` more bytes have arrived (a cable pulled mid-frame); a test hook.

        The bridge then waits for the next client, with the target's state kept, so reconnecting works.
        """
        if isinstance(n, bool) or not isinstance(n, int) or n < 0:
            raise ValueError(f"bytes before the drop must be an integer of 0 or more, not {n!r}")
        self._drop_in = n

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
            if self._drop_in is not None:
                if len(chunk) >= self._drop_in:
                    self._drop_in = None
                    self._conn.shutdown(socket.SHUT_RDWR)
                    raise ConnectionError("connection dropped (drop_after)")
                self._drop_in -= len(chunk)
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
        if cmd in (FrameCommand.UARTBONE_WRITE, FrameCommand.UARTBONE_READ):
            head = self._take(_UARTBONE.size - 1, faulty_regs)
            if head is None:
                return
            _, n, addr_word = _UARTBONE.unpack(bytes((cmd,)) + head)
            if cmd == FrameCommand.UARTBONE_READ:
                words = [self._bus_read(((addr_word + i) * WORD_BYTES) & 0xFFFF_FFFF) for i in range(n)]
                self._answer(b"".join(_word(w) for w in words), faulty_regs)
                return
            for i in range(n):
                word = self._take(WORD_BYTES, faulty_regs)
                if word is None:
                    return
                self._bus_write(((addr_word + i) * WORD_BYTES) & 0xFFFF_FFFF, int.from_bytes(word, LINK_BYTE_ORDER))
        elif cmd in (FrameCommand.BURST_WRITE, FrameCommand.BURST_READ):
            self._burst(cmd)
        elif cmd in (FrameCommand.REG_WRITE, FrameCommand.REG_READ):
            self._reg_frame(cmd)
        else:
            self._discard_until_idle()

    def _burst(self, cmd: int) -> None:
        rest = self._take(_BURST.size - 1 + CRC_BYTES, True)
        if rest is None:
            return
        head = bytes((cmd,)) + rest[:-CRC_BYTES]
        _, addr, length = _BURST.unpack(head)
        if _crc(head) != rest[-CRC_BYTES:]:
            self._answer(_status(FrameStatus.NAK_CRC), True)
            self._discard_until_idle()
            return
        offset = addr - MEM_BASE
        if not (0 < length <= BURST_MAX_PAYLOAD and 0 <= offset and offset + length <= self.mem_bytes):
            self._answer(_status(FrameStatus.NAK_RANGE), True)
            self._discard_until_idle()
            return
        if cmd == FrameCommand.BURST_READ:
            try:
                payload = self.target.mem_read(offset, length)
            except self.bus_errors:
                self._answer(_status(FrameStatus.BUS_ERROR), True)
                return
            self._answer(_status(FrameStatus.ACK) + payload + _crc(payload), True)
            return
        body = self._take(length + CRC_BYTES, True)
        if body is None:
            return
        if _crc(body[:length]) != body[length:]:
            self._answer(_status(FrameStatus.NAK_CRC), True)
            # A lost or doubled byte shifts everything after it: what follows cannot be trusted as frames.
            self._discard_until_idle()
            return
        try:
            self.target.mem_write(offset, body[:length])
        except self.bus_errors:
            self._answer(_status(FrameStatus.BUS_ERROR), True)
            return
        self._answer(_status(FrameStatus.ACK), True)

    def _reg_frame(self, cmd: int) -> None:
        head = self._take(_REG.size - 1, True)
        if head is None:
            return
        _, addr, n = _REG.unpack(bytes((cmd,)) + head)
        # A write's words come before the CRC; the count is only trusted once the CRC checks.
        body = self._take(WORD_BYTES * n + CRC_BYTES if cmd == FrameCommand.REG_WRITE else CRC_BYTES, True)
        if body is None:
            return
        if _crc(bytes((cmd,)) + head + body[:-CRC_BYTES]) != body[-CRC_BYTES:]:
            self._answer(_status(FrameStatus.NAK_CRC), True)
            self._discard_until_idle()
            return
        if not (0 < n <= REG_MAX_WORDS and addr % WORD_BYTES == 0 and REG_BASE <= addr
                and addr + WORD_BYTES * n <= REG_BASE + REG_BYTES):
            self._answer(_status(FrameStatus.NAK_RANGE), True)
            return
        ok = True
        if cmd == FrameCommand.REG_WRITE:
            # Every word is tried, as on the board; the refused ones are not written.
            for i in range(n):
                value = int.from_bytes(body[WORD_BYTES * i:WORD_BYTES * (i + 1)], LINK_BYTE_ORDER)
                try:
                    self.target.write32(addr - REG_BASE + WORD_BYTES * i, value)
                except (*self.bus_errors, ValueError):
                    ok = False
            self._answer(_status(FrameStatus.ACK if ok else FrameStatus.BUS_ERROR), True)
            return
        values = []
        for i in range(n):
            try:
                values.append(self.target.read32(addr - REG_BASE + WORD_BYTES * i))
            except (*self.bus_errors, ValueError):
                ok = False
        if not ok:
            self._answer(_status(FrameStatus.BUS_ERROR), True)
            return
        payload = b"".join(_word(v) for v in values)
        self._answer(_status(FrameStatus.ACK) + payload + _crc(payload), True)

    def _bus_read(self, byte_addr: int) -> int:
        try:
            if REG_BASE <= byte_addr < REG_BASE + REG_BYTES:
                return self.target.read32(byte_addr - REG_BASE)
            # A word's value sits little-endian in memory, as a CPU stores it (see UartBridge).
            return int.from_bytes(self.target.mem_read(byte_addr - MEM_BASE, WORD_BYTES), "little")
        except (*self.bus_errors, ValueError):
            return AXI_ERROR_WORD

    def _bus_write(self, byte_addr: int, value: int) -> None:
        # UARTBone has no answer to a write: an AXI error is lost, as on the board.
        try:
            if REG_BASE <= byte_addr < REG_BASE + REG_BYTES:
                self.target.write32(byte_addr - REG_BASE, value)
            elif byte_addr >= MEM_BASE:
                self.target.mem_write(byte_addr - MEM_BASE, value.to_bytes(WORD_BYTES, "little"))
        except (*self.bus_errors, ValueError):
            pass
