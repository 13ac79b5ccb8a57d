"""One collective on one rank: its device accesses, its messages, its steps, each under the deadline.

The algorithms (:mod:`.ring`, :mod:`.direct`) are written against :class:`Call` only: ``read`` and ``write``
reach the rank's own device memory, ``send`` and ``recv`` its neighbours through the fabric, ``exchange``
every rank; ``step`` says where the rank is, so that a timeout names it.  A driver error in a device access
becomes :class:`RankFailed` for the whole group; with ``verify`` every write is read back, so device memory
that does not keep what was written (a stuck data bit) fails the rank instead of giving a wrong answer.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
from dx1_driver import Device, DriverError

from .buffer import Buffer
from .errors import RankFailed
from .fabric import Fabric, Message
from .reduction import Reduction

__all__ = ["Call"]


class Call:
    """Rank ``rank``'s part in collective ``op`` number ``seq`` of a group of ``size`` ranks."""

    def __init__(self, fabric: Fabric, dev: Device, rank: int, op: str, seq: int, *, timeout: float,
                 chunk: int, verify: bool, reduction: Reduction | None = None, lane: str = "coll",
                 log: list | None = None):
        self.fabric = fabric
        self.dev = dev
        self.rank = rank
        self.size = fabric.size
        self.op = op
        self.seq = seq
        self.timeout = timeout
        self.chunk = chunk
        self.verify = verify
        self.reduction = reduction
        self.lane = lane
        #: Where the link algorithm logs its commands (the group's ``link_log``), or None.
        self.log = log
        self.where = "start"
        fabric.enter(rank, op, seq, self.where)

    def step(self, where: str) -> None:
        self.where = where
        self.fabric.step(self.rank, where)

    def _deadline(self) -> float:
        return time.monotonic() + self.timeout

    def _failed(self, what: str, cause: BaseException) -> RankFailed:
        error = RankFailed(f"rank {self.rank} ({self.dev.name}) failed in {self.op} #{self.seq} at {self.where}: "
                           f"{what}: {type(cause).__name__}: {cause}", rank=self.rank, op=self.op, seq=self.seq,
                           step=self.where, cause=cause)
        self.fabric.abort(error)
        return error

    # -- device memory -----------------------------------------------------------------------------

    def read(self, buf: Buffer, lo: int, hi: int) -> np.ndarray:
        """Elements ``[lo, hi)`` of ``buf`` (a copy in host memory)."""
        self.fabric.check(self.rank)
        if hi <= lo:
            return np.zeros(0, buf.dtype)
        self.fabric.step(self.rank, f"{self.where}: read_mem")
        size = buf.dtype.itemsize
        try:
            data = self.dev.read_mem(buf.addr + lo * size, (hi - lo) * size)
        except (DriverError, OSError) as e:
            raise self._failed(f"reading {hi - lo} elements of {buf}", e) from e
        return np.frombuffer(data, dtype=buf.dtype.newbyteorder("<")).astype(buf.dtype)

    def write(self, buf: Buffer, lo: int, values: np.ndarray) -> None:
        """Store ``values`` at element ``lo`` of ``buf`` (and, with ``verify``, check that it holds them)."""
        self.fabric.check(self.rank)
        if not values.size:
            return
        self.fabric.step(self.rank, f"{self.where}: write_mem")
        data = np.ascontiguousarray(values, dtype=buf.dtype.newbyteorder("<")).tobytes()
        addr = buf.addr + lo * buf.dtype.itemsize
        try:
            self.dev.write_mem(addr, data)
            back = self.dev.read_mem(addr, len(data)) if self.verify else data
        except (DriverError, OSError) as e:
            raise self._failed(f"writing {values.size} elements of {buf}", e) from e
        if back != data:
            bad = next(i for i, (a, b) in enumerate(zip(back, data, strict=True)) if a != b)
            diff = back[bad] ^ data[bad]
            raise self._failed(f"device memory at 0x{addr + bad:x} reads 0x{back[bad]:02x} after 0x{data[bad]:02x} "
                               f"was written (bits 0x{diff:02x} differ)",
                               DriverError("device memory does not hold what was written"))

    # -- the fabric --------------------------------------------------------------------------------

    def send(self, dst: int, tag: str, data: Any) -> None:
        self.fabric.send(self.rank, dst, Message(self.seq, tag, data), lane=self.lane)

    def recv(self, src: int, tag: str) -> Any:
        return self.fabric.recv(self.rank, src, self.seq, tag, self._deadline(), lane=self.lane)

    def exchange(self, name: str, value: Any) -> list[Any]:
        return self.fabric.exchange(self.rank, self.seq, name, value, self._deadline())
