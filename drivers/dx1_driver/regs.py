# generated from dx1_bringup/spec by `make rtl`; do not edit
"""DX-1 register map and command encoding, spec version 1.4.

Standalone (standard library only), so that the driver installs without the generator.
Registers are 32 bits wide.  Every register block starts with ID, VERSION and NEXT (byte offset of
the next block, 0 after the last); a driver finds the blocks by walking NEXT from offset 0 and
looks the ID up in ``BLOCK_CLASSES``.  Each block class gives register offsets within the block
and fields as ``(shift, width)`` pairs for :func:`get_field` and :func:`set_field`.

A command is ``COMMAND_BYTES`` bytes read as one little-endian integer; build one with the
function named after its opcode, for example ``gemm(tag=1, a_addr=0, b_addr=64, c_addr=0, m=8,
k_chunks=1)``, which checks that every value fits its field and leaves reserved bits zero.
"""

import enum
import operator

MAGIC = 0x44583131
SPEC_VERSION = 0x00010004
BLOCK_ALIGN = 0x100
COMMAND_BYTES = 32
COMPLETION_BYTES = 8
#: Bytes of one beat of the device-memory bus: DMA addresses and strides are multiples of it.
BUS_BYTES = 8

#: The configuration this module was generated for.
CONFIG: dict[str, object] = {
    "tiles": 2,
    "tile": {"array": 8, "spm_rows": 4096, "acc_rows": 1024, "vector": True},
    "mem_bytes": 1048576,
    "mem_banks": 4,
    "semaphores": 16,
    "trace_depth": 256,
    "link": None,
}

#: Block bases in CONFIG's register map; a driver should still walk the NEXT chain.
BLOCK_BASES: dict[str, int] = {
    "GLOBAL": 0x0000,
    "QUEUE0": 0x0100,
    "QUEUE1": 0x0200,
    "PERF0": 0x0300,
    "PERF1": 0x0400,
    "TRACE0": 0x0500,
    "TRACE1": 0x0600,
    "LINK": 0x0700,
}


class BlockType(enum.IntEnum):
    """Register block types, as read from each block's ID register."""

    GLOBAL = 0x44580001
    QUEUE = 0x44580002
    PERF = 0x44580003
    TRACE = 0x44580004
    LINK = 0x44580005


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
    TABLE = 0x0a
    TRANSPOSE = 0x0b
    SEND = 0x0c


class ErrorCode(enum.IntEnum):
    """Completion status codes; ``OK`` is the only success."""

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
    SEM_RANGE = 0x0a
    RING_OVERFLOW = 0x0b
    DOORBELL_RANGE = 0x0c
    TIMEOUT = 0x0d
    LINK_DOWN = 0x0e
    LINK_CRC = 0x0f
    REMOTE_WINDOW = 0x10


ERROR_DOCS: dict[ErrorCode, str] = {
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
    ErrorCode.TIMEOUT: (
        "The queue's watchdog aborted the command: the unit running it made no progress for QUEUE.WATCHDOG cycles.  "
        "Its effect may be partial; the queue halts with this code."
    ),
    ErrorCode.LINK_DOWN: (
        "SEND: the link port is down (no peer, or LINK.CONTROL force_down at either end). Down when the SEND starts "
        "and still down 2 x LINK.LATENCY + 2 cycles later (the time a mended port takes to come up): nothing was "
        "moved; going down during it: its effect may be partial."
    ),
    ErrorCode.LINK_CRC: (
        "SEND: a frame failed its CRC on every one of its 1 + retries transmissions; what landed stays, the peer's "
        "semaphore is not signalled."
    ),
    ErrorCode.REMOTE_WINDOW: (
        "SEND: the destination range falls outside the peer's link window (its LINK.WINDOW_BASE and WINDOW_LIMIT); "
        "nothing was moved at the peer, its semaphore is not signalled."
    ),
}

#: The order in which the device checks a command; the first failing check gives the status.
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


def get_field(value: int, field: tuple[int, int]) -> int:
    """Extract ``field``, a ``(shift, width)`` pair such as ``Queue.ERROR_CODE``, from a register value."""
    shift, width = field
    return (value >> shift) & ((1 << width) - 1)


def set_field(value: int, field: tuple[int, int], field_value: int) -> int:
    """Return register value ``value`` with ``field`` set to ``field_value``, which must fit in the field."""
    shift, width = field
    if not 0 <= field_value < 1 << width:
        raise ValueError(f"field value must fit in {width} bits unsigned, not {field_value!r}")
    return (value & ~(((1 << width) - 1) << shift)) | (field_value << shift)


class Global:
    """GLOBAL block (one per device): Identity, capabilities and device-wide controls.

    Register offsets within the block; fields as ``(shift, width)``.
    """

    TYPE = BlockType.GLOBAL
    BLOCK_VERSION = 0x00010000

    ID = 0x00
    VERSION = 0x04
    NEXT = 0x08
    MAGIC = 0x0c
    HW_VERSION = 0x10
    CAPS = 0x14
    CAPS_TILES = (0, 4)
    CAPS_ARRAY = (4, 5)
    CAPS_MEM_BANKS = (9, 5)
    CAPS_SEMAPHORES = (16, 9)
    CAPS_LINK_PORTS = (25, 2)
    SPM_ROWS = 0x18
    ACC_ROWS = 0x1c
    MEM_BYTES = 0x20
    FEATURES = 0x24
    FEATURES_POSTOP = (0, 1)
    FEATURES_COPY = (1, 1)
    FEATURES_TRACE = (2, 1)
    FEATURES_VECTOR = (3, 1)
    FEATURES_LINK = (4, 1)
    SCRATCH = 0x28
    CYCLES_LO = 0x2c
    CYCLES_HI = 0x30
    RESET = 0x34
    RESET_ALL = (0, 1)
    SEM = 0x38  # SEM0 .. SEM15: use sem(index)
    SEM_COUNT = 16
    SEM_VALUE = (0, 16)
    CHIP_ID = 0x78
    CHIP_ID_RANK = (0, 8)
    CHIP_ID_CHIPS = (8, 8)

    @staticmethod
    def sem(index: int) -> int:
        """Offset of SEM<index>."""
        if not 0 <= index < Global.SEM_COUNT:
            raise IndexError(f"SEM index must be 0 to {Global.SEM_COUNT - 1}, not {index!r}")
        return Global.SEM + 4 * index


class Queue:
    """QUEUE block (one per tile): One command queue, feeding one tile.

    Register offsets within the block; fields as ``(shift, width)``.
    """

    TYPE = BlockType.QUEUE
    BLOCK_VERSION = 0x00010000

    ID = 0x00
    VERSION = 0x04
    NEXT = 0x08
    RING_BASE = 0x0c
    RING_BASE_ADDR = (5, 27)
    RING_LOG2 = 0x10
    RING_LOG2_LOG2 = (0, 5)
    CQ_BASE = 0x14
    CQ_BASE_ADDR = (3, 29)
    HEAD = 0x18
    HEAD_INDEX = (0, 16)
    TAIL = 0x1c
    TAIL_INDEX = (0, 16)
    DOORBELL = 0x20
    DOORBELL_INDEX = (0, 16)
    CONTROL = 0x24
    CONTROL_ENABLE = (0, 1)
    CONTROL_RESUME = (1, 1)
    STATUS = 0x28
    STATUS_BUSY = (0, 1)
    STATUS_HALTED = (1, 1)
    STATUS_RESETTING = (2, 1)
    ERROR = 0x2c
    ERROR_CODE = (0, 8)
    ERROR_INDEX = (16, 16)
    IRQ_STATUS = 0x30
    IRQ_STATUS_COMPLETION = (0, 1)
    IRQ_STATUS_ERROR = (1, 1)
    IRQ_MASK = 0x34
    IRQ_MASK_COMPLETION = (0, 1)
    IRQ_MASK_ERROR = (1, 1)
    DMA_BASE = 0x38
    DMA_LIMIT = 0x3c
    DMA_LIMIT_LIMIT = (0, 32)
    WATCHDOG = 0x40
    WATCHDOG_CYCLES = (0, 32)
    RESET = 0x44
    RESET_TILE = (0, 1)


class Perf:
    """PERF block (one per tile): Performance counters of one tile (32-bit, wrapping).

    Register offsets within the block; fields as ``(shift, width)``.
    """

    TYPE = BlockType.PERF
    BLOCK_VERSION = 0x00010000

    ID = 0x00
    VERSION = 0x04
    NEXT = 0x08
    CONTROL = 0x0c
    CONTROL_CLEAR = (0, 1)
    CYCLES = 0x10
    BUSY_LOAD = 0x14
    BUSY_COMPUTE = 0x18
    BUSY_STORE = 0x1c
    MACS_LO = 0x20
    MACS_HI = 0x24
    STALL_DEP = 0x28
    STALL_MEM = 0x2c
    BYTES_READ = 0x30
    BYTES_WRITTEN = 0x34
    BUSY_VECTOR = 0x38
    TABLE_HITS = 0x3c
    TABLE_UNDERFLOWS = 0x40
    TABLE_OVERFLOWS = 0x44


class Trace:
    """TRACE block (one per tile): Trace buffer of one tile: timestamped command start/end events.

    Register offsets within the block; fields as ``(shift, width)``.
    """

    TYPE = BlockType.TRACE
    BLOCK_VERSION = 0x00010000

    ID = 0x00
    VERSION = 0x04
    NEXT = 0x08
    CONTROL = 0x0c
    CONTROL_ENABLE = (0, 1)
    CONTROL_CLEAR = (1, 1)
    COUNT = 0x10
    DATA_LO = 0x14
    DATA_HI = 0x18
    DATA_HI_TAG = (0, 16)
    DATA_HI_STATUS = (16, 8)
    DATA_HI_OPCODE = (24, 7)
    DATA_HI_END = (31, 1)


class Link:
    """LINK block (one per device): The chip-to-chip link ports (`spec/chip_link.py`): parameters, the
    receive window, control and counters, one register of each array per port (0: next chip, 1:
    previous chip).  A chip without a link (CAPS.link_ports = 0) reads 0 in every register here but
    WINDOW_BASE, WINDOW_LIMIT and CONTROL, which store what is written and act on nothing.

    Register offsets within the block; fields as ``(shift, width)``.
    """

    TYPE = BlockType.LINK
    BLOCK_VERSION = 0x00010000

    ID = 0x00
    VERSION = 0x04
    NEXT = 0x08
    CAPS = 0x0c
    CAPS_WIDTH = (0, 8)
    CAPS_CREDITS = (8, 8)
    CAPS_RETRIES = (16, 4)
    CAPS_MAX_PAYLOAD_LOG2 = (20, 4)
    LATENCY = 0x10
    LATENCY_CYCLES = (0, 12)
    WINDOW_BASE = 0x14
    WINDOW_LIMIT = 0x18
    WINDOW_LIMIT_LIMIT = (0, 32)
    CLEAR = 0x1c
    CLEAR_COUNTERS = (0, 1)
    CONTROL = 0x20  # CONTROL0 .. CONTROL1: use control(index)
    CONTROL_COUNT = 2
    CONTROL_FORCE_DOWN = (0, 1)
    CONTROL_CORRUPT = (8, 8)
    STATUS = 0x28  # STATUS0 .. STATUS1: use status(index)
    STATUS_COUNT = 2
    STATUS_UP = (0, 1)
    STATUS_BUSY = (1, 1)
    TX_PACKETS = 0x30  # TX_PACKETS0 .. TX_PACKETS1: use tx_packets(index)
    TX_PACKETS_COUNT = 2
    RX_PACKETS = 0x38  # RX_PACKETS0 .. RX_PACKETS1: use rx_packets(index)
    RX_PACKETS_COUNT = 2
    RETRIES = 0x40  # RETRIES0 .. RETRIES1: use retries(index)
    RETRIES_COUNT = 2
    CRC_ERRORS = 0x48  # CRC_ERRORS0 .. CRC_ERRORS1: use crc_errors(index)
    CRC_ERRORS_COUNT = 2
    CREDIT_STALLS = 0x50  # CREDIT_STALLS0 .. CREDIT_STALLS1: use credit_stalls(index)
    CREDIT_STALLS_COUNT = 2

    @staticmethod
    def control(index: int) -> int:
        """Offset of CONTROL<index>."""
        if not 0 <= index < Link.CONTROL_COUNT:
            raise IndexError(f"CONTROL index must be 0 to {Link.CONTROL_COUNT - 1}, not {index!r}")
        return Link.CONTROL + 4 * index

    @staticmethod
    def status(index: int) -> int:
        """Offset of STATUS<index>."""
        if not 0 <= index < Link.STATUS_COUNT:
            raise IndexError(f"STATUS index must be 0 to {Link.STATUS_COUNT - 1}, not {index!r}")
        return Link.STATUS + 4 * index

    @staticmethod
    def tx_packets(index: int) -> int:
        """Offset of TX_PACKETS<index>."""
        if not 0 <= index < Link.TX_PACKETS_COUNT:
            raise IndexError(f"TX_PACKETS index must be 0 to {Link.TX_PACKETS_COUNT - 1}, not {index!r}")
        return Link.TX_PACKETS + 4 * index

    @staticmethod
    def rx_packets(index: int) -> int:
        """Offset of RX_PACKETS<index>."""
        if not 0 <= index < Link.RX_PACKETS_COUNT:
            raise IndexError(f"RX_PACKETS index must be 0 to {Link.RX_PACKETS_COUNT - 1}, not {index!r}")
        return Link.RX_PACKETS + 4 * index

    @staticmethod
    def retries(index: int) -> int:
        """Offset of RETRIES<index>."""
        if not 0 <= index < Link.RETRIES_COUNT:
            raise IndexError(f"RETRIES index must be 0 to {Link.RETRIES_COUNT - 1}, not {index!r}")
        return Link.RETRIES + 4 * index

    @staticmethod
    def crc_errors(index: int) -> int:
        """Offset of CRC_ERRORS<index>."""
        if not 0 <= index < Link.CRC_ERRORS_COUNT:
            raise IndexError(f"CRC_ERRORS index must be 0 to {Link.CRC_ERRORS_COUNT - 1}, not {index!r}")
        return Link.CRC_ERRORS + 4 * index

    @staticmethod
    def credit_stalls(index: int) -> int:
        """Offset of CREDIT_STALLS<index>."""
        if not 0 <= index < Link.CREDIT_STALLS_COUNT:
            raise IndexError(f"CREDIT_STALLS index must be 0 to {Link.CREDIT_STALLS_COUNT - 1}, not {index!r}")
        return Link.CREDIT_STALLS + 4 * index


#: Which class describes a block, by the value of its ID register.
BLOCK_CLASSES: dict[BlockType, type] = {
    BlockType.GLOBAL: Global,
    BlockType.QUEUE: Queue,
    BlockType.PERF: Perf,
    BlockType.TRACE: Trace,
    BlockType.LINK: Link,
}

#: Fields of each command, the common header included: name -> (lsb, width).
COMMAND_FIELDS: dict[Opcode, dict[str, tuple[int, int]]] = {
    Opcode.NOP: {"opcode": (0, 8), "flags": (8, 8), "tag": (16, 16)},
    Opcode.LOAD: {
        "opcode": (0, 8),
        "flags": (8, 8),
        "tag": (16, 16),
        "mem_addr": (64, 32),
        "mem_stride": (96, 32),
        "local_addr": (128, 16),
        "rows": (144, 16),
        "cols": (160, 16),
        "local_row_stride": (176, 16),
        "local_col_stride": (192, 16),
    },
    Opcode.STORE: {
        "opcode": (0, 8),
        "flags": (8, 8),
        "tag": (16, 16),
        "mem_addr": (64, 32),
        "mem_stride": (96, 32),
        "local_addr": (128, 16),
        "rows": (144, 16),
        "cols": (160, 16),
        "local_row_stride": (176, 16),
        "local_col_stride": (192, 16),
    },
    Opcode.GEMM: {
        "opcode": (0, 8),
        "flags": (8, 8),
        "tag": (16, 16),
        "a_addr": (64, 16),
        "b_addr": (80, 16),
        "c_addr": (96, 16),
        "m": (112, 16),
        "k_chunks": (128, 16),
    },
    Opcode.POSTOP: {
        "opcode": (0, 8),
        "flags": (8, 8),
        "tag": (16, 16),
        "src_addr": (64, 16),
        "dst_addr": (80, 16),
        "rows": (96, 16),
        "bias_addr": (112, 16),
        "mult": (128, 16),
        "shift": (144, 6),
    },
    Opcode.FENCE: {"opcode": (0, 8), "flags": (8, 8), "tag": (16, 16)},
    Opcode.SIGNAL: {"opcode": (0, 8), "flags": (8, 8), "tag": (16, 16), "sem": (64, 8), "count": (72, 16)},
    Opcode.WAIT: {"opcode": (0, 8), "flags": (8, 8), "tag": (16, 16), "sem": (64, 8), "count": (72, 16)},
    Opcode.COPY: {
        "opcode": (0, 8),
        "flags": (8, 8),
        "tag": (16, 16),
        "src_addr": (64, 32),
        "dst_addr": (96, 32),
        "length": (128, 32),
    },
    Opcode.VECTOR: {
        "opcode": (0, 8),
        "flags": (8, 8),
        "tag": (16, 16),
        "vop": (32, 8),
        "shift": (40, 6),
        "cols": (48, 16),
        "a_addr": (64, 16),
        "b_addr": (80, 16),
        "d_addr": (96, 16),
        "rows": (112, 16),
        "a_row_stride": (128, 16),
        "b_row_stride": (144, 16),
        "b_col_stride": (160, 16),
        "d_row_stride": (176, 16),
        "imm": (192, 32),
        "imm2": (224, 32),
    },
    Opcode.TABLE: {"opcode": (0, 8), "flags": (8, 8), "tag": (16, 16), "src_addr": (64, 16)},
    Opcode.TRANSPOSE: {
        "opcode": (0, 8),
        "flags": (8, 8),
        "tag": (16, 16),
        "src_addr": (64, 16),
        "dst_addr": (80, 16),
        "blocks": (96, 16),
        "src_stride": (112, 16),
        "dst_stride": (128, 16),
    },
    Opcode.SEND: {
        "opcode": (0, 8),
        "flags": (8, 8),
        "tag": (16, 16),
        "op": (32, 4),
        "port": (40, 4),
        "src_addr": (64, 32),
        "dst_addr": (96, 32),
        "length": (128, 32),
        "sem": (160, 8),
        "count": (168, 16),
    },
}

#: Flag bits of each command, numbered within its flags field.
COMMAND_FLAGS: dict[Opcode, dict[str, int]] = {
    Opcode.NOP: {},
    Opcode.LOAD: {"acc": 0},
    Opcode.STORE: {"acc": 0},
    Opcode.GEMM: {"accumulate": 0},
    Opcode.POSTOP: {"relu": 0, "bias": 1},
    Opcode.FENCE: {},
    Opcode.SIGNAL: {},
    Opcode.WAIT: {},
    Opcode.COPY: {},
    Opcode.VECTOR: {"a_acc": 0, "b_acc": 1, "d_acc": 2},
    Opcode.TABLE: {},
    Opcode.TRANSPOSE: {},
    Opcode.SEND: {},
}

#: Bits of each command that must be zero, undefined flag bits included.
RESERVED_MASK: dict[Opcode, int] = {
    Opcode.NOP: 0xffffffffffffffff_ffffffffffffffff_ffffffffffffffff_ffffffff0000ff00,
    Opcode.LOAD: 0xffffffffffff0000_0000000000000000_0000000000000000_ffffffff0000fe00,
    Opcode.STORE: 0xffffffffffff0000_0000000000000000_0000000000000000_ffffffff0000fe00,
    Opcode.GEMM: 0xffffffffffffffff_ffffffffffff0000_0000000000000000_ffffffff0000fe00,
    Opcode.POSTOP: 0xffffffffffffffff_ffffffffffc00000_0000000000000000_ffffffff0000fc00,
    Opcode.FENCE: 0xffffffffffffffff_ffffffffffffffff_ffffffffffffffff_ffffffff0000ff00,
    Opcode.SIGNAL: 0xffffffffffffffff_ffffffffffffffff_ffffffffff000000_ffffffff0000ff00,
    Opcode.WAIT: 0xffffffffffffffff_ffffffffffffffff_ffffffffff000000_ffffffff0000ff00,
    Opcode.COPY: 0xffffffffffffffff_ffffffff00000000_0000000000000000_ffffffff0000ff00,
    Opcode.VECTOR: 0x0000000000000000_0000000000000000_0000000000000000_0000c0000000f800,
    Opcode.TABLE: 0xffffffffffffffff_ffffffffffffffff_ffffffffffff0000_ffffffff0000ff00,
    Opcode.TRANSPOSE: 0xffffffffffffffff_ffffffffffff0000_0000000000000000_ffffffff0000ff00,
    Opcode.SEND: 0xffffffffffffffff_ff00000000000000_0000000000000000_fffff0f00000ff00,
}

#: Fields of a completion entry: name -> (lsb, width).
COMPLETION_FIELDS: dict[str, tuple[int, int]] = {
    "tag": (0, 16),
    "status": (16, 8),
    "opcode": (24, 8),
    "timestamp": (32, 31),
    "phase": (63, 1),
}


def _pack(opcode: Opcode, fields: dict[str, int], flags: dict[str, bool]) -> bytes:
    """Encode a command; every field value must fit in its field."""
    flag_bits = sum(1 << COMMAND_FLAGS[opcode][name] for name, on in flags.items() if on)
    word = 0
    for name, value in {"opcode": opcode.value, "flags": flag_bits, **fields}.items():
        lsb, width = COMMAND_FIELDS[opcode][name]
        try:
            value = operator.index(value)
        except TypeError:
            raise TypeError(f"{opcode.name} field {name!r} must be an integer, not {value!r}") from None
        if not 0 <= value < 1 << width:
            raise ValueError(f"{opcode.name} field {name!r} must fit in {width} bits unsigned, not {value!r}")
        word |= value << lsb
    return word.to_bytes(COMMAND_BYTES, "little")


def unpack_completion(data: bytes) -> dict[str, int]:
    """Decode one completion entry of ``COMPLETION_BYTES`` bytes into its field values."""
    if len(data) != COMPLETION_BYTES:
        raise ValueError(f"a completion entry is {COMPLETION_BYTES} bytes, not {len(data)}")
    word = int.from_bytes(data, "little")
    return {name: get_field(word, field) for name, field in COMPLETION_FIELDS.items()}


def nop(*, tag: int) -> bytes:
    """Build a NOP command (opcode 0x00).

    Does nothing; completes in order.

    Parameters
    ----------
    tag : int
        Host-chosen tag, returned in the completion.

    Returns
    -------
    bytes
        The 32-byte command, ready for the ring.
    """
    fields = {"tag": tag}
    return _pack(Opcode.NOP, fields, {})


def load(
    *,
    tag: int,
    mem_addr: int,
    mem_stride: int,
    local_addr: int,
    rows: int,
    cols: int,
    local_row_stride: int,
    local_col_stride: int,
    acc: bool = False,
) -> bytes:
    """Build a LOAD command (opcode 0x01).

    2-D strided move from device memory into the scratchpad or accumulator buffer. Outer row r,
    column c: device memory `mem_addr + r*mem_stride + c*row_bytes` goes to local row `local_addr +
    r*local_row_stride + c*local_col_stride`, where `row_bytes` is one local row (array size bytes
    in the scratchpad, 4x that in the accumulator buffer).

    Parameters
    ----------
    tag : int
        Host-chosen tag, returned in the completion.
    mem_addr : int
        Device-memory byte address of the first element; a multiple of 8.
    mem_stride : int
        Bytes between the starts of consecutive outer rows in device memory; a multiple of 8.
    local_addr : int
        First scratchpad or accumulator row.
    rows : int
        Outer count (>= 1).
    cols : int
        Local rows per outer row, contiguous in device memory (>= 1).
    local_row_stride : int
        Local-row step between outer rows.
    local_col_stride : int
        Local-row step between the local rows of one outer row.
    acc : bool
        Flag: Local side is the accumulator buffer (int32 lanes) instead of the scratchpad (int8
        lanes).

    Returns
    -------
    bytes
        The 32-byte command, ready for the ring.
    """
    fields = {
        "tag": tag,
        "mem_addr": mem_addr,
        "mem_stride": mem_stride,
        "local_addr": local_addr,
        "rows": rows,
        "cols": cols,
        "local_row_stride": local_row_stride,
        "local_col_stride": local_col_stride,
    }
    return _pack(Opcode.LOAD, fields, {"acc": acc})


def store(
    *,
    tag: int,
    mem_addr: int,
    mem_stride: int,
    local_addr: int,
    rows: int,
    cols: int,
    local_row_stride: int,
    local_col_stride: int,
    acc: bool = False,
) -> bytes:
    """Build a STORE command (opcode 0x02).

    2-D strided move from the scratchpad or accumulator buffer to device memory; the mirror of LOAD.

    Parameters
    ----------
    tag : int
        Host-chosen tag, returned in the completion.
    mem_addr : int
        Device-memory byte address of the first element; a multiple of 8.
    mem_stride : int
        Bytes between the starts of consecutive outer rows in device memory; a multiple of 8.
    local_addr : int
        First scratchpad or accumulator row.
    rows : int
        Outer count (>= 1).
    cols : int
        Local rows per outer row, contiguous in device memory (>= 1).
    local_row_stride : int
        Local-row step between outer rows.
    local_col_stride : int
        Local-row step between the local rows of one outer row.
    acc : bool
        Flag: Local side is the accumulator buffer (int32 lanes) instead of the scratchpad (int8
        lanes).

    Returns
    -------
    bytes
        The 32-byte command, ready for the ring.
    """
    fields = {
        "tag": tag,
        "mem_addr": mem_addr,
        "mem_stride": mem_stride,
        "local_addr": local_addr,
        "rows": rows,
        "cols": cols,
        "local_row_stride": local_row_stride,
        "local_col_stride": local_col_stride,
    }
    return _pack(Opcode.STORE, fields, {"acc": acc})


def gemm(*, tag: int, a_addr: int, b_addr: int, c_addr: int, m: int, k_chunks: int, accumulate: bool = False) -> bytes:
    """Build a GEMM command (opcode 0x03).

    acc[c_addr + i] (+)= sum over chunks k of spm[a_addr + k*m + i] x B_k, for i < m, where n is the
    array size and B_k is the n x n int8 matrix in spm rows b_addr + k*n .. b_addr + k*n + n - 1
    (row j holds B_k[j][:]). int8 x int8 products, int32 accumulation wrapping modulo 2^32.

    Parameters
    ----------
    tag : int
        Host-chosen tag, returned in the completion.
    a_addr : int
        Scratchpad row of the first activation row (chunk 0, row 0).
    b_addr : int
        Scratchpad row of the first weight row (chunk 0, row 0).
    c_addr : int
        Accumulator row of the first output row.
    m : int
        Activation rows (>= 1).
    k_chunks : int
        Number of array-size chunks of the reduction dimension (>= 1).
    accumulate : bool
        Flag: Add to the accumulator rows instead of overwriting them.

    Returns
    -------
    bytes
        The 32-byte command, ready for the ring.
    """
    fields = {"tag": tag, "a_addr": a_addr, "b_addr": b_addr, "c_addr": c_addr, "m": m, "k_chunks": k_chunks}
    return _pack(Opcode.GEMM, fields, {"accumulate": accumulate})


def postop(
    *,
    tag: int,
    src_addr: int,
    dst_addr: int,
    rows: int,
    bias_addr: int,
    mult: int,
    shift: int,
    relu: bool = False,
    bias: bool = False,
) -> bytes:
    """Build a POSTOP command (opcode 0x04).

    spm[dst_addr + i] = requant(acc[src_addr + i]) for i < rows.  Per lane: x = sat32(acc + bias); x
    = max(x, 0) if relu; p = x * mult (exact); y = p >> shift rounded half away from zero (shift =
    0: y = p); out = saturate y to [-128, 127].  bias is the accumulator row bias_addr when the bias
    flag is set, else 0.

    Parameters
    ----------
    tag : int
        Host-chosen tag, returned in the completion.
    src_addr : int
        First accumulator row read.
    dst_addr : int
        First scratchpad row written.
    rows : int
        Rows (>= 1).
    bias_addr : int
        Accumulator row holding one int32 bias per lane (with the bias flag).
    mult : int
        Unsigned requantisation multiplier.
    shift : int
        Right shift after the multiply, 0..47.
    relu : bool
        Flag: Clamp negative values to zero before the multiply.
    bias : bool
        Flag: Add the bias row before everything else.

    Returns
    -------
    bytes
        The 32-byte command, ready for the ring.
    """
    fields = {
        "tag": tag,
        "src_addr": src_addr,
        "dst_addr": dst_addr,
        "rows": rows,
        "bias_addr": bias_addr,
        "mult": mult,
        "shift": shift,
    }
    return _pack(Opcode.POSTOP, fields, {"relu": relu, "bias": bias})


def fence(*, tag: int) -> bytes:
    """Build a FENCE command (opcode 0x05).

    Waits until every earlier command of this queue has completed.

    Parameters
    ----------
    tag : int
        Host-chosen tag, returned in the completion.

    Returns
    -------
    bytes
        The 32-byte command, ready for the ring.
    """
    fields = {"tag": tag}
    return _pack(Opcode.FENCE, fields, {})


def signal(*, tag: int, sem: int, count: int) -> bytes:
    """Build a SIGNAL command (opcode 0x06).

    Adds `count` to semaphore `sem` once every earlier command of this queue has completed.

    Parameters
    ----------
    tag : int
        Host-chosen tag, returned in the completion.
    sem : int
        Semaphore index.
    count : int
        Increment.

    Returns
    -------
    bytes
        The 32-byte command, ready for the ring.
    """
    fields = {"tag": tag, "sem": sem, "count": count}
    return _pack(Opcode.SIGNAL, fields, {})


def wait(*, tag: int, sem: int, count: int) -> bytes:
    """Build a WAIT command (opcode 0x07).

    Waits until semaphore `sem` is at least `count`, then subtracts `count`.

    Parameters
    ----------
    tag : int
        Host-chosen tag, returned in the completion.
    sem : int
        Semaphore index.
    count : int
        Amount to take (>= 1).

    Returns
    -------
    bytes
        The 32-byte command, ready for the ring.
    """
    fields = {"tag": tag, "sem": sem, "count": count}
    return _pack(Opcode.WAIT, fields, {})


def copy(*, tag: int, src_addr: int, dst_addr: int, length: int) -> bytes:
    """Build a COPY command (opcode 0x08).

    Copies `length` bytes of device memory from src_addr to dst_addr (both in the DMA window).

    Parameters
    ----------
    tag : int
        Host-chosen tag, returned in the completion.
    src_addr : int
        Source byte address; a multiple of 8.
    dst_addr : int
        Destination byte address; a multiple of 8.
    length : int
        Bytes; a multiple of 8 (>= 8).

    Returns
    -------
    bytes
        The 32-byte command, ready for the ring.
    """
    fields = {"tag": tag, "src_addr": src_addr, "dst_addr": dst_addr, "length": length}
    return _pack(Opcode.COPY, fields, {})


def vector(
    *,
    tag: int,
    vop: int,
    shift: int,
    cols: int,
    a_addr: int,
    b_addr: int,
    d_addr: int,
    rows: int,
    a_row_stride: int,
    b_row_stride: int,
    b_col_stride: int,
    d_row_stride: int,
    imm: int,
    imm2: int,
    a_acc: bool = False,
    b_acc: bool = False,
    d_acc: bool = False,
) -> bytes:
    """Build a VECTOR command (opcode 0x09).

    Vector unit: `vop` over `rows` outer rows of `cols` local rows each, every lane at once. Operand
    X's local row for outer row r, column c is `x_addr + r*x_row_stride + c*x_col_stride` (A and D:
    column stride 1). Elementwise vops write D(r, c) = op(A(r, c), B(r, c)); reductions write one D
    row per outer row, every lane holding the statistic of all of A(r, :)'s lanes. Local rows are
    read and written in order (r, then c): a read sees every earlier write of the command.
    scratchpad lanes are int8, accumulator lanes int32; arithmetic is exact until the result is
    saturated to D's lane type. Fields and flags a vop does not use are reserved for it
    (`spec/vector.py`).

    Parameters
    ----------
    tag : int
        Host-chosen tag, returned in the completion.
    vop : int
        Vector operation, one of `VectorOp` (`spec/vector.py`).
    shift : int
        Right shift (MUL, SHR, RECIP, TABLE lookup index) or left shift (SHL); each vop's limit is
        in `VECTOR_OPS`.
    cols : int
        Local rows per outer row (>= 1): one outer row is `cols` consecutive local rows.
    a_addr : int
        First local row of operand A.
    b_addr : int
        First local row of operand B (binary vops).
    d_addr : int
        First local row of the destination D.
    rows : int
        Outer rows (>= 1).
    a_row_stride : int
        Local-row step of A between outer rows.
    b_row_stride : int
        Local-row step of B between outer rows (0: one B row block for every outer row).
    b_col_stride : int
        Local-row step of B between the local rows of one outer row (0: one B row broadcast along
        the outer row).
    d_row_stride : int
        Local-row step of D between outer rows.
    imm : int
        Signed 32-bit immediate, two's complement: CLAMP's low bound, LUT's index offset.
    imm2 : int
        Signed 32-bit immediate, two's complement: CLAMP's high bound.
    a_acc : bool
        Flag: A is in the accumulator buffer (int32 lanes) instead of the scratchpad (int8 lanes).
    b_acc : bool
        Flag: B is in the accumulator buffer.
    d_acc : bool
        Flag: D is in the accumulator buffer; a result is saturated to D's lane type (int32 or
        int8).

    Returns
    -------
    bytes
        The 32-byte command, ready for the ring.
    """
    fields = {
        "tag": tag,
        "vop": vop,
        "shift": shift,
        "cols": cols,
        "a_addr": a_addr,
        "b_addr": b_addr,
        "d_addr": d_addr,
        "rows": rows,
        "a_row_stride": a_row_stride,
        "b_row_stride": b_row_stride,
        "b_col_stride": b_col_stride,
        "d_row_stride": d_row_stride,
        "imm": imm,
        "imm2": imm2,
    }
    return _pack(Opcode.VECTOR, fields, {"a_acc": a_acc, "b_acc": b_acc, "d_acc": d_acc})


def table(*, tag: int, src_addr: int) -> bytes:
    """Build a TABLE command (opcode 0x0a).

    Loads the vector unit's lookup table: entry j (int16, little-endian) is bytes 2*(j % (n/2)) and
    the next of scratchpad row `src_addr + j // (n/2)`, for j < TABLE_ENTRIES (n: the array size).
    The table is the tile's and is kept across resets.

    Parameters
    ----------
    tag : int
        Host-chosen tag, returned in the completion.
    src_addr : int
        First scratchpad row of the table.

    Returns
    -------
    bytes
        The 32-byte command, ready for the ring.
    """
    fields = {"tag": tag, "src_addr": src_addr}
    return _pack(Opcode.TABLE, fields, {})


def transpose(*, tag: int, src_addr: int, dst_addr: int, blocks: int, src_stride: int, dst_stride: int) -> bytes:
    """Build a TRANSPOSE command (opcode 0x0b).

    For each block b < blocks: the n x n int8 block in scratchpad rows `src_addr + b*src_stride` ..
    +n-1 is written transposed to rows `dst_addr + b*dst_stride` .. +n-1 (dst[i][j] = src[j][i]),
    one block after the other, each read whole before it is written (n: the array size).

    Parameters
    ----------
    tag : int
        Host-chosen tag, returned in the completion.
    src_addr : int
        First scratchpad row of block 0.
    dst_addr : int
        First scratchpad row of block 0's transpose.
    blocks : int
        Blocks (>= 1).
    src_stride : int
        Scratchpad-row step between source blocks.
    dst_stride : int
        Scratchpad-row step between destination blocks.

    Returns
    -------
    bytes
        The 32-byte command, ready for the ring.
    """
    fields = {
        "tag": tag,
        "src_addr": src_addr,
        "dst_addr": dst_addr,
        "blocks": blocks,
        "src_stride": src_stride,
        "dst_stride": dst_stride,
    }
    return _pack(Opcode.TRANSPOSE, fields, {})


def send(*, tag: int, op: int, port: int, src_addr: int, dst_addr: int, length: int, sem: int, count: int) -> bytes:
    """Build a SEND command (opcode 0x0c).

    Chip-to-chip DMA (`spec/chip_link.py`): sends `length` bytes of local device memory from
    `src_addr` (in this queue's DMA window) over link `port` (0: the next chip of the ring, 1: the
    previous one) into the peer's device memory at `dst_addr` (in the peer's link window), where
    `op` WRITE stores them and ADD adds them as int32 lanes, wrapping; once the last byte has
    landed, the peer adds `count` to its semaphore `sem` (count 0: no signal), and then the SEND
    completes here. A port carries one SEND at a time. Alignment as COPY. A chip without link ports
    (CAPS.link_ports = 0) completes SEND with BAD_OPCODE.

    Parameters
    ----------
    tag : int
        Host-chosen tag, returned in the completion.
    op : int
        `LinkOp`: 0 WRITE, 1 ADD; others are BAD_FIELD.
    port : int
        Link port: 0 next chip, 1 previous chip; others are BAD_FIELD.
    src_addr : int
        Local source byte address; a multiple of 8.
    dst_addr : int
        Peer's destination byte address; a multiple of 8.
    length : int
        Bytes; a multiple of 8 (>= 8).
    sem : int
        Peer's semaphore index.
    count : int
        Amount added to the peer's semaphore after the last byte landed (0: none).

    Returns
    -------
    bytes
        The 32-byte command, ready for the ring.
    """
    fields = {
        "tag": tag,
        "op": op,
        "port": port,
        "src_addr": src_addr,
        "dst_addr": dst_addr,
        "length": length,
        "sem": sem,
        "count": count,
    }
    return _pack(Opcode.SEND, fields, {})
