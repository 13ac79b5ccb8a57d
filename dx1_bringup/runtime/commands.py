"""The command-stream builder: one tile's commands, each checked against the tile's sizes, encoded by the spec.

Every planner (the tiling compiler in :mod:`.gemm`, the single-tile layer in
:mod:`.tile_plan`) emits its commands through :class:`CommandStream`, so range
checks, tag numbering, the bookkeeping of bytes moved and MACs issued, and the
encoding (:func:`~dx1_bringup.spec.pack_command`) exist once.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..spec import HEADER, VECTOR_OPS, Opcode, PostOpParams, TileConfig, VectorOp, pack_command, table_rows, unsigned32
from .operands import ACC_LANE_BYTES, BUS_BYTES

__all__ = ["CommandStream", "LocalRows"]

_TAG_MASK = (1 << next(f.width for f in HEADER if f.name == "tag")) - 1


class CommandStream:
    """The commands of one tile, in issue order; tags count up from 0, modulo the tag field.

    Parameters
    ----------
    array, spm_rows, acc_rows:
        The tile's array size and local memory depths.
    mem_bytes:
        Device memory size, for LOAD and STORE; ``None`` for a stream with no DMA.
    tile:
        The tile's index, for error messages.
    what:
        What the stream belongs to, for error messages (``"GEMM plan"``).

    Attributes
    ----------
    commands:
        The encoded commands.
    load_bytes, store_bytes:
        Bytes the LOADs and STOREs move.
    array_macs:
        Multiply-accumulates the GEMMs issue (``array**2`` per streamed row, padding included).
    """

    def __init__(self, *, array: int, spm_rows: int, acc_rows: int, mem_bytes: int | None = None, tile: int = 0,
                 what: str = "command stream"):
        self.array, self.spm_rows, self.acc_rows, self.mem_bytes = array, spm_rows, acc_rows, mem_bytes
        self.tile = tile
        self.what = what
        self.commands: list[bytes] = []
        self.load_bytes = 0
        self.store_bytes = 0
        self.array_macs = 0

    @classmethod
    def for_tile(cls, config: TileConfig, **kwargs) -> CommandStream:
        """A stream for a tile of generator parameters ``config`` (no device memory unless ``mem_bytes``)."""
        return cls(array=config.array, spm_rows=config.spm_rows, acc_rows=config.acc_rows, **kwargs)

    def _tag(self) -> int:
        return len(self.commands) & _TAG_MASK

    def _local(self, what: str, acc: bool, first: int, last: int) -> None:
        depth, name = (self.acc_rows, "accumulator") if acc else (self.spm_rows, "scratchpad")
        if not 0 <= first <= last < depth:
            raise ValueError(f"{self.what}: tile {self.tile} command {len(self.commands)} ({what}) touches "
                             f"{name} rows {first}..{last}, outside the {depth} rows the device has")

    def _move(self, opcode: Opcode, *, mem_addr: int, mem_stride: int, local_addr: int, rows: int, cols: int,
              local_row_stride: int, local_col_stride: int, acc: bool) -> None:
        what = opcode.name
        self._local(what, acc, local_addr, local_addr + (rows - 1) * local_row_stride
                    + (cols - 1) * local_col_stride)
        row_bytes = self.array * (ACC_LANE_BYTES if acc else 1)
        end = mem_addr + (rows - 1) * mem_stride + cols * row_bytes
        mem = 0 if self.mem_bytes is None else self.mem_bytes
        if mem_addr % BUS_BYTES or mem_stride % BUS_BYTES or end > mem:
            raise ValueError(f"{self.what}: tile {self.tile} command {len(self.commands)} ({what}) moves device "
                             f"memory 0x{mem_addr:x}..0x{end:x} with stride {mem_stride}: not {BUS_BYTES}-byte "
                             f"aligned or past the {mem} bytes of device memory")
        self.commands.append(pack_command(
            opcode, tag=self._tag(), flags={"acc": acc}, mem_addr=mem_addr, mem_stride=mem_stride,
            local_addr=local_addr, rows=rows, cols=cols, local_row_stride=local_row_stride,
            local_col_stride=local_col_stride))
        if opcode is Opcode.LOAD:
            self.load_bytes += rows * cols * row_bytes
        else:
            self.store_bytes += rows * cols * row_bytes

    def load(self, *, mem_addr: int, mem_stride: int, local_addr: int, rows: int, cols: int,
             local_row_stride: int, local_col_stride: int, acc: bool = False) -> None:
        """A 2-D LOAD into the scratchpad (or, with ``acc``, the accumulator buffer); fields as the spec's."""
        self._move(Opcode.LOAD, mem_addr=mem_addr, mem_stride=mem_stride, local_addr=local_addr, rows=rows,
                   cols=cols, local_row_stride=local_row_stride, local_col_stride=local_col_stride, acc=acc)

    def store(self, *, mem_addr: int, mem_stride: int, local_addr: int, rows: int, cols: int,
              local_row_stride: int, local_col_stride: int, acc: bool = False) -> None:
        """A 2-D STORE from the scratchpad (or, with ``acc``, the accumulator buffer); fields as the spec's."""
        self._move(Opcode.STORE, mem_addr=mem_addr, mem_stride=mem_stride, local_addr=local_addr, rows=rows,
                   cols=cols, local_row_stride=local_row_stride, local_col_stride=local_col_stride, acc=acc)

    def gemm(self, *, a_addr: int, b_addr: int, c_addr: int, m: int, k_chunks: int, accumulate: bool = False) -> None:
        """One GEMM: ``k_chunks`` reduction chunks of ``m`` activation rows into accumulator rows ``c_addr``."""
        n = self.array
        self._local("GEMM activations", False, a_addr, a_addr + k_chunks * m - 1)
        self._local("GEMM weights", False, b_addr, b_addr + k_chunks * n - 1)
        self._local("GEMM output", True, c_addr, c_addr + m - 1)
        self.commands.append(pack_command(Opcode.GEMM, tag=self._tag(), flags={"accumulate": accumulate},
                                          a_addr=a_addr, b_addr=b_addr, c_addr=c_addr, m=m, k_chunks=k_chunks))
        self.array_macs += m * k_chunks * n * n

    def postop(self, *, src_addr: int, dst_addr: int, rows: int, post: PostOpParams, bias_addr: int | None) -> None:
        """One POSTOP: ``rows`` accumulator rows requantised by ``post`` (plus the bias row, if any) to int8."""
        if not isinstance(post, PostOpParams):
            raise TypeError(f"post must be a PostOpParams, not {post!r}")
        self._local("POSTOP source", True, src_addr, src_addr + rows - 1)
        self._local("POSTOP destination", False, dst_addr, dst_addr + rows - 1)
        if bias_addr is not None:
            self._local("POSTOP bias", True, bias_addr, bias_addr)
        self.commands.append(pack_command(
            Opcode.POSTOP, tag=self._tag(), flags={"relu": post.relu, "bias": bias_addr is not None},
            src_addr=src_addr, dst_addr=dst_addr, rows=rows, bias_addr=bias_addr or 0, mult=post.mult,
            shift=post.shift))

    # -- the vector unit ---------------------------------------------------------------------------

    def vector(self, op: VectorOp, *, a: LocalRows, d: LocalRows, rows: int, cols: int, b: LocalRows | None = None,
               shift: int = 0, imm: int = 0, imm2: int = 0) -> None:
        """One VECTOR command: ``op`` over ``rows`` outer rows of ``cols`` local rows (spec/vector.py).

        ``a``, ``b`` and ``d`` say where each operand is (memory, first row, outer-row step; B's column step
        too); a reduction writes one D row per outer row.  Fields ``op`` does not use stay zero.
        """
        spec = VECTOR_OPS[VectorOp(op)]
        if (b is not None) != spec.uses_b:
            raise ValueError(f"{self.what}: {VectorOp(op).name} {'needs' if spec.uses_b else 'takes no'} operand B")
        what = f"VECTOR {VectorOp(op).name}"
        self._local(f"{what} A", a.acc, a.addr, a.addr + (rows - 1) * a.row_stride + cols - 1)
        d_cols = 1 if spec.kind == "reduce" else cols
        self._local(f"{what} D", d.acc, d.addr, d.addr + (rows - 1) * d.row_stride + d_cols - 1)
        fields = {"vop": int(op), "cols": cols, "rows": rows, "a_addr": a.addr, "a_row_stride": a.row_stride,
                  "d_addr": d.addr, "d_row_stride": d.row_stride}
        if b is not None:
            self._local(f"{what} B", b.acc, b.addr, b.addr + (rows - 1) * b.row_stride + (cols - 1) * b.col_stride)
            fields.update(b_addr=b.addr, b_row_stride=b.row_stride, b_col_stride=b.col_stride)
        if spec.max_shift is not None:
            fields["shift"] = shift
        elif shift:
            raise ValueError(f"{self.what}: {VectorOp(op).name} takes no shift")
        if "imm" in spec.imms:
            fields["imm"] = unsigned32(imm)
        if "imm2" in spec.imms:
            fields["imm2"] = unsigned32(imm2)
        flags = {"a_acc": a.acc, "b_acc": b is not None and b.acc, "d_acc": d.acc}
        self.commands.append(pack_command(Opcode.VECTOR, tag=self._tag(), flags=flags, **fields))

    def table(self, *, src_addr: int) -> None:
        """One TABLE command: the lookup table from the scratchpad rows at ``src_addr``."""
        self._local("TABLE", False, src_addr, src_addr + table_rows(self.array) - 1)
        self.commands.append(pack_command(Opcode.TABLE, tag=self._tag(), src_addr=src_addr))

    def transpose(self, *, src_addr: int, dst_addr: int, blocks: int, src_stride: int, dst_stride: int) -> None:
        """One TRANSPOSE command: ``blocks`` array x array int8 blocks of the scratchpad, each transposed."""
        n = self.array
        self._local("TRANSPOSE source", False, src_addr, src_addr + (blocks - 1) * src_stride + n - 1)
        self._local("TRANSPOSE destination", False, dst_addr, dst_addr + (blocks - 1) * dst_stride + n - 1)
        self.commands.append(pack_command(Opcode.TRANSPOSE, tag=self._tag(), src_addr=src_addr, dst_addr=dst_addr,
                                          blocks=blocks, src_stride=src_stride, dst_stride=dst_stride))


@dataclass(frozen=True)
class LocalRows:
    """Where a VECTOR operand is: the accumulator buffer or the scratchpad, its first local row, its steps."""

    acc: bool
    addr: int
    row_stride: int = 0
    col_stride: int = 1
