"""Command and completion encoding: the one definition of every field.

A command is ``COMMAND_BYTES`` bytes, read as one little-endian integer; a field
occupies bits ``[lsb, lsb + width)`` of it.  Every bit that no field of a command
names is reserved and must be zero: the device refuses the command otherwise
(:attr:`ErrorCode.RESERVED_BITS`).

The order in which fields are checked is part of the contract, so that the
golden model and the gateware report the same error for a command that is
wrong in more than one way: see :data:`CHECK_ORDER`.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from functools import cached_property

__all__ = [
    "COMMAND_BYTES", "COMMAND_BITS", "POSTOP_MAX_SHIFT", "COMPLETION_BYTES", "ERROR_DOCS", "Field", "Opcode",
    "ErrorCode", "Command",
    "COMMANDS", "COMPLETION", "HEADER", "CHECK_ORDER", "pack_command", "unpack_command",
    "pack_completion", "unpack_completion",
]

COMMAND_BYTES = 32
COMMAND_BITS = COMMAND_BYTES * 8
COMPLETION_BYTES = 8
#: Largest legal POSTOP shift: the product of an int32 and a 16-bit multiplier has 48 bits.
POSTOP_MAX_SHIFT = 47


@dataclass(frozen=True)
class Field:
    """A bit field of a command or completion entry."""

    name: str
    lsb: int
    width: int
    doc: str

    @property
    def mask(self) -> int:
        return ((1 << self.width) - 1) << self.lsb

    def extract(self, word: int) -> int:
        return (word >> self.lsb) & ((1 << self.width) - 1)


class Opcode(enum.IntEnum):
    """Command opcodes (bits [7:0] of every command)."""

    NOP = 0x00
    LOAD = 0x01
    STORE = 0x02
    GEMM = 0x03
    POSTOP = 0x04
    FENCE = 0x05
    SIGNAL = 0x06
    WAIT = 0x07
    COPY = 0x08
    VECTOR = 0x09
    TABLE = 0x0A
    TRANSPOSE = 0x0B
    SEND = 0x0C


class ErrorCode(enum.IntEnum):
    """Completion status codes.  ``OK`` is the only success."""

    OK = 0x00
    BAD_OPCODE = 0x01
    RESERVED_BITS = 0x02
    BAD_DIMENSION = 0x03
    BAD_FIELD = 0x04
    SPM_RANGE = 0x05
    ACC_RANGE = 0x06
    DMA_WINDOW = 0x07
    MISALIGNED = 0x08
    BUS_ERROR = 0x09
    SEM_RANGE = 0x0A
    RING_OVERFLOW = 0x0B
    DOORBELL_RANGE = 0x0C
    TIMEOUT = 0x0D
    LINK_DOWN = 0x0E
    LINK_CRC = 0x0F
    REMOTE_WINDOW = 0x10


ERROR_DOCS = {
    ErrorCode.OK: "The command completed.",
    ErrorCode.BAD_OPCODE: "The opcode is not one of the defined opcodes.",
    ErrorCode.RESERVED_BITS: "A bit that no field of this opcode defines is set.",
    ErrorCode.BAD_DIMENSION: "A count (rows, chunks, bytes) is zero.",
    ErrorCode.BAD_FIELD: "A scalar field is outside its legal range (for example a shift over 47).",
    ErrorCode.SPM_RANGE: "A scratchpad row range runs past the end of the scratchpad.",
    ErrorCode.ACC_RANGE: "An accumulator row range runs past the end of the accumulator buffer.",
    ErrorCode.DMA_WINDOW: "A device-memory range falls outside the queue's DMA window; nothing was moved.",
    ErrorCode.MISALIGNED: "A device-memory address or stride is not a multiple of the bus width.",
    ErrorCode.BUS_ERROR: "The memory bus answered with an error response.",
    ErrorCode.SEM_RANGE: "A semaphore index is past the last semaphore.",
    ErrorCode.RING_OVERFLOW: "The host moved the tail past the head (queue error status, not a completion).",
    ErrorCode.DOORBELL_RANGE: "The doorbell named an entry past the ring (queue error status, not a completion).",
    ErrorCode.TIMEOUT: "The queue's watchdog aborted the command: the unit running it made no progress for "
                       "QUEUE.WATCHDOG cycles.  Its effect may be partial; the queue halts with this code.",
    ErrorCode.LINK_DOWN: "SEND: the link port is down (no peer, or LINK.CONTROL force_down at either end). Down "
                         "when the SEND starts and still down 2 x LINK.LATENCY + 2 cycles later (the time a "
                         "mended port takes to come up): nothing was moved; going down during it: its effect may "
                         "be partial.",
    ErrorCode.LINK_CRC: "SEND: a frame failed its CRC on every one of its 1 + retries transmissions; what landed "
                        "stays, the peer's semaphore is not signalled.",
    ErrorCode.REMOTE_WINDOW: "SEND: the destination range falls outside the peer's link window (its LINK.WINDOW_BASE"
                             " and WINDOW_LIMIT); nothing was moved at the peer, its semaphore is not signalled.",
}

#: The order in which a command's fields are checked; the first failing check
#: gives the completion's status.  BUS_ERROR and TIMEOUT are not checks: they are
#: outcomes of a command that passed every check and started, and so are SEND's LINK_DOWN,
#: LINK_CRC and REMOTE_WINDOW (in that order when the link is down and the range is bad too).
CHECK_ORDER = (
    ErrorCode.BAD_OPCODE,
    ErrorCode.RESERVED_BITS,
    ErrorCode.BAD_DIMENSION,
    ErrorCode.BAD_FIELD,
    ErrorCode.SEM_RANGE,
    ErrorCode.SPM_RANGE,
    ErrorCode.ACC_RANGE,
    ErrorCode.MISALIGNED,
    ErrorCode.DMA_WINDOW,
)

HEADER = (
    Field("opcode", 0, 8, "Operation, one of `Opcode`."),
    Field("flags", 8, 8, "Per-opcode flag bits; undefined flag bits are reserved."),
    Field("tag", 16, 16, "Host-chosen tag, returned in the completion."),
)


@dataclass(frozen=True)
class Command:
    """One opcode's encoding: its fields after the common header and its flag bits."""

    opcode: Opcode
    doc: str
    fields: tuple[Field, ...] = ()
    flags: tuple[tuple[str, int, str], ...] = ()

    @cached_property
    def all_fields(self) -> tuple[Field, ...]:
        return HEADER + self.fields

    @cached_property
    def flag_mask(self) -> int:
        mask = 0
        for _name, bit, _doc in self.flags:
            mask |= 1 << bit
        return mask

    @cached_property
    def reserved_mask(self) -> int:
        """Bits of the command that must be zero (flag bits included); computed once per opcode (the
        golden model asks for every command it checks)."""
        used = 0
        for f in self.all_fields:
            used |= f.mask
        flags = HEADER[1]
        used &= ~flags.mask
        used |= self.flag_mask << flags.lsb
        return ((1 << COMMAND_BITS) - 1) & ~used

    def field(self, name: str) -> Field:
        for f in self.all_fields:
            if f.name == name:
                return f
        raise KeyError(f"{self.opcode.name} has no field {name!r}")

    def flag_bit(self, name: str) -> int:
        for flag, bit, _doc in self.flags:
            if flag == name:
                return bit
        raise KeyError(f"{self.opcode.name} has no flag {name!r}")


def _F(name: str, lsb: int, width: int, doc: str) -> Field:
    return Field(name, lsb, width, doc)


_MOVE_FIELDS = (
    _F("mem_addr", 64, 32, "Device-memory byte address of the first element; a multiple of 8."),
    _F("mem_stride", 96, 32, "Bytes between the starts of consecutive outer rows in device memory; a multiple of 8."),
    _F("local_addr", 128, 16, "First scratchpad or accumulator row."),
    _F("rows", 144, 16, "Outer count (>= 1)."),
    _F("cols", 160, 16, "Local rows per outer row, contiguous in device memory (>= 1)."),
    _F("local_row_stride", 176, 16, "Local-row step between outer rows."),
    _F("local_col_stride", 192, 16, "Local-row step between the local rows of one outer row."),
)
_MOVE_FLAGS = (
    ("acc", 0, "Local side is the accumulator buffer (int32 lanes) instead of the scratchpad (int8 lanes)."),
)

COMMANDS: dict[Opcode, Command] = {c.opcode: c for c in (
    Command(Opcode.NOP, "Does nothing; completes in order."),
    Command(
        Opcode.LOAD,
        "2-D strided move from device memory into the scratchpad or accumulator buffer. "
        "Outer row r, column c: device memory `mem_addr + r*mem_stride + c*row_bytes` goes to local row "
        "`local_addr + r*local_row_stride + c*local_col_stride`, where `row_bytes` is one local row "
        "(array size bytes in the scratchpad, 4x that in the accumulator buffer).",
        _MOVE_FIELDS, _MOVE_FLAGS,
    ),
    Command(
        Opcode.STORE,
        "2-D strided move from the scratchpad or accumulator buffer to device memory; the mirror of LOAD.",
        _MOVE_FIELDS, _MOVE_FLAGS,
    ),
    Command(
        Opcode.GEMM,
        "acc[c_addr + i] (+)= sum over chunks k of spm[a_addr + k*m + i] x B_k, for i < m, where n is the "
        "array size and B_k is the n x n int8 matrix in spm rows b_addr + k*n .. b_addr + k*n + n - 1 "
        "(row j holds B_k[j][:]). "
        "int8 x int8 products, int32 accumulation wrapping modulo 2^32.",
        (
            _F("a_addr", 64, 16, "Scratchpad row of the first activation row (chunk 0, row 0)."),
            _F("b_addr", 80, 16, "Scratchpad row of the first weight row (chunk 0, row 0)."),
            _F("c_addr", 96, 16, "Accumulator row of the first output row."),
            _F("m", 112, 16, "Activation rows (>= 1)."),
            _F("k_chunks", 128, 16, "Number of array-size chunks of the reduction dimension (>= 1)."),
        ),
        (("accumulate", 0, "Add to the accumulator rows instead of overwriting them."),),
    ),
    Command(
        Opcode.POSTOP,
        "spm[dst_addr + i] = requant(acc[src_addr + i]) for i < rows.  Per lane: x = sat32(acc + bias); "
        "x = max(x, 0) if relu; p = x * mult (exact); y = p >> shift rounded half away from zero "
        "(shift = 0: y = p); out = saturate y to [-128, 127].  bias is the accumulator row bias_addr when "
        "the bias flag is set, else 0.",
        (
            _F("src_addr", 64, 16, "First accumulator row read."),
            _F("dst_addr", 80, 16, "First scratchpad row written."),
            _F("rows", 96, 16, "Rows (>= 1)."),
            _F("bias_addr", 112, 16, "Accumulator row holding one int32 bias per lane (with the bias flag)."),
            _F("mult", 128, 16, "Unsigned requantisation multiplier."),
            _F("shift", 144, 6, "Right shift after the multiply, 0..47."),
        ),
        (("relu", 0, "Clamp negative values to zero before the multiply."),
         ("bias", 1, "Add the bias row before everything else.")),
    ),
    Command(Opcode.FENCE, "Waits until every earlier command of this queue has completed."),
    Command(
        Opcode.SIGNAL,
        "Adds `count` to semaphore `sem` once every earlier command of this queue has completed.",
        (_F("sem", 64, 8, "Semaphore index."), _F("count", 72, 16, "Increment.")),
    ),
    Command(
        Opcode.WAIT,
        "Waits until semaphore `sem` is at least `count`, then subtracts `count`.",
        (_F("sem", 64, 8, "Semaphore index."), _F("count", 72, 16, "Amount to take (>= 1).")),
    ),
    Command(
        Opcode.COPY,
        "Copies `length` bytes of device memory from src_addr to dst_addr (both in the DMA window).",
        (
            _F("src_addr", 64, 32, "Source byte address; a multiple of 8."),
            _F("dst_addr", 96, 32, "Destination byte address; a multiple of 8."),
            _F("length", 128, 32, "Bytes; a multiple of 8 (>= 8)."),
        ),
    ),
)}

_VECTOR_FIELDS = (
    _F("vop", 32, 8, "Vector operation, one of `VectorOp` (`spec/vector.py`)."),
    _F("shift", 40, 6, "Right shift (MUL, SHR, RECIP, TABLE lookup index) or left shift (SHL); each vop's limit "
       "is in `VECTOR_OPS`."),
    _F("cols", 48, 16, "Local rows per outer row (>= 1): one outer row is `cols` consecutive local rows."),
    _F("a_addr", 64, 16, "First local row of operand A."),
    _F("b_addr", 80, 16, "First local row of operand B (binary vops)."),
    _F("d_addr", 96, 16, "First local row of the destination D."),
    _F("rows", 112, 16, "Outer rows (>= 1)."),
    _F("a_row_stride", 128, 16, "Local-row step of A between outer rows."),
    _F("b_row_stride", 144, 16, "Local-row step of B between outer rows (0: one B row block for every outer row)."),
    _F("b_col_stride", 160, 16, "Local-row step of B between the local rows of one outer row (0: one B row "
       "broadcast along the outer row)."),
    _F("d_row_stride", 176, 16, "Local-row step of D between outer rows."),
    _F("imm", 192, 32, "Signed 32-bit immediate, two's complement: CLAMP's low bound, LUT's index offset."),
    _F("imm2", 224, 32, "Signed 32-bit immediate, two's complement: CLAMP's high bound."),
)
_VECTOR_FLAGS = (
    ("a_acc", 0, "A is in the accumulator buffer (int32 lanes) instead of the scratchpad (int8 lanes)."),
    ("b_acc", 1, "B is in the accumulator buffer."),
    ("d_acc", 2, "D is in the accumulator buffer; a result is saturated to D's lane type (int32 or int8)."),
)

COMMANDS[Opcode.VECTOR] = Command(
    Opcode.VECTOR,
    "Vector unit: `vop` over `rows` outer rows of `cols` local rows each, every lane at once. Operand X's local "
    "row for outer row r, column c is `x_addr + r*x_row_stride + c*x_col_stride` (A and D: column stride 1). "
    "Elementwise vops write D(r, c) = op(A(r, c), B(r, c)); reductions write one D row per outer row, every "
    "lane holding the statistic of all of A(r, :)'s lanes. Local rows are read and written in order (r, then "
    "c): a read sees every earlier write of the command. scratchpad lanes are int8, accumulator lanes int32; "
    "arithmetic is exact until the result is saturated to D's lane type. Fields and flags a vop does not use "
    "are reserved for it (`spec/vector.py`).",
    _VECTOR_FIELDS, _VECTOR_FLAGS,
)
COMMANDS[Opcode.TABLE] = Command(
    Opcode.TABLE,
    "Loads the vector unit's lookup table: entry j (int16, little-endian) is bytes 2*(j % (n/2)) and the next "
    "of scratchpad row `src_addr + j // (n/2)`, for j < TABLE_ENTRIES (n: the array size). The table is the "
    "tile's and is kept across resets.",
    (_F("src_addr", 64, 16, "First scratchpad row of the table."),),
)
COMMANDS[Opcode.TRANSPOSE] = Command(
    Opcode.TRANSPOSE,
    "For each block b < blocks: the n x n int8 block in scratchpad rows `src_addr + b*src_stride` .. +n-1 is "
    "written transposed to rows `dst_addr + b*dst_stride` .. +n-1 (dst[i][j] = src[j][i]), one block after "
    "the other, each read whole before it is written (n: the array size).",
    (
        _F("src_addr", 64, 16, "First scratchpad row of block 0."),
        _F("dst_addr", 80, 16, "First scratchpad row of block 0's transpose."),
        _F("blocks", 96, 16, "Blocks (>= 1)."),
        _F("src_stride", 112, 16, "Scratchpad-row step between source blocks."),
        _F("dst_stride", 128, 16, "Scratchpad-row step between destination blocks."),
    ),
)

COMMANDS[Opcode.SEND] = Command(
    Opcode.SEND,
    "Chip-to-chip DMA (`spec/chip_link.py`): sends `length` bytes of local device memory from `src_addr` (in "
    "this queue's DMA window) over link `port` (0: the next chip of the ring, 1: the previous one) into the "
    "peer's device memory at `dst_addr` (in the peer's link window), where `op` WRITE stores them and ADD adds "
    "them as int32 lanes, wrapping; once the last byte has landed, the peer adds `count` to its semaphore `sem` "
    "(count 0: no signal), and then the SEND completes here. A port carries one SEND at a time. Alignment as "
    "COPY. A chip without link ports (CAPS.link_ports = 0) completes SEND with BAD_OPCODE.",
    (
        _F("op", 32, 4, "`LinkOp`: 0 WRITE, 1 ADD; others are BAD_FIELD."),
        _F("port", 40, 4, "Link port: 0 next chip, 1 previous chip; others are BAD_FIELD."),
        _F("src_addr", 64, 32, "Local source byte address; a multiple of 8."),
        _F("dst_addr", 96, 32, "Peer's destination byte address; a multiple of 8."),
        _F("length", 128, 32, "Bytes; a multiple of 8 (>= 8)."),
        _F("sem", 160, 8, "Peer's semaphore index."),
        _F("count", 168, 16, "Amount added to the peer's semaphore after the last byte landed (0: none)."),
    ),
)

COMPLETION = (
    Field("tag", 0, 16, "The command's tag."),
    Field("status", 16, 8, "`ErrorCode`."),
    Field("opcode", 24, 8, "The command's opcode."),
    Field("timestamp", 32, 31, "Device cycle counter (low 31 bits) when the command completed."),
    Field("phase", 63, 1, "Phase bit, in the last byte written: flips each time the completion ring wraps, "
          "starting at 1."),
)


def _pack(fields, values: dict[str, int], what: str) -> int:
    by_name = {f.name: f for f in fields}
    word = 0
    for name, value in values.items():
        if name not in by_name:
            raise ValueError(f"{what} has no field {name!r}; fields are {sorted(by_name)}")
        f = by_name[name]
        value = int(value)
        if not 0 <= value < (1 << f.width):
            raise ValueError(f"{what} field {name!r} must fit in {f.width} bits unsigned, not {value!r}")
        word |= value << f.lsb
    return word


def pack_command(opcode: Opcode, *, tag: int = 0, flags: dict[str, bool] | None = None,
                 raw: int = 0, **fields: int) -> bytes:
    """Encode a command.  ``raw`` is OR-ed in unchecked (to build bad commands on purpose)."""
    cmd = COMMANDS[Opcode(opcode)]
    flag_bits = 0
    for name, on in (flags or {}).items():
        if on:
            flag_bits |= 1 << cmd.flag_bit(name)
    word = _pack(cmd.all_fields, {"opcode": int(opcode), "tag": tag, "flags": flag_bits, **fields},
                 cmd.opcode.name) | raw
    return word.to_bytes(COMMAND_BYTES, "little")


#: Decoded commands by their 256-bit word: the golden model and the fuzzer decode the same few hundred
#: words over and over.  Bounded: cleared when it reaches :data:`_DECODED_LIMIT` words.
_DECODED: dict[int, tuple[int, dict[str, int]]] = {}
_DECODED_LIMIT = 1 << 16


def unpack_command(data: bytes | int) -> tuple[int, dict[str, int]]:
    """Decode a command into its opcode byte and field values (header included); the dict is the caller's own."""
    word = int.from_bytes(data, "little") if isinstance(data, (bytes, bytearray)) else int(data)
    decoded = _DECODED.get(word)
    if decoded is None:
        opcode = HEADER[0].extract(word)
        fields = HEADER if opcode not in COMMANDS.keys() else COMMANDS[Opcode(opcode)].all_fields
        decoded = opcode, {f.name: f.extract(word) for f in fields}
        if len(_DECODED) >= _DECODED_LIMIT:
            _DECODED.clear()
        _DECODED[word] = decoded
    return decoded[0], dict(decoded[1])


def pack_completion(**values: int) -> bytes:
    return _pack(COMPLETION, values, "completion").to_bytes(COMPLETION_BYTES, "little")


def unpack_completion(data: bytes | int) -> dict[str, int]:
    word = int.from_bytes(data, "little") if isinstance(data, (bytes, bytearray)) else int(data)
    return {f.name: f.extract(word) for f in COMPLETION}
