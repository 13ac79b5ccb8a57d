"""First-fit allocator of device memory with a coalescing free list."""

from __future__ import annotations

import bisect

from .errors import OutOfDeviceMemory

__all__ = ["DEFAULT_ALIGNMENT", "Allocator"]

#: The alignment a :class:`Allocator` gives by default (bytes).
DEFAULT_ALIGNMENT = 64


def align_up(n: int, align: int) -> int:
    """The smallest multiple of ``align`` (> 0) that is at least ``n`` (the driver's own: it imports no framework)."""
    return -(-n // align) * align


def _check_alignment(align: int) -> None:
    if align <= 0 or align & (align - 1):
        raise ValueError(f"alignment must be a power of two, not {align!r}")


class Allocator:
    """Hands out blocks of the address range ``[base, base + size)``.

    Parameters
    ----------
    base, size:
        The managed range.
    alignment:
        Default alignment of returned addresses (a power of two); every block
        is also rounded up to a multiple of it, so freed space stays usable
        for aligned requests.

    Notes
    -----
    The free list is kept sorted by address and fully coalesced: no two free
    blocks touch, so freeing every allocation always gives back one block of
    ``size`` bytes whatever the order.
    """

    def __init__(self, base: int, size: int, alignment: int = DEFAULT_ALIGNMENT):
        _check_alignment(alignment)
        if base < 0 or size <= 0:
            raise ValueError(f"allocator range must have base >= 0 and size > 0, not base={base}, size={size}")
        self.base = base
        self.size = size
        self.alignment = alignment
        self._free_starts: list[int] = [base]
        self._free_sizes: list[int] = [size]
        self._allocated: dict[int, int] = {}  # address -> block size

    @property
    def used(self) -> int:
        """Bytes in allocated blocks (sizes rounded up to the alignment)."""
        return sum(self._allocated.values())

    @property
    def largest_free(self) -> int:
        """Size of the largest free block (0 when full)."""
        return max(self._free_sizes, default=0)

    def alloc(self, n: int, align: int | None = None) -> int:
        """Allocate ``n`` bytes aligned to ``align`` (default: the allocator's alignment); return the address.

        Raises
        ------
        ValueError
            ``n`` is not positive or ``align`` is not a power of two.
        OutOfDeviceMemory
            No free block holds ``n`` bytes at that alignment.
        """
        if n <= 0:
            raise ValueError(f"allocation size must be positive, not {n!r}")
        align = self.alignment if align is None else align
        _check_alignment(align)
        need = align_up(n, self.alignment)
        for i, (start, size) in enumerate(zip(self._free_starts, self._free_sizes, strict=True)):
            addr = align_up(start, align)
            if addr + need > start + size:
                continue
            del self._free_starts[i], self._free_sizes[i]
            # Give back the padding in front and the rest behind, in address order.
            for piece_start, piece_end in ((start, addr), (addr + need, start + size)):
                if piece_end > piece_start:
                    j = bisect.bisect_left(self._free_starts, piece_start)
                    self._free_starts.insert(j, piece_start)
                    self._free_sizes.insert(j, piece_end - piece_start)
            self._allocated[addr] = need
            return addr
        raise OutOfDeviceMemory(
            f"cannot allocate {n} bytes aligned to {align}: {self.size - self.used} bytes free, "
            f"largest free block {self.largest_free} bytes")

    def free(self, addr: int) -> None:
        """Free the block that :meth:`alloc` returned at ``addr``, merging it with free neighbours.

        Raises
        ------
        ValueError
            ``addr`` is not the address of a live allocation (double free, an
            address inside a block, or outside the managed range).
        """
        size = self._allocated.pop(addr, None)
        if size is None:
            raise ValueError(self._why_not_allocated(addr))
        i = bisect.bisect_left(self._free_starts, addr)
        start, end = addr, addr + size
        if i < len(self._free_starts) and self._free_starts[i] == end:
            end += self._free_sizes[i]
            del self._free_starts[i], self._free_sizes[i]
        if i > 0 and self._free_starts[i - 1] + self._free_sizes[i - 1] == start:
            i -= 1
            start = self._free_starts[i]
            del self._free_starts[i], self._free_sizes[i]
        self._free_starts.insert(i, start)
        self._free_sizes.insert(i, end - start)

    def _why_not_allocated(self, addr: int) -> str:
        if not self.base <= addr < self.base + self.size:
            return (f"cannot free 0x{addr:x}: outside the allocator's range "
                    f"0x{self.base:x}..0x{self.base + self.size - 1:x}")
        for start, size in self._allocated.items():
            if start < addr < start + size:
                return f"cannot free 0x{addr:x}: it is inside the block allocated at 0x{start:x}"
        return f"cannot free 0x{addr:x}: not allocated (double free?)"
