"""Operand sizes and zero padding: how a host tensor is laid out for the device."""

from __future__ import annotations

import numpy as np

from ..spec import BUS_BYTES

__all__ = ["ACC_LANE_BYTES", "BUS_BYTES", "pad_operand", "padded"]

#: Bytes per accumulator lane.
ACC_LANE_BYTES = 4


def padded(size: int, array: int) -> int:
    """``size`` rounded up to a multiple of the array size and of the bus width."""
    step = max(array, BUS_BYTES)
    return -(-size // step) * step


def pad_operand(x: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """A zero array of ``shape`` and ``x``'s dtype with ``x`` in its leading corner.

    Raises
    ------
    ValueError
        ``shape`` has another number of dimensions than ``x``, or is smaller in one of them.
    """
    x = np.asarray(x)
    if len(shape) != x.ndim or any(want < have for want, have in zip(shape, x.shape, strict=True)):
        raise ValueError(f"an operand of shape {x.shape} cannot be padded to {tuple(shape)}: the padded shape "
                         "must have as many dimensions and be at least as large in each")
    out = np.zeros(shape, dtype=x.dtype)
    out[tuple(slice(0, n) for n in x.shape)] = x
    return out
