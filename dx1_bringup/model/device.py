"""Golden model of the whole dx1-mini device as the host sees it.

:class:`DeviceModel` serves the register space of :func:`~dx1_bringup.spec.register_map`
and a device-memory host port, and executes the command rings of every queue
synchronously: a register write that publishes work (DOORBELL, CONTROL.enable,
CONTROL.resume, a semaphore write) returns only once every queue has run as far
as it can.  Compute commands (NOP, GEMM, POSTOP) go to the golden
:class:`~dx1_bringup.model.tile.TileModel` of the queue's tile; this module adds the
command processor: DMA (LOAD, STORE, COPY), ordering (FENCE), semaphores
(SIGNAL, WAIT), completions, interrupts, counters and the trace buffer.

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
  MEM_BYTES and FEATURES (postop, copy and trace all 1) come from the config.
  Reading CYCLES_LO latches the high word that CYCLES_HI then returns.
  RESET bit 0 returns every queue register, the cycle counter, every PERF and
  TRACE block and every semaphore to reset; device memory, the tiles'
  scratchpads and accumulator buffers and SCRATCH are kept (they are memories
  or belong to the host, not state of the command processor).
* QUEUE: RING_BASE keeps bits [31:5] and CQ_BASE bits [31:3] (their fields), so
  rings are always aligned.  RING_LOG2 keeps its 5-bit field; a doorbell while
  it is outside 1..16 halts the queue with ``BAD_FIELD``.  Writing RING_LOG2
  starts a new ring: HEAD, TAIL and the phase go back to 0, 0 and 1.
  STATUS.busy is 1 while the queue is enabled, not halted and HEAD != TAIL; in
  this synchronous model that only happens while it waits on a semaphore.

Execution
---------
* A DOORBELL index >= the ring's entries gives the queue error
  ``DOORBELL_RANGE``; a tail that overtakes the head (one slot always stays
  empty, so ``(new_tail - head) mod N`` must not be less than
  ``(tail - head) mod N``) gives ``RING_OVERFLOW``.  A queue error halts the
  queue, sets ERROR (code, and the doorbell value as index) and
  IRQ_STATUS.error; TAIL is unchanged and nothing runs.  Doorbells written while
  halted are still checked and published but run only after CONTROL.resume.
  ERROR keeps the last error until RESET.
* Command fetches (``RING_BASE + 32*index``) and completion writes
  (``CQ_BASE + 8*index``) belong to the command processor, not to the DMA, so
  the DMA window does not apply to them; if either falls outside device memory
  the queue halts with ``BUS_ERROR`` at that index before the command runs.
* Every command writes one completion (tag, status, opcode, timestamp = low 31
  bits of :attr:`DeviceModel.cycles` after the command, phase = 1 on the first
  pass and flipping each time HEAD wraps), advances HEAD and sets
  IRQ_STATUS.completion.  A command that fails a check (in ``CHECK_ORDER``)
  completes with that code, changes nothing and the queue goes on.
* LOAD/STORE move, for outer row r and column c, ``row_bytes`` (array bytes for
  the scratchpad, 4*array for the accumulator buffer, int32 little-endian lanes)
  between device memory ``dram_addr + r*dram_stride + c*row_bytes`` and local
  row ``local_addr + r*local_row_stride + c*local_col_stride``, r outer and c
  inner, so when rows overlap the later one wins.  COPY behaves like memmove.
* WAIT on a semaphore below ``count`` leaves the queue at that command; it runs
  again when a SIGNAL of another queue or a host write to SEMi makes it
  possible.  The scheduler runs every runnable queue in a loop until none makes
  progress, so cross-queue handshakes never recurse.

Cycles and counters
-------------------
:attr:`DeviceModel.cycles` is deterministic: it advances only by the cost of
each executed command, one after the other (this model overlaps nothing), from
the one cost definition :data:`dx1_bringup.perf.COSTS` (GEMM
``gemm_cycles(m, k_chunks)``, POSTOP ``postop_fill + postop_cycles(rows)``,
LOAD/STORE ``load_cycles``/``store_cycles`` of its bursts and beats, COPY both,
everything else and every refused command ``sync_cycles``), not by host
accesses; :func:`dx1_bringup.perf.predict` gives the overlapped timing of the
RTL.  PERF counters are 32-bit and wrap: CYCLES counts device cycles since the
last clear, BUSY_LOAD and BUSY_STORE the cost of the LOAD and STORE commands,
BUSY_COMPUTE the rows the array streamed (``m*k_chunks`` per GEMM, as the RTL
counts), STALL_DEP and STALL_MEM stay 0 (the model has
no pipeline and no bus contention), MACS from ``TileModel.macs`` (reading
MACS_LO latches MACS_HI), BYTES_READ/WRITTEN the DMA data of LOAD, STORE and
COPY (not ring fetches or completions).  The TRACE buffer records, while
enabled, a start event (timestamp before the command, status 0) and an end
event (timestamp after, status) per command, up to ``trace_depth`` events;
events arriving while it is full are dropped.  DATA_LO and DATA_HI read 0 when
it is empty.

Watchdog and per-tile reset
---------------------------
* A command that passes its checks runs in a unit: LOAD, STORE and COPY in the
  DMA, GEMM and POSTOP in the tile core (NOP, FENCE, SIGNAL, WAIT and refused
  commands complete in the command processor).  A stalled unit
  (:class:`UnitStalls`, :meth:`DeviceModel.set_stalls`) takes the command and
  makes no progress: HEAD moves past it, STATUS.busy stays 1, no completion
  comes and the queue runs nothing after it (this model runs one command at a
  time).  When the stall is lifted the command runs and completes.
* With QUEUE.WATCHDOG = N != 0 such a command is aborted: it completes with
  ``TIMEOUT`` (timestamp N cycles later, nothing of it done), and the queue
  halts with ERROR = TIMEOUT and its ring index until CONTROL.resume.  Writing
  WATCHDOG != 0 while a command is stuck aborts it at once.  A WAIT waiting for
  its semaphore runs in no unit and is not watched.
* QUEUE.RESET bit 0 resets that queue alone: HEAD = TAIL = 0, phase 1, not
  halted, ERROR 0, a stuck command forgotten (it never completes), and the
  tile's PERF counters cleared.  The other registers of the block, the tile's
  memories, device memory, semaphores, trace and the other queues are kept.

Faults
------
``DeviceModel(config, faults=MemoryFaults(...))`` (from :mod:`dx1_bringup.faults`)
breaks device memory the way a bad board does, for bring-up tests: a data bit of the memory bus stuck at
0 or 1, and an address line stuck at 0 (every address with that bit set reaches
the memory at the address with it clear).  Faults act on the memory itself, so
every reader sees them: the host port, the DMA, command fetches and completion
writes.

``BusErrors`` (device string ``model:bus-error=0x1000+0x40``) makes a window of device memory answer
error responses: a host access touching it raises :class:`BusError`, a command fetch or completion
write there halts the queue with ``BUS_ERROR`` (as one past device memory does), and a LOAD, STORE or
COPY that passed its checks and whose bytes touch it completes with ``BUS_ERROR`` having changed nothing
(the RTL may have moved the beats before the error: only the command's own footprint may differ).

``UnitStalls`` (from :mod:`dx1_bringup.faults`; device string ``model:stall=dma0`` or ``model:stall=dma0+core1``)
stalls units from the start; the SoC simulation's ``stall_units`` input is its RTL
counterpart (:mod:`dx1_bringup.spec.stall`).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

import numpy as np

from ..faults import BusErrors, MemoryFaults, UnitStalls
from ..perf import COSTS, move_bursts
from ..spec import (
    BLOCKS,
    BUS_BYTES,
    COMMAND_BYTES,
    COMMANDS,
    COMPLETION_BYTES,
    MAGIC,
    SPEC_VERSION,
    Access,
    BlockType,
    ErrorCode,
    Opcode,
    PlacedBlock,
    PlacedRegister,
    Register,
    RegisterMap,
    SocConfig,
    pack_completion,
    register_map,
    unpack_command,
)
from .tile import COMPUTE_OPCODES, TileModel, check_command

__all__ = ["BusError", "DeviceModel"]

_MASK32 = 0xFFFF_FFFF
_MAX_RING_LOG2 = 16
_HEADER_NAMES = ("ID", "VERSION", "NEXT")


def _registers(kind: BlockType) -> dict[str, Register]:
    """The spec's registers of a block type, by name: their fields place every bit the model reads or builds."""
    return {r.name: r for spec in BLOCKS if spec.type is kind for r in spec.registers}


_GLOBAL = _registers(BlockType.GLOBAL)
_QUEUE = _registers(BlockType.QUEUE)
_PERF = _registers(BlockType.PERF)
_TRACE = _registers(BlockType.TRACE)
_IRQ_COMPLETION = _QUEUE["IRQ_STATUS"].field("completion").mask
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
class _Stuck:
    """A command taken by a stalled unit: where its completion goes."""

    index: int
    phase: int
    tag: int
    opcode: int
    unit: str
    cmd: bytes


@dataclass
class _Queue:
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
    stuck: _Stuck | None = None
    # A WAIT may be tried several times; its start event is traced only the first time.
    head_started: bool = False

    @property
    def entries(self) -> int:
        return 1 << self.ring_log2


@dataclass
class _Perf:
    """One tile's PERF counters, kept as totals since the last clear."""

    cycles_at_clear: int = 0
    macs_at_clear: int = 0
    busy_load: int = 0
    busy_compute: int = 0
    busy_store: int = 0
    bytes_read: int = 0
    bytes_written: int = 0
    macs_hi: int = 0


@dataclass
class _Trace:
    """One tile's trace buffer: (timestamp, DATA_HI word) events, oldest first."""

    enable: bool = False
    events: deque[tuple[int, int]] = field(default_factory=deque)


class DeviceModel:
    """The dx1-mini device: registers, device memory, queues and tiles (see the module docstring).

    Parameters
    ----------
    config:
        Generator parameters; the default :class:`SocConfig` when omitted.
    faults:
        Broken device memory (see :class:`MemoryFaults`); ``None`` for a good device.
    stalls:
        Units stalled from the start (see :class:`UnitStalls`); ``None`` for none.

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
    tiles:
        One golden :class:`TileModel` per tile (queue *i* feeds tile *i*).
    cycles:
        Notional cycle counter: CYCLES_LO/HI and completion timestamps.
    stalled:
        The ``(unit, tile)`` pairs stalled now (:meth:`set_stalls` changes them).
    """

    def __init__(self, config: SocConfig | None = None, faults: MemoryFaults | None = None,
                 stalls: UnitStalls | None = None, bus_errors: BusErrors | None = None):
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
        if stalls is not None and not isinstance(stalls, UnitStalls):
            raise TypeError(f"stalls must be a UnitStalls, not {stalls!r}")
        self.stalled: frozenset[tuple[str, int]] = frozenset()
        self._check_stalls(stalls.units if stalls is not None else frozenset())
        self.stalled = stalls.units if stalls is not None else frozenset()
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
                                                          mem_banks=cfg.mem_banks, semaphores=cfg.semaphores),
            "SPM_ROWS": cfg.tile.spm_rows,
            "ACC_ROWS": cfg.tile.acc_rows,
            "MEM_BYTES": cfg.mem_bytes,
            "FEATURES": glob.reg("FEATURES").register.pack(postop=1, copy=1, trace=1),
        }
        self._scratch = 0
        self._reset()

    def _reset(self) -> None:
        """Return queues, counters, trace buffers and semaphores to their reset state."""
        self.cycles = 0
        self._cycles_hi = 0
        self._sems = [0] * self.config.semaphores
        self._queues = [_Queue() for _ in range(self.config.tiles)]
        self._perf = [_Perf(macs_at_clear=tile.macs) for tile in self.tiles]
        self._trace = [_Trace() for _ in range(self.config.tiles)]

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
        return self._read_trace(self._trace[block.tile], reg.name)

    def write32(self, addr: int, value: int) -> None:
        """Write the 32-bit register at byte address ``addr``; may run commands (see the module docstring)."""
        if not 0 <= value <= _MASK32:
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
                self._perf[block.tile] = _Perf(cycles_at_clear=self.cycles, macs_at_clear=self.tiles[block.tile].macs)
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

    def _check_stalls(self, units: frozenset[tuple[str, int]]) -> None:
        for unit, tile in units:
            if tile >= self.config.tiles:
                raise ValueError(f"cannot stall {unit}{tile}: the device has tiles 0 to {self.config.tiles - 1}")

    def set_stalls(self, units) -> None:
        """Stall exactly ``units`` (``(unit, tile)`` pairs) from now on; lifted stalls let stuck commands run."""
        units = UnitStalls(frozenset(units)).units
        self._check_stalls(units)
        self.stalled = units
        self._run()

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
        if name == "CYCLES_LO":
            self._cycles_hi = (self.cycles >> 32) & _MASK32
            return self.cycles & _MASK32
        return self._scratch if name == "SCRATCH" else self._cycles_hi  # CYCLES_HI

    def _write_global(self, reg: PlacedRegister, value: int) -> None:
        name = reg.register.name
        if name == "SCRATCH":
            self._scratch = value
        elif name == "SEM":
            self._sems[reg.index] = value
            self._run()
        elif _GLOBAL["RESET"].field("all").extract(value):
            self._reset()

    @staticmethod
    def _read_queue(q: _Queue, name: str) -> int:
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

    def _write_queue(self, addr: int, q: _Queue, name: str, value: int) -> None:
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
            self._perf[tile] = _Perf(cycles_at_clear=self.cycles, macs_at_clear=self.tiles[tile].macs)

    def _read_perf(self, tile: int, name: str) -> int:
        p = self._perf[tile]
        macs = self.tiles[tile].macs - p.macs_at_clear
        if name == "MACS_LO":
            p.macs_hi = (macs >> 32) & _MASK32
            return macs & _MASK32
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
        }[name]
        return value & _MASK32

    @staticmethod
    def _read_trace(trace: _Trace, name: str) -> int:
        if name == "CONTROL":
            return int(trace.enable)
        if name == "COUNT":
            return len(trace.events)
        if not trace.events:
            return 0
        if name == "DATA_LO":
            return trace.events[0][0] & _MASK32
        return trace.events.popleft()[1]  # DATA_HI pops

    # -- queues ----------------------------------------------------------------------------------------------

    def _queue_error(self, q: _Queue, code: ErrorCode, index: int) -> None:
        q.halted = True
        q.error = _QUEUE["ERROR"].pack(code=int(code), index=_low_bits(index, _QUEUE, "ERROR", "index"))
        q.irq_status |= _IRQ_ERROR

    def _doorbell(self, q: _Queue, new_tail: int) -> None:
        if not 1 <= q.ring_log2 <= _MAX_RING_LOG2:
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

    def _run(self) -> None:
        """Run every queue until none can make progress (WAITs released by later SIGNALs included)."""
        progress = True
        while progress:
            progress = False
            for tile, q in enumerate(self._queues):
                while self._step(tile, q):
                    progress = True

    def _step(self, tile: int, q: _Queue) -> bool:
        """Execute the command at HEAD; False when the queue is idle, disabled, halted, stuck or waiting."""
        if not q.enable or q.halted:
            return False
        if q.stuck is not None:
            return self._unstick(tile, q)
        if q.head == q.tail or not 1 <= q.ring_log2 <= _MAX_RING_LOG2:
            return False
        fetch = q.ring_base + COMMAND_BYTES * q.head
        slot = q.cq_base + COMPLETION_BYTES * q.head
        if (fetch + COMMAND_BYTES > len(self.mem) or slot + COMPLETION_BYTES > len(self.mem)
                or self._bus_error(fetch, COMMAND_BYTES) or self._bus_error(slot, COMPLETION_BYTES)):
            self._queue_error(q, ErrorCode.BUS_ERROR, q.head)
            return False
        cmd = self._load(fetch, COMMAND_BYTES)
        opcode, f = unpack_command(cmd)
        trace = self._trace[tile]
        if not q.head_started:
            q.head_started = True
            self._trace_event(trace, self.cycles, f["tag"], 0, opcode, end=False)
        unit = self._unit(q, cmd)
        if unit is not None and (unit, tile) in self.stalled:
            q.stuck = _Stuck(q.head, q.phase, f["tag"], opcode, unit, cmd)
            self._advance(q)
            if q.watchdog:
                self._timeout(tile, q)
            return False
        result = self._execute(tile, q, cmd)
        if result is None:  # a WAIT that cannot proceed yet
            return False
        status, cost = result
        self.cycles += cost
        self._complete(tile, q, slot, f["tag"], opcode, status, q.phase)
        self._advance(q)
        return True

    def _complete(self, tile: int, q: _Queue, slot: int, tag: int, opcode: int, status: ErrorCode,
                  phase: int) -> None:
        """Write one completion at ``slot``, trace its end and raise IRQ_STATUS.completion."""
        self._trace_event(self._trace[tile], self.cycles, tag, status, opcode, end=True)
        self._store(slot, pack_completion(
            tag=tag, status=int(status), opcode=opcode, timestamp=self.cycles & 0x7FFF_FFFF, phase=phase))
        q.irq_status |= _IRQ_COMPLETION

    @staticmethod
    def _advance(q: _Queue) -> None:
        q.head = (q.head + 1) % q.entries
        if q.head == 0:
            q.phase ^= 1
        q.head_started = False

    def _unit(self, q: _Queue, cmd: bytes) -> str | None:
        """The unit that runs ``cmd`` ("dma" or "core"), or None when it completes in the command processor."""
        word = int.from_bytes(cmd, "little")
        opcode, f = unpack_command(word)
        if opcode in (Opcode.GEMM, Opcode.POSTOP):
            return "core" if check_command(cmd, self.config.tile) == ErrorCode.OK else None
        if opcode not in (Opcode.LOAD, Opcode.STORE, Opcode.COPY) or word & COMMANDS[Opcode(opcode)].reserved_mask:
            return None
        status = self._copy_status(q, f) if opcode == Opcode.COPY else self._move_status(q, Opcode(opcode), f)
        return "dma" if status == ErrorCode.OK else None

    def _unstick(self, tile: int, q: _Queue) -> bool:
        """Run the stuck command if its unit is no longer stalled; False while it still is."""
        stuck = q.stuck
        if (stuck.unit, tile) in self.stalled:
            return False
        q.stuck = None
        status, cost = self._execute(tile, q, stuck.cmd)
        self.cycles += cost
        self._complete(tile, q, q.cq_base + COMPLETION_BYTES * stuck.index, stuck.tag, stuck.opcode, status,
                       stuck.phase)
        return True

    def _timeout(self, tile: int, q: _Queue) -> None:
        """The watchdog aborts the stuck command: TIMEOUT completion, the queue halts."""
        stuck = q.stuck
        q.stuck = None
        self.cycles += q.watchdog
        self._complete(tile, q, q.cq_base + COMPLETION_BYTES * stuck.index, stuck.tag, stuck.opcode,
                       ErrorCode.TIMEOUT, stuck.phase)
        self._queue_error(q, ErrorCode.TIMEOUT, stuck.index)

    def _trace_event(self, trace: _Trace, stamp: int, tag: int, status: int, opcode: int, *, end: bool) -> None:
        if trace.enable and len(trace.events) < self.config.trace_depth:
            word = _TRACE["DATA_HI"].pack(tag=tag, status=int(status), end=int(end),
                                          opcode=_low_bits(opcode, _TRACE, "DATA_HI", "opcode"))
            trace.events.append((stamp, word))

    # -- commands --------------------------------------------------------------------------------------------

    def _execute(self, tile: int, q: _Queue, cmd: bytes) -> tuple[ErrorCode, int] | None:
        """Check and run one command: (status, cycle cost), or None for a WAIT that must wait."""
        word = int.from_bytes(cmd, "little")
        opcode, f = unpack_command(word)
        if opcode in (int(o) for o in COMPUTE_OPCODES):
            status = self.tiles[tile].execute(cmd)
            if status != ErrorCode.OK:
                return status, COSTS.sync_cycles
            if opcode == Opcode.GEMM:
                self._perf[tile].busy_compute += f["m"] * f["k_chunks"]
                return status, int(COSTS.gemm_cycles(f["m"], f["k_chunks"]))
            if opcode == Opcode.POSTOP:
                return status, COSTS.postop_fill + int(COSTS.postop_cycles(f["rows"]))
            return status, COSTS.sync_cycles
        if opcode not in (int(o) for o in Opcode):
            return ErrorCode.BAD_OPCODE, COSTS.sync_cycles
        if word & COMMANDS[Opcode(opcode)].reserved_mask:
            return ErrorCode.RESERVED_BITS, COSTS.sync_cycles
        if opcode in (Opcode.LOAD, Opcode.STORE):
            return self._move(tile, q, Opcode(opcode), f)
        if opcode == Opcode.COPY:
            return self._copy(tile, q, f)
        if opcode == Opcode.FENCE:
            # Every earlier command of the queue has completed: execution is synchronous and in order.
            return ErrorCode.OK, COSTS.sync_cycles
        if opcode == Opcode.WAIT and f["count"] == 0:
            return ErrorCode.BAD_DIMENSION, COSTS.sync_cycles
        if f["sem"] >= self.config.semaphores:
            return ErrorCode.SEM_RANGE, COSTS.sync_cycles
        if opcode == Opcode.SIGNAL:
            self._sems[f["sem"]] = (self._sems[f["sem"]] + f["count"]) & 0xFFFF
            return ErrorCode.OK, COSTS.sync_cycles
        if self._sems[f["sem"]] < f["count"]:  # WAIT
            return None
        self._sems[f["sem"]] -= f["count"]
        return ErrorCode.OK, COSTS.sync_cycles

    def _in_window(self, q: _Queue, start: int, end: int) -> bool:
        """True when bytes [start, end) lie in the queue's DMA window and in device memory."""
        return q.dma_base <= start and end <= q.dma_limit and end <= len(self.mem)

    def _move_status(self, q: _Queue, opcode: Opcode, f: dict[str, int]) -> ErrorCode:
        """LOAD or STORE field checks after the reserved bits, in CHECK_ORDER."""
        acc = bool(f["flags"] >> COMMANDS[opcode].flag_bit("acc") & 1)
        rows, cols = f["rows"], f["cols"]
        if rows == 0 or cols == 0:
            return ErrorCode.BAD_DIMENSION
        cfg = self.config.tile
        depth = cfg.acc_rows if acc else cfg.spm_rows
        # Strides are unsigned, so the last local row touched is the far corner.
        last_local = f["local_addr"] + (rows - 1) * f["local_row_stride"] + (cols - 1) * f["local_col_stride"]
        if last_local >= depth:
            return ErrorCode.ACC_RANGE if acc else ErrorCode.SPM_RANGE
        if f["dram_addr"] % BUS_BYTES or f["dram_stride"] % BUS_BYTES:
            return ErrorCode.MISALIGNED
        outer_bytes = cols * (cfg.acc_row_bytes if acc else cfg.spm_row_bytes)
        # The window is one interval, so the first and the last outer row bound every byte touched.
        if not self._in_window(q, f["dram_addr"], f["dram_addr"] + (rows - 1) * f["dram_stride"] + outer_bytes):
            return ErrorCode.DMA_WINDOW
        return ErrorCode.OK

    def _move(self, tile: int, q: _Queue, opcode: Opcode, f: dict[str, int]) -> tuple[ErrorCode, int]:
        """LOAD or STORE: checks in CHECK_ORDER, then the 2-D move."""
        status = self._move_status(q, opcode, f)
        if status != ErrorCode.OK:
            return status, COSTS.sync_cycles
        acc = bool(f["flags"] >> COMMANDS[opcode].flag_bit("acc") & 1)
        rows, cols = f["rows"], f["cols"]
        cfg = self.config.tile
        row_bytes = cfg.acc_row_bytes if acc else cfg.spm_row_bytes
        outer_bytes = cols * row_bytes
        if self.bus_errors is not None and self.bus_errors.hits_rows(f["dram_addr"], f["dram_stride"], rows,
                                                                     outer_bytes):
            return ErrorCode.BUS_ERROR, 1
        self._move_rows(tile, opcode == Opcode.LOAD, acc, f)
        moved = rows * outer_bytes
        bursts = move_bursts(f["dram_addr"], f["dram_stride"], rows, outer_bytes)
        beats = moved // BUS_BYTES
        cycles = COSTS.load_cycles if opcode == Opcode.LOAD else COSTS.store_cycles
        cost = round(float(cycles(bursts, beats)))
        perf = self._perf[tile]
        if opcode == Opcode.LOAD:
            perf.bytes_read = (perf.bytes_read + moved) & _MASK32
            perf.busy_load += cost
        else:
            perf.bytes_written = (perf.bytes_written + moved) & _MASK32
            perf.busy_store += cost
        return ErrorCode.OK, cost

    def _move_rows(self, tile: int, load: bool, acc: bool, f: dict[str, int]) -> None:
        """The 2-D move of a checked LOAD or STORE: outer row ``r``, column ``c`` is one local row.

        Local row ``local_addr + r*local_row_stride + c*local_col_stride`` and the bytes at
        ``dram_addr + r*dram_stride + c*row_bytes`` move in (r, c) order, so where rows repeat the last one
        wins.  Without faults and repeats it is one gather or scatter; otherwise row by row, through the
        faulty memory.
        """
        rows, cols = f["rows"], f["cols"]
        cfg = self.config.tile
        row_bytes = cfg.acc_row_bytes if acc else cfg.spm_row_bytes
        local = self.tiles[tile].acc if acc else self.tiles[tile].spm
        lane = np.dtype("<i4") if acc else np.dtype(np.int8)
        r, c = np.arange(rows)[:, None], np.arange(cols)[None, :]
        local_rows = (f["local_addr"] + r * f["local_row_stride"] + c * f["local_col_stride"]).ravel()
        starts = (f["dram_addr"] + r * f["dram_stride"] + c * row_bytes).ravel()
        unique = (np.unique(local_rows).size == local_rows.size
                  and (rows == 1 or f["dram_stride"] >= cols * row_bytes))
        if self.faults is None and unique:
            cells = starts[:, None] + np.arange(row_bytes)[None, :]
            mem = np.frombuffer(self.mem, np.uint8)
            if load:
                local[local_rows] = mem[cells].view(lane).reshape(len(local_rows), -1)
            else:
                mem[cells] = local[local_rows].astype(lane).view(np.uint8).reshape(cells.shape)
            return
        for row, at in zip(local_rows.tolist(), starts.tolist(), strict=True):
            if load:
                local[row] = np.frombuffer(self._load(at, row_bytes), dtype=lane)
            else:
                self._store(at, local[row].astype(lane).tobytes())

    def _copy_status(self, q: _Queue, f: dict[str, int]) -> ErrorCode:
        """COPY field checks after the reserved bits, in CHECK_ORDER."""
        src, dst, length = f["src_addr"], f["dst_addr"], f["length"]
        if length == 0:
            return ErrorCode.BAD_DIMENSION
        if src % BUS_BYTES or dst % BUS_BYTES or length % BUS_BYTES:
            return ErrorCode.MISALIGNED
        if not (self._in_window(q, src, src + length) and self._in_window(q, dst, dst + length)):
            return ErrorCode.DMA_WINDOW
        return ErrorCode.OK

    def _copy(self, tile: int, q: _Queue, f: dict[str, int]) -> tuple[ErrorCode, int]:
        """COPY: checks in CHECK_ORDER, then a memmove inside device memory."""
        status = self._copy_status(q, f)
        if status != ErrorCode.OK:
            return status, COSTS.sync_cycles
        src, dst, length = f["src_addr"], f["dst_addr"], f["length"]
        if self._bus_error(src, length) or self._bus_error(dst, length):
            return ErrorCode.BUS_ERROR, 1
        self._store(dst, self._load(src, length))
        perf = self._perf[tile]
        perf.bytes_read = (perf.bytes_read + length) & _MASK32
        perf.bytes_written = (perf.bytes_written + length) & _MASK32
        return ErrorCode.OK, round(float(COSTS.copy_cycles(length // BUS_BYTES)))
