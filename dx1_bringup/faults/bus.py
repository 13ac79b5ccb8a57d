"""Bus faults: device memory that answers AXI error responses (SLVERR) in a chosen address window.

In a fault string ``bus-error=0x1000+0x40`` makes the 0x40 bytes from 0x1000 answer errors: a host
access touching them fails (the transport's bus error), a DMA command (LOAD, STORE, COPY) whose bytes
touch them completes with ``BUS_ERROR`` and changes nothing, and a command fetch or completion write
there halts the queue with ``BUS_ERROR``.  The golden model injects it
(``dx1_bringup.model.device.DeviceModel``); the SoC RTL has no such window, and its bus errors come
from addresses past device memory (a ring placed there), which the model answers the same way.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from .base import FaultKey, parse_faults

__all__ = ["BusErrors"]


def _window(text: str) -> tuple[int, int]:
    start, sep, length = text.partition("+")
    if not sep:
        raise ValueError(f"a bus-error window is START+LENGTH, not {text!r}")
    return int(start, 0), int(length, 0)


@dataclass(frozen=True)
class BusErrors:
    """An address window of device memory that answers every access with an error response.

    Parameters
    ----------
    window:
        ``(start, length)``: the first byte address (0 or more) and the bytes in the window (1 or more).
    """

    window: tuple[int, int] = (0, 1)

    #: Kind name in fault-string messages.
    NAME: ClassVar[str] = "bus"
    #: Fault-string keys (see :func:`~dx1_bringup.faults.parse_faults`).
    KEYS: ClassVar[dict[str, FaultKey]] = {"bus-error": FaultKey(("window",), _window, "START+LENGTH")}

    def __post_init__(self) -> None:
        ok = isinstance(self.window, tuple) and len(self.window) == 2 and all(
            isinstance(v, int) and not isinstance(v, bool) for v in self.window)
        if not ok or self.window[0] < 0 or self.window[1] < 1:
            raise ValueError(f"a bus-error window must be (start, length) with start 0 or more and length 1 or "
                             f"more, not {self.window!r}")

    @property
    def start(self) -> int:
        """First byte address of the window."""
        return self.window[0]

    @property
    def length(self) -> int:
        """Bytes in the window."""
        return self.window[1]

    @classmethod
    def parse(cls, text: str) -> BusErrors:
        """The window of a fault string such as ``"bus-error=0x1000+0x40"``.

        Raises
        ------
        ValueError
            Not ``bus-error=START+LENGTH`` with integers (decimal or 0x hex), or a value out of range.
        """
        return parse_faults(text, (cls,))[cls]

    def __str__(self) -> str:
        return f"bus-error=0x{self.start:x}+0x{self.length:x}"

    def hits(self, addr: int, length: int) -> bool:
        """True when bytes ``addr .. addr + length - 1`` touch the window (``length`` 0 touches nothing)."""
        return length > 0 and addr < self.start + self.length and self.start < addr + length

    def hits_rows(self, addr: int, stride: int, rows: int, length: int) -> bool:
        """True when any of ``rows`` rows of ``length`` bytes, row ``r`` at ``addr + r*stride``, touches the window.

        One interval test, not one a row: row ``r`` touches the window exactly when its start lies in
        ``(start - length, start + window length)``, so only the first row past the low end (the row range's
        earliest candidate, strides being 0 or more) needs testing.
        """
        if rows < 1 or length < 1:
            return False
        first = 0 if stride == 0 else max(0, (self.start - length - addr) // stride + 1)
        return first < rows and self.hits(addr + first * stride, length)

    def check_size(self, mem_bytes: int) -> None:
        """Raise ``ValueError`` unless the window lies inside a device memory of ``mem_bytes`` bytes."""
        if self.start + self.length > mem_bytes:
            raise ValueError(f"bus-error window 0x{self.start:x}+0x{self.length:x} is not inside the device "
                             f"memory of 0x{mem_bytes:x} bytes")
