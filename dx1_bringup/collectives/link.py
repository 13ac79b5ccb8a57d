"""The link algorithm: a chunked, pipelined ring over the chip-to-chip link (SEND and WAIT on every rank).

Every rank's device moves every byte between chips: the host enqueues SEND and WAIT commands on tile 0's
queue and waits for their completions, with the call's deadline on each.  Reductions are the receiving DMA's
(SEND with op ADD adds int32 lanes into the neighbour's memory, wrapping), so the link reduces only int32
sums; int8 and ``avg`` collectives take the host-staged ring (:func:`supports`).

Layout: each rank works in a scratch area of its own device memory (freed after the call), one slot per
segment (:func:`~.buffer.segment`), each slot padded to 8 bytes (SEND moves multiples of 8 at addresses that
are) and the padding zero, so an ADD of padding adds nothing.  The rank's elements go into the scratch area
through host memory (one read and one write of its own data; no byte crosses between ranks there) and come
out the same way; the ranks then tell each other where their scratch is and that it is filled (one host
rendezvous), so no SEND lands before its destination is ready, and pass a token round the ring ``n - 1``
times (a device-side barrier: every rank's data moves only after every rank started, in device time too).

Rank ``r`` sends on port 0 to ``r + 1`` and receives from ``r - 1``.  Each chunk SEND adds 1 to the
neighbour's semaphore :data:`SEM` (the last one), and before forwarding a chunk a rank WAITs for 1: both
ranks enumerate the same (step, slot, chunk) sequence, so the k-th WAIT is the k-th chunk that arrived, and a
chunk goes on as soon as it is there (pipelined).

* reduce-scatter, ``n - 1`` steps: at step ``s`` rank ``r`` sends slot ``r - 1 - s`` with ADD; after the
  last step its slot ``r`` holds the sum of every rank's segment ``r``.
* all-gather, ``n - 1`` steps: at step ``t`` rank ``r`` sends slot ``r - t`` with WRITE.
* all-reduce: reduce-scatter, then all-gather of the finished slots, on one scratch area.
* broadcast: a chain from the root with WRITE; reduce: a chain from root + 1 ending at the root with ADD; a
  chain cuts finer than the call's chunk (:func:`~dx1_bringup.perfmodel.collectives.chain_chunk_bytes`), so its
  pipeline fills quickly.
* barrier: the token rounds alone (after the host's fingerprint exchange, which is a barrier of the hosts).

A SEND that completes with an error (LINK_DOWN: a cut link; LINK_CRC; REMOTE_WINDOW) fails the rank, and so
the group (:class:`RankFailed`, with the code's name); a WAIT that does not complete within the deadline (a
dead neighbour) is :class:`CollectiveTimeout` naming the rank, the collective and the step.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from dx1_driver import CommandError, Device, DeviceTimeout, DriverError, regs

from ..perfmodel.collectives import chain_chunk_bytes
from ..spec import PAGE_BYTES, align_up
from ..timeline import LinkEvent
from .buffer import Buffer, segment
from .call import Call
from .errors import CollectiveTimeout
from .reduction import Reduction

__all__ = ["TILE", "usable", "supports", "port_to", "send", "recv", "barrier", "all_reduce", "reduce_scatter",
           "all_gather", "broadcast", "reduce"]

#: The tile whose queue runs the link commands.
TILE = 0
_ALIGN = 8
_WRITE, _ADD = 0, 1
_PORT_NEXT = 0


def _sem(dev: Device) -> int:
    """The semaphore the link collectives count arrivals on: the device's last one."""
    return dev.caps.semaphores - 1


def _p2p_sem(dev: Device) -> int:
    """The semaphore point-to-point receives count arrivals on: the one before the collectives'."""
    return max(0, dev.caps.semaphores - 2)


def port_to(rank: int, peer: int, size: int) -> int | None:
    """The link port from ``rank`` to ``peer`` in a ring of ``size``: 0 to the next, 1 to the previous, None when
    ``peer`` is no neighbour."""
    if peer == (rank + 1) % size:
        return 0
    if peer == (rank - 1) % size:
        return 1
    return None


def usable(devs: list[Device]) -> bool:
    """True when ``devs``, in rank order, are the chips of one ring board: each has link ports, its rank is its
    place in the list and its board holds exactly these chips."""
    n = len(devs)
    return all(d.caps.link_ports >= 2 and d.caps.chips == n and d.caps.rank == r for r, d in enumerate(devs))


def supports(op: str, dtype: np.dtype, red: Reduction | None) -> str:
    """Why the link cannot run ``op`` on ``dtype`` with ``red`` (``""`` when it can)."""
    if op in ("all_reduce", "reduce_scatter", "reduce") and (np.dtype(dtype) != np.int32 or red is None
                                                              or red.post is not None or red.redop != "sum"):
        return (f"the link algorithm reduces int32 sums only (its DMA adds int32 lanes), not a {red.describe()} "
                f"{np.dtype(dtype).name} {op}; use the ring or direct algorithm")
    return ""


@dataclass(frozen=True)
class _Slots:
    """Slot ``i`` holds segment ``i`` of ``count`` elements: at byte ``offsets[i]``, ``padded[i]`` bytes.

    A slot of a page or more starts half the banks' round of pages after the one before (``banks`` of
    :data:`~dx1_bringup.spec.PAGE_BYTES` pages interleaved): a ring step sends one slot while the step's
    arrival lands in the next, and an ADD's lander reads and writes where the sender reads, so the two streams
    stay in different banks instead of sharing one bank's read port all the way.
    """

    count: int
    itemsize: int
    n: int
    offsets: tuple[int, ...]
    padded: tuple[int, ...]

    @classmethod
    def of(cls, count: int, n: int, itemsize: int, banks: int = 1) -> _Slots:
        offsets, padded, at = [], [], 0
        round_bytes, half = PAGE_BYTES * banks, PAGE_BYTES * (banks // 2)
        for i in range(n):
            lo, hi = segment(count, n, i)
            size = align_up((hi - lo) * itemsize, _ALIGN)
            offsets.append(at)
            padded.append(size)
            at += size + ((half - size) % round_bytes if banks > 1 and size >= PAGE_BYTES else 0)
        return cls(count, itemsize, n, tuple(offsets), tuple(padded))

    @property
    def nbytes(self) -> int:
        return self.offsets[-1] + self.padded[-1] if self.n else 0

    def chunks(self, slot: int, chunk_bytes: int) -> list[tuple[int, int]]:
        """Slot ``slot`` as (byte offset in the area, bytes) pieces of at most ``chunk_bytes``."""
        start, size = self.offsets[slot], self.padded[slot]
        return [(start + a, min(chunk_bytes, size - a)) for a in range(0, size, chunk_bytes)]


class _Run:
    """One rank's link commands of one collective: its scratch area, the neighbour's, the command list."""

    def __init__(self, c: Call, nbytes: int, itemsize: int, *, port: int = _PORT_NEXT, sem: int | None = None):
        self.c = c
        self.dev = c.dev
        self.q = self.dev.queue(TILE)
        self.port = port
        self.sem = _sem(self.dev) if sem is None else sem
        self.nbytes = nbytes
        self.addr = self.dev.alloc(nbytes + _ALIGN, _ALIGN)  # the last 8 bytes: the barrier's token
        self.peer_addr = 0
        self.cmds: list[tuple[bytes, str]] = []
        self.chunk_bytes = max(_ALIGN, c.chunk * itemsize // _ALIGN * _ALIGN)

    def free(self) -> None:
        self.dev.free(self.addr)

    def fill(self, data: bytes) -> None:
        """The scratch area's contents, zero-padded (host memory to the rank's own device memory)."""
        self.c.step("link: filling the scratch area")
        try:
            self.dev.write_mem(self.addr, data + bytes(self.nbytes + _ALIGN - len(data)))
        except (DriverError, OSError) as e:
            raise self.c._failed("filling the link scratch area", e) from e

    def ready(self) -> None:
        """Open the link window, clear the semaphore, and learn the next rank's scratch address (a rendezvous)."""
        dev, c = self.dev, self.c
        try:
            dev.write_reg(dev.link_base, regs.Link.WINDOW_BASE, 0)
            dev.write_reg(dev.link_base, regs.Link.WINDOW_LIMIT, dev.caps.mem_bytes)
            dev.set_semaphore(self.sem, 0)
        except (DriverError, OSError) as e:
            raise c._failed("opening the link window", e) from e
        c.step("link: exchanging scratch addresses")
        addrs = c.exchange("link scratch", self.addr)
        self.peer_addr = addrs[(c.rank + 1) % c.size]

    def send(self, offset: int, length: int, op: int, where: str) -> None:
        peer = (self.c.rank + (1 if self.port == _PORT_NEXT else -1)) % self.c.size
        self.cmds.append((regs.send(tag=len(self.cmds) & 0xFFFF, op=op, port=self.port, src_addr=self.addr + offset,
                                    dst_addr=self.peer_addr + offset, length=length, sem=self.sem, count=1),
                          f"{where}: SEND of {length} bytes to rank {peer}"))

    def wait(self, count: int, where: str) -> None:
        if count:
            self.cmds.append((regs.wait(tag=len(self.cmds) & 0xFFFF, sem=self.sem, count=count),
                              f"{where}: WAIT for {count} chunk(s) from rank {(self.c.rank - 1) % self.c.size}"))

    def execute(self) -> None:
        """Submit the commands and collect their completions in order, each under the call's deadline (and, when
        the group keeps a ``link_log``, log each one with its start and end cycles)."""
        c = self.c
        batch = self.q.entries - 1
        log = c.log
        last = self.dev.cycles() if log is not None and self.cmds else 0
        for start in range(0, len(self.cmds), batch):
            part = self.cmds[start:start + batch]
            c.fabric.check(c.rank)
            c.step(part[0][1])
            try:
                self.q.submit([cmd for cmd, _ in part], timeout=c.timeout)
            except (DriverError, OSError) as e:
                raise c._failed("submitting link commands", e) from e
            for cmd, where in part:
                c.step(where)
                try:
                    (done,) = self.q.wait(1, timeout=c.timeout, check=True)
                    if log is not None:
                        last = self._log(log, cmd, where, last, done.timestamp)
                except CommandError as e:
                    raise c._failed(f"the command completed {regs.ErrorCode(e.code).name}", e) from e
                except DeviceTimeout as e:
                    error = CollectiveTimeout(
                        f"rank {c.rank} ({self.dev.name}) timed out after {c.timeout:g} s in {c.op} #{c.seq} "
                        f"at {where}", rank=c.rank, op=c.op, seq=c.seq, step=where, seconds=c.timeout)
                    c.fabric.abort(error)
                    raise error from e
                except (DriverError, OSError) as e:
                    raise c._failed("waiting for a link command", e) from e

    def _log(self, log: list, cmd: bytes, where: str, start: int, stamp: int) -> int:
        """Append the command's :class:`LinkEvent`; its end cycle (the completion's 31-bit stamp, unwrapped)."""
        c = self.c
        end = start - (start & 0x7FFF_FFFF) + stamp + (0x8000_0000 if stamp < (start & 0x7FFF_FFFF) else 0)
        send = cmd[0] == regs.Opcode.SEND
        length = int.from_bytes(cmd[16:20], "little") if send else 0
        step = 1 if self.port == _PORT_NEXT else -1
        log.append(LinkEvent(c.rank, c.op, c.seq, where.split(":")[0], "SEND" if send else "WAIT",
                             (c.rank + step) % c.size if send else (c.rank - step) % c.size, length, start, end))
        return end

    def read(self, offset: int, nbytes: int) -> bytes:
        try:
            return self.dev.read_mem(self.addr + offset, nbytes) if nbytes else b""
        except (DriverError, OSError) as e:
            raise self.c._failed("reading the link scratch area", e) from e


def _ring(run: _Run, slots: _Slots, phases: list[tuple[str, int, int]]) -> None:
    """Commands of ring phases ``(name, op, first slot offset)``: at step ``s`` of a phase, rank ``r`` sends slot
    ``r - first - s``; each chunk waits for its arrival in the step before (or the phase before)."""
    c = run.c
    n, r = c.size, c.rank
    pending = False  # whether the slot sent next arrived in the previous step (not in the first step of all)
    for name, op, first in phases:
        for s in range(n - 1):
            slot = (r - first - s) % n
            where = f"link {name} step {s + 1} of {n - 1}"
            for lo, length in slots.chunks(slot, run.chunk_bytes):
                if pending:
                    run.wait(1, where)
                run.send(lo, length, op, where)
            pending = True
    if pending:
        last_first, last_steps = phases[-1][2], n - 2
        run.wait(len(slots.chunks((r - last_first - last_steps - 1) % n, run.chunk_bytes)),
                 f"link {phases[-1][0]} step {n - 1} of {n - 1}")


def _gather_in(c: Call, src: Buffer, lo: int, hi: int, slots: _Slots, run: _Run, slot: int) -> bytearray:
    area = bytearray(slots.nbytes)
    part = c.read(src, lo, hi).astype(src.dtype.newbyteorder("<")).tobytes()
    area[slots.offsets[slot]:slots.offsets[slot] + len(part)] = part
    return area


def _scatter_in(c: Call, src: Buffer, count: int, slots: _Slots) -> bytearray:
    """Every segment of ``src`` into its slot."""
    data = c.read(src, 0, count).astype(src.dtype.newbyteorder("<")).tobytes()
    area = bytearray(slots.nbytes)
    for i in range(slots.n):
        lo, hi = segment(count, slots.n, i)
        area[slots.offsets[i]:slots.offsets[i] + (hi - lo) * slots.itemsize] = \
            data[lo * slots.itemsize:hi * slots.itemsize]
    return area


def _own(c: Call, src: Buffer, count: int) -> bytes:
    """The rank's ``count`` elements of ``src``, little-endian."""
    return c.read(src, 0, count).astype(src.dtype.newbyteorder("<")).tobytes()


def _values(raw: bytes, dtype: np.dtype) -> np.ndarray:
    return np.frombuffer(raw, dtype=np.dtype(dtype).newbyteorder("<")).astype(dtype)


def _out_all(c: Call, run: _Run, slots: _Slots, dst: Buffer, count: int) -> None:
    """Every slot of the scratch area into ``dst``, segment by segment."""
    area = run.read(0, slots.nbytes)
    c.step("link: storing the result")
    for i in range(slots.n):
        lo, hi = segment(count, slots.n, i)
        if hi > lo:
            c.write(dst, lo, _values(area[slots.offsets[i]:slots.offsets[i] + (hi - lo) * slots.itemsize],
                                     dst.dtype))


def _barrier(run: _Run) -> None:
    """``n - 1`` rounds of an 8-byte token round the ring: no rank's data moves before every rank has started
    (in device time too: the golden model's chips advance their clocks only with commands)."""
    n = run.c.size
    for k in range(n - 1):
        where = f"link barrier round {k + 1} of {n - 1}"
        run.send(run.nbytes, _ALIGN, _WRITE, where)
        run.wait(1, where)


def _collective(c: Call, nbytes: int, itemsize: int, fill: Callable[[_Run], bytes], plan: Callable[[_Run], None],
                out: Callable[[_Run], None]) -> None:
    run = _Run(c, nbytes, itemsize)
    try:
        run.fill(bytes(fill(run)))
        run.ready()
        _barrier(run)
        plan(run)
        run.execute()
        out(run)
    finally:
        run.free()


def send(c: Call, buf: Buffer, dst: int) -> None:
    """Rank ``c.rank`` sends ``buf`` to its neighbour ``dst`` (which calls :func:`recv`), chunk by chunk over the
    link into the receiver's scratch area, whose address comes by the host's fabric."""
    nbytes = align_up(buf.nbytes, _ALIGN)
    run = _Run(c, nbytes, buf.dtype.itemsize, port=port_to(c.rank, dst, c.size), sem=_p2p_sem(c.dev))
    try:
        run.fill(_own(c, buf, buf.count))
        c.step(f"link send to rank {dst}: waiting for its scratch address")
        run.peer_addr = c.recv(dst, "link scratch")
        for lo in range(0, nbytes, run.chunk_bytes):
            run.send(lo, min(run.chunk_bytes, nbytes - lo), _WRITE, f"link send to rank {dst}")
        run.execute()
    finally:
        run.free()


def recv(c: Call, buf: Buffer, src: int) -> None:
    """Receive into ``buf`` what neighbour ``src`` sends (:func:`send`): WAIT for each chunk, then store it."""
    nbytes = align_up(buf.nbytes, _ALIGN)
    run = _Run(c, nbytes, buf.dtype.itemsize, sem=_p2p_sem(c.dev))
    try:
        dev = c.dev
        try:
            dev.write_reg(dev.link_base, regs.Link.WINDOW_BASE, 0)
            dev.write_reg(dev.link_base, regs.Link.WINDOW_LIMIT, dev.caps.mem_bytes)
            dev.set_semaphore(run.sem, 0)
        except (DriverError, OSError) as e:
            raise c._failed("opening the link window", e) from e
        c.send(src, "link scratch", run.addr)
        chunks = len(range(0, nbytes, run.chunk_bytes))
        run.wait(chunks, f"link recv from rank {src}")
        run.execute()
        c.step(f"link recv from rank {src}: storing")
        if buf.count:
            c.write(buf, 0, _values(run.read(0, buf.nbytes), buf.dtype))
    finally:
        run.free()


def barrier(c: Call) -> None:
    """The device-side barrier alone: every rank's queue passes it only once every rank's has reached it."""
    _collective(c, 0, 1, lambda run: b"", lambda run: None, lambda run: None)


def all_reduce(c: Call, src: Buffer, dst: Buffer, count: int) -> None:
    slots = _Slots.of(count, c.size, src.dtype.itemsize, c.dev.caps.mem_banks)
    _collective(c, slots.nbytes, src.dtype.itemsize, lambda run: _scatter_in(c, src, count, slots),
                lambda run: _ring(run, slots, [("reduce-scatter", _ADD, 1), ("all-gather", _WRITE, 0)]),
                lambda run: _out_all(c, run, slots, dst, count))


def reduce_scatter(c: Call, src: Buffer, count: int, dst: Buffer, dst_lo: int) -> None:
    """Segment ``c.rank`` of the sum of every rank's ``src`` into ``dst`` from element ``dst_lo``."""
    slots = _Slots.of(count, c.size, src.dtype.itemsize, c.dev.caps.mem_banks)
    lo, hi = segment(count, c.size, c.rank)

    def out(run: _Run) -> None:
        c.step("link: storing the result")
        if hi > lo:
            c.write(dst, dst_lo, _values(run.read(slots.offsets[c.rank], (hi - lo) * slots.itemsize), dst.dtype))

    _collective(c, slots.nbytes, src.dtype.itemsize, lambda run: _scatter_in(c, src, count, slots),
                lambda run: _ring(run, slots, [("reduce-scatter", _ADD, 1)]), out)


def all_gather(c: Call, src: Buffer, src_lo: int, dst: Buffer, count: int) -> None:
    """Every rank's part (``src`` from element ``src_lo``: segment ``c.rank`` of ``count``) into ``dst``."""
    slots = _Slots.of(count, c.size, src.dtype.itemsize, c.dev.caps.mem_banks)
    lo, hi = segment(count, c.size, c.rank)
    _collective(c, slots.nbytes, src.dtype.itemsize,
                lambda run: _gather_in(c, src, src_lo, src_lo + hi - lo, slots, run, c.rank),
                lambda run: _ring(run, slots, [("all-gather", _WRITE, 0)]),
                lambda run: _out_all(c, run, slots, dst, count))


def _chain(run: _Run, nbytes: int, pos: int, op: int, name: str) -> None:
    """A chain of ``n`` ranks, this one at ``pos``: each chunk arrives from the one before, goes to the next."""
    n = run.c.size
    where = f"link {name}, hop {pos + 1} of {n}"
    chunk = chain_chunk_bytes(nbytes, n, run.chunk_bytes)
    for lo in range(0, nbytes, chunk):
        if pos > 0:
            run.wait(1, where)
        if pos < n - 1:
            run.send(lo, min(chunk, nbytes - lo), op, where)


def broadcast(c: Call, src: Buffer, dst: Buffer, count: int, root: int) -> None:
    """The root's ``src`` into every rank's ``dst``, along the chain root, root + 1, ..."""
    pos = (c.rank - root) % c.size
    nbytes = align_up(count * src.dtype.itemsize, _ALIGN)

    def out(run: _Run) -> None:
        if pos == 0 and dst == src:
            return
        c.step("link: storing the result")
        if count:
            c.write(dst, 0, _values(run.read(0, count * src.dtype.itemsize), dst.dtype))

    _collective(c, nbytes, src.dtype.itemsize, lambda run: _own(c, src, count) if pos == 0 else b"",
                lambda run: _chain(run, nbytes, pos, _WRITE, "broadcast"), out)


def reduce(c: Call, src: Buffer, dst: Buffer, count: int, root: int) -> None:
    """The sum of every rank's ``src`` into the root's ``dst``, along the chain root + 1, root + 2, ..., root."""
    pos = (c.rank - root - 1) % c.size
    nbytes = align_up(count * src.dtype.itemsize, _ALIGN)

    def out(run: _Run) -> None:
        if pos == c.size - 1 and count:
            c.step("link: storing the result")
            c.write(dst, 0, _values(run.read(0, count * src.dtype.itemsize), dst.dtype))

    _collective(c, nbytes, src.dtype.itemsize, lambda run: _own(c, src, count),
                lambda run: _chain(run, nbytes, pos, _ADD, "reduce"), out)
