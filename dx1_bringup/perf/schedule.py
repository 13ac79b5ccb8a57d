"""Predicted start and end cycles of every command of per-tile command streams.

:func:`predict` replays the dispatch rules of the command processor (``gateware/command.py``) with the
unit costs of :mod:`.costs`: commands dispatch in order, at least ``dispatch_gap`` cycles apart; LOAD,
STORE and COPY go to the tile's DMA one at a time, GEMM and POSTOP to the tile core (``core_slots`` in
flight, POSTOP after the GEMMs before it); a command that writes local rows an in-flight command of the
other unit reads or writes (or reads rows it writes) waits for that command's completion; FENCE and
SIGNAL wait for every earlier command, WAIT for its semaphore (signalled by any tile).  Tiles share the
device-memory port, which arbitrates reads and writes separately: a DMA command's memory time costs
``1 + contention`` times as much while another tile's DMA moves data the same way (found by iterating the
whole schedule a few times).  Times are cycles from the first
command's dispatch; :attr:`Prediction.total` adds what the host spends around the run.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..spec import BUS_BYTES, Opcode, TileConfig, unpack_command
from .costs import COSTS, Costs, move_bursts

__all__ = ["CommandTime", "Prediction", "TilePrediction", "predict"]

_DMA = {int(Opcode.LOAD), int(Opcode.STORE), int(Opcode.COPY)}
_CORE = {int(Opcode.GEMM), int(Opcode.POSTOP)}
_ITERATIONS = 4


@dataclass(frozen=True)
class CommandTime:
    """One command's predicted dispatch (``start``, the TRACE start event) and completion (``end``)."""

    opcode: int
    start: float
    end: float


@dataclass
class TilePrediction:
    """One tile's commands and unit totals: cycles its DMA read and wrote, the array streamed, and its span."""

    commands: list[CommandTime] = field(default_factory=list)
    load: float = 0.0
    compute: float = 0.0
    store: float = 0.0
    postop: float = 0.0
    offset: float = 0.0

    @property
    def end(self) -> float:
        """Cycle of the last completion, counted from tile 0's first dispatch."""
        return self.offset + max((c.end for c in self.commands), default=0.0)


@dataclass
class Prediction:
    """Every tile's :class:`TilePrediction` and the run's total as the PERF CYCLES counter sees it."""

    tiles: dict[int, TilePrediction]
    host: float

    @property
    def device(self) -> float:
        """Cycles from the first dispatch to the last completion, over every tile."""
        return max((t.end for t in self.tiles.values()), default=0.0)

    @property
    def total(self) -> float:
        """Device cycles plus the host's part (ring writes, doorbells, the final polling)."""
        return self.device + self.host


@dataclass
class _Decoded:
    opcode: int
    f: dict[str, int]
    unit: str
    cost: float
    memory: float  # cycles of the cost that use the device-memory port
    reads: tuple[tuple[str, int, int], ...]
    writes: tuple[tuple[str, int, int], ...]


def _decode(cmd: bytes, tile: TileConfig, costs: Costs) -> _Decoded:
    opcode, f = unpack_command(cmd)
    n = tile.array
    if opcode in (Opcode.LOAD, Opcode.STORE):
        acc = bool(f["flags"] & 1)
        mem = "acc" if acc else "spm"
        seg = f["cols"] * (tile.acc_row_bytes if acc else tile.spm_row_bytes)
        bursts = move_bursts(f["dram_addr"], f["dram_stride"], f["rows"], seg)
        beats = f["rows"] * seg // BUS_BYTES
        last = f["local_addr"] + (f["rows"] - 1) * f["local_row_stride"] + (f["cols"] - 1) * f["local_col_stride"]
        rows = ((mem, f["local_addr"], last + 1),)
        if opcode == Opcode.LOAD:
            cost = float(costs.load_cycles(bursts, beats))
            return _Decoded(opcode, f, "dma", cost, cost - costs.load_fixed, (), rows)
        cost = float(costs.store_cycles(bursts, beats))
        return _Decoded(opcode, f, "dma", cost, cost - costs.store_fixed, rows, ())
    if opcode == Opcode.COPY:
        cost = float(costs.copy_cycles(f["length"] // BUS_BYTES))
        return _Decoded(opcode, f, "dma", cost, cost - costs.load_fixed, (), ())
    if opcode == Opcode.GEMM:
        m, kc = f["m"], f["k_chunks"]
        reads = (("spm", f["a_addr"], f["a_addr"] + m * kc), ("spm", f["b_addr"], f["b_addr"] + kc * n),
                 ("acc", f["c_addr"], f["c_addr"] + m))
        return _Decoded(opcode, f, "core", float(m * kc), 0.0, reads, (("acc", f["c_addr"], f["c_addr"] + m),))
    if opcode == Opcode.POSTOP:
        rows = f["rows"]
        reads = (("acc", f["src_addr"], f["src_addr"] + rows), ("acc", f["bias_addr"], f["bias_addr"] + 1))
        return _Decoded(opcode, f, "core", float(costs.postop_cycles(rows)), 0.0, reads,
                        (("spm", f["dst_addr"], f["dst_addr"] + rows),))
    return _Decoded(opcode, f, "sync", float(costs.sync_cycles), 0.0, (), ())


def _conflict(x: _Decoded, y: _Decoded) -> bool:
    def overlap(a, b):
        return a[0] == b[0] and a[1] < b[2] and b[1] < a[2]

    return (any(overlap(w, v) for w in x.writes for v in y.writes + y.reads)
            or any(overlap(r, w) for r in x.reads for w in y.writes))


class _TileState:
    """The running state of one tile's schedule."""

    def __init__(self, decoded: list[_Decoded], costs: Costs, dilation: list[float], offset: float):
        self.decoded = decoded
        self.offset = offset  # semaphores are shared: their times are global (local + offset)
        self.costs = costs
        self.dilation = dilation  # per command: the share of its memory time another tile's DMA takes
        self.next = 0
        self.last_dispatch = -float(costs.dispatch_gap)
        self.dma_free = 0.0
        self.core_ends: list[float] = []
        self.core_free = 0.0       # the array (and post-op) has drained
        self.core_input = 0.0      # the core takes its next command (a POSTOP holds it until it runs)
        self.chunks: list[tuple[float, int]] = []  # (stream start, rows) of the last two chunks
        self.ends: list[float] = []
        self.inflight: dict[str, list[int]] = {"dma": [], "core": []}
        self.times: list[CommandTime] = []
        self.busy = {"load": 0.0, "compute": 0.0, "store": 0.0, "postop": 0.0}

    def step(self, sem_times: dict[int, list[float]], sem_used: dict[int, int]) -> bool:
        """Schedule the next command; False when it is a WAIT whose semaphore is not signalled yet."""
        c = self.costs
        i = self.next
        d = self.decoded[i]
        t = self.last_dispatch + c.dispatch_gap
        if d.unit == "sync":
            t = max([t, *self.ends])
            if d.opcode == Opcode.WAIT:
                signals = sem_times.setdefault(d.f["sem"], [])
                need = sem_used.get(d.f["sem"], 0) + d.f["count"]
                if len(signals) < need:
                    return False
                t = max(t, sorted(signals)[need - 1] - self.offset)
                sem_used[d.f["sem"]] = need
            end = t + d.cost
            if d.opcode == Opcode.SIGNAL:
                sem_times.setdefault(d.f["sem"], []).extend([end + self.offset] * d.f["count"])
            self._done(i, t, end)
            return True
        other = "core" if d.unit == "dma" else "dma"
        for j in self.inflight[other]:
            if self.ends[j] > t and _conflict(d, self.decoded[j]):
                t = max(t, self.ends[j] - 1)
        if d.unit == "dma":
            t = max(t, self.dma_free - c.dma_handover)
            end = t + d.cost + d.memory * self.dilation[i]
            self.dma_free = end
            if d.opcode == Opcode.STORE:
                self.busy["store"] += end - t - c.store_idle
            else:
                self.busy["load"] += end - t - c.load_idle
        else:
            t = max(t, self.core_input)
            if len(self.core_ends) >= c.core_slots:
                t = max(t, self.core_ends[-c.core_slots] - c.dma_handover)
            end = self._core(d, t)
            self.core_ends.append(end)
        self._done(i, t, end)
        return True

    def _core(self, d: _Decoded, t: float) -> float:
        c = self.costs
        if d.opcode == Opcode.POSTOP:
            start = max(t + c.postop_fill, self.core_free)
            end = start + d.cost
            self.core_free = end
            self.core_input = start - c.dma_handover - 1
            self.chunks = []
            self.busy["postop"] += d.cost
            return end
        m, kc = d.f["m"], d.f["k_chunks"]
        s = t + c.gemm_fill
        if not self.chunks:
            s = max(s, self.core_free)
        for _ in range(kc):
            if self.chunks:
                s = max(s, self.chunks[-1][0] + self.chunks[-1][1])
            if len(self.chunks) == 2:
                s = max(s, self.chunks[0][0] + self.chunks[0][1] + c.bank_cycle)
            self.chunks = [*self.chunks[-1:], (s, m)]
        end = s + m + c.gemm_drain
        self.core_free = end
        self.busy["compute"] += m * kc
        return end

    def _done(self, i: int, start: float, end: float) -> None:
        d = self.decoded[i]
        self.ends.append(end)
        if d.unit in self.inflight:
            self.inflight[d.unit] = [j for j in self.inflight[d.unit] if self.ends[j] > start] + [i]
        self.times.append(CommandTime(d.opcode, start, end))
        self.last_dispatch = start
        self.next += 1


def _schedule(decoded: dict[int, list[_Decoded]], costs: Costs, dilation: dict[int, list[float]],
              offsets: dict[int, float]) -> dict[int, _TileState]:
    states = {t: _TileState(cmds, costs, dilation[t], offsets[t]) for t, cmds in decoded.items()}
    sem_times: dict[int, list[float]] = {}
    sem_used: dict[int, int] = {}
    progress = True
    while progress:
        progress = False
        for st in states.values():
            while st.next < len(st.decoded) and st.step(sem_times, sem_used):
                progress = True
    stuck = [t for t, st in states.items() if st.next < len(st.decoded)]
    if stuck:
        raise ValueError(f"the streams of tiles {stuck} end waiting on semaphores no stream signals often enough; "
                         f"expected every WAIT to be matched by SIGNALs")
    return states


def _directions(opcode: int) -> set[str]:
    """The memory directions a DMA command uses: the memory arbitrates reads and writes separately."""
    return {int(Opcode.LOAD): {"read"}, int(Opcode.STORE): {"write"}}.get(opcode, {"read", "write"})


def _dma_intervals(st: _TileState, offset: float, direction: str) -> list[tuple[float, float]]:
    return [(offset + c.start, offset + c.end) for c, d in zip(st.times, st.decoded, strict=True)
            if d.unit == "dma" and direction in _directions(d.opcode)]


def _overlap_fraction(span: tuple[float, float], others: np.ndarray) -> float:
    """The share of ``span`` that the intervals ``others`` (an (n, 2) array) cover, at most 1."""
    lo, hi = span
    if hi <= lo or not len(others):
        return 0.0
    covered = np.clip(np.minimum(hi, others[:, 1]) - np.maximum(lo, others[:, 0]), 0.0, None).sum()
    return min(1.0, float(covered) / (hi - lo))


def predict(streams: list[list[bytes]], tile: TileConfig, costs: Costs = COSTS) -> Prediction:
    """Predict every command's start and end, the unit totals per tile and the run's CYCLES.

    Parameters
    ----------
    streams:
        ``streams[t]``: the commands of tile ``t``, as the driver submits them (empty: tile unused).
    tile:
        The tile configuration (array size, row bytes).
    costs:
        The unit costs (default: the fitted :data:`~dx1_bringup.perf.costs.COSTS`).

    Returns
    -------
    Prediction
        Per used tile, every command's predicted dispatch and completion (cycles from tile 0's first
        dispatch, ``offset`` giving the tile's own start) and the unit totals; the host's cycles.

    Raises
    ------
    ValueError
        A WAIT that no SIGNAL of any stream ever satisfies.
    """
    used = [t for t, s in enumerate(streams) if s]
    decoded = {t: [_decode(c, tile, costs) for c in streams[t]] for t in used}
    # Tile 0 starts at its doorbell; each further tile one doorbell (a register write) later.
    offsets = {t: float(costs.host_register * k) for k, t in enumerate(used)}
    dilation = {t: [0.0] * len(decoded[t]) for t in used}
    states = _schedule(decoded, costs, dilation, offsets)
    for _ in range(_ITERATIONS if len(used) > 1 else 0):
        busy = {(t, way): _dma_intervals(states[t], offsets[t], way) for t in used for way in ("read", "write")}
        for t in used:
            others = {way: np.array([iv for u in used if u != t for iv in busy[(u, way)]], dtype=float).reshape(-1, 2)
                      for way in ("read", "write")}
            dilation[t] = [
                costs.contention * max(_overlap_fraction((offsets[t] + c.start, offsets[t] + c.end), others[way])
                                       for way in _directions(d.opcode))
                if d.unit == "dma" else 0.0 for c, d in zip(states[t].times, decoded[t], strict=True)]
        states = _schedule(decoded, costs, dilation, offsets)
    tiles = {}
    for t in used:
        st = states[t]
        tiles[t] = TilePrediction(st.times, st.busy["load"], st.busy["compute"], st.busy["store"], st.busy["postop"],
                                  offsets[t])
    host = costs.host_cycles(len(used))
    return Prediction(tiles, float(host))
