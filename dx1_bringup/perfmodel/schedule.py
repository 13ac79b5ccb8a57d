"""Predicted start and end cycles of every command of per-tile command streams.

:func:`predict` replays the dispatch rules of the command processor (``gateware/command/``) with the
unit costs of :mod:`.costs`: commands dispatch in order, at least ``dispatch_gap`` cycles apart; LOAD,
STORE and COPY go to the tile's DMA one at a time, GEMM and POSTOP to the tile core (``core_slots`` in
flight, POSTOP after the GEMMs before it); a command that writes local rows an in-flight command of the
other unit reads or writes (or reads rows it writes) waits for that command's completion; FENCE and
SIGNAL wait for every earlier command, WAIT for its semaphore (signalled by any tile).

Memory: the device memory's banks (4 KiB pages interleaved) each serve one burst per direction at a time,
round-robin between the ports that want it.  A DMA command takes its cost alone, or its fixed cost plus the
cycles its own bursts hold their banks (:func:`~.costs.move_bank_runs`) plus what other bursts in the same
banks make it wait, whichever is longer.  The other bursts are other tiles' DMA and every tile's command
fetches (given the command rings, :class:`Ring`); a fetch in turn waits for the bursts open in its ring's
bank, and its command dispatches that much later.  Waits depend on when everything runs, so the whole
schedule is iterated a few times (:data:`_ITERATIONS`).

Times are cycles from the first command's dispatch; :attr:`Prediction.total` adds what the host spends
around the run.
"""

from __future__ import annotations

import bisect
import dataclasses
import itertools
import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..spec import BUS_BYTES, COMMAND_BYTES, VECTOR_OPCODES, Opcode, TileConfig, unpack_command
from .costs import COPY_BURST, COSTS, PAGE_BYTES, Costs, move_bank_runs, move_bursts

__all__ = ["CommandTime", "Prediction", "Ring", "TilePrediction", "predict"]

#: Rounds of scheduling with the bank waits of the round before.
_ITERATIONS = 4
#: More bank changes than this in one DMA command and it counts as spread over its banks (see _Runs).
_MAX_RUNS = 8
_WAYS = ("read", "write")


@dataclass(frozen=True)
class CommandTime:
    """One command's predicted dispatch (``start``, the TRACE start event) and completion (``end``).

    ``busy``: for a LOAD or STORE, the cycles its bursts are open, which BUSY_LOAD or BUSY_STORE counts
    (not the time its writes wait for the array); 0 for other commands.
    """

    opcode: int
    start: float
    end: float
    busy: float = 0.0


@dataclass(frozen=True)
class Ring:
    """Where a tile's command processor fetches its stream: the command ring's device address, its entries,
    and the ring index of the stream's first command (the queue's next index when it is submitted)."""

    base: int
    entries: int
    index: int = 0

    @classmethod
    def of(cls, queue: Any) -> Ring:
        """A driver queue's ring as it stands (anything with ``ring``, ``entries`` and ``next_index``)."""
        return cls(queue.ring, queue.entries, queue.next_index)

    def address(self, i: int) -> int:
        """The device address the stream's command ``i`` is fetched from."""
        return self.base + (self.index + i) % self.entries * COMMAND_BYTES


@dataclass
class TilePrediction:
    """One tile's commands and unit totals: cycles its DMA read and wrote, the array streamed, the post-op and
    the vector unit ran, and its span."""

    commands: list[CommandTime] = field(default_factory=list)
    load: float = 0.0
    compute: float = 0.0
    store: float = 0.0
    postop: float = 0.0
    offset: float = 0.0
    vector: float = 0.0

    @property
    def end(self) -> float:
        """Cycle of the last completion, counted from tile 0's first dispatch."""
        return self.offset + max((c.end for c in self.commands), default=0.0)


@dataclass
class Prediction:
    """Every tile's :class:`TilePrediction` and the run's total as the PERF CYCLES counter sees it."""

    per_tile: dict[int, TilePrediction]
    host: float

    @property
    def device(self) -> float:
        """Cycles from the first dispatch to the last completion, over every tile."""
        return max((t.end for t in self.per_tile.values()), default=0.0)

    @property
    def total(self) -> float:
        """Device cycles plus the host's part (ring writes, doorbells, the final polling)."""
        return self.device + self.host


class _Runs:
    """The banks a DMA command's bursts hold in one direction, in order: each run's banks and its share of the time.

    Run ``i`` is held from fraction ``edges[i]`` to ``edges[i + 1]`` of the command's span (in proportion to
    the cycles its bursts hold it) by ``bursts[i]`` bursts; ``banks[i]`` maps each bank to the share of the
    run's bursts in it: one bank, or, for a command whose bursts change bank more than :data:`_MAX_RUNS`
    times (rows a page or more apart), a single run spread over its banks.  ``total`` is the cycles of
    all of them.  Plain Python numbers: a command has a few runs, and the predictor looks at them many times.
    """

    def __init__(self, bank: Sequence[int], cycles: Sequence[float], bursts: Sequence[float]):
        cycles = [float(c) for c in cycles]
        self.total = sum(cycles)
        if len(bank) > _MAX_RUNS:
            spread: dict[int, float] = {}
            for b, c in zip(bank, cycles, strict=True):
                spread[int(b)] = spread.get(int(b), 0.0) + c / self.total
            self.banks, cycles, bursts = [spread], [self.total], [sum(bursts)]
        else:
            self.banks = [{int(b): 1.0} for b in bank]
        self.bursts = [float(b) for b in bursts]
        self.burst_cycles = self.total / sum(self.bursts) if self.total else 0.0
        self.edges = [0.0, *(e / self.total for e in itertools.accumulate(cycles))] if self.total else [0.0]

    def at(self, lo: float, hi: float, time: float) -> int:
        """Which run a command spanning ``[lo, hi]`` is in at ``time``."""
        return min(max(bisect.bisect_right(self.edges, (time - lo) / (hi - lo)) - 1, 0), len(self.banks) - 1)


def _same(x: dict[int, float], y: dict[int, float]) -> float:
    """The chance that two bursts spread over banks as ``x`` and ``y`` say are in the same bank."""
    return sum(w * y.get(b, 0.0) for b, w in x.items())


@dataclass
class _Decoded:
    opcode: int
    f: dict[str, int]
    unit: str
    cost: float
    banks: dict[str, _Runs]  # per memory direction used: the banks its bursts hold, in order
    reads: tuple[tuple[str, int, int], ...]
    writes: tuple[tuple[str, int, int], ...]

    def moving(self, costs: Costs, wait: float) -> float:
        """A DMA command's cycles when other bursts keep it waiting ``wait`` cycles for its banks."""
        fixed = costs.store_fixed if self.opcode == Opcode.STORE else costs.load_fixed
        return max(self.cost, fixed + max(runs.total for runs in self.banks.values()) + wait)


def _decode(cmd: bytes, tile: TileConfig, costs: Costs, banks: int) -> _Decoded:
    opcode, f = unpack_command(cmd)
    n = tile.array
    if opcode in (Opcode.LOAD, Opcode.STORE):
        acc = bool(f["flags"] & 1)
        mem = "acc" if acc else "spm"
        seg = f["cols"] * (tile.acc_row_bytes if acc else tile.spm_row_bytes)
        bursts = move_bursts(f["mem_addr"], f["mem_stride"], f["rows"], seg)
        beats = f["rows"] * seg // BUS_BYTES
        last = f["local_addr"] + (f["rows"] - 1) * f["local_row_stride"] + (f["cols"] - 1) * f["local_col_stride"]
        rows = ((mem, f["local_addr"], last + 1),)
        held = _Runs(*move_bank_runs(f["mem_addr"], f["mem_stride"], f["rows"], seg, banks))
        if opcode == Opcode.LOAD:
            return _Decoded(opcode, f, "dma", float(costs.load_cycles(bursts, beats)), {"read": held}, (), rows)
        return _Decoded(opcode, f, "dma", float(costs.store_cycles(bursts, beats)), {"write": held}, rows, ())
    if opcode == Opcode.COPY:
        held = {"read": _Runs(*move_bank_runs(f["src_addr"], 0, 1, f["length"], banks, COPY_BURST)),
                "write": _Runs(*move_bank_runs(f["dst_addr"], 0, 1, f["length"], banks, COPY_BURST))}
        return _Decoded(opcode, f, "dma", float(costs.copy_cycles(f["length"] // BUS_BYTES)), held, (), ())
    if opcode == Opcode.GEMM:
        m, kc = f["m"], f["k_chunks"]
        reads = (("spm", f["a_addr"], f["a_addr"] + m * kc), ("spm", f["b_addr"], f["b_addr"] + kc * n),
                 ("acc", f["c_addr"], f["c_addr"] + m))
        return _Decoded(opcode, f, "core", float(m * kc), {}, reads, (("acc", f["c_addr"], f["c_addr"] + m),))
    if opcode == Opcode.POSTOP:
        rows = f["rows"]
        reads = (("acc", f["src_addr"], f["src_addr"] + rows), ("acc", f["bias_addr"], f["bias_addr"] + 1))
        return _Decoded(opcode, f, "core", float(costs.postop_cycles(rows)), {}, reads,
                        (("spm", f["dst_addr"], f["dst_addr"] + rows),))
    if opcode in VECTOR_OPCODES:
        # The tile runs a vector command alone, and the command processor holds the tile's whole memories for it.
        whole = (("spm", 0, tile.spm_rows), ("acc", 0, tile.acc_rows))
        return _Decoded(opcode, f, "core", float(costs.vector_command_cycles(f, n)), {}, whole, whole)
    return _Decoded(opcode, f, "sync", float(costs.sync_cycles), {}, (), ())


def _conflict(x: _Decoded, y: _Decoded) -> bool:
    def overlap(a, b):
        return a[0] == b[0] and a[1] < b[2] and b[1] < a[2]

    return (any(overlap(w, v) for w in x.writes for v in y.writes + y.reads)
            or any(overlap(r, w) for r in x.reads for w in y.writes))


class _TileState:
    """The running state of one tile's schedule."""

    def __init__(self, decoded: list[_Decoded], costs: Costs, waits: list[float], fetched: list[float],
                 offset: float):
        self.decoded = decoded
        self.offset = offset  # semaphores are shared: their times are global (local + offset)
        self.costs = costs
        self.waits = waits  # per command: cycles other bursts hold the banks its DMA wants
        self.fetched = fetched  # per command: cycles its fetch waited for bursts holding the ring's bank
        self.next = 0
        self.last_dispatch = -float(costs.dispatch_gap)
        self.dma_free = 0.0
        self.core_ends: list[float] = []
        self.core_free = 0.0       # the array (and post-op) has drained
        self.core_input = 0.0      # the core takes its next command (a POSTOP holds it until it runs)
        self.results: list[tuple[float, float]] = []  # when recent GEMMs write their first and last results
        self.chunks: list[tuple[float, int]] = []  # (stream start, rows) of the last two chunks
        self.ends: list[float] = []
        self.inflight: dict[str, list[int]] = {"dma": [], "core": []}
        self.times: list[CommandTime] = []
        self.busy = {"load": 0.0, "compute": 0.0, "store": 0.0, "postop": 0.0, "vector": 0.0}

    def step(self, sem_times: dict[int, list[float]], sem_used: dict[int, int]) -> bool:
        """Schedule the next command; False when it is a WAIT whose semaphore is not signalled yet."""
        c = self.costs
        i = self.next
        d = self.decoded[i]
        t = self.last_dispatch + c.dispatch_gap + self.fetched[i]
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
            moving = d.moving(c, self.waits[i])
            end = t + moving
            if d.opcode == Opcode.LOAD and d.writes[0][0] == "acc":
                for results, last in self.results:  # GEMMs already writing their results
                    if results < end and last > t:
                        end = max(end, last + 1)
            self.dma_free = end
            busy = moving - (c.store_idle if d.opcode == Opcode.STORE else c.load_idle)
            self.busy["store" if d.opcode == Opcode.STORE else "load"] += busy
            self._done(i, t, end, busy)
            return True
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
        if d.opcode in VECTOR_OPCODES:  # after every earlier GEMM and POSTOP has drained; the next waits for it
            start = max(t, self.core_free)
            end = start + d.cost
            self.core_free = self.core_input = end
            self.chunks = []
            self.busy["vector"] += d.cost
            return end
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
        first = None
        for _ in range(kc):
            if self.chunks:
                s = max(s, self.chunks[-1][0] + self.chunks[-1][1])
            if len(self.chunks) == 2:
                s = max(s, self.chunks[0][0] + self.chunks[0][1] + c.bank_cycle)
            self.chunks = [*self.chunks[-1:], (s, m)]
            first = s if first is None else first
        end = s + m + c.gemm_drain
        self.core_free = end
        self.busy["compute"] += m * kc
        self._yield_accumulator(first + c.gemm_drain, end)
        self.results = [*self.results[-c.core_slots:], (first + c.gemm_drain, end)]
        return end

    def _yield_accumulator(self, results: float, end: float) -> None:
        """A LOAD into the accumulator still writing when a GEMM's results start waits until they end.

        The array's result writes have the accumulator's write port first (``gateware/tile.py``), so the
        DMA's writes wait while back-to-back chunks write a result every cycle (:meth:`step` applies the
        same rule to a LOAD dispatched while GEMMs write).
        """
        for j in self.inflight["dma"]:
            d = self.decoded[j]
            if d.opcode == Opcode.LOAD and d.writes[0][0] == "acc" and self.ends[j] > results:
                late = end + 1 - self.ends[j]
                if late > 0:
                    self.ends[j] += late
                    self.times[j] = dataclasses.replace(self.times[j], end=self.ends[j])
                    self.dma_free = max(self.dma_free, self.ends[j])

    def _done(self, i: int, start: float, end: float, busy: float = 0.0) -> None:
        d = self.decoded[i]
        self.ends.append(end)
        if d.unit in self.inflight:
            self.inflight[d.unit] = [j for j in self.inflight[d.unit] if self.ends[j] > start] + [i]
        self.times.append(CommandTime(d.opcode, start, end, busy))
        self.last_dispatch = start
        self.next += 1


def _schedule(decoded: dict[int, list[_Decoded]], costs: Costs, waits: dict[int, list[float]],
              fetched: dict[int, list[float]], offsets: dict[int, float]) -> dict[int, _TileState]:
    states = {t: _TileState(cmds, costs, waits[t], fetched[t], offsets[t]) for t, cmds in decoded.items()}
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


class _Use:
    """One user's bursts in one memory direction: its commands' spans, in order of start, and their bank runs."""

    def __init__(self, spans: list[tuple[float, float, _Runs]]):
        spans.sort(key=lambda x: x[0])
        self.lo = [x[0] for x in spans]
        self.hi = [x[1] for x in spans]
        self.runs = [x[2] for x in spans]
        self.reach = list(itertools.accumulate(self.hi, max))  # latest end of the commands up to each

    def overlapping(self, lo: float, hi: float) -> Iterator[int]:
        """The commands whose span overlaps ``(lo, hi)`` (``hi == lo``: those running at ``lo``)."""
        j = bisect.bisect_right(self.lo, hi) - 1 if hi == lo else bisect.bisect_left(self.lo, hi) - 1
        while j >= 0 and self.reach[j] > lo:
            if self.hi[j] > lo:
                yield j
            j -= 1


def _bank_use(st: _TileState, offset: float, way: str) -> _Use:
    """A tile's DMA commands using direction ``way``."""
    return _Use([(offset + c.start, offset + c.end, d.banks[way]) for c, d in zip(st.times, st.decoded, strict=True)
                 if way in d.banks and d.banks[way].total])


def _same_bank(lo: float, hi: float, ours: _Runs, lo_o: float, hi_o: float, theirs: _Runs) -> tuple[float, float]:
    """While ``[lo, hi]`` and ``[lo_o, hi_o]`` overlap with both commands in the same bank: the cycles, and
    how many of our bursts start then.

    Each command goes through its runs in order, each run for its share of the command's span, its bursts
    starting at even steps through it.
    """
    a, b = max(lo, lo_o), min(hi, hi_o)
    if b <= a:
        return 0.0, 0.0
    cuts = sorted({a, b, *(min(max(lo + (hi - lo) * e, a), b) for e in ours.edges),
                   *(min(max(lo_o + (hi_o - lo_o) * e, a), b) for e in theirs.edges)})
    cycles = starts = 0.0
    for x, y in itertools.pairwise(cuts):
        mid = (x + y) / 2
        run = ours.at(lo, hi, mid)
        same = _same(ours.banks[run], theirs.banks[theirs.at(lo_o, hi_o, mid)])
        if not same:
            continue
        start = lo + (hi - lo) * ours.edges[run]
        step = (hi - lo) * (ours.edges[run + 1] - ours.edges[run]) / ours.bursts[run]  # between our burst starts
        cycles += (y - x) * same
        starts += min(max(math.ceil((y - start) / step) - math.ceil((x - start) / step), 0), ours.bursts[run]) * same
    return cycles, starts


def _bank_waits(st: _TileState, offset: float, others: list[dict[str, _Use]]) -> list[float]:
    """Per command of ``st``: the cycles other bursts (other tiles' DMA, command fetches) hold the bank it wants.

    While this command and another are in the same bank, the bank serves them round-robin, a burst at a
    time: each of our bursts that starts then waits for one of theirs, as long as they have bursts to send
    (their bank time over that stretch).  A burst already open when the other arrives waits for nothing, so
    a one-burst command that reaches the bank first is not delayed at all.  Each other user can delay the
    command by at most its own bank time over the stretch, however short our bursts are: of two tiles loading
    one page, one in 1-beat and one in 2-beat bursts, the 1-beat bursts each wait for a 2-beat one.
    """
    waits = []
    for c, d in zip(st.times, st.decoded, strict=True):
        wait = 0.0
        lo, hi = offset + c.start, offset + c.end
        for way, ours in d.banks.items():
            if not ours.total or hi <= lo:
                continue
            for use in others:
                if way not in use:
                    continue
                theirs = use[way]
                held = 0.0
                for j in theirs.overlapping(lo, hi):
                    lo_o, hi_o, runs = theirs.lo[j], theirs.hi[j], theirs.runs[j]
                    cycles, bursts = _same_bank(lo, hi, ours, lo_o, hi_o, runs)
                    held += min(cycles * runs.total / (hi_o - lo_o), bursts * runs.burst_cycles)
                wait += held
        waits.append(wait)
    return waits


def _fetch_use(st: _TileState, offset: float, ring: Ring, banks: int, costs: Costs) -> dict[str, _Use]:
    """A tile's command fetches as bank users: the fetch of each command after the first, one read burst of
    a command's beats into the ring's bank, ``fetch_lead`` cycles after the command before it dispatched."""
    beats = COMMAND_BYTES // BUS_BYTES
    per_bank = [_Runs([b], [beats + 1], [1]) for b in range(banks)]
    spans = []
    for i, prev in enumerate(st.times[:-1], start=1):
        at = offset + prev.start + costs.fetch_lead
        spans.append((at, at + beats + 1, per_bank[ring.address(i) // PAGE_BYTES % banks]))
    return {"read": _Use(spans)}


def _burst_left(lo: float, hi: float, runs: _Runs, at: float, bank: int) -> float:
    """Cycles left, at ``at``, of the burst a command spanning ``[lo, hi]`` has open in ``bank`` (0: none; for
    a run spread over banks, in proportion to its share in ``bank``)."""
    r = runs.at(lo, hi, at)
    there = runs.banks[r].get(bank, 0.0)
    if not there:
        return 0.0
    share = runs.edges[r + 1] - runs.edges[r]
    step = (hi - lo) * share / runs.bursts[r]  # cycles between its burst starts
    return there * max(0.0, runs.total * share / runs.bursts[r] - (at - lo - (hi - lo) * runs.edges[r]) % step)


def _fetch_waits(st: _TileState, offset: float, ring: Ring, banks: int, costs: Costs,
                 users: list[dict[str, _Use]]) -> list[float]:
    """Per command of ``st``: the cycles its fetch waits for bursts already open in the ring's bank.

    A fetch is one short read burst: it waits for what is left of each burst that holds its bank when it
    asks (every tile's DMA reads, other tiles' fetches), and its command dispatches that much later.
    """
    waits = [0.0]
    for i in range(1, len(st.times)):
        at = offset + st.times[i - 1].start + costs.fetch_lead
        bank = ring.address(i) // PAGE_BYTES % banks
        wait = 0.0
        for use in users:
            reads = use["read"]
            for j in reads.overlapping(at, at):
                wait += _burst_left(reads.lo[j], reads.hi[j], reads.runs[j], at, bank)
        waits.append(wait)
    return waits


def predict(streams: list[list[bytes]], tile: TileConfig, costs: Costs = COSTS, banks: int = 1,
            rings: Mapping[int, Ring] | None = None) -> Prediction:
    """Predict every command's start and end, the unit totals per tile and the run's CYCLES.

    Parameters
    ----------
    streams:
        ``streams[t]``: the commands of tile ``t``, as the driver submits them (empty: tile unused).
    tile:
        The tile configuration (array size, row bytes).
    costs:
        The unit costs (default: the fitted :data:`~dx1_bringup.perfmodel.costs.COSTS`).
    banks:
        The device memory's banks (``CAPS.mem_banks``): tiles whose bursts go to different banks do
        not wait for each other.
    rings:
        Per tile, where its command processor fetches the stream from (:class:`Ring`): a LOAD reading the
        bank a fetch reads waits for it.  Without them fetches are not counted.

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
    decoded = {t: [_decode(c, tile, costs, banks) for c in streams[t]] for t in used}
    # Tile 0 starts at its doorbell; each further tile one doorbell (a register write) later.
    offsets = {t: float(costs.host_register * k) for k, t in enumerate(used)}
    waits = {t: [0.0] * len(decoded[t]) for t in used}
    fetched = {t: [0.0] * len(decoded[t]) for t in used}
    states = _schedule(decoded, costs, waits, fetched, offsets)
    rings = {t: r for t, r in (rings or {}).items() if t in used}
    for round_ in range(_ITERATIONS if len(used) > 1 or rings else 0):
        use = {t: {way: _bank_use(states[t], offsets[t], way) for way in _WAYS} for t in used}
        fetches = {t: _fetch_use(states[t], offsets[t], r, banks, costs) for t, r in rings.items()}
        new_waits = {t: _bank_waits(states[t], offsets[t], [use[u] for u in used if u != t] + list(fetches.values()))
                     for t in used}
        new_fetched = {t: _fetch_waits(states[t], offsets[t], r, banks, costs,
                                       list(use.values()) + [f for u, f in fetches.items() if u != t])
                       for t, r in rings.items()}
        # From the second round on, half of the old waits and half of the new: a wait that moves what it
        # waits for out of its way would otherwise flip between two schedules.
        keep = 0.5 if round_ else 0.0
        for old, new in ((waits, new_waits), (fetched, new_fetched)):
            for t, values in new.items():
                old[t] = [keep * a + (1 - keep) * b for a, b in zip(old[t], values, strict=True)]
        states = _schedule(decoded, costs, waits, fetched, offsets)
    per_tile = {}
    for t in used:
        st = states[t]
        per_tile[t] = TilePrediction(st.times, st.busy["load"], st.busy["compute"], st.busy["store"], st.busy["postop"],
                                     offsets[t], st.busy["vector"])
    host = costs.host_cycles(len(used))
    return Prediction(per_tile, float(host))
