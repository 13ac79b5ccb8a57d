"""Lookup tables for the LUT vop (GELU, SiLU, exp), and their accuracy over every input they can be fed.

A :class:`Table` is the 257 int16 entries the TABLE command loads, with the LUT vop's index offset
(``imm``) and shift: entry ``j`` holds ``fn(x_j)`` for ``x_j = offset + j * 2**shift`` (in input units), so
an int8 input with ``shift = 0`` reads one entry exactly and a wider input interpolates linearly between
two.  :func:`table_accuracy` measures, exhaustively, the largest error in output LSBs against the float
function, overall and per region of the real input (near zero, the knee, the tails).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ...spec import TABLE_ENTRIES, table_rows
from .intmath import lut

__all__ = ["FUNCTIONS", "Table", "sampled_table", "exp_table", "map_table", "TableAccuracy", "table_accuracy",
           "REGIONS"]

_INT16 = (-(1 << 15), (1 << 15) - 1)


def _gelu(x: np.ndarray) -> np.ndarray:
    return 0.5 * x * (1.0 + np.vectorize(math.erf)(x / math.sqrt(2.0)))


def _silu(x: np.ndarray) -> np.ndarray:
    return x / (1.0 + np.exp(-x))


#: The functions a table approximates, in float64 (GELU is the exact, erf form: PyTorch's default).
FUNCTIONS: dict[str, Callable[[np.ndarray], np.ndarray]] = {"gelu": _gelu, "silu": _silu, "exp": np.exp}


@dataclass(frozen=True)
class Table:
    """A LUT vop's table: ``entries`` (int16), index ``offset`` (the vop's ``imm``) and ``shift``."""

    entries: np.ndarray
    offset: int
    shift: int

    def __post_init__(self) -> None:
        if self.entries.dtype != np.int16 or self.entries.shape != (TABLE_ENTRIES,):
            raise ValueError(f"a table has {TABLE_ENTRIES} int16 entries, not {self.entries.dtype} "
                             f"{self.entries.shape}")

    def __call__(self, a: np.ndarray) -> np.ndarray:
        """The LUT vop's value at every lane of ``a`` (int64, before D's saturation)."""
        return lut(self.entries, a, self.offset, self.shift)

    def rows(self, array: int) -> np.ndarray:
        """The scratchpad rows the TABLE command reads (``array`` int8 lanes, entries little-endian)."""
        n = table_rows(array)
        raw = np.zeros(n * array // 2, dtype="<i2")
        raw[:TABLE_ENTRIES] = self.entries
        return raw.view(np.int8).reshape(n, array)


def sampled_table(fn: Callable[[np.ndarray], np.ndarray], s_in: float, s_out: float, offset: int,
                  shift: int) -> Table:
    """Entry ``j`` = ``round(fn((offset + j * 2**shift) * s_in) / s_out)``, saturated to int16."""
    x = (offset + np.arange(TABLE_ENTRIES, dtype=np.float64) * (1 << shift)) * s_in
    entries = np.clip(np.round(fn(x) / s_out), *_INT16).astype(np.int16)
    return Table(entries, offset, shift)


def map_table(name: str, s_in: float, s_out: float, bits: int = 8) -> Table:
    """The table of ``FUNCTIONS[name]`` for a signed ``bits``-bit input at scale ``s_in``, output scale ``s_out``.

    ``bits`` 8: one entry per input (exact, shift 0); 16: 256 intervals of 256 inputs (shift 8).
    """
    if bits not in (8, 16):
        raise ValueError(f"a mapping table takes 8- or 16-bit inputs, not {bits!r}")
    if name not in FUNCTIONS:
        raise ValueError(f"no table function {name!r}; there are {', '.join(FUNCTIONS)}")
    return sampled_table(FUNCTIONS[name], s_in, s_out, -(1 << (bits - 1)), bits - 8)


def exp_table(s_in: float, one: int = _INT16[1], bits: int = 8) -> Table:
    """``one * exp(x * s_in)`` for the non-positive differences ``x`` of a softmax row (``x >= -(2**bits - 1)``).

    Entry 0 (``x = -2**bits``, which no real difference reaches) is 0: a masked lane, pushed far below
    every real one, reads it and weighs nothing.
    """
    table = sampled_table(np.exp, s_in, 1.0 / one, -(1 << bits), bits - 8)
    entries = table.entries.copy()
    entries[0] = 0
    return Table(entries, table.offset, table.shift)


#: Regions of the real input |x| where the error is reported: near zero, the knee, the tails.
REGIONS = (("near zero", 0.0, 0.25), ("knee", 0.25, 3.0), ("tails", 3.0, math.inf))


@dataclass(frozen=True)
class TableAccuracy:
    """Exhaustive error of a table in output LSBs: the largest, where it occurs, and the largest per region."""

    name: str
    bits: int
    inputs: int
    max_error: float
    worst_input: float
    by_region: dict[str, float]


def table_accuracy(name: str, table: Table, s_in: float, s_out: float, inputs: np.ndarray,
                   out_range: tuple[int, int]) -> TableAccuracy:
    """The table's values at every one of ``inputs`` against ``FUNCTIONS[name]``, in LSBs of ``s_out``.

    The ideal value is the float function saturated to ``out_range`` (the destination's lane type), so
    saturation is not counted as error; the table's rounding and interpolation are.
    """
    got = np.clip(table(inputs), *out_range).astype(np.float64)
    real = inputs.astype(np.float64) * s_in
    ideal = np.clip(FUNCTIONS[name](real) / s_out, *out_range)
    err = np.abs(got - ideal)
    worst = int(np.argmax(err))
    by_region = {}
    for region, lo, hi in REGIONS:
        inside = (np.abs(real) >= lo) & (np.abs(real) < hi)
        by_region[region] = float(err[inside].max()) if inside.any() else 0.0
    bits = int(math.ceil(math.log2(inputs.max() - inputs.min() + 1)))
    return TableAccuracy(name, bits, int(inputs.size), float(err[worst]), float(real[worst]), by_region)
