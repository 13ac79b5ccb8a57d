"""Rounding sizes and addresses up: the one definition every layout above the spec uses.

Register blocks, DMA rows, operand padding and allocations all round a size up to a multiple of
some alignment; :func:`align_up` and :func:`ceil_div` are that arithmetic, written once.  (The
driver, which imports nothing of the framework, has its own in ``dx1_driver.allocator``.)
"""

from __future__ import annotations

__all__ = ["align_up", "ceil_div"]


def ceil_div(a: int, b: int) -> int:
    """``a / b`` rounded up, for ``b > 0`` (numpy integer arrays for ``a`` work alike)."""
    return -(-a // b)


def align_up(n: int, align: int) -> int:
    """The smallest multiple of ``align`` (> 0) that is at least ``n``."""
    return ceil_div(n, align) * align
