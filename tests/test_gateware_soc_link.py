# amaranth: UnusedElaboratable=no
"""Two SoCs with the chip-to-chip link (``SocConfig.link``) in a ring of two, on Amaranth's simulator.

The host side is AXI4-Lite register accesses and a backdoor into each chip's device memory; SENDs go through a
queue's command ring like any command.  Checked: the decoder's SEND checks in the spec's order, the landed bytes,
the peer's semaphore, completions with the spec's codes (OK, REMOTE_WINDOW, LINK_DOWN, LINK_CRC), GLOBAL.CHIP_ID
and the LINK registers (status, counters, CONTROL.corrupt counting down).
"""

from __future__ import annotations

import numpy as np
import pytest
from amaranth import Elaboratable, Module
from amaranth.lib import wiring
from amaranth_run import simulate

from dx1_bringup.gateware.link import LinkWire
from dx1_bringup.gateware.soc import Dx1Soc
from dx1_bringup.spec import (
    PORT_NEXT,
    PORT_PREVIOUS,
    ChipLinkConfig,
    ErrorCode,
    LinkOp,
    Opcode,
    SocConfig,
    TileConfig,
    pack_command,
    register_map,
    unpack_completion,
)

pytestmark = pytest.mark.amaranth_sim

LINK = ChipLinkConfig(latency=3, max_payload=64, credits=2, retries=1)
CONFIG = SocConfig(tiles=1, tile=TileConfig(array=8, spm_rows=32, acc_rows=16, vector=False), mem_bytes=16384,
                   mem_banks=1, semaphores=4, link=LINK)
RING, CQ = 0x3000, 0x3800  # each chip's command ring and completion ring
REGS = register_map(CONFIG)


def _addr(block: str, name: str) -> int:
    blk = REGS.block(block)
    return blk.base + blk.reg(name).offset


class _Board(Elaboratable):
    """Chips 0 and 1; each one's port 0 (next) wired to the other's port 1 (previous), both ways."""

    def __init__(self):
        self.chips = [Dx1Soc(CONFIG) for _ in range(2)]
        self.wires = [[LinkWire(LINK.latency) for _ in range(2)] for _ in range(2)]  # [chip][its port]

    def elaborate(self, platform):
        m = Module()
        for i, soc in enumerate(self.chips):
            m.submodules[f"chip{i}"] = soc
            m.d.comb += soc.chip_id.eq(i | 2 << 8)
            for p in range(2):
                wire = self.wires[i][p]
                m.submodules[f"wire{i}_{p}"] = wire
                peer = self.chips[1 - i]
                wiring.connect(m, getattr(soc, f"link{p}_tx"), wire.tx)
                wiring.connect(m, wire.rx, getattr(peer, f"link{1 - p}_rx"))
        return m


class _Host:
    def __init__(self, board: _Board):
        self.board = board
        self.tail = [0, 0]

    async def write32(self, ctx, chip: int, addr: int, value: int) -> None:
        regs = self.board.chips[chip].regs
        ctx.set(regs.awaddr, addr)
        ctx.set(regs.wdata, value)
        ctx.set(regs.wstrb, 0xF)
        ctx.set(regs.awvalid, 1)
        ctx.set(regs.wvalid, 1)
        ctx.set(regs.bready, 1)
        aw = w = False
        for _ in range(50):
            aw = aw or ctx.get(regs.awready)
            w = w or ctx.get(regs.wready)
            b = ctx.get(regs.bvalid)
            await ctx.tick()
            ctx.set(regs.awvalid, int(not aw))
            ctx.set(regs.wvalid, int(not w))
            if b:
                ctx.set(regs.bready, 0)
                return
        raise AssertionError(f"register write at 0x{addr:x} not answered")

    async def read32(self, ctx, chip: int, addr: int) -> int:
        regs = self.board.chips[chip].regs
        ctx.set(regs.araddr, addr)
        ctx.set(regs.arvalid, 1)
        ctx.set(regs.rready, 1)
        for _ in range(50):
            if ctx.get(regs.arready):
                await ctx.tick()
                ctx.set(regs.arvalid, 0)
                break
            await ctx.tick()
        for _ in range(50):
            if ctx.get(regs.rvalid):
                value = ctx.get(regs.rdata)
                await ctx.tick()
                ctx.set(regs.rready, 0)
                return value
            await ctx.tick()
        raise AssertionError(f"register read at 0x{addr:x} not answered")

    def _word(self, chip: int, i: int):
        return self.board.chips[chip].memory.bank_modules[0].array.data[i]

    def poke(self, ctx, chip: int, addr: int, data: bytes) -> None:
        for i in range(0, len(data), 8):
            ctx.set(self._word(chip, (addr + i) // 8), int.from_bytes(data[i:i + 8], "little"))

    def peek(self, ctx, chip: int, addr: int, length: int) -> bytes:
        return b"".join(ctx.get(self._word(chip, (addr + i) // 8)).to_bytes(8, "little") for i in range(0, length, 8))

    async def setup(self, ctx) -> None:
        for chip in range(2):
            for name, value in (("RING_BASE", RING), ("RING_LOG2", 4), ("CQ_BASE", CQ), ("DMA_BASE", 0),
                                ("DMA_LIMIT", 0x3000), ("CONTROL", 1)):
                await self.write32(ctx, chip, _addr("QUEUE0", name), value)
            await self.write32(ctx, chip, _addr("LINK", "WINDOW_LIMIT"), 0x3000)

    async def run(self, ctx, chip: int, command: bytes, limit: int = 4000) -> dict:
        """Enqueue one command on chip ``chip``'s queue 0 and wait for its completion."""
        index = self.tail[chip]
        self.poke(ctx, chip, RING + 32 * index, command)
        self.tail[chip] = (index + 1) % 16
        await self.write32(ctx, chip, _addr("QUEUE0", "DOORBELL"), self.tail[chip])
        for _ in range(limit):
            entry = unpack_completion(self.peek(ctx, chip, CQ + 8 * index, 8))
            if entry["phase"] == 1:
                return entry
            await ctx.tick()
        raise AssertionError(f"chip {chip}: no completion for command {index} after {limit} cycles")


def _send(port: int = PORT_NEXT, **fields) -> bytes:
    values = {"op": LinkOp.WRITE, "src_addr": 0, "dst_addr": 0x1000, "length": 256, "sem": 1, "count": 1}
    values.update(fields)
    return pack_command(Opcode.SEND, tag=0x55, port=port, **values)


def test_send_lands_signals_and_completes_through_the_queue() -> None:
    """A 200-byte SEND 0 -> 1 on port 0, then an ADD back 1 -> 0 on port 0 (chip 0's port 1): bytes land, each
    peer's semaphore gets the count, completions are OK with their tag; CHIP_ID, STATUS and the counters read true."""
    board = _Board()
    host = _Host(board)
    rng = np.random.default_rng(7)
    data = rng.integers(0, 256, 200, dtype=np.uint8).tobytes()
    x = rng.integers(-2**31, 2**31, 50, dtype=np.int64).astype(np.int32)
    y = rng.integers(-2**31, 2**31, 50, dtype=np.int64).astype(np.int32)

    async def bench(ctx) -> None:
        await host.setup(ctx)
        chip_id = [await host.read32(ctx, c, _addr("GLOBAL", "CHIP_ID")) for c in range(2)]
        assert chip_id == [0x200, 0x201]
        assert [await host.read32(ctx, c, _addr("LINK", f"STATUS{p}")) & 1 for c in range(2) for p in range(2)] == \
            [1, 1, 1, 1]
        host.poke(ctx, 0, 0x100, data)
        entry = await host.run(ctx, 0, _send(src_addr=0x100, dst_addr=0x1008, length=200, sem=2, count=3))
        assert (entry["status"], entry["tag"], entry["opcode"]) == (ErrorCode.OK, 0x55, Opcode.SEND)
        assert host.peek(ctx, 1, 0x1008, 200) == data
        assert await host.read32(ctx, 1, _addr("GLOBAL", "SEM2")) == 3
        assert await host.read32(ctx, 0, _addr("GLOBAL", "SEM2")) == 0
        assert await host.read32(ctx, 0, _addr("LINK", "TX_PACKETS0")) == 4
        assert await host.read32(ctx, 1, _addr("LINK", "RX_PACKETS1")) == 4
        host.poke(ctx, 1, 0x200, x.tobytes())
        host.poke(ctx, 0, 0x2000, y.tobytes())
        entry = await host.run(ctx, 1, _send(src_addr=0x200, dst_addr=0x2000, length=200, op=LinkOp.ADD, sem=0))
        assert entry["status"] == ErrorCode.OK
        got = np.frombuffer(host.peek(ctx, 0, 0x2000, 200), dtype=np.int32)
        assert np.array_equal(got, (x.astype(np.int64) + y).astype(np.int32))
        assert await host.read32(ctx, 0, _addr("GLOBAL", "SEM0")) == 1
        assert await host.read32(ctx, 1, _addr("LINK", "TX_PACKETS0")) == 4

    simulate(board, bench)


def test_send_checks_and_outcomes_in_the_spec_order() -> None:
    """Field checks complete at once (RESERVED_BITS, BAD_DIMENSION, BAD_FIELD, SEM_RANGE, MISALIGNED, DMA_WINDOW);
    then outcomes: REMOTE_WINDOW (nothing lands), LINK_CRC (corrupt 2 > retries 1; CONTROL.corrupt reads back 0,
    RETRIES 1, CRC_ERRORS 2 at the peer), LINK_DOWN (the peer forced its port down), and OK again."""
    board = _Board()
    host = _Host(board)

    async def bench(ctx) -> None:
        await host.setup(ctx)
        checks = [
            (pack_command(Opcode.SEND, port=0, src_addr=0, dst_addr=0, length=64, raw=1 << 36),
             ErrorCode.RESERVED_BITS),
            (_send(length=0), ErrorCode.BAD_DIMENSION),
            (_send(port=2), ErrorCode.BAD_FIELD),
            (_send(op=2), ErrorCode.BAD_FIELD),
            (_send(sem=4), ErrorCode.SEM_RANGE),
            (_send(dst_addr=0x1004), ErrorCode.MISALIGNED),
            (_send(src_addr=0x2F80, length=256), ErrorCode.DMA_WINDOW),
        ]
        for command, code in checks:
            assert (await host.run(ctx, 0, command))["status"] == code
        host.poke(ctx, 0, 0, bytes(range(256)))
        assert (await host.run(ctx, 0, _send(dst_addr=0x2F80)))["status"] == ErrorCode.REMOTE_WINDOW
        assert host.peek(ctx, 1, 0x2F80, 128) == bytes(128)
        await host.write32(ctx, 0, _addr("LINK", "CONTROL0"), 2 << 8)
        assert await host.read32(ctx, 0, _addr("LINK", "CONTROL0")) == 2 << 8
        assert (await host.run(ctx, 0, _send()))["status"] == ErrorCode.LINK_CRC
        assert await host.read32(ctx, 0, _addr("LINK", "CONTROL0")) == 0
        assert await host.read32(ctx, 0, _addr("LINK", "RETRIES0")) == 1
        assert await host.read32(ctx, 1, _addr("LINK", "CRC_ERRORS1")) == 2
        await host.write32(ctx, 1, _addr("LINK", "CONTROL1"), 1)
        for _ in range(2 * LINK.latency + 2):
            await ctx.tick()
        assert await host.read32(ctx, 0, _addr("LINK", "STATUS0")) & 1 == 0
        assert (await host.run(ctx, 0, _send()))["status"] == ErrorCode.LINK_DOWN
        await host.write32(ctx, 1, _addr("LINK", "CONTROL1"), 0)
        for _ in range(2 * LINK.latency + 2):
            await ctx.tick()
        assert (await host.run(ctx, 0, _send(port=PORT_NEXT)))["status"] == ErrorCode.OK
        assert host.peek(ctx, 1, 0x1000, 256) == bytes(range(256))
        assert (await host.run(ctx, 1, _send(port=PORT_PREVIOUS, src_addr=0x1000, dst_addr=0x800)))["status"] == \
            ErrorCode.OK
        assert host.peek(ctx, 0, 0x800, 256) == bytes(range(256))

    simulate(board, bench)


def test_a_send_longer_than_the_watchdog_budget_is_not_aborted() -> None:
    """QUEUE0.WATCHDOG = 64 cycles and a 2 KiB SEND of some 400 cycles, in which the tile's own units do nothing:
    the frames on the link (and the sender's memory reads) are the SEND's progress, so it completes OK (before,
    the watchdog counted only the tile's core and DMA and aborted it with TIMEOUT)."""
    board = _Board()
    host = _Host(board)
    data = np.random.default_rng(3).integers(0, 256, 2048, dtype=np.uint8).tobytes()

    async def bench(ctx) -> None:
        await host.setup(ctx)
        await host.write32(ctx, 0, _addr("QUEUE0", "WATCHDOG"), 64)
        host.poke(ctx, 0, 0x0, data)
        start = await host.read32(ctx, 0, _addr("GLOBAL", "CYCLES_LO"))
        entry = await host.run(ctx, 0, _send(src_addr=0, dst_addr=0x1000, length=2048), limit=20000)
        took = await host.read32(ctx, 0, _addr("GLOBAL", "CYCLES_LO")) - start
        assert entry["status"] == ErrorCode.OK and took > 4 * 64
        assert host.peek(ctx, 1, 0x1000, 2048) == data

    simulate(board, bench)
