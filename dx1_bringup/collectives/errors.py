"""The typed errors of a collective: every one names the rank it is about, the collective and the step.

A collective that fails raises on every rank of the group, never only on one: the rank that saw the failure
first aborts the group's host staging (:class:`~.fabric.Fabric`), and every other rank, waiting or arriving
later, raises a copy of the same error (:meth:`CollectiveError.seen_by`), with ``observer`` set to itself.
"""

from __future__ import annotations

__all__ = ["CollectiveError", "CollectiveTimeout", "CollectiveMismatch", "CollectiveRefused", "RankFailed",
           "GroupClosed"]


class CollectiveError(Exception):
    """Base class of the collectives' errors.

    Attributes
    ----------
    rank:
        The rank the error is about (the stuck one, the failed one, the first that differs), or ``None`` when it
        is about the whole group.
    op:
        The collective (``"all_reduce"``, ``"broadcast"``, ...), with ``seq`` its sequence number in the group.
    step:
        Where in the collective (``"fingerprint exchange"``, ``"ring reduce-scatter step 1 of 3, chunk 2 of 4:
        read_mem"``).
    observer:
        The rank that raised this copy of the error.
    per_rank:
        Set on the error a group-level call raises (:meth:`~.group.DeviceGroup.run`): every failed rank's error.
    """

    def __init__(self, message: str, *, rank: int | None, op: str, seq: int, step: str):
        super().__init__(message)
        self.message = message
        self.rank = rank
        self.op = op
        self.seq = seq
        self.step = step
        self.observer: int | None = None

    def seen_by(self, observer: int) -> CollectiveError:
        """A copy of this error as rank ``observer`` raises it."""
        other = type(self).__new__(type(self), *self.args)  # not __init__: the fields are copied as they are
        other.__dict__.update(self.__dict__)
        other.__dict__.pop("per_rank", None)  # the group-level call that raises the copy sets its own
        other.observer = observer
        other.__cause__ = self.__cause__
        return other

    def __str__(self) -> str:
        if self.observer is None or self.observer == self.rank:
            return self.message
        return f"{self.message} (seen on rank {self.observer})"


class CollectiveTimeout(CollectiveError, TimeoutError):
    """A wait ran past its deadline: ``rank`` is the one that did not get on (stuck in a device call, or never
    called the collective), ``step`` where it was, ``seconds`` the deadline."""

    def __init__(self, message: str, *, rank: int | None, op: str, seq: int, step: str, seconds: float):
        super().__init__(message, rank=rank, op=op, seq=seq, step=step)
        self.seconds = seconds


class CollectiveMismatch(CollectiveError):
    """The ranks called different collectives: ``field`` of their fingerprints differs, ``values`` per rank."""

    def __init__(self, message: str, *, rank: int | None, op: str, seq: int, step: str, field: str,
                 values: dict[int, object]):
        super().__init__(message, rank=rank, op=op, seq=seq, step=step)
        self.field = field
        self.values = values


class CollectiveRefused(CollectiveMismatch, ValueError):
    """A rank's arguments were refused (a buffer of another rank, an output of the wrong size, a root out of
    range, a reduction its type does not have): ``field`` is ``"arguments"``, ``values`` each rank's refusal
    (``""``: none).  Raised on every rank, since every rank would otherwise wait for the refused one."""


class RankFailed(CollectiveError):
    """A rank's device failed during a collective (a closed transport, a bus error, a lost link, device memory
    that does not hold what was written): ``cause`` is the driver's error."""

    def __init__(self, message: str, *, rank: int | None, op: str, seq: int, step: str,
                 cause: BaseException | None):
        super().__init__(message, rank=rank, op=op, seq=seq, step=step)
        self.cause = cause


class GroupClosed(CollectiveError):
    """The group was closed (:meth:`~.group.DeviceGroup.close`) or aborted before or during this collective."""
