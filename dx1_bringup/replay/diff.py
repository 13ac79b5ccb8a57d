"""Which command first has another effect on two devices: prefixes of a capture replayed, their effects compared.

The commands of a capture are numbered in *submission order*: the order of its submit events, and
inside one the order of its commands, whatever queue each goes to; commands of two tiles that
interleave are ordered so.  The *prefix* of ``k`` commands (:func:`prefix_events`) is the capture up to
its ``k``-th command: every event before the submit holding it, that submit cut after it, a doorbell
for every queue with commands not yet published and a wait for everything outstanding.  Downloads are
left out (the effects are read back at the end instead).  A WAIT of the prefix whose SIGNAL lies after
the cut would wait forever; such WAITs (the last ones of their semaphore, as many as the SIGNALs of the
prefix cannot satisfy) become FENCEs with the same tag.

The *effect* of a prefix on a device (:func:`run_prefix`, a :class:`Effect`) is what it leaves: every
completion, in order per queue; the device memory the capture touches (every byte it uploads or
downloads, that its LOADs and COPYs may read, that its STOREs and COPYs may write); each tile's whole
scratchpad and accumulator buffer, read back by STOREs to a scratch area at the top of device memory
after the memory was read.  Each prefix runs on a fresh device: reset, then that memory and both
local memories of every tile zeroed, so nothing an earlier replay left behind is compared.

:func:`bisect` finds the smallest ``k`` whose effects differ between the devices by bisection, in about
``log2(commands)`` prefix replays on each device.  It assumes that effects are *monotone in the prefix*:
once a prefix leaves different effects, every longer prefix does too (a later command does not
overwrite or undo the difference), and that the devices are deterministic; it checks the empty and the
whole prefix, and names the ``k``-th command as the first whose effect differs.  It also assumes that
the tiles interact only through semaphores (as the fuzzer's streams do: each queue has its own window),
so that a WAIT turned into a FENCE changes timing only.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from dx1_driver import Capabilities, Device, DeviceTimeout, DriverError

from ..spec import COMMAND_BYTES, COMMANDS, COMPLETION_BYTES, Opcode, TileConfig, pack_command, unpack_command
from .capture import Capture, DmaWindow, Doorbell, Download, Event, Seen, Submit, Upload, Wait
from .ranges import merge_ranges
from .replay import Session

__all__ = ["CommandRef", "commands_in_order", "release_waits", "prefix_events", "touched_regions", "Effect",
           "run_prefix", "effect_difference", "effect_events", "local_bytes", "tile_config", "DiffResult", "bisect"]

#: Seconds a prefix replay may go without a completion before its device counts as stuck.
TIMEOUT = 30.0
#: Tag of the commands that clear and read back the local memories.
READBACK_TAG = 0xFFFF


@dataclass(frozen=True)
class CommandRef:
    """Where a command sits in a capture.

    Attributes
    ----------
    number:
        Its place in submission order, from 0.
    queue:
        Its queue (tile).
    index:
        Its place among its queue's commands, from 0: completion ``index`` of the queue is its.
    event:
        The capture event (submit) holding it.
    command:
        Its 32 bytes.
    """

    number: int
    queue: int
    index: int
    event: int
    command: bytes


def commands_in_order(capture: Capture) -> list[CommandRef]:
    """Every command of ``capture`` in submission order."""
    refs: list[CommandRef] = []
    per_queue: dict[int, int] = {}
    for position, event in enumerate(capture.events):
        if isinstance(event, Submit):
            for cmd in event.commands:
                index = per_queue.get(event.queue, 0)
                per_queue[event.queue] = index + 1
                refs.append(CommandRef(len(refs), event.queue, index, position, cmd))
    return refs


def _valid_sem(fields: dict[str, int], semaphores: int) -> bool:
    return fields["sem"] < semaphores


def release_waits(events: list[Event], semaphores: int) -> list[Event]:
    """``events`` with the WAITs that the SIGNALs among them cannot satisfy turned into FENCEs (the last ones)."""
    signalled: dict[int, int] = {}
    waits: list[tuple[int, int, int, int]] = []   # (event, command, sem, count)
    for e, event in enumerate(events):
        if not isinstance(event, Submit):
            continue
        for c, cmd in enumerate(event.commands):
            opcode, f = unpack_command(cmd)
            if opcode == Opcode.SIGNAL and _valid_sem(f, semaphores):
                signalled[f["sem"]] = signalled.get(f["sem"], 0) + f["count"]
            elif opcode == Opcode.WAIT and _valid_sem(f, semaphores) and f["count"] >= 1:
                waits.append((e, c, f["sem"], f["count"]))
    need = {}
    for _e, _c, sem, count in waits:
        need[sem] = need.get(sem, 0) + count
    release: set[tuple[int, int]] = set()
    for e, c, sem, count in reversed(waits):
        if need[sem] > signalled.get(sem, 0):
            need[sem] -= count
            release.add((e, c))
    if not release:
        return events
    out = list(events)
    for e in {e for e, _c in release}:
        event = out[e]
        out[e] = Submit(event.queue, tuple(
            pack_command(Opcode.FENCE, tag=unpack_command(cmd)[1]["tag"]) if (e, c) in release else cmd
            for c, cmd in enumerate(event.commands)))
    return out


def prefix_events(capture: Capture, k: int, semaphores: int) -> list[Event]:
    """The events that run the first ``k`` commands of ``capture`` and wait for them (see the module docstring).

    Raises
    ------
    ValueError
        ``k`` is not 0 to the number of commands.
    """
    total = capture.commands
    if not 0 <= k <= total:
        raise ValueError(f"a prefix has 0 to {total} commands (the capture's), not {k}")
    out: list[Event] = []
    n = 0
    for event in capture.events:
        if isinstance(event, Submit):
            if n + len(event.commands) >= k:
                if k > n:
                    out.append(Submit(event.queue, event.commands[:k - n]))
                break
            n += len(event.commands)
        if not isinstance(event, Download):
            out.append(event)
    pending: dict[int, bool] = {}
    for event in out:
        if isinstance(event, Submit):
            pending[event.queue] = True
        elif isinstance(event, Doorbell):
            pending[event.queue] = False
    out += [Doorbell(q) for q, waiting in sorted(pending.items()) if waiting]
    out = release_waits(out, semaphores)
    return out + [Wait(q, None) for q in range(capture.config["tiles"])]


def tile_config(caps: Capabilities | dict[str, Any]) -> TileConfig:
    """The spec's tile configuration of a device's capabilities (or a capture header's ``config``)."""
    c = caps if isinstance(caps, dict) else asdict(caps)
    return TileConfig(c["array"], c["spm_rows"], c["acc_rows"], bool(c.get("vector", False)))


def _touched(cmd: bytes, tile: TileConfig) -> list[tuple[int, int]]:
    """The device memory a LOAD or COPY may read and a STORE or COPY may write."""
    opcode, f = unpack_command(cmd)
    if opcode in (Opcode.LOAD, Opcode.STORE):
        row_bytes = tile.acc_row_bytes if f["flags"] >> COMMANDS[Opcode(opcode)].flag_bit("acc") & 1 else \
            tile.spm_row_bytes
        start = f["mem_addr"]
        return [(start, start + max(f["rows"] - 1, 0) * f["mem_stride"] + f["cols"] * row_bytes)]
    if opcode == Opcode.COPY:
        return [(f["src_addr"], f["src_addr"] + f["length"]), (f["dst_addr"], f["dst_addr"] + f["length"])]
    return []


def touched_regions(capture: Capture, events: Sequence[Event] | None = None) -> list[tuple[int, int]]:
    """``[start, end)`` of device memory ``events`` (default: the capture's) upload, download, or may read or write.

    Merged, sorted and clipped to the device memory.
    """
    cfg = capture.config
    tile = tile_config(cfg)
    ranges = []
    for event in capture.events if events is None else events:
        if isinstance(event, Upload):
            ranges.append((event.addr, event.addr + len(event.data)))
        elif isinstance(event, Download):
            ranges.append((event.addr, event.addr + event.length))
        elif isinstance(event, Submit):
            ranges += [r for c in event.commands for r in _touched(c, tile)]
    return merge_ranges((max(s, 0), min(e, cfg["mem_bytes"])) for s, e in ranges)


@dataclass
class Effect:
    """What a prefix left on one device.

    Attributes
    ----------
    completions:
        Per queue, every completion seen, in ring order.
    memory:
        ``(address, bytes)`` of every region compared.
    local:
        Per tile, its scratchpad then its accumulator buffer, as read back.
    stuck:
        Why the replay stopped (a timeout or a completion the driver refused), or ``None``; a stuck
        replay has no memory or local memories read back.
    """

    completions: dict[int, list[Seen]] = field(default_factory=dict)
    memory: list[tuple[int, bytes]] = field(default_factory=list)
    local: dict[int, bytes] = field(default_factory=dict)
    stuck: str | None = None


def _whole_local(opcode: Opcode, mem: int, acc: bool, rows: int) -> bytes:
    """A LOAD or STORE of a tile's whole scratchpad (or accumulator buffer) from or to contiguous memory."""
    return pack_command(opcode, tag=READBACK_TAG, flags={"acc": acc}, mem_addr=mem, mem_stride=0, local_addr=0,
                        rows=1, cols=rows, local_row_stride=0, local_col_stride=1)


def _locals(caps: Capabilities, opcode: Opcode, scratch: int) -> list[Event]:
    """Every tile's scratchpad and accumulator buffer loaded from (or stored to) ``scratch`` onwards, waited for."""
    tile = tile_config(caps)
    spm_bytes, acc_bytes = tile.spm_rows * tile.spm_row_bytes, tile.acc_rows * tile.acc_row_bytes
    events: list[Event] = []
    for t in range(caps.tiles):
        base = scratch + t * (spm_bytes + acc_bytes)
        events += [DmaWindow(t, 0, caps.mem_bytes),
                   Submit(t, (_whole_local(opcode, base, False, caps.spm_rows),
                              _whole_local(opcode, base + spm_bytes, True, caps.acc_rows))),
                   Doorbell(t)]
    return events + [Wait(t, None) for t in range(caps.tiles)]


def local_bytes(caps: Capabilities) -> int:
    """Bytes of every tile's scratchpad and accumulator buffer together."""
    tile = tile_config(caps)
    return caps.tiles * (tile.spm_rows * tile.spm_row_bytes + tile.acc_rows * tile.acc_row_bytes)


def effect_events(caps: Capabilities, events: Sequence[Event], regions: Sequence[tuple[int, int]]) -> list[Event]:
    """``events`` on a cleared device with their effect read back at the end (see the module docstring).

    Before them: ``regions`` (less what ``events`` upload before their first command) and every tile's
    local memories zeroed (loaded from a zeroed scratch area at
    the top of device memory).  After them: ``regions`` downloaded, then the local memories stored to the
    scratch area and it downloaded (the last event).
    """
    scratch = caps.mem_bytes - local_bytes(caps)
    # Bytes that events upload before their first command need no zeroing: nothing can read them first.
    first = next((i for i, e in enumerate(events) if isinstance(e, Submit)), len(events))
    zero = _without(regions, [(e.addr, e.addr + len(e.data)) for e in events[:first] if isinstance(e, Upload)])
    return [Upload(scratch, bytes(local_bytes(caps))), *_locals(caps, Opcode.LOAD, scratch),
            *(Upload(start, bytes(end - start)) for start, end in zero), *events,
            *(Download(start, end - start, None) for start, end in regions), *_locals(caps, Opcode.STORE, scratch),
            Download(scratch, local_bytes(caps), None)]


def _without(regions: Sequence[tuple[int, int]], holes: Sequence[tuple[int, int]]) -> list[tuple[int, int]]:
    """``regions`` less every ``[start, end)`` of ``holes``."""
    out = list(regions)
    for hs, he in holes:
        out = [piece for s, e in out for piece in ((s, min(e, hs)), (max(s, he), e)) if piece[1] > piece[0]]
    return out


def run_prefix(capture: Capture, device: Device, events: Sequence[Event], regions: Sequence[tuple[int, int]], *,
               timeout: float = TIMEOUT) -> Effect:
    """Run ``events`` (a prefix of ``capture``, :func:`prefix_events`) on a fresh ``device``; return its effect.

    The device is reset and :func:`effect_events` run: ``regions`` (less the replay's rings: a command
    that writes there, refused or not, is compared by its completion only) and every tile's local
    memories are zeroed, the events run, ``regions`` and the local memories are read back.

    Raises
    ------
    CaptureError
        The device's configuration differs from the capture's.
    """
    device.reset()
    session = Session(device, capture.ring_log2, timeout=timeout)
    capture.check_config(session.config())
    caps = device.caps
    queues = [session.queue(t) for t in range(caps.tiles)]
    reserved = [(q.ring, q.ring + q.entries * COMMAND_BYTES) for q in queues]
    reserved += [(q.cq, q.cq + q.entries * COMPLETION_BYTES) for q in queues]
    regions = _without(regions, reserved)
    effect = Effect()
    downloads: list[tuple[int, bytes]] = []
    try:
        for event in effect_events(caps, events, regions):
            seen = session.run(event)
            if isinstance(seen, Wait):
                effect.completions.setdefault(seen.queue, []).extend(seen.completions or ())
            elif isinstance(seen, Download):
                downloads.append((seen.addr, seen.data or b""))
    except (DeviceTimeout, DriverError) as e:
        effect.stuck = f"{type(e).__name__}: {e}"
        return effect
    effect.memory = downloads[:-1]
    per_tile = local_bytes(caps) // caps.tiles
    data = downloads[-1][1]
    effect.local = {t: data[t * per_tile:(t + 1) * per_tile] for t in range(caps.tiles)}
    return effect


def _bytes_difference(what: str, addr: int, a: bytes, b: bytes, names: tuple[str, str]) -> str | None:
    if a == b:
        return None
    i = next((k for k in range(min(len(a), len(b))) if a[k] != b[k]), min(len(a), len(b)))
    count = sum(x != y for x, y in zip(a, b, strict=False))
    return (f"{what} at 0x{addr + i:x}: {names[0]} {a[i:i + 8].hex(' ')}, {names[1]} {b[i:i + 8].hex(' ')} "
            f"({count} of {len(a)} bytes differ)")


def effect_difference(a: Effect, b: Effect, names: tuple[str, str] = ("A", "B"), *,
                      tile: TileConfig | None = None) -> str | None:
    """The first difference between two effects, in a sentence, or ``None`` when they are the same.

    Completions are compared first, then device memory, then local memories (``tile`` turns an
    offset into a row; ``None`` leaves offsets as they are).
    """
    if (a.stuck is None) != (b.stuck is None):
        which, why = (names[0], a.stuck) if a.stuck is not None else (names[1], b.stuck)
        return f"the replay stopped on {which} only: {why}"
    for q in sorted(set(a.completions) | set(b.completions)):
        ca, cb = a.completions.get(q, []), b.completions.get(q, [])
        for k, (x, y) in enumerate(zip(ca, cb, strict=False)):
            if x != y:
                return (f"queue {q} completion {k}: {names[0]} tag {x.tag} opcode {x.opcode} status {x.status}, "
                        f"{names[1]} tag {y.tag} opcode {y.opcode} status {y.status}")
        if len(ca) != len(cb):
            return f"queue {q}: {len(ca)} completions on {names[0]}, {len(cb)} on {names[1]}"
    for (addr, x), (_addr, y) in zip(a.memory, b.memory, strict=True):
        found = _bytes_difference("device memory", addr, x, y, names)
        if found:
            return found
    for t in sorted(a.local):
        x, y = a.local[t], b.local[t]
        if x == y:
            continue
        i = next(k for k in range(len(x)) if x[k] != y[k])
        if tile is None:
            where = f"local byte {i}"
        elif i < tile.spm_rows * tile.spm_row_bytes:
            where = f"scratchpad row {i // tile.spm_row_bytes} byte {i % tile.spm_row_bytes}"
        else:
            j = i - tile.spm_rows * tile.spm_row_bytes
            where = f"accumulator row {j // tile.acc_row_bytes} byte {j % tile.acc_row_bytes}"
        return (f"tile {t} {where}: {names[0]} {x[i:i + 8].hex(' ')}, {names[1]} {y[i:i + 8].hex(' ')} "
                f"({sum(p != q for p, q in zip(x, y, strict=True))} bytes differ)")
    if a.stuck != b.stuck:
        return f"the replay stopped differently: {names[0]} {a.stuck}; {names[1]} {b.stuck}"
    return None


@dataclass
class DiffResult:
    """What :func:`bisect` found.

    Attributes
    ----------
    commands:
        Commands in the capture.
    first:
        The first command whose effect differs; ``None`` when even the whole capture's effects agree,
        or when they differ before any command (``before_commands``).
    difference:
        The first difference of the shortest differing prefix, in a sentence (``None``: no difference).
    before_commands:
        The effects differ already with no command run (the uploads themselves differ).
    replays:
        Prefix replays, counting each device.
    seconds:
        Wall time of the search.
    """

    commands: int
    first: CommandRef | None = None
    difference: str | None = None
    before_commands: bool = False
    replays: int = 0
    seconds: float = 0.0


def bisect(capture: Capture, devices: Sequence[Device], names: Sequence[str] = ("A", "B"), *,
           timeout: float = TIMEOUT, progress: Callable[[str], None] | None = None) -> DiffResult:
    """Find the first command whose effect differs between two devices (see the module docstring).

    Raises
    ------
    CaptureError
        A device's configuration differs from the capture's.
    ValueError
        Not two devices.
    """
    if len(devices) != 2 or len(names) != 2:
        raise ValueError(f"a diff compares two devices, not {len(devices)}")
    start = time.monotonic()
    refs = commands_in_order(capture)
    regions = touched_regions(capture)
    caps = devices[0].caps
    result = DiffResult(len(refs))
    cache: dict[int, str | None] = {}

    def differs(k: int) -> str | None:
        if k not in cache:
            events = prefix_events(capture, k, caps.semaphores)
            effects = [run_prefix(capture, dev, events, regions, timeout=timeout) for dev in devices]
            result.replays += 2
            cache[k] = effect_difference(*effects, (names[0], names[1]), tile=tile_config(caps))
            if progress is not None:
                progress(f"prefix of {k} commands: {'differs: ' + cache[k] if cache[k] else 'same effects'}")
        return cache[k]

    if differs(len(refs)) is None:
        result.seconds = time.monotonic() - start
        return result
    if differs(0) is not None:
        result.before_commands, result.difference = True, cache[0]
        result.seconds = time.monotonic() - start
        return result
    low, high = 0, len(refs)       # differs(low) is None, differs(high) is not
    while high - low > 1:
        mid = (low + high) // 2
        if differs(mid) is None:
            low = mid
        else:
            high = mid
    result.first, result.difference = refs[high - 1], cache[high]
    result.seconds = time.monotonic() - start
    return result
