# amaranth: UnusedElaboratable=no
"""The SoC's own parts (``dx1_bringup.gateware.soc``), each alone on Amaranth's simulator: the PERF counters,
the trace FIFO writer and the semaphore arbiter.  The assembled SoC runs in the conformance, watchdog and
cocotb SoC suites."""

from __future__ import annotations

import pytest
from amaranth_run import simulate

from dx1_bringup.gateware.soc.perf import PerfCounters
from dx1_bringup.gateware.soc.semaphores import SemaphoreArbiter
from dx1_bringup.gateware.soc.trace import TraceWriter
from dx1_bringup.spec import ErrorCode, Opcode, register_map

pytestmark = pytest.mark.amaranth_sim

DATA_HI = register_map().block("TRACE0").reg("DATA_HI").register



def test_perf_counters_count_conditions_and_report_unit_counters_since_the_last_clear() -> None:
    """CYCLES counts every cycle, BUSY_LOAD the cycles a read burst is open, STALL_DEP the stalled cycles; a
    clear zeroes them and makes the units' counters read relative to their value then; reading MACS_LO
    latches the high word."""
    dut = PerfCounters()

    async def bench(ctx) -> None:
        ctx.set(dut.dma_arvalid, 1)
        ctx.set(dut.dma_arready, 1)
        await ctx.tick()
        ctx.set(dut.dma_arvalid, 0)
        ctx.set(dut.waiting_dep, 1)
        await ctx.tick().repeat(3)
        ctx.set(dut.waiting_dep, 0)
        ctx.set(dut.dma_rvalid, 1)
        ctx.set(dut.dma_rready, 1)
        ctx.set(dut.dma_rlast, 1)
        await ctx.tick()
        ctx.set(dut.dma_rvalid, 0)
        await ctx.tick()
        assert (ctx.get(dut.cycles), ctx.get(dut.busy_load), ctx.get(dut.stall_dep), ctx.get(dut.stall_mem)) \
            == (6, 5, 3, 3)  # reading from the address until the last beat; waiting while no beat came
        ctx.set(dut.bytes_read_source, 1000)
        ctx.set(dut.macs_source, (5 << 32) | 7)
        ctx.set(dut.clear, 1)
        await ctx.tick()
        ctx.set(dut.clear, 0)
        assert (ctx.get(dut.cycles), ctx.get(dut.busy_load), ctx.get(dut.bytes_read), ctx.get(dut.macs_lo)) \
            == (0, 0, 0, 0)
        ctx.set(dut.bytes_read_source, 1064)
        ctx.set(dut.macs_source, (7 << 32) | 9)
        assert (ctx.get(dut.bytes_read), ctx.get(dut.macs_lo), ctx.get(dut.macs_hi)) == (64, 2, 0)
        ctx.set(dut.macs_lo_read, 1)
        await ctx.tick()
        assert ctx.get(dut.macs_hi) == 2
        ctx.set(dut.macs_lo_read, 0)
        ctx.set(dut.reset_units, 1)
        await ctx.tick()
        assert ctx.get(dut.bytes_read) == 1064  # the unit's own counter restarts from 0: the reference too

    simulate(dut, bench)


def test_trace_writer_orders_a_start_and_an_end_of_one_cycle_and_clears() -> None:
    """A start and an end in one cycle are written start first, each with its timestamp and DATA_HI fields;
    disabled events are dropped; DATA_HI reads pop; clear empties the FIFO."""
    dut = TraceWriter(8, DATA_HI)

    async def bench(ctx) -> None:
        ctx.set(dut.enable, 1)
        ctx.set(dut.timestamp, 100)
        ctx.set(dut.start, 1)
        ctx.set(dut.start_tag, 0x11)
        ctx.set(dut.start_opcode, Opcode.GEMM)
        ctx.set(dut.end, 1)
        ctx.set(dut.end_tag, 0x22)
        ctx.set(dut.end_opcode, Opcode.LOAD)
        ctx.set(dut.end_status, ErrorCode.BUS_ERROR)
        await ctx.tick()
        ctx.set(dut.start, 0)
        ctx.set(dut.end, 0)
        await ctx.tick().repeat(4)
        assert ctx.get(dut.count) == 2
        events = []
        ctx.set(dut.pop, 1)
        for _ in range(2):
            events.append((ctx.get(dut.data_lo), ctx.get(dut.data_hi_word)))
            await ctx.tick()
        ctx.set(dut.pop, 0)
        assert events == [(100, 0x11 | (Opcode.GEMM << 24)),
                          (100, 0x22 | (ErrorCode.BUS_ERROR << 16) | (Opcode.LOAD << 24) | (1 << 31))]
        assert (ctx.get(dut.count), ctx.get(dut.data_lo), ctx.get(dut.data_hi_word)) == (0, 0, 0)
        ctx.set(dut.enable, 0)
        ctx.set(dut.start, 1)
        await ctx.tick()
        ctx.set(dut.enable, 1)
        await ctx.tick()
        ctx.set(dut.start, 0)
        await ctx.tick().repeat(3)
        assert ctx.get(dut.count) == 1  # only the enabled start
        ctx.set(dut.clear, 1)
        await ctx.tick()
        ctx.set(dut.clear, 0)
        await ctx.tick()
        assert ctx.get(dut.count) == 0

    simulate(dut, bench)


def test_semaphore_arbiter_grants_the_lowest_tile_and_adds_its_delta() -> None:
    """Of two tiles asking at once the lower one is granted; its semaphore gets value + delta (a negative
    delta subtracts), in the semaphore's width."""
    dut = SemaphoreArbiter(2, 4, 16)

    async def bench(ctx) -> None:
        ctx.set(dut.values, [0, 10, 0, 0xFFFF])
        assert ctx.get(dut.set) == 0  # no request: no semaphore is written
        ctx.set(dut.valid1, 1)
        ctx.set(dut.index1, 3)
        ctx.set(dut.delta1, 2)
        assert (ctx.get(dut.grant1), ctx.get(dut.set), ctx.get(dut.set_value)[3]) == (1, 0b1000, 1)
        ctx.set(dut.valid0, 1)
        ctx.set(dut.index0, 1)
        ctx.set(dut.delta0, -3)
        assert (ctx.get(dut.grant0), ctx.get(dut.grant1), ctx.get(dut.set)) == (1, 0, 0b0010)
        assert ctx.get(dut.set_value)[1] == 7

    simulate(dut, bench, clocked=False)
