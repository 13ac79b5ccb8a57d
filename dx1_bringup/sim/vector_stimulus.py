"""Constrained-random vector-unit commands (VECTOR, TABLE, TRANSPOSE) for a tile, from a seeded generator.

Legal commands stay inside the tile's memories but are otherwise free: operands may overlap the
destination (a read then sees the command's earlier writes), B may be broadcast (stride 0), every flag,
vop and shift corner comes up.  Each command comes with its coverage metadata (:func:`vector_meta`); the
bad ones are the simplest command with one thing wrong, and the golden model decides their code.
"""

from __future__ import annotations

import numpy as np

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
    unpack_command,
    unsigned32,
    vector_reserved_mask,
)
from .stimulus import random_gemm, random_postop

__all__ = ["VECTOR_BAD_KINDS", "random_vector", "random_table", "random_transpose", "random_vector_command",
           "bad_vector_command", "vector_meta", "random_table_entries", "shift_corner", "vector_sweep",
           "random_vector_word", "random_vector_stream"]

INT32_MIN, INT32_MAX = -(1 << 31), (1 << 31) - 1


def shift_corner(shift: int, limit: int | None) -> str:
    """The coverage bin of a vop's shift: "n/a" (no shift), "zero", "one", "max" or "mid"."""
    if limit is None:
        return "n/a"
    return "zero" if shift == 0 else "one" if shift == 1 else "max" if shift == limit else "mid"


def vector_meta(cmd: bytes) -> dict:
    """The coverage metadata of a legal or refused vector-unit command: opcode, vop, operand memories,
    shift corner, B's broadcast, whether D overlaps a source."""
    word = int.from_bytes(cmd, "little")
    opcode = word & 0xFF
    if opcode != Opcode.VECTOR:
        return {"opcode": Opcode(opcode).name, "vop": "n/a", "operands": "n/a", "shift": "n/a",
                "broadcast": "n/a", "overlap": "n/a"}
    _, f = unpack_command(word)
    try:
        spec = VECTOR_OPS[VectorOp(f["vop"])]
    except ValueError:
        return {"opcode": "VECTOR", "vop": "BAD", "operands": "n/a", "shift": "n/a", "broadcast": "n/a",
                "overlap": "n/a"}
    flag = COMMANDS[Opcode.VECTOR].flag_bit
    where = ["acc" if f["flags"] >> flag(x) & 1 else "spm" for x in ("a_acc", "b_acc", "d_acc")]
    if not spec.uses_b:
        where[1] = "-"
    broadcast = "n/a" if not spec.uses_b else (
        "row" if f["b_row_stride"] == 0 and f["b_col_stride"] == 0 else
        "column" if f["b_col_stride"] == 0 else "outer" if f["b_row_stride"] == 0 else "none")
    return {"opcode": "VECTOR", "vop": spec.op.name, "operands": "/".join(where),
            "shift": shift_corner(f["shift"], spec.max_shift), "broadcast": broadcast,
            "overlap": "yes" if _overlaps(f, spec.kind) else "no"}


def _overlaps(f: dict[str, int], kind: str) -> bool:
    """D's rows meet a source's rows in the same memory (a conservative span test)."""
    flag = COMMANDS[Opcode.VECTOR].flag_bit
    acc = {x: bool(f["flags"] >> flag(f"{x}_acc") & 1) for x in "abd"}
    rows, cols = f["rows"] - 1, f["cols"] - 1
    d_last = f["d_addr"] + rows * f["d_row_stride"] + (0 if kind == "reduce" else cols)
    spans = [(acc["a"], f["a_addr"], f["a_addr"] + rows * f["a_row_stride"] + cols)]
    if kind == "binary":
        spans.append((acc["b"], f["b_addr"], f["b_addr"] + rows * f["b_row_stride"] + cols * f["b_col_stride"]))
    return any(mem == acc["d"] and lo <= d_last and f["d_addr"] <= hi for mem, lo, hi in spans)


def _work(rng: np.random.Generator) -> int:
    """Steps of a command: often tiny (pipeline corners), sometimes long (steady state)."""
    return int(rng.integers(1, (4, 40, 130)[int(rng.integers(0, 3))] + 1))


def _place(rng: np.random.Generator, depth: int, span: int) -> int:
    return int(rng.integers(0, depth - span + 1))


def _shift(rng: np.random.Generator, limit: int | None) -> int:
    if limit is None:
        return 0
    return int(rng.choice([0, 1, limit, int(rng.integers(0, limit + 1))]))


def _imm(rng: np.random.Generator) -> int:
    return int(rng.choice([int(rng.integers(-128, 128)), int(rng.integers(-(1 << 16), 1 << 16)),
                           int(rng.integers(INT32_MIN, INT32_MAX, endpoint=True)), INT32_MIN, INT32_MAX, 0]))


def random_vector(rng: np.random.Generator, config: TileConfig, tag: int, vop: VectorOp | None = None,
                  flags: dict[str, bool] | None = None) -> bytes:
    """A legal VECTOR command of ``vop`` (default: a random one) with random operands, strides and immediates;
    ``flags`` fixes the operands' memories (``a_acc``, ``b_acc``, ``d_acc``; default: random)."""
    spec = VECTOR_OPS[VectorOp(int(rng.integers(0, len(VECTOR_OPS)))) if vop is None else vop]
    work = _work(rng)
    cols = int(rng.integers(1, min(work, 16) + 1))
    rows = max(1, work // cols)
    chosen = flags or {}
    flags = {name: chosen.get(name, bool(rng.integers(0, 2))) for name in ("a_acc", "d_acc")}
    depth = {False: config.spm_rows, True: config.acc_rows}
    fields: dict[str, int] = {"vop": int(spec.op), "rows": rows, "cols": cols,
                              "shift": _shift(rng, spec.max_shift)}

    def stride(cols_spanned: int) -> int:
        return int(rng.choice([0, cols_spanned, cols_spanned + int(rng.integers(0, 3))]))

    def operand(name: str, acc: bool, col_stride: int) -> None:
        row_stride = stride(cols * max(col_stride, 1))
        span = (rows - 1) * row_stride + (cols - 1) * col_stride + 1
        if span > depth[acc]:
            row_stride = 0
            span = (cols - 1) * col_stride + 1
        fields[f"{name}_row_stride"] = row_stride
        fields[f"{name}_addr"] = _place(rng, depth[acc], span)

    if cols > depth[flags["a_acc"]] or (spec.kind != "reduce" and cols > depth[flags["d_acc"]]):
        cols = fields["cols"] = 1
    operand("a", flags["a_acc"], 1)
    if spec.uses_b:
        flags["b_acc"] = chosen.get("b_acc", bool(rng.integers(0, 2)))
        col_stride = int(rng.choice([0, 1, 1, 2]))
        if (cols - 1) * col_stride + 1 > depth[flags["b_acc"]]:
            col_stride = 0
        fields["b_col_stride"] = col_stride
        operand("b", flags["b_acc"], col_stride)
    if spec.kind == "reduce":
        d_stride = int(rng.choice([0, 1, int(rng.integers(1, 4))]))
        if (rows - 1) * d_stride + 1 > depth[flags["d_acc"]]:
            d_stride = 0
        fields["d_row_stride"] = d_stride
        fields["d_addr"] = _place(rng, depth[flags["d_acc"]], (rows - 1) * d_stride + 1)
    else:
        operand("d", flags["d_acc"], 1)
    if rng.random() < 0.2:  # D on top of A: in-place updates and read-after-write inside the command
        fields["d_addr"], fields["d_row_stride"], flags["d_acc"] = \
            fields["a_addr"], fields["a_row_stride"], flags["a_acc"]
        if spec.kind == "reduce":
            fields["d_row_stride"] = min(fields["d_row_stride"], cols)
    if spec.op == VectorOp.LUT:  # offsets that centre the table on the lanes often, so that most lanes hit
        centre = -((TABLE_ENTRIES - 1) << fields["shift"]) // 2
        fields["imm"] = unsigned32(int(rng.choice([centre, -128, _imm(rng)])))
    elif "imm" in spec.imms:
        low, high = sorted((_imm(rng), _imm(rng)))
        fields["imm"] = unsigned32(low)
        if "imm2" in spec.imms:
            fields["imm2"] = unsigned32(high)
    return pack_command(Opcode.VECTOR, tag=tag, flags=flags, **fields)


def random_table(rng: np.random.Generator, config: TileConfig, tag: int) -> bytes:
    """A legal TABLE command; a scratchpad shorter than the table has none (ValueError)."""
    if table_rows(config.array) > config.spm_rows:
        raise ValueError(f"a {config.array}-wide tile of {config.spm_rows} scratchpad rows cannot hold the table "
                         f"({table_rows(config.array)} rows)")
    return pack_command(Opcode.TABLE, tag=tag,
                        src_addr=_place(rng, config.spm_rows, table_rows(config.array)))


def random_transpose(rng: np.random.Generator, config: TileConfig, tag: int) -> bytes:
    n = config.array
    blocks = int(rng.integers(1, 5))
    fields = {"blocks": blocks}
    for name in ("src", "dst"):
        stride = int(rng.choice([0, n, n + int(rng.integers(0, 3))]))
        if (blocks - 1) * stride + n > config.spm_rows:
            stride = 0
        fields[f"{name}_stride"] = stride
        fields[f"{name}_addr"] = _place(rng, config.spm_rows, (blocks - 1) * stride + n)
    return pack_command(Opcode.TRANSPOSE, tag=tag, **fields)


def random_vector_command(rng: np.random.Generator, config: TileConfig, tag: int) -> bytes:
    """A legal vector-unit command: mostly VECTOR, some TABLE and TRANSPOSE."""
    pick = rng.random()
    if pick < 0.8:
        return random_vector(rng, config, tag)
    table = table_rows(config.array) <= config.spm_rows
    return random_table(rng, config, tag) if pick < 0.9 and table else random_transpose(rng, config, tag)


def random_table_entries(rng: np.random.Generator) -> np.ndarray:
    """A lookup table worth loading: smooth (a sampled curve), random, or at the int16 extremes."""
    kind = int(rng.integers(0, 3))
    if kind == 0:
        x = np.linspace(-4, 4, TABLE_ENTRIES)
        return np.round(32767 * np.tanh(x * rng.uniform(0.2, 2))).astype(np.int16)
    if kind == 1:
        return rng.integers(-(1 << 15), 1 << 15, size=TABLE_ENTRIES).astype(np.int16)
    return rng.choice(np.array([-(1 << 15), (1 << 15) - 1, 0, -1], dtype=np.int16), size=TABLE_ENTRIES)


VECTOR_BAD_KINDS = ("reserved", "vop_reserved", "dimension", "vop", "shift", "clamp", "spm_range", "acc_range",
                    "table_range", "transpose_dimension", "transpose_range")


def bad_vector_command(rng: np.random.Generator, config: TileConfig, tag: int, kind: str) -> tuple[bytes, ErrorCode]:
    """A vector-unit command the tile must refuse, and the error the spec gives it."""
    vector = COMMANDS[Opcode.VECTOR]
    if kind in ("reserved", "vop_reserved"):
        op = VectorOp(int(rng.integers(0, len(VECTOR_OPS))))
        own = vector.reserved_mask
        mask = own if kind == "reserved" else vector_reserved_mask(op) & ~own
        if not mask:  # a vop that uses every field: its command's own reserved bits
            mask = own
        bits = [b for b in range(256) if mask >> b & 1]
        word = int.from_bytes(random_vector(rng, config, tag, op), "little") | 1 << int(rng.choice(bits))
        return word.to_bytes(32, "little"), ErrorCode.RESERVED_BITS
    if kind == "dimension":
        zero = str(rng.choice(["rows", "cols"]))
        return pack_command(Opcode.VECTOR, tag=tag, vop=VectorOp.MOV, **{"rows": 1, "cols": 1, zero: 0}), \
            ErrorCode.BAD_DIMENSION
    if kind == "vop":
        return pack_command(Opcode.VECTOR, tag=tag, vop=int(rng.integers(len(VECTOR_OPS), 256)), rows=1,
                            cols=1), ErrorCode.BAD_FIELD
    if kind == "shift":
        op = VectorOp(int(rng.choice([o for o, s in VECTOR_OPS.items() if s.max_shift is not None
                                       and s.max_shift < 63])))
        fields = {"b_row_stride": 0} if VECTOR_OPS[op].uses_b else {}
        return pack_command(Opcode.VECTOR, tag=tag, vop=op, rows=1, cols=1,
                            shift=int(rng.integers(VECTOR_OPS[op].max_shift + 1, 64)), **fields), \
            ErrorCode.BAD_FIELD
    if kind == "clamp":
        high = int(rng.integers(INT32_MIN, INT32_MAX))
        return pack_command(Opcode.VECTOR, tag=tag, vop=VectorOp.CLAMP, rows=1, cols=1,
                            imm=unsigned32(high + 1), imm2=unsigned32(high)), ErrorCode.BAD_FIELD
    if kind in ("spm_range", "acc_range"):
        acc = kind == "acc_range"
        depth = config.acc_rows if acc else config.spm_rows
        operand = str(rng.choice(["a", "d"]))
        cols = int(rng.integers(1, 4))
        fields = {f"{operand}_addr": depth - cols + 1}
        return pack_command(Opcode.VECTOR, tag=tag, vop=VectorOp.MOV, rows=1, cols=cols,
                            flags={f"{operand}_acc": acc}, **fields), \
            ErrorCode.ACC_RANGE if acc else ErrorCode.SPM_RANGE
    if kind == "table_range":
        src = max(0, config.spm_rows - table_rows(config.array) + int(rng.integers(1, 3)))
        return pack_command(Opcode.TABLE, tag=tag, src_addr=src), ErrorCode.SPM_RANGE
    if kind == "transpose_dimension":
        return pack_command(Opcode.TRANSPOSE, tag=tag, blocks=0), ErrorCode.BAD_DIMENSION
    if kind == "transpose_range":
        n = config.array
        return pack_command(Opcode.TRANSPOSE, tag=tag, blocks=2, src_stride=n,
                            src_addr=config.spm_rows - 2 * n + int(rng.integers(1, n + 1))), ErrorCode.SPM_RANGE
    raise ValueError(f"bad vector command kind must be one of {VECTOR_BAD_KINDS}, not {kind!r}")


def vector_sweep(rng: np.random.Generator, config: TileConfig, tag: int) -> list[tuple[bytes, str | None]]:
    """Directed vector-unit commands that hit every coverage bin of ``vector_meta`` once: every vop at every
    shift corner, every operand placement, every broadcast of B, a destination on top of its source, and
    every refusal kind.  Returns (command, refusal kind or None); tags count up from ``tag``."""
    out: list[tuple[bytes, str | None]] = []

    def add(cmd: bytes, refusal: str | None = None) -> None:
        out.append((cmd, refusal))

    def vector(op: VectorOp, *, shift: int = 0, a_acc=False, b_acc=False, d_acc=False, b_row_stride=2,
               b_col_stride=1, d_addr=40, **extra) -> bytes:
        spec = VECTOR_OPS[op]
        fields = dict(vop=int(op), rows=2, cols=2, a_addr=0, a_row_stride=2, d_addr=d_addr,
                      d_row_stride=1 if spec.kind == "reduce" else 2, shift=shift, **extra)
        flags = {"a_acc": a_acc, "d_acc": d_acc}
        if spec.uses_b:
            fields.update(b_addr=20, b_row_stride=b_row_stride, b_col_stride=b_col_stride)
            flags["b_acc"] = b_acc
        if "imm" in spec.imms:
            fields["imm"] = unsigned32(-4)
            if "imm2" in spec.imms:
                fields["imm2"] = unsigned32(100)
        return pack_command(Opcode.VECTOR, tag=(tag + len(out)) & 0xFFFF, flags=flags, **fields)

    for op, spec in VECTOR_OPS.items():
        shifts = [0] if spec.max_shift is None else sorted({0, 1, spec.max_shift, spec.max_shift // 2})
        for shift in shifts:
            add(vector(op, shift=shift))
    for a_acc in (False, True):
        for d_acc in (False, True):
            add(vector(VectorOp.MOV, a_acc=a_acc, d_acc=d_acc))
            for b_acc in (False, True):
                add(vector(VectorOp.ADD, a_acc=a_acc, b_acc=b_acc, d_acc=d_acc))
    for b_row_stride, b_col_stride in ((0, 0), (2, 0), (0, 1)):
        add(vector(VectorOp.SUB, b_row_stride=b_row_stride, b_col_stride=b_col_stride))
    add(vector(VectorOp.MAX, d_addr=0))
    for kind in VECTOR_BAD_KINDS:
        add(bad_vector_command(rng, config, (tag + len(out)) & 0xFFFF, kind)[0], kind)
    return out


def random_vector_word(rng: np.random.Generator, config: TileConfig, tag: int) -> bytes:
    """A VECTOR, TABLE or TRANSPOSE command, good or broken in one way: a stray bit, a zero count, an unknown vop,
    a shift one over, a clamp the wrong way round, a row past the end; its status is the golden model's."""
    table = table_rows(config.array) <= config.spm_rows
    opcode = Opcode(int(rng.choice([Opcode.VECTOR] * 4 + [Opcode.TABLE] * table + [Opcode.TRANSPOSE])))
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
        elif r < 0.68 and table_rows(config.array) <= config.spm_rows:
            out.append(random_table(rng, config, tag))
        elif r < 0.76:
            out.append(random_transpose(rng, config, tag))
        elif r < 0.88:
            out.append(random_gemm(rng, config, tag))
        else:
            out.append(random_postop(rng, config, tag))
    return out
