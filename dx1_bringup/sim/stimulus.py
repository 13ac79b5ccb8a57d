"""Constrained-random compute commands and operands for a tile, from a seeded generator."""

from __future__ import annotations

import numpy as np

from ..model.tile import COMPUTE_OPCODES, MAX_SHIFT
from ..spec import (
    COMMANDS,
    ErrorCode,
    Opcode,
    TileConfig,
    pack_command,
)

__all__ = ["random_int8", "random_int32", "random_gemm", "random_postop", "bad_command", "random_stream",
           "BAD_KINDS"]

INT32_MIN, INT32_MAX = -(1 << 31), (1 << 31) - 1


def random_int8(rng: np.random.Generator, shape) -> np.ndarray:
    """int8 values, a quarter of them the extremes -128 and 127."""
    values = rng.integers(-128, 128, size=shape)
    extremes = rng.random(shape) < 0.25
    values[extremes] = rng.choice([-128, 127], size=int(extremes.sum()))
    return values.astype(np.int8)


def random_int32(rng: np.random.Generator, shape) -> np.ndarray:
    """int32 values: small, full-range, and the extremes (what saturates the post-op)."""
    kind = rng.integers(0, 4, size=shape)
    small = rng.integers(-(1 << 16), 1 << 16, size=shape)
    full = rng.integers(INT32_MIN, INT32_MAX, size=shape, endpoint=True)
    edge = rng.choice([INT32_MIN, INT32_MIN + 1, -1, 0, 1, INT32_MAX - 1, INT32_MAX], size=shape)
    return np.select([kind == 0, kind == 1], [small, full], edge).astype(np.int32)


def _rows(rng: np.random.Generator, limit: int) -> int:
    """A row count: often tiny (pipeline corner cases), sometimes long (steady state)."""
    bucket = rng.integers(0, 3)
    high = (4, 40, 130)[bucket]
    return int(rng.integers(1, min(high, limit) + 1))


def random_gemm(rng: np.random.Generator, config: TileConfig, tag: int) -> bytes:
    n = config.array
    # At least one activation row must fit beside the weights.
    k_chunks = int(rng.integers(1, min(4, config.spm_rows // (n + 1)) + 1))
    m = _rows(rng, min(config.acc_rows, (config.spm_rows - n * k_chunks) // k_chunks))
    return pack_command(
        Opcode.GEMM, tag=tag, flags={"accumulate": bool(rng.integers(0, 2))},
        a_addr=int(rng.integers(0, config.spm_rows - k_chunks * m + 1)),
        b_addr=int(rng.integers(0, config.spm_rows - k_chunks * n + 1)),
        c_addr=int(rng.integers(0, config.acc_rows - m + 1)),
        m=m, k_chunks=k_chunks,
    )


def random_postop(rng: np.random.Generator, config: TileConfig, tag: int) -> bytes:
    rows = _rows(rng, min(config.acc_rows, config.spm_rows))
    return pack_command(
        Opcode.POSTOP, tag=tag, flags={"relu": bool(rng.integers(0, 2)), "bias": bool(rng.integers(0, 2))},
        src_addr=int(rng.integers(0, config.acc_rows - rows + 1)),
        dst_addr=int(rng.integers(0, config.spm_rows - rows + 1)),
        rows=rows, bias_addr=int(rng.integers(0, config.acc_rows)),
        mult=int(rng.choice([0, 1, 65535, int(rng.integers(0, 1 << 16))])),
        shift=int(rng.choice([0, 1, MAX_SHIFT, int(rng.integers(0, MAX_SHIFT + 1))])),
    )


BAD_KINDS = ("opcode", "reserved", "dimension", "shift", "spm_range", "acc_range")


def bad_command(rng: np.random.Generator, config: TileConfig, tag: int, kind: str) -> tuple[bytes, ErrorCode]:
    """A command that the core must refuse, and the error it must give."""
    n = config.array
    if kind == "opcode":
        runs = COMPUTE_OPCODES if config.vector else (Opcode.NOP, Opcode.GEMM, Opcode.POSTOP)
        opcode = int(rng.choice([o for o in range(256) if o not in runs]))
        return pack_command(Opcode.NOP, tag=tag, raw=opcode), ErrorCode.BAD_OPCODE
    if kind == "reserved":
        op = Opcode(int(rng.choice([Opcode.NOP, Opcode.GEMM, Opcode.POSTOP])))
        mask = COMMANDS[op].reserved_mask
        bits = [b for b in range(256) if mask >> b & 1]
        good = random_gemm(rng, config, tag) if op == Opcode.GEMM else (
            random_postop(rng, config, tag) if op == Opcode.POSTOP else pack_command(op, tag=tag))
        word = int.from_bytes(good, "little") | 1 << int(rng.choice(bits))
        return word.to_bytes(32, "little"), ErrorCode.RESERVED_BITS
    if kind == "dimension":
        if rng.integers(0, 2):
            return pack_command(Opcode.GEMM, tag=tag, m=int(rng.integers(0, 2)) * 5, k_chunks=0), \
                ErrorCode.BAD_DIMENSION
        return pack_command(Opcode.POSTOP, tag=tag, rows=0), ErrorCode.BAD_DIMENSION
    if kind == "shift":
        return pack_command(Opcode.POSTOP, tag=tag, rows=1, shift=int(rng.integers(MAX_SHIFT + 1, 64))), \
            ErrorCode.BAD_FIELD
    if kind == "spm_range":
        if rng.integers(0, 2):
            return pack_command(Opcode.GEMM, tag=tag, m=4, k_chunks=1,
                                b_addr=config.spm_rows - n + 1), ErrorCode.SPM_RANGE
        return pack_command(Opcode.POSTOP, tag=tag, rows=2, dst_addr=config.spm_rows - 1), ErrorCode.SPM_RANGE
    if kind == "acc_range":
        if rng.integers(0, 2):
            return pack_command(Opcode.GEMM, tag=tag, m=3, k_chunks=1, c_addr=config.acc_rows - 2), \
                ErrorCode.ACC_RANGE
        if config.acc_rows < 1 << 16 and rng.integers(0, 2):
            return pack_command(Opcode.POSTOP, tag=tag, rows=1, bias_addr=config.acc_rows,
                                flags={"bias": True}), ErrorCode.ACC_RANGE
        return pack_command(Opcode.POSTOP, tag=tag, rows=2, src_addr=config.acc_rows - 1), ErrorCode.ACC_RANGE
    raise ValueError(f"bad command kind must be one of {BAD_KINDS}, not {kind!r}")


def random_stream(rng: np.random.Generator, config: TileConfig, count: int,
                  error_rate: float = 0.1) -> list[bytes]:
    """``count`` commands: mostly GEMMs, some post-ops and NOPs, errors mixed in; tags 0..count-1."""
    out = []
    for tag in range(count):
        r = rng.random()
        if r < error_rate:
            out.append(bad_command(rng, config, tag, str(rng.choice(BAD_KINDS)))[0])
        elif r < 0.65:
            out.append(random_gemm(rng, config, tag))
        elif r < 0.92:
            out.append(random_postop(rng, config, tag))
        else:
            out.append(pack_command(Opcode.NOP, tag=tag))
    return out
