"""Exceptions raised by the dx1 driver.

Every exception derives from :class:`DriverError`, so a caller can catch the
driver's failures without catching programming errors (``ValueError`` and
``TypeError`` are kept for bad arguments).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .regs import ERROR_DOCS, ErrorCode, Opcode

__all__ = [
    "DriverError", "TransportError", "BusErrorResponse", "DeviceTimeout", "LinkTimeout", "LinkLost", "DeviceStuck",
    "DeviceReset", "NotADx1Device",
    "CommandError", "QueueError", "OutOfDeviceMemory", "ReplayRefused", "TileFenced", "describe_code",
]


def describe_code(code: int) -> str:
    """Name and documentation of an :class:`ErrorCode` value, or a note that the value is undefined."""
    try:
        known = ErrorCode(code)
    except ValueError:
        return f"unknown error code 0x{code:02x}"
    return f"{known.name} (0x{known.value:02x}): {ERROR_DOCS[known]}"


def _describe_opcode(opcode: int) -> str:
    try:
        return Opcode(opcode).name
    except ValueError:
        return f"opcode 0x{opcode:02x}"


class DriverError(Exception):
    """Base class of every error the driver raises about the device or the link."""


class TransportError(DriverError):
    """The link to the device failed, or the device answered a register or memory access with an error."""


class BusErrorResponse(TransportError):
    """The device answered a register or memory access with an error response (AXI SLVERR): the link works.

    Not a failure of the link: the request arrived and was refused at that address (a read-only or
    unmapped register, an address past device memory, memory whose controller answers errors there).
    """


class DeviceTimeout(DriverError):
    """The device did not answer within the allowed time."""


class LinkTimeout(TransportError, DeviceTimeout):
    """A request got no answer within its deadline; the link is unusable afterwards (its framing is lost).

    Parameters
    ----------
    op:
        What was asked (``"read32"``, ``"read_block"``, ...).
    addr:
        The register or device-memory address it was about.
    seconds:
        How long the transport waited.
    detail:
        What else the transport knows, or ``""``.
    """

    def __init__(self, op: str, addr: int, seconds: float, detail: str = ""):
        self.op = op
        self.addr = addr
        self.seconds = seconds
        super().__init__(f"no answer to {op} at 0x{addr:x} within {seconds:.3g} s"
                         + (f" ({detail})" if detail else "") + "; the link was closed, open the device again")


class LinkLost(TransportError):
    """The other end of the link went away (the connection closed, the simulator process died)."""


class DeviceStuck(DeviceTimeout):
    """The device did not finish a bus transaction within its budget; the message says what it saw.

    Parameters
    ----------
    op, addr:
        The request that got stuck.
    report:
        The device side's account: channels left waiting, queue states.
    """

    def __init__(self, op: str, addr: int, report: str):
        self.op = op
        self.addr = addr
        self.report = report
        super().__init__(f"the device is stuck on {op} at 0x{addr:x}: {report}")


class DeviceReset(DriverError):
    """The device was reset under a queue (GLOBAL.RESET by someone else): its commands in flight are lost.

    Parameters
    ----------
    tile:
        The queue's tile.
    lost:
        Tags of the commands that will never complete.
    """

    def __init__(self, tile: int, tail: int, published: int, lost: Sequence[int]):
        self.tile = tile
        self.lost = list(lost)
        super().__init__(f"queue {tile}: the device was reset under it (TAIL reads {tail}, the driver published "
                         f"{published}); {len(self.lost)} commands in flight will never complete; call "
                         f"Device.reset() and open the queue again")


class NotADx1Device(DriverError):
    """The register space does not identify a DX-1 this driver supports (wrong magic or spec version)."""


class OutOfDeviceMemory(DriverError):
    """The device-memory allocator has no free block large enough."""


class CommandError(DriverError):
    """A command completed with an error status.

    Parameters
    ----------
    tag, opcode, code:
        The completion's tag, opcode and status (an :class:`ErrorCode` value).
    completions:
        Every completion collected by the call that raised, errors and successes,
        so that a caller catching the error loses none of them.
    """

    def __init__(self, tag: int, opcode: int, code: int, *, completions: Sequence[Any] = ()):
        self.tag = tag
        self.opcode = opcode
        self.code = code
        self.completions = list(completions)
        super().__init__(f"command tag {tag} ({_describe_opcode(opcode)}) failed with {describe_code(code)}")


class QueueError(DriverError):
    """A queue halted on a ring error (``QUEUE.ERROR``); ``CommandQueue.resume`` restarts it.

    Parameters
    ----------
    code:
        The :class:`ErrorCode` value from ``QUEUE.ERROR.code``.
    index:
        The ring index from ``QUEUE.ERROR.index``.
    """

    def __init__(self, code: int, index: int, *, tile: int | None = None):
        self.code = code
        self.index = index
        self.tile = tile
        where = "queue" if tile is None else f"queue {tile}"
        super().__init__(f"{where} halted at ring index {index} with {describe_code(code)}")


class TileFenced(DriverError):
    """A tile is fenced off (it failed its self-test or kept timing out): no work goes to it.

    Parameters
    ----------
    tile:
        The fenced tile.
    reason:
        Why it was fenced.
    """

    def __init__(self, tile: int, reason: str):
        self.tile = tile
        self.reason = reason
        super().__init__(f"tile {tile} is fenced off ({reason}); use the remaining tiles (Device.usable_tiles)")


class ReplayRefused(DriverError):
    """Recovery reset a tile but did not resubmit: a started command that lost its completion is not safe to rerun.

    Parameters
    ----------
    tile:
        The recovered tile; its queue is empty and usable.
    unsafe:
        ``(tag, opcode)`` of the commands that may have run partly and cannot run twice.
    lost:
        ``(tag, opcode, command)`` of every command that lost its completion, in order: none was resubmitted.
    """

    def __init__(self, tile: int, unsafe: Sequence[tuple[int, int]], lost: Sequence[tuple[int, int, bytes]]):
        self.tile = tile
        self.unsafe = list(unsafe)
        self.lost = list(lost)
        names = ", ".join(f"tag {tag} ({_describe_opcode(op)})" for tag, op in self.unsafe)
        super().__init__(f"queue {tile}: reset, but {names} may have run partly and are not safe to run again "
                         f"(accumulate, semaphores or an overlapping COPY); none of the {len(self.lost)} commands "
                         f"without a completion was resubmitted: rebuild their inputs and submit them again")
