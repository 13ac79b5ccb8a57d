"""The alpha-beta cost of the collectives over the chip-to-chip link, from the spec's link parameters.

One SEND of ``b`` bytes costs ``alpha + b / beta`` cycles: ``beta`` is the link's streaming rate (``width``
bytes a cycle, less each frame's header and trailer), ``alpha`` what a SEND pays whatever its size (its first
frame's round trip, the landing, DONE coming back: the smallest SEND's cycles), both taken from
:func:`~dx1_bringup.spec.send_cycles`, the golden model's timing; each chunk also pays the WAIT that releases
it (``sync`` cycles, :data:`~dx1_bringup.perfmodel.COSTS`).  The ring algorithms (``collectives/link.py``)
advance in lockstep, every rank sending one slot a step, so a ring collective costs its steps times the
largest slot's chunks; a chain (broadcast, reduce) is pipelined, its last rank ``n - 2`` chunks behind the
first.  Every link collective starts with ``n - 1`` rounds of an 8-byte token round the ring (its barrier).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..spec import HEADER_BYTES, TRAILER_BYTES, ChipLinkConfig, align_up, ceil_div, send_cycles
from .costs import COSTS

__all__ = ["LinkCost", "link_cost", "predict_collective_cycles"]

#: Steps of each ring collective over ``n`` ranks.
_RING_STEPS = {"all_reduce": lambda n: 2 * (n - 1), "reduce_scatter": lambda n: n - 1,
               "all_gather": lambda n: n - 1}


@dataclass(frozen=True)
class LinkCost:
    """A SEND of ``b`` bytes costs ``alpha + b / beta`` cycles; a chunk's WAIT ``sync`` more."""

    alpha: float
    beta: float
    sync: int

    def send(self, nbytes: int) -> float:
        return self.alpha + nbytes / self.beta


def link_cost(config: ChipLinkConfig | None = None) -> LinkCost:
    """The alpha-beta parameters of ``config``'s link (the default link's when ``None``)."""
    config = config or ChipLinkConfig()
    beta = config.width * config.max_payload / (HEADER_BYTES + config.max_payload + TRAILER_BYTES)
    alpha = send_cycles(config, 8) - 8 / beta  # the smallest SEND is nearly all latency
    return LinkCost(alpha, beta, COSTS.sync_cycles)


def predict_collective_cycles(op: str, n: int, count: int, itemsize: int, chunk_bytes: int,
                              config: ChipLinkConfig | None = None) -> float:
    """Predicted device cycles of ``op`` on ``count`` elements over ``n`` chips with the link algorithm."""
    cost = link_cost(config)
    chunk = max(8, chunk_bytes // 8 * 8)
    barrier = (n - 1) * (cost.send(8) + cost.sync)
    return barrier + _data_cycles(op, n, count, itemsize, chunk, cost)


def _data_cycles(op: str, n: int, count: int, itemsize: int, chunk: int, cost: LinkCost) -> float:
    if op in _RING_STEPS:
        if n == 1:
            return 0.0
        slot = align_up(ceil_div(count, n) * itemsize, 8)  # the largest segment's slot
        pieces = [min(chunk, slot - a) for a in range(0, slot, chunk)]
        return _RING_STEPS[op](n) * sum(cost.send(p) + cost.sync for p in pieces)
    if op in ("broadcast", "reduce"):
        total = align_up(count * itemsize, 8)
        pieces = [min(chunk, total - a) for a in range(0, total, chunk)]
        if n == 1 or not pieces:
            return 0.0
        per = max(cost.send(p) + cost.sync for p in pieces)
        return sum(cost.send(p) + cost.sync for p in pieces) + (n - 2) * per
    raise ValueError(f"no link cost for {op!r}; the link runs all_reduce, reduce_scatter, all_gather, broadcast "
                     "and reduce")
