# amaranth: UnusedElaboratable=no
"""The DMA's parts (``dx1_bringup.gateware.dma``), each alone on Amaranth's simulator.

The whole DMA is exercised by the cocotb DMA testbenches and through the SoC; here each part's own contract
is pinned: burst cutting at pages and lengths, the row walk, the read side's open-burst limit, the COPY
write side's wait for its data, and the LOAD and STORE paths' row assembly and splitting.
"""

from __future__ import annotations

import pytest
from amaranth_run import simulate

from dx1_bringup.gateware.axi import MAX_BURST
from dx1_bringup.gateware.dma import COPY_BURST, MAX_READS, Dma
from dx1_bringup.gateware.dma.burst import BurstGenerator
from dx1_bringup.gateware.dma.load import LoadEngine
from dx1_bringup.gateware.dma.read import ReadEngine
from dx1_bringup.gateware.dma.store import StoreEngine
from dx1_bringup.gateware.dma.walker import RowWalker
from dx1_bringup.gateware.dma.write import WriteEngine
from dx1_bringup.spec import Opcode, TileConfig, pack_command

pytestmark = pytest.mark.amaranth_sim

ARRAY = 8  # a scratchpad row is one 64-bit beat, an accumulator row four


async def _start(ctx, dut, **values) -> None:
    for name, value in values.items():
        ctx.set(getattr(dut, name), value)
    ctx.set(dut.start, 1)
    await ctx.tick()
    ctx.set(dut.start, 0)


def _bursts(base: int, stride: int | None, segments: int | None, seg_beats: int,
            max_beats: int) -> list[tuple[int, int]]:
    """The bursts of one job; without ``stride`` and ``segments``, of a generator built without segments."""
    segmented = segments is not None
    dut = BurstGenerator(32, segmented=segmented)
    bursts: list[tuple[int, int]] = []

    async def bench(ctx) -> None:
        ctx.set(dut.allow, 1)
        ctx.set(dut.ready, 1)
        ctx.set(dut.max_beats, max_beats)
        job = dict(stride=stride, segments=segments) if segmented else {}
        await _start(ctx, dut, base=base, seg_beats=seg_beats, **job)
        for _ in range(200):
            if ctx.get(dut.valid):
                bursts.append((ctx.get(dut.addr), ctx.get(dut.len) + 1))
            if not ctx.get(dut.active) and not ctx.get(dut.valid):
                return
            await ctx.tick()
        raise AssertionError("the generator never finished")

    simulate(dut, bench)
    return bursts


def test_burst_generator_cuts_at_pages_and_at_the_longest_burst() -> None:
    """600 beats from 64 bytes below a page: 8 beats to the page, then bursts of at most 256 beats."""
    assert _bursts(0x1000 - 64, 0, 1, 600, MAX_BURST) == [
        (0x0FC0, 8), (0x1000, 256), (0x1800, 256), (0x2000, 80)]


def test_burst_generator_without_segments_cuts_one_run_alike() -> None:
    """Built without segments (the link DMA's), a run of beats gives the same bursts as one segment."""
    assert _bursts(0x1000 - 64, None, None, 600, MAX_BURST) == _bursts(0x1000 - 64, 0, 1, 600, MAX_BURST)
    assert _bursts(0x100, None, None, 20, COPY_BURST) == [(0x100, 16), (0x180, 4)]
    assert "stride" not in BurstGenerator(32, segmented=False).signature.members


def test_burst_generator_walks_strided_segments_and_copy_bursts() -> None:
    """Two segments of 20 beats 4 KiB apart, in COPY bursts of at most 16 beats."""
    assert _bursts(0x100, 0x1000, 2, 20, COPY_BURST) == [
        (0x100, 16), (0x180, 4), (0x1100, 16), (0x1180, 4)]


def test_burst_generator_waits_for_allow_and_ready() -> None:
    """No burst is loaded while allow is low, and one burst is held while ready is low."""
    dut = BurstGenerator(32)

    async def bench(ctx) -> None:
        ctx.set(dut.max_beats, MAX_BURST)
        await _start(ctx, dut, base=0, segments=2, seg_beats=1, stride=8)
        for _ in range(3):
            assert (ctx.get(dut.issue), ctx.get(dut.valid)) == (0, 0)
            await ctx.tick()
        ctx.set(dut.allow, 1)
        await ctx.tick()
        for _ in range(3):
            assert (ctx.get(dut.valid), ctx.get(dut.addr), ctx.get(dut.issue)) == (1, 0, 0)
            await ctx.tick()
        ctx.set(dut.ready, 1)
        assert ctx.get(dut.issue) == 1
        await ctx.tick()
        assert (ctx.get(dut.valid), ctx.get(dut.addr), ctx.get(dut.active)) == (1, 8, 0)

    simulate(dut, bench)


def test_row_walker_visits_rows_then_columns() -> None:
    """2 rows of 3 columns from 5, row stride 10, column stride 2: 5 7 9 15 17 19, last on the sixth."""
    dut = RowWalker()

    async def bench(ctx) -> None:
        await _start(ctx, dut, local_addr=5, rows=2, cols=3, row_stride=10, col_stride=2)
        seen = []
        ctx.set(dut.advance, 1)
        for _ in range(6):
            seen.append((ctx.get(dut.addr), ctx.get(dut.last)))
            await ctx.tick()
        assert seen == [(5, 0), (7, 0), (9, 0), (15, 0), (17, 0), (19, 1)]

    simulate(dut, bench)


def test_read_engine_limits_open_bursts_and_counts_bytes() -> None:
    """Eight single-beat reads: before any is answered, MAX_READS bursts are open and one more waits in the
    address register (it was loaded while fewer were open); hold stops new ones; every beat counts 8 bytes
    and done rises once all are answered."""
    dut = ReadEngine()

    async def bench(ctx) -> None:
        ctx.set(dut.bus.arready, 1)
        await _start(ctx, dut, base=0, stride=8, segments=8, seg_beats=1)
        issued = 0
        for _ in range(12):
            issued += ctx.get(dut.bus.arvalid)
            await ctx.tick()
        assert issued == MAX_READS + 1 and ctx.get(dut.done) == 0 and ctx.get(dut.quiet) == 0
        ctx.set(dut.hold, 1)
        ctx.set(dut.take, 1)
        ctx.set(dut.bus.rvalid, 1)
        ctx.set(dut.bus.rlast, 1)
        for _ in range(MAX_READS + 1):
            assert ctx.get(dut.beat) == 1
            await ctx.tick()
        ctx.set(dut.bus.rvalid, 0)
        for _ in range(3):
            await ctx.tick()
        assert ctx.get(dut.bus.arvalid) == 0 and ctx.get(dut.quiet) == 1 and ctx.get(dut.done) == 0
        assert ctx.get(dut.bytes_read) == 8 * (MAX_READS + 1)
        ctx.set(dut.hold, 0)
        open_bursts = 0
        for _ in range(30):
            if ctx.get(dut.done):
                break
            ctx.set(dut.bus.rvalid, open_bursts > 0)
            open_bursts += ctx.get(dut.bus.arvalid) - ctx.get(dut.beat)
            await ctx.tick()
        assert ctx.get(dut.done) == 1 and ctx.get(dut.bytes_read) == 8 * 8

    simulate(dut, bench)


def test_write_engine_sends_a_copy_burst_only_once_its_data_is_in() -> None:
    """A 4-beat COPY burst's address waits until 4 beats are counted in; then its beats go out back to back,
    the one with a read error with null strobes (read_error pulses), and an error response pulses error."""
    dut = WriteEngine()

    async def bench(ctx) -> None:
        ctx.set(dut.is_copy, 1)
        ctx.set(dut.bus.awready, 1)
        await _start(ctx, dut, base=0x40, segments=1, seg_beats=4)
        for _beat in range(4):
            for _ in range(2):
                assert ctx.get(dut.bus.awvalid) == 0
                await ctx.tick()
            ctx.set(dut.copy_beat, 1)
            await ctx.tick()
            ctx.set(dut.copy_beat, 0)
        await ctx.tick()
        assert (ctx.get(dut.bus.awvalid), ctx.get(dut.bus.awaddr), ctx.get(dut.bus.awlen)) == (1, 0x40, 3)
        await ctx.tick()
        ctx.set(dut.fifo_ready, 1)
        ctx.set(dut.bus.wready, 1)
        sent = []
        while len(sent) < 4:
            ctx.set(dut.fifo_err, len(sent) == 2)
            ctx.set(dut.fifo_data, 0x100 + len(sent))
            if ctx.get(dut.bus.wvalid):
                assert ctx.get(dut.fifo_take) == 1 and ctx.get(dut.read_error) == (len(sent) == 2)
                sent.append((ctx.get(dut.bus.wdata), ctx.get(dut.bus.wstrb), ctx.get(dut.bus.wlast)))
            await ctx.tick()
        assert sent == [(0x100, 0xFF, 0), (0x101, 0xFF, 0), (0x102, 0, 0), (0x103, 0xFF, 1)]
        assert ctx.get(dut.bytes_written) == 3 * 8 and ctx.get(dut.done) == 0
        ctx.set(dut.bus.bvalid, 1)
        ctx.set(dut.bus.bresp, 2)
        assert ctx.get(dut.error) == 1
        await ctx.tick()
        ctx.set(dut.bus.bvalid, 0)
        assert ctx.get(dut.done) == 1 and ctx.get(dut.quiet) == 1

    simulate(dut, bench)


def test_load_engine_assembles_rows_and_drops_them_after_a_read_error() -> None:
    """Accumulator rows are four beats, low beat first, written at the walker's addresses; after a read error
    the rest of the rows are taken from the FIFO but not written."""
    dut = LoadEngine(ARRAY)

    async def bench(ctx) -> None:
        await _start(ctx, dut, local_addr=3, acc=1, rows=3, cols=1, row_stride=2)
        ctx.set(dut.run, 1)
        ctx.set(dut.fifo_ready, 1)
        ctx.set(dut.acc_wr.tready, 1)
        rows = []
        beat = 0
        for _ in range(40):
            if ctx.get(dut.acc_wr.tvalid):
                word = ctx.get(dut.acc_wr.tdata)
                rows.append((word >> (32 * ARRAY), word & ((1 << (32 * ARRAY)) - 1)))
            ctx.set(dut.fifo_data, beat)
            ctx.set(dut.fifo_err, beat == 9)
            if ctx.get(dut.fifo_take):
                if ctx.get(dut.read_error):
                    ctx.set(dut.rd_err, 1)
                beat += 1
            await ctx.tick()
        assert ctx.get(dut.spm_wr.tvalid) == 0
        row = lambda first: sum((first + i) << (64 * i) for i in range(4))  # noqa: E731
        assert rows == [(3, row(0)), (5, row(4))]
        assert beat == 12 and ctx.get(dut.done) == 1

    simulate(dut, bench)


def test_store_engine_requests_rows_and_splits_them_into_beats() -> None:
    """Read requests go out at the walker's addresses; an accumulator row answered comes out as four beats,
    low first, each only while the FIFO has room."""
    dut = StoreEngine(ARRAY)

    async def bench(ctx) -> None:
        ctx.set(dut.acc_rreq.tready, 1)
        ctx.set(dut.is_store, 1)
        await _start(ctx, dut, request=1, local_addr=10, acc=1, rows=1, cols=2, col_stride=3)
        requests = []
        for _ in range(4):
            if ctx.get(dut.acc_rreq.tvalid):
                requests.append(ctx.get(dut.acc_rreq.tdata))
            await ctx.tick()
        assert requests == [10, 13] and ctx.get(dut.spm_rreq.tvalid) == 0
        ctx.set(dut.acc_rresp.tdata, sum((0xA0 + i) << (64 * i) for i in range(4)))
        ctx.set(dut.acc_rresp.tvalid, 1)
        assert ctx.get(dut.acc_rresp.tready) == 1
        await ctx.tick()
        ctx.set(dut.acc_rresp.tvalid, 0)
        beats = []
        for cycle in range(10):
            ctx.set(dut.fifo_ready, cycle % 2)
            assert ctx.get(dut.push) == (cycle % 2 == 1 and len(beats) < 4)
            if ctx.get(dut.push):
                beats.append(ctx.get(dut.beat))
            await ctx.tick()
        assert beats == [0xA0, 0xA1, 0xA2, 0xA3]

    simulate(dut, bench)


def test_dma_takes_its_command_into_a_register_and_starts_from_it() -> None:
    """``cmd.tready`` is the command register's emptiness: high whatever ``tvalid`` is, low from the cycle
    after the handshake until the command starts (one cycle later, when the DMA is idle), so the command
    processor's dispatch reaches the engines only through that register; a second command is taken while
    the first runs and waits in the register until the first has completed."""
    dut = Dma(TileConfig(array=ARRAY))
    copy = int.from_bytes(pack_command(Opcode.COPY, src_addr=0, dst_addr=0x100, length=8), "little")

    async def bench(ctx) -> None:
        assert (ctx.get(dut.cmd.tready), ctx.get(dut.busy)) == (1, 0)
        ctx.set(dut.cmd.tdata, copy)
        ctx.set(dut.cmd.tvalid, 1)
        assert ctx.get(dut.cmd.tready) == 1
        await ctx.tick()
        assert (ctx.get(dut.cmd.tready), ctx.get(dut.busy)) == (0, 0)
        await ctx.tick()
        assert (ctx.get(dut.cmd.tready), ctx.get(dut.busy)) == (1, 1)
        await ctx.tick()  # the second command
        ctx.set(dut.cmd.tvalid, 0)
        for _ in range(5):
            assert (ctx.get(dut.cmd.tready), ctx.get(dut.busy)) == (0, 1)
            await ctx.tick()
        assert ctx.get(dut.axi.arvalid) == 1  # the first COPY's read, unanswered: the second waits

    simulate(dut, bench)
