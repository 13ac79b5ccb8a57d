"""The operands of ``dx1 gemm M K N --seed S``, shared with ``dx1 bench`` and ``dx1 predict --device``."""

from __future__ import annotations

import numpy as np

__all__ = ["gemm_problem"]


def _calibrate(acc: np.ndarray) -> tuple[int, int]:
    """(mult, shift) scaling ``acc`` to a spread of about +-40: the int8 range is used but rarely saturated."""
    spread = max(float(np.abs(acc).std()), 1.0)
    scale = 40.0 / spread
    # The largest shift whose multiplier still fits 16 bits keeps the most precision.
    shift = 47
    while shift and round(scale * (1 << shift)) >= 1 << 16:
        shift -= 1
    return max(1, min(round(scale * (1 << shift)), (1 << 16) - 1)), shift


def gemm_problem(m: int, k: int, n: int, seed: int, post: bool = True):
    """The operands of ``dx1 gemm M K N --seed S``: int8 A and B, int32 bias and the post-op (``None`` if not ``post``).

    Returns
    -------
    (a, b, bias, post)
    """
    from ..model.tile import PostOpParams
    from ..runtime import reference

    rng = np.random.default_rng(seed)
    a = rng.integers(-128, 128, (m, k), dtype=np.int8)
    b = rng.integers(-128, 128, (k, n), dtype=np.int8)
    # Products of uniform int8 have a standard deviation near 5500; a bias of the same order as the sums shifts
    # the output visibly without swamping it.
    bias_span = int(5500 * np.sqrt(k))
    bias = rng.integers(-bias_span, bias_span + 1, n).astype(np.int32)
    if not post:
        return a, b, bias, None
    mult, shift = _calibrate(reference.reference_gemm(a, b, bias))
    return a, b, bias, PostOpParams(mult, shift, relu=True)
