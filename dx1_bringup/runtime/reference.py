"""The numpy reference of GEMM and linear layers: what the device must compute, bit for bit."""

from __future__ import annotations

import numpy as np

from ..model.tile import requantize
from ..spec import PostOpParams

__all__ = ["reference_gemm"]


def reference_gemm(a: np.ndarray, b: np.ndarray, bias: np.ndarray | None = None,
                   post: PostOpParams | None = None) -> np.ndarray:
    """``a @ b (+ bias)`` in plain numpy, as the device computes it.

    Parameters
    ----------
    a, b:
        int8 (M, K) and (K, N).
    bias:
        int32 (N,), or ``None``.
    post:
        With a :class:`~dx1_bringup.model.tile.PostOpParams`: a linear layer, the int64 product
        wrapped to int32 and then :func:`~dx1_bringup.model.tile.requantize` (saturating bias add,
        ReLU, rounding shift, int8).  ``None``: the int32 accumulator, the bias added wrapping as
        the accumulators do.

    Returns
    -------
    ndarray
        (M, N), int8 with ``post``, else int32.
    """
    acc = a.astype(np.int64) @ b.astype(np.int64)
    if post is None:
        if bias is not None:
            acc = acc + bias.astype(np.int64)
        return acc.astype(np.uint32).view(np.int32)
    wrapped = acc.astype(np.uint32).view(np.int32)
    return requantize(wrapped, 0 if bias is None else bias, post)
