"""Bit-exact golden model of a tile's vector unit: the VECTOR, TABLE and TRANSPOSE commands.

Written from the spec (``spec/commands.py`` for the fields, ``spec/vector.py`` for what each vop
computes), not from the RTL.  A VECTOR command reads and writes its local rows in order (outer row,
then column), so a read sees every earlier write of the same command; when the destination's rows
are distinct and touch no row the command reads, every order gives the same result and the command
runs as whole-array numpy operations, otherwise row by row.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..spec import (
    COMMANDS,
    TABLE_ENTRIES,
    VECTOR_OPCODES,
    VECTOR_OPS,
    ErrorCode,
    Opcode,
    TileConfig,
    VectorOp,
    signed32,
    table_rows,
    unpack_command,
    vector_reserved_mask,
)

__all__ = ["VECTOR_OPCODES", "VectorUnit", "check_vector_command", "round_shift", "isqrt", "lookup"]

_INT8 = (-(1 << 7), (1 << 7) - 1)
_INT32 = (-(1 << 31), (1 << 31) - 1)
_FLAG_LSB = COMMANDS[Opcode.VECTOR].all_fields[1].lsb


def _flag(f: dict[str, int], name: str) -> bool:
    return bool(f["flags"] >> COMMANDS[Opcode.VECTOR].flag_bit(name) & 1)


def round_shift(p: np.ndarray, shift: int) -> np.ndarray:
    """``p >> shift`` rounded half away from zero (the POSTOP's rounding); ``p`` for ``shift == 0``."""
    if shift == 0:
        return p
    return (p + (1 << (shift - 1)) - (p < 0)) >> shift


def isqrt(x: np.ndarray) -> np.ndarray:
    """``floor(sqrt(x))`` of int64 lanes below 2**31, 0 where ``x < 0``."""
    x = np.maximum(x, 0)
    r = np.floor(np.sqrt(x.astype(np.float64))).astype(np.int64)
    r -= r * r > x
    r += (r + 1) * (r + 1) <= x
    return r


def lookup(table: np.ndarray, a: np.ndarray, offset: int, shift: int) -> tuple[np.ndarray, int, int, int]:
    """The LUT vop on int64 lanes: values, and the lanes that hit, underflowed and overflowed."""
    t = table.astype(np.int64)
    u = a - offset
    i = u >> shift
    frac = u - (i << shift)
    under, over = i < 0, i >= TABLE_ENTRIES - 1
    hit = ~(under | over)
    j = np.where(hit, i, 0)
    value = t[j] + round_shift((t[j + 1] - t[j]) * frac, shift)
    value = np.where(under, t[0], np.where(over, t[-1], value))
    return value, int(hit.sum()), int(under.sum()), int(over.sum())


def check_vector_command(word: int, f: dict[str, int], config: TileConfig) -> ErrorCode:
    """Check a VECTOR, TABLE or TRANSPOSE command (decoded as ``f``) in the spec's order after BAD_OPCODE."""
    opcode = Opcode(f["opcode"])
    n = config.array
    if opcode == Opcode.TABLE:
        if word & COMMANDS[opcode].reserved_mask:
            return ErrorCode.RESERVED_BITS
        return ErrorCode.SPM_RANGE if f["src_addr"] + table_rows(n) > config.spm_rows else ErrorCode.OK
    if opcode == Opcode.TRANSPOSE:
        if word & COMMANDS[opcode].reserved_mask:
            return ErrorCode.RESERVED_BITS
        if f["blocks"] == 0:
            return ErrorCode.BAD_DIMENSION
        last = (f["blocks"] - 1)
        if max(f["src_addr"] + last * f["src_stride"], f["dst_addr"] + last * f["dst_stride"]) + n > config.spm_rows:
            return ErrorCode.SPM_RANGE
        return ErrorCode.OK
    if word & vector_reserved_mask(f["vop"]):
        return ErrorCode.RESERVED_BITS
    if f["rows"] == 0 or f["cols"] == 0:
        return ErrorCode.BAD_DIMENSION
    if f["vop"] not in {int(o) for o in VectorOp}:
        return ErrorCode.BAD_FIELD
    spec = VECTOR_OPS[VectorOp(f["vop"])]
    if f["shift"] > (spec.max_shift or 0):
        return ErrorCode.BAD_FIELD
    if spec.op == VectorOp.CLAMP and signed32(f["imm"]) > signed32(f["imm2"]):
        return ErrorCode.BAD_FIELD
    for memory, size, status in ((False, config.spm_rows, ErrorCode.SPM_RANGE),
                                 (True, config.acc_rows, ErrorCode.ACC_RANGE)):
        if any(acc == memory and last >= size for acc, last in _last_rows(f, spec.kind)):
            return status
    return ErrorCode.OK


def _last_rows(f: dict[str, int], kind: str) -> list[tuple[bool, int]]:
    """(in the accumulator buffer, last local row) of every operand the command reads or writes."""
    r, c = f["rows"] - 1, f["cols"] - 1
    rows = [(_flag(f, "a_acc"), f["a_addr"] + r * f["a_row_stride"] + c)]
    if kind == "binary":
        rows.append((_flag(f, "b_acc"), f["b_addr"] + r * f["b_row_stride"] + c * f["b_col_stride"]))
    rows.append((_flag(f, "d_acc"), f["d_addr"] + r * f["d_row_stride"] + (0 if kind == "reduce" else c)))
    return rows


@dataclass
class _Operand:
    acc: bool
    index: np.ndarray  # (rows, cols) local rows, or (rows,) for a reduction's destination


class VectorUnit:
    """A tile's vector unit: its lookup table and counters; it acts on the tile's memories.

    Attributes
    ----------
    table:
        The lookup table, :data:`~dx1_bringup.spec.TABLE_ENTRIES` int16 entries (zero until a TABLE).
    hits, underflows, overflows:
        LUT lanes so far, by outcome.
    """

    def __init__(self, config: TileConfig, spm: np.ndarray, acc: np.ndarray):
        self.config = config
        self.spm = spm
        self.acc = acc
        self.table = np.zeros(TABLE_ENTRIES, dtype=np.int16)
        self.hits = self.underflows = self.overflows = 0

    def execute(self, cmd: bytes) -> None:
        """Run a VECTOR, TABLE or TRANSPOSE command that passed :func:`check_vector_command`."""
        _, f = unpack_command(cmd)
        opcode = Opcode(f["opcode"])
        if opcode == Opcode.TABLE:
            self._table(f["src_addr"])
        elif opcode == Opcode.TRANSPOSE:
            self._transpose(f)
        else:
            self._vector(f)

    def _table(self, src: int) -> None:
        rows = self.spm[src:src + table_rows(self.config.array)]
        self.table[:] = np.ascontiguousarray(rows).view("<i2").reshape(-1)[:TABLE_ENTRIES]

    def _transpose(self, f: dict[str, int]) -> None:
        n = self.config.array
        for b in range(f["blocks"]):
            src, dst = f["src_addr"] + b * f["src_stride"], f["dst_addr"] + b * f["dst_stride"]
            self.spm[dst:dst + n] = self.spm[src:src + n].T.copy()

    # -- VECTOR ----------------------------------------------------------------------------------------------

    def _memory(self, acc: bool) -> np.ndarray:
        return self.acc if acc else self.spm

    def _vector(self, f: dict[str, int]) -> None:
        spec = VECTOR_OPS[VectorOp(f["vop"])]
        r = np.arange(f["rows"])[:, None]
        c = np.arange(f["cols"])[None, :]
        a = _Operand(_flag(f, "a_acc"), f["a_addr"] + r * f["a_row_stride"] + c)
        b = _Operand(_flag(f, "b_acc"), f["b_addr"] + r * f["b_row_stride"] + c * f["b_col_stride"]) \
            if spec.uses_b else None
        if spec.kind == "reduce":
            d = _Operand(_flag(f, "d_acc"), f["d_addr"] + r[:, 0] * f["d_row_stride"])
        else:
            d = _Operand(_flag(f, "d_acc"), f["d_addr"] + r * f["d_row_stride"] + c)
        sources = [a] if b is None else [a, b]
        written = d.index.ravel()
        independent = np.unique(written).size == written.size and not any(
            s.acc == d.acc and np.intersect1d(s.index, written).size for s in sources)
        if independent:
            self._steps(spec.op, f, a, b, d, slice(None))
        else:  # the spec's order, one outer row (and, elementwise, one column) at a time
            for row in range(f["rows"]):
                if spec.kind == "reduce":
                    self._steps(spec.op, f, a, b, d, (slice(row, row + 1),))
                else:
                    for col in range(f["cols"]):
                        self._steps(spec.op, f, a, b, d, (slice(row, row + 1), slice(col, col + 1)))

    def _read(self, x: _Operand, where) -> np.ndarray:
        return self._memory(x.acc)[x.index[where]].astype(np.int64)

    def _steps(self, op: VectorOp, f: dict[str, int], a: _Operand, b: _Operand | None, d: _Operand, where) -> None:
        x = self._read(a, where)  # (rows, cols, lanes)
        if op in (VectorOp.RMAX, VectorOp.RSUM, VectorOp.RSUMSQ):
            flat = x.reshape(x.shape[0], -1)
            if op == VectorOp.RMAX:
                stat = flat.max(axis=1)
            elif op == VectorOp.RSUM:
                stat = flat.sum(axis=1)
            else:
                stat = ((flat * flat) & 0xFFFF_FFFF).sum(axis=1)
            stat = ((stat + (1 << 31)) & 0xFFFF_FFFF) - (1 << 31) if op != VectorOp.RMAX else stat
            value = np.broadcast_to(stat[:, None], (stat.shape[0], self.config.array))
            self._write(d, where[:1] if isinstance(where, tuple) else where, value)
            return
        y = self._read(b, where) if b is not None else None
        shift = f["shift"]
        if op == VectorOp.ADD:
            value = x + y
        elif op == VectorOp.SUB:
            value = x - y
        elif op == VectorOp.MUL:
            value = round_shift(x * y, shift)
        elif op == VectorOp.MAX:
            value = np.maximum(x, y)
        elif op == VectorOp.MIN:
            value = np.minimum(x, y)
        elif op == VectorOp.SHR:
            value = round_shift(x, shift)
        elif op == VectorOp.SHL:
            value = x << shift
        elif op == VectorOp.CLAMP:
            value = np.clip(x, signed32(f["imm"]), signed32(f["imm2"]))
        elif op == VectorOp.MOV:
            value = x
        elif op == VectorOp.RECIP:
            value = np.where(x >= 1, np.minimum((1 << shift) // np.maximum(x, 1), _INT32[1]), _INT32[1])
        elif op == VectorOp.ISQRT:
            value = isqrt(x)
        else:
            value, hits, under, over = lookup(self.table, x, signed32(f["imm"]), shift)
            self.hits += hits
            self.underflows += under
            self.overflows += over
        self._write(d, where, value)

    def _write(self, d: _Operand, where, value: np.ndarray) -> None:
        low, high = _INT32 if d.acc else _INT8
        memory = self._memory(d.acc)
        index = d.index[where]
        memory[index] = np.clip(value, low, high).astype(memory.dtype).reshape(index.shape + (self.config.array,))
