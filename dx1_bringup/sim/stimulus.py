"""Constrained-random compute commands and operands for a tile, from a seeded generator."""

from __future__ import annotations

import numpy as np

from ..model.tile import COMPUTE_OPCODES, MAX_SHIFT
from ..spec import (
    COMMANDS,
    TABLE_ENTRIES,
    VECTOR_OPS,
    ErrorCode,
    Opcode,
    TileConfig,
    VectorOp,
    pack_command,
    table_rows,
    unsigned32,
)

__all__ = ["random_int8", "random_int32", "random_gemm", "random_postop", "bad_command", "random_stream",
           "BAD_KINDS", "random_vector", "random_table", "random_transpose", "random_vector_word",
           "random_vector_stream"]

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


def _vector_operand(rng: np.random.Generator, config: TileConfig, acc: bool, rows: int, span: int) -> tuple[int, int]:
    """(first row, row stride) of an operand of ``rows`` outer rows whose rows reach ``span - 1`` past each start."""
    size = config.acc_rows if acc else config.spm_rows
    stride = int(rng.choice([0, 1, span, int(rng.integers(0, 2 * span + 2))]))
    stride = min(stride, (size - span) // max(rows - 1, 1))
    return int(rng.integers(0, size - (rows - 1) * stride - span + 1)), stride


def random_vector(rng: np.random.Generator, config: TileConfig, tag: int, vop: VectorOp | None = None,
                  flags: dict[str, bool] | None = None) -> bytes:
    """A VECTOR command that passes every check: any vop, operands anywhere (overlaps included), short rows often."""
    op = VectorOp(int(rng.integers(0, len(VectorOp)))) if vop is None else VectorOp(vop)
    spec = VECTOR_OPS[op]
    flags = dict(flags) if flags is not None else {name: bool(rng.integers(0, 2)) for name in ("a_acc", "b_acc",
                                                                                               "d_acc")}
    if not spec.uses_b:
        flags["b_acc"] = False
    rows = int(rng.choice([1, 2, int(rng.integers(1, 6))]))
    cols = int(rng.choice([1, 2, int(rng.integers(1, 9)), int(rng.integers(1, 24))]))
    fields: dict[str, int] = {"vop": int(op), "rows": rows, "cols": cols}
    fields["a_addr"], fields["a_row_stride"] = _vector_operand(rng, config, flags["a_acc"], rows, cols)
    d_cols = 1 if spec.kind == "reduce" else cols
    fields["d_addr"], fields["d_row_stride"] = _vector_operand(rng, config, flags["d_acc"], rows, d_cols)
    if flags["a_acc"] == flags["d_acc"] and rng.random() < 0.3:  # in place, or just behind A: the hazard cases
        fields["d_addr"] = min(fields["a_addr"] + int(rng.integers(0, 3)), fields["d_addr"])
        fields["d_row_stride"] = min(fields["a_row_stride"], fields["d_row_stride"])
    if spec.uses_b:
        b_col = int(rng.choice([0, 1, int(rng.integers(0, 3))]))
        span = (cols - 1) * b_col + 1
        fields["b_addr"], fields["b_row_stride"] = _vector_operand(rng, config, flags["b_acc"], rows, span)
        fields["b_col_stride"] = b_col
    if spec.max_shift is not None:
        top = spec.max_shift
        fields["shift"] = int(rng.choice([0, 1, top, int(rng.integers(0, top + 1))]))
    if op == VectorOp.CLAMP:
        low, high = sorted(int(x) for x in rng.integers(-(1 << 31), 1 << 31, size=2))
        if rng.random() < 0.5:
            low, high = sorted(int(x) for x in rng.integers(-200, 200, size=2))
        fields["imm"], fields["imm2"] = unsigned32(low), unsigned32(high)
    if op == VectorOp.LUT:
        shift = int(rng.integers(0, 4)) if rng.random() < 0.6 else int(rng.integers(0, spec.max_shift + 1))
        fields["shift"] = shift
        centre = -((TABLE_ENTRIES - 1) << shift) // 2
        fields["imm"] = unsigned32(int(rng.choice([-128, centre, int(rng.integers(-(1 << 20), 1 << 20))])))
    return pack_command(Opcode.VECTOR, tag=tag, flags=flags, **fields)


def random_table(rng: np.random.Generator, config: TileConfig, tag: int) -> bytes:
    return pack_command(Opcode.TABLE, tag=tag,
                        src_addr=int(rng.integers(0, max(config.spm_rows - table_rows(config.array) + 1, 1))))


def random_transpose(rng: np.random.Generator, config: TileConfig, tag: int) -> bytes:
    n = config.array
    blocks = int(rng.choice([1, 2, int(rng.integers(1, 5))]))
    fields = {"blocks": blocks}
    for name in ("src", "dst"):
        stride = int(rng.choice([0, n, int(rng.integers(0, 2 * n + 1))]))
        stride = min(stride, (config.spm_rows - n) // max(blocks - 1, 1))
        fields[f"{name}_stride"] = stride
        fields[f"{name}_addr"] = int(rng.integers(0, config.spm_rows - (blocks - 1) * stride - n + 1))
    return pack_command(Opcode.TRANSPOSE, tag=tag, **fields)


def random_vector_word(rng: np.random.Generator, config: TileConfig, tag: int) -> bytes:
    """A VECTOR, TABLE or TRANSPOSE command, good or broken in one way: a stray bit, a zero count, an unknown vop,
    a shift one over, a clamp the wrong way round, a row past the end; its status is the golden model's."""
    opcode = Opcode(int(rng.choice([Opcode.VECTOR] * 4 + [Opcode.TABLE, Opcode.TRANSPOSE])))
    good = {Opcode.VECTOR: random_vector, Opcode.TABLE: random_table, Opcode.TRANSPOSE: random_transpose}[opcode]
    word = int.from_bytes(good(rng, config, tag), "little")
    cmd = COMMANDS[opcode]
    kind = rng.integers(0, 8)
    if kind == 1:  # a random bit anywhere but the header's opcode and tag
        word ^= 1 << int(rng.choice([b for b in range(8, 256) if not 16 <= b < 32]))
    elif kind == 2:
        name = str(rng.choice([f.name for f in cmd.fields]))
        word &= ~cmd.field(name).mask
    elif kind == 3:
        name = str(rng.choice([f.name for f in cmd.fields]))
        f = cmd.field(name)
        word = word & ~f.mask | int(rng.integers(0, 1 << f.width)) << f.lsb
    elif kind == 4 and opcode == Opcode.VECTOR:
        f = cmd.field("shift")
        vop = cmd.field("vop").extract(word)
        top = (VECTOR_OPS[VectorOp(vop)].max_shift or 0) + 1
        word = word & ~f.mask | min(top, 63) << f.lsb
    elif kind == 5 and opcode == Opcode.VECTOR:
        word = word & ~cmd.field("vop").mask | int(rng.integers(len(VectorOp), 256)) << cmd.field("vop").lsb
    return word.to_bytes(32, "little")


def random_vector_stream(rng: np.random.Generator, config: TileConfig, count: int) -> list[bytes]:
    """``count`` commands for a tile with a vector unit: vector commands, good and bad, among GEMMs and post-ops."""
    out = []
    for tag in range(count):
        r = rng.random()
        if r < 0.15:
            out.append(random_vector_word(rng, config, tag))
        elif r < 0.6:
            out.append(random_vector(rng, config, tag))
        elif r < 0.68:
            out.append(random_table(rng, config, tag))
        elif r < 0.76:
            out.append(random_transpose(rng, config, tag))
        elif r < 0.88:
            out.append(random_gemm(rng, config, tag))
        else:
            out.append(random_postop(rng, config, tag))
    return out
