"""A tile's command queue: rings in device memory, doorbell, completions, interrupts and DMA window."""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from . import regs
from .allocator import Allocator
from .errors import CommandError, DeviceReset, DeviceTimeout, DriverError, QueueError
from .observe import Observers
from .transport import Transport
from .waiting import CompletionWaits, wait_reset_done

__all__ = ["CommandQueue", "Completion", "QueueState"]


@dataclass(frozen=True)
class QueueState:
    """Where a queue stands, from its QUEUE registers and the driver's account of what is in flight.

    Attributes
    ----------
    halted:
        STATUS.halted: the queue stopped on an error (a watchdog TIMEOUT or a ring error).
    error:
        ``(code, index)`` from QUEUE.ERROR when halted, else ``None``.
    fetched:
        How many of the commands in flight the device has fetched (HEAD counted from the oldest in
        flight): only those can have started.
    aborted:
        Completions with TIMEOUT collected and not delivered (their commands all started).
    """

    halted: bool
    error: tuple[int, int] | None
    fetched: int
    aborted: int


@dataclass(frozen=True)
class Completion:
    """One completion entry, with the ring index it was written at."""

    index: int
    tag: int
    opcode: int
    status: int
    timestamp: int
    #: The command this completes, as it was submitted.
    command: bytes = field(default=b"", repr=False, compare=False)

    @property
    def ok(self) -> bool:
        return self.status == regs.ErrorCode.OK


class CommandQueue:
    """The command queue of one tile: a command ring and a completion ring in device memory.

    Get one from :meth:`Device.queue <dx1_driver.Device.queue>`; its registers are the tile's QUEUE
    block (:class:`regs.Queue <dx1_driver.regs.Queue>` gives their offsets).

    Contract: :meth:`submit` never overflows the ring; :meth:`wait` delivers
    every completion exactly once, in ring order, and checks that each carries
    the tag of the command at its ring index.  Completions collected while
    :meth:`submit` waits for ring space are kept until a :meth:`wait` asks.

    Parameters
    ----------
    transport:
        The device's transport: the QUEUE block's registers and the rings are reached through it.
    tile, base:
        The tile, and the register address of its QUEUE block.
    ring_log2:
        log2 of the ring entries, 1 to 16.
    allocator:
        The device memory allocator the rings are taken from (and given back to on a device reset);
        its end is the device memory's size, the bound of the DMA window.
    waits:
        The device's completion waits, shared by its queues (:mod:`.waiting`).
    observers:
        The device's observers (:mod:`.observe`), which hear this queue's calls; ``None``: none.
    """

    def __init__(self, transport: Transport, tile: int, base: int, ring_log2: int, *, allocator: Allocator,
                 waits: CompletionWaits, observers: Observers | None = None):
        if not 1 <= ring_log2 <= 16:
            raise ValueError(f"ring_log2 must be 1 to 16, not {ring_log2!r}")
        self.transport = transport
        self.allocator = allocator
        #: Device memory bytes: a DMA window lies inside ``[0, mem_bytes)``.
        self.mem_bytes = allocator.base + allocator.size
        self._waits = waits
        self._observers = observers if observers is not None else Observers()
        self.tile = tile
        self.base = base
        self.entries = 1 << ring_log2
        q = regs.Queue
        head, tail = self._reg(q.HEAD), self._reg(q.TAIL)
        if head or tail:
            raise DriverError(f"queue {tile} is not at ring index 0 (HEAD={head}, TAIL={tail}); reset the device")
        self.ring = allocator.alloc(self.entries * regs.COMMAND_BYTES)
        self.cq = allocator.alloc(self.entries * regs.COMPLETION_BYTES)
        # Phase starts at 1, so stale memory with bit 63 set would read as a
        # completion: clear the completion ring before the device may write it.
        transport.write_block(self.cq, bytes(self.entries * regs.COMPLETION_BYTES))
        self._set(q.CONTROL, 0)
        self._set(q.RING_BASE, self.ring)
        self._set(q.RING_LOG2, ring_log2)
        self._set(q.CQ_BASE, self.cq)
        self._set_dma_window(0, self.mem_bytes)
        self.clear_irq()
        self.set_irq_mask(self.IRQ_COMPLETION | self.IRQ_ERROR)
        self._set(q.CONTROL, regs.set_field(0, q.CONTROL_ENABLE, 1))
        self._tail = 0  # next ring index the host writes
        self._head = 0  # next ring index whose completion the host reads
        self._phase = 1  # phase bit of a fresh completion at _head
        # (tag, opcode, command) of published commands from _head on
        self._inflight: deque[tuple[int, int, bytes]] = deque()
        self._backlog: deque[Completion] = deque()  # read from the ring, not yet delivered
        self._aborted: list[Completion] = []  # TIMEOUT completions: never delivered, replayed by Device.recover
        # IRQ_STATUS.completion was cleared and no completion was collected since: a completion that
        # arrives now raises the interrupt line (see CompletionWaits.until).
        self._quiet = False
        self._live = True

    # -- registers ------------------------------------------------------------------------------

    def _reg(self, offset: int) -> int:
        return self.transport.read32(self.base + offset)

    def _set(self, offset: int, value: int) -> None:
        self.transport.write32(self.base + offset, value)

    # -- DMA window -----------------------------------------------------------------------------

    def set_dma_window(self, base: int, limit: int) -> None:
        """Let this queue's LOAD, STORE and COPY touch device memory ``[base, limit)`` only.

        A command outside the window completes with ``DMA_WINDOW`` and moves
        nothing.  :meth:`Device.queue <dx1_driver.Device.queue>` opens the whole
        device memory.

        Raises
        ------
        ValueError
            ``base`` or ``limit`` is not an integer with ``0 <= base <= limit <= MEM_BYTES``.
        """
        self._observers.run("set_dma_window", self.tile, {"base": base, "limit": limit},
                            lambda: self._set_dma_window(base, limit))

    def _set_dma_window(self, base: int, limit: int) -> None:
        mem = self.mem_bytes
        for name, value in (("base", base), ("limit", limit)):
            if isinstance(value, bool) or not isinstance(value, int):
                raise TypeError(f"queue {self.tile}: DMA window {name} must be an integer, not {value!r}")
        if not 0 <= base <= limit <= mem:
            raise ValueError(f"queue {self.tile}: DMA window [0x{base:x}, 0x{limit:x}) must satisfy "
                             f"0 <= base <= limit <= 0x{mem:x} (the device memory)")
        q = regs.Queue
        self._set(q.DMA_BASE, base)
        self._set(q.DMA_LIMIT, regs.set_field(0, q.DMA_LIMIT_LIMIT, limit))

    def dma_window(self) -> tuple[int, int]:
        """The DMA window as the device holds it: ``(base, limit)``, bytes ``[base, limit)``."""
        q = regs.Queue
        return self._reg(q.DMA_BASE), regs.get_field(self._reg(q.DMA_LIMIT), q.DMA_LIMIT_LIMIT)

    # -- interrupts -----------------------------------------------------------------------------

    #: IRQ_STATUS / IRQ_MASK bit of "a completion was written".
    IRQ_COMPLETION = regs.set_field(0, regs.Queue.IRQ_STATUS_COMPLETION, 1)
    #: IRQ_STATUS / IRQ_MASK bit of "a queue error happened".
    IRQ_ERROR = regs.set_field(0, regs.Queue.IRQ_STATUS_ERROR, 1)

    def irq_status(self) -> int:
        """Pending interrupt causes (IRQ_STATUS): :attr:`IRQ_COMPLETION` and :attr:`IRQ_ERROR` bits."""
        return self._reg(regs.Queue.IRQ_STATUS)

    def clear_irq(self, causes: int | None = None) -> None:
        """Clear the pending causes ``causes`` (default: both); IRQ_STATUS is write-one-to-clear."""
        bits = self._irq_bits(self.IRQ_COMPLETION | self.IRQ_ERROR if causes is None else causes)
        self._set(regs.Queue.IRQ_STATUS, bits)
        if bits & self.IRQ_COMPLETION:
            self._quiet = True

    @property
    def irq_quiet(self) -> bool:
        """IRQ_STATUS.completion was cleared and no completion collected since: a new one raises the line."""
        return self._quiet

    def irq_mask(self) -> int:
        """The causes that raise the interrupt line (IRQ_MASK)."""
        return self._reg(regs.Queue.IRQ_MASK)

    def set_irq_mask(self, causes: int) -> None:
        """Let exactly ``causes`` (:attr:`IRQ_COMPLETION`, :attr:`IRQ_ERROR`) raise the interrupt line."""
        self._set(regs.Queue.IRQ_MASK, self._irq_bits(causes))

    def _irq_bits(self, causes: int) -> int:
        known = self.IRQ_COMPLETION | self.IRQ_ERROR
        if isinstance(causes, bool) or not isinstance(causes, int) or causes & ~known:
            raise ValueError(f"queue {self.tile}: interrupt causes must be a combination of IRQ_COMPLETION "
                             f"(0x{self.IRQ_COMPLETION:x}) and IRQ_ERROR (0x{self.IRQ_ERROR:x}), not {causes!r}")
        return causes

    def _release(self) -> None:
        self._live = False
        self.allocator.free(self.ring)
        self.allocator.free(self.cq)

    def _check_live(self) -> None:
        if not self._live:
            raise DriverError(f"queue {self.tile} was reset; get a new one from Device.queue")

    @property
    def next_index(self) -> int:
        """The ring index the next submitted command goes to: its slot is ``index % entries`` commands past ``ring``."""
        return self._tail

    @property
    def outstanding(self) -> int:
        """Completions not yet delivered: in flight, collected, and aborted ones awaiting ``Device.recover``."""
        return len(self._inflight) + len(self._backlog) + len(self._aborted)

    def check(self) -> None:
        """Raise :class:`QueueError` if the queue is halted, :class:`DeviceReset` if the device was reset under it.

        A queue that is neither busy nor halted while commands are in flight and no completion waits in the
        ring has either been disabled (TAIL still reads what the driver published) or been reset (it reads
        something else): the second is raised at once rather than at the wait's deadline.
        """
        q = regs.Queue
        status = self._reg(q.STATUS)
        if regs.get_field(status, q.STATUS_HALTED):
            error = self._reg(q.ERROR)
            raise QueueError(regs.get_field(error, q.ERROR_CODE), regs.get_field(error, q.ERROR_INDEX),
                             tile=self.tile)
        if self._inflight and not regs.get_field(status, q.STATUS_BUSY) and not self._poll():
            tail = self._reg(q.TAIL)
            if tail != self._tail:
                raise DeviceReset(self.tile, tail, self._tail, [tag for tag, _, _ in self._inflight])

    # -- submission -----------------------------------------------------------------------------

    def submit(self, commands: Sequence[bytes], *, timeout: float = 1.0) -> list[int]:
        """Publish ``commands`` (built with ``regs``; each carries its tag) and return their tags.

        Waits (up to ``timeout`` seconds per wait) for ring slots when the ring is
        full; completions collected meanwhile are kept for :meth:`wait`.
        """
        self._check_live()
        for i, cmd in enumerate(commands):
            if len(cmd) != regs.COMMAND_BYTES:
                raise ValueError(f"command {i} is {len(cmd)} bytes, not {regs.COMMAND_BYTES}")
        commands = tuple(bytes(cmd) for cmd in commands)
        return self._observers.run("submit", self.tile, {"commands": commands},
                                   lambda: self._submit(commands, timeout))

    def _submit(self, commands: tuple[bytes, ...], timeout: float) -> list[int]:
        tags = [int.from_bytes(cmd[2:4], "little") for cmd in commands]
        todo = list(commands)
        while todo:
            # One slot stays empty: the doorbell carries only the tail, so a full
            # ring would look the same as an empty one to the device.
            room = self.entries - 1 - len(self._inflight)
            if room == 0:
                self._collect(len(self._backlog) + 1, timeout)
                continue
            batch, todo = todo[:room], todo[room:]
            first = min(len(batch), self.entries - self._tail)
            for run_start, run in ((self._tail, batch[:first]), (0, batch[first:])):
                if run:
                    self.transport.write_block(self.ring + run_start * regs.COMMAND_BYTES, b"".join(run))
            self._inflight.extend((int.from_bytes(c[2:4], "little"), c[0], bytes(c)) for c in batch)
            self._tail = (self._tail + len(batch)) % self.entries
            self._set(regs.Queue.DOORBELL, self._tail)
        return tags

    # -- completion -----------------------------------------------------------------------------

    def _poll(self) -> int:
        """Move every fresh completion from the ring to the backlog; return how many."""
        if not self._inflight:
            return 0
        n = min(len(self._inflight), self.entries - self._head)
        raw = self.transport.read_block(self.cq + self._head * regs.COMPLETION_BYTES, n * regs.COMPLETION_BYTES)
        got = 0
        for k in range(n):
            entry = regs.unpack_completion(raw[k * 8:(k + 1) * 8])
            if entry["phase"] != self._phase:
                break
            tag, opcode, command = self._inflight[0]
            if entry["tag"] != tag or entry["opcode"] != opcode:
                raise DriverError(
                    f"queue {self.tile}: completion at ring index {self._head} has tag {entry['tag']} opcode "
                    f"0x{entry['opcode']:02x}, but the command there has tag {tag} opcode 0x{opcode:02x} "
                    f"(lost or duplicated completion)")
            self._inflight.popleft()
            done = Completion(self._head, entry["tag"], entry["opcode"], entry["status"], entry["timestamp"], command)
            (self._aborted if done.status == regs.ErrorCode.TIMEOUT else self._backlog).append(done)
            self._head += 1
            got += 1
        if got:
            self._quiet = False  # IRQ_STATUS.completion is set again, by what was just collected
        if self._head == self.entries:
            self._head = 0
            self._phase ^= 1
        return got

    def poll(self) -> int:
        """Collect what has arrived without waiting; return how many completions are ready."""
        self._check_live()
        self._poll()
        return len(self._backlog)

    def _collect(self, need: int, timeout: float) -> None:
        """Poll until the backlog holds at least ``need`` completions (see :meth:`CompletionWaits.until`)."""

        def ready() -> bool:
            if len(self._backlog) < need and not self._aborted:
                self._poll()
            if len(self._backlog) < need and self._aborted:
                raise QueueError(regs.ErrorCode.TIMEOUT, self._aborted[0].index, tile=self.tile)
            return len(self._backlog) >= need

        def expired() -> DeviceTimeout:
            tag, opcode, _ = self._inflight[0]
            return DeviceTimeout(
                f"queue {self.tile}: no completion for ring index {self._head} (tag {tag}, opcode "
                f"0x{opcode:02x}) within {timeout} s; HEAD={self._reg(regs.Queue.HEAD)}, "
                f"TAIL={self._reg(regs.Queue.TAIL)}, STATUS=0x{self._reg(regs.Queue.STATUS):x}")

        self._waits.until([self], ready, timeout, expired)

    def wait(self, what: int | Iterable[int] | None = None, *, timeout: float = 1.0,
             check: bool = True) -> list[Completion]:
        """Collect completions, in ring order.

        Parameters
        ----------
        what:
            ``None``: every outstanding completion; an ``int``: that many of the
            oldest; an iterable of tags: the oldest outstanding completion of each
            tag (others collected on the way stay for a later call).
        timeout:
            Seconds to wait without progress before :class:`DeviceTimeout`.
        check:
            Raise :class:`CommandError` for the first error completion, after
            every asked-for completion is collected (they ride on the exception's
            ``completions``); ``False`` returns them unchecked.

        Raises
        ------
        ValueError
            More completions, or tags, than are outstanding.
        QueueError
            The queue halted on a ring error, or the watchdog aborted a command (code ``TIMEOUT``: a
            TIMEOUT completion is never delivered; ``Device.recover`` resubmits the command, and the
            completion of that run is).
        """
        self._check_live()
        if what is not None and not isinstance(what, int):
            what = tuple(what)
        return self._observers.run("wait", self.tile, {"what": what, "check": check},
                                   lambda: self._wait(what, timeout, check))

    def _wait(self, what: int | tuple[int, ...] | None, timeout: float, check: bool) -> list[Completion]:
        if what is None:
            what = self.outstanding
        if isinstance(what, int):
            if not 0 <= what <= self.outstanding:
                raise ValueError(f"cannot wait for {what} completions: {self.outstanding} outstanding")
            self._collect(what, timeout)
            done = [self._backlog.popleft() for _ in range(what)]
        else:
            done = self._wait_tags(list(what), timeout)
        if check:
            for c in done:
                if not c.ok:
                    raise CommandError(c.tag, c.opcode, c.status, completions=done)
        return done

    def _wait_tags(self, wanted: list[int], timeout: float) -> list[Completion]:
        if not wanted:
            return []
        pending = [tag for tag, _, _ in self._inflight]
        available = [c.tag for c in self._backlog] + pending
        positions: list[int] = []
        for tag in wanted:
            # Each asked tag takes the oldest outstanding completion with that tag not yet taken.
            pos = next((i for i, t in enumerate(available) if t == tag and i not in positions), None)
            if pos is None:
                raise ValueError(f"tag {tag} is not outstanding on queue {self.tile} (or asked for twice)")
            positions.append(pos)
        self._collect(max(positions) + 1, timeout)
        chosen = set(positions)
        done = [c for i, c in enumerate(self._backlog) if i in chosen]
        self._backlog = deque(c for i, c in enumerate(self._backlog) if i not in chosen)
        return done

    def set_enabled(self, on: bool) -> None:
        """Let the queue fetch and execute commands (CONTROL.enable), or stop it after what is in flight."""
        self._check_live()
        self._set(regs.Queue.CONTROL, regs.set_field(0, regs.Queue.CONTROL_ENABLE, int(bool(on))))

    # -- watchdog, per-tile reset and recovery --------------------------------------------------------

    def set_watchdog(self, cycles: int) -> None:
        """Abort a command whose unit makes no progress for ``cycles`` cycles (QUEUE.WATCHDOG; 0: off).

        An aborted command completes with ``TIMEOUT`` and the queue halts; ``Device.recover`` gets it going.
        """
        self._check_live()
        if isinstance(cycles, bool) or not isinstance(cycles, int) or not 0 <= cycles <= 0xFFFF_FFFF:
            raise ValueError(f"queue {self.tile}: watchdog must be 0 (off) to 2**32-1 cycles, not {cycles!r}")
        self._set(regs.Queue.WATCHDOG, cycles)

    def watchdog(self) -> int:
        """QUEUE.WATCHDOG: cycles without progress before a command is aborted (0: off)."""
        return self._reg(regs.Queue.WATCHDOG)

    def reset_tile(self) -> list[tuple[int, int, bytes]]:
        """Reset this tile alone (QUEUE.RESET) and return the commands that lost their completion.

        The tile's command processor, DMA and tile core are reset; its memories, device memory,
        semaphores and the other tiles are kept.  The ring starts again at index 0 (the completion
        ring is cleared first).  Completions already collected stay for :meth:`wait`; the commands
        returned, ``(tag, opcode, command)`` in submission order (aborted with TIMEOUT, then in
        flight), will never complete.
        """
        self._check_live()
        return self._observers.run("reset_tile", self.tile, {}, self._reset_tile)

    def _reset_tile(self) -> list[tuple[int, int, bytes]]:
        self._poll()
        lost = [(c.tag, c.opcode, c.command) for c in self._aborted] + list(self._inflight)
        self._aborted.clear()
        self._set(regs.Queue.RESET, regs.set_field(0, regs.Queue.RESET_TILE, 1))
        wait_reset_done(self.transport, self.base, self.tile)
        self.transport.write_block(self.cq, bytes(self.entries * regs.COMPLETION_BYTES))
        self._inflight.clear()
        self._tail = self._head = 0
        self._phase = 1
        self._quiet = False
        return lost

    def state(self) -> QueueState:
        """Where the queue stands (STATUS, ERROR and HEAD read now): what a recovery needs to know."""
        self._check_live()
        q = regs.Queue
        halted = bool(regs.get_field(self._reg(q.STATUS), q.STATUS_HALTED))
        error_word = self._reg(q.ERROR)
        error = None
        if halted:
            error = (regs.get_field(error_word, q.ERROR_CODE), regs.get_field(error_word, q.ERROR_INDEX))
        fetched = (self._reg(q.HEAD) - self._head) % self.entries
        return QueueState(halted, error, fetched, len(self._aborted))

    def resume(self) -> None:
        """Leave the halted state and clear its IRQ_STATUS.error; republish commands a halted queue may have dropped."""
        self._check_live()
        q = regs.Queue
        self._set(q.CONTROL, regs.set_field(regs.set_field(0, q.CONTROL_ENABLE, 1), q.CONTROL_RESUME, 1))
        self.clear_irq(self.IRQ_ERROR)
        if self._reg(q.TAIL) != self._tail:
            self._set(q.DOORBELL, self._tail)
