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

:class:`BoardRank` is one chip of a process that owns a board of several (``model:chips=2`` under torchrun):
global rank ``process * chips + chip`` of ``world * chips``.  Its collectives run in two levels, as NCCL's
hierarchical ones do: over the board's chip link among the process's chips, and between the processes on
gloo by chip 0 alone, whose result the link then broadcasts to the other chips.  The ranks' segments line
up: with the rows a multiple of ``world * chips``, process ``p``'s chips hold its block (segment ``p`` of
``world``), and chip ``c`` of it segment ``c`` of that block.
"""

from __future__ import annotations

import contextlib
import datetime
import os
from collections.abc import Iterator

import numpy as np
from dx1_driver import Device

from ..collectives import Buffer, CollectiveError, Rank, RankFailed, segment
from ..collectives.fingerprint import Entry, Fingerprint, compare

__all__ = ["BoardRank", "ProcessRank", "process_group", "under_torchrun"]


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


class BoardRank:
    """Chip ``local.rank`` of the board of process ``index`` of ``world`` as a rank of every process's chips
    (see the module's doc); ``process`` is the process group's side, given to chip 0 only (``None`` on the
    others)."""

    def __init__(self, local: Rank, index: int, world: int, process: ProcessRank | None):
        self.local, self.process = local, process
        self.chips = local.group.size
        self.dev = local.dev
        self.index, self.world = index, world
        self.rank = index * self.chips + local.rank
        self.size = world * self.chips

    def __repr__(self) -> str:
        return f"<BoardRank {self.rank} of {self.size}: chip {self.local.rank} of {self.chips} on {self.dev.name}>"

    def _mine(self, buf: Buffer) -> Buffer:
        return Buffer(self.local.rank, buf.addr, buf.dtype, buf.shape)

    def _block(self, buf: Buffer) -> Buffer:
        """This process's block of ``buf``: its segment of the processes' (whole rows)."""
        lo, hi = segment(buf.count, self.world, self.index)
        rows = buf.shape[0] // self.world
        return Buffer(self.local.rank, buf.addr + lo * buf.dtype.itemsize, buf.dtype, (rows, *buf.shape[1:]))

    def _between_processes(self, op: str, buf: Buffer) -> None:
        if self.process is not None:
            getattr(self.process, op)(buf)

    def all_reduce(self, buf: Buffer) -> None:
        """The sum over every process's chips: the board's, then the processes' (chip 0), then broadcast."""
        mine = self._mine(buf)
        self.local.all_reduce(mine)
        self._between_processes("all_reduce", mine)
        self.local.broadcast(mine, root=0)

    def reduce_scatter(self, buf: Buffer) -> None:
        """Segment ``rank`` of the sum (with the rest of this process's block; the other rows are scratch)."""
        mine = self._mine(buf)
        self.local.all_reduce(mine)
        self._between_processes("reduce_scatter", mine)
        self.local.broadcast(self._block(mine), root=0)

    def all_gather(self, buf: Buffer) -> None:
        """Every rank's segment, in rank order: the board's chips gather the process's block, chip 0 the blocks."""
        mine = self._mine(buf)
        self.local.all_gather(self._block(mine))
        self._between_processes("all_gather", mine)
        self.local.broadcast(mine, root=0)
