"""A seeded fuzz stream as capture events: setup, random batches on both queues, and the final dump.

A stream is cut into *segments*; each starts from a reset device and needs nothing from the segments
before it, so a reproducer is one segment.  A segment is:

1. **setup**: each queue's DMA window set to its window of the :class:`~dx1_bringup.fuzz.layout.Layout`;
   random bytes uploaded to every part of the windows that commands read or that is compared (the
   input area, the output area, the priming area, the guard bytes around each window's ends); both
   tiles' scratchpads and accumulator buffers loaded whole from the priming area, and on tiles with a
   vector unit its lookup table (which a reset keeps) from the primed scratchpad, so no command reads a
   local row or table entry whose value depends on what ran on the device before;
2. **batches**: :func:`~dx1_bringup.fuzz.streams.random_batch` commands for both queues (every opcode,
   errors of every kind in ``CHECK_ORDER``, SIGNAL/WAIT pairs kept satisfiable), published with one
   doorbell per queue in a random order, so both tiles run at once; then a wait on each queue and a
   download of the bytes the batch's STOREs and COPYs may write (refused ones included: they must
   write nothing) and of the guard bytes at each window's ends.  Now and then a batch runs with a queue's window
   narrowed to exclude its output area (so STOREs and COPYs there are refused with DMA_WINDOW), and
   the window is put back after it;
3. **dump**: every window opened to the whole memory, each tile's whole scratchpad and accumulator
   buffer stored to its dump area, and the dump areas and the windows downloaded.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from ..replay.capture import DmaWindow, Doorbell, Download, Event, Submit, Upload, Wait
from ..replay.ranges import merge_ranges
from ..spec import Opcode, pack_command, unpack_command
from .layout import Layout
from .streams import random_batch

__all__ = ["StreamParams", "written_ranges", "compared_regions", "setup_events", "batch_events", "dump_events",
           "PRIME_OFFSET", "UPLOAD_BYTES", "GUARD"]

#: Where, from a window's base, the bytes that prime the scratchpad and accumulator buffer start.
PRIME_OFFSET = 0x10000
#: Bytes from a window's base that setup uploads (input, output and priming areas).
UPLOAD_BYTES = 0x20000
#: Bytes of guard on each side of a window's ends that setup uploads and every batch compares.
GUARD = 0x100


@dataclass(frozen=True)
class StreamParams:
    """How a fuzz stream is drawn.

    Attributes
    ----------
    length:
        Commands a queue gets at least per batch (a batch has at most ``entries - 1`` a queue).
    error_rate:
        Share of commands that are refused on purpose.
    sync_rate:
        Chance, at each step of a batch, of a SIGNAL/WAIT pair between the queues.
    narrow_rate:
        Chance that a batch runs with a queue's DMA window narrowed.
    """

    length: int = 16
    error_rate: float = 0.1
    sync_rate: float = 0.1
    narrow_rate: float = 0.1

    def __post_init__(self) -> None:
        if not 1 <= self.length <= 62:
            raise ValueError(f"commands per queue and batch must be 1 to 62 (a ring of 64 holds 63), "
                             f"not {self.length!r}")
        for name in ("error_rate", "sync_rate", "narrow_rate"):
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"{name} must be from 0 to 1, not {value!r}")


def _queues(lay: Layout) -> range:
    return range(lay.config.tiles)


def _whole_local(lay: Layout, opcode: Opcode, tag: int, mem: int, acc: bool) -> bytes:
    """A LOAD or STORE of a tile's whole scratchpad (or accumulator buffer) from or to contiguous memory."""
    tile = lay.config.tile
    rows = tile.acc_rows if acc else tile.spm_rows
    return pack_command(opcode, tag=tag, flags={"acc": acc}, mem_addr=mem, mem_stride=0, local_addr=0,
                        rows=1, cols=rows, local_row_stride=0, local_col_stride=1)


def written_ranges(lay: Layout, commands: Iterable[bytes]) -> list[tuple[int, int]]:
    """The device-memory ranges ``[start, end)`` that ``commands`` (STOREs and COPYs) may write, merged and sorted."""
    ranges = []
    tile = lay.config.tile
    for cmd in commands:
        opcode, f = unpack_command(cmd)
        if opcode == Opcode.STORE:
            row_bytes = tile.acc_row_bytes if f["flags"] & 1 else tile.spm_row_bytes
            start = f["mem_addr"]
            end = start + max(f["rows"] - 1, 0) * f["mem_stride"] + f["cols"] * row_bytes
        elif opcode == Opcode.COPY:
            start, end = f["dst_addr"], f["dst_addr"] + f["length"]
        else:
            continue
        start, end = max(start, 0), min(end, lay.config.mem_bytes)
        if end > start:
            ranges.append((start, end))
    return merge_ranges(ranges)


def compared_regions(lay: Layout, q: int, commands: Iterable[bytes]) -> list[tuple[int, int]]:
    """(address, bytes) a batch downloads for queue ``q``: what its ``commands`` may write inside the window and
    its guards, and the guard bytes at the window's ends."""
    low, high = lay.win_base(q) - GUARD, lay.win_limit(q) + GUARD
    clipped = [(max(s, low), min(e, high)) for s, e in written_ranges(lay, commands) if s < high and e > low]
    return [(lay.win_base(q) - GUARD, 2 * GUARD), *((s, e - s) for s, e in clipped),
            (lay.win_limit(q) - GUARD, 2 * GUARD)]


def setup_events(lay: Layout, rng: np.random.Generator, tags: list[int]) -> list[Event]:
    """Windows, random operands, and both tiles' local memories primed (step 1 of the module docstring)."""
    events: list[Event] = []
    tile = lay.config.tile
    for q in _queues(lay):
        events.append(DmaWindow(q, lay.win_base(q), lay.win_limit(q)))
        for addr, n in ((lay.win_base(q) - GUARD, GUARD + UPLOAD_BYTES), (lay.win_limit(q) - GUARD, 2 * GUARD)):
            events.append(Upload(addr, rng.integers(0, 256, n, dtype=np.uint8).tobytes()))
    for q in _queues(lay):
        prime = lay.win_base(q) + PRIME_OFFSET
        spm_bytes = tile.spm_rows * tile.spm_row_bytes
        cmds = (_whole_local(lay, Opcode.LOAD, tags[q] & 0xFFFF, prime, False),
                _whole_local(lay, Opcode.LOAD, (tags[q] + 1) & 0xFFFF, prime + spm_bytes, True))
        tags[q] += 2
        if tile.vector:  # the lookup table outlives a reset: load it from the primed scratchpad
            cmds += (pack_command(Opcode.TABLE, tag=tags[q] & 0xFFFF, src_addr=0),)
            tags[q] += 1
        events += [Submit(q, cmds), Doorbell(q)]
    events += [Wait(q, None) for q in _queues(lay)]
    return events


def batch_events(lay: Layout, rng: np.random.Generator, params: StreamParams, tags: list[int]) -> list[Event]:
    """One batch on both queues, its waits and downloads (step 2 of the module docstring)."""
    queues, _pairs = random_batch(rng, lay, params.length, params.error_rate, params.sync_rate, tags)
    events: list[Event] = []
    narrowed = [q for q in _queues(lay) if rng.random() < params.narrow_rate]
    events += [DmaWindow(q, lay.win_base(q), lay.out_base(q)) for q in narrowed]
    order = list(_queues(lay))
    rng.shuffle(order)
    for q in order:
        events += [Submit(q, tuple(cmd for cmd, _meta in queues[q])), Doorbell(q)]
    events += [Wait(q, None) for q in _queues(lay)]
    events += [DmaWindow(q, lay.win_base(q), lay.win_limit(q)) for q in narrowed]
    events += [Download(addr, n, None) for q in _queues(lay)
               for addr, n in compared_regions(lay, q, (cmd for cmd, _meta in queues[q]))]
    return events


def dump_events(lay: Layout, tags: list[int]) -> list[Event]:
    """Both tiles' scratchpads and accumulator buffers stored and downloaded, then the windows (step 3)."""
    tile = lay.config.tile
    spm_bytes = tile.spm_rows * tile.spm_row_bytes
    events: list[Event] = [DmaWindow(q, 0, lay.config.mem_bytes) for q in _queues(lay)]
    for q in _queues(lay):
        dump = lay.dump_base(q)
        cmds = (_whole_local(lay, Opcode.STORE, tags[q] & 0xFFFF, dump, False),
                _whole_local(lay, Opcode.STORE, (tags[q] + 1) & 0xFFFF, dump + spm_bytes, True))
        tags[q] += 2
        events += [Submit(q, cmds), Doorbell(q)]
    events += [Wait(q, None) for q in _queues(lay)]
    events += [Download(lay.dump_base(q), lay.dump_bytes(), None) for q in _queues(lay)]
    events += [Download(lay.win_base(q) - GUARD, GUARD + UPLOAD_BYTES, None) for q in _queues(lay)]
    return events
