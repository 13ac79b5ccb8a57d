"""The device: discovery, device memory and command queues."""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from types import TracebackType

import numpy as np
from numpy.typing import DTypeLike

from . import regs
from .allocator import Allocator
from .errors import CommandError, DeviceTimeout, DriverError, NotADx1Device, QueueError
from .registry import open_transport
from .transport import Transport

__all__ = ["Block", "Capabilities", "Completion", "Device", "Queue"]

#: Longest single sleep between completion polls, so a transport without an interrupt line stays responsive.
_POLL_SLICE = 0.001


def _version(v: int) -> str:
    return f"{v >> 16}.{v & 0xFFFF}"


@dataclass(frozen=True)
class Block:
    """One register block found by walking the NEXT chain; ``type`` is ``None`` for an unknown ID."""

    type: regs.BlockType | None
    id: int
    base: int
    version: int


@dataclass(frozen=True)
class Capabilities:
    """What the GLOBAL block reports about the device."""

    hw_version: int
    tiles: int
    array: int
    semaphores: int
    spm_rows: int
    acc_rows: int
    mem_bytes: int
    postop: bool
    copy: bool
    trace: bool


@dataclass(frozen=True)
class Completion:
    """One completion entry, with the ring index it was written at."""

    index: int
    tag: int
    opcode: int
    status: int
    timestamp: int

    @property
    def ok(self) -> bool:
        return self.status == regs.ErrorCode.OK


class Device:
    """An open DX-1.

    Parameters
    ----------
    transport:
        How to reach the device; the device closes it on :meth:`close`.
    reset:
        Reset the device (every queue, counter and semaphore) after discovery,
        so that queues start from ring index 0.  Device memory is kept.
    ring_log2:
        Default log2 of the ring entries of each queue.

    Raises
    ------
    NotADx1Device
        Magic or major spec version do not match.
    DriverError
        The register block chain is malformed (loops, leaves the register space, or lacks a block).
    """

    def __init__(self, transport: Transport, *, reset: bool = True, ring_log2: int = 6):
        self.transport = transport
        self.ring_log2 = ring_log2
        self.blocks = self._walk()
        self.global_base = self._bases(regs.BlockType.GLOBAL)[0]
        self.caps = self._identify()
        self.queue_bases = self._bases(regs.BlockType.QUEUE)
        if len(self.queue_bases) != self.caps.tiles:
            raise DriverError(f"CAPS reports {self.caps.tiles} tiles but the register space has "
                              f"{len(self.queue_bases)} QUEUE blocks")
        if self.caps.mem_bytes > transport.mem_bytes:
            raise DriverError(f"MEM_BYTES reports {self.caps.mem_bytes} bytes but the transport reaches only "
                              f"{transport.mem_bytes}")
        self.allocator = Allocator(0, self.caps.mem_bytes)
        self._queues: dict[int, Queue] = {}
        if reset:
            self.reset()

    @classmethod
    def open(cls, spec: str, **kwargs) -> Device:
        """Open the device named by ``spec`` (see :func:`open_transport`)."""
        transport = open_transport(spec)
        try:
            return cls(transport, **kwargs)
        except BaseException:
            transport.close()
            raise

    # -- discovery ------------------------------------------------------------------------------

    def _walk(self) -> tuple[Block, ...]:
        t = self.transport
        blocks: list[Block] = []
        seen: set[int] = set()
        addr = 0
        while True:
            # A chain longer than the register space has room for must loop; the
            # seen set names where, the bound keeps a broken device from hanging us.
            if addr in seen:
                raise DriverError(f"register block chain loops: block at 0x{blocks[-1].base:x} points back to "
                                  f"0x{addr:x}")
            if addr % regs.BLOCK_ALIGN or addr + regs.BLOCK_ALIGN > t.reg_bytes:
                raise DriverError(f"register block chain is broken: block at 0x{blocks[-1].base:x} has NEXT "
                                  f"0x{addr:x}, not a {regs.BLOCK_ALIGN:#x}-aligned block inside the "
                                  f"register space of {t.reg_bytes:#x} bytes")
            seen.add(addr)
            block_id, version, nxt = t.read_u32s(addr, 3)
            try:
                kind: regs.BlockType | None = regs.BlockType(block_id)
            except ValueError:
                kind = None
            if not blocks and kind is not regs.BlockType.GLOBAL:
                raise NotADx1Device(f"block 0 ID reads 0x{block_id:08x}, expected GLOBAL "
                                    f"0x{regs.BlockType.GLOBAL:08x}")
            blocks.append(Block(kind, block_id, addr, version))
            if nxt == 0:
                return tuple(blocks)
            addr = nxt

    def _bases(self, kind: regs.BlockType) -> list[int]:
        return [b.base for b in self.blocks if b.type is kind]

    def _identify(self) -> Capabilities:
        g = regs.Global
        magic, hw, caps, spm_rows, acc_rows, mem_bytes, features = self.transport.read_u32s(
            self.global_base + g.MAGIC, 7)
        if magic != regs.MAGIC:
            raise NotADx1Device(f"GLOBAL MAGIC reads 0x{magic:08x}, expected 0x{regs.MAGIC:08x} (\"DX11\")")
        if hw >> 16 != regs.SPEC_VERSION >> 16:
            raise NotADx1Device(f"GLOBAL HW_VERSION reads {_version(hw)}, but this driver supports spec "
                                f"{_version(regs.SPEC_VERSION)} (major versions must match)")
        return Capabilities(
            hw_version=hw,
            tiles=regs.get_field(caps, g.CAPS_TILES),
            array=regs.get_field(caps, g.CAPS_ARRAY),
            semaphores=regs.get_field(caps, g.CAPS_SEMAPHORES),
            spm_rows=spm_rows,
            acc_rows=acc_rows,
            mem_bytes=mem_bytes,
            postop=bool(regs.get_field(features, g.FEATURES_POSTOP)),
            copy=bool(regs.get_field(features, g.FEATURES_COPY)),
            trace=bool(regs.get_field(features, g.FEATURES_TRACE)),
        )

    # -- registers and memory ---------------------------------------------------------------------

    def read_reg(self, base: int, offset: int) -> int:
        return self.transport.read32(base + offset)

    def write_reg(self, base: int, offset: int, value: int) -> None:
        self.transport.write32(base + offset, value)

    def read_mem(self, addr: int, n: int) -> bytes:
        """Read ``n`` bytes of device memory at ``addr``."""
        return self.transport.read_block(addr, n)

    def read_array(self, addr: int, shape: int | tuple[int, ...], dtype: DTypeLike) -> np.ndarray:
        """Read a C-ordered array of ``shape`` and little-endian ``dtype`` from device memory."""
        dt = np.dtype(dtype).newbyteorder("<")
        count = int(np.prod(shape))
        return np.frombuffer(self.read_mem(addr, count * dt.itemsize), dtype=dt).reshape(shape).copy()

    def write_mem(self, addr: int, data: bytes | bytearray | memoryview | np.ndarray) -> None:
        """Write bytes, or an array in C order and little-endian byte order, to device memory at ``addr``."""
        if isinstance(data, np.ndarray):
            data = np.ascontiguousarray(data, dtype=data.dtype.newbyteorder("<")).tobytes()
        self.transport.write_block(addr, data)

    def alloc(self, n: int, align: int | None = None) -> int:
        """Allocate ``n`` bytes of device memory (see :meth:`Allocator.alloc`)."""
        return self.allocator.alloc(n, align)

    def free(self, addr: int) -> None:
        self.allocator.free(addr)

    # -- control --------------------------------------------------------------------------------

    def reset(self) -> None:
        """Reset every queue, counter and semaphore; open :class:`Queue` objects become unusable."""
        self.write_reg(self.global_base, regs.Global.RESET, 1 << regs.Global.RESET_ALL[0])
        for q in self._queues.values():
            q._release()
        self._queues.clear()

    def wait_any(self, queues: Sequence[Queue], *, at_least: int = 1, timeout: float = 1.0) -> None:
        """Wait until one of ``queues`` has ``at_least`` completions ready (or all it has outstanding).

        For feeding several queues at once: wait here, then take what each has
        ready, so that no queue runs dry while another is drained.  Larger
        batches mean fewer host round trips competing with the device's DMA.
        """
        deadline = time.monotonic() + timeout

        def ready() -> bool:
            return any(q.poll() >= min(at_least, q.outstanding) for q in queues)

        while not ready():
            for q in queues:
                q.check()
                q._set(regs.Queue.IRQ_STATUS, 1 << regs.Queue.IRQ_STATUS_COMPLETION[0])
            if ready():
                return
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise DeviceTimeout(f"no completion on queues {[q.tile for q in queues]} within {timeout} s")
            self.transport.wait_irq(min(remaining, _POLL_SLICE))

    def queue(self, tile: int, *, ring_log2: int | None = None) -> Queue:
        """The command queue of ``tile``, set up on first use (``ring_log2`` applies only then)."""
        if not 0 <= tile < self.caps.tiles:
            raise ValueError(f"tile must be 0 to {self.caps.tiles - 1}, not {tile!r}")
        if tile not in self._queues:
            self._queues[tile] = Queue(self, tile, self.queue_bases[tile],
                                       self.ring_log2 if ring_log2 is None else ring_log2)
        return self._queues[tile]

    def close(self) -> None:
        self.transport.close()

    def __enter__(self) -> Device:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()


class Queue:
    """The command queue of one tile: a command ring and a completion ring in device memory.

    Contract: :meth:`submit` never overflows the ring; :meth:`wait` delivers
    every completion exactly once, in ring order, and checks that each carries
    the tag of the command at its ring index.  Completions collected while
    :meth:`submit` waits for ring space are kept until a :meth:`wait` asks.
    """

    def __init__(self, device: Device, tile: int, base: int, ring_log2: int):
        if not 1 <= ring_log2 <= 16:
            raise ValueError(f"ring_log2 must be 1 to 16, not {ring_log2!r}")
        self.device = device
        self.tile = tile
        self.base = base
        self.entries = 1 << ring_log2
        q = regs.Queue
        head, tail = self._reg(q.HEAD), self._reg(q.TAIL)
        if head or tail:
            raise DriverError(f"queue {tile} is not at ring index 0 (HEAD={head}, TAIL={tail}); reset the device")
        self.ring = device.alloc(self.entries * regs.COMMAND_BYTES)
        self.cq = device.alloc(self.entries * regs.COMPLETION_BYTES)
        # Phase starts at 1, so stale memory with bit 63 set would read as a
        # completion: clear the completion ring before the device may write it.
        device.write_mem(self.cq, bytes(self.entries * regs.COMPLETION_BYTES))
        self._set(q.CONTROL, 0)
        self._set(q.RING_BASE, self.ring)
        self._set(q.RING_LOG2, ring_log2)
        self._set(q.CQ_BASE, self.cq)
        self._set(q.DMA_BASE, 0)
        self._set(q.DMA_LIMIT, device.caps.mem_bytes)
        self._set(q.IRQ_STATUS, 0b11)
        self._set(q.IRQ_MASK, (1 << q.IRQ_MASK_COMPLETION[0]) | (1 << q.IRQ_MASK_ERROR[0]))
        self._set(q.CONTROL, 1 << q.CONTROL_ENABLE[0])
        self._tail = 0  # next ring index the host writes
        self._head = 0  # next ring index whose completion the host reads
        self._phase = 1  # phase bit of a fresh completion at _head
        self._inflight: deque[tuple[int, int]] = deque()  # (tag, opcode) of published commands from _head on
        self._backlog: deque[Completion] = deque()  # read from the ring, not yet delivered
        self._live = True

    # -- registers ------------------------------------------------------------------------------

    def _reg(self, offset: int) -> int:
        return self.device.read_reg(self.base, offset)

    def _set(self, offset: int, value: int) -> None:
        self.device.write_reg(self.base, offset, value)

    def _release(self) -> None:
        self._live = False
        self.device.free(self.ring)
        self.device.free(self.cq)

    def _check_live(self) -> None:
        if not self._live:
            raise DriverError(f"queue {self.tile} was reset; get a new one from Device.queue")

    @property
    def outstanding(self) -> int:
        """Completions not yet delivered: commands in flight plus collected ones."""
        return len(self._inflight) + len(self._backlog)

    def check(self) -> None:
        """Raise :class:`QueueError` if the queue is halted."""
        q = regs.Queue
        if regs.get_field(self._reg(q.STATUS), q.STATUS_HALTED):
            error = self._reg(q.ERROR)
            raise QueueError(regs.get_field(error, q.ERROR_CODE), regs.get_field(error, q.ERROR_INDEX),
                             tile=self.tile)

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
                    self.device.write_mem(self.ring + run_start * regs.COMMAND_BYTES, b"".join(run))
            self._inflight.extend((int.from_bytes(c[2:4], "little"), c[0]) for c in batch)
            self._tail = (self._tail + len(batch)) % self.entries
            self._set(regs.Queue.DOORBELL, self._tail)
        return tags

    # -- completion -----------------------------------------------------------------------------

    def _poll(self) -> int:
        """Move every fresh completion from the ring to the backlog; return how many."""
        if not self._inflight:
            return 0
        n = min(len(self._inflight), self.entries - self._head)
        raw = self.device.read_mem(self.cq + self._head * regs.COMPLETION_BYTES, n * regs.COMPLETION_BYTES)
        got = 0
        for k in range(n):
            entry = regs.unpack_completion(raw[k * 8:(k + 1) * 8])
            if entry["phase"] != self._phase:
                break
            tag, opcode = self._inflight[0]
            if entry["tag"] != tag or entry["opcode"] != opcode:
                raise DriverError(
                    f"queue {self.tile}: completion at ring index {self._head} has tag {entry['tag']} opcode "
                    f"0x{entry['opcode']:02x}, but the command there has tag {tag} opcode 0x{opcode:02x} "
                    f"(lost or duplicated completion)")
            self._inflight.popleft()
            self._backlog.append(Completion(self._head, entry["tag"], entry["opcode"], entry["status"],
                                            entry["timestamp"]))
            self._head += 1
            got += 1
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
        """Poll until the backlog holds at least ``need`` completions."""
        deadline = time.monotonic() + timeout
        irq_clear = 1 << regs.Queue.IRQ_STATUS_COMPLETION[0]
        while len(self._backlog) < need:
            if self._poll():
                continue
            self.check()
            # Clear the interrupt before the last look at the ring, so a
            # completion landing in between still raises it for wait_irq.
            self._set(regs.Queue.IRQ_STATUS, irq_clear)
            if self._poll():
                continue
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                tag, opcode = self._inflight[0]
                raise DeviceTimeout(
                    f"queue {self.tile}: no completion for ring index {self._head} (tag {tag}, opcode "
                    f"0x{opcode:02x}) within {timeout} s; HEAD={self._reg(regs.Queue.HEAD)}, "
                    f"TAIL={self._reg(regs.Queue.TAIL)}, STATUS=0x{self._reg(regs.Queue.STATUS):x}")
            self.device.transport.wait_irq(min(remaining, _POLL_SLICE))

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
            The queue halted on a ring error.
        """
        self._check_live()
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
        pending = [tag for tag, _ in self._inflight]
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

    def resume(self) -> None:
        """Leave the halted state; republish commands a halted queue may have dropped."""
        self._check_live()
        q = regs.Queue
        self._set(q.CONTROL, (1 << q.CONTROL_ENABLE[0]) | (1 << q.CONTROL_RESUME[0]))
        if self._reg(q.TAIL) != self._tail:
            self._set(q.DOORBELL, self._tail)
