"""The transport to the SoC simulated in Verilator: a loopback TCP socket to ``dx1 sim serve``.

The socket's protocol is ``docs/link.md``'s simulator socket (the generated :mod:`.link`).  This
transport owns its socket and nothing else: whoever started the simulator process (the dx1-bringup
framework's ``sim`` backend) owns that process and stops it.
"""

from __future__ import annotations

import socket
import struct
import time

from . import link, regs
from .errors import BusErrorResponse, DeviceStuck, DriverError, LinkLost, LinkTimeout, TransportError
from .transport import Transport

__all__ = ["MAX_POSTED_WRITES", "SimTransport"]

#: Writes that may be sent ahead of their answers (their requests and answers stay far below the socket's
#: buffers, so neither end can block the other).
MAX_POSTED_WRITES = 256


class SimTransport(Transport):
    """A transport to the SoC simulated in Verilator, over a loopback TCP socket.

    Parameters
    ----------
    host, port:
        Where ``dx1 sim serve`` listens.
    stop_server:
        On :meth:`close`, ask the server to exit rather than to wait for the next client (for a
        simulator started for this transport alone).
    timeout:
        Seconds any request may take before :class:`LinkTimeout`, plus ``per_byte`` for each byte
        it moves: the deadline grows with the request's size.
    per_byte:
        Seconds of deadline per byte moved (the simulated memory port moves about 150 KiB/s).

    Notes
    -----
    One request crosses the socket per register access or memory block, and one
    per interrupt wait, which runs the simulation until the interrupt line rises
    or ``link.SIM_IRQ_WAIT_CYCLES`` pass.  The protocol is the simulator socket of
    ``docs/link.md`` (the generated :mod:`.link`).

    Writes are posted: a WRITE32 or WRITE_BLOCK is sent at once and the transport goes on
    without waiting for its answer; the next request that waits for an answer anyway (a read,
    an interrupt wait, CYCLES, ...) reads the posted writes' answers first, in order, and then its
    own, so it costs one round trip for all of them (:attr:`round_trips` counts those waits,
    :attr:`posted_writes` the writes that rode on them).  The server runs requests in the order they
    arrive and the simulation does not advance between them, so the device sees the same requests on
    the same cycles as without posting.  A posted write's failure (a bus error, STUCK) is raised by
    the request that collects its answer, naming the write; at most :data:`MAX_POSTED_WRITES` go
    ahead unanswered.

    No request blocks forever.  The server bounds each bus transaction by simulated cycles and
    answers ``STUCK`` with what it saw (:class:`DeviceStuck`); a simulator that stops answering (frozen,
    overloaded) ends the request at its wall-clock deadline (:class:`LinkTimeout`), and one that dies
    closes the socket (:class:`LinkLost`; a subclass adds what it knows through :meth:`_lost_note`).  After a timeout
    or a lost link the transport refuses every request: the socket's framing is gone.
    """

    has_irq_line = True

    REQUEST = struct.Struct(link.SIM_REQUEST)
    RESPONSE = struct.Struct(link.SIM_RESPONSE)

    def __init__(self, host: str, port: int, *, stop_server: bool = False, timeout: float = 60.0,
                 per_byte: float = 50e-6):
        if not timeout > 0 or not per_byte >= 0:
            raise ValueError(f"timeout must be positive and per_byte not negative, not {timeout!r} and {per_byte!r}")
        self.stop_server = stop_server
        self.timeout = timeout
        self.per_byte = per_byte
        self.broken = ""
        try:
            self.sock = socket.create_connection((host, port), timeout=timeout)
        except OSError as e:
            raise TransportError(f"cannot reach the simulator at {host}:{port}: {e}") from e
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.round_trips = 0
        self.posted_writes = 0
        self._posted: list[tuple[str, int, int]] = []  # (op name, addr, bytes moved) of unanswered writes
        mem_bytes = int.from_bytes(self._request(link.SimOp.READ32, regs.Global.MEM_BYTES), link.SIM_BYTE_ORDER)
        super().__init__(link.REG_BYTES, mem_bytes)

    def _lost_note(self) -> str:
        """What else is known about a lost link, appended to the message (``""``: nothing); for subclasses."""
        return ""

    def _lost(self, what: str) -> LinkLost:
        """Mark the link broken and say why."""
        what += self._lost_note()
        self.broken = what
        self.sock.close()
        return LinkLost(what)

    def _recv(self, n: int, op: str, addr: int, deadline: float, seconds: float) -> bytes:
        data = bytearray()
        while len(data) < n:
            remaining = deadline - time.monotonic()
            try:
                if remaining <= 0:
                    raise TimeoutError
                self.sock.settimeout(remaining)
                chunk = self.sock.recv(n - len(data))
            except TimeoutError:
                self.broken = f"{op} at 0x{addr:x} timed out after {seconds:.3g} s"
                self.sock.close()
                raise LinkTimeout(op, addr, seconds, "the simulator is frozen, or far slower than expected") from None
            except OSError as e:
                raise self._lost(f"simulator connection failed during {op} at 0x{addr:x}: {e}") from e
            if not chunk:
                raise self._lost(f"the simulator closed the connection during {op} at 0x{addr:x}")
            data += chunk
        return bytes(data)

    def _send(self, op: link.SimOp, addr: int, n: int, payload: bytes) -> str:
        name = op.name.lower()
        if self.broken:
            raise LinkLost(f"the simulator link is unusable after an earlier failure ({self.broken}); "
                           f"cannot {name} at 0x{addr:x}")
        try:
            self.sock.settimeout(self.timeout + self.per_byte * len(payload))
            self.sock.sendall(self.REQUEST.pack(op, addr, n) + payload)
        except OSError as e:
            raise self._lost(f"simulator connection failed sending {name} at 0x{addr:x}: {e}") from e
        return name

    def _post(self, op: link.SimOp, addr: int, n: int = 0, payload: bytes = b"") -> None:
        """Send a write without waiting for its answer (the next waiting request collects it)."""
        if len(self._posted) >= MAX_POSTED_WRITES:
            self._request(link.SimOp.CYCLES)  # collects the answers of those ahead
        name = self._send(op, addr, n, payload)
        self._posted.append((name, addr, len(payload)))
        self.posted_writes += 1

    def _request(self, op: link.SimOp, addr: int = 0, n: int = 0, payload: bytes = b"") -> bytes:
        """Send a request and return its answer's data, after the answers of every posted write ahead of it."""
        moved = n if op in (link.SimOp.READ_BLOCK, link.SimOp.WRITE_BLOCK) else 0
        name = self._send(op, addr, n, payload)
        self.round_trips += 1
        waiting, self._posted = [*self._posted, (name, addr, moved)], []
        seconds = self.timeout + self.per_byte * sum(m for _, _, m in waiting)
        deadline = time.monotonic() + seconds
        failure: DriverError | None = None
        for what, at, _ in waiting:
            status, length = self.RESPONSE.unpack(self._recv(self.RESPONSE.size, what, at, deadline, seconds))
            data = self._recv(length, what, at, deadline, seconds)
            if failure is None and status != link.SimStatus.OK:
                failure = self._failure(status, what, at, data)
        if failure is not None:
            raise failure
        return data

    @staticmethod
    def _failure(status: int, name: str, addr: int, data: bytes) -> DriverError:
        if status == link.SimStatus.BUS_ERROR:
            return BusErrorResponse(f"bus error response to {name} at 0x{addr:x}")
        if status == link.SimStatus.STUCK:
            return DeviceStuck(name, addr, data.decode(errors="replace"))
        return TransportError(f"the simulator refused {name}: {data.decode(errors='replace')}")

    def _read32(self, addr: int) -> int:
        return int.from_bytes(self._request(link.SimOp.READ32, addr), link.SIM_BYTE_ORDER)

    def _write32(self, addr: int, value: int) -> None:
        self._post(link.SimOp.WRITE32, addr, value)

    def _read_block(self, addr: int, n: int) -> bytes:
        out = bytearray()
        for offset in range(0, n, link.SIM_MAX_BLOCK):
            out += self._request(link.SimOp.READ_BLOCK, addr + offset, min(link.SIM_MAX_BLOCK, n - offset))
        return bytes(out)

    def _write_block(self, addr: int, data: bytes) -> None:
        for offset in range(0, len(data), link.SIM_MAX_BLOCK):
            chunk = data[offset:offset + link.SIM_MAX_BLOCK]
            self._post(link.SimOp.WRITE_BLOCK, addr + offset, len(chunk), chunk)

    def _wait_irq(self, timeout: float) -> bool:
        return self._request(link.SimOp.WAIT_IRQ, 0, link.SIM_IRQ_WAIT_CYCLES) == b"\x01"

    def cycles(self) -> int:
        """Simulated cycles since the simulator started."""
        return int.from_bytes(self._request(link.SimOp.CYCLES), link.SIM_BYTE_ORDER)

    def _close(self) -> None:
        failure = None
        if not self.broken:
            try:
                self._request(link.SimOp.CLOSE, 0, int(self.stop_server))
            except (BusErrorResponse, DeviceStuck) as e:
                failure = e  # a posted write's answer, collected by CLOSE: the server got CLOSE all the same
            except TransportError:
                pass  # already gone: nothing left to stop
        self.sock.close()
        if failure is not None:
            raise failure
