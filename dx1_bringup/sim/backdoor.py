"""The simulation-only backdoor to device memory: bulk host loads and dumps that take no bus cycles.

The SoC simulation serves the host's memory requests (``READ_BLOCK``, ``WRITE_BLOCK``) either on its
AXI4 memory port, beat by beat through a cocotbext-axi master (``bus``), or straight into the memory
arrays (``backdoor``, the default of ``dx1 sim serve``): the arrays of the memory's banks are the only
signals below the top level that the build makes public (``backdoor.vlt``).  The backdoor exists only
in simulation; hardware has the bus path alone, and the bus path stays tested (the SoC testbenches
drive the port, and ``dx1 sim serve --host-path bus`` serves the driver through it).

Backdoor accesses happen between clock edges: a write is in the array before the next edge, so the
device's next read sees it; partial words at either end are read, merged and written back.
"""

from __future__ import annotations

from ..gateware.memory import MAX_BANKS, PAGE_BYTES
from ..spec import BUS_BYTES, SIM_BYTE_ORDER

__all__ = ["HOST_PATHS", "MemoryBackdoor", "word_location"]

#: How the simulation serves host memory requests.
HOST_PATHS = ("backdoor", "bus")


def word_location(i: int, banks: int) -> tuple[int, int]:
    """``(bank, row)`` of word ``i`` of device memory: pages of PAGE_BYTES go round the ``banks`` in turn."""
    page_words = PAGE_BYTES // BUS_BYTES
    page, offset = divmod(i, page_words)
    return page % banks, page // banks * page_words + offset


class MemoryBackdoor:
    """Direct access to the SoC's device memory arrays (``dut.memory.bank<b>.mem``, one word of BUS_BYTES a row).

    The banks interleave in pages of :data:`~..gateware.memory.PAGE_BYTES`, as :class:`~..gateware.memory.AxiMemory`
    maps them.
    """

    def __init__(self, dut):
        self.banks = []
        for b in range(MAX_BANKS):
            try:
                self.banks.append(getattr(dut.memory, f"bank{b}").mem)
            except AttributeError:
                break
        self.size = len(self.banks) * len(self.banks[0]) * BUS_BYTES

    def _word(self, i: int):
        """The handle of word ``i`` of device memory."""
        bank, row = word_location(i, len(self.banks))
        return self.banks[bank][row]

    def _check(self, addr: int, n: int) -> bool:
        return 0 <= addr and addr + n <= self.size

    def read(self, addr: int, n: int) -> bytes | None:
        """``n`` bytes at ``addr``, or ``None`` when they run outside the memory (a bus error)."""
        if not self._check(addr, n):
            return None
        first, last = addr // BUS_BYTES, (addr + n - 1) // BUS_BYTES
        raw = b"".join(int(self._word(i).value).to_bytes(BUS_BYTES, SIM_BYTE_ORDER) for i in range(first, last + 1))
        offset = addr - first * BUS_BYTES
        return raw[offset:offset + n]

    def write(self, addr: int, data: bytes) -> bool:
        """Write ``data`` at ``addr``; False (nothing written) when it runs outside the memory.

        The words are deposited without delay (cocotb's ``Immediate``), so a read that follows sees them
        whatever simulation phase the request is served in.  A plain (inertial) deposit is only queued:
        cocotb applies it at the next ReadWrite phase by ``vpi_put_value(..., vpiInertialDelay)``, which
        Verilator queues once more until its ReadWrite callbacks return (``VerilatedVpi::doInertialPuts``
        in cocotb's Verilator main loop).  A request served inside that callback, as the one after a
        register access ending on the clocked top's edge was, read the words from before the write.
        """
        from cocotb.handle import Immediate  # here: HOST_PATHS is imported where cocotb need not be installed

        if not self._check(addr, len(data)):
            return False
        if not data:
            return True
        first, last = addr // BUS_BYTES, (addr + len(data) - 1) // BUS_BYTES
        offset = addr - first * BUS_BYTES
        if offset or (addr + len(data)) % BUS_BYTES:
            merged = bytearray(self.read(first * BUS_BYTES, (last + 1 - first) * BUS_BYTES))
            merged[offset:offset + len(data)] = data
            data = bytes(merged)
        for k, i in enumerate(range(first, last + 1)):
            self._word(i).value = Immediate(int.from_bytes(data[k * BUS_BYTES:(k + 1) * BUS_BYTES], SIM_BYTE_ORDER))
        return True
