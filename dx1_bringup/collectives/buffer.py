"""A rank's buffer in its own device memory, and how a collective splits a buffer among the ranks."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

__all__ = ["DTYPES", "Buffer", "segment", "chunks"]

#: The element types a collective moves, by name.
DTYPES = {"int32": np.dtype(np.int32), "int8": np.dtype(np.int8)}


@dataclass(frozen=True)
class Buffer:
    """``shape`` elements of ``dtype`` at ``addr`` of rank ``rank``'s device memory, C order, little-endian.

    ``addr`` is what the rank's ``dev.alloc`` returned; :class:`~.group.DeviceGroup` allocates at least 4 bytes,
    so an empty buffer has an address too.
    """

    rank: int
    addr: int
    dtype: np.dtype
    shape: tuple[int, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "dtype", np.dtype(self.dtype))
        object.__setattr__(self, "shape", tuple(int(d) for d in self.shape))
        if self.dtype.name not in DTYPES:
            raise ValueError(f"a collective's buffer must be of {' or '.join(DTYPES)}, not {self.dtype.name}")
        if any(d < 0 for d in self.shape):
            raise ValueError(f"a buffer's shape must not be negative, not {self.shape}")

    @property
    def count(self) -> int:
        """Number of elements."""
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.count * self.dtype.itemsize

    def __repr__(self) -> str:
        return f"Buffer(rank {self.rank}, 0x{self.addr:x}, {self.dtype.name}{list(self.shape)})"


def segment(count: int, size: int, index: int) -> tuple[int, int]:
    """Elements ``[lo, hi)`` of segment ``index`` of ``count`` elements split among ``size`` ranks.

    The first ``count % size`` segments hold one element more than the others, so any count works: fewer
    elements than ranks leaves the last segments empty.
    """
    base, extra = divmod(count, size)
    lo = index * base + min(index, extra)
    return lo, lo + base + (index < extra)


def chunks(lo: int, hi: int, chunk: int) -> list[tuple[int, int]]:
    """``[lo, hi)`` in pieces of at most ``chunk`` elements (none when it is empty)."""
    return [(a, min(a + chunk, hi)) for a in range(lo, hi, chunk)]
