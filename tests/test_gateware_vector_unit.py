# amaranth: UnusedElaboratable=no
"""The vector unit's control parts, each alone on Amaranth's simulator: the hazard queue, the VECTOR step
sequencer, the TABLE loader and the TRANSPOSE sequencer (the lanes, reducer, divider and transpose buffer have
their own tests)."""

from __future__ import annotations

import numpy as np
import pytest
from amaranth_run import simulate

from dx1_bringup.gateware.vector.sequencer import HazardQueue, VectorSequencer
from dx1_bringup.gateware.vector.table_loader import TableLoader
from dx1_bringup.gateware.vector.transposer import TransposeSequencer
from dx1_bringup.sim.vector_stimulus import random_vector
from dx1_bringup.spec import (
    TABLE_ENTRIES,
    VECTOR_OPS,
    Opcode,
    TileConfig,
    VectorOp,
    pack_command,
    table_rows,
    unpack_command,
)

pytestmark = pytest.mark.amaranth_sim

CFG = TileConfig(array=4, spm_rows=256, acc_rows=64)


def _word(command: bytes) -> int:
    return int.from_bytes(command, "little")


def test_hazard_queue_finds_rows_until_they_are_popped() -> None:
    """Rows pushed are found (by memory and address) until popped, oldest first, and room runs out at depth."""
    dut = HazardQueue(3)

    async def bench(ctx) -> None:
        assert ctx.get(dut.empty) == 1 and ctx.get(dut.room) == 1
        for acc, addr in ((0, 5), (1, 5), (0, 9)):
            ctx.set(dut.push, 1)
            ctx.set(dut.push_acc, acc)
            ctx.set(dut.push_addr, addr)
            await ctx.tick()
        ctx.set(dut.push, 0)
        assert ctx.get(dut.room) == 0 and ctx.get(dut.empty) == 0
        for probe, hit in (((0, 5), 1), ((1, 5), 1), ((1, 9), 0), ((0, 9), 1), ((0, 6), 0)):
            ctx.set(dut.a_acc, probe[0])
            ctx.set(dut.a_addr, probe[1])
            ctx.set(dut.b_acc, probe[0])
            ctx.set(dut.b_addr, probe[1])
            assert ctx.get(dut.a_hit) == hit and ctx.get(dut.b_hit) == hit, probe
        ctx.set(dut.a_acc, 0)
        ctx.set(dut.a_addr, 5)
        ctx.set(dut.pop, 1)
        assert ctx.get(dut.a_hit) == 1, "a row being written this cycle still counts"
        await ctx.tick()
        ctx.set(dut.pop, 0)
        assert ctx.get(dut.a_hit) == 0 and ctx.get(dut.room) == 1
        ctx.set(dut.pop, 1)
        ctx.set(dut.push, 1)
        ctx.set(dut.push_addr, 7)
        await ctx.tick()
        ctx.set(dut.pop, 0)
        ctx.set(dut.push, 0)
        ctx.set(dut.a_addr, 7)
        assert ctx.get(dut.a_hit) == 1 and ctx.get(dut.room) == 1

    simulate(dut, bench)


def expected_steps(f: dict[str, int]) -> list[tuple]:
    """The spec's steps of a VECTOR command: ((a_acc, A row), (b_acc, B row) or None, (d_acc, D row) or None)."""
    spec = VECTOR_OPS[VectorOp(f["vop"])]
    flags = {name: bool(f["flags"] >> bit & 1) for name, bit in (("a_acc", 0), ("b_acc", 1), ("d_acc", 2))}
    steps = []
    for r in range(f["rows"]):
        for c in range(f["cols"]):
            a = (flags["a_acc"], f["a_addr"] + r * f["a_row_stride"] + c)
            b = (flags["b_acc"], f["b_addr"] + r * f["b_row_stride"] + c * f["b_col_stride"]) if spec.uses_b else None
            if spec.kind == "reduce":
                d = (flags["d_acc"], f["d_addr"] + r * f["d_row_stride"]) if c == f["cols"] - 1 else None
            else:
                d = (flags["d_acc"], f["d_addr"] + r * f["d_row_stride"] + c)
            steps.append((a, b, d))
    return steps


def run_sequencer(command: bytes, latency: int, depth: int = 8) -> tuple[list[tuple], int]:
    """Run ``command`` against a pipeline that writes each step's D row ``latency`` cycles after its reads;
    return the steps seen and the cycles from start to the last write.  Asserts that no read of a row
    happens while a write to it is pending."""
    dut = VectorSequencer(depth)
    seen: list[tuple] = []
    cycles = [0]

    async def bench(ctx) -> None:
        ctx.set(dut.command, _word(command))
        ctx.set(dut.start, 1)
        await ctx.tick()
        ctx.set(dut.start, 0)
        pending: list[tuple[int, tuple]] = []  # (cycle of the write, row)
        reads: tuple | None = None
        for cycle in range(1, 5000):
            due = bool(pending) and pending[0][0] == cycle
            ctx.set(dut.written, due)
            if reads is not None:  # the step read last cycle is described now
                assert ctx.get(dut.step.valid) == 1
                writes = ctx.get(dut.step.last) or VECTOR_OPS[VectorOp(f["vop"])].kind != "reduce"
                d = (bool(ctx.get(dut.step.d_acc)), ctx.get(dut.step.d_addr)) if writes else None
                seen.append((*reads, d))
                if d is not None:
                    pending.append((cycle + latency, d))
            else:
                assert ctx.get(dut.step.valid) == 0
            reads = None
            if ctx.get(dut.a_read):
                a = (bool(ctx.get(dut.a_acc)), ctx.get(dut.a_addr))
                b = (bool(ctx.get(dut.b_acc)), ctx.get(dut.b_addr)) if ctx.get(dut.b_read) else None
                for _, row in pending:
                    assert row not in (a, b), f"step {len(seen)} reads {row} before its pending write"
                reads = (a, b)
            if due:
                pending.pop(0)
            if not ctx.get(dut.busy) and not pending and reads is None and cycle > 2:
                cycles[0] = cycle
                return
            await ctx.tick()
        raise AssertionError("the sequencer never finished")

    f = unpack_command(command)[1]
    simulate(dut, bench)
    return seen, cycles[0]


@pytest.mark.parametrize("stream", range(6))
def test_sequencer_walks_random_commands_in_the_spec_order(stream: int) -> None:
    """Random VECTOR commands (every vop, overlapping operands included): the steps' rows are the spec's, in its
    order, and no row is read while an earlier step's write to it is pending."""
    rng = np.random.default_rng(stream)
    for tag in range(6):
        command = random_vector(rng, CFG, tag)
        seen, _ = run_sequencer(command, latency=int(rng.integers(1, 7)))
        assert seen == expected_steps(unpack_command(command)[1])


def test_sequencer_runs_a_step_a_cycle_when_nothing_overlaps() -> None:
    """An elementwise command on distinct rows issues one step a cycle; RECIP's steps go one at a time."""
    fields = dict(vop=int(VectorOp.ADD), rows=3, cols=10, a_addr=0, a_row_stride=10, b_addr=40, b_row_stride=0,
                  b_col_stride=1, d_addr=100, d_row_stride=10)
    latency = 5
    _, cycles = run_sequencer(pack_command(Opcode.VECTOR, **fields), latency)
    assert cycles <= 30 + latency + 3
    recip = dict(vop=int(VectorOp.RECIP), rows=1, cols=4, a_addr=0, d_addr=100, shift=8)
    _, cycles = run_sequencer(pack_command(Opcode.VECTOR, **recip), latency)
    assert cycles >= 4 * latency


def test_sequencer_stalls_a_read_of_a_row_in_flight() -> None:
    """In place with a shifted destination (D(r, c) is A(r, c+1)): each step waits for the write before it."""
    fields = dict(vop=int(VectorOp.MOV), rows=1, cols=6, a_addr=10, d_addr=11)
    latency = 4
    seen, cycles = run_sequencer(pack_command(Opcode.VECTOR, **fields), latency)
    assert seen == expected_steps(unpack_command(pack_command(Opcode.VECTOR, **fields))[1])
    assert cycles >= 5 * latency, "every step but the first waited for its predecessor's write"


@pytest.mark.parametrize("array", [2, 4, 8])
def test_table_loader_feeds_an_entry_a_cycle(array: int) -> None:
    """The table's entries come from the scratchpad rows as the spec packs them, one a cycle after a cycle of
    priming, with done on the last; the rows are read on the port only while busy."""
    rng = np.random.default_rng(array)
    spm = rng.integers(-128, 128, size=(300, array)).astype(np.int8)
    src = 7
    dut = TableLoader(array)
    expected = np.ascontiguousarray(spm[src:src + table_rows(array)]).view("<i2").reshape(-1)[:TABLE_ENTRIES]
    got = {}

    async def bench(ctx) -> None:
        ctx.set(dut.src_addr, src)
        ctx.set(dut.start, 1)
        await ctx.tick()
        ctx.set(dut.start, 0)
        addr = None
        for _ in range(TABLE_ENTRIES + 1):
            row = spm[addr] if addr is not None else np.zeros(array, dtype=np.int8)
            ctx.set(dut.spm_data, int.from_bytes(row.tobytes(), "little"))
            assert ctx.get(dut.busy) == 1 and ctx.get(dut.spm_use) == 1
            if ctx.get(dut.table_we):
                index = ctx.get(dut.table_index)
                assert index not in got
                got[index] = ctx.get(dut.table_data) - (1 << 16 if ctx.get(dut.table_data) & 0x8000 else 0)
                assert ctx.get(dut.done) == (index == TABLE_ENTRIES - 1)
            addr = ctx.get(dut.spm_addr)
            await ctx.tick()
        assert ctx.get(dut.busy) == 0 and ctx.get(dut.spm_use) == 0

    simulate(dut, bench)
    assert [got[j] for j in range(TABLE_ENTRIES)] == expected.tolist()


@pytest.mark.parametrize("read_latency", [0, 1, 2])
def test_transpose_sequencer_moves_blocks_through_a_buffer(read_latency: int) -> None:
    """Against a scratchpad and a transpose buffer modelled here: overlapping blocks (each block's source is the
    previous one's destination) come out as the golden model's, in 2n + a few cycles a block."""
    n = 4
    rng = np.random.default_rng(read_latency)
    spm = rng.integers(-128, 128, size=(64, n)).astype(np.int8)
    command = pack_command(Opcode.TRANSPOSE, src_addr=3, dst_addr=5, blocks=3, src_stride=2, dst_stride=2)
    expected = spm.copy()
    f = unpack_command(command)[1]
    for b in range(f["blocks"]):
        s, d = f["src_addr"] + b * f["src_stride"], f["dst_addr"] + b * f["dst_stride"]
        expected[d:d + n] = expected[s:s + n].T.copy()
    dut = TransposeSequencer(n, read_latency)
    cycles = []

    async def bench(ctx) -> None:
        ctx.set(dut.command, _word(command))
        ctx.set(dut.start, 1)
        await ctx.tick()
        ctx.set(dut.start, 0)
        buffer: list[np.ndarray] = []
        columns: list[np.ndarray] = []  # asked for, not yet written
        asked = 0
        read_row = None
        for cycle in range(200):
            if ctx.get(dut.load):
                buffer = (buffer + [spm[read_row].copy()])[-n:]
            read_row = ctx.get(dut.spm_addr) if ctx.get(dut.spm_read) else None
            if ctx.get(dut.read):
                columns.append(np.array(buffer)[:, asked % n].copy())
                asked += 1
            if ctx.get(dut.w_en):
                spm[ctx.get(dut.w_addr)] = columns.pop(0)
                if ctx.get(dut.done):
                    cycles.append(cycle)
                    return
            await ctx.tick()
        raise AssertionError("the transpose never finished")

    simulate(dut, bench)
    assert (spm == expected).all(), np.argwhere(spm != expected)
    assert cycles[0] <= 3 * (2 * n + 2 + read_latency)
