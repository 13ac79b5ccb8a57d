"""Faults of device memory: a data bit of the memory bus stuck at 0 or 1, an address line stuck at 0.

They act on the memory itself, the way a bad board does, so every reader and
writer of it sees them: the host port, the DMA, command fetches and completion
writes (``dx1_bringup.model.device.DeviceModel`` reads and writes its memory
through :meth:`MemoryFaults.read` and :meth:`MemoryFaults.write`).
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import ClassVar

import numpy as np

from ..spec import BUS_BYTES
from .base import FaultKey, force_bit, natural, parse_faults

__all__ = ["MemoryFaults"]

_BUS_BITS = 8 * BUS_BYTES
_LANE_BITS = (BUS_BYTES - 1).bit_length()


@dataclass(frozen=True)
class MemoryFaults:
    """Faults of device memory.

    Parameters
    ----------
    stuck_bit:
        Data bit of the memory bus (0 .. 8 * BUS_BYTES - 1) that reads ``stuck_value`` whatever
        was written: bit ``stuck_bit % 8`` of every byte at an address ``a`` with
        ``a % BUS_BYTES == stuck_bit // 8``.  ``None``: no stuck bit.
    stuck_value:
        0 or 1.
    alias_bit:
        Address bit (above the byte-lane bits of the bus, which pick a lane, not an address
        line) whose line is stuck at 0.  ``None``: no alias.
    """

    stuck_bit: int | None = None
    stuck_value: int = 1
    alias_bit: int | None = None

    #: Kind name in fault-string messages.
    NAME: ClassVar[str] = "memory"
    #: Fault-string keys (see :func:`~dx1_bringup.faults.parse_faults`).
    KEYS: ClassVar[dict[str, FaultKey]] = {
        "stuck-bit": FaultKey(("stuck_bit",), natural),
        "stuck-at": FaultKey(("stuck_value",), natural),
        "alias-bit": FaultKey(("alias_bit",), natural),
    }

    def __post_init__(self) -> None:
        if self.stuck_bit is not None and not (isinstance(self.stuck_bit, int) and 0 <= self.stuck_bit < _BUS_BITS):
            raise ValueError(f"stuck_bit must be a data bit 0 to {_BUS_BITS - 1}, not {self.stuck_bit!r}")
        if self.stuck_value not in (0, 1):
            raise ValueError(f"stuck_value must be 0 or 1, not {self.stuck_value!r}")
        if self.alias_bit is not None and not (isinstance(self.alias_bit, int) and self.alias_bit >= _LANE_BITS):
            raise ValueError(f"alias_bit must be an address bit of {_LANE_BITS} or more (bits 0-{_LANE_BITS - 1} "
                             f"select a byte lane), not {self.alias_bit!r}")

    @classmethod
    def parse(cls, text: str) -> MemoryFaults:
        """Faults from a device-string suffix such as ``"stuck-bit=5"`` or ``"stuck-bit=5,stuck-at=0,alias-bit=12"``.

        Raises
        ------
        ValueError
            An item that is not one of :attr:`KEYS` with a natural number, a key given twice, or a value out of
            range.
        """
        return parse_faults(text, (cls,))[cls]

    def __str__(self) -> str:
        keys = {spec.fields[0]: key for key, spec in self.KEYS.items()}
        return ",".join(f"{keys[f.name]}={getattr(self, f.name)}" for f in fields(self)
                        if getattr(self, f.name) is not None and not (f.name == "stuck_value"
                                                                      and self.stuck_bit is None))

    def check_size(self, mem_bytes: int) -> None:
        """Raise ``ValueError`` unless the aliased address line exists in a memory of ``mem_bytes`` bytes."""
        if self.alias_bit is not None and 1 << self.alias_bit >= mem_bytes:
            raise ValueError(f"alias_bit {self.alias_bit} is not an address line of a device memory of "
                             f"{mem_bytes} bytes")

    def _cells(self, addr: int, length: int) -> np.ndarray:
        """Where bytes ``addr .. addr + length - 1`` are stored, through a stuck address line."""
        where = np.arange(addr, addr + length, dtype=np.int64)
        return where & ~(1 << self.alias_bit) if self.alias_bit is not None else where

    def read(self, mem: bytearray, addr: int, length: int) -> bytes:
        """``length`` bytes at ``addr`` of the memory ``mem`` as a reader sees them through the faults."""
        data = np.frombuffer(mem, np.uint8)[self._cells(addr, length)]
        if self.stuck_bit is not None:
            lane = (np.arange(addr, addr + length) % BUS_BYTES) == self.stuck_bit // 8
            force_bit(data, self.stuck_bit % 8, self.stuck_value, lane)
        return data.tobytes()

    def write(self, mem: bytearray, addr: int, data: bytes) -> None:
        """Store ``data`` at ``addr`` of the memory ``mem`` as a writer does through the faults."""
        if self.alias_bit is None:
            mem[addr:addr + len(data)] = data
        else:
            np.frombuffer(mem, np.uint8)[self._cells(addr, len(data))] = np.frombuffer(data, np.uint8)
