"""The spec's SEND timing (:func:`~dx1_bringup.spec.send_timing`, the golden model's) against the link DMA's gateware.

Two link endpoints back to back on Amaranth's simulator (``dx1 bench --only link``'s pair): for SENDs of one
frame and of many, WRITE and ADD, with CRC faults within and past the retries and with fewer credits, the
cycles from the request to the status are the spec's, and so (within a few percent) are the credit stalls.
"""

from __future__ import annotations

import pytest
from amaranth.sim import Simulator

from dx1_bringup.bench_link import _Pair
from dx1_bringup.spec import ChipLinkConfig, ErrorCode, LinkOp, send_timing

SIZES = (8, 64, 248, 256, 264, 512, 1024, 4096)


def _sends(config: ChipLinkConfig, sends: list[tuple[int, LinkOp, int]]) -> list[tuple[int, int, int]]:
    """``(status, cycles, credit stalls)`` of each ``(bytes, op, crc faults)`` SEND from endpoint 0 to 1."""
    pair = _Pair(config)
    out: list[tuple[int, int, int]] = []

    async def bench(ctx) -> None:
        for _ in range(2 * config.latency + 2):
            await ctx.tick()
        end = pair.ends[0]
        for size, op, faults in sends:
            ctx.set(end.clear, 1)
            if faults:
                ctx.set(end.inject_count, faults)
                ctx.set(end.inject, 1)
            await ctx.tick()
            ctx.set(end.clear, 0)
            ctx.set(end.inject, 0)
            for name, value in (("src_addr", 0), ("dst_addr", 0), ("length", size), ("op", op), ("sem", 0),
                                ("count", 1)):
                ctx.set(getattr(end.request, name), value)
            ctx.set(end.request.valid, 1)
            await ctx.tick()
            ctx.set(end.request.valid, 0)
            ctx.set(end.done.tready, 1)
            cycles = 1
            while not ctx.get(end.done.tvalid):
                await ctx.tick()
                cycles += 1
                assert cycles < 20_000, f"a SEND of {size} bytes did not complete"
            status = ctx.get(end.done.tdata)
            await ctx.tick()
            ctx.set(end.done.tready, 0)
            out.append((status, cycles, ctx.get(end.credit_stalls)))

    sim = Simulator(pair)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    return out


@pytest.mark.amaranth_sim
def test_writes_take_the_spec_cycles_and_adds_within_one():
    cfg = ChipLinkConfig()
    sends = [(size, op, 0) for op in (LinkOp.WRITE, LinkOp.ADD) for size in SIZES]
    for (size, op, _), (status, cycles, _) in zip(sends, _sends(cfg, sends), strict=True):
        assert status == ErrorCode.OK
        want = send_timing(cfg, size, op).done
        assert abs(cycles - want) <= (0 if op == LinkOp.WRITE else 1), f"{op.name} of {size} bytes: {cycles} vs {want}"


@pytest.mark.amaranth_sim
def test_crc_faults_within_and_past_the_retries_take_the_spec_cycles():
    cfg = ChipLinkConfig()
    sends = [(8, LinkOp.WRITE, 1), (8, LinkOp.WRITE, 2), (256, LinkOp.WRITE, 1), (1024, LinkOp.WRITE, 3),
             (8, LinkOp.WRITE, cfg.retries + 1)]
    got = _sends(cfg, sends)
    for (size, op, faults), (status, cycles, _) in zip(sends, got, strict=True):
        assert status == (ErrorCode.LINK_CRC if faults > cfg.retries else ErrorCode.OK)
        assert cycles == send_timing(cfg, size, op, crc_faults=faults).done, (size, faults)


@pytest.mark.amaranth_sim
@pytest.mark.parametrize("credits", [1, 2])
def test_fewer_credits_stall_as_the_spec_says(credits):
    cfg = ChipLinkConfig(credits=credits)
    sends = [(size, LinkOp.WRITE, 0) for size in (512, 1024, 4096)]
    for (size, _, _), (status, cycles, stalls) in zip(sends, _sends(cfg, sends), strict=True):
        t = send_timing(cfg, size)
        assert status == ErrorCode.OK
        assert abs(cycles - t.done) <= 0.01 * t.done and abs(stalls - t.credit_stalls) <= 0.02 * t.credit_stalls + 1
