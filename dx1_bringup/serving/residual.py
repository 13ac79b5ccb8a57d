"""The residual add of the served model as a vector kernel: ``x' = q(x s_x + y s_y)`` in integers.

The residual stream is int8 at a calibrated scale at each point (the input of the next layer norm), and each
add requantises: ``x' = sat8(round((x Mx + y My) / 2**SHIFT))`` with ``Mx = round(s_x / s_out 2**SHIFT)`` and
``My = round(s_y / s_out 2**SHIFT)``.  Its input is one matrix ``[x | y]`` (the stream in the left half of
each row, the block's output beside it, where the GEMM writes it), so it is a one-input
:class:`~dx1_bringup.runtime.kernels.Kernel` like the others::

    u = x Mx            MUL (a row of Mx)     -> acc
    v = y My            MUL (a row of My)     -> acc
    w = u + v           ADD                   -> acc
    x' = round(w / 2**SHIFT)   SHR            -> spm, int8
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..runtime.commands import CommandStream, LocalRows
from ..runtime.kernels import Consts, Kernel, Mem
from ..runtime.kernels.base import LocalAlloc, chunks
from ..runtime.kernels.intmath import INT32_MAX, round_shift, sat8, sat32
from ..spec import VectorOp

__all__ = ["ResidualAdd"]

#: The multipliers' fraction bits: a scale ratio is kept to 2**-16.
SHIFT = 16


@dataclass(eq=False)
class ResidualAdd(Kernel):
    """``[x | y]`` (int8, ``x`` at ``s_x``, ``y`` at ``s_y``) to ``x + y`` at ``s_out``, int8."""

    s_x: float
    s_y: float
    s_out: float

    kind = "residual_add"

    def __post_init__(self) -> None:
        self.mx, self.my = (round(s / self.s_out * 2 ** SHIFT) for s in (self.s_x, self.s_y))
        if max(self.mx, self.my) * 128 * 2 > INT32_MAX or min(self.mx, self.my) < 1:
            raise ValueError(f"residual_add: the scale ratios {self.s_x / self.s_out:.4g} and "
                             f"{self.s_y / self.s_out:.4g} do not fit an int32 lane at {SHIFT} fraction bits")

    def out_shape(self, rows: int, cols: int) -> tuple[int, int]:
        return rows, cols // 2

    def check(self, rows: int, cols: int, array: int) -> None:
        if cols % (2 * array):
            raise ValueError(f"residual_add: the input's {cols} columns must be two halves of whole local rows "
                             f"(a multiple of {2 * array})")

    def reference(self, x: np.ndarray) -> np.ndarray:
        half = x.shape[1] // 2
        x = x.astype(np.int64)
        w = sat32(sat32(x[:, :half] * self.mx) + sat32(x[:, half:] * self.my))
        return sat8(round_shift(w, SHIFT)).astype(np.int8)

    def consts(self, rows: int, cols: int, array: int) -> Consts:
        return Consts(acc=np.array([[self.mx] * array, [self.my] * array], np.int32))

    def lower(self, stream: CommandStream, x: Mem, out: Mem, rows: tuple[int, int], cols: int, consts: Consts,
              consts_addr: int) -> None:
        nl = cols // 2 // stream.array
        alloc = LocalAlloc(stream)
        _, c = alloc.load_consts(consts, consts_addr)
        size, blocks = chunks(*rows, alloc, 3 * nl, 3 * nl)
        xs, ys = alloc.spm(2 * size * nl), alloc.spm(size * nl)
        u, v, w = (alloc.acc(size * nl) for _ in range(3))

        def acc(addr: int, row: int = nl, col: int = 1) -> LocalRows:
            return LocalRows(True, addr, row, col)

        for r0, m in blocks:
            stream.load(mem_addr=x.row(r0), mem_stride=x.stride, local_addr=xs, rows=m, cols=2 * nl,
                        local_row_stride=2 * nl, local_col_stride=1)
            stream.vector(VectorOp.MUL, a=LocalRows(False, xs, 2 * nl, 1), b=acc(c, 0, 0), d=acc(u), rows=m, cols=nl)
            stream.vector(VectorOp.MUL, a=LocalRows(False, xs + nl, 2 * nl, 1), b=acc(c + 1, 0, 0), d=acc(v),
                          rows=m, cols=nl)
            stream.vector(VectorOp.ADD, a=acc(u), b=acc(v), d=acc(w), rows=m, cols=nl)
            stream.vector(VectorOp.SHR, a=acc(w), d=LocalRows(False, ys, nl, 1), rows=m, cols=nl, shift=SHIFT)
            stream.store(mem_addr=out.row(r0), mem_stride=out.stride, local_addr=ys, rows=m, cols=nl,
                         local_row_stride=nl, local_col_stride=1)
