"""The fingerprint every rank gives a collective, compared across the ranks before any data moves.

NCCL sums garbage or hangs when ranks disagree on a collective's shape; here every rank deposits its
:class:`Fingerprint` (and the size of its own part, and any refusal of its arguments), every rank compares
all of them, and every rank raises the same :class:`CollectiveMismatch` naming the field and each rank's value.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, fields

from .buffer import segment
from .errors import CollectiveMismatch, CollectiveRefused

__all__ = ["Fingerprint", "Entry", "compare"]


@dataclass(frozen=True)
class Fingerprint:
    """What a rank means to run: its sequence number in the group, the collective, the element type, the shape of
    the whole buffer, the root, the reduction, the algorithm and its chunk (elements); ``None`` where unused."""

    seq: int
    op: str
    dtype: str | None = None
    shape: tuple[int, ...] | None = None
    root: int | None = None
    redop: str | None = None
    algorithm: str | None = None
    chunk: int | None = None


@dataclass(frozen=True)
class Entry:
    """A rank's deposit: its fingerprint, the elements of its own part (all-gather's input, reduce-scatter's
    output; ``None`` otherwise) and what was wrong with its arguments (``""``: nothing)."""

    fingerprint: Fingerprint
    part: int | None = None
    refused: str = ""


def _odd_one(values: list[object]) -> int:
    """The index of the first value that is not the most common one."""
    common = Counter(map(repr, values)).most_common(1)[0][0]
    return next(i for i, v in enumerate(values) if repr(v) != common)


def compare(entries: list[Entry], me: Entry, ranks: list[int] | None = None) -> None:
    """Raise :class:`CollectiveMismatch` unless every entry agrees (each rank calls this on the same list).

    ``ranks`` are the ranks the entries are from (default: ``0 .. len(entries) - 1``, the whole group).
    """
    ranks = list(range(len(entries))) if ranks is None else ranks
    fp = me.fingerprint
    where = f"{fp.op} #{fp.seq}"
    refused = [(r, e.refused) for r, e in zip(ranks, entries, strict=True) if e.refused]
    if refused:
        rank, why = refused[0]
        raise CollectiveRefused(f"{where}: rank {rank} refused its arguments: {why}", rank=rank, op=fp.op,
                                 seq=fp.seq, step="fingerprint exchange", field="arguments",
                                 values={r: e.refused for r, e in zip(ranks, entries, strict=True)})
    for f in fields(Fingerprint):
        values = [getattr(e.fingerprint, f.name) for e in entries]
        if any(v != values[0] for v in values):
            odd = ranks[_odd_one(values)]
            listed = ", ".join(f"rank {r} {v}" for r, v in zip(ranks, values, strict=True))
            raise CollectiveMismatch(f"{where}: the ranks' fingerprints differ in {f.name} (rank {odd} differs): "
                                     f"{listed}", rank=odd, op=fp.op, seq=fp.seq, step="fingerprint exchange",
                                     field=f.name, values=dict(zip(ranks, values, strict=True)))
    if me.part is not None and fp.shape is not None:
        count = math.prod(fp.shape)
        spans = [segment(count, len(entries), r) for r in range(len(entries))]
        wrong = [r for r, e in enumerate(entries) if e.part != spans[r][1] - spans[r][0]]
        if wrong:
            listed = ", ".join(f"rank {r} has {entries[r].part} elements, its segment (elements {spans[r][0]}.."
                               f"{spans[r][1]}) {spans[r][1] - spans[r][0]}" for r in wrong)
            raise CollectiveMismatch(f"{where}: parts do not match the segments of {count} elements over "
                                     f"{len(entries)} ranks: {listed}", rank=wrong[0], op=fp.op, seq=fp.seq,
                                     step="fingerprint exchange", field="part",
                                     values={r: e.part for r, e in enumerate(entries)})
