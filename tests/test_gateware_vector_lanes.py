# amaranth: UnusedElaboratable=no
"""The vector unit's lanes (``gateware/vector/lanes.py``) on Amaranth's simulator, step by step against the golden
model: each step is also run as a one-local-row VECTOR command on ``model.vector.VectorUnit``."""

from __future__ import annotations

import numpy as np
import pytest
from amaranth_run import simulate

from dx1_bringup.gateware.vector.lanes import LANES_LATENCY, VectorLanes
from dx1_bringup.model.vector import VectorUnit, check_vector_command
from dx1_bringup.sim.vector_stimulus import random_table_entries
from dx1_bringup.spec import (
    TABLE_ENTRIES,
    VECTOR_OPS,
    ErrorCode,
    Opcode,
    TileConfig,
    VectorOp,
    pack_command,
    signed32,
    unpack_command,
    unsigned32,
)

pytestmark = pytest.mark.amaranth_sim

EDGES = [-(1 << 31), (1 << 31) - 1, -(1 << 31) + 1, -128, 127, -129, 128, 0, 1, -1]
LANE_VOPS = [op for op in VectorOp if op not in (VectorOp.RECIP, VectorOp.ISQRT)]
REDUCE = (VectorOp.RMAX, VectorOp.RSUM, VectorOp.RSUMSQ)


def _value(rng: np.random.Generator) -> int:
    kind = rng.integers(0, 4)
    if kind == 0:
        return int(rng.choice(EDGES))
    if kind == 1:
        return int(rng.integers(-300, 300))
    return int(rng.integers(-(1 << 31), 1 << 31))


def _shift(rng: np.random.Generator, top: int) -> int:
    return int(rng.choice([0, 1, top, int(rng.integers(0, top + 1))]))


class Step:
    """One step's inputs, and what the golden model makes of them."""

    def __init__(self, rng: np.random.Generator, array: int, vop: VectorOp, d_acc: bool):
        self.vop, self.d_acc = vop, d_acc
        spec = VECTOR_OPS[vop]
        self.shift = _shift(rng, spec.max_shift) if spec.max_shift is not None else 0
        self.imm = self.imm2 = 0
        self.a = [_value(rng) for _ in range(array)]
        self.b = [_value(rng) for _ in range(array)] if spec.uses_b else [0] * array
        if vop == VectorOp.CLAMP:
            self.imm, self.imm2 = sorted((_value(rng), _value(rng)))
        if vop == VectorOp.LUT:
            self._lut_operands(rng)

    def _lut_operands(self, rng: np.random.Generator) -> None:
        """Offsets and lanes that hit, underflow, overflow and sit on the boundaries i = 0, 255, 256."""
        self.imm = int(rng.choice([_value(rng), int(rng.integers(-1000, 1000))]))
        s = self.shift
        for lane in range(len(self.a)):
            u = int(rng.choice([
                int(rng.integers(0, 256 << s)), int(rng.integers(0, 256 << s)),
                0, -1, (255 << s) + int(rng.integers(0, 1 << s)), (256 << s) - 1, 256 << s, (256 << s) + 1,
                int(rng.integers(-(1 << 33), 1 << 33))]))
            a = self.imm + u
            self.a[lane] = a if -(1 << 31) <= a < 1 << 31 else _value(rng)

    def run_model(self, unit: VectorUnit) -> None:
        """The model's D row (``self.d``) and LUT counts for this step, and the command's legality."""
        spec = VECTOR_OPS[self.vop]
        unit.acc[0] = self.a
        unit.acc[1] = self.b
        fields = {"vop": int(self.vop), "rows": 1, "cols": 1, "a_addr": 0, "d_addr": 2}
        flags = {"a_acc": True, "d_acc": self.d_acc}
        if spec.uses_b:
            fields["b_addr"] = 1
            flags["b_acc"] = True
        if spec.max_shift is not None:
            fields["shift"] = self.shift
        for name in spec.imms:
            fields[name] = unsigned32(getattr(self, name))
        command = pack_command(Opcode.VECTOR, flags=flags, **fields)
        _, f = unpack_command(command)
        assert check_vector_command(int.from_bytes(command, "little"), f, unit.config) == ErrorCode.OK
        before = unit.hits, unit.underflows, unit.overflows
        unit.execute(command)
        after = unit.hits, unit.underflows, unit.overflows
        self.counts = tuple(now - then for now, then in zip(after, before, strict=True))
        self.d = [int(x) for x in (unit.acc[2] if self.d_acc else unit.spm[2])]

    def check(self, out: list[int], counts: tuple[int, int, int]) -> None:
        what = f"{self.vop.name} d_acc={self.d_acc} shift={self.shift} imm={self.imm} a={self.a} b={self.b}"
        if self.vop in REDUCE:
            terms = self.a if self.vop != VectorOp.RSUMSQ else [signed32(x * x) for x in self.a]
            assert out == terms, what
            stat = max(out) if self.vop == VectorOp.RMAX else signed32(sum(out))
            low, high = (-(1 << 31), (1 << 31) - 1) if self.d_acc else (-128, 127)
            assert [min(max(stat, low), high)] * len(out) == self.d, f"the terms' statistic: {what}"
        else:
            assert out == self.d, what
        assert counts == (self.counts if self.vop == VectorOp.LUT else (0, 0, 0)), what


def _lanes(values: list[int]) -> int:
    return sum((v & 0xFFFF_FFFF) << (32 * i) for i, v in enumerate(values))


def _unpack(word: int, array: int) -> list[int]:
    return [signed32(word >> (32 * i)) for i in range(array)]


def _run(array: int, batches: list[tuple[np.ndarray, list[Step | None]]]) -> int:
    """Load each batch's table, stream its steps (None: an idle cycle) back to back, check every output.
    Returns the steps checked."""
    config = TileConfig(array=array, spm_rows=16 * array, acc_rows=16 * array)
    unit = VectorUnit(config, np.zeros((config.spm_rows, array), np.int8), np.zeros((config.acc_rows, array), np.int32))
    for table, steps in batches:
        unit.table[:] = table
        for step in steps:
            if step is not None:
                step.run_model(unit)
    dut = VectorLanes(array)
    checked = 0

    async def bench(ctx) -> None:
        nonlocal checked
        for table, steps in batches:
            ctx.set(dut.table_we, 1)
            for index in range(TABLE_ENTRIES):
                ctx.set(dut.table_index, index)
                ctx.set(dut.table_data, int(table[index]))
                await ctx.tick()
            ctx.set(dut.table_we, 0)
            flight: list[Step | None] = []
            for cycle in range(len(steps) + LANES_LATENCY):
                step = steps[cycle] if cycle < len(steps) else None
                ctx.set(dut.valid, step is not None)
                if step is not None:
                    ctx.set(dut.vop, step.vop)
                    ctx.set(dut.shift, step.shift)
                    ctx.set(dut.imm, step.imm)
                    ctx.set(dut.imm2, step.imm2)
                    ctx.set(dut.d_acc, step.d_acc)
                    ctx.set(dut.a.as_value(), _lanes(step.a))
                    ctx.set(dut.b.as_value(), _lanes(step.b))
                flight.append(step)
                await ctx.tick()
                done = flight[-LANES_LATENCY] if len(flight) >= LANES_LATENCY else None
                assert ctx.get(dut.out_valid) == (done is not None), f"cycle {cycle}"
                if done is not None:
                    out = _unpack(ctx.get(dut.out.as_value()), array)
                    counts = (ctx.get(dut.hits), ctx.get(dut.underflows), ctx.get(dut.overflows))
                    done.check(out, counts)
                    checked += 1

    simulate(dut, bench)
    return checked


def test_every_vop_and_d_acc_back_to_back() -> None:
    """Random steps of every lane vop, both D types, shifts 0/1/max/random, changing vop every cycle, with idle
    cycles between some; then the same against a second table loaded over the first."""
    rng = np.random.default_rng(11)
    batches = []
    for _ in range(2):
        steps: list[Step | None] = []
        for _ in range(1000):
            if rng.random() < 0.1:
                steps.append(None)
                continue
            vop = LANE_VOPS[int(rng.integers(len(LANE_VOPS)))]
            steps.append(Step(rng, 4, vop, bool(rng.integers(2))))
        batches.append((random_table_entries(rng), steps))
    covered = {(s.vop, s.d_acc) for _, steps in batches for s in steps if s is not None}
    assert covered == {(op, d) for op in LANE_VOPS for d in (False, True)}
    assert _run(4, batches) == sum(s is not None for _, steps in batches for s in steps)


@pytest.mark.parametrize("shift", [0, 1, 8, 16])
def test_lut_outcomes_and_boundaries(shift: int) -> None:
    """LUT steps on a random table at one shift: hits, underflows and overflows counted per step, i = 0, 255, 256."""
    rng = np.random.default_rng(shift)
    steps = []
    for _ in range(60):
        step = Step(rng, 8, VectorOp.LUT, bool(rng.integers(2)))
        step.shift = shift
        step._lut_operands(rng)
        steps.append(step)
    table = rng.integers(-(1 << 15), 1 << 15, size=TABLE_ENTRIES).astype(np.int16)
    assert _run(8, [(table, steps)]) == len(steps)
    totals = np.sum([s.counts for s in steps], axis=0)
    assert all(totals > 0), f"every outcome occurs: {totals}"


def test_lanes_refuse_a_bad_array() -> None:
    with pytest.raises(ValueError, match=r"^Vector lanes must be an integer from 1 to 16, not 0$"):
        VectorLanes(0)
