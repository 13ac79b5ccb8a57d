# amaranth: UnusedElaboratable=no
"""The tile core's parts, each alone on Amaranth's simulator: the command decoder and issue, the completions, the
weight banks, the weight loader, the activation streamer, the result writer, the post-op sequencer and the
outside's memory ports.

The whole core is checked against the golden model by tests/test_gateware.py and the cocotb testbench in
``testbenches/tile``; these tests pin each part's own contract.
"""

from __future__ import annotations

import numpy as np
import pytest
from amaranth_run import simulate

from dx1_bringup.gateware.tile.banks import WeightBanks
from dx1_bringup.gateware.tile.completions import DONE_DEPTH, Completions
from dx1_bringup.gateware.tile.decode import DECODE_STAGES, CommandDecoder
from dx1_bringup.gateware.tile.issue import CommandIssue
from dx1_bringup.gateware.tile.loader import WeightLoader
from dx1_bringup.gateware.tile.ports import READ_QUEUE_DEPTH, ReadServer, WriteServer
from dx1_bringup.gateware.tile.postops import PostOpSequencer
from dx1_bringup.gateware.tile.results import ResultWriter
from dx1_bringup.gateware.tile.streamer import ActivationStreamer
from dx1_bringup.model.tile import check_command, requantize
from dx1_bringup.sim.vector_stimulus import random_vector_word
from dx1_bringup.spec import ErrorCode, Opcode, PostOpParams, TileConfig, pack_command, unpack_command

pytestmark = pytest.mark.amaranth_sim

CFG = TileConfig(array=2, spm_rows=64, acc_rows=32)
N = CFG.array



def _word(command: bytes) -> int:
    return int.from_bytes(command, "little")


def _lanes(values: list[int], bits: int) -> int:
    return sum((v & ((1 << bits) - 1)) << (bits * i) for i, v in enumerate(values))


# --- decode and issue ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("command", "status"), [
    (pack_command(Opcode.NOP, tag=7), ErrorCode.OK),
    (pack_command(Opcode.GEMM, a_addr=0, b_addr=61, c_addr=0, m=4, k_chunks=2), ErrorCode.SPM_RANGE),
    (pack_command(Opcode.GEMM, a_addr=0, b_addr=0, c_addr=30, m=4, k_chunks=1), ErrorCode.ACC_RANGE),
    (pack_command(Opcode.GEMM, a_addr=0, b_addr=0, c_addr=0, m=0, k_chunks=1), ErrorCode.BAD_DIMENSION),
    (pack_command(Opcode.POSTOP, src_addr=0, dst_addr=0, rows=2, shift=48, mult=1), ErrorCode.BAD_FIELD),
    (pack_command(Opcode.POSTOP, src_addr=0, dst_addr=0, rows=2, bias_addr=32, mult=1, flags={"bias": True}),
     ErrorCode.ACC_RANGE),
    (pack_command(Opcode.NOP, raw=1 << 200), ErrorCode.RESERVED_BITS),
    ((0xEE).to_bytes(32, "little"), ErrorCode.BAD_OPCODE),
], ids=["nop", "spm_range", "acc_range", "dimension", "shift", "bias_range", "reserved", "opcode"])
def test_decoder_checks_a_held_command(command: bytes, status: ErrorCode) -> None:
    """A command is held (tready low) and, DECODE_STAGES cycles after it was taken, decoded with the spec's status;
    it stays until taken, and then the next one is accepted."""
    dut = CommandDecoder(CFG)

    async def bench(ctx) -> None:
        ctx.set(dut.cmd.tdata, _word(command))
        ctx.set(dut.cmd.tvalid, 1)
        assert ctx.get(dut.cmd.tready) == 1
        await ctx.tick()
        ctx.set(dut.cmd.tvalid, 0)
        for _ in range(DECODE_STAGES):
            assert ctx.get(dut.cmd.tready) == 0 and ctx.get(dut.decoded) == 0 and ctx.get(dut.holding) == 1
            await ctx.tick()
        assert ctx.get(dut.decoded) == 1 and ctx.get(dut.status) == status
        assert ctx.get(dut.command) == _word(command)
        await ctx.tick().repeat(3)
        assert ctx.get(dut.decoded) == 1, "the command waits until it is taken"
        ctx.set(dut.take, 1)
        await ctx.tick()
        ctx.set(dut.take, 0)
        assert ctx.get(dut.holding) == 0 and ctx.get(dut.cmd.tready) == 1

    simulate(dut, bench)


def test_issue_keeps_completions_in_order() -> None:
    """A GEMM is pushed when both queues have room; a NOP behind it waits until the GEMM is done; a POSTOP waits
    for GEMMs in flight, and a GEMM for a running post-op; nothing goes without a credit."""
    dut = CommandIssue()
    gemm = _word(pack_command(Opcode.GEMM, tag=1, m=1, k_chunks=1))
    nop = _word(pack_command(Opcode.NOP, tag=2))
    post = _word(pack_command(Opcode.POSTOP, tag=3, rows=1))

    async def bench(ctx) -> None:
        ctx.set(dut.decoded, 1)
        ctx.set(dut.credit, 1)
        ctx.set(dut.command, gemm)
        assert ctx.get(dut.take) == 0, "no room in the GEMM queues"
        ctx.set(dut.queues_ready, 1)
        assert (ctx.get(dut.take), ctx.get(dut.gemm), ctx.get(dut.done.valid)) == (1, 1, 0)
        await ctx.tick()
        for command in (nop, post):
            ctx.set(dut.command, command)
            assert ctx.get(dut.take) == 0, "a GEMM is in flight"
        ctx.set(dut.gemm_done, 1)
        await ctx.tick()
        ctx.set(dut.gemm_done, 0)
        ctx.set(dut.command, nop)
        assert (ctx.get(dut.take), ctx.get(dut.done.valid), ctx.get(dut.done.tag)) == (1, 1, 2)
        assert ctx.get(dut.done.opcode) == Opcode.NOP and ctx.get(dut.done.status) == ErrorCode.OK
        ctx.set(dut.command, post)
        assert (ctx.get(dut.take), ctx.get(dut.postop)) == (1, 1)
        ctx.set(dut.postop_busy, 1)
        ctx.set(dut.command, gemm)
        assert ctx.get(dut.take) == 0, "a post-op is running"
        ctx.set(dut.postop_busy, 0)
        ctx.set(dut.command, nop)
        ctx.set(dut.status, ErrorCode.BAD_OPCODE)
        assert ctx.get(dut.done.status) == ErrorCode.BAD_OPCODE
        ctx.set(dut.credit, 0)
        assert ctx.get(dut.take) == 0, "no credit"

    simulate(dut, bench)


@pytest.mark.parametrize("opcode", [Opcode.VECTOR, Opcode.TABLE, Opcode.TRANSPOSE])
def test_issue_runs_a_vector_command_alone(opcode: Opcode) -> None:
    """A vector command waits for GEMMs in flight and a running post-op; while it runs nothing else goes."""
    dut = CommandIssue()
    vector = _word(pack_command(opcode, tag=4))
    others = [_word(pack_command(Opcode.GEMM, tag=1, m=1, k_chunks=1)), _word(pack_command(Opcode.NOP, tag=2)),
              _word(pack_command(Opcode.POSTOP, tag=3, rows=1)), vector]

    async def bench(ctx) -> None:
        ctx.set(dut.decoded, 1)
        ctx.set(dut.credit, 1)
        ctx.set(dut.queues_ready, 1)
        ctx.set(dut.command, others[0])
        await ctx.tick()
        ctx.set(dut.command, vector)
        assert ctx.get(dut.take) == 0, "a GEMM is in flight"
        ctx.set(dut.gemm_done, 1)
        await ctx.tick()
        ctx.set(dut.gemm_done, 0)
        ctx.set(dut.postop_busy, 1)
        assert ctx.get(dut.take) == 0, "a post-op is running"
        ctx.set(dut.postop_busy, 0)
        assert (ctx.get(dut.take), ctx.get(dut.vector), ctx.get(dut.done.valid)) == (1, 1, 0)
        await ctx.tick()
        ctx.set(dut.vector_busy, 1)
        for command in others:
            ctx.set(dut.command, command)
            assert ctx.get(dut.take) == 0, "the vector unit is running"
        ctx.set(dut.vector_busy, 0)
        ctx.set(dut.command, others[0])
        assert (ctx.get(dut.take), ctx.get(dut.gemm), ctx.get(dut.vector)) == (1, 1, 0)

    simulate(dut, bench)


def test_completions_in_order_with_credits() -> None:
    """Entries come out in the order written; credit falls once DONE_DEPTH completions are promised and rises when
    one is popped; if two writers write in one cycle the later (post-op) wins."""
    dut = Completions()

    async def bench(ctx) -> None:
        for i in range(DONE_DEPTH):
            assert ctx.get(dut.credit) == 1
            ctx.set(dut.reserve, 1)
            writer = (dut.issue, dut.gemm, dut.postop)[i % 3]
            ctx.set(writer.valid, 1)
            ctx.set(writer.tag, 100 + i)
            ctx.set(writer.opcode, i % 3)
            await ctx.tick()
            ctx.set(writer.valid, 0)
        ctx.set(dut.reserve, 0)
        assert ctx.get(dut.credit) == 0 and ctx.get(dut.pending) == 1
        tags = []
        ctx.set(dut.done.tready, 1)
        while ctx.get(dut.done.tvalid):
            tags.append(ctx.get(dut.done.tdata) & 0xFFFF)
            await ctx.tick()
            assert ctx.get(dut.credit) == 1
        assert tags == [100 + i for i in range(DONE_DEPTH)] and ctx.get(dut.pending) == 0
        for writer, tag in ((dut.gemm, 1), (dut.postop, 2)):
            ctx.set(writer.valid, 1)
            ctx.set(writer.tag, tag)
        await ctx.tick()
        await ctx.tick()
        assert ctx.get(dut.done.tdata) & 0xFFFF == 2 and ctx.get(dut.done.tvalid) == 1

    simulate(dut, bench)


# --- GEMM pipeline ------------------------------------------------------------------------------------------------


def test_weight_bank_goes_round_and_drains() -> None:
    """A bank goes EMPTY -> LOADING -> FULL -> STREAMING -> DRAINING and is empty again 2n+1 cycles after its last
    row went in; the other bank is untouched; a stream start and end in one cycle leave it draining."""
    dut = WeightBanks(N)

    async def pulse(ctx, *settings) -> None:
        for sig, value in settings:
            ctx.set(sig, value)
        await ctx.tick()
        for sig, _ in settings:
            ctx.set(sig, 0)

    async def bench(ctx) -> None:
        assert (ctx.get(dut.empty), ctx.get(dut.full)) == (0b11, 0b00)
        await pulse(ctx, (dut.load_start, 1), (dut.load_bank, 1))
        assert (ctx.get(dut.empty), ctx.get(dut.full)) == (0b01, 0b00)
        await pulse(ctx, (dut.loaded, 1), (dut.loaded_bank, 1))
        assert ctx.get(dut.full) == 0b10
        await pulse(ctx, (dut.stream_start, 1), (dut.stream_end, 1), (dut.stream_bank, 1))
        cycles = 0
        while not ctx.get(dut.empty) & 0b10:
            assert ctx.get(dut.full) == 0 and ctx.get(dut.empty) == 0b01
            await ctx.tick()
            cycles += 1
        assert cycles == 2 * N + 1

    simulate(dut, bench)


def test_weight_loader_reads_rows_last_first_into_free_banks() -> None:
    """A 2-chunk job from b_addr 10 waits for an empty bank, then reads rows 11, 10 into bank 0 and 13, 12 into
    bank 1 (each row on the weight port a cycle later), reporting LOADING at the first row and FULL at the last."""
    dut = WeightLoader(CFG)
    rows = {a: [a, -a] for a in range(64)}
    seen = []

    async def bench(ctx) -> None:
        ctx.set(dut.job.b_addr, 10)
        ctx.set(dut.job.k_chunks, 2)
        assert ctx.get(dut.room) == 1
        ctx.set(dut.push, 1)
        await ctx.tick()
        ctx.set(dut.push, 0)
        await ctx.tick().repeat(3)
        assert ctx.get(dut.issue) == 0, "no bank is empty"
        ctx.set(dut.bank_empty, 0b11)
        addr = None
        for _ in range(12):
            if addr is not None:
                ctx.set(dut.spm_data, _lanes(rows[addr], 8))
            if ctx.get(dut.w_load):
                seen.append(("row", ctx.get(dut.w_bank), ctx.get(dut.w_row), ctx.get(dut.loaded)))
            if ctx.get(dut.load_start):
                seen.append(("loading", ctx.get(dut.load_bank)))
            addr = ctx.get(dut.spm_addr) if ctx.get(dut.issue) else None
            await ctx.tick()

    simulate(dut, bench)
    assert seen == [("loading", 0), ("row", 0, _lanes(rows[11], 8), 0), ("row", 0, _lanes(rows[10], 8), 1),
                    ("loading", 1), ("row", 1, _lanes(rows[13], 8), 0), ("row", 1, _lanes(rows[12], 8), 1)]


def test_activation_streamer_streams_each_chunk_through_its_bank() -> None:
    """A job of m=3 rows from a_addr 5, 2 chunks, c_addr 20 streams rows 5, 6, 7 through bank 0, then the next
    chunk's rows 8, 9, 10 through bank 1 once it is full, both to accumulator rows 20..22, accumulate off then on,
    last on the final row; it stalls while the bank is not full.  Each row enters the array two cycles after its
    address went to the scratchpad: one for the read, one for the register in front of the array; its bank is
    named a cycle before the row (``next_bank``)."""
    dut = ActivationStreamer(CFG)
    seen = []
    stalls = 0
    read_at, entered_at = {}, {}

    async def bench(ctx) -> None:
        nonlocal stalls
        for name, value in (("a_addr", 5), ("c_addr", 20), ("m", 3), ("k_chunks", 2), ("tag", 9)):
            ctx.set(getattr(dut.job, name), value)
        ctx.set(dut.push, 1)
        await ctx.tick()
        ctx.set(dut.push, 0)
        addr = bank = None
        for cycle in range(20):
            ctx.set(dut.bank_full, 0b01 if cycle < 8 else 0b11)
            if addr is not None:
                ctx.set(dut.spm_data, addr)
            if ctx.get(dut.a_valid):
                seen.append((ctx.get(dut.a), bank, ctx.get(dut.ctl.acc_addr),
                             ctx.get(dut.ctl.accumulate), ctx.get(dut.ctl.last), ctx.get(dut.ctl.tag)))
                entered_at[ctx.get(dut.a)] = cycle
            stalls += ctx.get(dut.stalled)
            addr, bank = ctx.get(dut.spm_addr), ctx.get(dut.next_bank)
            if addr:
                read_at[addr] = cycle
            await ctx.tick()

    simulate(dut, bench)
    assert seen == [(5, 0, 20, 0, 0, 9), (6, 0, 21, 0, 0, 9), (7, 0, 22, 0, 0, 9),
                    (8, 1, 20, 1, 0, 9), (9, 1, 21, 1, 0, 9), (10, 1, 22, 1, 1, 9)]
    # the job starts the cycle after the push has reached the queue and streams 3 rows, then waits for bank 1
    assert stalls == 8 - 1 - 3, "stalled exactly while waiting for bank 1"
    assert {row: entered_at[row] - read_at[row] for row in entered_at} == {row: 2 for row in range(5, 11)}


def test_result_writer_adds_or_replaces_and_completes() -> None:
    """A row with accumulate adds to the accumulator row it read (wrapping at 32 bits), one without replaces it;
    each is written the cycle after it came out; the last row completes its GEMM with its tag."""
    dut = ResultWriter(CFG)
    acc = {3: [5, 0xFFFF_FFFF], 4: [7, 7]}
    written, done = [], []

    async def bench(ctx) -> None:
        rows = [(3, 1, 0, [1, 2]), (4, 0, 1, [-1, 10])]
        addr = None
        for cycle in range(5):
            if cycle < len(rows):
                a, accumulate, last, lanes = rows[cycle]
                ctx.set(dut.out_valid, 1)
                ctx.set(dut.out, [v & 0xFFFF_FFFF for v in lanes])
                ctx.set(dut.out_ctl.acc_addr, a)
                ctx.set(dut.out_ctl.accumulate, accumulate)
                ctx.set(dut.out_ctl.last, last)
                ctx.set(dut.out_ctl.tag, 40 + cycle)
            else:
                ctx.set(dut.out_valid, 0)
            if addr is not None:
                ctx.set(dut.acc_data, _lanes(acc.get(addr, [0, 0]), 32))
            if ctx.get(dut.writing):
                written.append((ctx.get(dut.w_addr), ctx.get(dut.w_data)))
            if ctx.get(dut.done.valid):
                done.append((ctx.get(dut.done.tag), ctx.get(dut.done.opcode)))
            addr = ctx.get(dut.acc_addr)
            await ctx.tick()

    simulate(dut, bench)
    assert written == [(3, _lanes([6, 1], 32)), (4, _lanes([-1, 10], 32))]
    assert done == [(41, Opcode.GEMM)]


def test_postop_sequencer_requantises_rows_with_bias() -> None:
    """A POSTOP of 3 rows from accumulator row 4 to scratchpad row 9 with a bias row reads the bias, then the rows
    in order, and writes golden-model requantised rows to 9, 10, 11, then completes; busy meanwhile."""
    dut = PostOpSequencer(CFG)
    rng = np.random.default_rng(3)
    acc = {a: rng.integers(-2**20, 2**20, size=N).tolist() for a in range(32)}
    params = PostOpParams(mult=300, shift=9, relu=True)
    command = pack_command(Opcode.POSTOP, tag=77, src_addr=4, dst_addr=9, rows=3, bias_addr=30, mult=params.mult,
                           shift=params.shift, flags={"bias": True, "relu": True})
    reads, written, done = [], [], []

    async def bench(ctx) -> None:
        ctx.set(dut.command, _word(command))
        ctx.set(dut.start, 1)
        addr = None
        for _ in range(16):
            if addr is not None:
                ctx.set(dut.acc_data, _lanes(acc[addr], 32))
            addr = None
            if ctx.get(dut.acc_use) and (ctx.get(dut.start) or ctx.get(dut.acc_addr)):
                addr = ctx.get(dut.acc_addr)
                reads.append(addr)
            if ctx.get(dut.writing):
                out = ctx.get(dut.spm_data)
                written.append((ctx.get(dut.spm_addr), [((out >> (8 * i)) & 0xFF) for i in range(N)]))
            if ctx.get(dut.done.valid):
                done.append(ctx.get(dut.done.tag))
            await ctx.tick()
            ctx.set(dut.start, 0)
        assert ctx.get(dut.busy) == 0

    simulate(dut, bench)
    bias = np.array(acc[30], dtype=np.int32)
    expected = [(9 + i, [v & 0xFF for v in requantize(np.array(acc[4 + i], dtype=np.int32), bias, params).tolist()])
                for i in range(3)]
    assert reads == [30, 4, 5, 6] and written == expected and done == [77]


# --- the outside's memory ports -----------------------------------------------------------------------------------


def test_write_server_writes_only_when_granted() -> None:
    """A write word is held off (tready low, nothing written) while the pipeline has the port, then written."""
    dut = WriteServer(16)

    async def bench(ctx) -> None:
        ctx.set(dut.req.tvalid, 1)
        ctx.set(dut.req.tdata, 0x0005_ABCD)
        assert (ctx.get(dut.req.tready), ctx.get(dut.en), ctx.get(dut.addr), ctx.get(dut.data)) == (0, 0, 0, 0)
        ctx.set(dut.grant, 1)
        assert (ctx.get(dut.req.tready), ctx.get(dut.en), ctx.get(dut.addr), ctx.get(dut.data)) == (1, 1, 5, 0xABCD)

    simulate(dut, bench, clocked=False)


def test_read_server_answers_in_order_under_back_pressure() -> None:
    """Ten reads with the grant and the response's tready toggling are answered in order, none lost or doubled,
    and never more than READ_QUEUE_DEPTH outstanding."""
    dut = ReadServer(16)
    rng = np.random.default_rng(1)
    answers = []

    async def bench(ctx) -> None:
        want = list(range(10, 20))
        addr = None
        for _ in range(200):
            if addr is not None:
                ctx.set(dut.data, addr * 3)
            ctx.set(dut.grant, int(rng.random() < 0.6))
            ctx.set(dut.resp.tready, int(rng.random() < 0.4))
            ctx.set(dut.req.tvalid, int(bool(want)))
            ctx.set(dut.req.tdata, want[0] if want else 0)
            addr = None
            if want and ctx.get(dut.req.tready):
                addr = ctx.get(dut.addr)
                want.pop(0)
            if ctx.get(dut.resp.tvalid) and ctx.get(dut.resp.tready):
                answers.append(ctx.get(dut.resp.tdata))
            await ctx.tick()

    simulate(dut, bench)
    assert answers == [a * 3 for a in range(10, 20)]
    assert READ_QUEUE_DEPTH == 4


@pytest.mark.parametrize("config", [TileConfig(array=2, spm_rows=512, acc_rows=32),
                                    TileConfig(array=4, spm_rows=1024, acc_rows=256)], ids=["a2", "a4"])
def test_decoder_checks_vector_commands_as_the_model(config: TileConfig) -> None:
    """VECTOR, TABLE and TRANSPOSE commands, good and broken in every way, get the golden model's status; without
    a vector unit they are BAD_OPCODE."""
    rng = np.random.default_rng(3)
    commands = [random_vector_word(rng, config, tag) for tag in range(300)]
    plain = TileConfig(array=config.array, spm_rows=config.spm_rows, acc_rows=config.acc_rows, vector=False)
    for cfg in (config, plain):
        dut = CommandDecoder(cfg)
        expected = [check_command(c, cfg) for c in commands]
        assert len(set(expected)) >= (6 if cfg.vector else 1), "the stimulus misses error kinds"

        async def bench(ctx, dut=dut, expected=expected) -> None:
            for command, status in zip(commands, expected, strict=True):
                ctx.set(dut.cmd.tdata, _word(command))
                ctx.set(dut.cmd.tvalid, 1)
                await ctx.tick()
                ctx.set(dut.cmd.tvalid, 0)
                await ctx.tick().repeat(DECODE_STAGES)
                assert ctx.get(dut.decoded) == 1
                assert ctx.get(dut.status) == status, f"{unpack_command(command)[1]}: model says {status!r}"
                ctx.set(dut.take, 1)
                await ctx.tick()
                ctx.set(dut.take, 0)

        simulate(dut, bench)
