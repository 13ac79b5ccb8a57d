"""The vector unit's operations: what each ``vop`` of a VECTOR command computes and which fields it uses.

The VECTOR command (``commands.py``) walks ``rows`` outer rows of ``cols`` local rows; this module says,
per :class:`VectorOp`, what one lane of one step computes, which operands, flags and scalar fields the
vop reads, and the largest ``shift`` it takes.  A field or flag that a vop does not use is reserved for
it: a command that sets one completes with ``RESERVED_BITS`` (:func:`vector_reserved_mask`), so a
mistyped vop cannot pass unnoticed with stray operands.

Arithmetic, lane by lane: an operand lane is an int8 (scratchpad) or int32 (accumulator buffer) value,
sign-extended; the vop's result is computed exactly (as a mathematical integer) and then saturated to
D's lane type.  ``round_shift(p, s)`` is the POSTOP's rounding: ``p`` for ``s = 0``, else
``(p + 2**(s-1) - (p < 0)) >> s`` (half away from zero).  Reductions wrap modulo 2**32 like the GEMM's
accumulation (RSUM, RSUMSQ) before the saturation to D's lane type.

The lookup table (TABLE command) holds :data:`TABLE_ENTRIES` int16 entries ``T``.  LUT computes
``u = a - imm``, ``i = u >> shift`` (floor), ``f = u - (i << shift)``; when ``0 <= i < TABLE_ENTRIES - 1``
the lane hits and its value is ``T[i] + round_shift((T[i+1] - T[i]) * f, shift)`` (linear interpolation);
when ``i < 0`` it underflows and is ``T[0]``; when ``i >= TABLE_ENTRIES - 1`` it overflows and is
``T[TABLE_ENTRIES - 1]``.  Every lane of every LUT step counts one hit, underflow or overflow.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from .commands import COMMANDS, Opcode
from .sizes import ceil_div

__all__ = ["VECTOR_OPCODES", "VectorOp", "VectorOpSpec", "VECTOR_OPS", "TABLE_ENTRIES", "TABLE_MAX_SHIFT",
           "VECTOR_MAX_SHIFT", "table_rows", "vector_reserved_mask", "signed32", "unsigned32"]

#: The commands the vector unit runs.
VECTOR_OPCODES = (Opcode.VECTOR, Opcode.TABLE, Opcode.TRANSPOSE)
#: Entries of the lookup table: 256 intervals of linear interpolation.
TABLE_ENTRIES = 257
#: Largest LUT index shift: the fraction ``f`` has at most 16 bits, so ``(T[i+1] - T[i]) * f`` fits 33 bits.
TABLE_MAX_SHIFT = 16
#: Largest right shift of MUL, SHR and RECIP (as POSTOP's).
VECTOR_MAX_SHIFT = 47


class VectorOp(enum.IntEnum):
    """The vector unit's operations (the VECTOR command's ``vop`` field)."""

    ADD = 0
    SUB = 1
    MUL = 2
    MAX = 3
    MIN = 4
    SHR = 5
    SHL = 6
    CLAMP = 7
    MOV = 8
    RMAX = 9
    RSUM = 10
    RSUMSQ = 11
    RECIP = 12
    ISQRT = 13
    LUT = 14


@dataclass(frozen=True)
class VectorOpSpec:
    """One vop: its kind (``binary``, ``unary`` or ``reduce``), its largest shift (None: no shift), its immediates."""

    op: VectorOp
    kind: str
    doc: str
    max_shift: int | None = None
    imms: tuple[str, ...] = ()

    @property
    def uses_b(self) -> bool:
        return self.kind == "binary"


VECTOR_OPS: dict[VectorOp, VectorOpSpec] = {s.op: s for s in (
    VectorOpSpec(VectorOp.ADD, "binary", "a + b"),
    VectorOpSpec(VectorOp.SUB, "binary", "a - b"),
    VectorOpSpec(VectorOp.MUL, "binary", "round_shift(a * b, shift): a scale per lane, row or column, "
                 "with requantisation", VECTOR_MAX_SHIFT),
    VectorOpSpec(VectorOp.MAX, "binary", "max(a, b)"),
    VectorOpSpec(VectorOp.MIN, "binary", "min(a, b)"),
    VectorOpSpec(VectorOp.SHR, "unary", "round_shift(a, shift)", VECTOR_MAX_SHIFT),
    VectorOpSpec(VectorOp.SHL, "unary", "a * 2**shift", 31),
    VectorOpSpec(VectorOp.CLAMP, "unary", "min(max(a, imm), imm2); imm > imm2 is BAD_FIELD", None, ("imm", "imm2")),
    VectorOpSpec(VectorOp.MOV, "unary", "a (a copy, widened or saturated to D's lane type)"),
    VectorOpSpec(VectorOp.RMAX, "reduce", "max over every lane of A(r, :)"),
    VectorOpSpec(VectorOp.RSUM, "reduce", "sum over every lane of A(r, :), modulo 2**32"),
    VectorOpSpec(VectorOp.RSUMSQ, "reduce", "sum of (a * a mod 2**32) over every lane of A(r, :), modulo 2**32"),
    VectorOpSpec(VectorOp.RECIP, "unary", "floor(2**shift / a) for a >= 1, at most 2**31 - 1; 2**31 - 1 for "
                 "a <= 0", VECTOR_MAX_SHIFT),
    VectorOpSpec(VectorOp.ISQRT, "unary", "floor(sqrt(a)) for a >= 0; 0 for a < 0"),
    VectorOpSpec(VectorOp.LUT, "unary", "the lookup table at a - imm, index shift `shift`, interpolated "
                 "(module docstring)", TABLE_MAX_SHIFT, ("imm",)),
)}

_B_FIELDS = ("b_addr", "b_row_stride", "b_col_stride")


def vector_reserved_mask(vop: int) -> int:
    """The bits of a VECTOR command that must be zero for ``vop``: the command's reserved bits, and the
    fields and flags the vop does not use.  For a ``vop`` outside :class:`VectorOp` only the command's own
    reserved bits (the vop itself is then ``BAD_FIELD``)."""
    cmd = COMMANDS[Opcode.VECTOR]
    mask = cmd.reserved_mask
    if vop not in {int(o) for o in VectorOp}:
        return mask
    spec = VECTOR_OPS[VectorOp(vop)]
    unused = [] if spec.uses_b else list(_B_FIELDS)
    if spec.max_shift is None:
        unused.append("shift")
    unused += [name for name in ("imm", "imm2") if name not in spec.imms]
    for name in unused:
        mask |= cmd.field(name).mask
    if not spec.uses_b:
        mask |= 1 << (cmd.all_fields[1].lsb + cmd.flag_bit("b_acc"))
    return mask


def table_rows(array: int) -> int:
    """Scratchpad rows a TABLE command reads for an array of ``array`` lanes (``array / 2`` entries a row)."""
    return ceil_div(TABLE_ENTRIES, array // 2)


def signed32(value: int) -> int:
    """A 32-bit field's value read as two's complement."""
    value &= 0xFFFF_FFFF
    return value - (1 << 32) if value & 1 << 31 else value


def unsigned32(value: int) -> int:
    """A signed 32-bit value as the field's unsigned bits; refuses values outside int32."""
    if not -(1 << 31) <= value < 1 << 31:
        raise ValueError(f"an immediate must be a signed 32-bit value, not {value!r}")
    return value & 0xFFFF_FFFF
