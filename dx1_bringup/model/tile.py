"""Bit-exact golden model of a dx1-mini tile, written from the spec (not from the RTL).

It executes the commands the compute core runs (NOP, GEMM, POSTOP, and the vector unit's VECTOR,
TABLE and TRANSPOSE, :mod:`.vector`) on a scratchpad and an accumulator buffer held as numpy arrays.  Every RTL result
is compared with it bit for bit.
"""

from __future__ import annotations

import numpy as np

from ..spec import COMMANDS, POSTOP_MAX_SHIFT, ErrorCode, Opcode, PostOpParams, TileConfig, unpack_command
from .vector import VECTOR_OPCODES, VectorUnit, check_vector_command

__all__ = ["COMPUTE_OPCODES", "MAX_SHIFT", "TileModel", "requantize", "check_command"]

#: Opcodes the tile's compute core executes; the command processor routes the others.
COMPUTE_OPCODES = (Opcode.NOP, Opcode.GEMM, Opcode.POSTOP, *VECTOR_OPCODES)

MAX_SHIFT = POSTOP_MAX_SHIFT


def requantize(acc: np.ndarray, bias: np.ndarray | int, post: PostOpParams) -> np.ndarray:
    """The post-op, lane by lane: saturating bias add, ReLU, multiply, rounding shift, int8 saturation.

    Rounding is half away from zero: ``(p + 2**(shift-1) - (p < 0)) >> shift`` for
    ``shift > 0`` (an arithmetic shift), ``p`` for ``shift == 0``.
    """
    if not isinstance(post, PostOpParams):
        raise TypeError(f"post must be a PostOpParams, not {post!r}")
    x = acc.astype(np.int64) + np.asarray(bias, dtype=np.int64)
    x = np.clip(x, -(1 << 31), (1 << 31) - 1)
    if post.relu:
        x = np.maximum(x, 0)
    p = x * post.mult  # |p| < 2**47: exact in int64
    if post.shift:
        p = (p + (1 << (post.shift - 1)) - (p < 0)) >> post.shift
    return np.clip(p, -128, 127).astype(np.int8)


def check_command(cmd: bytes, config: TileConfig) -> ErrorCode:
    """Check a compute command's fields in the spec's order; ``OK`` when it may run."""
    word = int.from_bytes(cmd, "little")
    opcode, f = unpack_command(word)
    if opcode not in (int(o) for o in COMPUTE_OPCODES):
        return ErrorCode.BAD_OPCODE
    if opcode in VECTOR_OPCODES:
        if not config.vector:
            return ErrorCode.BAD_OPCODE
        return check_vector_command(word, f, config)
    spec = COMMANDS[Opcode(opcode)]
    if word & spec.reserved_mask:
        return ErrorCode.RESERVED_BITS
    n = config.array
    if opcode == Opcode.GEMM:
        if f["m"] == 0 or f["k_chunks"] == 0:
            return ErrorCode.BAD_DIMENSION
        if (f["a_addr"] + f["k_chunks"] * f["m"] > config.spm_rows
                or f["b_addr"] + f["k_chunks"] * n > config.spm_rows):
            return ErrorCode.SPM_RANGE
        if f["c_addr"] + f["m"] > config.acc_rows:
            return ErrorCode.ACC_RANGE
    elif opcode == Opcode.POSTOP:
        bias = f["flags"] >> spec.flag_bit("bias") & 1
        if f["rows"] == 0:
            return ErrorCode.BAD_DIMENSION
        if f["shift"] > MAX_SHIFT:  # the one POSTOP field its width does not bound
            return ErrorCode.BAD_FIELD
        if f["dst_addr"] + f["rows"] > config.spm_rows:
            return ErrorCode.SPM_RANGE
        if f["src_addr"] + f["rows"] > config.acc_rows or (bias and f["bias_addr"] >= config.acc_rows):
            return ErrorCode.ACC_RANGE
    return ErrorCode.OK


class TileModel:
    """One tile's memories and the compute commands that act on them.

    Parameters
    ----------
    config:
        The tile's generator parameters.

    Attributes
    ----------
    spm:
        ``(spm_rows, array)`` int8 scratchpad.
    acc:
        ``(acc_rows, array)`` int32 accumulator buffer.
    macs:
        Multiply-accumulates done so far (``array * array`` per streamed row).
    vector:
        The tile's vector unit (its lookup table and LUT counters), acting on ``spm`` and ``acc``.
    """

    def __init__(self, config: TileConfig | None = None):
        self.config = config or TileConfig()
        self.spm = np.zeros((self.config.spm_rows, self.config.array), dtype=np.int8)
        self.acc = np.zeros((self.config.acc_rows, self.config.array), dtype=np.int32)
        self.macs = 0
        self.vector = VectorUnit(self.config, self.spm, self.acc)

    def execute(self, cmd: bytes) -> ErrorCode:
        """Run one command; a refused command changes nothing and returns its error code."""
        status = check_command(cmd, self.config)
        if status != ErrorCode.OK:
            return status
        opcode, f = unpack_command(cmd)
        if opcode == Opcode.GEMM:
            self._gemm(f)
        elif opcode == Opcode.POSTOP:
            self._postop(f)
        elif opcode in VECTOR_OPCODES:
            self.vector.execute(cmd)
        return ErrorCode.OK

    def _gemm(self, f: dict[str, int]) -> None:
        n, m, kc = self.config.array, f["m"], f["k_chunks"]
        # A is kc chunks of (m, n), B kc chunks of (n, n): one (m, kc*n) @ (kc*n, n) product.  Every
        # partial sum is below 2**14 * kc*n < 2**53 in magnitude, so float64 (BLAS) is exact.
        a = self.spm[f["a_addr"]:f["a_addr"] + kc * m].reshape(kc, m, n).transpose(1, 0, 2).reshape(m, kc * n)
        b = self.spm[f["b_addr"]:f["b_addr"] + kc * n].reshape(kc * n, n)
        c = (a.astype(np.float64) @ b.astype(np.float64)).astype(np.int64)
        rows = slice(f["c_addr"], f["c_addr"] + m)
        if f["flags"] & 1 << COMMANDS[Opcode.GEMM].flag_bit("accumulate"):
            c = c + self.acc[rows]
        self.acc[rows] = (c & 0xFFFF_FFFF).astype(np.uint32).view(np.int32)
        self.macs += kc * m * n * n

    def _postop(self, f: dict[str, int]) -> None:
        bias = self.acc[f["bias_addr"]] if f["flags"] >> COMMANDS[Opcode.POSTOP].flag_bit("bias") & 1 else 0
        src = self.acc[f["src_addr"]:f["src_addr"] + f["rows"]]
        self.spm[f["dst_addr"]:f["dst_addr"] + f["rows"]] = requantize(src, bias, PostOpParams.from_command(f))
