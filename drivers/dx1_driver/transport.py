"""Transports: how the driver reaches a device's register space and memory.

A transport offers two address spaces, in the style of cocotbext-axi's
``AddressSpace``: the 32-bit register space and the device memory's host
port.  Subclasses implement the raw accesses (``_read32``, ``_write32``,
``_read_block``, ``_write_block`` and optionally ``_wait_irq``); the base class
checks every address before a subclass sees it, so backends never need to.

:class:`SimTransport`, the socket to a simulator of the SoC, lives here too; the other transports
(:mod:`.serial_transport`, :mod:`.pcie`) each import only the base class, and :mod:`.registry` maps device
strings to them.
"""

from __future__ import annotations

import socket
import struct
import subprocess
import time
from collections.abc import Callable
from types import TracebackType

from . import link, regs
from .errors import BusErrorResponse, DeviceStuck, LinkLost, LinkTimeout, TransportError

__all__ = ["Transport", "SimTransport"]


class Transport:
    """Base class of every transport.

    Parameters
    ----------
    reg_bytes:
        Size of the register space in bytes; register addresses are ``0 .. reg_bytes - 4``.
    mem_bytes:
        Size of device memory in bytes.

    Notes
    -----
    Contract of the public methods: register accesses are 32 bits wide and
    4-byte aligned, values are unsigned 32-bit integers; memory accesses may
    have any address and length inside device memory.  A violated range
    raises ``ValueError`` before anything reaches the device; a device-side
    failure raises :class:`TransportError`; any use after :meth:`close` raises
    :class:`TransportError`.
    """

    #: Whether :meth:`wait_irq` watches a real interrupt line (otherwise callers poll IRQ_STATUS).
    has_irq_line: bool = False

    #: Called after every public request that returns, as ``observer(kind, addr, nbytes, start_ns, end_ns)``:
    #: ``kind`` is the method's name (``"read32"``, ``"write32"``, ``"read_u32s"``, ``"read_block"``,
    #: ``"write_block"``, ``"wait_irq"``), ``nbytes`` the bytes moved (0 for ``wait_irq``), the times
    #: ``time.monotonic_ns()`` around the request.  ``None``: nobody listens (a profiler or timeline sets it).
    observer: Callable[[str, int, int, int, int], None] | None = None

    def __init__(self, reg_bytes: int, mem_bytes: int):
        if reg_bytes <= 0 or reg_bytes % 4:
            raise ValueError(f"register space size must be a positive multiple of 4, not {reg_bytes!r}")
        if mem_bytes <= 0:
            raise ValueError(f"device memory size must be positive, not {mem_bytes!r}")
        self.reg_bytes = reg_bytes
        self.mem_bytes = mem_bytes
        self.closed = False

    # -- what subclasses implement -------------------------------------------------------------

    def _read32(self, addr: int) -> int:
        raise NotImplementedError

    def _write32(self, addr: int, value: int) -> None:
        raise NotImplementedError

    def _read_block(self, addr: int, n: int) -> bytes:
        raise NotImplementedError

    def _write_block(self, addr: int, data: bytes) -> None:
        raise NotImplementedError

    def _wait_irq(self, timeout: float) -> bool:
        """Wait for the interrupt line; without one, sleep ``timeout`` and report none (the caller polls)."""
        time.sleep(timeout)
        return False

    def _close(self) -> None:
        """Release the backend's resources; called once by :meth:`close`."""

    # -- checked public interface ---------------------------------------------------------------

    def _check_open(self) -> None:
        if self.closed:
            raise TransportError(f"{type(self).__name__} is closed")

    def _check_reg(self, addr: int) -> None:
        self._check_open()
        if addr % 4:
            raise ValueError(f"register address 0x{addr:x} is not 4-byte aligned")
        if not 0 <= addr <= self.reg_bytes - 4:
            raise ValueError(f"register address 0x{addr:x} is outside the register space "
                             f"0x0..0x{self.reg_bytes - 1:x}")

    def _check_mem(self, addr: int, n: int) -> None:
        self._check_open()
        if n < 0:
            raise ValueError(f"memory access length must not be negative, not {n}")
        if addr < 0 or addr + n > self.mem_bytes:
            raise ValueError(f"memory range 0x{addr:x}+{n} bytes is outside device memory "
                             f"0x0..0x{self.mem_bytes - 1:x}")

    def _observe(self, kind: str, addr: int, nbytes: int, start_ns: int) -> None:
        if self.observer is not None:
            self.observer(kind, addr, nbytes, start_ns, time.monotonic_ns())

    def read32(self, addr: int) -> int:
        """Read the register at byte address ``addr``."""
        self._check_reg(addr)
        start = time.monotonic_ns()
        value = self._read32(addr) & 0xFFFF_FFFF
        self._observe("read32", addr, 4, start)
        return value

    def write32(self, addr: int, value: int) -> None:
        """Write ``value`` (0 .. 2**32 - 1) to the register at byte address ``addr``."""
        self._check_reg(addr)
        if not 0 <= value <= 0xFFFF_FFFF:
            raise ValueError(f"register value must fit in 32 bits unsigned, not {value!r}")
        start = time.monotonic_ns()
        self._write32(addr, value)
        self._observe("write32", addr, 4, start)

    def read_u32s(self, addr: int, count: int) -> list[int]:
        """Read ``count`` consecutive registers starting at ``addr``."""
        if count < 0:
            raise ValueError(f"register count must not be negative, not {count}")
        if count:
            self._check_reg(addr)
            self._check_reg(addr + 4 * (count - 1))
        start = time.monotonic_ns()
        values = [self._read32(addr + 4 * i) & 0xFFFF_FFFF for i in range(count)]
        self._observe("read_u32s", addr, 4 * count, start)
        return values

    def read_block(self, addr: int, n: int) -> bytes:
        """Read ``n`` bytes of device memory from ``addr``."""
        self._check_mem(addr, n)
        start = time.monotonic_ns()
        data = bytes(self._read_block(addr, n)) if n else b""
        self._observe("read_block", addr, n, start)
        return data

    def write_block(self, addr: int, data: bytes | bytearray | memoryview) -> None:
        """Write ``data`` to device memory at ``addr``."""
        data = bytes(data)
        self._check_mem(addr, len(data))
        if data:
            start = time.monotonic_ns()
            self._write_block(addr, data)
            self._observe("write_block", addr, len(data), start)

    def wait_irq(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for an interrupt; ``False`` means none seen (poll the device)."""
        self._check_open()
        if timeout < 0:
            raise ValueError(f"timeout must not be negative, not {timeout}")
        start = time.monotonic_ns()
        seen = self._wait_irq(timeout)
        self._observe("wait_irq", 0, 0, start)
        return seen

    def close(self) -> None:
        """Close the transport; closing twice is harmless."""
        if not self.closed:
            self.closed = True
            self._close()

    def __enter__(self) -> Transport:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()


class SimTransport(Transport):
    """A transport to the SoC simulated in Verilator, over a loopback TCP socket.

    Parameters
    ----------
    host, port:
        Where ``dx1 sim serve`` listens.
    process:
        A simulator process this transport owns (``open_transport("sim")``): it is
        asked to stop and waited for on :meth:`close`.
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

    No request blocks forever.  The server bounds each bus transaction by simulated cycles and
    answers ``STUCK`` with what it saw (:class:`DeviceStuck`); a simulator that stops answering (frozen,
    overloaded) ends the request at its wall-clock deadline (:class:`LinkTimeout`), and one that dies
    closes the socket (:class:`LinkLost`, with the exit code of an owned process).  After a timeout
    or a lost link the transport refuses every request: the socket's framing is gone.
    """

    has_irq_line = True

    REQUEST = struct.Struct(link.SIM_REQUEST)
    RESPONSE = struct.Struct(link.SIM_RESPONSE)

    def __init__(self, host: str, port: int, process: subprocess.Popen | None = None, timeout: float = 60.0,
                 per_byte: float = 50e-6):
        if not timeout > 0 or not per_byte >= 0:
            raise ValueError(f"timeout must be positive and per_byte not negative, not {timeout!r} and {per_byte!r}")
        self.process = process
        self.timeout = timeout
        self.per_byte = per_byte
        self.broken = ""
        try:
            self.sock = socket.create_connection((host, port), timeout=timeout)
        except OSError as e:
            raise TransportError(f"cannot reach the simulator at {host}:{port}: {e}") from e
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.round_trips = 0
        mem_bytes = int.from_bytes(self._request(link.SimOp.READ32, regs.Global.MEM_BYTES), link.SIM_BYTE_ORDER)
        super().__init__(link.REG_BYTES, mem_bytes)

    def _lost(self, what: str) -> LinkLost:
        """Mark the link broken and say why, with the exit code of an owned simulator that died."""
        if self.process is not None and self.process.poll() is not None:
            what += f" (the simulator process exited with code {self.process.returncode})"
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

    def _request(self, op: link.SimOp, addr: int = 0, n: int = 0, payload: bytes = b"") -> bytes:
        name = op.name.lower()
        if self.broken:
            raise LinkLost(f"the simulator link is unusable after an earlier failure ({self.broken}); "
                           f"cannot {name} at 0x{addr:x}")
        moved = n if op in (link.SimOp.READ_BLOCK, link.SimOp.WRITE_BLOCK) else 0
        seconds = self.timeout + self.per_byte * moved
        deadline = time.monotonic() + seconds
        try:
            self.sock.settimeout(seconds)
            self.sock.sendall(self.REQUEST.pack(op, addr, n) + payload)
        except OSError as e:
            raise self._lost(f"simulator connection failed sending {name} at 0x{addr:x}: {e}") from e
        self.round_trips += 1
        status, length = self.RESPONSE.unpack(self._recv(self.RESPONSE.size, name, addr, deadline, seconds))
        data = self._recv(length, name, addr, deadline, seconds)
        if status == link.SimStatus.BUS_ERROR:
            raise BusErrorResponse(f"bus error response to {name} at 0x{addr:x}")
        if status == link.SimStatus.STUCK:
            raise DeviceStuck(name, addr, data.decode(errors="replace"))
        if status != link.SimStatus.OK:
            raise TransportError(f"the simulator refused {name}: {data.decode(errors='replace')}")
        return data

    def _read32(self, addr: int) -> int:
        return int.from_bytes(self._request(link.SimOp.READ32, addr), link.SIM_BYTE_ORDER)

    def _write32(self, addr: int, value: int) -> None:
        self._request(link.SimOp.WRITE32, addr, value)

    def _read_block(self, addr: int, n: int) -> bytes:
        out = bytearray()
        for offset in range(0, n, link.SIM_MAX_BLOCK):
            out += self._request(link.SimOp.READ_BLOCK, addr + offset, min(link.SIM_MAX_BLOCK, n - offset))
        return bytes(out)

    def _write_block(self, addr: int, data: bytes) -> None:
        for offset in range(0, len(data), link.SIM_MAX_BLOCK):
            chunk = data[offset:offset + link.SIM_MAX_BLOCK]
            self._request(link.SimOp.WRITE_BLOCK, addr + offset, len(chunk), chunk)

    def _wait_irq(self, timeout: float) -> bool:
        return self._request(link.SimOp.WAIT_IRQ, 0, link.SIM_IRQ_WAIT_CYCLES) == b"\x01"

    def cycles(self) -> int:
        """Simulated cycles since the simulator started."""
        return int.from_bytes(self._request(link.SimOp.CYCLES), link.SIM_BYTE_ORDER)

    def _close(self) -> None:
        if not self.broken:
            try:
                self._request(link.SimOp.CLOSE, 0, 1 if self.process is not None else 0)
            except TransportError:
                pass  # already gone: nothing left to stop
        self.sock.close()
        if self.process is not None:
            try:
                # A simulator that answered CLOSE stops at once; a broken one is not waited for long.
                self.process.wait(timeout=5 if self.broken else 60)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
