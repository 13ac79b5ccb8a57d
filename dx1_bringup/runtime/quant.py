"""Quantisation arithmetic: real scales to the POSTOP's integer multiplier and shift, and int8 tensors.

DX-1's post-op computes ``sat8(round_half_away((acc + bias) * mult / 2**shift))`` with an unsigned 16-bit
``mult`` and ``shift`` in ``0 .. POSTOP_MAX_SHIFT``.  A quantised linear layer with symmetric per-tensor
scales ``s_x`` (input), ``s_w`` (weights) and ``s_y`` (output) needs the real multiplier
``M = s_x * s_w / s_y`` applied to the int32 accumulator; :func:`requant_multiplier` turns ``M`` into the
pair ``(mult, shift)`` with the largest ``mult`` that fits 16 bits, i.e. the most precise one: for
``2**-31 <= M < 1`` the relative error is below ``2**-16``.  The bias is quantised with scale ``s_x * s_w``,
so it adds to the accumulator directly.

Per-tensor against per-channel on this hardware: one POSTOP command carries one ``(mult, shift)`` and
requantises whole accumulator rows of ``array`` lanes, and the tiling compiler already issues one POSTOP per
array-wide output chunk.  Per-channel scales at the granularity of an output chunk (8 channels on the 8x8
array) would therefore cost nothing extra in commands; a scale per single channel cannot be expressed at
all (a POSTOP writes every lane of a row).  This runtime quantises per tensor.
"""

from __future__ import annotations

import math

import numpy as np

from ..spec import COMMANDS, POSTOP_MAX_SHIFT, Opcode

__all__ = ["MULT_BITS", "INT8_MAX", "requant_multiplier", "symmetric_scale", "quantize", "quantize_bias"]

#: Width of the POSTOP multiplier field.
MULT_BITS = COMMANDS[Opcode.POSTOP].field("mult").width
#: Largest magnitude of a symmetric int8 value (-128 is never produced by quantisation).
INT8_MAX = 127


def requant_multiplier(real: float) -> tuple[int, int]:
    """The POSTOP ``(mult, shift)`` closest to ``real`` (``mult / 2**shift``), with ``mult`` as large as fits.

    Raises
    ------
    ValueError
        ``real`` is not a positive finite number, is too large for a 16-bit multiplier (>= 2**16), or too
        small to be represented with the largest shift (the result would always be 0).
    """
    if not isinstance(real, (int, float)) or not math.isfinite(real) or real <= 0:
        raise ValueError(f"the requantisation multiplier must be a positive finite number, not {real!r}")
    limit = 1 << MULT_BITS
    # Largest shift with round(real * 2**shift) < 2**16.
    shift = min(POSTOP_MAX_SHIFT, max(0, MULT_BITS - 1 - math.floor(math.log2(real))))
    while shift > 0 and round(real * 2.0 ** shift) >= limit:
        shift -= 1
    mult = round(real * 2.0 ** shift)
    if mult >= limit:
        raise ValueError(f"the requantisation multiplier {real!r} is too large: mult/2**shift cannot exceed "
                         f"{limit - 1} (scale the output up)")
    if mult == 0:
        raise ValueError(f"the requantisation multiplier {real!r} is below 2**-{POSTOP_MAX_SHIFT + 1}: every "
                         f"output would be 0 (scale the output down)")
    return int(mult), int(shift)


def symmetric_scale(values: np.ndarray) -> float:
    """Scale of a symmetric int8 quantisation covering ``max |values|`` (1.0 for an all-zero tensor)."""
    peak = float(np.max(np.abs(values))) if np.size(values) else 0.0
    return peak / INT8_MAX if peak > 0 else 1.0


def _round_half_away(x: np.ndarray) -> np.ndarray:
    return np.sign(x) * np.floor(np.abs(x) + 0.5)


def quantize(values: np.ndarray, scale: float) -> np.ndarray:
    """``round(values / scale)``, rounded half away from zero (as the post-op does) and clipped to int8."""
    if not scale > 0:
        raise ValueError(f"scale must be positive, not {scale!r}")
    q = _round_half_away(np.asarray(values, dtype=np.float64) / scale)
    return np.clip(q, -INT8_MAX - 1, INT8_MAX).astype(np.int8)


def quantize_bias(bias: np.ndarray, scale: float) -> np.ndarray:
    """A float bias as int32 at the accumulator's scale ``s_x * s_w``.

    Raises
    ------
    ValueError
        A bias value does not fit in int32 at that scale.
    """
    q = _round_half_away(np.asarray(bias, dtype=np.float64) / scale)
    if q.size and (q.max() > np.iinfo(np.int32).max or q.min() < np.iinfo(np.int32).min):
        raise ValueError(f"a bias value does not fit in int32 at scale {scale!r} (largest |bias| "
                         f"{float(np.max(np.abs(bias)))!r})")
    return q.astype(np.int32)
