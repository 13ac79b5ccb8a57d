"""A tile's trace FIFO (its TRACE block): timestamped start and end events of its commands."""

from __future__ import annotations

import enum
from dataclasses import dataclass

from . import regs
from .tile_block import TileBlock

__all__ = ["TraceEvent", "TraceFifo", "TraceKind"]


class TraceKind(enum.Enum):
    """Which edge of a command an event marks (DATA_HI's ``end`` bit)."""

    START = "start"  #: the command was dispatched
    END = "end"  #: its completion was written


@dataclass(frozen=True)
class TraceEvent:
    """One trace event, decoded through the generated fields of TRACE DATA_LO and DATA_HI.

    ``opcode`` is an :class:`~dx1_driver.regs.Opcode` where the 7 bits name one, else the raw value;
    ``status`` is the completion's :class:`~dx1_driver.regs.ErrorCode` (end events; 0 on start events).
    """

    timestamp: int
    kind: TraceKind
    tag: int
    opcode: regs.Opcode | int
    status: regs.ErrorCode | int

    @classmethod
    def decode(cls, data_lo: int, data_hi: int) -> TraceEvent:
        """The event whose DATA_LO (timestamp) and DATA_HI words were read."""
        t = regs.Trace
        opcode = regs.get_field(data_hi, t.DATA_HI_OPCODE)
        status = regs.get_field(data_hi, t.DATA_HI_STATUS)
        return cls(
            timestamp=data_lo,
            kind=TraceKind.END if regs.get_field(data_hi, t.DATA_HI_END) else TraceKind.START,
            tag=regs.get_field(data_hi, t.DATA_HI_TAG),
            opcode=_known(regs.Opcode, opcode),
            status=_known(regs.ErrorCode, status),
        )


def _known(kind: type[enum.IntEnum], value: int) -> enum.IntEnum | int:
    try:
        return kind(value)
    except ValueError:
        return value


class TraceFifo(TileBlock):
    """The trace FIFO of one tile (its TRACE block): the start and end events of its commands."""

    def _control(self, *, enable: bool, clear: bool) -> None:
        t = regs.Trace
        value = regs.set_field(regs.set_field(0, t.CONTROL_ENABLE, int(enable)), t.CONTROL_CLEAR, int(clear))
        self._set(t.CONTROL, value)

    @property
    def enabled(self) -> bool:
        """Whether the block records events (CONTROL.enable)."""
        return bool(regs.get_field(self._reg(regs.Trace.CONTROL), regs.Trace.CONTROL_ENABLE))

    def start(self, *, clear: bool = True) -> None:
        """Record events from now on; ``clear`` first drops every event still in the buffer."""
        self._control(enable=True, clear=clear)

    def stop(self) -> None:
        """Stop recording; events already recorded stay for :meth:`drain`."""
        self._control(enable=False, clear=False)

    def clear(self) -> None:
        """Drop every recorded event, recording on or off as it was."""
        self._control(enable=self.enabled, clear=True)

    @property
    def count(self) -> int:
        """Events waiting to be read (COUNT)."""
        return self._reg(regs.Trace.COUNT)

    def drain(self) -> list[TraceEvent]:
        """Read and remove every waiting event, oldest first, until COUNT reads 0.

        Each event is one read of DATA_LO and DATA_HI together; reading DATA_HI
        removes the event.  While recording is on, events that arrive meanwhile
        are drained too.
        """
        t = regs.Trace
        events: list[TraceEvent] = []
        while waiting := self.count:
            for _ in range(waiting):
                words = self.transport.read_u32s(self.base + t.DATA_LO, (t.DATA_HI - t.DATA_LO) // 4 + 1)
                events.append(TraceEvent.decode(words[0], words[-1]))
        return events
