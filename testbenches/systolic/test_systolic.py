"""The systolic array alone: every row's result against numpy, exactly LATENCY cycles after the row went in.

The array has no handshake, so the testbench drives a schedule prepared in
advance, one entry per cycle: weight loads, activation rows and idle cycles
(idle means ``a_valid = 0`` and ``w_load = 0``; the data, bank and ``ctl``
inputs then carry random junk, which must not reach any result).  ``ctl``
carries a row id (0..255) so that each result can be matched to its row.

The reference keeps its own copy of both weight banks, shifted on every load
as the docstring of :class:`~dx1_bringup.gateware.SystolicArray` says, and
multiplies each activation row with the bank the row names, as it stands when
the row is streamed (int64 in numpy, wrapped to int32).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import cocotb
import numpy as np
import pytest
from cocotb.triggers import ClockCycles, FallingEdge, RisingEdge

from dx1_bringup.sim import run_cocotb_shared
from dx1_bringup.sim.harness import Harness, seed_note
from dx1_bringup.sim.stimulus import random_int8

CTL_IDS = 256


def pack(lanes: np.ndarray, lane_bytes: int) -> int:
    """Lanes as the packed Verilog vector: lane k in the k-th ``lane_bytes`` bytes, two's complement."""
    dtype = {1: "<i1", 4: "<i4"}[lane_bytes]
    return int.from_bytes(np.ascontiguousarray(lanes, dtype=dtype).tobytes(), "little")


def junk(rng: np.random.Generator, nbytes: int) -> int:
    return int.from_bytes(rng.bytes(nbytes), "little")


def unpack32(word: int, n: int) -> np.ndarray:
    return np.frombuffer(word.to_bytes(4 * n, "little"), dtype="<i4").astype(np.int32)


@dataclass
class Schedule:
    """Inputs for each cycle and the results expected, built against a model of the two weight banks."""

    n: int
    rng: np.random.Generator
    # one tuple per cycle: (a_valid, a, a_bank, ctl, w_load, w_row, w_bank), data already packed
    cycles: list[tuple[int, int, int, int, int, int, int]] = field(default_factory=list)
    # per activation row, in order: (cycle it is on `a`, row id on `ctl`, expected int32 lanes)
    expected: list[tuple[int, int, np.ndarray]] = field(default_factory=list)
    # per activation row: (row, bank, index of the matrix the row was meant for)
    rows: list[tuple[np.ndarray, int, int]] = field(default_factory=list)

    def __post_init__(self):
        self.banks = np.zeros((2, self.n, self.n), dtype=np.int8)  # the array's weights after reset
        self.last_row = [-(1 << 30)] * 2  # cycle of each bank's last activation row
        self.tight = 0  # reloads in the very first cycle the rule allows

    @property
    def latency(self) -> int:
        return 2 * self.n - 1

    def may_load(self, bank: int, cycle: int | None = None) -> bool:
        """The docstring's rule: a bank is not reloaded until 2*size-1 cycles after its last row."""
        cycle = len(self.cycles) if cycle is None else cycle
        return cycle >= self.last_row[bank] + self.latency

    def step(self, *, row: np.ndarray | None = None, a_bank: int = 0, matrix: int = -1,
             w_row: np.ndarray | None = None, w_bank: int = 0) -> None:
        """Add one cycle: an activation row and/or a weight load, each absent means idle (with junk)."""
        n, rng, cycle = self.n, self.rng, len(self.cycles)
        if row is None:
            a_valid, a, bank, ctl = 0, junk(rng, n), int(rng.integers(0, 2)), int(rng.integers(0, 256))
        else:
            a_valid, a, bank, ctl = 1, pack(row, 1), a_bank, len(self.expected) % CTL_IDS
            # the row meets the weights as they stand before this cycle's load (if any) takes effect
            product = row.astype(np.int64) @ self.banks[a_bank].astype(np.int64)
            self.expected.append((cycle, ctl, product.astype(np.int32)))
            self.rows.append((row, a_bank, matrix))
            self.last_row[a_bank] = cycle
        if w_row is None:
            w_load, w, wb = 0, junk(rng, n), int(rng.integers(0, 2))
        else:
            assert self.may_load(w_bank), f"schedule bug: bank {w_bank} loaded in cycle {cycle} while in use"
            w_load, w, wb = 1, pack(w_row, 1), w_bank
            self.tight += cycle == self.last_row[w_bank] + self.latency
            self.banks[w_bank, 1:] = self.banks[w_bank, :-1].copy()
            self.banks[w_bank, 0] = w_row
        self.cycles.append((a_valid, a, bank, ctl, w_load, w, wb))

    def idle(self, count: int = 1) -> None:
        for _ in range(count):
            self.step()

    def load(self, bank: int, matrix: np.ndarray, gap: float = 0.0) -> None:
        """Load a whole matrix, last row first, with random idle cycles between the rows."""
        for k in reversed(range(self.n)):
            while self.rng.random() < gap:
                self.idle()
            self.step(w_row=matrix[k], w_bank=bank)
        assert np.array_equal(self.banks[bank], matrix), "schedule bug: the bank model does not hold the matrix"

    def stream(self, bank: int, rows: np.ndarray, gap: float = 0.0, matrix: int = -1) -> None:
        for row in rows:
            while self.rng.random() < gap:
                self.idle()
            self.step(row=row, a_bank=bank, matrix=matrix)


class SystolicTB(Harness):
    """Clock, reset, a driver of a prepared schedule and a monitor of the results."""

    def __init__(self, dut):
        self.dut = dut
        self.n = len(dut.a) // 8
        assert len(dut.out) == 32 * self.n and len(dut.ctl) == 8, "unexpected port widths"
        self.latency = 2 * self.n - 1
        self.rng = np.random.default_rng(cocotb.RANDOM_SEED)
        self.results: list[tuple[int, int, np.ndarray]] = []
        self.extra: list[tuple[int, int]] = []
        self._start = 0
        self._idle_inputs()
        super().__init__(dut)

    def schedule(self) -> Schedule:
        return Schedule(self.n, self.rng)

    def _idle_inputs(self) -> None:
        d = self.dut
        d.a_valid.value = 0
        d.w_load.value = 0
        d.a.value = 0
        d.next_bank.value = 0
        d.ctl.value = 0
        d.w_row.value = 0
        d.w_bank.value = 0

    async def _monitor(self) -> None:
        d, n = self.dut, self.n
        while True:
            await FallingEdge(d.clk)
            if d.out_valid.value:
                self.results.append((self.cycle - self._start, int(d.out_ctl.value), unpack32(int(d.out.value), n)))

    async def run(self, sched: Schedule) -> None:
        """Drive ``sched`` (then idle until the last result is out) and check every result against it."""
        d = self.dut
        self.results.clear()
        monitor = cocotb.start_soon(self._monitor())
        edge = RisingEdge(d.clk)
        banks = [c[2] for c in sched.cycles] + [0]  # the array takes each cycle's bank a cycle ahead
        d.next_bank.value = banks[0]
        await edge
        self._start = self.cycle
        for i, (a_valid, a, _, ctl, w_load, w_row, w_bank) in enumerate(sched.cycles):
            d.a_valid.value = a_valid
            d.a.value = a
            d.next_bank.value = banks[i + 1]
            d.ctl.value = ctl
            d.w_load.value = w_load
            d.w_row.value = w_row
            d.w_bank.value = w_bank
            await edge
        self._idle_inputs()
        await ClockCycles(d.clk, self.latency + 3)
        await FallingEdge(d.clk)
        monitor.cancel()
        d._log.info(f"{len(sched.cycles)} cycles, {len(sched.expected)} rows, "
                    f"{sum(c[4] for c in sched.cycles)} weight loads ({sched.tight} at the reload bound)")
        self.check(sched)

    def check(self, sched: Schedule) -> None:
        lat, got, exp = self.latency, self.results, sched.expected
        for i, ((g_cycle, g_ctl, g_out), (e_cycle, e_ctl, e_out)) in enumerate(zip(got, exp, strict=False)):
            row, bank, matrix = sched.rows[i]
            where = (f"row {i} (ctl {e_ctl}, bank {bank}, matrix {matrix}, in cycle {e_cycle} of the schedule; "
                     f"{seed_note()})")
            assert g_ctl == e_ctl and g_cycle == e_cycle + lat, (
                f"result {i} came out in cycle {g_cycle} with ctl {g_ctl}; expected {where} in cycle "
                f"{e_cycle + lat} (LATENCY {lat})")
            bad = np.flatnonzero(g_out != e_out)
            assert not len(bad), (
                f"{where}: wrong sum in {len(bad)} columns, first column {bad[0]}: RTL {g_out[bad[0]]}, "
                f"numpy {e_out[bad[0]]}\n  a   = {row.tolist()}\n  RTL = {g_out.tolist()}\n"
                f"  ref = {e_out.tolist()}")
        assert len(got) == len(exp), (
            f"{len(got)} results for {len(exp)} activation rows ({seed_note()}); "
            + (f"first extra: cycle {got[len(exp)][0]} ctl {got[len(exp)][1]}" if len(got) > len(exp)
               else f"first missing: row {len(got)} in cycle {exp[len(got)][0]}"))


@cocotb.test()
async def single_bank(dut):
    """Bank 0 loaded once, then random rows (a quarter of the values -128/127) with random idle cycles."""
    tb = SystolicTB(dut)
    await tb.reset()
    n, rng = tb.n, tb.rng
    s = tb.schedule()
    s.load(1, random_int8(rng, (n, n)), gap=0.3)  # a different matrix in bank 1: rows must not use it
    weights = random_int8(rng, (n, n))
    s.load(0, weights, gap=0.3)
    s.stream(0, random_int8(rng, (300, n)), gap=0.3, matrix=0)
    s.stream(0, random_int8(rng, (100, n)), gap=0.0, matrix=0)  # and flat out
    assert all(np.array_equal(e[2], (r.astype(np.int64) @ weights).astype(np.int32))
               for e, (r, _, _) in zip(s.expected, s.rows, strict=True))
    await tb.run(s)


@cocotb.test()
async def ping_pong_banks(dut):
    """Matrices back to back: the next one is loaded into the free bank while the current one streams.

    A bank is reloaded at the earliest in the cycle the docstring allows (2*size-1 after its last
    row); idle probabilities change from matrix to matrix, zero included, so the hand-over is hit
    both exactly at that bound and with slack.  Each row is checked against its bank as it stood.
    """
    tb = SystolicTB(dut)
    await tb.reset()
    n, rng = tb.n, tb.rng
    count = 20
    matrices = [random_int8(rng, (n, n)) for _ in range(count)]
    row_counts = [int(rng.choice([1, 2, n - 1, n, 2 * n, 3 * n, int(rng.integers(1, 6 * n))])) for _ in range(count)]
    activations = [random_int8(rng, (r, n)) for r in row_counts]
    gaps = [float(rng.choice([0.0, 0.0, 0.2, 0.6])) for _ in range(count)]
    s = tb.schedule()

    loading, load_k = 0, n - 1  # matrix being loaded (into bank loading % 2), its next row
    streaming, row_i = 0, 0     # matrix being streamed, its next row
    loaded_at = [None] * count  # cycle of each matrix's last load
    while streaming < count:
        cycle = len(s.cycles)
        w_row = w_bank = a_row = a_bank = None
        # the weight channel: the next matrix, once its bank's previous matrix has all gone through
        if loading < count and loading - 2 < streaming and s.may_load(loading % 2):
            if rng.random() >= gaps[loading]:
                w_row, w_bank = matrices[loading][load_k], loading % 2
        # the activation channel: the current matrix, once fully loaded (in an earlier cycle)
        if loaded_at[streaming] is not None and loaded_at[streaming] < cycle:
            if rng.random() >= gaps[streaming]:
                a_row, a_bank = activations[streaming][row_i], streaming % 2
        s.step(row=a_row, a_bank=a_bank or 0, matrix=streaming, w_row=w_row, w_bank=w_bank or 0)
        if w_row is not None:
            load_k -= 1
            if load_k < 0:
                assert np.array_equal(s.banks[loading % 2], matrices[loading]), "schedule bug: bank model"
                loaded_at[loading] = cycle
                loading, load_k = loading + 1, n - 1
        if a_row is not None:
            row_i += 1
            if row_i == row_counts[streaming]:
                streaming, row_i = streaming + 1, 0
    # every row was meant for, and is checked against, the matrix of its bank at the time
    for (e_cycle, _, e_out), (row, bank, m) in zip(s.expected, s.rows, strict=True):
        assert bank == m % 2 and np.array_equal(e_out, (row.astype(np.int64) @ matrices[m]).astype(np.int32)), \
            f"schedule bug: row in cycle {e_cycle} does not meet matrix {m}"
    await tb.run(s)


@cocotb.test()
async def extremes(dut):
    """The largest sums: -128 x -128 (n * 16384) and 127 x -128 (n * -16256), and their mixes, exactly."""
    tb = SystolicTB(dut)
    await tb.reset()
    n = tb.n
    lo, hi = np.int8(-128), np.int8(127)
    full = np.full((n, n), lo, dtype=np.int8)
    mixed = np.where(np.add.outer(np.arange(n), np.arange(n)) % 2 == 0, lo, hi).astype(np.int8)
    s = tb.schedule()
    s.load(0, full)
    s.load(1, mixed)
    rows = np.array([[lo] * n, [hi] * n, [lo] * n, [hi] * n, [0] * n, [lo] * n,
                     [lo if k % 2 else hi for k in range(n)], [lo if k % 2 == 0 else hi for k in range(n)]],
                    dtype=np.int8)
    for bank in (0, 1, 0):
        s.stream(bank, rows)  # flat out, and the bank switching from row to row
    for row in rows:
        s.stream(0, row[None])
        s.stream(1, row[None])
    await tb.run(s)
    sums = {int(v) for e in s.expected for v in e[2]}
    assert {n * 16384, n * -16256} <= sums, "the schedule does not reach the largest sums"


@pytest.mark.parametrize("module", ["dx1_systolic_a4", "dx1_systolic_a8"])
@pytest.mark.parametrize("testcase", ["single_bank", "ping_pong_banks", "extremes"])
def test_systolic(module, testcase, seed, cocotb_batch):
    run_cocotb_shared(module, "systolic.test_systolic", testcase, batch=cocotb_batch, seed=seed, quiet=True)
