"""Transports: how the driver reaches a device's register space and memory.

A transport offers two address spaces, in the style of cocotbext-axi's
``AddressSpace``: the 32-bit register space and the device memory's host
port.  Subclasses implement the raw accesses (``_read32``, ``_write32``,
``_read_block``, ``_write_block`` and optionally ``_wait_irq``); the base class
checks every address before a subclass sees it, so backends never need to.

Each transport has its own module (:mod:`.sim_transport`, :mod:`.serial_transport`, :mod:`.pcie`) that
imports only this base class; :mod:`.registry` maps device strings to them.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from types import TracebackType

from .errors import TransportError

__all__ = ["Transport"]


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
