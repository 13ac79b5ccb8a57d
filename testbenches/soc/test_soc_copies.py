"""COPYs on both tiles of the SoC at once: every one completes, and the data arrives.

A COPY's data reaches the DMA through device memory's read channel and leaves through its
write channel, and the memory serves one burst at a time in each direction, the write channel
from a burst's address to its last beat.  When a COPY's write burst held the write channel
before its data had been read, and the other tile's COPY held the read channel with its data
FIFO full (waiting for the write channel), both waited on each other forever.  Each case here
starts a COPY on both queues together, with source and destination at different offsets in
their 4 KiB pages so that the two directions' bursts drift out of step; the queues must go
idle within a cycle budget, then every completion and every copied byte is checked.
"""

from __future__ import annotations

import cocotb
import numpy as np
from cocotb.triggers import ClockCycles

from dx1_bringup.sim import run_cocotb
from dx1_bringup.sim.harness import Harness, seed_note
from dx1_bringup.sim.soc_server import host_masters
from dx1_bringup.spec import (
    COMMAND_BYTES,
    COMPLETION_BYTES,
    ErrorCode,
    Opcode,
    SocConfig,
    pack_command,
    register_map,
    unpack_completion,
)

CONFIG = SocConfig()
REGMAP = register_map(CONFIG)
RING_LOG2 = 4
WINDOW = 0x20000          # each queue's DMA window; its ring and completions sit below the windows
WINDOW_BASE = 0x10000
POLL_CYCLES = 64
#: (source offset, destination offset, bytes) in each tile's window, tile 0 first.  The offsets put
#: the read and the write bursts of a COPY at different places in their pages.
CASES = [
    ((0x0000, 0x8400, 0x4000), (0x0200, 0x9000, 0x4000)),
    ((0x0008, 0x8ff8, 0x3000), (0x0c00, 0x8100, 0x5000)),
    ((0x1000, 0x9800, 0x0728), (0x0000, 0x8650, 0x1330)),
]


def _field(block: str, register: str, field: str) -> int:
    """The bit of a one-bit register field, from the spec."""
    reg = REGMAP.block(block).reg(register).register
    return 1 << next(f.lsb for f in reg.fields if f.name == field)


class SocTB(Harness):
    """The SoC's host ports (cocotbext-axi masters) and the queues' rings."""

    def __init__(self, dut):
        super().__init__(dut)
        self.regs, self.mem = host_masters(dut)
        self.tail = [0] * CONFIG.tiles

    async def write_reg(self, block: str, register: str, value: int) -> None:
        resp = await self.regs.write(REGMAP.address(block, register), value.to_bytes(4, "little"))
        assert int(resp.resp) == 0, f"register write {block}.{register} answered {resp.resp}, expected OKAY"

    async def read_reg(self, block: str, register: str) -> int:
        resp = await self.regs.read(REGMAP.address(block, register), 4)
        assert int(resp.resp) == 0, f"register read {block}.{register} answered {resp.resp}, expected OKAY"
        return int.from_bytes(bytes(resp.data), "little")

    @staticmethod
    def ring(q: int) -> int:
        return 0x2000 * q

    @staticmethod
    def cq(q: int) -> int:
        return 0x2000 * q + 0x1000

    @staticmethod
    def window(q: int) -> int:
        return WINDOW_BASE + WINDOW * q

    async def setup_queues(self) -> None:
        for q in range(CONFIG.tiles):
            blk = f"QUEUE{q}"
            for register, value in (("CONTROL", 0), ("RING_BASE", self.ring(q)), ("RING_LOG2", RING_LOG2),
                                    ("CQ_BASE", self.cq(q)), ("DMA_BASE", self.window(q)),
                                    ("DMA_LIMIT", self.window(q) + WINDOW),
                                    ("CONTROL", _field(blk, "CONTROL", "enable"))):
                await self.write_reg(blk, register, value)

    async def put(self, q: int, command: bytes) -> tuple[int, int]:
        """Write a command into queue ``q``'s ring; returns its (index, expected phase)."""
        index = self.tail[q] % (1 << RING_LOG2)
        await self.mem.write(self.ring(q) + COMMAND_BYTES * index, command)
        phase = 1 ^ ((self.tail[q] >> RING_LOG2) & 1)
        self.tail[q] += 1
        return index, phase

    async def doorbell(self, q: int) -> None:
        await self.write_reg(f"QUEUE{q}", "DOORBELL", self.tail[q] % (1 << RING_LOG2))

    async def wait_idle(self, budget: int) -> int:
        """Wait until every queue has fetched and completed all it was given; returns the cycles taken.

        Polls HEAD and STATUS over the register port only, which does not pass through device memory.
        """
        start = self.cycle
        busy_bit = _field("QUEUE0", "STATUS", "busy")
        while True:
            busy = []
            for q in range(CONFIG.tiles):
                blk = f"QUEUE{q}"
                head, status = await self.read_reg(blk, "HEAD"), await self.read_reg(blk, "STATUS")
                if head != self.tail[q] % (1 << RING_LOG2) or status & busy_bit:
                    busy.append(f"queue {q} (HEAD {head}, TAIL {self.tail[q] % (1 << RING_LOG2)}, STATUS {status:#x})")
            if not busy:
                return self.cycle - start
            assert self.cycle - start < budget, (
                f"{', '.join(busy)} still busy after {self.cycle - start} cycles, expected idle within {budget}: "
                f"the SoC is deadlocked or far too slow ({seed_note()})")
            await ClockCycles(self.dut.clk, POLL_CYCLES)


@cocotb.test(timeout_time=2000, timeout_unit="us")
async def copies_on_both_tiles(dut):
    """One COPY per tile started together, for each of CASES; all complete OK with the data copied (random data)."""
    tb = SocTB(dut)
    await tb.reset()
    await tb.setup_queues()
    rng = np.random.default_rng(cocotb.RANDOM_SEED)
    for case, moves in enumerate(CASES):
        sources = []
        expected = []
        for q, (src, dst, length) in enumerate(moves):
            data = rng.integers(0, 256, length, dtype=np.uint8).tobytes()
            base = tb.window(q)
            await tb.mem.write(base + src, data)
            sources.append(data)
            tag = 0x100 * case + q
            command = pack_command(Opcode.COPY, tag=tag, src_addr=base + src, dst_addr=base + dst, length=length)
            expected.append((q, *await tb.put(q, command), tag))
        for q in range(CONFIG.tiles):
            await tb.doorbell(q)
        beats = sum(length for _, _, length in moves) // 8
        # The two COPYs share both memory channels: about one beat a cycle in each, plus slack.
        cycles = await tb.wait_idle(budget=4 * beats + 2000)
        dut._log.info("case %d: %d beats on two tiles in %d cycles", case, beats, cycles)
        for q, index, phase, tag in expected:
            raw = await tb.mem.read(tb.cq(q) + COMPLETION_BYTES * index, COMPLETION_BYTES)
            entry = unpack_completion(bytes(raw.data))
            got = (entry["tag"], entry["status"], entry["opcode"], entry["phase"])
            assert got == (tag, ErrorCode.OK, Opcode.COPY, phase), (
                f"case {case}, queue {q}: completion (tag, status, opcode, phase) {got}, "
                f"expected {(tag, ErrorCode.OK, Opcode.COPY, phase)}")
        for q, (_, dst, length) in enumerate(moves):
            got = bytes((await tb.mem.read(tb.window(q) + dst, length)).data)
            wrong = sum(a != b for a, b in zip(got, sources[q], strict=True))
            assert wrong == 0, f"case {case}, queue {q}: {wrong} of {length} bytes differ at the COPY's destination"


def test_soc_copies(seed):
    run_cocotb("dx1_soc", "soc.test_soc_copies", seed=seed, quiet=True)
