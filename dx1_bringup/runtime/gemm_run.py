"""Running a GEMM on a device: the operands' layout, one command stream per tile to the last completion
(recovering a halted or timed-out queue, planning again without a fenced tile), and what the run did.

:func:`run_gemm` plans with :func:`~dx1_bringup.runtime.gemm.compile_gemm` and returns the result with its
:class:`GemmStats` (PERF counters before and after per tile, host traffic, where the operands and each
tile's command ring were, for the performance model).
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
from dx1_driver import (
    Device,
    DeviceTimeout,
    DriverError,
    PerfCounters,
    QueueError,
    ReplayRefused,
    TileFenced,
)

from ..model.tile import PostOpParams
from ..perfmodel import Ring
from .gemm import check_post, check_tiles, compile_gemm
from .operands import ACC_LANE_BYTES, pad_operand, padded

__all__ = ["GemmStats", "drive", "operand_layout", "run_gemm"]


@dataclass
class GemmStats:
    """What a run did: commands per tile, PERF counters before and after, host traffic, the plan's DMA bytes.

    ``commands[t]`` counts every command tile ``t`` was given in the run its counters cover: the plan's,
    plus the ones a recovery resubmitted (``resubmitted[t]`` of them).  ``base`` is the device address of
    the operands' allocation (laid out by :func:`operand_layout`); ``rings[t]`` where tile ``t``'s command
    processor fetched the run's commands from.
    """

    array: int
    commands: dict[int, int]
    perf_before: dict[int, PerfCounters]
    perf_after: dict[int, PerfCounters]
    host_bytes_written: int
    host_bytes_read: int
    planned_dma_bytes: int = 0
    resubmitted: dict[int, int] = field(default_factory=dict)
    base: int = 0
    rings: dict[int, Ring] = field(default_factory=dict)

    def delta(self, tile: int) -> PerfCounters:
        """What ``tile``'s counters counted over the run (modulo each counter's width)."""
        return self.perf_after[tile].since(self.perf_before[tile])

    @property
    def tile_ids(self) -> list[int]:
        """The tiles the run used, by id."""
        return sorted(self.commands)

    @property
    def macs(self) -> int:
        return sum(self.delta(t).macs for t in self.tile_ids)

    @property
    def cycles(self) -> int:
        """Device cycles of the run: the slowest tile's CYCLES increase."""
        return max(self.delta(t).cycles for t in self.tile_ids)

    @property
    def dma_bytes(self) -> int:
        """Bytes the tiles' DMA moved (LOAD reads plus STORE writes)."""
        return sum(self.delta(t).bytes_read + self.delta(t).bytes_written for t in self.tile_ids)

    def utilisation(self, tile: int | None = None) -> float:
        """MACs / (cycles * array**2), of one tile or of every tile used together."""
        tile_ids = self.tile_ids if tile is None else [tile]
        cycles = max(self.delta(t).cycles for t in tile_ids)
        macs = sum(self.delta(t).macs for t in tile_ids)
        return macs / (cycles * self.array ** 2 * len(tile_ids)) if cycles else 0.0


def _check_operands(a: np.ndarray, b: np.ndarray, bias: np.ndarray | None) -> None:
    if not isinstance(a, np.ndarray) or not isinstance(b, np.ndarray):
        raise TypeError(f"a and b must be numpy arrays, not {type(a).__name__} and {type(b).__name__}")
    if a.dtype != np.int8 or b.dtype != np.int8:
        raise TypeError(f"a and b must be int8, not {a.dtype} and {b.dtype}")
    if a.ndim != 2 or b.ndim != 2 or a.shape[1] != b.shape[0] or 0 in a.shape or 0 in b.shape:
        raise ValueError(f"a and b must be non-empty matrices with a.shape[1] == b.shape[0], not {a.shape} and "
                         f"{b.shape}")
    if bias is not None:
        if not isinstance(bias, np.ndarray) or bias.dtype != np.int32:
            raise TypeError(f"bias must be an int32 numpy array, not {getattr(bias, 'dtype', type(bias).__name__)}")
        if bias.shape != (b.shape[1],):
            raise ValueError(f"bias must have shape ({b.shape[1]},), not {bias.shape}")


def drive(device: Device, commands: list[list[bytes]], timeout: float) -> dict[int, int]:
    """Run one command stream per tile (``commands[t]`` on tile ``t``'s queue) to the last completion.

    Every queue is fed at once and topped up as it drains, so no tile idles while another is served; a
    stream may wait on another's semaphores (SIGNAL/WAIT), since every stream keeps being fed.  Returns,
    per tile used, how many commands recoveries resubmitted (each ran, or started, once more).
    """
    queues = {t: device.queue(t) for t, cmds in enumerate(commands) if cmds}
    todo = {t: list(commands[t]) for t in queues}
    resubmitted = dict.fromkeys(queues, 0)
    while any(todo.values()) or any(q.outstanding for q in queues.values()):
        # Top up every ring before waiting on any, so no tile idles while another is drained.
        for t, q in queues.items():
            room = q.entries - 1 - q.outstanding
            if todo[t] and room > 0:
                q.submit(todo[t][:room], timeout=timeout)
                del todo[t][:room]
        # Take what any queue has finished, a quarter ring at a time, so that no tile runs dry while
        # another is drained and host polling stays light beside the DMA.
        busy = [q for q in queues.values() if q.outstanding]
        try:
            device.wait_any(busy, at_least=max(1, min(q.entries for q in busy) // 4), timeout=timeout)
        except (QueueError, DeviceTimeout) as e:
            # A halted queue names its tile; a timeout may be any busy one.  Recovery resets the tile and
            # resubmits what lost its completion (TileFenced or ReplayRefused end the attempt).
            for q in busy if getattr(e, "tile", None) is None else [queues[e.tile]]:
                resubmitted[q.tile] += len(q.recover(timeout=timeout).replayed)
            continue
        for q in queues.values():
            ready = q.poll()
            if ready:
                q.wait(ready, timeout=timeout)
    return resubmitted


def operand_layout(m: int, k: int, n: int, array: int, post: bool, bias: bool,
                   align: int) -> tuple[dict[str, int], int]:
    """Where :func:`run_gemm` puts a GEMM's padded operands in its one allocation, and the bytes it takes.

    Returns ``(offsets, total)``: the byte offset of ``"a"``, ``"b"``, ``"c"`` (and ``"bias"``) from the
    allocation's start, each rounded up to ``align``, and the allocation's size.
    """
    kp, np_ = padded(k, array), padded(n, array)
    sizes = {"a": m * kp, "b": kp * np_, "c": m * np_ * (1 if post else ACC_LANE_BYTES)}
    if bias:
        sizes["bias"] = np_ * ACC_LANE_BYTES
    offsets, total = {}, 0
    for name, size in sizes.items():
        offsets[name] = total
        total += -(-size // align) * align
    return offsets, total


def run_gemm(device: Device, a: np.ndarray, b: np.ndarray, bias: np.ndarray | None = None,
             post: PostOpParams | None = None, tiles: int | None = None, *, tile_ids: Sequence[int] | None = None,
             timeout: float = 1.0) -> tuple[np.ndarray, GemmStats]:
    """Compute ``a @ b (+ bias)`` on the device, requantised by ``post`` if given.

    Parameters
    ----------
    device:
        An open device.
    a, b:
        int8 operands, (M, K) and (K, N).
    bias:
        int32 (N,), or ``None``.
    post:
        The requantisation for an int8 result; ``None`` for the int32 accumulator.
    tiles:
        How many tiles to use (the first ones); default: the device's usable tiles (``Device.usable_tiles``:
        every tile not fenced off).
    tile_ids:
        Which tiles to use, instead of ``tiles``.
    timeout:
        Seconds without progress before the driver's ``DeviceTimeout``.

    Returns
    -------
    (ndarray, GemmStats)
        The (M, N) result (int8 with ``post``, else int32) and what the run did.

    Raises
    ------
    TypeError, ValueError
        Bad operands or ``post``, or operands that can never fit in the device's memory.
    dx1_driver.CommandError
        A command completed with an error.
    dx1_driver.OutOfDeviceMemory
        The operands fit the device but not its free memory now.
    """
    _check_operands(a, b, bias)
    post = check_post(post)
    caps = device.caps
    m, k = a.shape
    n = b.shape[1]
    kp, np_ = padded(k, caps.array), padded(n, caps.array)
    offsets, total = operand_layout(m, k, n, caps.array, post is not None, bias is not None,
                                    device.allocator.alignment)
    if total > caps.mem_bytes:
        raise ValueError(f"a {m}x{k}x{n} GEMM needs {total} bytes of device memory for its padded operands; the "
                         f"device has {caps.mem_bytes}")
    base = device.alloc(total)
    addr = {name: base + off for name, off in offsets.items()}
    try:
        plan = compile_gemm(m, k, n, caps, a_addr=addr["a"], b_addr=addr["b"], c_addr=addr["c"],
                            bias_addr=addr.get("bias"), post=post,
                            tiles=tiles, tile_ids=device.usable_tiles if tiles is None and tile_ids is None
                            else tile_ids)
        a_pad, b_pad = pad_operand(a, (m, kp)), pad_operand(b, (kp, np_))
        device.write_mem(addr["a"], a_pad)
        device.write_mem(addr["b"], b_pad)
        written = a_pad.nbytes + b_pad.nbytes
        if bias is not None:
            bias_pad = pad_operand(bias, (np_,))
            device.write_mem(addr["bias"], bias_pad)
            written += bias_pad.nbytes
        for _attempt in range(device.caps.tiles + 1):
            used = [t for t, cmds in enumerate(plan.commands) if cmds]
            before = {t: device.perf(t).read() for t in used}
            rings = {t: Ring.of(device.queue(t)) for t in used}
            resubmitted = {}
            try:
                resubmitted = drive(device, plan.commands, timeout)
                break
            except (TileFenced, ReplayRefused):
                # A tile was fenced, or lost work that cannot be replayed: A and B are unchanged in device
                # memory and every command writes C from them, so plan again on the tiles that remain.
                chosen = tiles is not None or tile_ids is not None
                if chosen and any(t in device.fenced for t in check_tiles(tiles, caps, tile_ids)):
                    raise
                plan = compile_gemm(m, k, n, caps, a_addr=addr["a"], b_addr=addr["b"], c_addr=addr["c"],
                                    bias_addr=addr.get("bias"), post=post, tile_ids=device.usable_tiles)
            finally:
                # Never free memory the device may still write: drain whatever an error left in flight.
                for t in used:
                    if t not in device.fenced and device.queue(t).outstanding:
                        with contextlib.suppress(DriverError):
                            device.queue(t).wait(check=False, timeout=timeout)
        after = {t: device.perf(t).read() for t in used}
        c = device.read_array(addr["c"], (m, np_), plan.c_dtype)[:, :n].astype(plan.c_dtype)
    finally:
        device.free(base)
    stats = GemmStats(caps.array, {t: len(plan.commands[t]) + resubmitted.get(t, 0) for t in used}, before, after,
                      written, c.nbytes, plan.load_bytes + plan.store_bytes, resubmitted, base, rings)
    return c, stats
