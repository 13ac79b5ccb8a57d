"""The direct algorithm: every rank's buffer gathered to the host, reduced in rank order, the results scattered.

One exchange per collective (every rank deposits what it has, then takes what it needs); no chunks.  It is the
reference the ring is checked against, and the quicker one for small buffers (one step instead of
``2 (n - 1)``); it holds every rank's whole buffer in host memory at once.
"""

from __future__ import annotations

import numpy as np

from .buffer import Buffer, segment
from .call import Call

__all__ = ["all_reduce", "reduce_scatter", "all_gather", "broadcast", "reduce"]


def _sum(c: Call, parts: list[np.ndarray]) -> np.ndarray:
    red = c.reduction
    partial = red.widen(parts[0])
    for part in parts[1:]:
        partial = red.add(partial, part)
    return red.finish(partial)


def all_reduce(c: Call, src: Buffer, dst: Buffer, count: int) -> None:
    c.step("direct gather to the host")
    parts = c.exchange("gather", c.read(src, 0, count))
    c.step("direct reduce and scatter")
    c.write(dst, 0, _sum(c, parts))


def reduce_scatter(c: Call, src: Buffer, count: int, dst: Buffer, dst_lo: int) -> None:
    c.step("direct gather to the host")
    parts = c.exchange("gather", c.read(src, 0, count))
    lo, hi = segment(count, c.size, c.rank)
    c.step("direct reduce and scatter")
    c.write(dst, dst_lo, _sum(c, [p[lo:hi] for p in parts]))


def all_gather(c: Call, src: Buffer, src_lo: int, dst: Buffer, count: int) -> None:
    lo, hi = segment(count, c.size, c.rank)
    c.step("direct gather to the host")
    parts = c.exchange("gather", c.read(src, src_lo, src_lo + hi - lo))
    c.step("direct scatter")
    c.write(dst, 0, np.concatenate(parts) if parts else np.zeros(0, dst.dtype))


def broadcast(c: Call, src: Buffer, dst: Buffer, count: int, root: int) -> None:
    c.step("direct gather to the host")
    parts = c.exchange("gather", c.read(src, 0, count) if c.rank == root else None)
    if c.rank != root or dst != src:
        c.step("direct scatter")
        c.write(dst, 0, parts[root])


def reduce(c: Call, src: Buffer, dst: Buffer, count: int, root: int) -> None:
    c.step("direct gather to the host")
    parts = c.exchange("gather", c.read(src, 0, count))
    if c.rank == root:
        c.step("direct reduce")
        c.write(dst, 0, _sum(c, parts))
