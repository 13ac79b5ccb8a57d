# amaranth: UnusedElaboratable=no
"""The vector unit's row reducer (``gateware/vector/reduce.py``) on Amaranth's simulator: rows of random lengths,
back to back and with idle cycles, each checked against the golden model running it as a one-row RMAX, RSUM or
RSUMSQ command."""

from __future__ import annotations

import numpy as np
import pytest
from amaranth_run import simulate

from dx1_bringup.gateware.vector.reduce import REDUCE_LATENCY, RowReducer
from dx1_bringup.model.vector import VectorUnit, check_vector_command
from dx1_bringup.spec import ErrorCode, Opcode, TileConfig, VectorOp, pack_command, signed32, unpack_command

pytestmark = pytest.mark.amaranth_sim

REDUCE = (VectorOp.RMAX, VectorOp.RSUM, VectorOp.RSUMSQ)
EDGES = [-(1 << 31), (1 << 31) - 1, -128, 127, -129, 128, 0, 1, -1]


def _row(rng: np.random.Generator, array: int, cols: int) -> np.ndarray:
    """A row's A operand: ``cols`` local rows of int32 lanes; all large, all small or all at the edges."""
    kind = int(rng.integers(0, 4))
    if kind == 0:
        return rng.integers(-(1 << 31), 1 << 31, size=(cols, array))
    if kind == 1:
        return rng.integers(-20, 20, size=(cols, array))
    if kind == 2:
        return rng.choice(np.array(EDGES), size=(cols, array))
    return np.full((cols, array), int(rng.choice(EDGES)))


def _model(unit: VectorUnit, vop: VectorOp, d_acc: bool, a: np.ndarray) -> list[int]:
    cols = a.shape[0]
    unit.acc[:cols] = a
    command = pack_command(Opcode.VECTOR, vop=int(vop), rows=1, cols=cols, a_addr=0, d_addr=cols,
                           flags={"a_acc": True, "d_acc": d_acc})
    _, f = unpack_command(command)
    assert check_vector_command(int.from_bytes(command, "little"), f, unit.config) == ErrorCode.OK
    unit.execute(command)
    return [int(x) for x in (unit.acc[cols] if d_acc else unit.spm[cols])]


def _pack(values) -> int:
    return sum((int(v) & 0xFFFF_FFFF) << (32 * i) for i, v in enumerate(values))


@pytest.mark.parametrize("array", [2, 8, 16])
def test_rows_against_the_model(array: int) -> None:
    """Every reduction and D type, rows of 1 to 6 steps back to back, some with idle cycles inside and between;
    ``out_valid`` pulses REDUCE_LATENCY cycles after each row's last step, and only then; ``out`` then holds."""
    rng = np.random.default_rng(array)
    config = TileConfig(array=array, spm_rows=64, acc_rows=64)
    unit = VectorUnit(config, np.zeros((64, array), np.int8), np.zeros((64, array), np.int32))
    rows = []
    for _ in range(120):
        vop, d_acc = REDUCE[int(rng.integers(3))], bool(rng.integers(2))
        a = _row(rng, array, int(rng.integers(1, 7)))
        rows.append((vop, d_acc, a, _model(unit, vop, d_acc, a)))
    assert {(vop, d) for vop, d, _, _ in rows} == {(vop, d) for vop in REDUCE for d in (False, True)}
    # The cycle-by-cycle inputs: (vop, d_acc, first, last, terms, expected on the last step) or None for idle.
    cycles = []
    for vop, d_acc, a, expect in rows:
        terms = a if vop != VectorOp.RSUMSQ else [[signed32(int(x) * int(x)) for x in step] for step in a]
        for i, step in enumerate(terms):
            while rng.random() < 0.2:
                cycles.append(None)
            last = i == len(terms) - 1
            cycles.append((vop, d_acc, i == 0, last, step, expect if last else None))
    cycles += [None] * REDUCE_LATENCY
    dut = RowReducer(array)

    async def bench(ctx) -> None:
        held = None
        seen = 0
        for cycle, step in enumerate(cycles):
            ctx.set(dut.valid, step is not None)
            if step is not None:
                vop, d_acc, first, last, terms, _ = step
                ctx.set(dut.vop, vop)
                ctx.set(dut.d_acc, d_acc)
                ctx.set(dut.first, first)
                ctx.set(dut.last, last)
                ctx.set(dut.terms.as_value(), _pack(terms))
            await ctx.tick()
            done = cycles[cycle + 1 - REDUCE_LATENCY] if cycle + 1 >= REDUCE_LATENCY else None
            expect = done[5] if done is not None else None
            assert ctx.get(dut.out_valid) == (expect is not None), f"cycle {cycle}"
            out = ctx.get(dut.out.as_value())
            lanes = [signed32(out >> (32 * i)) for i in range(array)]
            if expect is not None:
                assert lanes == expect, f"{done[0].name} d_acc={done[1]}"
                held = lanes
                seen += 1
            elif held is not None:
                assert lanes == held, "out holds until the next row's statistic"
        assert seen == len(rows)

    simulate(dut, bench)


def test_reducer_refuses_a_bad_array() -> None:
    with pytest.raises(ValueError, match=r"^Row reducer lanes must be an integer from 1 to 16, not 17$"):
        RowReducer(17)
