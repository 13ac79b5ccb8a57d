"""Collectives between processes on torch.distributed: each process (a torchrun rank) owns its local devices.

:class:`ProcessRank` is this process's side of a gloo process group, with the calls a graph session's
collective runner needs (``all_reduce``, ``reduce_scatter``, ``all_gather`` on a :class:`~..collectives.Buffer`
in this process's device memory): the buffer is read from the device into host memory, moved by gloo, and
written back (host-staged, as the in-process group is).  Before any data moves the ranks exchange
fingerprints (``all_gather_object``) and compare them with the in-process collectives' own
:func:`~..collectives.fingerprint.compare`, so a rank that calls a different op or shape makes every rank
raise the same :class:`~..collectives.CollectiveMismatch`.  gloo's timeout (the process group's, short and
explicit) bounds every wait; a peer that dies or times out makes every surviving rank raise
:class:`~..collectives.RankFailed` naming the collective.

:func:`process_group` initialises the group from torchrun's environment (``RANK``, ``WORLD_SIZE``,
``MASTER_ADDR``, ``MASTER_PORT``) and destroys it on every exit path.
"""

from __future__ import annotations

import contextlib
import datetime
import os
from collections.abc import Iterator

import numpy as np
from dx1_driver import Device

from ..collectives import Buffer, CollectiveError, RankFailed, segment
from ..collectives.fingerprint import Entry, Fingerprint, compare

__all__ = ["ProcessRank", "process_group", "under_torchrun"]


def under_torchrun() -> bool:
    """Whether this process is a rank that torchrun (or another launcher) started: ``WORLD_SIZE`` is set."""
    return "WORLD_SIZE" in os.environ and "RANK" in os.environ


@contextlib.contextmanager
def process_group(timeout: float = 30.0) -> Iterator[tuple[int, int]]:
    """``(rank, world size)`` of a gloo process group from torchrun's environment, destroyed on every exit."""
    import torch.distributed as dist

    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=timeout))
    try:
        yield dist.get_rank(), dist.get_world_size()
    finally:
        dist.destroy_process_group()


class ProcessRank:
    """Rank ``dist.get_rank()`` of the default process group, its buffers on ``dev`` (see the module's doc)."""

    def __init__(self, dev: Device):
        import torch.distributed as dist

        self.dist = dist
        self.dev = dev
        self.rank = dist.get_rank()
        self.size = dist.get_world_size()
        self.seq = 0

    def __repr__(self) -> str:
        return f"<ProcessRank {self.rank} of {self.size}: {self.dev.name}>"

    def _agree(self, op: str, buf: Buffer, part: int | None) -> Fingerprint:
        fp = Fingerprint(self.seq, op, buf.dtype.name, buf.shape, algorithm="gloo")
        self.seq += 1
        mine = Entry(fp, part)
        entries: list[Entry | None] = [None] * self.size
        self._guard(fp, "fingerprint exchange", lambda: self.dist.all_gather_object(entries, mine))
        compare(entries, mine)
        return fp

    def _guard(self, fp: Fingerprint, step: str, fn) -> None:
        try:
            fn()
        except CollectiveError:
            raise
        except (RuntimeError, OSError) as e:  # gloo: a peer closed the connection, or the group's timeout ran out
            raise RankFailed(f"{fp.op} #{fp.seq}: rank {self.rank} of {self.size} lost its peers at the {step}: "
                             f"{str(e).splitlines()[0]}", rank=self.rank, op=fp.op, seq=fp.seq, step=step,
                             cause=e) from e

    def _read(self, buf: Buffer):
        import torch

        data = self.dev.read_array(buf.addr, buf.shape, buf.dtype)
        return torch.from_numpy(np.ascontiguousarray(data).reshape(-1))

    def _write(self, buf: Buffer, flat, lo: int = 0, hi: int | None = None) -> None:
        hi = buf.count if hi is None else hi
        data = flat.numpy().astype(buf.dtype, copy=False)
        self.dev.write_mem(buf.addr + lo * buf.dtype.itemsize, np.ascontiguousarray(data[lo:hi]))

    def all_reduce(self, buf: Buffer) -> None:
        """Every rank's ``buf`` becomes the sum of every rank's (int32 wrapping)."""
        fp = self._agree("all_reduce", buf, None)
        flat = self._read(buf)
        self._guard(fp, "sum", lambda: self.dist.all_reduce(flat))
        self._write(buf, flat)

    def reduce_scatter(self, buf: Buffer) -> None:
        """This rank's segment of ``buf`` becomes the sum of every rank's segment (the rest is left as it was)."""
        lo, hi = segment(buf.count, self.size, self.rank)
        fp = self._agree("reduce_scatter", buf, hi - lo)
        flat = self._read(buf)
        self._guard(fp, "sum", lambda: self.dist.all_reduce(flat))
        self._write(buf, flat, lo, hi)

    def all_gather(self, buf: Buffer) -> None:
        """Every rank's ``buf`` becomes the ranks' segments, each from its rank (in place)."""
        import torch

        lo, hi = segment(buf.count, self.size, self.rank)
        fp = self._agree("all_gather", buf, hi - lo)
        flat = self._read(buf)
        spans = [segment(buf.count, self.size, r) for r in range(self.size)]
        parts = [torch.empty(b - a, dtype=flat.dtype) for a, b in spans]
        self._guard(fp, "gather", lambda: self.dist.all_gather(parts, flat[lo:hi].contiguous()))
        self._write(buf, torch.cat(parts))
