"""The cost of the collectives over the chip-to-chip link, from the spec's timing of a SEND.

One SEND of ``b`` bytes costs :func:`~dx1_bringup.spec.send_cycles` (the link DMA's pipeline as its gateware
runs it: a frame read whole before it goes, the first frame alone until acknowledged, each frame landed in
bursts); its alpha-beta summary (:class:`LinkCost`) is the smallest SEND's cycles and the streaming rate of a
long one.  Each chunk also pays the WAIT that releases it (``sync`` cycles, :data:`~dx1_bringup.perfmodel.COSTS`).
The ring algorithms (``collectives/link.py``) advance in lockstep, every rank sending one slot a step (int32
ADDs while they reduce, WRITEs while they gather), so a ring collective costs its steps times the largest
slot's chunks; a chain (broadcast, reduce) is pipelined, its last rank ``n - 2`` chunks behind the first.
Every link collective starts with ``n - 1`` rounds of an 8-byte token round the ring (its barrier), and costs
:data:`~dx1_bringup.perfmodel.COSTS`' ``link_launch`` and ``token_round`` more on the RTL (the host's part
and the barrier's command issue, fitted on the Verilator boards).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..spec import ChipLinkConfig, LinkOp, align_up, ceil_div, send_cycles
from .costs import COSTS

__all__ = ["LinkCost", "link_cost", "chain_chunk_bytes", "predict_collective_cycles"]

#: The smallest piece a chain cuts a buffer into when it cuts it finer than the call's chunk.
CHAIN_MIN_CHUNK = 4096

#: Steps of each ring collective over ``n`` ranks.
_RING_STEPS = {"all_reduce": lambda n: 2 * (n - 1), "reduce_scatter": lambda n: n - 1,
               "all_gather": lambda n: n - 1}


@dataclass(frozen=True)
class LinkCost:
    """SENDs over ``config``'s link: :meth:`send` their cycles, ``sync`` a chunk's WAIT more."""

    config: ChipLinkConfig
    sync: int

    def send(self, nbytes: int, op: LinkOp = LinkOp.WRITE) -> int:
        return send_cycles(self.config, nbytes, op)

    @property
    def alpha(self) -> int:
        """The smallest SEND's cycles: nearly all latency."""
        return self.send(8)

    @property
    def beta(self) -> float:
        """Bytes a cycle a long SEND streams at (between 64 and 128 frames)."""
        a, b = 64 * self.config.max_payload, 128 * self.config.max_payload
        return (b - a) / (self.send(b) - self.send(a))


def link_cost(config: ChipLinkConfig | None = None) -> LinkCost:
    """The cost of SENDs over ``config``'s link (the default link's when ``None``)."""
    return LinkCost(config or ChipLinkConfig(), COSTS.sync_cycles)


def chain_chunk_bytes(total: int, n: int, chunk_bytes: int) -> int:
    """The piece a chain of ``n`` ranks (broadcast, reduce) sends ``total`` bytes in: the call's chunk, or finer,
    about ``total / (8 n)`` (at least :data:`CHAIN_MIN_CHUNK`), so that the ``n - 2`` pieces the last rank trails
    the first by cost little; a multiple of 8."""
    fine = max(CHAIN_MIN_CHUNK, align_up(ceil_div(total, 8 * n), 8))
    return max(8, min(chunk_bytes, fine) // 8 * 8)


def predict_collective_cycles(op: str, n: int, count: int, itemsize: int, chunk_bytes: int,
                              config: ChipLinkConfig | None = None) -> float:
    """Predicted device cycles of ``op`` on ``count`` elements over ``n`` chips with the link algorithm."""
    cost = link_cost(config)
    chunk = max(8, chunk_bytes // 8 * 8)
    barrier = (n - 1) * (cost.send(8) + cost.sync + COSTS.token_round)
    return COSTS.link_launch + barrier + _data_cycles(op, n, count, itemsize, chunk, cost)


def _data_cycles(op: str, n: int, count: int, itemsize: int, chunk: int, cost: LinkCost) -> float:
    if op in _RING_STEPS:
        if n == 1:
            return 0.0
        slot = align_up(ceil_div(count, n) * itemsize, 8)  # the largest segment's slot
        pieces = [min(chunk, slot - a) for a in range(0, slot, chunk)]
        adds = {"all_reduce": n - 1, "reduce_scatter": n - 1, "all_gather": 0}[op]
        step = {o: sum(cost.send(p, o) + cost.sync for p in pieces) for o in (LinkOp.ADD, LinkOp.WRITE)}
        return adds * step[LinkOp.ADD] + (_RING_STEPS[op](n) - adds) * step[LinkOp.WRITE]
    if op in ("broadcast", "reduce"):
        total = align_up(count * itemsize, 8)
        chunk = chain_chunk_bytes(total, n, chunk)
        pieces = [min(chunk, total - a) for a in range(0, total, chunk)]
        if n == 1 or not pieces:
            return 0.0
        sent = LinkOp.ADD if op == "reduce" else LinkOp.WRITE
        per = max(cost.send(p, sent) + cost.sync for p in pieces)
        return sum(cost.send(p, sent) + cost.sync for p in pieces) + (n - 2) * per
    raise ValueError(f"no link cost for {op!r}; the link runs all_reduce, reduce_scatter, all_gather, broadcast "
                     "and reduce")
