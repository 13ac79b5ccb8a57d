"""The POSTOP of an int32 matrix in device memory: ``out = requant(x + bias)``, int8, every tile a share of the rows.

A row-parallel linear layer's partial accumulators are summed across chips (an all-reduce of int32) and only
then requantised, so the result equals the whole product's fused POSTOP bit for bit.  Per tile and block of
rows: a LOAD of the int32 rows into the accumulator buffer (chunk ``j`` row ``i`` at ``j * mt + i``, as the
tiling compiler keeps a block), the bias rows once per tile, one POSTOP per output chunk into the same rows
of the scratchpad and a STORE of the int8 block.
"""

from __future__ import annotations

from ..spec import PostOpParams
from .commands import CommandStream
from .operands import padded

__all__ = ["compile_requantize"]


def compile_requantize(rows: int, cols: int, *, array: int, spm_rows: int, acc_rows: int, mem_bytes: int,
                       x_addr: int, x_stride: int, out_addr: int, out_stride: int, bias_addr: int | None,
                       post: PostOpParams, tiles: int, what: str = "requantize") -> list[list[bytes]]:
    """Per tile, the commands that requantise ``rows x cols`` int32 at ``x_addr`` into int8 at ``out_addr``.

    ``x_stride`` and ``out_stride`` are the row strides in bytes; ``bias_addr`` is ``padded(cols)`` int32 (or
    ``None``).  The rows are split between the first ``tiles`` tiles, sizes differing by at most one.

    Raises
    ------
    ValueError
        The row is too wide for the accumulator buffer (one row of every chunk and its bias row must fit).
    """
    nct = padded(cols, array) // array
    bias_rows = nct if bias_addr is not None else 0
    mt = min(rows, (acc_rows - bias_rows) // nct, spm_rows // nct)
    if mt < 1:
        raise ValueError(f"{what}: a row of {cols} columns ({nct} chunks) and its bias need {nct + bias_rows} "
                         f"accumulator rows; the tile has {acc_rows}")
    size, extra = divmod(rows, tiles)
    streams, start = [], 0
    for t in range(tiles):
        share = size + (t < extra)
        s = CommandStream(array=array, spm_rows=spm_rows, acc_rows=acc_rows, mem_bytes=mem_bytes, tile=t, what=what)
        bias_row = acc_rows - bias_rows
        if bias_addr is not None and share:
            s.load(mem_addr=bias_addr, mem_stride=0, local_addr=bias_row, rows=1, cols=nct, local_row_stride=1,
                   local_col_stride=1, acc=True)
        for r0 in range(start, start + share, mt):
            m = min(mt, start + share - r0)
            s.load(mem_addr=x_addr + r0 * x_stride, mem_stride=x_stride, local_addr=0, rows=m, cols=nct,
                   local_row_stride=1, local_col_stride=m, acc=True)
            for j in range(nct):
                s.postop(src_addr=j * m, dst_addr=j * m, rows=m, post=post,
                         bias_addr=None if bias_addr is None else bias_row + j)
            s.store(mem_addr=out_addr + r0 * out_stride, mem_stride=out_stride, local_addr=0, rows=m, cols=nct,
                    local_row_stride=1, local_col_stride=m)
        streams.append(s.commands)
        start += share
    return streams

