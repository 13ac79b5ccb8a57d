"""The PCIe transport: a DX-1 card's BARs mapped into this process through sysfs.

BAR0 is the register space, BAR2 device memory.  Both are mapped with
:func:`mmap.mmap` from ``/sys/bus/pci/devices/<BDF>/resource0`` and
``resource2``, which needs root (or write access to those files) and a device
that no kernel driver claims, enabled with ``echo 1 > .../enable``.  The
alternative, for unprivileged users and for interrupts, is VFIO: bind the card
to ``vfio-pci`` and map the BARs from the VFIO device file descriptor
(``VFIO_DEVICE_GET_REGION_INFO`` gives each region's offset); the same
:class:`BarMapping` interface fits it, only the way the buffer is obtained
differs.  Without VFIO there is no interrupt: :meth:`PcieTransport.wait_irq`
sleeps and the driver polls.

Nothing here has run on hardware: the tests run the access layer over BARs
served by the golden model (the framework's ``dx1_bringup.backends.ModelBar``)
and over regular files mapped like sysfs resources.

Access rules
------------
* Registers are 32-bit loads and stores at 4-byte aligned offsets, through a
  ``memoryview`` cast to unsigned 32-bit words, so that each access is one bus
  transaction of the right width; a misaligned or out-of-range offset raises
  :class:`ValueError` before the BAR is touched.  The host must be
  little-endian, as PCIe is.
* Device memory moves as block copies (any alignment, any length).
* Writes are posted: they may still be on their way when the store returns.
  PCIe keeps posted writes in order and a read never passes an earlier write
  to the same device, so *reads flush*: a descriptor written to BAR2 reaches
  memory before a doorbell written to BAR0 after it, and every write is done
  once any later read returns.  :meth:`PcieTransport.flush` reads GLOBAL ID for
  the paths that need a write to have landed: before waiting for an interrupt
  and on close.
* A card that is gone (surprise removal, link down) answers every read with
  all ones.  Reads cannot time out, but a register or a memory block that
  reads all ones is checked by reading GLOBAL ID (never all ones on a card that is there), and an
  ID of all ones raises :class:`LinkLost`, as does every wait and
  :meth:`PcieTransport.flush`; the waits themselves end at their deadlines
  (:class:`DeviceTimeout`), so nothing blocks forever.
"""

from __future__ import annotations

import mmap
import os
import re
import sys
from pathlib import Path

from . import regs
from .errors import LinkLost, TransportError
from .transport import Transport

#: What a PCIe read of a device that is gone returns.
ALL_ONES = 0xFFFF_FFFF

__all__ = ["SYSFS_PCI_DEVICES", "BarMapping", "MmapBar", "PcieTransport", "parse_bdf"]

#: Where Linux lists PCI devices.
SYSFS_PCI_DEVICES = "/sys/bus/pci/devices"
_BDF = re.compile(r"(?:([0-9a-f]{4}):)?([0-9a-f]{2}):([01][0-9a-f])\.([0-7])")


def parse_bdf(bdf: str) -> str:
    """Normalise a PCI address to ``DDDD:BB:DD.F`` (domain 0000 when omitted, lower-case hex).

    Raises
    ------
    ValueError
        Not ``[DOMAIN:]BUS:DEVICE.FUNCTION`` with hex domain (4 digits), bus (2), device (00-1f), function (0-7).
    """
    m = _BDF.fullmatch(bdf.lower())
    if m is None:
        raise ValueError(f"PCI address {bdf!r} is not [DOMAIN:]BUS:DEVICE.FUNCTION, for example 0000:01:00.0")
    domain, bus, dev, fn = m.groups()
    return f"{domain or '0000'}:{bus}:{dev}.{fn}"


class BarMapping:
    """One BAR as the transport sees it: checked 32-bit word accesses and byte-block copies.

    Parameters
    ----------
    size:
        Size of the BAR in bytes.

    Notes
    -----
    Subclasses implement ``_read32``, ``_write32``, ``_read`` and ``_write`` on offsets
    already checked here, and optionally ``_close``.
    """

    def __init__(self, size: int):
        self.size = size

    def _check(self, offset: int, n: int, word: bool) -> None:
        if word and offset % 4:
            raise ValueError(f"BAR offset 0x{offset:x} is not 4-byte aligned")
        if n < 0 or offset < 0 or offset + n > self.size:
            raise ValueError(f"BAR range 0x{offset:x}+{n} bytes is outside the BAR of 0x{self.size:x} bytes")

    def read32(self, offset: int) -> int:
        self._check(offset, 4, True)
        return self._read32(offset)

    def write32(self, offset: int, value: int) -> None:
        self._check(offset, 4, True)
        self._write32(offset, value)

    def read(self, offset: int, n: int) -> bytes:
        self._check(offset, n, False)
        return self._read(offset, n)

    def write(self, offset: int, data: bytes) -> None:
        self._check(offset, len(data), False)
        self._write(offset, data)

    def close(self) -> None:
        """Release the mapping."""

    def _read32(self, offset: int) -> int:
        raise NotImplementedError

    def _write32(self, offset: int, value: int) -> None:
        raise NotImplementedError

    def _read(self, offset: int, n: int) -> bytes:
        raise NotImplementedError

    def _write(self, offset: int, data: bytes) -> None:
        raise NotImplementedError


class MmapBar(BarMapping):
    """A BAR mapped from a sysfs ``resourceN`` file (or any file that maps like one).

    Raises
    ------
    TransportError
        The file cannot be opened or mapped (typically: not root, or the BAR is an I/O BAR).
    """

    def __init__(self, path: str | os.PathLike[str]):
        if sys.byteorder != "little":
            raise TransportError("the PCIe transport needs a little-endian host (PCIe registers are little-endian)")
        self.path = Path(path)
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_SYNC)
        except OSError as e:
            raise TransportError(f"cannot open {self.path}: {e.strerror} (mapping a BAR needs root, "
                                 f"or bind the device to vfio-pci)") from e
        try:
            size = os.fstat(fd).st_size
            self._mm = mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        except (OSError, ValueError) as e:
            raise TransportError(f"cannot map {self.path}: {e}") from e
        finally:
            os.close(fd)  # the mapping keeps its own reference
        super().__init__(size)
        self._words = memoryview(self._mm).cast("I")

    def _read32(self, offset: int) -> int:
        return self._words[offset >> 2]

    def _write32(self, offset: int, value: int) -> None:
        self._words[offset >> 2] = value

    def _read(self, offset: int, n: int) -> bytes:
        return self._mm[offset:offset + n]

    def _write(self, offset: int, data: bytes) -> None:
        self._mm[offset:offset + len(data)] = data

    def close(self) -> None:
        self._words.release()
        self._mm.close()


class PcieTransport(Transport):
    """A transport to a DX-1 card over PCIe: BAR0 registers, BAR2 device memory.

    Parameters
    ----------
    bdf:
        The card's PCI address, ``[DOMAIN:]BUS:DEVICE.FUNCTION`` (``lspci -D`` shows it).
    sysfs_root:
        Where the PCI devices are listed (tests point it at a directory of regular files).
    bars:
        Already-open (BAR0, BAR2) mappings to use instead of sysfs; ``bdf`` then only names them.

    Raises
    ------
    ValueError
        ``bdf`` is not a PCI address.
    TransportError
        No such device, a BAR cannot be mapped, or BAR2 is smaller than ``MEM_BYTES``.
    """

    def __init__(self, bdf: str, *, sysfs_root: str | os.PathLike[str] = SYSFS_PCI_DEVICES,
                 bars: tuple[BarMapping, BarMapping] | None = None):
        self.bdf = bdf
        if bars is None:
            self.bdf = parse_bdf(bdf)
            bars = self._map(Path(sysfs_root) / self.bdf)
        self.bar0, self.bar2 = bars
        try:
            mem_bytes = self.bar0.read32(regs.Global.MEM_BYTES)
            if mem_bytes > self.bar2.size:
                raise TransportError(f"PCI device {self.bdf}: MEM_BYTES is {mem_bytes} but BAR2 has only "
                                     f"{self.bar2.size} bytes")
            super().__init__(self.bar0.size, mem_bytes)
        except BaseException:
            self.bar0.close()
            self.bar2.close()
            raise

    def _map(self, device: Path) -> tuple[BarMapping, BarMapping]:
        if not device.exists():
            raise TransportError(f"no PCI device {self.bdf} ({device} does not exist)")
        paths = [device / f"resource{n}" for n in (0, 2)]
        for n, path in zip((0, 2), paths, strict=True):
            if not path.exists():
                raise TransportError(f"PCI device {self.bdf} has no BAR{n} ({path} does not exist)")
        bar0 = MmapBar(paths[0])
        try:
            return bar0, MmapBar(paths[1])
        except BaseException:
            bar0.close()
            raise

    def flush(self) -> None:
        """Wait until every posted write has reached the device, by reading a register (reads flush).

        Raises
        ------
        LinkLost
            GLOBAL ID reads all ones: the card is gone (removed, or its link is down).
        """
        self._check_open()
        self._read_id()

    def _read_id(self) -> None:
        if self.bar0.read32(regs.Global.ID) == ALL_ONES:
            raise LinkLost(f"PCI device {self.bdf} reads all ones (GLOBAL ID 0x{ALL_ONES:08x}): it was removed "
                           f"or its link is down")

    def _read32(self, addr: int) -> int:
        value = self.bar0.read32(addr)
        if value == ALL_ONES:
            self._read_id()
        return value

    def _write32(self, addr: int, value: int) -> None:
        self.bar0.write32(addr, value)

    def _read_block(self, addr: int, n: int) -> bytes:
        data = self.bar2.read(addr, n)
        if data.count(0xFF) == len(data):
            self._read_id()  # all ones may be a card that is gone: never hand them out as completions
        return data

    def _write_block(self, addr: int, data: bytes) -> None:
        self.bar2.write(addr, data)

    def _wait_irq(self, timeout: float) -> bool:
        # No interrupt without VFIO: make sure the doorbell has landed (and the card is there), then poll.
        self._read_id()
        return super()._wait_irq(timeout)

    def _close(self) -> None:
        try:
            self.bar0.read32(regs.Global.ID)
        finally:
            self.bar0.close()
            self.bar2.close()
