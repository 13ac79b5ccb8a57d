"""Transports: how the driver reaches a device's register space and memory.

A transport offers two address spaces, in the style of cocotbext-axi's
``AddressSpace``: the 32-bit register space and the device memory's host
port.  Subclasses implement the raw accesses (``_read32``, ``_write32``,
``_read_block``, ``_write_block`` and optionally ``_wait_irq``); the base class
checks every address before a subclass sees it, so backends never need to.
"""

from __future__ import annotations

import socket
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import TracebackType
from typing import Any

from . import link, regs
from .errors import TransportError

__all__ = ["Transport", "ModelTransport", "SimTransport", "open_transport", "start_simulator", "DEVICE_SPECS"]

#: The device strings :func:`open_transport` understands, for messages and ``--help`` texts.
DEVICE_SPECS = ("model", "model:FAULTS", "sim", "sim://HOST:PORT", "serial:URL", "pcie:BDF")


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

    def read32(self, addr: int) -> int:
        """Read the register at byte address ``addr``."""
        self._check_reg(addr)
        return self._read32(addr) & 0xFFFF_FFFF

    def write32(self, addr: int, value: int) -> None:
        """Write ``value`` (0 .. 2**32 - 1) to the register at byte address ``addr``."""
        self._check_reg(addr)
        if not 0 <= value <= 0xFFFF_FFFF:
            raise ValueError(f"register value must fit in 32 bits unsigned, not {value!r}")
        self._write32(addr, value)

    def read_u32s(self, addr: int, count: int) -> list[int]:
        """Read ``count`` consecutive registers starting at ``addr``."""
        if count < 0:
            raise ValueError(f"register count must not be negative, not {count}")
        if count:
            self._check_reg(addr)
            self._check_reg(addr + 4 * (count - 1))
        return [self._read32(addr + 4 * i) & 0xFFFF_FFFF for i in range(count)]

    def read_block(self, addr: int, n: int) -> bytes:
        """Read ``n`` bytes of device memory from ``addr``."""
        self._check_mem(addr, n)
        return bytes(self._read_block(addr, n)) if n else b""

    def write_block(self, addr: int, data: bytes | bytearray | memoryview) -> None:
        """Write ``data`` to device memory at ``addr``."""
        data = bytes(data)
        self._check_mem(addr, len(data))
        if data:
            self._write_block(addr, data)

    def wait_irq(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for an interrupt; ``False`` means none seen (poll the device)."""
        self._check_open()
        if timeout < 0:
            raise ValueError(f"timeout must not be negative, not {timeout}")
        return self._wait_irq(timeout)

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


class ModelTransport(Transport):
    """A transport to the golden model of the whole device, in this process.

    Parameters
    ----------
    config:
        A ``dx1_bringup.spec.SocConfig``; ``None`` for the default device.
    faults:
        A ``dx1_bringup.model.device.MemoryFaults`` that breaks the model's device memory
        (for bring-up scripts to find); ``None`` for a working device.

    Notes
    -----
    The model's package is imported here, lazily, so that the driver itself
    installs and runs without the bring-up framework.
    """

    has_irq_line = True

    def __init__(self, config: Any = None, faults: Any = None):
        from dx1_bringup.model.device import BusError, DeviceModel

        self._bus_error = BusError
        self.model = DeviceModel(config, faults=faults)
        super().__init__(self.model.regmap.size, self.model.config.mem_bytes)

    def _call(self, what: str, fn, *args):
        try:
            return fn(*args)
        except self._bus_error as e:
            raise TransportError(f"model bus error on {what}: {e}") from e

    def _read32(self, addr: int) -> int:
        return self._call(f"register read at 0x{addr:x}", self.model.read32, addr)

    def _write32(self, addr: int, value: int) -> None:
        self._call(f"register write at 0x{addr:x}", self.model.write32, addr, value)

    def _read_block(self, addr: int, n: int) -> bytes:
        return self._call(f"memory read at 0x{addr:x}", self.model.mem_read, addr, n)

    def _write_block(self, addr: int, data: bytes) -> None:
        self._call(f"memory write at 0x{addr:x}", self.model.mem_write, addr, data)

    def _wait_irq(self, timeout: float) -> bool:
        # The model runs commands synchronously inside the doorbell write, so
        # nothing can change while we wait: answer at once when the line is up.
        if self.model.irq_pending():
            return True
        time.sleep(timeout)
        return self.model.irq_pending()


class SimTransport(Transport):
    """A transport to the SoC simulated in Verilator, over a loopback TCP socket.

    Parameters
    ----------
    host, port:
        Where ``dx1 sim serve`` listens.
    process:
        A simulator process this transport owns (``open_transport("sim")``): it is
        asked to stop and waited for on :meth:`close`.

    Notes
    -----
    One request crosses the socket per register access or memory block, and one
    per interrupt wait, which runs the simulation until the interrupt line rises
    or ``link.SIM_IRQ_WAIT_CYCLES`` pass.  The protocol is the simulator socket of
    ``docs/link.md`` (the generated :mod:`.link`).
    """

    has_irq_line = True

    REQUEST = struct.Struct(link.SIM_REQUEST)
    RESPONSE = struct.Struct(link.SIM_RESPONSE)

    def __init__(self, host: str, port: int, process: subprocess.Popen | None = None, timeout: float = 600.0):
        self.process = process
        try:
            self.sock = socket.create_connection((host, port), timeout=timeout)
        except OSError as e:
            raise TransportError(f"cannot reach the simulator at {host}:{port}: {e}") from e
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.sock.settimeout(timeout)
        self.round_trips = 0
        mem_bytes = int.from_bytes(self._request(link.SimOp.READ32, regs.Global.MEM_BYTES), link.SIM_BYTE_ORDER)
        super().__init__(link.REG_BYTES, mem_bytes)

    def _recv(self, n: int) -> bytes:
        data = bytearray()
        while len(data) < n:
            try:
                chunk = self.sock.recv(n - len(data))
            except OSError as e:
                raise TransportError(f"simulator connection failed: {e}") from e
            if not chunk:
                raise TransportError("the simulator closed the connection")
            data += chunk
        return bytes(data)

    def _request(self, op: link.SimOp, addr: int = 0, n: int = 0, payload: bytes = b"") -> bytes:
        try:
            self.sock.sendall(self.REQUEST.pack(op, addr, n) + payload)
        except OSError as e:
            raise TransportError(f"simulator connection failed: {e}") from e
        self.round_trips += 1
        status, length = self.RESPONSE.unpack(self._recv(self.RESPONSE.size))
        data = self._recv(length)
        if status == link.SimStatus.BUS_ERROR:
            raise TransportError(f"bus error response to {op.name.lower()} at 0x{addr:x}")
        if status != link.SimStatus.OK:
            raise TransportError(f"the simulator refused {op.name.lower()}: {data.decode(errors='replace')}")
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
        try:
            self._request(link.SimOp.CLOSE, 0, 1 if self.process is not None else 0)
        except TransportError:
            pass  # already gone: nothing left to stop
        self.sock.close()
        if self.process is not None:
            try:
                self.process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def start_simulator(*, uart: bool = False, timeout: float = 900.0, fault_rate: float = 0.0,
                    fault_seed: int = 1) -> tuple[subprocess.Popen, int]:
    """Start a private `dx1 sim serve --once` and return it with its port (the first run builds it: minutes).

    With ``uart``, the simulated board's UART is served (for a :class:`SerialTransport` on
    ``socket://127.0.0.1:PORT``); otherwise the SoC's register and memory ports (for :class:`SimTransport`).
    ``fault_rate`` and ``fault_seed`` (``uart`` only) inject line faults as ``dx1 sim serve --fault-rate``
    does.  The server stops when its client disconnects.
    """
    if fault_rate and not uart:
        raise ValueError(f"fault_rate needs uart=True (faults are injected on the serial line), not {fault_rate!r}")
    if not 0 <= fault_rate < 0.5:
        raise ValueError(f"fault_rate must be from 0 to 0.5, not {fault_rate!r}")
    with tempfile.TemporaryDirectory() as tmp:
        port_file = Path(tmp) / "port"
        process = subprocess.Popen(
            [sys.executable, "-m", "dx1_bringup.sim.serve", "--once", "--port-file", str(port_file)]
            + (["--uart", f"--fault-rate={fault_rate!r}", f"--fault-seed={fault_seed}"] if uart else []),
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + timeout
        while not port_file.exists():
            if process.poll() is not None:
                raise TransportError(f"the simulator exited before listening:\n{process.stderr.read()[-2000:]}")
            if time.monotonic() > deadline:
                process.kill()
                raise TransportError(f"the simulator did not start listening within {timeout:.0f} s")
            time.sleep(0.2)
        return process, int(port_file.read_text())


def open_transport(spec: str) -> Transport:
    """Open the transport named by a device string.

    Parameters
    ----------
    spec:
        ``"model"`` (the in-process golden model); ``"model:FAULTS"`` (the same with broken
        device memory, for example ``model:stuck-bit=5`` or ``model:alias-bit=12``); ``"sim"``
        (a private simulator of the SoC, started here and stopped on close); ``"sim://HOST:PORT"`` (one started by
        ``dx1 sim serve``); ``"serial:URL[@BAUD][,timeout=SECONDS][,retries=N][,regs=crc|uartbone]"`` (a
        board's UART bridge at any pyserial URL, for example ``serial:/dev/ttyUSB0@115200`` or
        ``serial:socket://127.0.0.1:5555,timeout=60``; 3 000 000 baud, 1 s, 5 retries and CRC register
        frames by default; ``regs=uartbone`` for a LiteX-style bridge);
        ``"pcie:BDF"`` (a card's BARs through sysfs, for example ``pcie:0000:01:00.0``).

    Raises
    ------
    ValueError
        For an unknown or malformed device string.
    TransportError
        The device cannot be reached.
    """
    if spec == "model":
        return ModelTransport()
    if spec.startswith("model:"):
        from dx1_bringup.model.device import MemoryFaults

        try:
            return ModelTransport(faults=MemoryFaults.parse(spec[len("model:"):]))
        except ValueError as e:
            raise ValueError(f"device {spec!r}: {e}") from None
    if spec == "sim":
        process, port = start_simulator()
        return SimTransport("127.0.0.1", port, process=process)
    if spec.startswith("sim://"):
        host, sep, port = spec[len("sim://"):].rpartition(":")
        if not sep or not host or not port.isdigit():
            raise ValueError(f"device {spec!r}: expected sim://HOST:PORT, for example sim://127.0.0.1:5555")
        return SimTransport(host, int(port))
    if spec.startswith("serial:"):
        from .serial_device import parse_serial_device
        from .serial_transport import SerialTransport

        parsed = parse_serial_device(spec)
        return SerialTransport(parsed.url, parsed.baud, parsed.timeout, parsed.retries, regs=parsed.regs)
    if spec.startswith("pcie:"):
        from .pcie import PcieTransport, parse_bdf

        try:
            bdf = parse_bdf(spec[len("pcie:"):])
        except ValueError as e:
            raise ValueError(f"device {spec!r}: {e}") from None
        return PcieTransport(bdf)
    raise ValueError(f"unknown device {spec!r}; expected one of {', '.join(DEVICE_SPECS)}")
