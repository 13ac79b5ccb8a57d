"""Waiting on the device: a tile's reset, and completions on one or several queues, each with a deadline.

The queues of a device share its interrupt line, so a wait for one queue's completion also clears
what the others raised: :class:`CompletionWaits` is that one place, for a single queue's ``wait``
and for ``Device.wait_any`` alike.  It knows the queues through :class:`Waitable`, the part of
:class:`~dx1_driver.CommandQueue`'s public interface a wait uses.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Protocol

from . import regs
from .errors import DeviceTimeout
from .transport import Transport

__all__ = ["POLL_SLICE", "RESET_TIMEOUT", "CompletionWaits", "Waitable", "wait_reset_done"]

#: Longest single sleep between completion polls, so a transport without an interrupt line stays responsive.
POLL_SLICE = 0.001
#: Seconds a tile reset may take to drain its open bursts (a few cycles on hardware).
RESET_TIMEOUT = 5.0


def wait_reset_done(transport: Transport, base: int, tile: int) -> None:
    """Wait until the queue block at ``base`` no longer reads STATUS.resetting: the tile's reset is over.

    A reset (QUEUE.RESET, GLOBAL.RESET) first lets the tile's open bursts finish; registers written
    before it is over would be reset again.

    Raises
    ------
    DeviceTimeout
        The reset did not finish within :data:`RESET_TIMEOUT` seconds (a bus that never answers).
    """
    deadline = time.monotonic() + RESET_TIMEOUT
    while regs.get_field(transport.read32(base + regs.Queue.STATUS), regs.Queue.STATUS_RESETTING):
        if time.monotonic() > deadline:
            raise DeviceTimeout(f"queue {tile}: the tile's reset did not finish within {RESET_TIMEOUT} s "
                                f"(STATUS.resetting stays 1: an open bus burst never ends)")
        time.sleep(POLL_SLICE)


class Waitable(Protocol):
    """What a completion wait uses of a queue (:class:`~dx1_driver.CommandQueue` is one)."""

    IRQ_COMPLETION: int
    tile: int

    @property
    def outstanding(self) -> int: ...

    @property
    def irq_quiet(self) -> bool: ...

    def poll(self) -> int: ...

    def check(self) -> None: ...

    def clear_irq(self, causes: int | None = None) -> None: ...


class CompletionWaits:
    """The completion waits of one device, whose queues share ``transport``'s interrupt line.

    Parameters
    ----------
    transport:
        The device's transport: its interrupt line (if any) is waited on.
    open_queues:
        Returns every open queue of the device: a wait clears the completion interrupts of all of them.
    """

    def __init__(self, transport: Transport, open_queues: Callable[[], Sequence[Waitable]]):
        self.transport = transport
        self.open_queues = open_queues

    def until(self, queues: Sequence[Waitable], ready: Callable[[], bool], timeout: float,
              expired: Callable[[], DeviceTimeout]) -> None:
        """Return once ``ready()`` (which polls the completion rings of ``queues``) is true.

        A wait costs one ring poll per look and one interrupt wait between looks.  An interrupt wait that
        saw the line up is followed by one IRQ_STATUS write (completion) per open queue before the next
        look: a completion written before the clear is in the rings for that look, one written after it
        raises the line again, so the look needs no second clear and no second poll.  Completions
        collected by the first look of a call are cleared the same way (a write per queue that collected,
        then a look).  STATUS is read (``check``) once a call when the first look finds too little, and
        after that only when an interrupt wait ends without an interrupt (a lost interrupt, a reset
        device, a transport with no interrupt line: the wait falls back to polling) or with the line up
        but no completion in the rings (a queue error's IRQ_STATUS.error, or another queue's completion).

        Raises
        ------
        QueueError, DeviceReset
            From ``check`` of one of ``queues``, or from ``ready``.
        DeviceTimeout
            ``expired()``, when ``ready()`` stayed false for ``timeout`` seconds.
        """
        deadline = time.monotonic() + timeout
        line = self.transport.has_irq_line
        woke = False  # the last interrupt wait saw the line up
        cleared = False  # and every open queue's completion interrupt was cleared after it, before this look
        first = True
        while not ready():
            if first:
                # Once a call: a queue halted or reset before the wait is found at once, not after an
                # interrupt wait's timeout.
                for q in queues:
                    q.check()
                first = False
            if woke and all(q.irq_quiet for q in queues):
                # The line was up, yet the look after it collected nothing: every cause is cleared once the
                # queues are known not to be halted, so an old IRQ_STATUS.error (or an idle queue's
                # completion) cannot keep the line up and turn the wait into a busy loop.
                for q in queues:
                    q.check()
                for q in self.open_queues():
                    q.clear_irq()
                # Look once more before waiting: a completion that landed after the last look raised the
                # line before this clear dropped it, and would be found only when the wait times out.
                woke, cleared = False, True
                continue
            woke = False
            loud = [q for q in self.open_queues() if not q.irq_quiet] if line and not cleared else []
            cleared = False
            if loud:
                # Clear the completion interrupts, then look at the rings once more: a completion written
                # before the clear raises nothing, one written after it raises the line for wait_irq.
                for q in loud:
                    q.clear_irq(q.IRQ_COMPLETION)
                continue
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                for q in queues:
                    q.check()
                raise expired()
            woke = self.transport.wait_irq(min(remaining, POLL_SLICE))
            if woke:
                # Clear before the next look rather than after it (see above): one look a wake, not two.
                for q in self.open_queues():
                    q.clear_irq(q.IRQ_COMPLETION)
                cleared = True
            else:
                for q in queues:
                    q.check()

    def any(self, queues: Sequence[Waitable], *, at_least: int = 1, timeout: float = 1.0) -> None:
        """Wait until one of ``queues`` has ``at_least`` completions ready (or all it has outstanding).

        Raises
        ------
        DeviceTimeout
            None did within ``timeout`` seconds.
        """
        def ready() -> bool:
            return any(q.poll() >= min(at_least, q.outstanding) for q in queues)

        self.until(queues, ready, timeout,
                   lambda: DeviceTimeout(f"no completion on queues {[q.tile for q in queues]} within {timeout} s"))
