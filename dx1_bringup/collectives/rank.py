"""One rank's side of the group: the collectives as NCCL and torch.distributed name them, SPMD style.

Every rank of a :class:`~.group.DeviceGroup` calls the same collectives in the same order, each from its own
thread (the group's :meth:`~.group.DeviceGroup.run` does that, or the group-level methods).  A collective takes
the rank's buffers (in its own device memory); ``out=None`` is in place.  First the ranks exchange
fingerprints (:mod:`.fingerprint`); then the algorithm moves the data (:mod:`.ring`, :mod:`.direct`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Protocol

from dx1_driver import Device

from . import direct, link, ring
from .buffer import Buffer, chunks, segment
from .call import Call
from .errors import CollectiveError, RankFailed
from .fabric import Fabric
from .fingerprint import Entry, Fingerprint, compare
from .reduction import Reduction, reduction

__all__ = ["ALGORITHMS", "Rank"]

#: The algorithms: ``ring`` (chunked, pipelined, rank to rank, through the host), ``direct`` (gather, reduce in rank
#: order, scatter) and ``link`` (the ring over the chip-to-chip link: SEND and WAIT on the devices).
ALGORITHMS = {"ring": ring, "direct": direct, "link": link}


class Group(Protocol):
    """What a rank needs of its group (:class:`~.group.DeviceGroup`): its devices, fabric and defaults."""

    devs: Sequence[Device]
    size: int
    fabric: Fabric
    timeout: float
    algorithm: str | None
    has_link: bool
    chunk_bytes: int
    verify: bool


class Rank:
    """Rank ``rank`` of ``group``: its collectives.  Made by the group (:meth:`~.group.DeviceGroup.rank`)."""

    def __init__(self, group: Group, rank: int):
        self.group = group
        self.rank = rank
        self.dev = group.devs[rank]
        self.seq = 0
        self._p2p: dict[tuple[int, int], int] = {}

    def __repr__(self) -> str:
        return f"<Rank {self.rank} of {self.group.size}: {self.dev.name}>"

    # -- the collectives ---------------------------------------------------------------------------

    def all_reduce(self, buf: Buffer, out: Buffer | None = None, *, redop: str = "sum", scale: float | None = None,
                   **options) -> None:
        """Every rank's ``out`` (``buf`` when ``None``) gets the sum of every rank's ``buf``."""
        dst = buf if out is None else out
        self._collective("all_reduce", buf, dst, buf.shape, None, None, (redop, scale),
                         lambda c, alg: alg.all_reduce(c, buf, dst, buf.count),
                         lambda: _same_size(buf, dst), **options)

    def reduce_scatter(self, buf: Buffer, out: Buffer | None = None, *, redop: str = "sum",
                       scale: float | None = None, **options) -> None:
        """Rank ``r``'s ``out`` gets segment ``r`` (:func:`~.buffer.segment`) of the sum of every rank's ``buf``;
        in place (``out=None``), that segment of ``buf`` does."""
        lo, hi = segment(buf.count, self.group.size, self.rank)
        dst, dst_lo = (buf, lo) if out is None else (out, 0)
        part = hi - lo if out is None else out.count
        self._collective("reduce_scatter", buf, dst, buf.shape, part, None, (redop, scale),
                         lambda c, alg: alg.reduce_scatter(c, buf, buf.count, dst, dst_lo),
                         lambda: _same_type(buf, dst), **options)

    def all_gather(self, buf: Buffer, out: Buffer | None = None, **options) -> None:
        """Every rank's ``out`` gets every rank's ``buf`` in rank order (rank ``r``'s part is segment ``r`` of
        ``out``); in place (``out=None``), ``buf`` is the whole and the rank's part is its segment of it."""
        whole = buf if out is None else out
        lo, hi = segment(whole.count, self.group.size, self.rank)
        src_lo = lo if out is None else 0
        part = hi - lo if out is None else buf.count
        self._collective("all_gather", buf, whole, whole.shape, part, None, None,
                         lambda c, alg: alg.all_gather(c, buf, src_lo, whole, whole.count),
                         lambda: _same_type(buf, whole), **options)

    def broadcast(self, buf: Buffer, out: Buffer | None = None, *, root: int = 0, **options) -> None:
        """Every rank's ``out`` (``buf`` when ``None``) gets the root's ``buf``."""
        dst = buf if out is None else out
        self._collective("broadcast", buf, dst, buf.shape, None, root, None,
                         lambda c, alg: alg.broadcast(c, buf, dst, buf.count, root),
                         lambda: _same_size(buf, dst) or self._check_root(root), **options)

    def reduce(self, buf: Buffer, out: Buffer | None = None, *, root: int = 0, redop: str = "sum",
               scale: float | None = None, **options) -> None:
        """The root's ``out`` (``buf`` when ``None``) gets the sum of every rank's ``buf``; other ranks' ``out``
        is left alone."""
        dst = buf if out is None else out
        self._collective("reduce", buf, dst, buf.shape, None, root, (redop, scale),
                         lambda c, alg: alg.reduce(c, buf, dst, buf.count, root),
                         lambda: _same_size(buf, dst) or self._check_root(root), **options)

    def barrier(self, *, timeout: float | None = None) -> None:
        """Return once every rank has called it (a fingerprint exchange and nothing else)."""
        self._collective("barrier", None, None, None, None, None, None, lambda c, alg: None, lambda: "",
                         timeout=timeout)

    # -- point to point ----------------------------------------------------------------------------

    def send(self, buf: Buffer, dst: int, *, timeout: float | None = None, chunk_bytes: int | None = None) -> None:
        """Send ``buf`` to rank ``dst``, which calls :meth:`recv` with a buffer of the same type and shape."""
        self._p2p_call("send", buf, self.rank, dst, timeout, chunk_bytes)

    def recv(self, buf: Buffer, src: int, *, timeout: float | None = None, chunk_bytes: int | None = None) -> None:
        """Receive into ``buf`` what rank ``src`` sends (:meth:`send`)."""
        self._p2p_call("recv", buf, src, self.rank, timeout, chunk_bytes)

    # -- the machinery -----------------------------------------------------------------------------

    def _check_root(self, root: int) -> str:
        if not isinstance(root, int) or not 0 <= root < self.group.size:
            return f"the root must be a rank from 0 to {self.group.size - 1}, not {root!r}"
        return ""

    def _check_buffer(self, buf: Buffer | None) -> str:
        if buf is None:
            return ""
        if not isinstance(buf, Buffer):
            return f"a buffer must be a Buffer, not {buf!r}"
        if buf.rank != self.rank:
            return f"{buf!r} is in rank {buf.rank}'s device memory, not rank {self.rank}'s"
        return ""

    def _options(self, algorithm: str | None, chunk_bytes: int | None, timeout: float | None,
                 itemsize: int) -> tuple[str, int, float]:
        g = self.group
        algorithm = g.algorithm if algorithm is None else algorithm
        if algorithm is None:  # the group's default: the link when every rank has one
            algorithm = "link" if g.has_link else "ring"
        chunk_bytes = g.chunk_bytes if chunk_bytes is None else chunk_bytes
        timeout = g.timeout if timeout is None else timeout
        if algorithm not in ALGORITHMS:
            raise ValueError(f"the algorithm must be one of {', '.join(ALGORITHMS)}, not {algorithm!r}")
        if not isinstance(chunk_bytes, int) or chunk_bytes < 1:
            raise ValueError(f"the chunk size must be a whole number of bytes of at least 1, not {chunk_bytes!r}")
        if not (isinstance(timeout, (int, float)) and timeout > 0 and math.isfinite(timeout)):
            raise ValueError(f"the timeout must be a number of seconds > 0, not {timeout!r}")
        return algorithm, max(1, chunk_bytes // itemsize), float(timeout)

    def _collective(self, op: str, buf: Buffer | None, dst: Buffer | None, shape: tuple[int, ...] | None,
                    part: int | None, root: int | None, redop: tuple[str, float | None] | None,
                    body: Callable[[Call, object], None], check: Callable[[], str], *,
                    algorithm: str | None = None, chunk_bytes: int | None = None,
                    timeout: float | None = None) -> None:
        options = {"algorithm": algorithm}
        g = self.group
        g.fabric.check(self.rank)
        seq = self.seq
        self.seq += 1
        refused = ""
        try:
            algorithm, chunk, timeout = self._options(algorithm, chunk_bytes, timeout,
                                                      buf.dtype.itemsize if buf else 1)
        except ValueError as e:  # refused on every rank, below, rather than left for the others to wait on
            refused = str(e)
            algorithm, chunk, timeout = self._options(None, None, None, buf.dtype.itemsize if buf else 1)
        refused = refused or self._check_buffer(buf) or self._check_buffer(dst) or check()
        red: Reduction | None = None
        if redop is not None and not refused:
            try:
                red = reduction(redop[0], buf.dtype, g.size, redop[1])
            except ValueError as e:
                refused = str(e)
        if algorithm == "link" and buf is not None and not refused:
            why = link.supports(op, buf.dtype, red) or ("" if g.has_link else
                                                        "the link algorithm needs every rank to be a chip of one "
                                                        "ring board, in rank order")
            if why and (options.get("algorithm") or g.algorithm) == "link":
                refused = why
            elif why:  # the default: what the link cannot do takes the host-staged ring
                algorithm = "ring"
        fp = Fingerprint(seq, op, buf.dtype.name if buf else None, shape, root,
                         red.describe() if red else (redop[0] if redop else None),
                         algorithm if buf else None, chunk if buf and algorithm == "ring" else None)
        call = Call(g.fabric, self.dev, self.rank, op, seq, timeout=timeout, chunk=chunk, verify=g.verify,
                    reduction=red)
        self._run(call, lambda: self._agree_and_move(call, Entry(fp, part, refused),
                                                     lambda: body(call, ALGORITHMS[algorithm])))

    def _agree_and_move(self, call: Call, entry: Entry, move: Callable[[], None]) -> None:
        call.step("fingerprint exchange")
        compare(call.exchange("fingerprint", entry), entry)
        move()

    def _p2p_call(self, op: str, buf: Buffer, src: int, dst: int, timeout: float | None,
                  chunk_bytes: int | None) -> None:
        g = self.group
        g.fabric.check(self.rank)
        peer = dst if op == "send" else src
        if not isinstance(peer, int) or not 0 <= peer < g.size or peer == self.rank:
            raise ValueError(f"rank {self.rank} cannot {op} {'to' if op == 'send' else 'from'} {peer!r}: the peer "
                             f"must be another rank from 0 to {g.size - 1}")
        refused = self._check_buffer(buf)
        if refused:
            raise ValueError(refused)
        _, chunk, timeout = self._options("ring", chunk_bytes, timeout, buf.dtype.itemsize)
        seq = self._p2p.get((src, dst), 0)
        self._p2p[(src, dst)] = seq + 1
        call = Call(g.fabric, self.dev, self.rank, f"{op} {src}->{dst}", seq, timeout=timeout, chunk=chunk,
                    verify=g.verify, lane="p2p")
        mine = Fingerprint(seq, "send/recv", buf.dtype.name, buf.shape, None, None, None, chunk)

        def move() -> None:
            if op == "send":
                call.step(f"send {src}->{dst}: fingerprint")
                call.send(dst, "fingerprint", mine)
                call.step(f"send {src}->{dst}: waiting for rank {dst} to check the fingerprint")
                verdict = call.recv(dst, "verdict")
                if verdict is not None:
                    raise verdict.seen_by(self.rank)
                for lo, hi in chunks(0, buf.count, chunk):
                    call.step(f"send {src}->{dst}, elements {lo}..{hi}")
                    call.send(dst, f"p2p:{lo}", call.read(buf, lo, hi))
            else:
                call.step(f"recv {src}->{dst}: fingerprint")
                theirs = call.recv(src, "fingerprint")
                verdict = None
                try:
                    compare([Entry(theirs), Entry(mine)], Entry(mine), [src, dst])
                except CollectiveError as e:
                    verdict = e
                call.send(src, "verdict", verdict)
                if verdict is not None:
                    raise verdict.seen_by(self.rank)
                for lo, hi in chunks(0, buf.count, chunk):
                    call.step(f"recv {src}->{dst}, elements {lo}..{hi}")
                    call.write(buf, lo, call.recv(src, f"p2p:{lo}"))

        self._run(call, move)

    def _run(self, call: Call, work: Callable[[], None]) -> None:
        """Run ``work``; an error that is not a collective's (a bug, a refused message) fails the whole group."""
        try:
            work()
        except CollectiveError as e:
            if e.observer is None:
                e.observer = self.rank
            raise
        except Exception as e:
            error = RankFailed(f"rank {self.rank} failed in {call.op} #{call.seq} at {call.where}: "
                               f"{type(e).__name__}: {e}", rank=self.rank, op=call.op, seq=call.seq,
                               step=call.where, cause=e)
            g = self.group
            g.fabric.abort(error)
            raise error from e
        finally:
            self.group.fabric.leave(self.rank)


def _same_type(buf: Buffer, dst: Buffer) -> str:
    if buf.dtype != dst.dtype:
        return f"the output {dst!r} is not of the input's type {buf.dtype.name}"
    return ""


def _same_size(buf: Buffer, dst: Buffer) -> str:
    if _same_type(buf, dst):
        return _same_type(buf, dst)
    if dst.count != buf.count:
        return f"the output {dst!r} does not hold the input's {buf.count} elements"
    return ""
