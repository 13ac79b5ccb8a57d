"""The UART host bridge against a Python host: UARTBone frames as LiteX sends them, CRC bursts, CRC register
frames, robustness, speed.

The frames are the driver's (:mod:`dx1_driver.frames`, from the spec's link definition), so the gateware is
checked against the one definition of the wire format.

The pins are driven by cocotbext-uart; the register port is an AxiLiteRam and
the device-memory port an AxiRam, both compared with what the host wrote.
Bus errors come from an address range each RAM model is made to refuse.
"""

from __future__ import annotations

import logging
import random
import struct

import cocotb
from cocotb.triggers import ClockCycles, Timer, with_timeout
from cocotb.utils import get_sim_time
from cocotbext.axi import AxiBus, AxiLiteBus, AxiLiteRam, AxiRam
from cocotbext.uart import UartSink, UartSource
from dx1_driver import frames
from dx1_driver.link import MEM_BASE, REG_BYTES, TIMEOUT_BITS, FrameCommand, FrameStatus

from dx1_bringup.sim import run_cocotb, run_cocotb_shared
from dx1_bringup.sim.bus import refuse_accesses
from dx1_bringup.sim.harness import Harness, seed_note

BAUD = 3_000_000
BIT_NS = 1e9 / BAUD
CLOCK_NS = 20                       # 50 MHz, as on the board
TIMEOUT_NS = TIMEOUT_BITS * BIT_NS  # the bridge's inter-byte timeout
MEM_SIZE = 1 << 20
BAD = (0xF0000, 0x100000)           # device-memory offsets the AxiRam answers with an error
BAD_REGS = (0xF000, 0xF100)         # register offsets the AxiLiteRam answers with an error
ACK, NAK_CRC, NAK_RANGE, NAK_BUS = FrameStatus.ACK, FrameStatus.NAK_CRC, FrameStatus.NAK_RANGE, FrameStatus.BUS_ERROR


class UartHostTB(Harness):
    """The host's end of a UART: bytes out on ``rx`` through a UartSource, answers from ``tx`` through a UartSink."""

    def __init__(self, dut, rx, tx, baud: int):
        super().__init__(dut, clock_ns=CLOCK_NS)
        self.source = UartSource(rx, baud=baud, bits=8)
        self.sink = UartSink(tx, baud=baud, bits=8)
        for model in (self.source, self.sink):
            model.log.setLevel(logging.WARNING)
        self.pending = bytearray()          # bytes received and not yet asked for

    async def send(self, data: bytes) -> None:
        await self.source.write(data)
        await self.source.wait()

    async def recv(self, n: int, timeout_us: float = 20_000) -> bytes:
        async def get():
            while len(self.pending) < n:
                self.pending += await self.sink.read()
            data, self.pending = bytes(self.pending[:n]), self.pending[n:]
            return data
        return await with_timeout(get(), timeout_us, "us")

    async def quiet(self, ns: float) -> None:
        await Timer(int(ns), "ns")
        extra = bytes(self.pending) + bytes(self.sink.read_nowait())
        assert not extra, f"unexpected bytes from the bridge: {extra.hex()}"

    async def reg_write(self, addr: int, words: list[int]) -> int:
        await self.send(frames.reg_write_frame(addr, words))
        return (await self.recv(1))[0]

    async def reg_read(self, addr: int, n: int) -> tuple[int, list[int]]:
        await self.send(frames.reg_read_frame(addr, n))
        status = (await self.recv(1))[0]
        if status != ACK:
            return status, []
        payload = await self.recv(4 * n + 4)
        assert frames.crc_ok(payload), f"register read CRC wrong ({seed_note()})"
        return status, frames.unpack_words(payload[:-4])


class BridgeTB(UartHostTB):
    def __init__(self, dut):
        super().__init__(dut, dut.rx, dut.tx, BAUD)
        self.regs = AxiLiteRam(AxiLiteBus.from_prefix(dut, "regs_"), dut.clk, dut.rst, size=REG_BYTES)
        self.ram = AxiRam(AxiBus.from_prefix(dut, "mem_"), dut.clk, dut.rst, size=MEM_SIZE)
        for model in (self.ram.read_if, self.ram.write_if, self.regs.read_if, self.regs.write_if):
            model.log.setLevel(logging.WARNING)
        self.bad_enabled = False
        refuse_accesses(self.ram, lambda address, length:
                        self.bad_enabled and address + length > BAD[0] and address < BAD[1])
        refuse_accesses(self.regs, lambda address, length:
                        self.bad_enabled and address + length > BAD_REGS[0] and address < BAD_REGS[1])

    async def reset(self):
        self.dut.rx.value = 1
        await super().reset(high=10, low=10)

    # ---- host operations ------------------------------------------------------------------------
    async def bone_write(self, addr: int, words: list[int]) -> None:
        await self.send(frames.uartbone_write_frame(addr, words))
        await ClockCycles(self.dut.clk, 100)     # the last word's bus write

    async def bone_read(self, addr: int, n: int) -> list[int]:
        await self.send(frames.uartbone_read_frame(addr, n))
        data = await self.recv(4 * n)
        return frames.unpack_words(data)

    async def burst_write(self, addr: int, data: bytes) -> int:
        await self.send(frames.burst_write_frame(addr, data))
        return (await self.recv(1))[0]

    async def burst_read(self, addr: int, length: int) -> tuple[int, bytes]:
        await self.send(frames.burst_read_frame(addr, length))
        status = (await self.recv(1))[0]
        if status != ACK:
            return status, b""
        payload = await self.recv(length + 4)
        assert frames.crc_ok(payload), f"read burst CRC wrong ({seed_note()})"
        return status, payload[:-4]


async def setup(dut) -> tuple[BridgeTB, random.Random]:
    tb = BridgeTB(dut)
    await tb.reset()
    return tb, random.Random(cocotb.RANDOM_SEED)


@cocotb.test()
async def uartbone(dut):
    """UARTBone writes and reads of registers and memory, n = 1..8, against the RAM models."""
    tb, rng = await setup(dut)
    for n in range(1, 9):
        for base, model, span in ((0, tb.regs, REG_BYTES), (MEM_BASE, tb.ram, MEM_SIZE)):
            off = rng.randrange(0, span - 4 * n, 4)
            words = [rng.getrandbits(32) for _ in range(n)]
            await tb.bone_write(base + off, words)
            got = [model.read_dword(off + 4 * i) for i in range(n)]
            assert got == words, f"UARTBone write of {n} at {base + off:#x}: {got} != {words} ({seed_note()})"
            back = await tb.bone_read(base + off, n)
            assert back == words, f"UARTBone read of {n} at {base + off:#x}: {back} != {words} ({seed_note()})"
    # 8-word write as LiteX cuts a longer one, then one longer read (n = 20)
    words = [rng.getrandbits(32) for _ in range(20)]
    for i in range(0, 20, 8):
        await tb.bone_write(MEM_BASE + 0x100 + 4 * i, words[i:i + 8])
    assert await tb.bone_read(MEM_BASE + 0x100, 20) == words, f"20-word read ({seed_note()})"
    # unmapped: writes are dropped, reads answer all ones
    await tb.bone_write(0x4000_0000, [0x12345678])
    assert await tb.bone_read(0x4000_0000, 2) == [0xFFFF_FFFF] * 2, f"unmapped read ({seed_note()})"
    # a read that gets a bus error answers all ones for that word only
    tb.ram.write(BAD[0] - 4, bytes([1, 2, 3, 4]))
    tb.bad_enabled = True
    got = await tb.bone_read(MEM_BASE + BAD[0] - 4, 2)
    assert got == [0x04030201, 0xFFFF_FFFF], f"bus-error read {got} ({seed_note()})"


@cocotb.test()
async def bursts(dut):
    """CRC bursts of odd lengths and alignments, byte for byte, and bus errors."""
    tb, rng = await setup(dut)
    mirror = bytearray(tb.ram.read(0, MEM_SIZE))
    cases = [(0x1000, 1), (0x1001, 1), (0x2003, 5), (0x3007, 9), (0x4FF9, 17), (0x5FFD, 300),
             (0x7FF3, 2049), (0x9005, 4096)]
    cases += [(rng.randrange(0, MEM_SIZE - 4096), rng.randrange(1, 700)) for _ in range(4)]
    for off, length in cases:
        data = rng.randbytes(length)
        status = await tb.burst_write(MEM_BASE + off, data)
        assert status == ACK, f"burst write {off:#x}+{length}: status {status} ({seed_note()})"
        mirror[off:off + length] = data
        assert tb.ram.read(0, MEM_SIZE) == bytes(mirror), f"memory differs after write {off:#x}+{length} " \
                                                          f"({seed_note()})"
        status, back = await tb.burst_read(MEM_BASE + off, length)
        assert status == ACK and back == data, f"burst read {off:#x}+{length}: status {status} ({seed_note()})"
    # range checks: outside device memory, zero length, too long
    for addr, length in ((0x1000, 8), (MEM_BASE, 0), (MEM_BASE, 4097), (0xFFFF_FFF0, 32)):
        status, _ = await tb.burst_read(addr, length)
        assert status == NAK_RANGE, f"read {addr:#x}+{length}: status {status} ({seed_note()})"
    await tb.send(frames.burst_write_frame(0x100, b"abc"))
    assert (await tb.recv(1))[0] == NAK_RANGE, f"write below device memory not refused ({seed_note()})"
    await tb.quiet(1.2 * TIMEOUT_NS)   # a NAK after a write header: the bridge discards until quiet
    # bus errors
    tb.bad_enabled = True
    assert await tb.burst_write(MEM_BASE + BAD[0] - 16, bytes(32)) == NAK_BUS, f"write error ({seed_note()})"
    status, _ = await tb.burst_read(MEM_BASE + BAD[0] - 16, 32)
    assert status == NAK_BUS, f"read error status {status} ({seed_note()})"
    status, back = await tb.burst_read(MEM_BASE + 0x1000, 1)
    assert status == ACK and back == bytes(mirror[0x1000:0x1001]), f"burst after errors ({seed_note()})"


@cocotb.test()
async def register_frames(dut):
    """CRC register frames: writes and reads of 1..255 words, and every refusal (bad CRC, range, bus error)."""
    tb, rng = await setup(dut)
    regs = tb.regs
    for n in (1, 2, 3, 8, 17, 255):
        off = rng.randrange(0, REG_BYTES - 4 * n, 4)
        words = [rng.getrandbits(32) for _ in range(n)]
        assert await tb.reg_write(off, words) == ACK, f"register write of {n} at {off:#x} ({seed_note()})"
        got = [regs.read_dword(off + 4 * i) for i in range(n)]
        assert got == words, f"register write of {n} at {off:#x}: {got} != {words} ({seed_note()})"
        assert await tb.reg_read(off, n) == (ACK, words), f"register read of {n} at {off:#x} ({seed_note()})"
    # the top of the register space is still inside
    assert await tb.reg_write(0xFFF8, [5, 6]) == ACK
    assert await tb.reg_read(0xFFF8, 2) == (ACK, [5, 6]), f"read at the top ({seed_note()})"
    regs.write_dword(0x40, 0x1111_1111)
    before = regs.read(0, REG_BYTES)
    # range: unaligned, past the register space, count 0, device memory: NAK_RANGE, nothing written, and
    # the frame was whole, so the next frame is taken at once
    for addr, words in ((0x42, [1]), (0xFFFC, [1, 2]), (0x40, []), (MEM_BASE + 0x40, [1]), (REG_BYTES, [1])):
        assert await tb.reg_write(addr, words) == NAK_RANGE, f"write {addr:#x} x{len(words)} ({seed_note()})"
        assert await tb.reg_read(addr, len(words)) == (NAK_RANGE, []), f"read {addr:#x} ({seed_note()})"
    assert regs.read(0, REG_BYTES) == before, f"a refused register frame wrote ({seed_note()})"
    # bad CRC: a flipped word bit, a flipped CRC bit, a flipped count (the frame then ends early or late)
    for k in (8, -1, 5):
        frame = bytearray(frames.reg_write_frame(0x40, [0x2222_2222, 0x3333_3333]))
        frame[k] ^= 0x01
        await tb.send(bytes(frame))
        if k != 5:
            assert (await tb.recv(1))[0] == NAK_CRC, f"bad CRC (byte {k}) not refused ({seed_note()})"
        await tb.quiet(1.2 * TIMEOUT_NS)   # discard until quiet, then nothing more
        assert regs.read(0, REG_BYTES) == before, f"a register frame with a bad CRC wrote ({seed_note()})"
    frame = bytearray(frames.reg_read_frame(0x40, 1))
    frame[4] ^= 0x04
    await tb.send(bytes(frame))
    assert (await tb.recv(1))[0] == NAK_CRC, f"read with a bad CRC not refused ({seed_note()})"
    await tb.quiet(1.2 * TIMEOUT_NS)
    # after a bad CRC the bridge ignores the line until it is quiet: a frame sent right after is dropped
    frame = bytearray(frames.reg_write_frame(0x40, [7]))
    frame[6] ^= 0x80
    await tb.send(bytes(frame) + frames.reg_write_frame(0x40, [8]))
    assert (await tb.recv(1))[0] == NAK_CRC, f"bad CRC before a good frame ({seed_note()})"
    await tb.quiet(1.2 * TIMEOUT_NS)
    assert regs.read_dword(0x40) == 0x1111_1111, f"a frame after a bad CRC was taken ({seed_note()})"
    # bus errors: every word is tried, the refused ones are not written
    tb.bad_enabled = True
    words = [0xA0, 0xA1, 0xA2]
    assert await tb.reg_write(BAD_REGS[0] - 4, words) == NAK_BUS, f"write bus error ({seed_note()})"
    assert regs.read_dword(BAD_REGS[0] - 4) == 0xA0, f"the word before the refused ones ({seed_note()})"
    assert await tb.reg_read(BAD_REGS[0] - 8, 3) == (NAK_BUS, []), f"read bus error ({seed_note()})"
    tb.bad_enabled = False
    assert await tb.reg_read(BAD_REGS[0] - 4, 1) == (ACK, [0xA0]), f"read after bus errors ({seed_note()})"
    # back to back: several writes then a read, answered in order without waiting in between
    await tb.send(b"".join(frames.reg_write_frame(0x100 + 4 * i, [i, ~i & 0xFFFF_FFFF]) for i in range(6))
                  + frames.reg_read_frame(0x100, 7))
    assert await tb.recv(6) == bytes(6), f"write statuses of a window ({seed_note()})"
    assert (await tb.recv(1))[0] == ACK
    payload = await tb.recv(7 * 4 + 4)
    assert frames.crc_ok(payload)
    assert list(struct.unpack(">7I", payload[:-4])) == [0, 1, 2, 3, 4, 5, 0xFFFF_FFFA], f"window ({seed_note()})"
    # UARTBone and bursts still work after all this
    assert await tb.bone_read(0x100, 2) == [0, 1]
    assert await tb.burst_write(MEM_BASE + 0x40, b"xyz") == ACK


@cocotb.test()
async def robustness(dut):
    """Bad CRCs, cut-off frames and garbage are dropped, and the next good frame works."""
    tb, rng = await setup(dut)
    off = 0x2000
    before = tb.ram.read(off, 64)
    data = rng.randbytes(64)
    # bad payload CRC: NAK, nothing written, back to idle at once
    frame = bytearray(frames.burst_write_frame(MEM_BASE + off, data))
    frame[-1] ^= 0x40
    await tb.send(bytes(frame))
    assert (await tb.recv(1))[0] == NAK_CRC, f"bad payload CRC not refused ({seed_note()})"
    assert tb.ram.read(off, 64) == before, f"a payload with a bad CRC was written ({seed_note()})"
    # a flipped payload bit, good CRC field
    frame = bytearray(frames.burst_write_frame(MEM_BASE + off, data))
    frame[20] ^= 1
    await tb.send(bytes(frame))
    assert (await tb.recv(1))[0] == NAK_CRC, f"corrupted payload not refused ({seed_note()})"
    assert tb.ram.read(off, 64) == before, f"a corrupted payload was written ({seed_note()})"
    # bad header CRC: NAK right after the header, the rest discarded until the line is quiet
    frame = bytearray(frames.burst_write_frame(MEM_BASE + off, data))
    frame[3] ^= 0x10
    await tb.send(bytes(frame))
    assert (await tb.recv(1))[0] == NAK_CRC, f"bad header CRC not refused ({seed_note()})"
    await tb.quiet(1.2 * TIMEOUT_NS)
    assert tb.ram.read(off, 64) == before, f"a frame with a bad header was written ({seed_note()})"
    assert await tb.burst_write(MEM_BASE + off, data) == ACK, f"good frame after bad header ({seed_note()})"
    assert tb.ram.read(off, 64) == data
    # cut-off frames: stop mid-frame, wait past the timeout, then a good frame
    burst = frames.burst_write_frame(MEM_BASE + off, bytes(64))
    for cut in (burst[:40], burst[:7], frames.uartbone_write_frame(MEM_BASE + off, [0, 0, 0])[:9],
                frames.uartbone_read_frame(off, 2)[:3]):
        await tb.send(cut)
        await tb.quiet(1.2 * TIMEOUT_NS)
        assert tb.ram.read(off, 64) == data, f"a cut-off frame wrote memory ({seed_note()})"
        words = [rng.getrandbits(32) for _ in range(2)]
        await tb.bone_write(0x40, words)
        assert await tb.bone_read(0x40, 2) == words, f"UARTBone after a cut-off frame ({seed_note()})"
    # garbage with no command byte is ignored at once
    garbage = bytes(b for b in rng.randbytes(200) if b not in set(FrameCommand))
    await tb.send(garbage)
    status, back = await tb.burst_read(MEM_BASE + off, 64)
    assert status == ACK and back == data, f"burst after garbage ({seed_note()})"
    # any garbage: the bridge is back after a timeout
    await tb.send(rng.randbytes(100))
    await Timer(int(1.2 * TIMEOUT_NS), "ns")
    tb.sink.clear()                   # a garbage read may have been answered
    tb.pending.clear()
    status, back = await tb.burst_read(MEM_BASE + off, 64)
    assert status == ACK and back == data, f"burst after random garbage ({seed_note()})"
    # a framing error (a break) mid-frame drops the frame
    await tb.send(frames.burst_write_frame(MEM_BASE + off, bytes(64))[:30])
    tb.dut.rx.value = 0
    await Timer(int(20 * BIT_NS), "ns")
    tb.dut.rx.value = 1
    await tb.quiet(1.2 * TIMEOUT_NS)
    assert tb.ram.read(off, 64) == data, f"a frame with a break wrote memory ({seed_note()})"
    assert await tb.bone_read(MEM_BASE + off, 1) == [int.from_bytes(data[:4], "little")]


@cocotb.test()
async def throughput(dut):
    """A 4 KiB burst write and read, as a fraction of the line rate."""
    tb, rng = await setup(dut)
    data = rng.randbytes(4096)
    line = BAUD / 10                         # bytes per second
    t0 = get_sim_time("ns")
    assert await tb.burst_write(MEM_BASE + 0x10000, data) == ACK
    t1 = get_sim_time("ns")
    status, back = await tb.burst_read(MEM_BASE + 0x10000, 4096)
    t2 = get_sim_time("ns")
    assert status == ACK and back == data, f"4 KiB round trip ({seed_note()})"
    wr = 4096 / (line * (t1 - t0) * 1e-9)
    rd = 4096 / (line * (t2 - t1) * 1e-9)
    dut._log.warning("4 KiB at %d baud: write %.1f%%, read %.1f%% of line rate", BAUD, 100 * wr, 100 * rd)
    assert wr >= 0.9 and rd >= 0.9, f"throughput write {wr:.3f}, read {rd:.3f} of line rate"


TESTCASES = ["uartbone", "bursts", "register_frames", "robustness", "throughput"]


def test_bridge(testcase, seed, cocotb_batch):
    run_cocotb_shared("dx1_uart_bridge", "bridge.test_bridge", testcase, batch=cocotb_batch, seed=seed, quiet=True)


def test_driver_windows_on_the_board(tmp_path):
    """The driver's framing and windows (as `make bench` drives them) on the simulated board's RTL.

    Two read bursts a window and one verified write burst a window fit the bridge's receive FIFO; the
    figures are fractions of the line rate in simulated time, with no host latency.
    """
    import json

    from dx1_bringup.sim.board_server import BAUD as BOARD_BAUD

    out = tmp_path / "serial.json"
    size = 2 * 4096 + 12  # two full bursts and a short one: a read window of two, then one of one
    runs = [{"mode": "crc", "sizes": [size], "ops": ["write", "read"]},
            {"mode": "crc-verified", "sizes": [size], "ops": ["write"]},
            {"mode": "uartbone", "sizes": [1032], "ops": ["write", "read"]}]
    run_cocotb("dx1_board", "dx1_bringup.sim.bench_serial", seed=1, quiet=True, name="bench-serial-test",
               env={"DX1_BENCH": json.dumps({"baud": BOARD_BAUD, "runs": runs}), "DX1_RESULT": str(out)})
    rows = {r["mode"]: r for r in json.loads(out.read_text())["results"]}
    assert all(r["correct"] for r in rows.values()), rows
    crc, verified, bone = rows["crc"], rows["crc-verified"], rows["uartbone"]
    assert (crc["write"]["round_trips"], crc["read"]["round_trips"], verified["write"]["round_trips"]) == (1, 2, 3)
    assert crc["write"]["line_fraction"] > 0.97 and crc["read"]["line_fraction"] > 0.95, crc
    # a verified write waits for its read-back: half the line rate, less the headers
    assert 0.45 < verified["write"]["line_fraction"] < 0.5, verified
    assert bone["write"]["line_fraction"] > 0.9 and bone["read"]["line_fraction"] > 0.9, bone
    assert (bone["write"]["round_trips"], bone["read"]["round_trips"]) == (1, 2)


def pytest_generate_tests(metafunc):
    if "testcase" in metafunc.fixturenames:
        metafunc.parametrize("testcase", TESTCASES)
