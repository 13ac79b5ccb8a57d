"""The tile compute core against the golden model, bit for bit, under random idle and back-pressure."""

from __future__ import annotations

import cocotb
import numpy as np
import pytest

from dx1_bringup.model.tile import MAX_SHIFT, TileModel
from dx1_bringup.sim import run_cocotb_shared
from dx1_bringup.sim.harness import seed_note
from dx1_bringup.sim.stimulus import (
    BAD_KINDS,
    bad_command,
    random_gemm,
    random_int8,
    random_int32,
    random_stream,
)
from dx1_bringup.sim.tile_tb import TileTB
from dx1_bringup.sim.vector_stimulus import random_table, random_vector, random_vector_stream
from dx1_bringup.spec import ErrorCode, Opcode, VectorOp, pack_command

INT32_MIN, INT32_MAX = -(1 << 31), (1 << 31) - 1


def expected_completion(model: TileModel, cmd: bytes) -> dict[str, int]:
    status = model.execute(cmd)
    word = int.from_bytes(cmd, "little")
    return {"tag": word >> 16 & 0xFFFF, "status": int(status), "opcode": word & 0xFF}


async def setup(dut, *, backpressure: bool = True) -> tuple[TileTB, TileModel, np.random.Generator]:
    rng = np.random.default_rng(cocotb.RANDOM_SEED)
    tb = TileTB(dut, rng if backpressure else None)
    await tb.reset()
    model = TileModel(tb.config)
    model.spm[:] = random_int8(rng, model.spm.shape)
    model.acc[:] = random_int32(rng, model.acc.shape)
    await tb.write_spm(0, model.spm)
    await tb.write_acc(0, model.acc)
    return tb, model, rng


async def check_memories(tb: TileTB, model: TileModel) -> None:
    for name, read, expected in (("scratchpad", tb.read_spm, model.spm), ("accumulator", tb.read_acc, model.acc)):
        got = await read(0, len(expected))
        bad = np.argwhere(got != expected)
        assert not len(bad), (
            f"{name} differs from the golden model in {len(bad)} lanes ({seed_note()}); first at "
            f"row {bad[0][0]} lane {bad[0][1]}: RTL {got[tuple(bad[0])]}, model {expected[tuple(bad[0])]}")


async def run_and_check(tb: TileTB, model: TileModel, commands: list[bytes]) -> None:
    expected = [expected_completion(model, c) for c in commands]
    got = await tb.run(commands)
    assert got == expected, f"completions differ ({seed_note()}):\nRTL   {got}\nmodel {expected}"
    await check_memories(tb, model)


@cocotb.test()
async def random_commands(dut):
    """GEMMs, post-ops, NOPs and bad commands mixed, random idle and back-pressure on every stream."""
    tb, model, rng = await setup(dut)
    await run_and_check(tb, model, random_stream(rng, tb.config, 60))
    assert int(dut.perf_macs.value) == model.macs, "the MAC counter disagrees with the work done"


@cocotb.test()
async def back_to_back_gemms(dut):
    """Long GEMMs with no pauses anywhere: the weight banks must hand over without a gap or a clash."""
    tb, model, rng = await setup(dut, backpressure=False)
    n = tb.config.array
    commands = [
        pack_command(Opcode.GEMM, tag=t, flags={"accumulate": t % 2 == 1}, a_addr=64 * t,
                     b_addr=tb.config.spm_rows // 2 + 8 * n * t, c_addr=32 * t, m=m, k_chunks=k)
        for t, (m, k) in enumerate([(3 * n, 3), (1, 2), (2, 4), (4 * n, 2), (n, 1), (5, 3)])
    ]
    await run_and_check(tb, model, commands)


@cocotb.test()
async def postop_extremes(dut):
    """Every corner of the post-op: int32 saturation of the bias add, ReLU, shifts 0/1/47, multiplier 0/1/max."""
    tb, model, rng = await setup(dut)
    edges = np.array([INT32_MIN, INT32_MIN + 1, -(1 << 20) - 1, -3, -2, -1, 0, 1, 2, 3, 1 << 20, INT32_MAX - 1,
                      INT32_MAX], dtype=np.int64)
    n = tb.config.array
    rows = np.resize(edges, (len(edges) * n,)).reshape(-1, n)
    rows = np.concatenate([rows, np.roll(rows, 1, axis=1)]).astype(np.int32)
    bias = np.resize(np.array([INT32_MAX, INT32_MIN, -1, 1, 0], dtype=np.int32), (n,))
    model.acc[:len(rows)] = rows
    model.acc[len(rows)] = bias
    await tb.write_acc(0, model.acc[:len(rows) + 1])
    # One batch per ReLU/bias setting, each checked before the next can overwrite its rows.
    for relu in (False, True):
        for use_bias in (False, True):
            commands = []
            for shift in (0, 1, 2, 17, MAX_SHIFT):
                for mult in (0, 1, 3, 65535):
                    commands.append(pack_command(
                        Opcode.POSTOP, tag=len(commands), flags={"relu": relu, "bias": use_bias},
                        src_addr=0, dst_addr=len(commands) * len(rows), rows=len(rows), bias_addr=len(rows),
                        mult=mult, shift=shift))
            await run_and_check(tb, model, commands)


@cocotb.test()
async def errors_then_good(dut):
    """Each error kind completes with its own code, changes nothing, and the next GEMM is still right."""
    tb, model, rng = await setup(dut)
    commands, codes = [], []
    for kind in BAD_KINDS:
        cmd, code = bad_command(rng, tb.config, len(commands), kind)
        commands += [cmd, random_gemm(rng, tb.config, len(commands) + 1)]
        codes += [code, ErrorCode.OK]
    expected = [expected_completion(model, c) for c in commands]
    assert [e["status"] for e in expected] == codes, "the golden model gives the wrong error codes"
    got = await tb.run(commands)
    assert got == expected, f"completions differ ({seed_note()}):\nRTL   {got}\nmodel {expected}"
    await check_memories(tb, model)


@cocotb.test()
async def vector_directed(dut):
    """Every vop with every operand memory (A, B, D in either), then TABLE and LUTs, flat out."""
    tb, model, rng = await setup(dut, backpressure=False)
    commands = []
    for vop in VectorOp:
        if vop == VectorOp.LUT:
            commands.append(random_table(rng, tb.config, len(commands)))
        for bits in range(8):
            flags = {"a_acc": bool(bits & 1), "b_acc": bool(bits & 2), "d_acc": bool(bits & 4)}
            commands.append(random_vector(rng, tb.config, len(commands), vop=vop, flags=flags))
    await run_and_check(tb, model, commands)
    unit = model.vector
    assert (int(dut.perf_table_hits.value), int(dut.perf_table_underflows.value),
            int(dut.perf_table_overflows.value)) == (unit.hits, unit.underflows, unit.overflows)


@cocotb.test()
async def vector_random(dut):
    """Vector commands (good and bad), GEMMs and post-ops mixed, random idle and back-pressure on every stream."""
    tb, model, rng = await setup(dut)
    await run_and_check(tb, model, random_vector_stream(rng, tb.config, 80))


@pytest.mark.parametrize("module", ["dx1_tile_core_a4", "dx1_tile_core_a8"])
@pytest.mark.parametrize("testcase", ["random_commands", "back_to_back_gemms", "postop_extremes",
                                      "errors_then_good", "vector_directed", "vector_random"])
def test_tile_core(module, testcase, seed, cocotb_batch):
    run_cocotb_shared(module, "tile.test_tile_core", testcase, batch=cocotb_batch, seed=seed, quiet=True)
