"""The device: discovery of its register blocks, device memory, and the objects of each tile's blocks.

Walking the NEXT chain from register address 0 finds every block; the n-th
QUEUE, PERF and TRACE block belong to tile n.  :meth:`Device.queue`,
:meth:`Device.perf` and :meth:`Device.trace` hand out the objects that drive
them (:class:`CommandQueue`, :class:`Perf`, :class:`TraceFifo`), so no caller needs
a block address.

The device sits on top of the driver's modules and none of them imports it: a queue gets the
transport, the allocator, the completion waits (:mod:`.waiting`) and the observers
(:mod:`.observe`) it needs; recovery (:mod:`.recovery`) works through a queue's public interface.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from types import TracebackType

import numpy as np
from numpy.typing import DTypeLike

from . import regs
from .allocator import Allocator
from .errors import DriverError, NotADx1Device, TileFenced
from .observe import Observer, Observers
from .perf import Perf
from .queue import CommandQueue
from .recovery import Recovery, recover
from .registry import open_transport
from .trace import TraceFifo
from .transport import Transport
from .waiting import CompletionWaits, wait_reset_done

__all__ = ["Block", "Capabilities", "Device"]


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
    """What the GLOBAL block reports about the device (``dev.caps``).

    Attributes
    ----------
    hw_version:
        HW_VERSION: the spec version the hardware implements, major in the high 16 bits.
    tiles, array:
        Tiles, and the side of each tile's systolic array (``array x array`` MACs a cycle).
    mem_banks, mem_bytes:
        Banks and bytes of device memory.
    semaphores:
        GLOBAL's semaphores (SIGNAL/WAIT).
    spm_rows, acc_rows:
        Rows of each tile's scratchpad and accumulator buffer.
    postop, copy, trace, vector:
        FEATURES: the POSTOP and COPY commands, the TRACE blocks, and the vector unit (VECTOR, TABLE and
        TRANSPOSE).
    link_ports, rank, chips:
        The chip-to-chip link's ports (0: none; FEATURES.link), and GLOBAL.CHIP_ID: this chip's rank on its
        board of ``chips`` chips (rank 0 of 1 for a single chip, and on a device older than spec 1.4).
    link_width, link_latency:
        LINK.CAPS.width (bytes per cycle of each direction of a port: the link's peak) and LINK.LATENCY
        (cycles); 0 without a link.
    """

    hw_version: int
    tiles: int
    array: int
    mem_banks: int
    semaphores: int
    spm_rows: int
    acc_rows: int
    mem_bytes: int
    postop: bool
    copy: bool
    trace: bool
    vector: bool
    link_ports: int = 0
    rank: int = 0
    chips: int = 1
    link_width: int = 0
    link_latency: int = 0


class Device:
    """An open DX-1: ``with Device.open("model") as dev: ...`` (or ``Device(transport)``).

    Parameters
    ----------
    transport:
        How to reach the device; the device closes it on :meth:`close`.
    reset:
        Reset the device (every queue, counter and semaphore) after discovery,
        so that queues start from ring index 0.  Device memory is kept.
    ring_log2:
        Default log2 of the ring entries of each queue.

    Attributes
    ----------
    caps:
        What the GLOBAL block reports (:class:`Capabilities`: tiles, array size, device memory, ...).
    blocks:
        Every register block discovery found, in chain order (:class:`Block`).
    transport:
        The transport the device was opened on.
    name:
        The device string :meth:`open` opened, else the transport's class name.
    allocator:
        The device-memory allocator behind :meth:`alloc` and :meth:`free`.
    fenced:
        Fenced tiles and why (:meth:`fence`); :attr:`usable_tiles` are the others.

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
        self.name = type(transport).__name__
        self.blocks = self._walk()
        self.global_base = self._bases(regs.BlockType.GLOBAL)[0]
        self._caps = self._identify()
        self.queue_bases = self._tile_bases(regs.BlockType.QUEUE)
        self.perf_bases = self._tile_bases(regs.BlockType.PERF)
        self.trace_bases = self._tile_bases(regs.BlockType.TRACE) if self.caps.trace else []
        if self.caps.mem_bytes > transport.mem_bytes:
            raise DriverError(f"MEM_BYTES reports {self.caps.mem_bytes} bytes but the transport reaches only "
                              f"{transport.mem_bytes}")
        self.allocator = Allocator(0, self.caps.mem_bytes)
        self._queues: dict[int, CommandQueue] = {}
        self._observers = Observers()
        self._waits = CompletionWaits(transport, self.open_queues)
        #: Fenced tiles and why (see :meth:`fence`).
        self.fenced: dict[int, str] = {}
        #: Recoveries per tile (:meth:`recover`); at ``fence_after`` the tile is fenced.
        self.strikes = [0] * self.caps.tiles
        self.fence_after = 3
        if reset:
            self.reset()

    @classmethod
    def open(cls, device: str, **kwargs) -> Device:
        """Open the device that the device string ``device`` names (see :func:`open_transport`).

        ``kwargs`` go to the constructor (``reset``, ``ring_log2``).
        """
        transport = open_transport(device)
        try:
            dev = cls(transport, **kwargs)
        except BaseException:
            transport.close()
            raise
        dev.name = device
        return dev

    @classmethod
    def open_board(cls, device: str, **kwargs) -> list[Device]:
        """Open ``device`` and, when it names a board of chips (``model:chips=4``, ``sim:chips=2``: its
        transport lists every chip's in ``board_transports``), every other chip of it: one device a chip, in
        rank order, the others named ``device#rank``.  A single device is a list of one.

        ``kwargs`` go to the constructor (``reset``, ``ring_log2``).  If a chip does not open, the ones
        opened before it are closed again.
        """
        first = cls.open(device, **kwargs)
        chips = [first]
        try:
            for rank, transport in enumerate(getattr(first.transport, "board_transports", [])[1:], 1):
                chip = cls(transport, **kwargs)
                chip.name = f"{device}#{rank}"
                chips.append(chip)
        except BaseException:
            for chip in chips:
                chip.close()
            raise
        return chips

    @property
    def caps(self) -> Capabilities:
        """What the GLOBAL block reports: hardware version, tiles, array size, memory banks, semaphores,
        scratchpad and accumulator rows, device memory bytes and the optional features (read at discovery)."""
        return self._caps

    def __repr__(self) -> str:
        c = self.caps
        state = "closed" if self.transport.closed else f"{len(self.usable_tiles)} usable"
        vector = " with a vector unit" if c.vector else ""
        return (f"<Device {self.name!r}: dx1 {_version(c.hw_version)}, {c.tiles} tiles ({state}) of "
                f"{c.array}x{c.array}{vector}, {c.mem_bytes // 1024} KiB device memory, "
                f"over {type(self.transport).__name__}>")

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

    def _tile_bases(self, kind: regs.BlockType) -> list[int]:
        """The bases of the ``kind`` blocks, one a tile, in tile order."""
        bases = self._bases(kind)
        if len(bases) != self.caps.tiles:
            raise DriverError(f"CAPS reports {self.caps.tiles} tiles but the register space has {len(bases)} "
                              f"{kind.name} blocks (expected one a tile)")
        return bases

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
            mem_banks=regs.get_field(caps, g.CAPS_MEM_BANKS),
            semaphores=regs.get_field(caps, g.CAPS_SEMAPHORES),
            spm_rows=spm_rows,
            acc_rows=acc_rows,
            mem_bytes=mem_bytes,
            postop=bool(regs.get_field(features, g.FEATURES_POSTOP)),
            copy=bool(regs.get_field(features, g.FEATURES_COPY)),
            trace=bool(regs.get_field(features, g.FEATURES_TRACE)),
            vector=bool(regs.get_field(features, g.FEATURES_VECTOR)),
            **self._identify_link(hw, caps, features),
        )

    @property
    def link_base(self) -> int | None:
        """Base of the LINK block (``regs.Link`` gives its registers), or None on a device without one."""
        found = [b.base for b in self.blocks if b.type is regs.BlockType.LINK]
        return found[0] if found else None

    def _identify_link(self, hw: int, caps: int, features: int) -> dict[str, int]:
        """The link's part of the capabilities: none before spec 1.4, which added CHIP_ID and the LINK block."""
        if hw < 0x0001_0004:
            return {}
        g, lk = regs.Global, regs.Link
        chip_id = self.transport.read32(self.global_base + g.CHIP_ID)
        found = {
            "rank": regs.get_field(chip_id, g.CHIP_ID_RANK),
            "chips": regs.get_field(chip_id, g.CHIP_ID_CHIPS),
        }
        if not regs.get_field(features, g.FEATURES_LINK):
            return found
        base = self.link_base
        if base is None:
            raise DriverError("FEATURES announces the chip-to-chip link but the register space has no LINK block")
        return {**found, "link_ports": regs.get_field(caps, g.CAPS_LINK_PORTS),
                "link_width": regs.get_field(self.transport.read32(base + lk.CAPS), lk.CAPS_WIDTH),
                "link_latency": regs.get_field(self.transport.read32(base + lk.LATENCY), lk.LATENCY_CYCLES)}

    # -- registers and memory ---------------------------------------------------------------------

    def read_reg(self, base: int, offset: int) -> int:
        """Read the register at ``offset`` (from ``regs``) of the block at ``base``."""
        return self.transport.read32(base + offset)

    def write_reg(self, base: int, offset: int, value: int) -> None:
        """Write the register at ``offset`` (from ``regs``) of the block at ``base``; for what no object covers."""
        self._observers.run("write_reg", None, {"base": base, "offset": offset, "value": value},
                            lambda: self.transport.write32(base + offset, value))

    def cycles(self) -> int:
        """GLOBAL's 64-bit cycle counter; CYCLES_LO is read first, which latches CYCLES_HI."""
        g = regs.Global
        lo = self.read_reg(self.global_base, g.CYCLES_LO)
        return lo | self.read_reg(self.global_base, g.CYCLES_HI) << 32

    def semaphore(self, index: int) -> int:
        """The value of semaphore ``index`` (GLOBAL SEM<index>)."""
        return regs.get_field(self.read_reg(self.global_base, regs.Global.sem(index)), regs.Global.SEM_VALUE)

    def set_semaphore(self, index: int, value: int) -> None:
        """Set semaphore ``index`` to ``value`` (which must fit the semaphore's 16 bits)."""
        self.write_reg(self.global_base, regs.Global.sem(index), regs.set_field(0, regs.Global.SEM_VALUE, value))

    def observe(self, observer: Observer) -> None:
        """Let ``observer`` hear the calls made to this device and its queues from now on (see :mod:`.observe`).

        Raises
        ------
        TypeError, ValueError
            ``observer`` is no :class:`~dx1_driver.observe.Observer`, or observes this device already.
        """
        self._observers.add(observer)

    def unobserve(self, observer: Observer) -> None:
        """Stop ``observer`` hearing calls (harmless if it does not)."""
        self._observers.remove(observer)

    @property
    def observers(self) -> tuple[Observer, ...]:
        """The observers hearing calls now, in the order they hear them."""
        return tuple(self._observers)

    def read_mem(self, addr: int, n: int) -> bytes:
        """Read ``n`` bytes of device memory at ``addr``."""
        return self._observers.run("read_mem", None, {"addr": addr, "n": n},
                                   lambda: self.transport.read_block(addr, n))

    def read_array(self, addr: int, shape: int | tuple[int, ...], dtype: DTypeLike) -> np.ndarray:
        """Read a C-ordered array of ``shape`` and little-endian ``dtype`` from device memory."""
        dt = np.dtype(dtype).newbyteorder("<")
        count = int(np.prod(shape))
        return np.frombuffer(self.read_mem(addr, count * dt.itemsize), dtype=dt).reshape(shape).copy()

    def write_mem(self, addr: int, data: bytes | bytearray | memoryview | np.ndarray) -> None:
        """Write bytes, or an array in C order and little-endian byte order, to device memory at ``addr``."""
        if isinstance(data, np.ndarray):
            data = np.ascontiguousarray(data, dtype=data.dtype.newbyteorder("<")).tobytes()
        data = bytes(data)
        self._observers.run("write_mem", None, {"addr": addr, "data": data},
                            lambda: self.transport.write_block(addr, data))

    def alloc(self, n: int, align: int | None = None) -> int:
        """Allocate ``n`` bytes of device memory (see :meth:`Allocator.alloc`)."""
        return self.allocator.alloc(n, align)

    def free(self, addr: int) -> None:
        self.allocator.free(addr)

    # -- control --------------------------------------------------------------------------------

    def reset(self) -> None:
        """Reset every queue, counter and semaphore; open :class:`CommandQueue` objects become unusable."""
        self._observers.run("reset", None, {}, self._reset)

    def _reset(self) -> None:
        self.write_reg(self.global_base, regs.Global.RESET, 1 << regs.Global.RESET_ALL[0])
        for tile, base in enumerate(self.queue_bases):
            wait_reset_done(self.transport, base, tile)
        for q in self._queues.values():
            q._release()
        self._queues.clear()

    def wait_any(self, queues: Sequence[CommandQueue], *, at_least: int = 1, timeout: float = 1.0) -> None:
        """Wait until one of ``queues`` has ``at_least`` completions ready (or all it has outstanding).

        For feeding several queues at once: wait here, then take what each has
        ready, so that no queue runs dry while another is drained.  Larger
        batches mean fewer host round trips competing with the device's DMA.

        Raises
        ------
        DeviceTimeout
            None of ``queues`` had them within ``timeout`` seconds.
        """
        queues = tuple(queues)
        self._observers.run("wait_any", None, {"queues": queues, "at_least": at_least},
                            lambda: self._waits.any(queues, at_least=at_least, timeout=timeout))

    def open_queues(self) -> list[CommandQueue]:
        """The queues set up by :meth:`queue` since the last :meth:`reset`, in tile order."""
        return [self._queues[t] for t in sorted(self._queues)]

    def _check_tile(self, tile: int) -> None:
        if isinstance(tile, bool) or not isinstance(tile, int) or not 0 <= tile < self.caps.tiles:
            raise ValueError(f"tile must be 0 to {self.caps.tiles - 1}, not {tile!r}")

    def fence(self, tile: int, reason: str) -> None:
        """Fence ``tile`` off: :meth:`queue` refuses it and :attr:`usable_tiles` leaves it out."""
        self._check_tile(tile)
        self.fenced[tile] = reason

    @property
    def usable_tiles(self) -> list[int]:
        """The tiles that are not fenced, in order."""
        return [t for t in range(self.caps.tiles) if t not in self.fenced]

    def strike(self, tile: int) -> int:
        """Count one recovery of ``tile``; fence it at :attr:`fence_after`.  Returns its count."""
        self._check_tile(tile)
        self.strikes[tile] += 1
        if self.strikes[tile] >= self.fence_after:
            self.fence(tile, f"{self.strikes[tile]} recoveries (timeouts or halts)")
        return self.strikes[tile]

    def queue(self, tile: int, *, ring_log2: int | None = None) -> CommandQueue:
        """The command queue of ``tile``, set up on first use (``ring_log2`` applies only then).

        Raises
        ------
        TileFenced
            The tile is fenced off (:meth:`fence`).
        """
        self._check_tile(tile)
        if tile in self.fenced:
            raise TileFenced(tile, self.fenced[tile])
        if tile not in self._queues:
            self._queues[tile] = CommandQueue(self.transport, tile, self.queue_bases[tile],
                                              self.ring_log2 if ring_log2 is None else ring_log2,
                                              allocator=self.allocator, waits=self._waits, observers=self._observers)
        return self._queues[tile]

    def recover(self, tile: int, *, timeout: float = 1.0) -> Recovery:
        """Reset a stuck or halted tile and resubmit what did not complete (see :mod:`.recovery`).

        Raises
        ------
        ValueError
            ``tile`` is no tile of the device.
        DriverError
            ``tile``'s queue is not open (no :meth:`queue` since the last :meth:`reset`).
        ReplayRefused, TileFenced
            See :func:`~dx1_driver.recovery.recover`.
        """
        self._check_tile(tile)
        queue = self._queues.get(tile)
        if queue is None:
            raise DriverError(f"tile {tile} has no open queue to recover (open one with Device.queue)")
        return self._observers.run("recover", tile, {},
                                   lambda: recover(queue, self.strike, self.fenced, timeout=timeout))

    def perf(self, tile: int) -> Perf:
        """The PERF counters of ``tile`` (its PERF block)."""
        self._check_tile(tile)
        return Perf(self.transport, tile, self.perf_bases[tile])

    def trace(self, tile: int) -> TraceFifo:
        """The trace FIFO of ``tile`` (its TRACE block).

        Raises
        ------
        DriverError
            FEATURES says the device has no trace buffer.
        """
        self._check_tile(tile)
        if not self.caps.trace:
            raise DriverError("the device has no trace buffer (GLOBAL FEATURES.trace reads 0)")
        return TraceFifo(self.transport, tile, self.trace_bases[tile])

    def close(self) -> None:
        self.transport.close()

    def __enter__(self) -> Device:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()
