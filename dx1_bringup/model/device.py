"""Golden model of the whole dx1-mini device as the host sees it.

:class:`DeviceModel` serves the register space of :func:`~dx1_bringup.spec.register_map`
and a device-memory host port, and executes the command rings of every queue
synchronously: a register write that publishes work (DOORBELL, CONTROL.enable,
CONTROL.resume, a semaphore write) returns only once every queue has run as far
as it can.  Compute commands (NOP, GEMM, POSTOP) go to the golden
:class:`~dx1_bringup.model.tile.TileModel` of the queue's tile; this module adds the
command processor: DMA (LOAD, STORE, COPY), ordering (FENCE), semaphores
(SIGNAL, WAIT), completions, interrupts, counters and the trace buffer.

The registers and the device-memory host port are :class:`~dx1_bringup.model.registers.RegisterSpace`'s,
which this class extends: :mod:`dx1_bringup.model.registers` says how accesses, field bits, GLOBAL and
QUEUE registers and RESET behave.

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
  between device memory ``mem_addr + r*mem_stride + c*row_bytes`` and local
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
the one cost definition :data:`dx1_bringup.perfmodel.COSTS` (GEMM
``gemm_cycles(m, k_chunks)``, POSTOP ``postop_fill + postop_cycles(rows)``, VECTOR,
TABLE and TRANSPOSE ``vector_command_cycles``,
LOAD/STORE ``load_cycles``/``store_cycles`` of its bursts and beats, COPY both,
everything else and every refused command ``sync_cycles``), not by host
accesses; :func:`dx1_bringup.perfmodel.predict` gives the overlapped timing of the
RTL.  PERF counters are 32-bit and wrap: CYCLES counts device cycles since the
last clear, BUSY_LOAD and BUSY_STORE the cost of the LOAD and STORE commands,
BUSY_COMPUTE the rows the array streamed (``m*k_chunks`` per GEMM, as the RTL
counts), STALL_DEP and STALL_MEM stay 0 (the model has
no pipeline and no bus contention), MACS from ``TileModel.macs`` (reading
MACS_LO latches MACS_HI), BYTES_READ/WRITTEN the DMA data of LOAD, STORE and
COPY (not ring fetches or completions), BUSY_VECTOR the cost of the vector
unit's commands, TABLE_HITS/UNDERFLOWS/OVERFLOWS the unit's LUT lanes.  The TRACE buffer records, while
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
  ``TIMEOUT`` (timestamp N cycles later, nothing of it done), the tile's PERF
  counters are cleared (the abort resets the tile's units), and the queue
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

import numpy as np

from ..faults import BusErrors, MemoryFaults, UnitStalls
from ..perfmodel import COSTS, move_bursts
from ..spec import (
    BUS_BYTES,
    COMMAND_BYTES,
    COMMANDS,
    COMPLETION_BYTES,
    ErrorCode,
    Opcode,
    SocConfig,
    pack_completion,
    unpack_command,
)
from .link import execute_send
from .registers import (
    IRQ_COMPLETION,
    MASK32,
    MAX_RING_LOG2,
    BusError,
    QueueState,
    RegisterSpace,
    StuckCommand,
)
from .tile import COMPUTE_OPCODES, check_command
from .vector import VECTOR_OPCODES

__all__ = ["BusError", "DeviceModel"]


class DeviceModel(RegisterSpace):
    """The dx1-mini device: registers, device memory, queues and tiles (see the module docstring).

    Parameters
    ----------
    config, faults, bus_errors:
        As :class:`~dx1_bringup.model.registers.RegisterSpace`: the generator parameters (the default
        :class:`SocConfig` when omitted), broken device memory (:class:`MemoryFaults`) and a window
        answering bus errors (:class:`BusErrors`), ``None`` for none.
    stalls:
        Units stalled from the start (see :class:`UnitStalls`); ``None`` for none.

    Attributes
    ----------
    stalled:
        The ``(unit, tile)`` pairs stalled now (:meth:`set_stalls` changes them).  The others (``config``,
        ``regmap``, ``mem``, ``faults``, ``bus_errors``, ``tiles``, ``cycles``) are
        :class:`~dx1_bringup.model.registers.RegisterSpace`'s.
    """

    def __init__(self, config: SocConfig | None = None, faults: MemoryFaults | None = None,
                 stalls: UnitStalls | None = None, bus_errors: BusErrors | None = None):
        super().__init__(config, faults, bus_errors)
        if stalls is not None and not isinstance(stalls, UnitStalls):
            raise TypeError(f"stalls must be a UnitStalls, not {stalls!r}")
        self.stalled: frozenset[tuple[str, int]] = frozenset()
        self._check_stalls(stalls.units if stalls is not None else frozenset())
        self.stalled = stalls.units if stalls is not None else frozenset()
        #: The board that wires this chip's link ports (:class:`~dx1_bringup.model.board.ModelBoard`), or None.
        self.board = None

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

    # -- queues ----------------------------------------------------------------------------------------------

    def _run(self) -> None:
        """Run every queue until none can make progress (WAITs released by later SIGNALs included); on a board,
        every chip's queues (a SEND here may release a WAIT there)."""
        if self.board is not None:
            self.board.run()
        else:
            self.run_queues()

    def run_queues(self) -> bool:
        """Run this chip's queues until none can make progress; whether any did."""
        ran = False
        progress = True
        while progress:
            progress = False
            for tile, q in enumerate(self._queues):
                while self._step(tile, q):
                    progress = ran = True
        return ran

    def _step(self, tile: int, q: QueueState) -> bool:
        """Execute the command at HEAD; False when the queue is idle, disabled, halted, stuck or waiting."""
        if not q.enable or q.halted:
            return False
        if q.stuck is not None:
            return self._unstick(tile, q)
        if q.head == q.tail or not 1 <= q.ring_log2 <= MAX_RING_LOG2:
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
            q.stuck = StuckCommand(q.head, q.phase, f["tag"], opcode, unit, cmd)
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

    def _complete(self, tile: int, q: QueueState, slot: int, tag: int, opcode: int, status: ErrorCode,
                  phase: int) -> None:
        """Write one completion at ``slot``, trace its end and raise IRQ_STATUS.completion."""
        self._trace_event(self._trace[tile], self.cycles, tag, status, opcode, end=True)
        self._store(slot, pack_completion(
            tag=tag, status=int(status), opcode=opcode, timestamp=self.cycles & 0x7FFF_FFFF, phase=phase))
        q.irq_status |= IRQ_COMPLETION

    @staticmethod
    def _advance(q: QueueState) -> None:
        q.head = (q.head + 1) % q.entries
        if q.head == 0:
            q.phase ^= 1
        q.head_started = False

    def _unit(self, q: QueueState, cmd: bytes) -> str | None:
        """The unit that runs ``cmd`` ("dma" or "core"), or None when it completes in the command processor."""
        word = int.from_bytes(cmd, "little")
        opcode, f = unpack_command(word)
        if opcode in (Opcode.GEMM, Opcode.POSTOP, *VECTOR_OPCODES):
            return "core" if check_command(cmd, self.config.tile) == ErrorCode.OK else None
        if opcode not in (Opcode.LOAD, Opcode.STORE, Opcode.COPY) or word & COMMANDS[Opcode(opcode)].reserved_mask:
            return None
        status = self._copy_status(q, f) if opcode == Opcode.COPY else self._move_status(q, Opcode(opcode), f)
        return "dma" if status == ErrorCode.OK else None

    def _unstick(self, tile: int, q: QueueState) -> bool:
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

    def _timeout(self, tile: int, q: QueueState) -> None:
        """The watchdog aborts the stuck command: TIMEOUT completion, the queue halts."""
        stuck = q.stuck
        q.stuck = None
        self.cycles += q.watchdog
        self._complete(tile, q, q.cq_base + COMPLETION_BYTES * stuck.index, stuck.tag, stuck.opcode,
                       ErrorCode.TIMEOUT, stuck.phase)
        self._queue_error(q, ErrorCode.TIMEOUT, stuck.index)
        # The abort resets the tile's units, and the tile's PERF counters with them (as on the RTL).
        self._perf[tile] = self._cleared_perf(tile)

    # -- commands --------------------------------------------------------------------------------------------

    def _execute(self, tile: int, q: QueueState, cmd: bytes) -> tuple[ErrorCode, int] | None:
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
            if opcode in VECTOR_OPCODES:
                cost = COSTS.vector_command_cycles(f, self.config.tile.array)
                self._perf[tile].busy_vector += cost
                return status, cost
            return status, COSTS.sync_cycles
        if opcode not in (int(o) for o in Opcode) or (opcode == Opcode.SEND and self.config.link is None):
            return ErrorCode.BAD_OPCODE, COSTS.sync_cycles
        if word & COMMANDS[Opcode(opcode)].reserved_mask:
            return ErrorCode.RESERVED_BITS, COSTS.sync_cycles
        if opcode in (Opcode.LOAD, Opcode.STORE):
            return self._move(tile, q, Opcode(opcode), f)
        if opcode == Opcode.COPY:
            return self._copy(tile, q, f)
        if opcode == Opcode.SEND:
            return execute_send(self, q, f)
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
        # Released by peers' SENDs: not before the data of the arrivals it takes landed (the chips' clocks are one).
        self.cycles = max(self.cycles, self._take_arrivals(f["sem"], f["count"]))
        return ErrorCode.OK, COSTS.sync_cycles

    def signal_remote(self, sem: int, count: int, landed: int) -> None:
        """A peer's SEND landed here at cycle ``landed`` and adds ``count`` to semaphore ``sem``."""
        self._sems[sem] = (self._sems[sem] + count) & 0xFFFF
        self._arrivals[sem].append([landed, count])

    def _take_arrivals(self, sem: int, count: int) -> int:
        """Take ``count`` of semaphore ``sem``'s remote arrivals, oldest first; the cycle the last one landed."""
        arrivals, latest = self._arrivals[sem], 0
        while count and arrivals:
            taken = min(count, arrivals[0][1])
            latest = max(latest, arrivals[0][0])
            count -= taken
            arrivals[0][1] -= taken
            if not arrivals[0][1]:
                arrivals.popleft()
        return latest

    def _in_window(self, q: QueueState, start: int, end: int) -> bool:
        """True when bytes [start, end) lie in the queue's DMA window and in device memory."""
        return q.dma_base <= start and end <= q.dma_limit and end <= len(self.mem)

    def _move_status(self, q: QueueState, opcode: Opcode, f: dict[str, int]) -> ErrorCode:
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
        if f["mem_addr"] % BUS_BYTES or f["mem_stride"] % BUS_BYTES:
            return ErrorCode.MISALIGNED
        outer_bytes = cols * (cfg.acc_row_bytes if acc else cfg.spm_row_bytes)
        # The window is one interval, so the first and the last outer row bound every byte touched.
        if not self._in_window(q, f["mem_addr"], f["mem_addr"] + (rows - 1) * f["mem_stride"] + outer_bytes):
            return ErrorCode.DMA_WINDOW
        return ErrorCode.OK

    def _move(self, tile: int, q: QueueState, opcode: Opcode, f: dict[str, int]) -> tuple[ErrorCode, int]:
        """LOAD or STORE: checks in CHECK_ORDER, then the 2-D move."""
        status = self._move_status(q, opcode, f)
        if status != ErrorCode.OK:
            return status, COSTS.sync_cycles
        acc = bool(f["flags"] >> COMMANDS[opcode].flag_bit("acc") & 1)
        rows, cols = f["rows"], f["cols"]
        cfg = self.config.tile
        row_bytes = cfg.acc_row_bytes if acc else cfg.spm_row_bytes
        outer_bytes = cols * row_bytes
        if self.bus_errors is not None and self.bus_errors.hits_rows(f["mem_addr"], f["mem_stride"], rows,
                                                                     outer_bytes):
            return ErrorCode.BUS_ERROR, 1
        self._move_rows(tile, opcode == Opcode.LOAD, acc, f)
        moved = rows * outer_bytes
        bursts = move_bursts(f["mem_addr"], f["mem_stride"], rows, outer_bytes)
        beats = moved // BUS_BYTES
        cycles = COSTS.load_cycles if opcode == Opcode.LOAD else COSTS.store_cycles
        cost = round(float(cycles(bursts, beats)))
        perf = self._perf[tile]
        if opcode == Opcode.LOAD:
            perf.bytes_read = (perf.bytes_read + moved) & MASK32
            perf.busy_load += cost
        else:
            perf.bytes_written = (perf.bytes_written + moved) & MASK32
            perf.busy_store += cost
        return ErrorCode.OK, cost

    def _move_rows(self, tile: int, load: bool, acc: bool, f: dict[str, int]) -> None:
        """The 2-D move of a checked LOAD or STORE: outer row ``r``, column ``c`` is one local row.

        Local row ``local_addr + r*local_row_stride + c*local_col_stride`` and the bytes at
        ``mem_addr + r*mem_stride + c*row_bytes`` move in (r, c) order, so where rows repeat the last one
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
        starts = (f["mem_addr"] + r * f["mem_stride"] + c * row_bytes).ravel()
        unique = (np.unique(local_rows).size == local_rows.size
                  and (rows == 1 or f["mem_stride"] >= cols * row_bytes))
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

    def _copy_status(self, q: QueueState, f: dict[str, int]) -> ErrorCode:
        """COPY field checks after the reserved bits, in CHECK_ORDER."""
        src, dst, length = f["src_addr"], f["dst_addr"], f["length"]
        if length == 0:
            return ErrorCode.BAD_DIMENSION
        if src % BUS_BYTES or dst % BUS_BYTES or length % BUS_BYTES:
            return ErrorCode.MISALIGNED
        if not (self._in_window(q, src, src + length) and self._in_window(q, dst, dst + length)):
            return ErrorCode.DMA_WINDOW
        return ErrorCode.OK

    def _copy(self, tile: int, q: QueueState, f: dict[str, int]) -> tuple[ErrorCode, int]:
        """COPY: checks in CHECK_ORDER, then a memmove inside device memory."""
        status = self._copy_status(q, f)
        if status != ErrorCode.OK:
            return status, COSTS.sync_cycles
        src, dst, length = f["src_addr"], f["dst_addr"], f["length"]
        if self._bus_error(src, length) or self._bus_error(dst, length):
            return ErrorCode.BUS_ERROR, 1
        self._store(dst, self._load(src, length))
        perf = self._perf[tile]
        perf.bytes_read = (perf.bytes_read + length) & MASK32
        perf.bytes_written = (perf.bytes_written + length) & MASK32
        return ErrorCode.OK, round(float(COSTS.copy_cycles(length // BUS_BYTES)))
