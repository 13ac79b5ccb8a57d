"""The vector unit's integer arithmetic, lane by lane, as the int reference of every kernel computes it.

Written from the spec (``spec/vector.py``), independently of the golden model, in numpy int64: each
kernel's reference (:mod:`.kernels`) is a sequence of these steps with the same saturations as the
commands it lowers to, so a device result equals it bit for bit and the golden model checks the lowering.
"""

from __future__ import annotations

import numpy as np

from ...spec import TABLE_ENTRIES

__all__ = ["INT32_MAX", "round_shift", "sat8", "sat32", "wrap32", "lut", "recip", "isqrt"]

INT32_MAX = (1 << 31) - 1


def round_shift(p: np.ndarray, shift: int) -> np.ndarray:
    """``p / 2**shift`` rounded half away from zero (the POSTOP's and MUL's rounding)."""
    p = np.asarray(p, dtype=np.int64)
    if shift == 0:
        return p
    return (p + (1 << (shift - 1)) - (p < 0)) >> shift


def sat8(x: np.ndarray) -> np.ndarray:
    """Saturated to a scratchpad lane (int8), kept as int64."""
    return np.clip(np.asarray(x, dtype=np.int64), -128, 127)


def sat32(x: np.ndarray) -> np.ndarray:
    """Saturated to an accumulator lane (int32), kept as int64."""
    return np.clip(np.asarray(x, dtype=np.int64), -(1 << 31), INT32_MAX)


def wrap32(x: np.ndarray) -> np.ndarray:
    """Modulo 2**32, as two's complement (a reduction's wrapping sum), kept as int64."""
    return ((np.asarray(x, dtype=np.int64) + (1 << 31)) & 0xFFFF_FFFF) - (1 << 31)


def lut(table: np.ndarray, a: np.ndarray, offset: int, shift: int) -> np.ndarray:
    """The LUT vop: ``table`` at ``(a - offset) >> shift``, interpolated linearly; the ends saturate."""
    t = np.asarray(table, dtype=np.int64)
    if t.shape != (TABLE_ENTRIES,):
        raise ValueError(f"a lookup table has {TABLE_ENTRIES} entries, not {t.shape}")
    u = np.asarray(a, dtype=np.int64) - offset
    i = u >> shift
    frac = u - (i << shift)
    j = np.clip(i, 0, TABLE_ENTRIES - 2)
    inside = t[j] + round_shift((t[j + 1] - t[j]) * frac, shift)
    return np.where(i < 0, t[0], np.where(i >= TABLE_ENTRIES - 1, t[-1], inside))


def recip(a: np.ndarray, shift: int) -> np.ndarray:
    """The RECIP vop: ``floor(2**shift / a)`` for ``a >= 1``, at most 2**31 - 1 (also for ``a <= 0``)."""
    a = np.asarray(a, dtype=np.int64)
    return np.where(a >= 1, np.minimum((1 << shift) // np.maximum(a, 1), INT32_MAX), INT32_MAX)


def isqrt(a: np.ndarray) -> np.ndarray:
    """The ISQRT vop: ``floor(sqrt(a))`` for ``a >= 0``, 0 below."""
    a = np.maximum(np.asarray(a, dtype=np.int64), 0)
    r = np.floor(np.sqrt(a.astype(np.float64))).astype(np.int64)
    r = np.where(r * r > a, r - 1, r)
    return np.where((r + 1) * (r + 1) <= a, r + 1, r)
