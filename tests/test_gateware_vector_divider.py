# amaranth: UnusedElaboratable=no
"""The vector unit's lane divider (``gateware/vector/divider.py``) on Amaranth's simulator: RECIP at every shift
and ISQRT, on random and edge lanes, each operation against the golden model running it as a one-row command."""

from __future__ import annotations

import numpy as np
import pytest
from amaranth_run import simulate

from dx1_bringup.gateware.vector.divider import DIVIDER_STEPS, LaneDivider
from dx1_bringup.model.vector import VectorUnit, check_vector_command
from dx1_bringup.spec import (
    VECTOR_MAX_SHIFT,
    ErrorCode,
    Opcode,
    TileConfig,
    VectorOp,
    pack_command,
    signed32,
    unpack_command,
)

pytestmark = pytest.mark.amaranth_sim

ARRAY = 8
EDGES = [-(1 << 31), -1, 0, 1, 2, 3, 4, 127, 128, (1 << 16) - 1, 1 << 16, (1 << 16) + 1, 46340 ** 2,
         46340 ** 2 - 1, 46340 ** 2 + 1, (1 << 31) - 1, (1 << 30), (1 << 30) + 1]


def _lanes(rng: np.random.Generator, vop: VectorOp, shift: int) -> list[int]:
    """Edges, random int32, small values, values near 2**shift / 2**31 (RECIP's saturation) and squares +- 1."""
    out = []
    for _ in range(ARRAY):
        kind = int(rng.integers(0, 5))
        if kind == 0:
            out.append(int(rng.choice(EDGES)))
        elif kind == 1:
            out.append(int(rng.integers(-(1 << 31), 1 << 31)))
        elif kind == 2:
            out.append(int(rng.integers(-5, 1000)))
        elif vop == VectorOp.RECIP:
            edge = max(1, 1 << max(shift - 31, 0))
            out.append(min(edge + int(rng.integers(-2, 3)), (1 << 31) - 1))
        else:
            root = int(rng.integers(0, 46341))
            out.append(min(max(root * root + int(rng.integers(-1, 2)), -1), (1 << 31) - 1))
    return out


def _model(unit: VectorUnit, vop: VectorOp, shift: int, d_acc: bool, a: list[int]) -> list[int]:
    unit.acc[0] = a
    fields = {"shift": shift} if vop == VectorOp.RECIP else {}
    command = pack_command(Opcode.VECTOR, vop=int(vop), rows=1, cols=1, a_addr=0, d_addr=1,
                           flags={"a_acc": True, "d_acc": d_acc}, **fields)
    _, f = unpack_command(command)
    assert check_vector_command(int.from_bytes(command, "little"), f, unit.config) == ErrorCode.OK
    unit.execute(command)
    return [int(x) for x in (unit.acc[1] if d_acc else unit.spm[1])]


def test_recip_and_isqrt_against_the_model() -> None:
    """RECIP at every shift 0..47 (several lane sets each) and ISQRT, both D types, operations back to back and
    with gaps; done pulses DIVIDER_STEPS cycles after start, busy in between, out holds; a start while busy is
    ignored."""
    rng = np.random.default_rng(5)
    config = TileConfig(array=ARRAY, spm_rows=64, acc_rows=64)
    unit = VectorUnit(config, np.zeros((64, ARRAY), np.int8), np.zeros((64, ARRAY), np.int32))
    ops = [(VectorOp.RECIP, shift) for shift in range(VECTOR_MAX_SHIFT + 1) for _ in range(4)]
    ops += [(VectorOp.ISQRT, 0)] * 120
    order = rng.permutation(len(ops))
    cases = []
    for i in order:
        vop, shift = ops[i]
        d_acc = bool(rng.integers(2))
        a = _lanes(rng, vop, shift)
        cases.append((vop, shift, d_acc, a, _model(unit, vop, shift, d_acc, a)))
    dut = LaneDivider(ARRAY)

    async def bench(ctx) -> None:
        for vop, shift, d_acc, a, expect in cases:
            ctx.set(dut.start, 1)
            ctx.set(dut.vop, vop)
            ctx.set(dut.shift, shift)
            ctx.set(dut.d_acc, d_acc)
            ctx.set(dut.a.as_value(), sum((v & 0xFFFF_FFFF) << (32 * i) for i, v in enumerate(a)))
            await ctx.tick()
            # A second start while busy, with other operands: ignored.
            ctx.set(dut.vop, VectorOp.ISQRT if vop == VectorOp.RECIP else VectorOp.RECIP)
            ctx.set(dut.a.as_value(), 0)
            for cycle in range(1, DIVIDER_STEPS):
                assert (ctx.get(dut.busy), ctx.get(dut.done)) == (1, 0), f"cycle {cycle}"
                await ctx.tick()
                ctx.set(dut.start, 0)
            assert (ctx.get(dut.busy), ctx.get(dut.done)) == (0, 1)
            out = ctx.get(dut.out.as_value())
            lanes = [signed32(out >> (32 * i)) for i in range(ARRAY)]
            assert lanes == expect, f"{vop.name} shift={shift} d_acc={d_acc} a={a}"
            for _ in range(int(rng.integers(0, 3))):
                await ctx.tick()
                assert ctx.get(dut.done) == 0 and ctx.get(dut.out.as_value()) == out, "out holds"

    simulate(dut, bench)


def test_divider_refuses_a_bad_array() -> None:
    with pytest.raises(ValueError, match=r"^Lane divider lanes must be an integer from 1 to 16, not True$"):
        LaneDivider(True)
