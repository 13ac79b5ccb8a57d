"""Recovery of a stuck or halted queue: reset the tile, resubmit what did not complete, fence bad tiles.

When a queue halts (a TIMEOUT from the watchdog, or another queue error) or a wait runs into
:class:`~dx1_driver.errors.DeviceTimeout`, :func:`recover` (``Device.recover``), through the queue's
public interface alone (``state``, ``reset_tile``, ``submit``):

1. reads STATUS, ERROR and HEAD (``CommandQueue.state``: HEAD says which commands the device had
   fetched: only those can have started);
2. collects the completions that did arrive: those commands are done and are never run again;
3. resets the tile alone (QUEUE.RESET: its command processor, DMA and tile core; its memories,
   device memory, semaphores and the other tiles are kept), which empties the ring, so no command
   of before the reset can complete afterwards;
4. resubmits, in their original order, the commands whose completion was TIMEOUT or never came.

Exactly once: a command with a completion other than TIMEOUT is never resubmitted, and after the
reset no old command can still complete, so each command's completion is delivered once (a
TIMEOUT completion is never delivered; the completion of the resubmitted run is).  A command the
device never fetched never started, so running it then is its first run.  A fetched one may have
run partly, so it is resubmitted only if running it again gives the same effect
(:func:`replay_safe`): LOAD, STORE, POSTOP, GEMM without the accumulate flag, NOP, FENCE and a COPY
whose source and destination do not overlap rewrite their outputs from inputs they do not change,
and the queue's hazard rules keep later commands from changing those inputs before they complete.
GEMM with accumulate (a partial run has already added to its accumulator rows), SIGNAL and WAIT
(a semaphore may have moved) and an overlapping COPY (a partial run overwrote its own source) are
not: if a fetched one lost its completion, :func:`recover` resubmits nothing and raises
:class:`~dx1_driver.errors.ReplayRefused` naming them, with the tile reset and its queue empty,
so the caller rebuilds their inputs (the runtime reruns the whole block).  The driver cannot do
that itself: it does not know which earlier commands produced an accumulator's contents.

Graceful degradation: each recovery counts against the tile; after ``Device.fence_after``
recoveries (or a failed self-test, ``Device.fence``) the tile is fenced: ``Device.queue`` refuses
it with :class:`~dx1_driver.errors.TileFenced`, and ``Device.usable_tiles`` leaves it out, which
is where the runtime takes its tiles from.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from . import regs
from .errors import ReplayRefused, TileFenced
from .queue import CommandQueue

__all__ = ["Recovery", "recover", "replay_safe"]


@dataclass(frozen=True)
class Recovery:
    """What :func:`recover` found and did.

    Attributes
    ----------
    tile:
        The recovered tile.
    error:
        ``(code, index)`` from QUEUE.ERROR when the queue was halted, else ``None`` (a stuck unit
        without a watchdog: nothing completed in time).
    replayed:
        Tags of the resubmitted commands, in order.
    strikes:
        Recoveries of this tile so far, this one included.
    """

    tile: int
    error: tuple[int, int] | None
    replayed: tuple[int, ...]
    strikes: int


def _field(command: bytes, opcode: regs.Opcode, name: str) -> int:
    lsb, width = regs.COMMAND_FIELDS[opcode][name]
    return int.from_bytes(command, "little") >> lsb & ((1 << width) - 1)


def replay_safe(command: bytes) -> bool:
    """True when running ``command`` a second time, after a partial first run, gives the effect of one run."""
    op = regs.Opcode
    try:
        opcode = op(command[0])
    except ValueError:
        return True  # refused by the device without effect
    if opcode == op.GEMM:
        return not _field(command, opcode, "flags") >> regs.COMMAND_FLAGS[op.GEMM]["accumulate"] & 1
    if opcode == op.COPY:
        src, dst, length = (_field(command, opcode, n) for n in ("src_addr", "dst_addr", "length"))
        return src + length <= dst or dst + length <= src
    return opcode in (op.NOP, op.LOAD, op.STORE, op.POSTOP, op.FENCE)


def recover(queue: CommandQueue, strike: Callable[[int], int], fenced: Mapping[int, str], *,
            timeout: float = 1.0) -> Recovery:
    """Reset ``queue``'s tile and resubmit the commands without a completion (see the module docstring).

    Parameters
    ----------
    queue:
        The stuck or halted queue.
    strike:
        Counts one recovery of a tile and returns its count (``Device.strike``), which may fence it.
    fenced:
        The fenced tiles (``Device.fenced``), looked at after the strike.
    timeout:
        Seconds the resubmission may wait for ring space.

    Raises
    ------
    ReplayRefused
        A fetched command that lost its completion is not safe to run again; nothing was resubmitted.
    TileFenced
        This was the tile's ``Device.fence_after``-th recovery: the tile is fenced, nothing resubmitted.
    """
    state = queue.state()
    lost = queue.reset_tile()
    # Aborted commands all started; of those in flight, the first `fetched` were taken by the device.
    started = [cmd for k, (_, _, cmd) in enumerate(lost) if k < state.aborted or k - state.aborted < state.fetched]
    strikes = strike(queue.tile)
    if queue.tile in fenced:
        raise TileFenced(queue.tile, fenced[queue.tile])
    unsafe = [(tag, opcode) for tag, opcode, cmd in lost if cmd in started and not replay_safe(cmd)]
    if unsafe:
        raise ReplayRefused(queue.tile, unsafe, lost)
    queue.submit([cmd for _, _, cmd in lost], timeout=timeout)
    return Recovery(queue.tile, state.error, tuple(tag for tag, _, _ in lost), strikes)
