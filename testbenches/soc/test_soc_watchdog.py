"""The queue watchdog and the per-tile reset on the SoC RTL, driven through the test-only stall port.

* A LOAD on tile 0 whose DMA is held (``stall_units``) makes no progress: after QUEUE0.WATCHDOG
  cycles it completes with TIMEOUT, the queue halts with ERROR = TIMEOUT at its index, and the
  FENCE behind it waits; tile 1's COPY, running meanwhile, completes and copies its data.  Released
  and resumed, the queue runs on, and the LOAD run again moves its data.
* A GEMM on tile 0 whose tile core is stalled, with the watchdog off, keeps the queue busy; QUEUE0.RESET
  empties tile 0's queue (HEAD = TAIL = 0, not busy) while tile 1's work completes untouched, and tile 0
  then runs new commands from ring index 0.
* QUEUE0.RESET in the middle of a long STORE: the DMA finishes its open bursts with null strobes, so no
  byte outside the STORE's footprint changes and the bus keeps serving both tiles.
"""

from __future__ import annotations

import cocotb
import numpy as np
from cocotb.triggers import ClockCycles

from dx1_bringup.sim import run_cocotb
from dx1_bringup.sim.harness import seed_note
from dx1_bringup.spec import COMPLETION_BYTES, ErrorCode, Opcode, SocConfig, pack_command, stall_bit, unpack_completion

from .test_soc_copies import RING_LOG2, SocTB, _field

CONFIG = SocConfig()
ROW = CONFIG.tile.spm_row_bytes
WATCHDOG = 200
HALTED = _field("QUEUE0", "STATUS", "halted")
BUSY = _field("QUEUE0", "STATUS", "busy")


async def completion(tb: SocTB, q: int, index: int) -> dict[str, int]:
    raw = await tb.mem.read(tb.cq(q) + COMPLETION_BYTES * index, COMPLETION_BYTES)
    return unpack_completion(bytes(raw.data))


async def expect_completion(tb: SocTB, q: int, index: int, tag: int, opcode: Opcode, status: ErrorCode) -> None:
    entry = await completion(tb, q, index)
    got = (entry["tag"], entry["opcode"], ErrorCode(entry["status"]))
    assert got == (tag, opcode, status), (
        f"queue {q} index {index}: completion (tag, opcode, status) {got}, expected {(tag, opcode, status)} "
        f"({seed_note()})")


async def wait_for(tb: SocTB, what: str, predicate, budget: int) -> int:
    start = tb.cycle
    while not await predicate():
        assert tb.cycle - start < budget, f"{what} did not happen within {budget} cycles ({seed_note()})"
        await ClockCycles(tb.dut.clk, 8)
    return tb.cycle - start


def load(tag: int, mem: int, rows: int, local: int = 0) -> bytes:
    return pack_command(Opcode.LOAD, tag=tag, mem_addr=mem, mem_stride=ROW, local_addr=local, rows=rows,
                        cols=1, local_row_stride=1, local_col_stride=0)


def store(tag: int, mem: int, rows: int, local: int = 0) -> bytes:
    return pack_command(Opcode.STORE, tag=tag, mem_addr=mem, mem_stride=ROW, local_addr=local, rows=rows,
                        cols=1, local_row_stride=1, local_col_stride=0)


async def submit(tb: SocTB, q: int, *commands: bytes) -> list[int]:
    indices = [(await tb.put(q, c))[0] for c in commands]
    await tb.doorbell(q)
    return indices


@cocotb.test(timeout_time=3000, timeout_unit="us")
async def watchdog_and_tile_reset(dut):
    """TIMEOUT on a held DMA, the queue resumes; a per-tile reset clears a stalled core and spares tile 1."""
    tb = SocTB(dut)
    dut.stall_units.value = 0
    await tb.reset()
    await tb.setup_queues()
    for q in range(CONFIG.tiles):
        await tb.mem.write(tb.cq(q), bytes(COMPLETION_BYTES << RING_LOG2))
    rng = np.random.default_rng(cocotb.RANDOM_SEED)
    w0, w1 = tb.window(0), tb.window(1)
    rows = 64
    src = rng.integers(0, 256, rows * ROW, dtype=np.uint8).tobytes()
    await tb.mem.write(w0, src)
    copy_src = rng.integers(0, 256, 0x1000, dtype=np.uint8).tobytes()
    await tb.mem.write(w1, copy_src)

    # ---- the watchdog: a held DMA ------------------------------------------------------------------
    await tb.write_reg("QUEUE0", "WATCHDOG", WATCHDOG)
    dut.stall_units.value = stall_bit("dma", 0)
    start = tb.cycle
    i_load, i_fence = await submit(tb, 0, load(1, w0, rows), pack_command(Opcode.FENCE, tag=2))
    (i_copy,) = await submit(tb, 1, pack_command(Opcode.COPY, tag=10, src_addr=w1, dst_addr=w1 + 0x8000,
                                                 length=0x1000))

    async def halted():
        return bool(await tb.read_reg("QUEUE0", "STATUS") & HALTED)

    await wait_for(tb, "queue 0 halting on its watchdog", halted, 20 * WATCHDOG)
    dut._log.info("held DMA: queue 0 halted %d cycles after the doorbell (WATCHDOG %d)", tb.cycle - start, WATCHDOG)
    error = await tb.read_reg("QUEUE0", "ERROR")
    assert error == ErrorCode.TIMEOUT | i_load << 16, f"ERROR reads {error:#x}, expected TIMEOUT at index {i_load}"
    await wait_for(tb, "the LOAD's TIMEOUT completion",
                   lambda: _has_status(tb, 0, i_load, ErrorCode.TIMEOUT), 1000)
    await expect_completion(tb, 0, i_load, 1, Opcode.LOAD, ErrorCode.TIMEOUT)
    assert (await completion(tb, 0, i_fence))["phase"] == 0, "the FENCE completed while the queue was halted"
    await wait_for(tb, "tile 1's COPY", lambda: _has_status(tb, 1, i_copy, ErrorCode.OK), 5000)
    copied = bytes((await tb.mem.read(w1 + 0x8000, 0x1000)).data)
    assert copied == copy_src, "tile 1's COPY, which ran beside the stuck LOAD, did not copy its data"

    dut.stall_units.value = 0
    await tb.write_reg("QUEUE0", "CONTROL", _field("QUEUE0", "CONTROL", "enable") | _field("QUEUE0", "CONTROL",
                                                                                            "resume"))
    await wait_for(tb, "the FENCE after resume", lambda: _has_status(tb, 0, i_fence, ErrorCode.OK), 2000)
    i_again, i_store = await submit(tb, 0, load(3, w0, rows), store(4, w0 + 0x8000, rows))
    await wait_for(tb, "the LOAD run again and its STORE", lambda: _has_status(tb, 0, i_store, ErrorCode.OK), 5000)
    await expect_completion(tb, 0, i_again, 3, Opcode.LOAD, ErrorCode.OK)
    stored = bytes((await tb.mem.read(w0 + 0x8000, rows * ROW)).data)
    assert stored == src, "after the TIMEOUT the DMA did not load and store the data right"

    # ---- the per-tile reset: a stalled tile core, watchdog off --------------------------------------
    await tb.write_reg("QUEUE0", "WATCHDOG", 0)
    dut.stall_units.value = stall_bit("core", 0)
    await submit(tb, 0, pack_command(Opcode.GEMM, tag=5, a_addr=0, b_addr=0, c_addr=0, m=8, k_chunks=1))
    (i_copy2,) = await submit(tb, 1, pack_command(Opcode.COPY, tag=11, src_addr=w1, dst_addr=w1 + 0x9000,
                                                  length=0x1000))
    await ClockCycles(dut.clk, 2000)
    assert await tb.read_reg("QUEUE0", "STATUS") & BUSY, "queue 0 is not busy with its stalled GEMM"
    await tb.write_reg("QUEUE0", "RESET", 1)
    await ClockCycles(dut.clk, 4)
    state = [await tb.read_reg("QUEUE0", r) for r in ("HEAD", "TAIL", "STATUS", "ERROR")]
    assert state == [0, 0, 0, 0], f"after QUEUE0.RESET HEAD, TAIL, STATUS, ERROR read {state}, expected zeros"
    await wait_for(tb, "tile 1's second COPY", lambda: _has_status(tb, 1, i_copy2, ErrorCode.OK), 5000)
    assert bytes((await tb.mem.read(w1 + 0x9000, 0x1000)).data) == copy_src, "tile 1's COPY lost data"
    dut.stall_units.value = 0
    await tb.mem.write(tb.cq(0), bytes(COMPLETION_BYTES << RING_LOG2))
    tb.tail[0] = 0
    i_nop, i_store2 = await submit(tb, 0, pack_command(Opcode.NOP, tag=6), store(7, w0 + 0xC000, rows))
    await wait_for(tb, "tile 0's commands after its reset", lambda: _has_status(tb, 0, i_store2, ErrorCode.OK), 5000)
    await expect_completion(tb, 0, i_nop, 6, Opcode.NOP, ErrorCode.OK)
    assert bytes((await tb.mem.read(w0 + 0xC000, rows * ROW)).data) == src, (
        "the scratchpad lost its rows in the per-tile reset")

    # ---- the per-tile reset in the middle of a long STORE -------------------------------------------
    rows = 2048
    guard = rng.integers(0, 256, 2 * rows * ROW, dtype=np.uint8).tobytes()
    target = w0 + 0x10000
    await tb.mem.write(target, guard)
    await submit(tb, 0, store(8, target, rows))
    await ClockCycles(dut.clk, 300)
    await tb.write_reg("QUEUE0", "RESET", 1)
    await ClockCycles(dut.clk, 600)
    after = bytes((await tb.mem.read(target, 2 * rows * ROW)).data)
    footprint = rows * ROW
    assert after[footprint:] == guard[footprint:], "bytes past the STORE's footprint changed in the reset"
    written = after[:footprint]
    assert written != guard[:footprint], "the STORE wrote nothing before the reset (the test did not interrupt it)"
    tb.tail[0] = 0
    await tb.mem.write(tb.cq(0), bytes(COMPLETION_BYTES << RING_LOG2))
    (i_copy3,) = await submit(tb, 1, pack_command(Opcode.COPY, tag=12, src_addr=w1, dst_addr=w1 + 0xA000,
                                                  length=0x1000))
    (i_nop2,) = await submit(tb, 0, pack_command(Opcode.NOP, tag=9))
    await wait_for(tb, "both tiles after the reset mid-STORE", lambda: _both(tb, i_copy3, i_nop2), 5000)


async def _has_status(tb: SocTB, q: int, index: int, status: ErrorCode) -> bool:
    entry = await completion(tb, q, index)
    return entry["phase"] == 1 and entry["status"] == status


async def _both(tb: SocTB, i_copy: int, i_nop: int) -> bool:
    return await _has_status(tb, 1, i_copy, ErrorCode.OK) and await _has_status(tb, 0, i_nop, ErrorCode.OK)


def test_soc_watchdog(seed):
    run_cocotb("dx1_soc", "soc.test_soc_watchdog", seed=seed, quiet=True)
