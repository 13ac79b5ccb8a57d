"""The device memory's read-only ports (a link sender's) on Amaranth's simulator; the rest of the memory is tested
through its Verilog under cocotb (``testbenches/memory/test_axi_memory.py``)."""

from __future__ import annotations

import gc

import pytest
from amaranth_run import simulate

from dx1_bringup.gateware.memory import AxiMemory

# The refused memories are never elaborated: Amaranth warns about them when they are collected (in the test).
pytestmark = pytest.mark.filterwarnings("ignore:.*created but never used")


async def _write(ctx, port, addr: int, beats: list[int]) -> None:
    ctx.set(port.awaddr, addr)
    ctx.set(port.awlen, len(beats) - 1)
    ctx.set(port.awsize, 3)
    ctx.set(port.awburst, 1)
    ctx.set(port.awvalid, 1)
    await ctx.tick().until(port.awready)
    ctx.set(port.awvalid, 0)
    for i, beat in enumerate(beats):
        ctx.set(port.wdata, beat)
        ctx.set(port.wstrb, 0xFF)
        ctx.set(port.wlast, i == len(beats) - 1)
        ctx.set(port.wvalid, 1)
        await ctx.tick().until(port.wready)
    ctx.set(port.wvalid, 0)
    ctx.set(port.bready, 1)
    await ctx.tick().until(port.bvalid)
    ctx.set(port.bready, 0)


async def _read(ctx, port, addr: int, beats: int) -> list[int]:
    ctx.set(port.araddr, addr)
    ctx.set(port.arlen, beats - 1)
    ctx.set(port.arsize, 3)
    ctx.set(port.arburst, 1)
    ctx.set(port.arvalid, 1)
    await ctx.tick().until(port.arready)
    ctx.set(port.arvalid, 0)
    ctx.set(port.rready, 1)
    data = []
    while len(data) < beats:
        _, _, valid, word = await ctx.tick().sample(port.rvalid, port.rdata)
        if valid:
            data.append(word)
    ctx.set(port.rready, 0)
    return data


@pytest.mark.parametrize("banks", [1, 4])
def test_read_only_port_reads_and_is_never_served_a_write(banks: int) -> None:
    """Port 1 is read-only: it reads what port 0 and port 2 wrote (in any bank), and a write address it offers
    is never taken while the other ports' writes go on."""
    dut = AxiMemory(size=16384, ports=3, banks=banks, read_only=(1,))

    async def bench(ctx) -> None:
        s0, s1, s2 = dut.s0, dut.s1, dut.s2
        ctx.set(s1.awaddr, 0)
        ctx.set(s1.awlen, 0)
        ctx.set(s1.awsize, 3)
        ctx.set(s1.awburst, 1)
        ctx.set(s1.awvalid, 1)  # held for the whole test: never taken
        await _write(ctx, s0, 0x0000, [1, 2, 3])
        await _write(ctx, s2, 0x1008, [4, 5])  # the next page: bank 1 of 4
        assert await _read(ctx, s1, 0x0000, 3) == [1, 2, 3]
        assert await _read(ctx, s1, 0x1008, 2) == [4, 5]
        for _ in range(4):
            await ctx.tick()
            assert (ctx.get(s1.awready), ctx.get(s1.wready), ctx.get(s1.bvalid)) == (0, 0, 0)

    simulate(dut, bench)


@pytest.mark.parametrize("read_only", [(3,), (-1,), (1, 1), (0, 1, 2), (True,)])
def test_read_only_ports_must_be_distinct_ports_leaving_a_writer(read_only) -> None:
    with pytest.raises(ValueError, match=r"^Memory read-only ports must be distinct port numbers in 0\.\.2, leaving a "
                                         r"port that writes, not "):
        AxiMemory(size=16384, ports=3, read_only=read_only)
    gc.collect()
