"""What every vector kernel is: an int reference and its lowering to one tile's commands.

A :class:`Kernel` maps one int8 matrix (a view of a value in device memory) to another.  It is written
twice, from one description: :meth:`Kernel.reference` is the integer math in numpy int64 (:mod:`.intmath`),
step by step with the saturation of each step's destination; :meth:`Kernel.lower` emits the LOAD,
VECTOR, TABLE, TRANSPOSE and STORE commands that compute the same steps on a tile, for a block of the
input's rows.  Constants (tables, scale rows, masks) are a :class:`Consts` that the graph session keeps
resident in device memory beside the weights.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field

import numpy as np

from ...spec import align_up, ceil_div
from ..commands import CommandStream
from ..operands import ACC_LANE_BYTES, BUS_BYTES

__all__ = ["Mem", "Consts", "Kernel", "LocalAlloc", "chunks", "split_rows"]


@dataclass(frozen=True)
class Mem:
    """A matrix in device memory: the address of its first element and the bytes between its rows."""

    addr: int
    stride: int

    def row(self, r: int, elem_bytes: int = 1, col: int = 0) -> int:
        return self.addr + r * self.stride + col * elem_bytes


@dataclass
class Consts:
    """A kernel's constant local rows: ``spm`` (int8) and ``acc`` (int32) rows loaded whole, and ``rowwise``
    accumulator rows (``rowwise_rows`` local rows per input row) loaded with the input's rows."""

    spm: np.ndarray = field(default_factory=lambda: np.zeros((0, 1), np.int8))
    acc: np.ndarray = field(default_factory=lambda: np.zeros((0, 1), np.int32))
    rowwise: np.ndarray = field(default_factory=lambda: np.zeros((0, 1), np.int32))
    rowwise_rows: int = 0

    def _parts(self) -> list[np.ndarray]:
        return [self.spm, self.acc, self.rowwise]

    def offsets(self) -> tuple[int, int, int, int]:
        """Byte offsets of the spm, acc and rowwise parts in the blob, and the blob's size."""
        out, at = [], 0
        for part in self._parts():
            out.append(at)
            at += align_up(part.nbytes, BUS_BYTES)
        return (*out, max(at, BUS_BYTES))

    def blob(self) -> np.ndarray:
        """The bytes to put in device memory (parts at :meth:`offsets`)."""
        *offsets, size = self.offsets()
        data = np.zeros(size, np.uint8)
        for part, at in zip(self._parts(), offsets, strict=True):
            data[at:at + part.nbytes] = np.ascontiguousarray(part).view(np.uint8).reshape(-1)
        return data


class LocalAlloc:
    """Bump allocation of a tile's scratchpad and accumulator rows for one kernel's program."""

    def __init__(self, stream: CommandStream):
        self.stream = stream
        self.spm_next = 0
        self.acc_next = 0

    def spm(self, rows: int) -> int:
        at, self.spm_next = self.spm_next, self.spm_next + rows
        if self.spm_next > self.stream.spm_rows:
            raise ValueError(f"{self.stream.what}: needs {self.spm_next} scratchpad rows; the tile has "
                             f"{self.stream.spm_rows}")
        return at

    def acc(self, rows: int) -> int:
        at, self.acc_next = self.acc_next, self.acc_next + rows
        if self.acc_next > self.stream.acc_rows:
            raise ValueError(f"{self.stream.what}: needs {self.acc_next} accumulator rows; the tile has "
                             f"{self.stream.acc_rows}")
        return at

    def load_consts(self, consts: Consts, addr: int) -> tuple[int, int]:
        """LOAD the kernel's whole spm and acc constants; their first local rows."""
        s = self.stream
        n = s.array
        spm_at, acc_at, _, _ = consts.offsets()
        spm = self.spm(consts.spm.shape[0])
        acc = self.acc(consts.acc.shape[0])
        if consts.spm.shape[0]:
            s.load(mem_addr=addr + spm_at, mem_stride=n * consts.spm.shape[0], local_addr=spm, rows=1,
                   cols=consts.spm.shape[0], local_row_stride=0, local_col_stride=1)
        if consts.acc.shape[0]:
            s.load(mem_addr=addr + acc_at, mem_stride=n * ACC_LANE_BYTES * consts.acc.shape[0], local_addr=acc,
                   rows=1, cols=consts.acc.shape[0], local_row_stride=0, local_col_stride=1, acc=True)
        return spm, acc


def split_rows(rows: int, parts: int, unit: int = 1) -> list[tuple[int, int]]:
    """``rows`` cut into at most ``parts`` contiguous ``(first, count)`` blocks of whole ``unit`` s."""
    units = ceil_div(rows, unit)
    each = ceil_div(units, parts)
    return [(u * unit, min(rows, (u + each) * unit) - u * unit) for u in range(0, units, each)]


class Kernel(ABC):
    """An int8 matrix to int8 matrix function, as an int reference and as a tile's commands.

    Subclasses set :attr:`kind` and implement :meth:`reference` and :meth:`lower` (and :meth:`consts`);
    shapes are checked by :meth:`check` (columns in whole local rows, since lanes are reduced together).
    """

    kind = "kernel"

    def out_shape(self, rows: int, cols: int) -> tuple[int, int]:
        return rows, cols

    def check(self, rows: int, cols: int, array: int) -> None:
        if cols % array:
            raise ValueError(f"{self.kind}: the input's {cols} columns must be a multiple of the array size "
                             f"{array} (whole local rows)")

    @abstractmethod
    def reference(self, x: np.ndarray) -> np.ndarray:
        """The int8 output for the int8 input ``x``, by the kernel's integer math."""

    def consts(self, rows: int, cols: int, array: int) -> Consts:
        return Consts()

    def split(self, rows: int, cols: int, tiles: int, array: int) -> list[tuple[int, int]]:
        """Each tile's block of the input's rows."""
        return split_rows(rows, tiles)

    @abstractmethod
    def lower(self, stream: CommandStream, x: Mem, out: Mem, rows: tuple[int, int], cols: int, consts: Consts,
              consts_addr: int) -> None:
        """The commands that compute the output for input rows ``rows = (first, count)`` on one tile."""

    def describe(self, x: str) -> str:
        """The kernel applied to ``x``, for a plan: ``softmax(scores, 2 blocks a row)``."""
        return f"{self.kind}({x})"


def chunks(first: int, count: int, alloc: LocalAlloc, spm_per_row: int, acc_per_row: int,
           unit: int = 1) -> tuple[int, list[tuple[int, int]]]:
    """The most rows (whole ``unit`` s) whose local rows fit what ``alloc`` has left; the blocks of that size."""
    s = alloc.stream
    fit = [(s.spm_rows - alloc.spm_next) // spm_per_row if spm_per_row else count,
           (s.acc_rows - alloc.acc_next) // acc_per_row if acc_per_row else count]
    size = min(count, *fit) // unit * unit
    if size < 1:
        raise ValueError(f"{s.what}: one row needs {spm_per_row} scratchpad and {acc_per_row} accumulator rows; "
                         f"the tile has {s.spm_rows - alloc.spm_next} and {s.acc_rows - alloc.acc_next} left")
    return size, [(r, min(size, first + count - r)) for r in range(first, first + count, size)]
