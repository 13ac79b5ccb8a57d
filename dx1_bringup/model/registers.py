"""The host's side of the dx1-mini device model: its register space and device-memory host port.

:class:`RegisterSpace` decodes and serves the registers of
:func:`~dx1_bringup.spec.register_map` and the device-memory port, and keeps the
state the command processor works on (queues, PERF counters, trace buffers,
semaphores, the cycle counter).  A register write that publishes work
(DOORBELL, CONTROL, a semaphore, WATCHDOG) hands over to the command processor,
which a subclass supplies (:class:`~dx1_bringup.model.device.DeviceModel`):
:meth:`RegisterSpace._run` and :meth:`RegisterSpace._timeout`.

Register space
--------------
* Accesses are 32-bit words at 4-byte aligned addresses.  A misaligned or
  unmapped address, a write to an RO register and a read of a WO register raise
  :class:`BusError` (the SLVERR of the real bus).  Values outside 0..2**32-1 are a
  programming error and raise :class:`ValueError`.
* RW registers with fields keep only their field bits; W1C registers clear the
  bits written as 1.  Self-clearing bits (QUEUE ``CONTROL.resume``, TRACE
  ``CONTROL.clear``) act on the write and read back as 0.
* GLOBAL: MAGIC, HW_VERSION (``SPEC_VERSION``), CAPS, SPM_ROWS, ACC_ROWS,
  MEM_BYTES and FEATURES (postop, copy and trace 1, vector the tile config's) come from the config.
  Reading CYCLES_LO latches the high word that CYCLES_HI then returns.
  RESET bit 0 returns every queue register, the cycle counter, every PERF and
  TRACE block and every semaphore to reset; device memory, the tiles'
  scratchpads and accumulator buffers and SCRATCH are kept (they are memories
  or belong to the host, not state of the command processor).
  CHIP_ID reads :attr:`RegisterSpace.rank` and ``chips`` (rank 0 of 1 unless a board sets them).
* LINK: :class:`~dx1_bringup.model.link.LinkRegisters` (GLOBAL.RESET clears its counters).
* QUEUE: RING_BASE keeps bits [31:5] and CQ_BASE bits [31:3] (their fields), so
  rings are always aligned.  RING_LOG2 keeps its 5-bit field; a doorbell while
  it is outside 1..16 halts the queue with ``BAD_FIELD``.  Writing RING_LOG2
  starts a new ring: HEAD, TAIL and the phase go back to 0, 0 and 1.
  STATUS.busy is 1 while the queue is enabled, not halted and HEAD != TAIL; in
  this synchronous model that only happens while it waits on a semaphore.

Device memory
-------------
``mem_read`` and ``mem_write`` take any alignment and length inside device memory; an access outside
it or touching the bus-error window (:class:`~dx1_bringup.faults.BusErrors`) raises :class:`BusError`.
Every reader and writer (the host port, the DMA, command fetches and completion writes) goes through
:meth:`RegisterSpace._load` and :meth:`RegisterSpace._store`, so memory faults
(:class:`~dx1_bringup.faults.MemoryFaults`) act on all of them alike.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections import deque
from dataclasses import dataclass, field

from ..faults import BusErrors, MemoryFaults
from ..spec import (
    BLOCKS,
    LINK_PORTS,
    MAGIC,
    SPEC_VERSION,
    Access,
    BlockType,
    ErrorCode,
    PlacedBlock,
    PlacedRegister,
    Register,
    RegisterMap,
    SocConfig,
    register_map,
)
from .link import LinkRegisters
from .tile import TileModel

__all__ = ["BusError", "RegisterSpace", "QueueState", "StuckCommand", "PerfCounters", "TraceBuffer", "MASK32",
           "MAX_RING_LOG2", "IRQ_COMPLETION"]

#: Registers are 32 bits wide; PERF counters wrap at 2**32.
MASK32 = 0xFFFF_FFFF
#: The largest RING_LOG2 a queue runs with; a doorbell outside 1..MAX_RING_LOG2 halts it with BAD_FIELD.
MAX_RING_LOG2 = 16
_HEADER_NAMES = ("ID", "VERSION", "NEXT")


def _registers(kind: BlockType) -> dict[str, Register]:
    """The spec's registers of a block type, by name: their fields place every bit the model reads or builds."""
    return {r.name: r for spec in BLOCKS if spec.type is kind for r in spec.registers}


_GLOBAL = _registers(BlockType.GLOBAL)
_QUEUE = _registers(BlockType.QUEUE)
_PERF = _registers(BlockType.PERF)
_TRACE = _registers(BlockType.TRACE)
#: IRQ_STATUS.completion, set by every completion the command processor writes.
IRQ_COMPLETION = _QUEUE["IRQ_STATUS"].field("completion").mask
_IRQ_ERROR = _QUEUE["IRQ_STATUS"].field("error").mask


def _low_bits(value: int, register: dict[str, Register], name: str, field_name: str) -> int:
    """The low bits of ``value`` that the field holds (a trace event keeps the opcode's low 7 bits)."""
    return value & ((1 << register[name].field(field_name).width) - 1)


class BusError(Exception):
    """A register or device-memory access the bus refuses (SLVERR).

    Parameters
    ----------
    addr:
        The byte address of the refused access.
    message:
        What was wrong with it.
    """

    def __init__(self, addr: int, message: str):
        super().__init__(f"{message} (address 0x{addr:08x})")
        self.addr = addr


@dataclass(frozen=True)
class StuckCommand:
    """A command taken by a stalled unit: where its completion goes."""

    index: int
    phase: int
    tag: int
    opcode: int
    unit: str
    cmd: bytes


@dataclass
class QueueState:
    """Register state and ring position of one queue."""

    ring_base: int = 0
    ring_log2: int = _QUEUE["RING_LOG2"].reset
    cq_base: int = 0
    head: int = 0
    tail: int = 0
    phase: int = 1
    enable: bool = False
    halted: bool = False
    error: int = 0
    irq_status: int = 0
    irq_mask: int = 0
    dma_base: int = 0
    dma_limit: int = 0
    watchdog: int = 0
    stuck: StuckCommand | None = None
    # A WAIT may be tried several times; its start event is traced only the first time.
    head_started: bool = False

    @property
    def entries(self) -> int:
        return 1 << self.ring_log2


@dataclass
class PerfCounters:
    """One tile's PERF counters, kept as totals since the last clear."""

    cycles_at_clear: int = 0
    macs_at_clear: int = 0
    table_at_clear: tuple[int, int, int] = (0, 0, 0)  # the vector unit's hits, underflows, overflows
    busy_load: int = 0
    busy_compute: int = 0
    busy_store: int = 0
    bytes_read: int = 0
    bytes_written: int = 0
    busy_vector: int = 0
    macs_hi: int = 0


@dataclass
class TraceBuffer:
    """One tile's trace buffer: (timestamp, DATA_HI word) events, oldest first."""

    enable: bool = False
    events: deque[tuple[int, int]] = field(default_factory=deque)


class RegisterSpace(ABC):
    """The registers, device memory and command-processor state of the device (see the module docstring).

    Parameters
    ----------
    config:
        Generator parameters; the default :class:`SocConfig` when omitted.
    faults:
        Broken device memory (see :class:`MemoryFaults`); ``None`` for a good device.
    bus_errors:
        A window of device memory answering error responses (see :class:`BusErrors`); ``None`` for none.

    Attributes
    ----------
    config:
        The device's parameters.
    regmap:
        ``register_map(config)``: where every register is.
    mem:
        Device memory, ``config.mem_bytes`` bytes, as stored (before any fault acts on a read).
    faults:
        The memory faults, or ``None``.
    bus_errors:
        The bus-error window, or ``None``.
    tiles:
        One golden :class:`TileModel` per tile (queue *i* feeds tile *i*).
    cycles:
        Notional cycle counter: CYCLES_LO/HI and completion timestamps.
    """

    def __init__(self, config: SocConfig | None = None, faults: MemoryFaults | None = None,
                 bus_errors: BusErrors | None = None):
        self.config = config or SocConfig()
        if faults is not None:
            if not isinstance(faults, MemoryFaults):
                raise TypeError(f"faults must be a MemoryFaults, not {faults!r}")
            faults.check_size(self.config.mem_bytes)
        self.faults = faults
        if bus_errors is not None:
            if not isinstance(bus_errors, BusErrors):
                raise TypeError(f"bus_errors must be a BusErrors, not {bus_errors!r}")
            bus_errors.check_size(self.config.mem_bytes)
        self.bus_errors = bus_errors
        self.regmap: RegisterMap = register_map(self.config)
        self.mem = bytearray(self.config.mem_bytes)
        self.tiles = [TileModel(self.config.tile) for _ in range(self.config.tiles)]
        self._decode: dict[int, tuple[PlacedBlock, PlacedRegister]] = {
            block.base + reg.offset: (block, reg) for block in self.regmap.blocks for reg in block.registers
        }
        glob = self.regmap.block("GLOBAL")
        cfg = self.config
        self._identity = {
            "MAGIC": MAGIC,
            "HW_VERSION": SPEC_VERSION,
            "CAPS": glob.reg("CAPS").register.pack(tiles=cfg.tiles, array=cfg.tile.array,
                                                          mem_banks=cfg.mem_banks, semaphores=cfg.semaphores,
                                                          link_ports=0 if cfg.link is None else LINK_PORTS),
            "SPM_ROWS": cfg.tile.spm_rows,
            "ACC_ROWS": cfg.tile.acc_rows,
            "MEM_BYTES": cfg.mem_bytes,
            "FEATURES": glob.reg("FEATURES").register.pack(postop=1, copy=1, trace=1,
                                                             vector=int(cfg.tile.vector),
                                                             link=int(cfg.link is not None)),
        }
        #: This chip's rank and its board's chip count (GLOBAL.CHIP_ID); a board sets them.
        self.rank, self.chips = 0, 1
        self.link = LinkRegisters(cfg.link)
        self._scratch = 0
        self._reset()

    def _reset(self) -> None:
        """Return queues, counters, trace buffers and semaphores to their reset state."""
        self.cycles = 0
        self._cycles_hi = 0
        self._sems = [0] * self.config.semaphores
        #: Each semaphore's increments by peers' SENDs not yet taken by a WAIT: [cycle landed, amount left].
        self._arrivals: list[deque[list[int]]] = [deque() for _ in range(self.config.semaphores)]
        self._queues = [QueueState() for _ in range(self.config.tiles)]
        self._perf = [self._cleared_perf(tile, cycles=0) for tile in range(self.config.tiles)]
        self._trace = [TraceBuffer() for _ in range(self.config.tiles)]
        self.link.clear_counters()

    # -- host ports ------------------------------------------------------------------------------------------

    def _lookup(self, addr: int) -> tuple[PlacedBlock, PlacedRegister]:
        if addr % 4:
            raise BusError(addr, "misaligned register access: addresses must be multiples of 4")
        try:
            return self._decode[addr]
        except KeyError:
            raise BusError(addr, "unmapped register address") from None

    def read32(self, addr: int) -> int:
        """Read the 32-bit register at byte address ``addr``."""
        block, reg = self._lookup(addr)
        if reg.register.access is Access.WO:
            raise BusError(addr, f"read of write-only register {block.name}.{reg.name}")
        if reg.name in _HEADER_NAMES:
            return {"ID": int(block.spec.type), "VERSION": block.spec.version, "NEXT": block.next}[reg.name]
        kind = block.spec.type
        if kind is BlockType.GLOBAL:
            return self._read_global(reg)
        if kind is BlockType.QUEUE:
            return self._read_queue(self._queues[block.tile], reg.name)
        if kind is BlockType.PERF:
            return self._read_perf(block.tile, reg.name)
        if kind is BlockType.LINK:
            return self.link.read(reg.register.name, reg.index)
        return self._read_trace(self._trace[block.tile], reg.name)

    def write32(self, addr: int, value: int) -> None:
        """Write the 32-bit register at byte address ``addr``; may run commands (see the module docstring)."""
        if not 0 <= value <= MASK32:
            raise ValueError(f"register value must fit in 32 bits unsigned, not {value!r}")
        block, reg = self._lookup(addr)
        access = reg.register.access
        if access is Access.RO:
            raise BusError(addr, f"write to read-only register {block.name}.{reg.name}")
        value &= reg.register.writable_mask
        kind = block.spec.type
        if kind is BlockType.GLOBAL:
            self._write_global(reg, value)
        elif kind is BlockType.QUEUE:
            self._write_queue(addr, self._queues[block.tile], reg.name, value)
        elif kind is BlockType.PERF:
            # CONTROL is the only writable PERF register.
            if _PERF["CONTROL"].field("clear").extract(value):
                self._perf[block.tile] = self._cleared_perf(block.tile)
        elif kind is BlockType.LINK:
            self.link.write(reg.register.name, reg.index, value)
        else:
            # CONTROL is the only writable TRACE register.
            trace = self._trace[block.tile]
            trace.enable = bool(_TRACE["CONTROL"].field("enable").extract(value))
            if _TRACE["CONTROL"].field("clear").extract(value):
                trace.events.clear()

    def _check_mem(self, addr: int, length: int) -> None:
        if length < 0:
            raise ValueError(f"length must be >= 0, not {length!r}")
        if addr < 0 or addr + length > len(self.mem):
            raise BusError(addr, f"{length}-byte access outside device memory (0x{len(self.mem):x} bytes)")
        if self._bus_error(addr, length):
            raise BusError(addr, f"{length}-byte access touches the bus-error window ({self.bus_errors})")

    def _bus_error(self, addr: int, length: int) -> bool:
        """True when device-memory bytes ``addr .. addr + length - 1`` touch the injected bus-error window."""
        return self.bus_errors is not None and self.bus_errors.hits(addr, length)

    def mem_read(self, addr: int, length: int) -> bytes:
        """Read ``length`` bytes of device memory at ``addr`` (any alignment)."""
        self._check_mem(addr, length)
        return self._load(addr, length)

    def mem_write(self, addr: int, data: bytes) -> None:
        """Write ``data`` to device memory at ``addr`` (any alignment); runs nothing."""
        self._check_mem(addr, len(data))
        self._store(addr, data)

    def _load(self, addr: int, length: int) -> bytes:
        """Device memory as every reader sees it (host, DMA, command fetch), faults included."""
        if self.faults is None:
            return bytes(self.mem[addr:addr + length])
        return self.faults.read(self.mem, addr, length)

    def _store(self, addr: int, data: bytes) -> None:
        """Write device memory as every writer does (host, DMA, completions), through a stuck address line."""
        if self.faults is None:
            self.mem[addr:addr + len(data)] = data
        else:
            self.faults.write(self.mem, addr, data)

    def irq_pending(self) -> bool:
        """True when any queue has an IRQ_STATUS bit whose IRQ_MASK bit is set."""
        return any(q.irq_status & q.irq_mask for q in self._queues)

    # -- register blocks -------------------------------------------------------------------------------------

    def _read_global(self, reg: PlacedRegister) -> int:
        name = reg.register.name
        if name in self._identity:
            return self._identity[name]
        if name == "SEM":
            return self._sems[reg.index]
        if name == "CHIP_ID":
            return _GLOBAL["CHIP_ID"].pack(rank=self.rank, chips=self.chips)
        if name == "CYCLES_LO":
            self._cycles_hi = (self.cycles >> 32) & MASK32
            return self.cycles & MASK32
        return self._scratch if name == "SCRATCH" else self._cycles_hi  # CYCLES_HI

    def _write_global(self, reg: PlacedRegister, value: int) -> None:
        name = reg.register.name
        if name == "SCRATCH":
            self._scratch = value
        elif name == "SEM":
            self._sems[reg.index] = value
            self._arrivals[reg.index].clear()  # the host's value replaces what arrived
            self._run()
        elif _GLOBAL["RESET"].field("all").extract(value):
            self._reset()

    @staticmethod
    def _read_queue(q: QueueState, name: str) -> int:
        busy = q.enable and not q.halted and (q.head != q.tail or q.stuck is not None)
        return {
            "RING_BASE": q.ring_base,
            "RING_LOG2": q.ring_log2,
            "CQ_BASE": q.cq_base,
            "HEAD": q.head,
            "TAIL": q.tail,
            "CONTROL": int(q.enable),
            "STATUS": _QUEUE["STATUS"].pack(busy=int(busy), halted=int(q.halted)),
            "ERROR": q.error,
            "IRQ_STATUS": q.irq_status,
            "IRQ_MASK": q.irq_mask,
            "DMA_BASE": q.dma_base,
            "DMA_LIMIT": q.dma_limit,
            "WATCHDOG": q.watchdog,
        }[name]

    def _write_queue(self, addr: int, q: QueueState, name: str, value: int) -> None:
        if name == "RING_BASE":
            q.ring_base = value  # the write kept only the address field: rings are aligned
        elif name == "RING_LOG2":
            log2 = _QUEUE["RING_LOG2"].field("log2").extract(value)
            q.ring_log2, q.head, q.tail, q.phase, q.head_started = log2, 0, 0, 1, False
        elif name == "CQ_BASE":
            q.cq_base = value  # the write kept only the address field: entries are aligned
        elif name == "DOORBELL":
            self._doorbell(q, value)
        elif name == "CONTROL":
            q.enable = bool(_QUEUE["CONTROL"].field("enable").extract(value))
            if _QUEUE["CONTROL"].field("resume").extract(value):
                q.halted = False
            self._run()
        elif name == "IRQ_STATUS":
            q.irq_status &= ~value
        elif name == "IRQ_MASK":
            q.irq_mask = value
        elif name == "DMA_BASE":
            q.dma_base = value
        elif name == "DMA_LIMIT":
            q.dma_limit = value
        elif name == "WATCHDOG":
            q.watchdog = value
            if value and q.stuck is not None:
                self._timeout(next(t for t, other in enumerate(self._queues) if other is q), q)
        elif value & 1:  # RESET: this queue and its tile's counters alone
            q.head, q.tail, q.phase, q.halted, q.error, q.stuck, q.head_started = 0, 0, 1, False, 0, None, False
            tile = next(t for t, other in enumerate(self._queues) if other is q)
            self._perf[tile] = self._cleared_perf(tile)

    def _cleared_perf(self, tile: int, cycles: int | None = None) -> PerfCounters:
        """``tile``'s PERF counters just cleared (at ``cycles``, by default now)."""
        unit = self.tiles[tile].vector
        return PerfCounters(cycles_at_clear=self.cycles if cycles is None else cycles,
                            macs_at_clear=self.tiles[tile].macs,
                            table_at_clear=(unit.hits, unit.underflows, unit.overflows))

    def _read_perf(self, tile: int, name: str) -> int:
        p = self._perf[tile]
        macs = self.tiles[tile].macs - p.macs_at_clear
        unit = self.tiles[tile].vector
        if name == "MACS_LO":
            p.macs_hi = (macs >> 32) & MASK32
            return macs & MASK32
        value = {
            "CYCLES": self.cycles - p.cycles_at_clear,
            "BUSY_LOAD": p.busy_load,
            "BUSY_COMPUTE": p.busy_compute,
            "BUSY_STORE": p.busy_store,
            "MACS_HI": p.macs_hi,
            "STALL_DEP": 0,
            "STALL_MEM": 0,
            "BYTES_READ": p.bytes_read,
            "BYTES_WRITTEN": p.bytes_written,
            "BUSY_VECTOR": p.busy_vector,
            "TABLE_HITS": unit.hits - p.table_at_clear[0],
            "TABLE_UNDERFLOWS": unit.underflows - p.table_at_clear[1],
            "TABLE_OVERFLOWS": unit.overflows - p.table_at_clear[2],
        }[name]
        return value & MASK32

    @staticmethod
    def _read_trace(trace: TraceBuffer, name: str) -> int:
        if name == "CONTROL":
            return int(trace.enable)
        if name == "COUNT":
            return len(trace.events)
        if not trace.events:
            return 0
        if name == "DATA_LO":
            return trace.events[0][0] & MASK32
        return trace.events.popleft()[1]  # DATA_HI pops

    # -- queues ----------------------------------------------------------------------------------------------

    def _queue_error(self, q: QueueState, code: ErrorCode, index: int) -> None:
        q.halted = True
        q.error = _QUEUE["ERROR"].pack(code=int(code), index=_low_bits(index, _QUEUE, "ERROR", "index"))
        q.irq_status |= _IRQ_ERROR

    def _doorbell(self, q: QueueState, new_tail: int) -> None:
        if not 1 <= q.ring_log2 <= MAX_RING_LOG2:
            self._queue_error(q, ErrorCode.BAD_FIELD, new_tail)
            return
        n = q.entries
        if new_tail >= n:
            self._queue_error(q, ErrorCode.DOORBELL_RANGE, new_tail)
            return
        if (new_tail - q.head) % n < (q.tail - q.head) % n:
            self._queue_error(q, ErrorCode.RING_OVERFLOW, new_tail)
            return
        q.tail = new_tail
        self._run()

    def _trace_event(self, trace: TraceBuffer, stamp: int, tag: int, status: int, opcode: int, *, end: bool) -> None:
        """Record one event in ``trace`` while it is enabled and holds fewer than ``trace_depth`` events."""
        if trace.enable and len(trace.events) < self.config.trace_depth:
            word = _TRACE["DATA_HI"].pack(tag=tag, status=int(status), end=int(end),
                                          opcode=_low_bits(opcode, _TRACE, "DATA_HI", "opcode"))
            trace.events.append((stamp, word))

    # -- the command processor's part ------------------------------------------------------------------------

    @abstractmethod
    def _run(self) -> None:
        """Run every queue until none can make progress; called after each write that publishes work."""

    @abstractmethod
    def _timeout(self, tile: int, q: QueueState) -> None:
        """Abort the stuck command of queue ``q`` (tile ``tile``); called when WATCHDOG is set while one is stuck."""
