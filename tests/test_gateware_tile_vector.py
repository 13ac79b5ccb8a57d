# amaranth: UnusedElaboratable=no
"""The tile core with its vector unit against the golden tile model, on Amaranth's simulator: every vop with
every operand memory, LUT after TABLE, TRANSPOSE, the refusals, and vector commands mixed with GEMMs and post-ops.

Each test fills the memories through the outside's write ports, runs a command stream, and reads both memories
back through the outside's read ports: the completions and every lane must be the model's.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from amaranth_run import simulate

from dx1_bringup.gateware import TileCore
from dx1_bringup.model.tile import TileModel
from dx1_bringup.sim.stimulus import random_int8, random_int32
from dx1_bringup.sim.vector_stimulus import (
    random_table,
    random_transpose,
    random_vector,
    random_vector_stream,
    random_vector_word,
)
from dx1_bringup.spec import Opcode, TileConfig, VectorOp, pack_command

pytestmark = pytest.mark.amaranth_sim

CFG = TileConfig(array=4, spm_rows=256, acc_rows=64)
N = CFG.array


def _row_word(lanes: np.ndarray, addr: int) -> int:
    data = np.ascontiguousarray(lanes).tobytes()
    return int.from_bytes(data, "little") | addr << (8 * len(data))


def run_core(model: TileModel, commands: list[bytes], config: TileConfig = CFG) -> dict:
    """Run ``commands`` on a TileCore whose memories start as ``model``'s, and on ``model``; return what the
    core did: its completions, memories, LUT counters and busy cycles."""
    dut = TileCore(config)
    expected_done = []
    start_spm, start_acc = model.spm.copy(), model.acc.copy()
    for c in commands:
        word = int.from_bytes(c, "little")
        expected_done.append((word >> 16 & 0xFFFF, int(model.execute(c)), word & 0xFF))
    got: dict = {}

    async def write_rows(ctx, port, rows) -> None:
        ctx.set(port.tvalid, 1)
        for i, lanes in enumerate(rows):
            ctx.set(port.tdata, _row_word(lanes, i))
            await ctx.tick()
        ctx.set(port.tvalid, 0)

    async def read_rows(ctx, req, resp, count: int, dtype) -> np.ndarray:
        out = []
        ctx.set(resp.tready, 1)
        sent = 0
        for _ in range(20 * count):
            ctx.set(req.tvalid, sent < count)
            ctx.set(req.tdata, sent)
            took = ctx.get(req.tvalid) and ctx.get(req.tready)
            if ctx.get(resp.tvalid):
                out.append(ctx.get(resp.tdata))
            await ctx.tick()
            sent += bool(took)
            if len(out) == count:
                break
        ctx.set(req.tvalid, 0)
        width = np.dtype(dtype).itemsize * config.array
        raw = b"".join(v.to_bytes(width, "little") for v in out)
        return np.frombuffer(raw, dtype=dtype).reshape(count, config.array)

    async def bench(ctx) -> None:
        await write_rows(ctx, dut.spm_wr, start_spm)
        await write_rows(ctx, dut.acc_wr, start_acc)
        ctx.set(dut.done.tready, 1)
        done = []
        pending = list(commands)
        cycles = 0
        while len(done) < len(commands):
            ctx.set(dut.cmd.tvalid, bool(pending))
            if pending:
                ctx.set(dut.cmd.tdata, int.from_bytes(pending[0], "little"))
            sent = pending and ctx.get(dut.cmd.tready)
            if ctx.get(dut.done.tvalid):
                word = ctx.get(dut.done.tdata)
                done.append((word & 0xFFFF, word >> 16 & 0xFF, word >> 24 & 0xFF))
            await ctx.tick()
            if sent:
                pending.pop(0)
            cycles += 1
            assert cycles < 20_000, f"the core stopped completing commands after {done}"
        ctx.set(dut.cmd.tvalid, 0)
        got["done"] = done
        got["cycles"] = cycles
        got["spm"] = await read_rows(ctx, dut.spm_rreq, dut.spm_rresp, config.spm_rows, np.int8)
        got["acc"] = await read_rows(ctx, dut.acc_rreq, dut.acc_rresp, config.acc_rows, np.int32)
        got["lut"] = (ctx.get(dut.perf_table_hits), ctx.get(dut.perf_table_underflows),
                      ctx.get(dut.perf_table_overflows))
        got["busy"] = ctx.get(dut.perf_vector_busy)

    simulate(dut, bench)
    assert got["done"] == expected_done, "completions differ from the golden model's"
    for name in ("spm", "acc"):
        bad = np.argwhere(got[name] != getattr(model, name))
        assert not len(bad), (f"{name} differs in {len(bad)} lanes; first at row {bad[0][0]} lane {bad[0][1]}: "
                              f"RTL {got[name][tuple(bad[0])]}, model {getattr(model, name)[tuple(bad[0])]}")
    unit = model.vector
    assert got["lut"] == (unit.hits, unit.underflows, unit.overflows)
    return got


def _model(seed: int, config: TileConfig = CFG) -> tuple[TileModel, np.random.Generator]:
    rng = np.random.default_rng(seed)
    model = TileModel(config)
    model.spm[:] = random_int8(rng, model.spm.shape)
    model.acc[:] = random_int32(rng, model.acc.shape)
    return model, rng


FLAG_SETS = [dict(zip(("a_acc", "b_acc", "d_acc"), bits, strict=True))
             for bits in itertools.product((False, True), repeat=3)]


@pytest.mark.parametrize("vop", [op for op in VectorOp if op != VectorOp.LUT], ids=lambda op: op.name)
def test_every_vop_with_every_operand_memory(vop: VectorOp) -> None:
    """Each vop, with A, B and D in either memory (every combination), random shapes, strides and overlaps."""
    model, rng = _model(int(vop))
    commands = [random_vector(rng, CFG, tag, vop=vop, flags=flags)
                for tag, flags in enumerate(FLAG_SETS * 2)]
    run_core(model, commands)


def test_lut_after_table() -> None:
    """TABLE loads the table from the scratchpad, then LUTs of every operand memory use it and count their lanes."""
    model, rng = _model(100)
    commands = []
    for tag in range(3):
        commands.append(random_table(rng, CFG, 10 * tag))
        commands += [random_vector(rng, CFG, 10 * tag + 1 + i, vop=VectorOp.LUT, flags=flags)
                     for i, flags in enumerate(FLAG_SETS[::2])]
    got = run_core(model, commands)
    assert sum(got["lut"]) > 0


def test_transpose_blocks() -> None:
    """TRANSPOSE of one and several blocks, overlapping and in place (src == dst)."""
    model, rng = _model(101)
    commands = [random_transpose(rng, CFG, tag) for tag in range(6)]
    commands.append(pack_command(Opcode.TRANSPOSE, tag=6, src_addr=8, dst_addr=8, blocks=2, src_stride=N,
                                 dst_stride=N))
    commands.append(pack_command(Opcode.TRANSPOSE, tag=7, src_addr=20, dst_addr=22, blocks=3, src_stride=2,
                                 dst_stride=2))
    run_core(model, commands)


def test_refusals_change_nothing() -> None:
    """Broken vector commands complete with the model's code and change nothing; good ones around them run."""
    model, rng = _model(102)
    commands = [random_vector_word(rng, CFG, tag) for tag in range(40)]
    run_core(model, commands)


@pytest.mark.parametrize("stream", range(2))
def test_vector_commands_among_gemms_and_postops(stream: int) -> None:
    """A random stream of vector commands, GEMMs and post-ops: each waits for what it depends on."""
    model, rng = _model(200 + stream)
    run_core(model, random_vector_stream(rng, CFG, 40))


def test_without_a_vector_unit_the_commands_are_bad_opcodes() -> None:
    plain = TileConfig(array=4, spm_rows=256, acc_rows=64, vector=False)
    model, rng = _model(103, plain)
    commands = [random_vector(rng, CFG, 0), random_table(rng, CFG, 1), random_transpose(rng, CFG, 2),
                pack_command(Opcode.NOP, tag=3)]
    got = run_core(model, commands, plain)
    assert [status for _, status, _ in got["done"]][:3] == [1, 1, 1]
