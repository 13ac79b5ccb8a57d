"""Operands: random int8 GEMM operands, the problem ``dx1 gemm`` runs, and padding a host tensor for the device."""

from __future__ import annotations

import numpy as np

from ..spec import BUS_BYTES, PostOpParams, align_up
from .quant import requant_multiplier
from .reference import reference_gemm

__all__ = ["ACC_LANE_BYTES", "BUS_BYTES", "OUTPUT_SPREAD", "calibrate", "gemm_problem", "pad_operand", "padded",
           "random_operands"]

#: Bytes per accumulator lane.
ACC_LANE_BYTES = 4


def padded(size: int, array: int) -> int:
    """``size`` rounded up to a multiple of the array size and of the bus width."""
    step = max(array, BUS_BYTES)
    return align_up(size, step)


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


#: The standard deviation :func:`calibrate` scales outputs to: the int8 range is used but rarely saturated.
OUTPUT_SPREAD = 40.0


def random_operands(rng: np.random.Generator, m: int, k: int, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Random GEMM operands, ``a`` (``m x k``) then ``b`` (``k x n``), uniform over the whole int8 range.

    Every random GEMM of the framework (``dx1 gemm``, bring-up, the benches, the tile demo) draws them here.
    """
    a = rng.integers(-128, 128, (m, k), dtype=np.int8)
    return a, rng.integers(-128, 128, (k, n), dtype=np.int8)


def calibrate(acc: np.ndarray) -> PostOpParams:
    """The post-op (ReLU on) scaling the accumulators ``acc`` to a spread of about :data:`OUTPUT_SPREAD`.

    The multiplier and shift come from :func:`~dx1_bringup.runtime.quant.requant_multiplier`: the
    largest shift whose multiplier fits the POSTOP field, the most precise pair.
    """
    spread = max(float(np.abs(acc).std()), 1.0)
    mult, shift = requant_multiplier(OUTPUT_SPREAD / spread)
    return PostOpParams(mult, shift, relu=True)


def gemm_problem(m: int, k: int, n: int, seed: int,
                 post: bool = True) -> tuple[np.ndarray, np.ndarray, np.ndarray, PostOpParams | None]:
    """The operands of ``dx1 gemm M K N --seed S``: int8 A and B, int32 bias and the post-op (``None`` if not ``post``).

    Returns
    -------
    (a, b, bias, post)
        ``a`` is ``m x k``, ``b`` ``k x n``, ``bias`` ``n`` values; ``post`` from :func:`calibrate`.
    """
    rng = np.random.default_rng(seed)
    a, b = random_operands(rng, m, k, n)
    # Products of uniform int8 have a standard deviation near 5500; a bias of the same order as the sums shifts
    # the output visibly without swamping it.
    bias_span = int(5500 * np.sqrt(k))
    bias = rng.integers(-bias_span, bias_span + 1, n).astype(np.int32)
    if not post:
        return a, b, bias, None
    return a, b, bias, calibrate(reference_gemm(a, b, bias))
