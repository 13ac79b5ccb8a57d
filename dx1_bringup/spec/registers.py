"""The register map: self-describing blocks placed by a builder, never by hand.

Every block starts with three words, as in Corundum's register blocks: ``ID``
(what the block is), ``VERSION`` and ``NEXT`` (byte offset of the next block,
0 after the last).  Registers are 32 bits wide and get consecutive offsets in
the order they are listed; blocks are placed one after another at
``BLOCK_ALIGN`` boundaries.  A driver finds everything by walking ``NEXT``
from offset 0.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from .chip_link import LINK_PORTS
from .config import SocConfig
from .sizes import align_up

__all__ = [
    "Access", "RegField", "Register", "BlockType", "BlockSpec", "PlacedRegister", "PlacedBlock",
    "RegisterMap", "BLOCKS", "MAGIC", "SPEC_VERSION", "SPEC_HISTORY", "VERSIONS_EXPLAINED", "BLOCK_ALIGN",
    "register_map",
]

MAGIC = 0x44583131  # "DX11" read as big-endian ASCII
SPEC_VERSION = 0x0001_0004  # major.minor in 16.16

#: What each spec version changed, oldest first: ``(version, change)``, the last one :data:`SPEC_VERSION`.
SPEC_HISTORY: tuple[tuple[int, str], ...] = (
    (0x0001_0000, "the first spec"),
    (0x0001_0001, "CAPS.mem_banks (banked device memory) in bits 9-13 of CAPS, which read 0 before; a burst "
                  "crossing a 4 KiB page answers SLVERR"),
    (0x0001_0002, "the LOAD/STORE address and stride fields are named mem_addr/mem_stride (device memory, not "
                  "DRAM), in the same bits; captures of 1.1 are refused by their spec version"),
    (0x0001_0003, "the vector unit: VECTOR, TABLE and TRANSPOSE commands (opcodes 0x09-0x0B, which completed "
                  "BAD_OPCODE before), FEATURES.vector, and the PERF registers BUSY_VECTOR, TABLE_HITS, "
                  "TABLE_UNDERFLOWS and TABLE_OVERFLOWS after the 1.2 ones"),
    (0x0001_0004, "the chip-to-chip link: the SEND command (opcode 0x0C, which completed BAD_OPCODE before), "
                  "error codes LINK_DOWN, LINK_CRC and REMOTE_WINDOW, CAPS.link_ports, FEATURES.link, "
                  "GLOBAL.CHIP_ID after the semaphores, and the LINK block after the TRACE blocks; the link's "
                  "frames are in spec/chip_link.py"),
)

#: Why the blocks' VERSION registers can read less than the spec version (``dx1 info`` and the register reference).
VERSIONS_EXPLAINED = (
    "The spec version (GLOBAL HW_VERSION) covers the whole interface: command encoding, error codes, register "
    "map and host links; a driver needs the same major version. A block's VERSION register counts changes to "
    "that block's own registers that a driver must know about; no block has had one, so every block reads 1.0 "
    "under spec 1.4: 1.1 only filled CAPS bits that read 0 before, 1.2 only renamed command fields, 1.3 added "
    "commands, a FEATURES bit and PERF registers after the existing ones, none of which a 1.2 driver reads; 1.4 "
    "added a command, CAPS and FEATURES bits that read 0 before, a GLOBAL register after the existing ones and "
    "a new block (LINK, version 1.0)."
)
BLOCK_ALIGN = 0x100


class Access(enum.Enum):
    RO = "ro"      # read only; writes get SLVERR
    RW = "rw"      # read and write
    WO = "wo"      # write only; reads get SLVERR
    W1C = "w1c"    # read; writing 1 to a bit clears it


@dataclass(frozen=True)
class RegField:
    name: str
    lsb: int
    width: int
    doc: str
    reset: int = 0

    @property
    def mask(self) -> int:
        return ((1 << self.width) - 1) << self.lsb

    def extract(self, word: int) -> int:
        """The field's value in register value ``word``."""
        return (word >> self.lsb) & ((1 << self.width) - 1)


@dataclass(frozen=True)
class Register:
    name: str
    access: Access
    doc: str
    fields: tuple[RegField, ...] = ()
    count: int = 1
    array: bool = False  # an array of registers NAME0..NAME{count-1}, even when count is 1

    @property
    def reset(self) -> int:
        return sum(f.reset << f.lsb for f in self.fields)

    def field(self, name: str) -> RegField:
        """The field called ``name``; ``KeyError`` if the register has none."""
        for f in self.fields:
            if f.name == name:
                return f
        raise KeyError(f"register {self.name} has no field {name!r}")

    def pack(self, **values: int) -> int:
        """A register value with the named fields set; ``ValueError`` if a value does not fit its field."""
        word = 0
        for name, value in values.items():
            f = self.field(name)
            if not 0 <= value < 1 << f.width:
                raise ValueError(f"{name} = {value} does not fit {self.name}.{name} ({f.width} bits)")
            word |= value << f.lsb
        return word

    @property
    def writable_mask(self) -> int:
        if self.access in (Access.RO,):
            return 0
        if not self.fields:
            return 0xFFFF_FFFF
        return sum(f.mask for f in self.fields)


class BlockType(enum.IntEnum):
    GLOBAL = 0x4458_0001
    QUEUE = 0x4458_0002
    PERF = 0x4458_0003
    TRACE = 0x4458_0004
    LINK = 0x4458_0005


def _R(name, access, doc, *fields, count=None):
    return Register(name, access, doc, tuple(RegField(*f) for f in fields), count or 1, count is not None)


HEADER_REGISTERS = (
    _R("ID", Access.RO, "Block type (`BlockType`)."),
    _R("VERSION", Access.RO, "Block version, major.minor in 16.16."),
    _R("NEXT", Access.RO, "Byte address of the next block in the register space; 0 after the last block."),
)


@dataclass(frozen=True)
class BlockSpec:
    type: BlockType
    version: int
    doc: str
    per_tile: bool
    registers: tuple[Register, ...]


def _blocks(semaphores: int) -> tuple[BlockSpec, ...]:
    return (
        BlockSpec(BlockType.GLOBAL, 0x0001_0000, "Identity, capabilities and device-wide controls.", False, (
            _R("MAGIC", Access.RO, "Reads MAGIC (0x44583131, \"DX11\")."),
            _R("HW_VERSION", Access.RO, "Spec version the gateware was generated from (16.16)."),
            _R("CAPS", Access.RO, "Capabilities.",
               ("tiles", 0, 4, "Number of tiles."), ("array", 4, 5, "Systolic array size."),
               ("mem_banks", 9, 5, "Device memory banks (4 KiB pages interleaved)."),
               ("semaphores", 16, 9, "Number of semaphores."),
               ("link_ports", 25, 2, "Chip-to-chip link ports (0: no link; 2: a ring, `spec/chip_link.py`).")),
            _R("SPM_ROWS", Access.RO, "Scratchpad rows per tile."),
            _R("ACC_ROWS", Access.RO, "Accumulator rows per tile."),
            _R("MEM_BYTES", Access.RO, "Device memory size in bytes."),
            _R("FEATURES", Access.RO, "Feature bits.",
               ("postop", 0, 1, "POSTOP is implemented."), ("copy", 1, 1, "COPY is implemented."),
               ("trace", 2, 1, "A trace buffer is implemented."),
               ("vector", 3, 1, "The vector unit (VECTOR, TABLE, TRANSPOSE) is implemented."),
               ("link", 4, 1, "The chip-to-chip link (SEND, the LINK block's ports) is implemented.")),
            _R("SCRATCH", Access.RW, "Free for the host; used by link and register tests."),
            _R("CYCLES_LO", Access.RO, "Free-running cycle counter, low word (reading it latches the high word)."),
            _R("CYCLES_HI", Access.RO, "Cycle counter high word, latched by reading CYCLES_LO."),
            _R("RESET", Access.WO, "Write 1 to bit 0 to reset every queue, counter and semaphore.",
               ("all", 0, 1, "Reset request.")),
            _R("SEM", Access.RW, "Semaphore values (host may read and set them).", ("value", 0, 16, "Value."),
               count=semaphores),
            _R("CHIP_ID", Access.RO, "This chip's place on its board, set by the board (straps): a single-chip "
               "device reads rank 0 of 1.",
               ("rank", 0, 8, "Rank of this chip in the board's ring, 0 .. chips - 1."),
               ("chips", 8, 8, "Chips on the board (1 for a single chip).")),
        )),
        BlockSpec(BlockType.QUEUE, 0x0001_0000, "One command queue, feeding one tile.", True, (
            _R("RING_BASE", Access.RW, "Device-memory byte address of the command ring.",
               ("addr", 5, 27, "Address bits [31:5]: rings are 32-byte aligned.")),
            _R("RING_LOG2", Access.RW, "log2 of the ring's entries, 1..16 (a doorbell while it is outside that "
               "range halts the queue with BAD_FIELD).  Writing it starts a new ring: HEAD = TAIL = 0.",
               ("log2", 0, 5, "Size.", 4)),
            _R("CQ_BASE", Access.RW, "Device-memory byte address of the completion ring (same number of entries "
               "as the command ring).", ("addr", 3, 29, "Address bits [31:3]: entries are 8-byte aligned.")),
            _R("HEAD", Access.RO, "Next entry the device will fetch.", ("index", 0, 16, "Index.")),
            _R("TAIL", Access.RO, "Entry after the last one the host has published.", ("index", 0, 16, "Index.")),
            _R("DOORBELL", Access.WO, "Write the new tail here to publish commands.",
               ("index", 0, 16, "New tail.")),
            _R("CONTROL", Access.RW, "Queue control.",
               ("enable", 0, 1, "Fetch and execute commands."),
               ("resume", 1, 1, "Write 1 to leave the halted state after an error (self-clearing).")),
            _R("STATUS", Access.RO, "Queue state.",
               ("busy", 0, 1, "Commands are in flight."), ("halted", 1, 1, "Stopped by a queue error."),
               ("resetting", 2, 1, "A reset of this tile (QUEUE.RESET, GLOBAL.RESET or a watchdog abort) is "
                "still draining its open bursts; wait for 0 before writing the queue's registers again.")),
            _R("ERROR", Access.RO, "Last error: code and the ring index it happened at.",
               ("code", 0, 8, "`ErrorCode`."), ("index", 16, 16, "Ring index.")),
            _R("IRQ_STATUS", Access.W1C, "Interrupt causes.",
               ("completion", 0, 1, "A completion was written."), ("error", 1, 1, "A queue error happened.")),
            _R("IRQ_MASK", Access.RW, "Interrupt enables, one per IRQ_STATUS bit.",
               ("completion", 0, 1, "Enable."), ("error", 1, 1, "Enable.")),
            _R("DMA_BASE", Access.RW, "First byte of device memory the queue's DMA may touch."),
            _R("DMA_LIMIT", Access.RW, "First byte past the DMA window.  It resets to 0, an empty window: "
               "no DMA runs until the host opens one.", ("limit", 0, 32, "Limit.", 0)),
            _R("WATCHDOG", Access.RW, "Watchdog: a command in the tile core or the DMA is aborted with TIMEOUT "
               "when neither unit of this tile made progress (a bus beat, a local row, a streamed row, a "
               "completion, and for this tile's SEND a frame word on its link port in either direction) for this "
               "many cycles while a command is in flight; 0 turns it off.  The aborted "
               "commands complete with TIMEOUT and the queue halts (ERROR = TIMEOUT and the oldest one's "
               "ring index) until CONTROL.resume.", ("cycles", 0, 32, "Cycles without progress; 0: off.", 0)),
            _R("RESET", Access.WO, "Write 1 to bit 0 to reset this tile alone: its command processor (the ring "
               "becomes empty: HEAD = TAIL = 0, phase 1; not halted; ERROR cleared), its DMA (after its open "
               "bursts are finished) and its tile core pipeline, and clears the tile's PERF counters.  Kept: "
               "this block's other registers, the scratchpad and accumulator contents, device memory, "
               "semaphores, TRACE, and the other tile.  Commands in flight get no completion.",
               ("tile", 0, 1, "Reset request.")),
        )),
        BlockSpec(BlockType.PERF, 0x0001_0000, "Performance counters of one tile (32-bit, wrapping).", True, (
            _R("CONTROL", Access.WO, "Write 1 to bit 0 to clear every counter of the block.",
               ("clear", 0, 1, "Clear.")),
            _R("CYCLES", Access.RO, "Cycles since the last clear."),
            _R("BUSY_LOAD", Access.RO, "Cycles the load unit was busy."),
            _R("BUSY_COMPUTE", Access.RO, "Cycles the systolic array was streaming."),
            _R("BUSY_STORE", Access.RO, "Cycles the store unit was busy."),
            _R("MACS_LO", Access.RO, "Multiply-accumulates done, low word (latches the high word)."),
            _R("MACS_HI", Access.RO, "Multiply-accumulates done, high word."),
            _R("STALL_DEP", Access.RO, "Cycles compute waited on a dependency."),
            _R("STALL_MEM", Access.RO, "Cycles DMA waited on the memory bus."),
            _R("BYTES_READ", Access.RO, "Bytes read from device memory."),
            _R("BYTES_WRITTEN", Access.RO, "Bytes written to device memory."),
            _R("BUSY_VECTOR", Access.RO, "Cycles the vector unit was running a command."),
            _R("TABLE_HITS", Access.RO, "LUT lanes that fell inside the lookup table."),
            _R("TABLE_UNDERFLOWS", Access.RO, "LUT lanes below the table's first entry."),
            _R("TABLE_OVERFLOWS", Access.RO, "LUT lanes at or past the table's last entry."),
        )),
        BlockSpec(BlockType.TRACE, 0x0001_0000, "Trace buffer of one tile: timestamped command start/end events.",
                  True, (
            _R("CONTROL", Access.RW, "Trace control.", ("enable", 0, 1, "Record events."),
               ("clear", 1, 1, "Write 1 to empty the buffer (self-clearing).")),
            _R("COUNT", Access.RO, "Events waiting to be read."),
            _R("DATA_LO", Access.RO, "Oldest event, low word: its cycle timestamp. Reading DATA_HI pops the event."),
            _R("DATA_HI", Access.RO, "Oldest event, high word.",
               ("tag", 0, 16, "Command tag."), ("status", 16, 8, "`ErrorCode` (end events)."),
               ("opcode", 24, 7, "Opcode, low 7 bits (every defined opcode fits)."),
               ("end", 31, 1, "0: the command started; 1: it completed.")),
        )),
        BlockSpec(BlockType.LINK, 0x0001_0000, "The chip-to-chip link ports (`spec/chip_link.py`): parameters, "
                  "the receive window, control and counters, one register of each array per port (0: next chip, "
                  "1: previous chip).  A chip without a link (CAPS.link_ports = 0) reads 0 in every register "
                  "here but WINDOW_BASE, WINDOW_LIMIT and CONTROL, which store what is written and act on nothing.",
                  False, (
            _R("CAPS", Access.RO, "Link parameters (`ChipLinkConfig`).",
               ("width", 0, 8, "Bytes per cycle of each direction of a port: the link's peak."),
               ("credits", 8, 8, "DATA frames the receiver buffers (the sender's replay buffer holds as many)."),
               ("retries", 16, 4, "Resends of a frame after NAKs before its SEND completes LINK_CRC."),
               ("max_payload_log2", 20, 4, "log2 of the largest DATA payload in bytes.")),
            _R("LATENCY", Access.RO, "Wire delay of each direction of a port.", ("cycles", 0, 12, "Cycles.")),
            _R("WINDOW_BASE", Access.RW, "First byte of this chip's device memory that arriving SENDs may touch."),
            _R("WINDOW_LIMIT", Access.RW, "First byte past the link window.  It resets to 0, an empty window: "
               "every arriving SEND is answered REMOTE_WINDOW until the host opens one.",
               ("limit", 0, 32, "Limit.", 0)),
            _R("CLEAR", Access.WO, "Write 1 to bit 0 to clear every counter of both ports (GLOBAL.RESET does too).",
               ("counters", 0, 1, "Clear.")),
            _R("CONTROL", Access.RW, "Port control.",
               ("force_down", 0, 1, "Hold the port down (a cut link, for tests): no frames leave or are taken; "
                "the peer's port goes down too; SENDs on it complete LINK_DOWN."),
               ("corrupt", 8, 8, "Fault injection: the first frame of the next SEND on the port and its next "
                "corrupt - 1 resends go out with a bad CRC; counts down as they go."), count=LINK_PORTS),
            _R("STATUS", Access.RO, "Port state.",
               ("up", 0, 1, "The port has a peer and neither end forces it down."),
               ("busy", 1, 1, "A SEND is in flight on the port."), count=LINK_PORTS),
            _R("TX_PACKETS", Access.RO, "DATA frames sent for the first time.", count=LINK_PORTS),
            _R("RX_PACKETS", Access.RO, "DATA frames accepted (intact and in order).", count=LINK_PORTS),
            _R("RETRIES", Access.RO, "NAKs the sender acted on (each resends from the NAK's frame on).",
               count=LINK_PORTS),
            _R("CRC_ERRORS", Access.RO, "DATA frames received with a bad CRC.", count=LINK_PORTS),
            _R("CREDIT_STALLS", Access.RO, "Cycles a frame ready to go waited for a credit (a timing figure).",
               count=LINK_PORTS),
        )),
    )


BLOCKS = _blocks(SocConfig().semaphores)


@dataclass(frozen=True)
class PlacedRegister:
    register: Register
    offset: int
    index: int | None  # position in a register array, else None

    @property
    def name(self) -> str:
        return self.register.name if self.index is None else f"{self.register.name}{self.index}"


@dataclass(frozen=True)
class PlacedBlock:
    spec: BlockSpec
    base: int
    tile: int | None
    next: int
    registers: tuple[PlacedRegister, ...]

    @property
    def name(self) -> str:
        kind = self.spec.type.name
        return kind if self.tile is None else f"{kind}{self.tile}"

    def reg(self, name: str) -> PlacedRegister:
        for r in self.registers:
            if r.name == name:
                return r
        raise KeyError(f"block {self.name} has no register {name!r}")


@dataclass(frozen=True)
class RegisterMap:
    config: SocConfig
    blocks: tuple[PlacedBlock, ...]

    @property
    def size(self) -> int:
        return self.blocks[-1].base + BLOCK_ALIGN

    def block(self, name: str) -> PlacedBlock:
        for b in self.blocks:
            if b.name == name:
                return b
        raise KeyError(f"no register block {name!r}")

    def address(self, block: str, register: str) -> int:
        b = self.block(block)
        return b.base + b.reg(register).offset


def register_map(config: SocConfig | None = None) -> RegisterMap:
    """Place every block of ``config`` and return the map."""
    config = config or SocConfig()
    order: list[tuple[BlockSpec, int | None]] = []
    for spec in _blocks(config.semaphores):
        if spec.per_tile:
            order.extend((spec, t) for t in range(config.tiles))
        else:
            order.append((spec, None))
    placed = []
    base = 0
    for i, (spec, tile) in enumerate(order):
        regs = []
        offset = 0
        for r in HEADER_REGISTERS + spec.registers:
            for idx in range(r.count):
                regs.append(PlacedRegister(r, offset, idx if r.array else None))
                offset += 4
        span = align_up(offset, BLOCK_ALIGN)
        nxt = base + span if i + 1 < len(order) else 0
        placed.append(PlacedBlock(spec, base, tile, nxt, tuple(regs)))
        base += span
    return RegisterMap(config, tuple(placed))
