"""A group of opened devices, one rank each, and the collectives over it (host-staged).

Each rank is one :class:`dx1_driver.Device`; its buffers live in its own device memory.  Each rank runs on a
worker thread of its own, so the ranks of a collective proceed side by side as they would on separate hosts;
the group-level methods (``group.all_reduce(bufs)``) run every rank's part and return when all have finished,
or raise the first rank's error with every rank's in ``per_rank``.
"""

from __future__ import annotations

import math
import queue
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import numpy as np
from dx1_driver import Device

from . import link
from .buffer import DTYPES, Buffer
from .errors import CollectiveError
from .fabric import Fabric
from .rank import ALGORITHMS, Rank

__all__ = ["DeviceGroup", "DEFAULT_TIMEOUT", "DEFAULT_CHUNK_BYTES"]

T = TypeVar("T")

#: Seconds any one wait of a collective may take before it fails (a step, a message, a fingerprint exchange).
DEFAULT_TIMEOUT = 10.0
#: The ring's chunk: bytes of one step's piece of a segment.
DEFAULT_CHUNK_BYTES = 65536


#: Seconds a failed group's run still waits for ranks in a device call before giving them its failure.
_GRACE = 0.5


class _Job:
    def __init__(self, fn: Callable[[], Any]):
        self.fn = fn
        self.done = threading.Event()
        self.result: Any = None
        self.error: BaseException | None = None


class _Worker:
    """A daemon thread that runs one rank's jobs in order (a stuck device call never keeps the process alive)."""

    def __init__(self, rank: int):
        self.jobs: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self.thread = threading.Thread(target=self._loop, name=f"dx1-collectives-rank{rank}", daemon=True)
        self.thread.start()

    def _loop(self) -> None:
        while (job := self.jobs.get()) is not None:
            try:
                job.result = job.fn()
            except BaseException as e:  # handed to the caller, which raises it
                job.error = e
            job.done.set()

    def submit(self, fn: Callable[[], Any]) -> _Job:
        job = _Job(fn)
        self.jobs.put(job)
        return job

    def stop(self) -> None:
        self.jobs.put(None)


def _bounded(fn: Callable[[], None], seconds: float) -> bool:
    """Run ``fn`` on a daemon thread; whether it returned within ``seconds`` (its errors are dropped)."""
    thread = threading.Thread(target=lambda: _quietly(fn), daemon=True)
    thread.start()
    thread.join(seconds)
    return not thread.is_alive()


def _quietly(fn: Callable[[], None]) -> None:
    try:
        fn()
    except Exception:  # closing a failed device: nothing more to learn from it
        pass


class DeviceGroup:
    """Ranks ``0 .. size - 1``, rank ``r`` the opened device ``devs[r]``.

    Parameters
    ----------
    devs:
        One opened device per rank, in rank order (one device may not be two ranks).
    timeout:
        The deadline of every wait of a collective, in seconds (each call may give its own).
    algorithm:
        ``ring``, ``direct`` or ``link``, the default of every collective; ``None`` (the default): ``link`` when
        every rank is a chip of one ring board in rank order (``has_link``), else ``ring`` (and ``ring`` for
        what the link cannot reduce: int8 and ``avg``).
    chunk_bytes:
        The ring's chunk size in bytes, the default of every collective.
    verify:
        Read back every write of a result, so that device memory that does not keep it fails the rank.
    owns:
        Close the devices on :meth:`close` (:meth:`open` sets it).
    """

    def __init__(self, devs: Sequence[Device], *, timeout: float = DEFAULT_TIMEOUT, algorithm: str | None = None,
                 chunk_bytes: int = DEFAULT_CHUNK_BYTES, verify: bool = True, owns: bool = False):
        devs = list(devs)
        if not devs:
            raise ValueError("a group needs at least one device")
        if not all(isinstance(d, Device) for d in devs):
            raise TypeError(f"a group's ranks must be opened dx1_driver.Device objects, not {devs!r}")
        if len({id(d) for d in devs}) != len(devs):
            raise ValueError("one device cannot be two ranks: open it once per rank")
        if algorithm is not None and algorithm not in ALGORITHMS:
            raise ValueError(f"the algorithm must be one of {', '.join(ALGORITHMS)}, not {algorithm!r}")
        if not (isinstance(timeout, (int, float)) and timeout > 0 and math.isfinite(timeout)):
            raise ValueError(f"the timeout must be a number of seconds > 0, not {timeout!r}")
        if not isinstance(chunk_bytes, int) or chunk_bytes < 1:
            raise ValueError(f"the chunk size must be a whole number of bytes of at least 1, not {chunk_bytes!r}")
        self.devs = devs
        self.size = len(devs)
        self.timeout = float(timeout)
        self.algorithm = algorithm
        #: Every rank is a chip of one ring board, in rank order: the link algorithm can run.
        self.has_link = link.usable(devs)
        #: Set to a list to have the link algorithm log every command it runs (``timeline.LinkEvent``).
        self.link_log: list | None = None
        self.chunk_bytes = chunk_bytes
        self.verify = verify
        self.owns = owns
        self.fabric = Fabric(self.size)
        self.ranks = [Rank(self, r) for r in range(self.size)]
        self._workers = [_Worker(r) for r in range(self.size)]
        self.closed = False

    @classmethod
    def open(cls, devices: str | Sequence[str], **kwargs: Any) -> DeviceGroup:
        """Open a group from a group device string (``model*4``, ``sim*2,model``: see
        :func:`dx1_bringup.argtypes.device_group`) or a list of device strings; ``kwargs`` as the constructor's.

        A device string that opens a whole board (``model:chips=4``: its transport lists every chip's in
        ``board_transports``) makes one rank of each chip, in rank order, wired by the chip-to-chip link.
        A simulator's transport gets the group's ``timeout`` as its request deadline when that is shorter, so
        that a frozen simulator (every rank of a board stuck in a device call) is an error on every rank within
        the group's deadline rather than after the transport's minute.

        Raises
        ------
        ValueError
            The group device string is malformed (the message says what was expected).
        DriverError
            A device did not open (the ones opened before it are closed again).
        """
        import argparse

        from ..argtypes import device_group

        if isinstance(devices, str):
            try:
                devices = device_group(devices)
            except argparse.ArgumentTypeError as e:
                raise ValueError(f"group {devices!r}: {e}") from None
        opened: list[Device] = []
        try:
            for name in devices:
                opened.extend(Device.open_board(name))
            group = cls(opened, owns=True, **kwargs)
            for dev in opened:
                request_timeout = getattr(dev.transport, "timeout", None)
                if isinstance(request_timeout, float) and request_timeout > group.timeout:
                    dev.transport.timeout = group.timeout
            return group
        except BaseException:
            for dev in opened:
                _bounded(dev.close, 10.0)
            raise

    def __repr__(self) -> str:
        return f"<DeviceGroup of {self.size}: {', '.join(d.name for d in self.devs)}>"

    def rank(self, r: int) -> Rank:
        """Rank ``r``'s side, to call collectives from a thread of one's own (see :meth:`run`)."""
        return self.ranks[r]

    # -- buffers -----------------------------------------------------------------------------------

    def alloc(self, shape: int | tuple[int, ...], dtype: str | np.dtype = "int32",
              shapes: Sequence[int | tuple[int, ...]] | None = None) -> list[Buffer]:
        """One buffer per rank in its device memory, each ``shape`` (or ``shapes[r]``) of ``dtype``."""
        dtype = np.dtype(dtype)
        if dtype.name not in DTYPES:
            raise ValueError(f"a collective's buffer must be of {' or '.join(DTYPES)}, not {dtype.name}")
        shapes = [shape] * self.size if shapes is None else list(shapes)
        if len(shapes) != self.size:
            raise ValueError(f"shapes must give one shape per rank ({self.size}), not {len(shapes)}")
        bufs: list[Buffer] = []
        try:
            for r, s in enumerate(shapes):
                s = (s,) if isinstance(s, int) else tuple(s)
                nbytes = math.prod(s) * dtype.itemsize
                bufs.append(Buffer(r, self.devs[r].alloc(max(nbytes, 4)), dtype, s))
        except BaseException:
            self.free(bufs)  # no rank keeps a buffer of a group allocation that failed
            raise
        return bufs

    def free(self, bufs: Sequence[Buffer]) -> None:
        for buf in bufs:
            self.devs[buf.rank].free(buf.addr)

    def write(self, bufs: Sequence[Buffer], arrays: Sequence[np.ndarray]) -> None:
        """Store ``arrays[r]`` (of the buffer's type and element count) in ``bufs[r]``."""
        for buf, values in zip(bufs, arrays, strict=True):
            values = np.asarray(values)
            if values.size != buf.count:
                raise ValueError(f"{buf!r} holds {buf.count} elements, not {values.size}")
            stored = values.astype(buf.dtype).reshape(-1)
            if not np.array_equal(stored, values.reshape(-1)):
                raise ValueError(f"{buf!r} cannot hold these values: {values.dtype.name} values outside "
                                 f"{buf.dtype.name}'s range or not whole numbers")
            if values.size:
                self.devs[buf.rank].write_mem(buf.addr, stored)

    def read(self, bufs: Sequence[Buffer]) -> list[np.ndarray]:
        """Each buffer's elements, in its shape."""
        return [self.devs[b.rank].read_array(b.addr, b.shape, b.dtype) if b.count else np.zeros(b.shape, b.dtype)
                for b in bufs]

    # -- running every rank ------------------------------------------------------------------------

    def run(self, fn: Callable[[Rank], T], *, ranks: Sequence[int] | None = None) -> list[T]:
        """``fn(rank)`` on every rank's thread (or those of ``ranks``) at once; the results in rank order.

        Raises
        ------
        CollectiveError
            A rank's call failed: the lowest such rank's error, with ``per_rank`` mapping every failed rank to
            its own.  A rank still in a device call a moment (:data:`_GRACE`) after the group failed gets the
            group's failure as its error: its thread is left to the device's own deadline.
        """
        if self.closed:
            raise ValueError("the group is closed")
        chosen = list(range(self.size)) if ranks is None else list(ranks)
        if self.fabric.failure is not None:  # a failed group stays failed: its ranks' threads may be stuck
            first = self.fabric.failure.seen_by(chosen[0])
            first.per_rank = {r: self.fabric.failure.seen_by(r) for r in chosen}
            raise first
        jobs = {r: self._workers[r].submit(lambda r=r: fn(self.ranks[r])) for r in chosen}
        failed_at: float | None = None
        errors: dict[int, BaseException] = {}
        while True:
            pending = [r for r, job in jobs.items() if not job.done.is_set()]
            if not pending:
                break
            if self.fabric.failure is not None and failed_at is None:
                failed_at = time.monotonic()
            if failed_at is not None and time.monotonic() - failed_at > min(self.timeout, _GRACE):
                for r in pending:
                    errors[r] = self.fabric.failure.seen_by(r)
                    del jobs[r]
                break
            jobs[pending[0]].done.wait(0.02)
        errors.update({r: job.error for r, job in jobs.items() if job.error is not None})
        if errors:
            first = errors[min(errors)]
            if isinstance(first, CollectiveError):
                if first is self.fabric.failure:  # the group's own record stays as it was
                    first = errors[min(errors)] = first.seen_by(min(errors))
                first.per_rank = errors
            raise first
        return [jobs[r].result for r in chosen]

    def _each(self, method: str, bufs: Sequence[Buffer], outs: Sequence[Buffer] | None, **kwargs: Any) -> None:
        if len(bufs) != self.size or (outs is not None and len(outs) != self.size):
            raise ValueError(f"give one buffer per rank ({self.size}), not {len(bufs)}"
                             + ("" if outs is None else f" and {len(outs)} outputs"))
        self.run(lambda rank: getattr(rank, method)(bufs[rank.rank], None if outs is None else outs[rank.rank],
                                                    **kwargs))

    def all_reduce(self, bufs: Sequence[Buffer], outs: Sequence[Buffer] | None = None, **kwargs: Any) -> None:
        """:meth:`Rank.all_reduce` on every rank (``bufs[r]``, ``outs[r]``); ``outs=None`` is in place."""
        self._each("all_reduce", bufs, outs, **kwargs)

    def reduce_scatter(self, bufs: Sequence[Buffer], outs: Sequence[Buffer] | None = None, **kwargs: Any) -> None:
        """:meth:`Rank.reduce_scatter` on every rank."""
        self._each("reduce_scatter", bufs, outs, **kwargs)

    def all_gather(self, bufs: Sequence[Buffer], outs: Sequence[Buffer] | None = None, **kwargs: Any) -> None:
        """:meth:`Rank.all_gather` on every rank."""
        self._each("all_gather", bufs, outs, **kwargs)

    def broadcast(self, bufs: Sequence[Buffer], outs: Sequence[Buffer] | None = None, **kwargs: Any) -> None:
        """:meth:`Rank.broadcast` on every rank."""
        self._each("broadcast", bufs, outs, **kwargs)

    def reduce(self, bufs: Sequence[Buffer], outs: Sequence[Buffer] | None = None, **kwargs: Any) -> None:
        """:meth:`Rank.reduce` on every rank."""
        self._each("reduce", bufs, outs, **kwargs)

    def barrier(self, **kwargs: Any) -> None:
        self.run(lambda rank: rank.barrier(**kwargs))

    def send_recv(self, src_buf: Buffer, dst_buf: Buffer, **kwargs: Any) -> None:
        """Rank ``src_buf.rank`` sends ``src_buf``, rank ``dst_buf.rank`` receives it into ``dst_buf``."""
        src, dst = src_buf.rank, dst_buf.rank
        self.run(lambda rank: rank.send(src_buf, dst, **kwargs) if rank.rank == src else
                 rank.recv(dst_buf, src, **kwargs), ranks=[src, dst])

    # -- teardown ----------------------------------------------------------------------------------

    def close(self) -> None:
        """Abort any collective in progress, stop the ranks' threads and (if the group owns them) close the devices.

        Returns within about the group's timeout even when a device no longer answers: a close that does not
        finish is left to the device's own deadline on a daemon thread.
        """
        if self.closed:
            return
        self.closed = True
        self.fabric.close()
        for worker in self._workers:
            worker.stop()
        if self.owns:
            closers = [threading.Thread(target=_quietly, args=(dev.close,), daemon=True) for dev in self.devs]
            for thread in closers:
                thread.start()
            end = time.monotonic() + self.timeout
            for thread in closers:
                thread.join(max(0.0, end - time.monotonic()))

    def __enter__(self) -> DeviceGroup:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


