"""The host staging between the ranks of a group: point-to-point channels, all-rank exchanges, deadlines.

Each rank runs on a thread of its own (:mod:`.group`).  Ranks pass chunks through :meth:`Fabric.send` and
:meth:`Fabric.recv` (one FIFO channel per ordered pair of ranks, in host memory: the host-staged stand-in for a
chip-to-chip link) and meet in :meth:`Fabric.exchange` (every rank deposits a value, every rank gets all of
them: fingerprints, the direct algorithm's gather).  Every wait has a deadline.  When one runs out, the rank
that is stuck is found by following who waits for whom from the waiting rank to a rank that waits for nobody
(it is in a device call, or has not called the collective); the error names it, its collective and its step.
The first error aborts the fabric: every wait of every rank wakes and raises a copy of it, and so does every
later wait, until the group is closed.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from .errors import CollectiveError, CollectiveTimeout, GroupClosed

__all__ = ["Fabric", "RankStatus", "Message"]


@dataclass
class RankStatus:
    """Where a rank is: its collective, step, and whom it waits for (``None``: nobody, it is working)."""

    op: str = ""
    seq: int = -1
    step: str = "it has called no collective yet"
    waiting_for: tuple[int, ...] | None = None
    since: float = field(default_factory=time.monotonic)

    def where(self) -> str:
        if not self.op:
            return self.step
        return f"{self.op} #{self.seq}, {self.step}"


@dataclass(frozen=True)
class Message:
    """A chunk in flight from one rank to another, with what the sender meant it to be (checked by the receiver)."""

    seq: int
    tag: str
    data: Any


class Fabric:
    """The staging shared by the ``size`` ranks of one group (see the module's doc)."""

    def __init__(self, size: int):
        self.size = size
        # One lock; a condition per rank on it, so a message wakes its receiver only.
        self._lock = threading.Lock()
        self._wake = [threading.Condition(self._lock) for _ in range(size)]
        self._channels: dict[tuple[int, int, str], deque[Message]] = {}
        self._slots: dict[tuple[int, str], dict[int, Any]] = {}
        self._taken: dict[tuple[int, str], int] = {}
        self.status = [RankStatus() for _ in range(size)]
        self.failure: CollectiveError | None = None

    # -- state -------------------------------------------------------------------------------------

    def enter(self, rank: int, op: str, seq: int, step: str) -> None:
        """Record that ``rank`` works on ``step`` of collective ``op`` number ``seq`` (waiting for nobody)."""
        with self._lock:
            self.status[rank] = RankStatus(op, seq, step)

    def step(self, rank: int, step: str) -> None:
        with self._lock:
            status = self.status[rank]
            status.step, status.waiting_for, status.since = step, None, time.monotonic()

    def leave(self, rank: int) -> None:
        with self._lock:
            status = self.status[rank]
            status.step, status.waiting_for = f"its last collective was {status.op} #{status.seq}", None
            status.op = ""

    def abort(self, error: CollectiveError) -> None:
        """Fail every wait of every rank with ``error`` (the first abort wins; later ones are ignored)."""
        with self._lock:
            if self.failure is None:
                self.failure = error
            self._wake_all()

    def check(self, rank: int) -> None:
        """Raise the fabric's failure, as ``rank`` sees it, if there is one."""
        if self.failure is not None:
            raise self.failure.seen_by(rank)

    # -- point to point ----------------------------------------------------------------------------

    def send(self, src: int, dst: int, message: Message, *, lane: str = "coll") -> None:
        """Queue ``message`` from ``src`` to ``dst`` on ``lane`` (``coll`` for collectives, ``p2p`` for send and
        recv); never blocks: the staging is host memory."""
        with self._lock:
            self.check(src)
            self._channels.setdefault((src, dst, lane), deque()).append(message)
            self._wake[dst].notify()

    def recv(self, dst: int, src: int, seq: int, tag: str, deadline: float, *, lane: str = "coll") -> Any:
        """The next message from ``src`` to ``dst`` on ``lane``, which must be ``(seq, tag)``; its data.

        Raises
        ------
        CollectiveTimeout
            Nothing came by ``deadline`` (``time.monotonic()``); the error names the rank that is stuck.
        CollectiveError
            The fabric was aborted (by any rank).
        RuntimeError
            The message is not the one expected: the ranks' schedules disagree (a bug, never a wrong answer).
        """
        with self._lock:
            channel = self._channels.setdefault((src, dst, lane), deque())
            self._wait(dst, (src,), deadline, lambda: bool(channel))
            message = channel.popleft()
        if (message.seq, message.tag) != (seq, tag):
            raise RuntimeError(f"rank {dst} expected {tag} of collective #{seq} from rank {src}, got {message.tag} "
                               f"of #{message.seq}")
        return message.data

    # -- all ranks ---------------------------------------------------------------------------------

    def exchange(self, rank: int, seq: int, name: str, value: Any, deadline: float) -> list[Any]:
        """Deposit ``value`` as ``rank``'s for exchange ``name`` of collective ``seq``; every rank's value, in rank
        order, once all have deposited (or a :class:`CollectiveTimeout` naming the ranks that never came)."""
        key = (seq, name)
        with self._lock:
            self.check(rank)
            slot = self._slots.setdefault(key, {})
            slot[rank] = value
            if len(slot) == self.size:
                self._wake_all()
            self._wait(rank, None, deadline, lambda: len(slot) == self.size, key=key)
            values = [slot[r] for r in range(self.size)]
            self._taken[key] = self._taken.get(key, 0) + 1
            if self._taken[key] == self.size:
                del self._slots[key], self._taken[key]
            return values

    # -- waiting -----------------------------------------------------------------------------------

    def _wait(self, rank: int, peers: tuple[int, ...] | None, deadline: float, ready, *,
              key: tuple[int, str] | None = None) -> None:
        """Wait (holding the lock) until ``ready()``, the fabric fails, or ``deadline``."""
        status = self.status[rank]
        while True:
            self.check(rank)
            if ready():
                status.waiting_for = None
                return
            if peers is None:
                slot = self._slots.get(key, {})
                status.waiting_for = tuple(r for r in range(self.size) if r not in slot)
            else:
                status.waiting_for = peers
            left = deadline - time.monotonic()
            if left <= 0:
                error = self._timeout(rank, deadline)
                if self.failure is None:
                    self.failure = error
                self._wake_all()
                raise self.failure.seen_by(rank)
            self._wake[rank].wait(left)

    def _wake_all(self) -> None:
        for wake in self._wake:
            wake.notify_all()

    def _timeout(self, rank: int, deadline: float) -> CollectiveTimeout:
        """The timeout ``rank`` raises: the rank at the end of the chain of waits from it, and where that one is."""
        me = self.status[rank]
        chain = [rank]
        current = rank
        while True:
            waits = self.status[current].waiting_for
            nxt = next((r for r in waits or () if r not in chain), None)
            if nxt is None:
                break
            chain.append(nxt)
            current = nxt
        stuck = chain[-1]
        seconds = max(0.0, deadline - me.since)
        them = self.status[stuck]
        if stuck == rank:
            what = f"rank {rank} is stuck at {me.step}"
        elif them.waiting_for:
            what = (f"ranks {', '.join(map(str, chain))} wait for each other in a cycle; rank {stuck} is at "
                    f"{them.where()}")
        elif not them.op:
            what = f"rank {stuck} never called it ({them.step})"
        elif (them.op, them.seq) != (me.op, me.seq):
            what = f"rank {stuck} is in another collective, {them.where()}"
        else:
            what = f"rank {stuck} is stuck in a device call at {them.step}"
        via = f" (through ranks {', '.join(map(str, chain[1:-1]))})" if len(chain) > 2 else ""
        return CollectiveTimeout(f"{me.op} #{me.seq} timed out: {what}; rank {rank} waited {seconds:.3g} s at "
                                 f"{me.step}{via}", rank=stuck, op=them.op or me.op,
                                 seq=them.seq if them.op else me.seq,
                                 step=them.step if them.op else "called no collective", seconds=seconds)

    def close(self) -> None:
        """Abort every wait with :class:`GroupClosed` (unless the fabric failed already)."""
        self.abort(GroupClosed("the group was closed", rank=None, op="", seq=-1, step="closed"))
