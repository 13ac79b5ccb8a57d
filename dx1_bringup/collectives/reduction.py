"""The reductions: int32 sums that wrap, int8 sums requantised the way the POSTOP does.

Every partial sum is int32 (an int8 value is widened first), and int32 addition modulo 2**32 is associative
and commutative, so a sum does not depend on the order its terms meet in: the ring (whose partials travel
rank to rank), the direct algorithm (which adds in rank order) and every chunk size give the same bits.  An
int8 result is requantised once, from the whole int32 sum, with the POSTOP's arithmetic
(:func:`dx1_bringup.model.tile.requantize`: multiply by ``mult``, round half away from zero at ``shift``,
saturate to int8), and the ``(mult, shift)`` of a real scale comes from
:func:`dx1_bringup.runtime.quant.requant_multiplier`, so a device-side reduction later computes the same.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..model.tile import requantize
from ..runtime.quant import requant_multiplier
from ..spec import PostOpParams

__all__ = ["REDOPS", "Reduction", "reduction"]

#: The reductions by name: ``sum`` (int32 wraps; int8 is requantised by ``scale``, default 1: a saturating sum)
#: and ``avg`` (int8 only: ``scale`` is 1/ranks).
REDOPS = ("sum", "avg")


@dataclass(frozen=True)
class Reduction:
    """How partial sums finish: ``post`` is ``None`` for int32 (the wrapped sum is the result)."""

    redop: str
    dtype: np.dtype
    scale: float | None
    post: PostOpParams | None

    @staticmethod
    def widen(values: np.ndarray) -> np.ndarray:
        """``values`` as an int32 partial sum."""
        return values.astype(np.int32)

    @staticmethod
    def add(partial: np.ndarray, values: np.ndarray) -> np.ndarray:
        """``partial + values`` in int32, wrapping."""
        return np.add(partial, values, dtype=np.int32, casting="unsafe")

    def finish(self, partial: np.ndarray) -> np.ndarray:
        """The result of a whole int32 sum: itself for int32, requantised for int8."""
        if self.post is None:
            return partial.astype(np.int32)
        return requantize(partial, 0, self.post)

    def describe(self) -> str:
        return self.redop if self.post is None else f"{self.redop}(x{self.post.mult}>>{self.post.shift})"


def reduction(redop: str, dtype: np.dtype, ranks: int, scale: float | None = None) -> Reduction:
    """The reduction ``redop`` of ``dtype`` over ``ranks`` ranks.

    Raises
    ------
    ValueError
        ``redop`` is unknown, ``avg`` or ``scale`` is asked of int32 (its sum is exact and wraps; there is
        nothing to requantise), or ``scale`` is outside what the POSTOP multiplier holds.
    """
    dtype = np.dtype(dtype)
    if redop not in REDOPS:
        raise ValueError(f"the reduction must be one of {', '.join(REDOPS)}, not {redop!r}")
    if dtype == np.int32:
        if redop != "sum" or scale is not None:
            raise ValueError(f"int32 reduces only by sum, without a scale (its sum wraps modulo 2**32), not "
                             f"{redop!r}" + (f" with scale {scale!r}" if scale is not None else ""))
        return Reduction("sum", dtype, None, None)
    if redop == "avg":
        if scale is not None:
            raise ValueError(f"avg sets the scale itself (1/{ranks}); give sum a scale instead of {scale!r}")
        scale = 1.0 / ranks
    scale = 1.0 if scale is None else scale
    mult, shift = requant_multiplier(scale)
    return Reduction(redop, dtype, scale, PostOpParams(mult, shift))
