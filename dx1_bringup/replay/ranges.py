"""Byte ranges of device memory that are read back or zeroed together: nearby ranges merge into one request."""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["MERGE_GAP", "merge_ranges"]

#: Ranges closer than this are handled as one (a request costs more than a few bytes).
MERGE_GAP = 0x100


def merge_ranges(ranges: Iterable[tuple[int, int]], gap: int = MERGE_GAP) -> list[tuple[int, int]]:
    """``(start, end)`` ranges sorted, empty ones dropped, and those less than ``gap`` bytes apart joined."""
    merged: list[tuple[int, int]] = []
    for start, end in sorted(ranges):
        if end <= start:
            continue
        if merged and start <= merged[-1][1] + gap:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged
