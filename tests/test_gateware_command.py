# amaranth: UnusedElaboratable=no
"""The command processor's parts (``dx1_bringup.gateware.command``), each alone on Amaranth's simulator.

The whole processor is exercised through the SoC by the conformance, fuzz, watchdog and replay suites; here
each part's own contract is pinned: the ring's doorbell checks, the error latch's priority, the fetch burst,
the decoder's field checks and footprints, the hazard tracker, dispatch, the semaphore request, the
completion writer and the watchdog.
"""

from __future__ import annotations

import re

import pytest
from amaranth_run import simulate

from dx1_bringup.gateware.command import DECODE_STAGES, DMA_SLOTS, TILE_SLOTS
from dx1_bringup.gateware.command.completion import CompletionWriter
from dx1_bringup.gateware.command.decode import CommandDecoder, FootprintDecoder, Route
from dx1_bringup.gateware.command.dispatch import Dispatcher
from dx1_bringup.gateware.command.fetch import CommandFetch
from dx1_bringup.gateware.command.hazards import HazardTracker, InFlightSlots
from dx1_bringup.gateware.command.ring import ErrorLatch, RingPointers
from dx1_bringup.gateware.command.semaphores import SemaphoreRequest
from dx1_bringup.gateware.command.watchdog import Watchdog
from dx1_bringup.spec import ErrorCode, Opcode, SocConfig, pack_command, unpack_completion

pytestmark = pytest.mark.amaranth_sim

CONFIG = SocConfig()



def _word(opcode: Opcode, **fields) -> int:
    return int.from_bytes(pack_command(opcode, **fields), "little")


@pytest.mark.parametrize(("build", "message"), [
    (lambda: ErrorLatch(0), "Error latch reports must be a positive integer, not 0"),
    (lambda: InFlightSlots(True), "In-flight slot depth must be a positive integer, not True"),
    (lambda: SemaphoreRequest(0), "Semaphore count must be a positive integer, not 0"),
], ids=["latch_0", "slots_bool", "sems_0"])
def test_part_constructor_errors(build, message: str) -> None:
    """Bad parameters of the parts raise ValueError with the exact message."""
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        build()


def test_decoder_refuses_a_config_that_is_not_a_soc_config() -> None:
    with pytest.raises(TypeError, match=r"^Command decoder config must be a SocConfig, not 'x'$"):
        CommandDecoder("x")


# --- ring pointers and the error latch ---------------------------------------------------------------------------


def test_ring_doorbell_moves_tail_and_refuses_bad_doorbells() -> None:
    """A doorbell moves TAIL; one past the ring, one overtaking HEAD and one with RING_LOG2 0 report their codes
    with the doorbell's index and leave TAIL alone."""
    dut = RingPointers()

    async def bench(ctx) -> None:
        ctx.set(dut.ring_log2, 3)
        assert ctx.get(dut.mask) == 7 and ctx.get(dut.entries_ok) == 1
        ctx.set(dut.doorbell, 1)
        ctx.set(dut.doorbell_index, 5)
        assert ctx.get(dut.error.valid) == 0
        await ctx.tick()
        assert ctx.get(dut.tail) == 5
        for index, log2, code in ((9, 3, ErrorCode.DOORBELL_RANGE), (2, 3, ErrorCode.RING_OVERFLOW),
                                  (6, 0, ErrorCode.BAD_FIELD)):
            ctx.set(dut.ring_log2, log2)
            ctx.set(dut.doorbell_index, index)
            assert (ctx.get(dut.error.valid), ctx.get(dut.error.code), ctx.get(dut.error.index)) == (1, code, index)
            await ctx.tick()
            assert ctx.get(dut.tail) == 5
        ctx.set(dut.doorbell, 0)
        assert ctx.get(dut.error.valid) == 0

    simulate(dut, bench)


def test_ring_advance_wraps_head_and_flips_phase_and_reset_empties() -> None:
    """HEAD advances modulo the ring size, the phase flips at the wrap, and ring_reset returns HEAD, TAIL, phase
    to 0, 0, 1."""
    dut = RingPointers()

    async def bench(ctx) -> None:
        ctx.set(dut.ring_log2, 1)
        assert ctx.get(dut.phase) == 1
        ctx.set(dut.advance, 1)
        await ctx.tick()
        assert (ctx.get(dut.head), ctx.get(dut.phase)) == (1, 1)
        await ctx.tick()
        assert (ctx.get(dut.head), ctx.get(dut.phase)) == (0, 0)
        await ctx.tick()
        ctx.set(dut.advance, 0)
        ctx.set(dut.doorbell, 1)
        ctx.set(dut.doorbell_index, 0)
        await ctx.tick()
        ctx.set(dut.doorbell, 0)
        assert (ctx.get(dut.head), ctx.get(dut.tail), ctx.get(dut.phase)) == (1, 0, 0)
        ctx.set(dut.ring_reset, 1)
        await ctx.tick()
        assert (ctx.get(dut.head), ctx.get(dut.tail), ctx.get(dut.phase)) == (0, 0, 1)

    simulate(dut, bench)


def test_error_latch_halts_keeps_the_latest_report_and_resumes() -> None:
    """Any report halts the queue and pulses irq_error; of two in one cycle the later report's code and index
    are kept; resume clears halted but not the code."""
    dut = ErrorLatch(2)

    async def bench(ctx) -> None:
        ctx.set(dut.report0.valid, 1)
        ctx.set(dut.report0.code, ErrorCode.BUS_ERROR)
        ctx.set(dut.report0.index, 3)
        ctx.set(dut.report1.valid, 1)
        ctx.set(dut.report1.code, ErrorCode.TIMEOUT)
        ctx.set(dut.report1.index, 7)
        assert ctx.get(dut.irq_error) == 1
        await ctx.tick()
        ctx.set(dut.report1.valid, 0)
        assert (ctx.get(dut.halted), ctx.get(dut.code), ctx.get(dut.index)) == (1, ErrorCode.TIMEOUT, 7)
        await ctx.tick()
        assert (ctx.get(dut.code), ctx.get(dut.index)) == (ErrorCode.BUS_ERROR, 3)
        ctx.set(dut.report0.valid, 0)
        assert ctx.get(dut.irq_error) == 0
        ctx.set(dut.resume, 1)
        await ctx.tick()
        assert (ctx.get(dut.halted), ctx.get(dut.code)) == (0, ErrorCode.BUS_ERROR)

    simulate(dut, bench)


# --- fetch ----------------------------------------------------------------------------------------------------


async def _serve_command(ctx, bus, word: int, *, bad_beat: int | None = None) -> int:
    """Answer one 4-beat read burst with ``word``; returns the burst's address."""
    ctx.set(bus.arready, 1)
    while not ctx.get(bus.arvalid):
        await ctx.tick()
    addr = ctx.get(bus.araddr)
    assert (ctx.get(bus.arlen), ctx.get(bus.arsize)) == (3, 3)
    await ctx.tick()
    ctx.set(bus.arready, 0)
    for beat in range(4):
        ctx.set(bus.rvalid, 1)
        ctx.set(bus.rdata, (word >> (64 * beat)) & ((1 << 64) - 1))
        ctx.set(bus.rresp, 2 if beat == bad_beat else 0)
        ctx.set(bus.rlast, beat == 3)
        assert ctx.get(bus.rready) == 1
        await ctx.tick()
    ctx.set(bus.rvalid, 0)
    return addr


def test_fetch_reads_the_command_at_head_and_holds_it_until_taken() -> None:
    """A start reads ring_base + 32*head with one 4-beat burst; the command, its index and phase are held until
    taken, and no second fetch starts while one is held."""
    dut = CommandFetch()
    word = _word(Opcode.GEMM, tag=0x1234, m=5, k_chunks=2, a_addr=1, b_addr=2, c_addr=3)

    async def bench(ctx) -> None:
        ctx.set(dut.ring_base, 0x1000)
        ctx.set(dut.head, 3)
        ctx.set(dut.ring_phase, 1)
        ctx.set(dut.start, 1)
        assert ctx.get(dut.idle) == 1
        assert await _serve_command(ctx, dut.bus, word) == 0x1000 + 32 * 3
        assert (ctx.get(dut.valid), ctx.get(dut.cmd), ctx.get(dut.index), ctx.get(dut.phase)) == (1, word, 3, 1)
        for _ in range(3):
            assert ctx.get(dut.bus.arvalid) == 0 and ctx.get(dut.idle) == 1
            await ctx.tick()
        ctx.set(dut.taken, 1)
        await ctx.tick()
        ctx.set(dut.taken, 0)
        assert ctx.get(dut.valid) == 0

    simulate(dut, bench)


def test_fetch_reports_a_bus_error_at_head_and_holds_nothing() -> None:
    """An error response on any beat reports BUS_ERROR at HEAD on the last beat, and no command is held."""
    dut = CommandFetch()

    async def bench(ctx) -> None:
        ctx.set(dut.head, 6)
        ctx.set(dut.start, 1)
        ctx.set(dut.bus.arready, 1)
        while not ctx.get(dut.bus.arvalid):
            await ctx.tick()
        await ctx.tick()
        seen = []
        for beat in range(4):
            ctx.set(dut.bus.rvalid, 1)
            ctx.set(dut.bus.rresp, 2 if beat == 1 else 0)
            ctx.set(dut.bus.rlast, beat == 3)
            seen.append((ctx.get(dut.error.valid), ctx.get(dut.fetched)))
            await ctx.tick()
        ctx.set(dut.start, 0)
        assert seen == [(0, 0), (0, 0), (0, 0), (1, 0)]
        assert (ctx.get(dut.error.code), ctx.get(dut.error.index)) == (ErrorCode.BUS_ERROR, 6)
        assert ctx.get(dut.valid) == 0

    simulate(dut, bench)


# --- decode ---------------------------------------------------------------------------------------------------


def _decode(commands: list[int], *, dma_limit: int = 1 << 20) -> list[tuple[int, int, dict[str, int], int]]:
    """Each command's (status, route, footprint, cycles until decoded)."""
    dut = CommandDecoder(CONFIG)
    results = []

    async def bench(ctx) -> None:
        ctx.set(dut.dma_limit, dma_limit)
        for word in commands:
            ctx.set(dut.cmd, word)
            ctx.set(dut.valid, 1)
            cycles = 0
            while not ctx.get(dut.decoded):
                await ctx.tick()
                cycles += 1
            fp = ctx.get(dut.footprint)
            footprint = {name: getattr(fp, name) for name in ("spm_r_lo", "spm_r_hi", "spm_w_lo", "spm_w_hi",
                                                               "acc_r_lo", "acc_r_hi", "acc_w_lo", "acc_w_hi")}
            results.append((ctx.get(dut.status), ctx.get(dut.route), footprint, cycles))
            ctx.set(dut.taken, 1)
            await ctx.tick()
            ctx.set(dut.taken, 0)

    simulate(dut, bench)
    return results


def test_decoder_refuses_bad_fields_with_the_spec_code_and_routes_them_local() -> None:
    """Each bad field is refused with its error code (the first failing in the spec's order) and routed LOCAL."""
    bad = [
        (_word(Opcode.LOAD, rows=0, cols=1), ErrorCode.BAD_DIMENSION),
        (_word(Opcode.LOAD, rows=1, cols=1, raw=1 << 255), ErrorCode.RESERVED_BITS),
        (_word(Opcode.LOAD, rows=2, cols=1, local_addr=CONFIG.tile.spm_rows - 1, local_row_stride=1),
         ErrorCode.SPM_RANGE),
        (_word(Opcode.STORE, flags={"acc": True}, rows=1, cols=1, local_addr=CONFIG.tile.acc_rows),
         ErrorCode.ACC_RANGE),
        (_word(Opcode.LOAD, rows=1, cols=1, mem_addr=4), ErrorCode.MISALIGNED),
        (_word(Opcode.STORE, rows=1, cols=1, mem_addr=0x800), ErrorCode.DMA_WINDOW),
        (_word(Opcode.COPY, length=0), ErrorCode.BAD_DIMENSION),
        (_word(Opcode.COPY, src_addr=0x7F8, dst_addr=0, length=16), ErrorCode.DMA_WINDOW),
        (_word(Opcode.WAIT, sem=0, count=0), ErrorCode.BAD_DIMENSION),
        (_word(Opcode.SIGNAL, sem=CONFIG.semaphores, count=1), ErrorCode.SEM_RANGE),
        (_word(Opcode.FENCE, raw=1 << 100), ErrorCode.RESERVED_BITS),
        (0x1F, ErrorCode.BAD_OPCODE),
    ]
    results = _decode([word for word, _ in bad], dma_limit=0x800)
    assert [(status, route) for status, route, _, _ in results] == [(code, Route.LOCAL) for _, code in bad]


def test_decoder_routes_good_commands_with_their_footprints_after_the_decode_steps() -> None:
    """Good commands are OK, go to their unit, carry the local rows they read and write, and are decoded
    DECODE_STAGES cycles after they arrive."""
    results = _decode([
        _word(Opcode.LOAD, rows=3, cols=2, local_addr=10, local_row_stride=4, local_col_stride=1, mem_addr=64),
        _word(Opcode.STORE, flags={"acc": True}, rows=2, cols=1, local_addr=5, local_row_stride=1, mem_addr=0),
        _word(Opcode.GEMM, m=4, k_chunks=2, a_addr=100, b_addr=20, c_addr=7),
        _word(Opcode.COPY, src_addr=0, dst_addr=64, length=64),
        _word(Opcode.WAIT, sem=1, count=2),
        _word(Opcode.VECTOR, vop=0, rows=1, cols=1),
    ])
    (load, store, gemm, copy, wait, vector) = results
    assert [r[:2] for r in results] == [(ErrorCode.OK, Route.DMA), (ErrorCode.OK, Route.DMA),
                                         (ErrorCode.OK, Route.TILE), (ErrorCode.OK, Route.DMA),
                                         (ErrorCode.OK, Route.LOCAL), (ErrorCode.OK, Route.TILE)]
    assert all(cycles == DECODE_STAGES for *_, cycles in results)
    # LOAD: rows 10 + r*4 + c, last row 10 + 2*4 + 1 = 19.
    assert (load[2]["spm_w_lo"], load[2]["spm_w_hi"], load[2]["spm_r_hi"], load[2]["acc_w_hi"]) == (10, 20, 0, 0)
    assert (store[2]["acc_r_lo"], store[2]["acc_r_hi"], store[2]["spm_w_hi"]) == (5, 7, 0)
    # GEMM: A rows [100, 108), B rows [20, 20 + 2*8), C rows [7, 11).
    assert (gemm[2]["spm_r_lo"], gemm[2]["spm_r_hi"], gemm[2]["acc_w_lo"], gemm[2]["acc_w_hi"]) == (20, 108, 7, 11)
    assert not any(copy[2].values()) and not any(wait[2].values())
    # A vector command: the tile's whole scratchpad and accumulator buffer, read and written.
    tile = CONFIG.tile
    assert vector[2] == {f"{mem}_{rw}_{end}": 0 if end == "lo" else size
                         for mem, size in (("spm", tile.spm_rows), ("acc", tile.acc_rows))
                         for rw in ("r", "w") for end in ("lo", "hi")}


def test_footprint_decoder_widens_a_postop_source_range_to_its_bias_row() -> None:
    """A POSTOP reads accumulator rows [src, src + rows) and, with bias on, the bias row too (the bounding
    range grows to include it); it writes scratchpad rows [dst, dst + rows).  Without bias the bias row
    does not count."""
    dut = FootprintDecoder(CONFIG.tile)
    seen = []

    async def bench(ctx) -> None:
        for bias in (True, False):
            ctx.set(dut.cmd, _word(Opcode.POSTOP, flags={"bias": bias}, src_addr=10, rows=4, dst_addr=30,
                                   bias_addr=20))
            ctx.set(dut.p_src_end, 14)
            fp = ctx.get(dut.footprint)
            seen.append((fp.acc_r_lo, fp.acc_r_hi, fp.spm_w_lo, fp.spm_w_hi, fp.acc_w_hi, fp.spm_r_hi))

    simulate(dut, bench, clocked=False)
    assert seen == [(10, 21, 30, 34, 0, 0), (10, 14, 30, 34, 0, 0)]


# --- hazards --------------------------------------------------------------------------------------------------


def _footprint(**ranges: int) -> dict[str, int]:
    fp = {f"{mem}_{rw}_{end}": 0 for mem in ("spm", "acc") for rw in ("r", "w") for end in ("lo", "hi")}
    fp.update(ranges)
    return fp


def test_hazard_tracker_blocks_a_command_that_reads_rows_the_dma_writes() -> None:
    """With a LOAD writing scratchpad rows [0, 8) in flight in the DMA, a GEMM reading rows [4, 12) has a tile
    hazard (a cycle later, registered) and one reading [8, 16) has none; the hazard clears when the LOAD's
    completion is taken.  Slots come back oldest first."""
    dut = HazardTracker()

    async def bench(ctx) -> None:
        for tag in (1, 2):
            ctx.set(dut.slot, {"ring_index": tag, "phase": 1, "tag": tag, "opcode": Opcode.LOAD,
                               "footprint": _footprint(spm_w_lo=8 * (tag - 1), spm_w_hi=8 * tag)})
            ctx.set(dut.dma_push, 1)
            await ctx.tick()
        ctx.set(dut.dma_push, 0)
        assert (ctx.get(dut.dma_count), ctx.get(dut.dma_oldest).tag) == (2, 1)
        ctx.set(dut.footprint, _footprint(spm_r_lo=4, spm_r_hi=12))
        await ctx.tick()
        assert (ctx.get(dut.tile_hazard), ctx.get(dut.dma_hazard)) == (1, 0)
        ctx.set(dut.dma_pop, 1)
        await ctx.tick()
        ctx.set(dut.dma_pop, 0)
        assert (ctx.get(dut.dma_count), ctx.get(dut.dma_oldest).tag) == (1, 2)
        await ctx.tick()
        assert ctx.get(dut.tile_hazard) == 1  # rows [8, 16) of the second LOAD
        ctx.set(dut.footprint, _footprint(spm_r_lo=16, spm_r_hi=24))
        await ctx.tick()
        assert ctx.get(dut.tile_hazard) == 0

    simulate(dut, bench)


def test_in_flight_slots_fill_to_their_depth_in_order() -> None:
    """A unit's slots hold up to their depth and give them back in push order, wrapping around."""
    dut = InFlightSlots(TILE_SLOTS)

    async def bench(ctx) -> None:
        popped = []
        for tag in range(TILE_SLOTS + 3):
            ctx.set(dut.slot, {"tag": tag})
            ctx.set(dut.push, 1)
            ctx.set(dut.pop, tag >= TILE_SLOTS - 1)
            if tag >= TILE_SLOTS - 1:
                popped.append(ctx.get(dut.oldest).tag)
            await ctx.tick()
            assert ctx.get(dut.count) == min(tag + 1, TILE_SLOTS - 1)
        assert popped == list(range(4))

    simulate(dut, bench)


# --- dispatch and semaphores ----------------------------------------------------------------------------------


def test_dispatcher_waits_for_hazards_free_slots_and_an_empty_pipeline() -> None:
    """A tile command waits on a hazard or full slots (stall high); a DMA command goes when the DMA is ready; a
    FENCE waits while anything is in flight; a refused command completes locally at once; nothing goes while
    halted."""
    dut = Dispatcher()

    async def bench(ctx) -> None:
        ctx.set(dut.decoded, 1)
        ctx.set(dut.route, Route.TILE)
        ctx.set(dut.tile_ready, 1)
        ctx.set(dut.tile_hazard, 1)
        assert (ctx.get(dut.tile_valid), ctx.get(dut.dispatched), ctx.get(dut.stall)) == (0, 0, 1)
        ctx.set(dut.tile_hazard, 0)
        ctx.set(dut.tile_count, TILE_SLOTS)
        assert ctx.get(dut.tile_valid) == 0
        ctx.set(dut.tile_count, TILE_SLOTS - 1)
        assert (ctx.get(dut.tile_valid), ctx.get(dut.tile_push), ctx.get(dut.dispatched)) == (1, 1, 1)
        assert ctx.get(dut.stall) == 0 and ctx.get(dut.local_push) == 0
        ctx.set(dut.route, Route.DMA)
        ctx.set(dut.dma_count, DMA_SLOTS - 1)
        assert (ctx.get(dut.dma_valid), ctx.get(dut.dispatched)) == (1, 0)
        ctx.set(dut.dma_ready, 1)
        assert (ctx.get(dut.dma_push), ctx.get(dut.dispatched)) == (1, 1)
        ctx.set(dut.route, Route.LOCAL)
        ctx.set(dut.opcode, Opcode.FENCE)
        ctx.set(dut.in_flight, 1)
        assert ctx.get(dut.dispatched) == 0
        ctx.set(dut.status, ErrorCode.RESERVED_BITS)
        assert (ctx.get(dut.dispatched), ctx.get(dut.local_push)) == (1, 1)
        ctx.set(dut.status, ErrorCode.OK)
        ctx.set(dut.in_flight, 0)
        assert (ctx.get(dut.dispatched), ctx.get(dut.local_push)) == (1, 1)
        ctx.set(dut.opcode, Opcode.WAIT)
        assert (ctx.get(dut.sem_wait), ctx.get(dut.dispatched)) == (1, 0)
        ctx.set(dut.sem_done, 1)
        assert ctx.get(dut.dispatched) == 1
        ctx.set(dut.halted, 1)
        assert (ctx.get(dut.sem_wait), ctx.get(dut.dispatched), ctx.get(dut.stall)) == (0, 0, 0)

    simulate(dut, bench, clocked=False)


def test_semaphore_wait_asks_only_once_the_value_is_enough() -> None:
    """A WAIT asks to subtract its count only once the semaphore holds at least that much; a SIGNAL asks to add
    at once; done follows the grant."""
    dut = SemaphoreRequest(4)

    async def bench(ctx) -> None:
        ctx.set(dut.sem, 2)
        ctx.set(dut.count, 3)
        ctx.set(dut.wait, 1)
        ctx.set(dut.sem_grant, 1)
        ctx.set(dut.sem_values, [9, 9, 2, 9])
        assert (ctx.get(dut.sem_valid), ctx.get(dut.done)) == (0, 0)
        ctx.set(dut.sem_values, [0, 0, 3, 0])
        assert (ctx.get(dut.sem_valid), ctx.get(dut.sem_index), ctx.get(dut.sem_delta), ctx.get(dut.done)) \
            == (1, 2, -3, 1)
        ctx.set(dut.wait, 0)
        ctx.set(dut.signal, 1)
        ctx.set(dut.sem_grant, 0)
        assert (ctx.get(dut.sem_valid), ctx.get(dut.sem_delta), ctx.get(dut.done)) == (1, 3, 0)

    simulate(dut, bench, clocked=False)


# --- completion writer ----------------------------------------------------------------------------------------


async def _take_write(ctx, bus, *, bresp: int = 0) -> tuple[int, int]:
    """Accept one single-beat write and answer it; returns (address, data)."""
    ctx.set(bus.awready, 1)
    ctx.set(bus.wready, 1)
    while not (ctx.get(bus.awvalid) and ctx.get(bus.wvalid)):
        await ctx.tick()
    addr, word = ctx.get(bus.awaddr), ctx.get(bus.wdata)
    assert (ctx.get(bus.awlen), ctx.get(bus.wstrb), ctx.get(bus.wlast)) == (0, 0xFF, 1)
    await ctx.tick()
    ctx.set(bus.awready, 0)
    ctx.set(bus.wready, 0)
    ctx.set(bus.bvalid, 1)
    ctx.set(bus.bresp, bresp)
    assert ctx.get(bus.bready) == 1
    return addr, word


def test_completion_writer_writes_local_then_unit_completions() -> None:
    """A local completion is written at cq_base + 8*index with its status, phase and timestamp; a tile core
    completion takes its tag, status and opcode from the core, pops the tile slot and pulses irq_completion;
    a bus error response reports BUS_ERROR at the entry's index instead."""
    dut = CompletionWriter()

    async def bench(ctx) -> None:
        ctx.set(dut.cq_base, 0x2000)
        ctx.set(dut.timestamp, 1234)
        ctx.set(dut.local_slot, {"ring_index": 5, "phase": 1, "tag": 0xABCD, "opcode": Opcode.NOP})
        ctx.set(dut.local_status, ErrorCode.RESERVED_BITS)
        ctx.set(dut.local_push, 1)
        await ctx.tick()
        ctx.set(dut.local_push, 0)
        assert ctx.get(dut.local_valid) == 1
        addr, word = await _take_write(ctx, dut.bus)
        assert addr == 0x2000 + 8 * 5
        assert unpack_completion(word) == {"tag": 0xABCD, "status": ErrorCode.RESERVED_BITS, "opcode": Opcode.NOP,
                                           "timestamp": 1234, "phase": 1}
        assert (ctx.get(dut.irq_completion), ctx.get(dut.trace_end), ctx.get(dut.error.valid)) == (1, 1, 0)
        await ctx.tick()
        ctx.set(dut.bus.bvalid, 0)
        assert ctx.get(dut.local_valid) == 0 and ctx.get(dut.idle) == 1

        ctx.set(dut.tile_pending, 1)
        ctx.set(dut.tile_oldest, {"ring_index": 2, "phase": 0, "tag": 7, "opcode": Opcode.GEMM})
        ctx.set(dut.tile_done.tdata, 0x77 | (ErrorCode.OK << 16) | (Opcode.GEMM << 24))
        ctx.set(dut.tile_done.tvalid, 1)
        assert (ctx.get(dut.tile_done.tready), ctx.get(dut.tile_pop)) == (1, 1)
        await ctx.tick()
        ctx.set(dut.tile_done.tvalid, 0)
        addr, word = await _take_write(ctx, dut.bus, bresp=2)
        assert addr == 0x2000 + 8 * 2 and unpack_completion(word)["tag"] == 0x77
        assert (ctx.get(dut.irq_completion), ctx.get(dut.error.valid), ctx.get(dut.error.code),
                ctx.get(dut.error.index)) == (0, 1, ErrorCode.BUS_ERROR, 2)

    simulate(dut, bench)


def test_completion_writer_flushes_with_timeout_and_ignores_units_while_aborting() -> None:
    """While aborting, unit completions are not taken; while flushing, the oldest DMA then tile command in
    flight is completed with TIMEOUT."""
    dut = CompletionWriter()

    async def bench(ctx) -> None:
        ctx.set(dut.aborting, 1)
        ctx.set(dut.dma_pending, 1)
        ctx.set(dut.tile_pending, 1)
        ctx.set(dut.dma_oldest, {"ring_index": 1, "tag": 11, "opcode": Opcode.LOAD})
        ctx.set(dut.tile_oldest, {"ring_index": 2, "tag": 22, "opcode": Opcode.GEMM})
        ctx.set(dut.dma_done.tvalid, 1)
        assert (ctx.get(dut.dma_done.tready), ctx.get(dut.dma_pop)) == (0, 0)
        ctx.set(dut.flushing, 1)
        assert (ctx.get(dut.dma_done.tready), ctx.get(dut.dma_pop), ctx.get(dut.tile_pop)) == (0, 1, 0)
        await ctx.tick()
        ctx.set(dut.dma_pending, 0)
        _, word = await _take_write(ctx, dut.bus)
        assert unpack_completion(word)["tag"] == 11 and unpack_completion(word)["status"] == ErrorCode.TIMEOUT
        await ctx.tick()
        ctx.set(dut.bus.bvalid, 0)
        assert ctx.get(dut.tile_pop) == 1

    simulate(dut, bench)


# --- watchdog -------------------------------------------------------------------------------------------------


def test_watchdog_fires_after_its_budget_at_the_oldest_command() -> None:
    """With a command in flight and no progress the watchdog fires after exactly ``budget`` idle cycles,
    reporting TIMEOUT at the command furthest behind HEAD; progress restarts the count; abort_req holds until
    abort_done, and flushing ends once nothing is in flight and the writer is idle."""
    dut = Watchdog()
    budget = 5

    async def bench(ctx) -> None:
        ctx.set(dut.budget, budget)
        ctx.set(dut.mask, 7)
        ctx.set(dut.head, 1)  # ring of 8: index 6 is 3 behind, index 0 is 1 behind
        ctx.set(dut.tile_count, 1)
        ctx.set(dut.tile_oldest, 0)
        ctx.set(dut.dma_count, 1)
        ctx.set(dut.dma_oldest, 6)
        ctx.set(dut.writer_idle, 1)
        for _ in range(3):
            await ctx.tick()
        ctx.set(dut.progress, 1)
        await ctx.tick()
        ctx.set(dut.progress, 0)
        fired_at = None
        for cycle in range(2 * budget):
            if ctx.get(dut.error.valid):
                fired_at = cycle
                break
            await ctx.tick()
        assert fired_at == budget
        assert (ctx.get(dut.error.code), ctx.get(dut.error.index)) == (ErrorCode.TIMEOUT, 6)
        await ctx.tick()
        assert (ctx.get(dut.aborting), ctx.get(dut.abort_req), ctx.get(dut.error.valid)) == (1, 1, 0)
        ctx.set(dut.abort_done, 1)
        await ctx.tick()
        ctx.set(dut.abort_done, 0)
        assert (ctx.get(dut.abort_req), ctx.get(dut.flushing)) == (0, 1)
        ctx.set(dut.tile_count, 0)
        ctx.set(dut.dma_count, 0)
        await ctx.tick()
        assert (ctx.get(dut.aborting), ctx.get(dut.flushing)) == (0, 0)

    simulate(dut, bench)


def test_watchdog_budget_zero_never_fires() -> None:
    """Budget 0 turns the watchdog off however long a command makes no progress."""
    dut = Watchdog()

    async def bench(ctx) -> None:
        ctx.set(dut.tile_count, 1)
        for _ in range(50):
            assert ctx.get(dut.error.valid) == 0
            await ctx.tick()

    simulate(dut, bench)
