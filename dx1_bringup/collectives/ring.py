"""The ring: chunked, pipelined steps rank to rank (each chunk staged through host memory).

Rank ``r`` sends to ``r + 1`` and receives from ``r - 1`` (modulo the group's size).  A buffer of ``count``
elements is split into one segment per rank (:func:`~.buffer.segment`) and each segment into chunks of the
call's chunk size; every step moves one chunk at a time, and a rank forwards a chunk as soon as it has it
(receive, reduce, send: NCCL's ``recvReduceSend``), so the ranks work on different chunks at once.

* reduce-scatter, ``n - 1`` steps: at step ``s`` rank ``r`` receives the partial sum of segment
  ``r - s - 2`` and adds its own elements; after the last step it holds segment ``r`` summed over every rank.
* all-gather, ``n - 1`` steps: rank ``r`` sends its segment on; at step ``t`` it receives segment
  ``r - t - 1``, stores it and forwards it (unless the next rank is where that segment started).
* all-reduce: reduce-scatter, then all-gather of the finished segments.
* broadcast: a chain from the root round the ring, chunk by chunk; reduce: a chain that starts after the
  root and ends at it, adding each rank's elements on the way.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from .buffer import Buffer, chunks, segment
from .call import Call

__all__ = ["all_reduce", "reduce_scatter", "all_gather", "broadcast", "reduce"]


def _reduce_scatter(c: Call, src: Buffer, count: int) -> Iterator[tuple[int, np.ndarray]]:
    """The finished chunks ``(lo, values)`` of segment ``c.rank`` (after ``n - 1`` steps)."""
    n, r, red = c.size, c.rank, c.reduction
    nxt, prv = (r + 1) % n, (r - 1) % n
    if n == 1:
        for lo, hi in chunks(0, count, c.chunk):
            c.step(f"ring reduce (one rank), elements {lo}..{hi}")
            yield lo, red.finish(red.widen(c.read(src, lo, hi)))
        return
    for lo, hi in chunks(*segment(count, n, (r - 1) % n), c.chunk):
        c.step(f"ring reduce-scatter step 1 of {n - 1}, sending elements {lo}..{hi}")
        c.send(nxt, f"rs0:{lo}", red.widen(c.read(src, lo, hi)))
    for s in range(n - 1):
        for lo, hi in chunks(*segment(count, n, (r - s - 2) % n), c.chunk):
            c.step(f"ring reduce-scatter step {s + 1} of {n - 1}, elements {lo}..{hi} from rank {prv}")
            partial = red.add(c.recv(prv, f"rs{s}:{lo}"), c.read(src, lo, hi))
            if s < n - 2:
                c.send(nxt, f"rs{s + 1}:{lo}", partial)
            else:
                yield lo, red.finish(partial)


def _all_gather(c: Call, dst: Buffer, count: int, own: Iterator[tuple[int, np.ndarray]]) -> None:
    """Store and send on the chunks of the rank's own segment (``own``), then receive, store and forward the others."""
    n, r = c.size, c.rank
    nxt, prv = (r + 1) % n, (r - 1) % n
    for lo, values in own:
        c.write(dst, lo, values)
        if n > 1:
            c.send(nxt, f"ag0:{lo}", values)
    for t in range(n - 1):
        for lo, hi in chunks(*segment(count, n, (r - t - 1) % n), c.chunk):
            c.step(f"ring all-gather step {t + 1} of {n - 1}, elements {lo}..{hi} from rank {prv}")
            values = c.recv(prv, f"ag{t}:{lo}")
            c.write(dst, lo, values)
            if t < n - 2:
                c.send(nxt, f"ag{t + 1}:{lo}", values)


def all_reduce(c: Call, src: Buffer, dst: Buffer, count: int) -> None:
    _all_gather(c, dst, count, _reduce_scatter(c, src, count))


def reduce_scatter(c: Call, src: Buffer, count: int, dst: Buffer, dst_lo: int) -> None:
    """Segment ``c.rank`` of the sum of every rank's ``src`` into ``dst`` from element ``dst_lo``."""
    first = segment(count, c.size, c.rank)[0]
    for lo, values in _reduce_scatter(c, src, count):
        c.write(dst, dst_lo + lo - first, values)


def all_gather(c: Call, src: Buffer, src_lo: int, dst: Buffer, count: int) -> None:
    """Every rank's part (``src`` from element ``src_lo``: segment ``c.rank`` of ``count``) into ``dst``."""
    lo_r, hi_r = segment(count, c.size, c.rank)
    in_place = src == dst and src_lo == lo_r

    def own() -> Iterator[tuple[int, np.ndarray]]:
        for lo, hi in chunks(lo_r, hi_r, c.chunk):
            c.step(f"ring all-gather, own elements {lo}..{hi}")
            yield lo, c.read(src, src_lo + lo - lo_r, src_lo + hi - lo_r)

    if in_place:  # the part is in place: send it without storing it again
        own_chunks = list(own())
        n, r = c.size, c.rank
        for lo, values in own_chunks:
            if n > 1:
                c.send((r + 1) % n, f"ag0:{lo}", values)
        _all_gather(c, dst, count, iter(()))
    else:
        _all_gather(c, dst, count, own())


def broadcast(c: Call, src: Buffer, dst: Buffer, count: int, root: int) -> None:
    """The root's ``src`` into every rank's ``dst``, along the chain root, root + 1, ..."""
    n, r = c.size, c.rank
    pos, nxt, prv = (r - root) % n, (r + 1) % n, (r - 1) % n
    for lo, hi in chunks(0, count, c.chunk):
        if pos == 0:
            c.step(f"ring broadcast from the root, elements {lo}..{hi}")
            values = c.read(src, lo, hi)
            if dst != src:
                c.write(dst, lo, values)
        else:
            c.step(f"ring broadcast, hop {pos} of {n - 1}, elements {lo}..{hi} from rank {prv}")
            values = c.recv(prv, f"bc:{lo}")
            c.write(dst, lo, values)
        if pos < n - 1:
            c.send(nxt, f"bc:{lo}", values)


def reduce(c: Call, src: Buffer, dst: Buffer, count: int, root: int) -> None:
    """The sum of every rank's ``src`` into the root's ``dst``, along the chain root + 1, root + 2, ..., root."""
    n, r, red = c.size, c.rank, c.reduction
    pos, nxt, prv = (r - root - 1) % n, (r + 1) % n, (r - 1) % n
    for lo, hi in chunks(0, count, c.chunk):
        c.step(f"ring reduce, hop {pos + 1} of {n}, elements {lo}..{hi}")
        partial = red.widen(c.read(src, lo, hi))
        if pos > 0:
            partial = red.add(c.recv(prv, f"rd:{lo}"), partial)
        if pos < n - 1:
            c.send(nxt, f"rd:{lo}", partial)
        else:
            c.write(dst, lo, red.finish(partial))
