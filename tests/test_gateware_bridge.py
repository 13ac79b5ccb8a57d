# amaranth: UnusedElaboratable=no
"""The UART bridge's parts, each alone on Amaranth's simulator: the CRC, the receiver, the bus masters, the burst
buffer, the dispatcher and the three frame engines.

The frames come from the driver (:mod:`dx1_driver.frames`), so each part is checked against the one definition of the
wire format; the whole bridge is checked by the cocotb testbench in ``testbenches/bridge``.
"""

from __future__ import annotations

import zlib

import pytest
from amaranth import Elaboratable, Module
from amaranth_run import simulate
from dx1_driver import frames

from dx1_bringup.gateware.bridge import UartBridge, share
from dx1_bringup.gateware.bridge.buffer import PayloadBuffer
from dx1_bringup.gateware.bridge.burst import BurstEngine
from dx1_bringup.gateware.bridge.bus import BUS_PORT, BusMasters
from dx1_bringup.gateware.bridge.crc import CRC_PORT, Crc32
from dx1_bringup.gateware.bridge.cutter import BurstCutter
from dx1_bringup.gateware.bridge.dispatch import FrameDispatch
from dx1_bringup.gateware.bridge.receiver import RX_PORT, FrameReceiver
from dx1_bringup.gateware.bridge.regframe import RegFrameEngine
from dx1_bringup.gateware.bridge.uartbone import UartBoneEngine
from dx1_bringup.gateware.stream import AXIStreamSignature
from dx1_bringup.spec import AXI_ERROR_WORD, MEM_BASE, TIMEOUT_BITS, FrameCommand, FrameStatus

pytestmark = pytest.mark.amaranth_sim

CLK, BAUD = 800, 100            # the fewest clock cycles a bit the UART allows: 8
BIT = CLK // BAUD



# --- CRC ----------------------------------------------------------------------------------------------------------


def test_crc32_of_the_check_string_and_its_bytes_out() -> None:
    """Fed b"123456789" (start, then feed) the CRC is zlib's 0xCBF43926; shift gives its bytes MSB first; restart
    gives the CRC of nothing (0), and start begins a new CRC even mid-frame."""
    dut = Crc32()

    async def bench(ctx) -> None:
        for i, byte in enumerate(b"123456789"):
            ctx.set(dut.start if i == 0 else dut.feed, 1)
            ctx.set(dut.data, byte)
            await ctx.tick()
            ctx.set(dut.start, 0)
            ctx.set(dut.feed, 0)
        assert ctx.get(dut.value) == zlib.crc32(b"123456789") == 0xCBF43926
        await ctx.tick()
        assert ctx.get(dut.value) == 0xCBF43926, "with no operation the CRC holds"
        out = []
        ctx.set(dut.shift, 1)
        for _ in range(4):
            out.append(ctx.get(dut.value) >> 24)
            await ctx.tick()
        ctx.set(dut.shift, 0)
        assert bytes(out) == (0xCBF43926).to_bytes(4, "big")
        ctx.set(dut.restart, 1)
        await ctx.tick()
        ctx.set(dut.restart, 0)
        assert ctx.get(dut.value) == 0
        ctx.set(dut.start, 1)
        ctx.set(dut.data, 0x81)
        await ctx.tick()
        assert ctx.get(dut.value) == zlib.crc32(b"\x81")

    simulate(dut, bench)


# --- receiver -----------------------------------------------------------------------------------------------------


def _uart_bits(data: bytes, bad_stop: int | None = None) -> list[int]:
    """The line level, a clock cycle at a time, for ``data`` in 8N1 (byte ``bad_stop`` with a 0 stop bit)."""
    line = []
    for i, byte in enumerate(data):
        stop = 0 if i == bad_stop else 1
        for bit in [0, *((byte >> j) & 1 for j in range(8)), stop]:
            line += [bit] * BIT
        line += [1] * BIT
    return line


def test_receiver_takes_bytes_builds_fields_and_ends_frames() -> None:
    """Idle: every byte is taken.  Listening: the field is the last four bytes big-endian; a quiet line aborts the
    frame after TIMEOUT_BITS bit times; a framing error aborts it and the bytes after it are discarded until the line
    has been quiet as long."""
    dut = FrameReceiver(CLK, BAUD)
    port = dut.frames
    taken: list[tuple[int, int]] = []

    async def line(ctx, bits, idle=0, listen=0) -> list[int]:
        aborts = []
        ctx.set(dut.idle, idle)
        ctx.set(port.listen, listen)
        for cycle, bit in enumerate(bits):
            ctx.set(dut.rx, bit)
            if ctx.get(port.valid):
                taken.append((ctx.get(port.byte), ctx.get(port.field)))
            if ctx.get(port.abort):
                aborts.append(cycle)
            await ctx.tick()
        return aborts

    async def bench(ctx) -> None:
        await line(ctx, _uart_bits(b"\xa5") + [1] * 4 * BIT, idle=1)
        assert [byte for byte, _ in taken] == [0xA5]
        taken.clear()
        assert await line(ctx, _uart_bits(b"\x12\x34\x56\x78") + [1] * 4 * BIT, listen=1) == []
        assert taken[-1] == (0x78, 0x12345678) and len(taken) == 4
        aborts = await line(ctx, [1] * (dut.timeout_cycles + 10), listen=1)
        # the quiet count runs from the last byte taken (in its stop bit, up to 5 bit times before this line)
        assert aborts and dut.timeout_cycles - 5 * BIT <= aborts[0] < dut.timeout_cycles
        await line(ctx, [1] * 4, idle=1)        # the next frame begins: the count restarts
        taken.clear()
        aborts = await line(ctx, _uart_bits(b"\x01\x02", bad_stop=0) + [1] * 2 * BIT, listen=1)
        # the bad byte is not taken; the frame aborts, and the byte after it is taken and dropped
        assert aborts and [byte for byte, _ in taken] == [0x02] and ctx.get(dut.discarding) == 1
        taken.clear()
        await line(ctx, _uart_bits(b"\x33") + [1] * 10)
        assert ctx.get(dut.discarding) == 1 and [byte for byte, _ in taken] == [0x33], "discarded bytes are taken"
        await line(ctx, [1] * (TIMEOUT_BITS * BIT))
        assert ctx.get(dut.discarding) == 0, "discarding ends once the line has been quiet for the timeout"

    simulate(dut, bench)


# --- bus masters --------------------------------------------------------------------------------------------------


def test_bus_masters_hold_requests_until_taken_and_report_responses() -> None:
    """A register write's address and data are held until each is taken, the response is accepted only after both
    and reported with its error; a memory read holds its address; a one-beat write's beat comes from registers and
    a streamed beat overrides it."""
    dut = BusMasters()
    req, regs, mem = dut.requests, dut.regs, dut.mem

    async def bench(ctx) -> None:
        ctx.set(req.reg_write, 1)
        ctx.set(req.reg_addr, 0x1234)
        ctx.set(req.reg_wdata, 0xDEADBEEF)
        await ctx.tick()
        ctx.set(req.reg_write, 0)
        ctx.set(req.reg_addr, 0)
        ctx.set(req.reg_b_wait, 1)
        ctx.set(regs.bvalid, 1)
        ctx.set(regs.bresp, 0b10)
        assert (ctx.get(regs.awvalid), ctx.get(regs.wvalid)) == (1, 1)
        assert (ctx.get(regs.awaddr), ctx.get(regs.wdata), ctx.get(regs.wstrb)) == (0x1234, 0xDEADBEEF, 0xF)
        assert ctx.get(regs.bready) == 0 and ctx.get(req.reg_b_done) == 0
        ctx.set(regs.awready, 1)
        await ctx.tick()
        ctx.set(regs.awready, 0)
        assert (ctx.get(regs.awvalid), ctx.get(regs.wvalid), ctx.get(regs.bready)) == (0, 1, 0)
        ctx.set(regs.wready, 1)
        await ctx.tick()
        ctx.set(regs.wready, 0)
        assert ctx.get(regs.bready) == 1 and ctx.get(req.reg_b_done) == 1 and ctx.get(req.reg_b_err) == 1
        ctx.set(req.reg_b_wait, 0)

        ctx.set(req.mem_read, 1)
        ctx.set(req.mem_addr, 0x100)
        ctx.set(req.mem_len, 3)
        await ctx.tick()
        ctx.set(req.mem_read, 0)
        ctx.set(req.mem_r_wait, 1)
        assert (ctx.get(mem.arvalid), ctx.get(mem.araddr), ctx.get(mem.arlen)) == (1, 0x100, 3)
        assert ctx.get(mem.rready) == 0
        ctx.set(mem.arready, 1)
        await ctx.tick()
        ctx.set(mem.arready, 0)
        ctx.set(mem.rvalid, 1)
        ctx.set(mem.rdata, 0x0102030405060708)
        assert ctx.get(req.mem_r_done) == 1 and ctx.get(req.mem_rdata) == 0x0102030405060708
        ctx.set(req.mem_r_wait, 0)
        ctx.set(mem.rvalid, 0)

        ctx.set(req.mem_write, 1)
        ctx.set(req.mem_beat, 1)
        ctx.set(req.mem_wdata, 0xAABB)
        ctx.set(req.mem_wstrb, 0x0F)
        await ctx.tick()
        ctx.set(req.mem_write, 0)
        ctx.set(req.mem_beat, 0)
        ctx.set(req.mem_wdata, 0)
        ctx.set(req.mem_wstrb, 0)
        assert (ctx.get(mem.wvalid), ctx.get(mem.wdata), ctx.get(mem.wstrb), ctx.get(mem.wlast)) == (1, 0xAABB, 0x0F, 1)
        ctx.set(req.mem_stream, 1)
        ctx.set(req.mem_wdata, 0x77)
        ctx.set(req.mem_wstrb, 0xFF)
        assert (ctx.get(mem.wdata), ctx.get(mem.wstrb), ctx.get(mem.wlast)) == (0x77, 0xFF, 0)

    simulate(dut, bench)


# --- burst cutter -------------------------------------------------------------------------------------------------


def test_cutter_splits_at_pages_and_strobes_partial_beats() -> None:
    """100 bytes from memory offset 4093 cover 14 beats: a burst up to the 4 KiB page (1 beat at 4088), then 13
    beats from 4096; the first beat strobes lanes 5..7 only, the last lane 0 only (byte 4192 ends the range)."""
    dut = BurstCutter()
    bursts = []

    async def bench(ctx) -> None:
        ctx.set(dut.byte_addr, MEM_BASE + 4093)
        ctx.set(dut.length, 100)
        ctx.set(dut.start, 1)
        await ctx.tick()
        ctx.set(dut.start, 0)
        ctx.set(dut.next, 1)
        while not ctx.get(dut.done):
            bursts.append((ctx.get(dut.addr), ctx.get(dut.len) + 1))
            await ctx.tick()
        ctx.set(dut.next, 0)
        strobes = []
        for beat in range(14):
            ctx.set(dut.beat, beat)
            strobes.append(ctx.get(dut.strb))
        assert strobes[0] == 0xE0 and strobes[1:13] == [0xFF] * 12 and strobes[13] == 0x01

    simulate(dut, bench)
    assert bursts == [(4088, 1), (4096, 13)]


def test_cutter_caps_bursts_at_256_beats() -> None:
    """4096 bytes from page offset 0 are one page: 512 beats cut as 256 and 256 (AXI4's longest burst)."""
    dut = BurstCutter()
    bursts = []

    async def bench(ctx) -> None:
        ctx.set(dut.byte_addr, MEM_BASE + 8192)
        ctx.set(dut.length, 4096)
        ctx.set(dut.start, 1)
        await ctx.tick()
        ctx.set(dut.start, 0)
        ctx.set(dut.next, 1)
        while not ctx.get(dut.done):
            bursts.append((ctx.get(dut.addr), ctx.get(dut.len) + 1))
            await ctx.tick()

    simulate(dut, bench)
    assert bursts == [(8192, 256), (8192 + 2048, 256)]


# --- frame-engine harness -----------------------------------------------------------------------------------------


class _Harness(Elaboratable):
    """A frame engine with a real CRC (and, for the buffered engines, the burst buffer), its receive, transmit and
    bus ports open to the testbench as the bridge's hubs would drive them."""

    def __init__(self, engine, buffer: bool):
        self.engine = engine
        self.crc = Crc32()
        self.buffer = PayloadBuffer() if buffer else None
        self.rx = RX_PORT.create(path=("rx",))
        self.tx = AXIStreamSignature(8).flip().create(path=("tx",))
        self.bus = BUS_PORT.create(path=("bus",))
        self.cmd_crc = CRC_PORT.flip().create(path=("cmd_crc",))  # the dispatcher's part: the command byte

    def elaborate(self, platform):
        m = Module()
        m.submodules.engine = engine = self.engine
        m.submodules.crc = self.crc
        rx, tx, crc = [engine.rx], [engine.tx], [self.cmd_crc]
        if hasattr(engine, "crc"):
            crc.append(engine.crc)
        if self.buffer is not None:
            m.submodules.buffer = buffer = self.buffer
            rx.append(buffer.rx)
            tx.append(buffer.tx)
            crc.append(buffer.crc)
            share(m, buffer.frames, [engine.buf])
        share(m, self.rx, rx)
        share(m, self.tx, tx)
        share(m, self.crc, crc)
        share(m, self.bus, [engine.bus])
        return m


async def _serve(ctx, h: _Harness, frame: bytes, bus_model, max_cycles: int = 3000) -> dict:
    """Start the engine with ``frame``'s command byte, feed it the rest whenever it listens, take every byte it
    sends, and call ``bus_model(ctx, bus)`` each cycle; return what was sent and whether ``discard`` pulsed."""
    engine, rx, tx = h.engine, h.rx, h.tx
    ctx.set(engine.start, 1)
    ctx.set(engine.cmd, frame[0])
    ctx.set(h.cmd_crc.start, 1)
    ctx.set(h.cmd_crc.data, frame[0])
    await ctx.tick()
    ctx.set(engine.start, 0)
    ctx.set(h.cmd_crc.start, 0)
    ctx.set(h.cmd_crc.data, 0)
    pending, shreg = list(frame[1:]), frame[0]
    sent, discard = [], False
    ctx.set(tx.tready, 1)
    for _ in range(max_cycles):
        if not ctx.get(engine.busy):
            return {"sent": bytes(sent), "discard": discard, "left": bytes(pending)}
        bus_model(ctx, h.bus)
        taking = bool(pending) and ctx.get(rx.listen)
        ctx.set(rx.valid, taking)
        if taking:
            ctx.set(rx.byte, pending[0])
            ctx.set(rx.field, (shreg << 8 | pending[0]) & 0xFFFF_FFFF)
        if ctx.get(tx.tvalid):
            sent.append(ctx.get(tx.tdata))
        discard |= bool(ctx.get(rx.discard))
        await ctx.tick()
        if taking:
            shreg = (shreg << 8 | pending.pop(0)) & 0xFFFF_FFFF
    raise AssertionError(f"the engine was still busy after {max_cycles} cycles; it had sent {bytes(sent)!r}")


class _Registers:
    """Answers the engine's register requests at once: reads give ``value(addr)``, writes are recorded."""

    def __init__(self, value=lambda addr: 0x1100_0000 | addr, error_at=()):
        self.value, self.error_at = value, set(error_at)
        self.reads: list[int] = []
        self.writes: list[tuple[int, int]] = []
        self.addr = 0

    def __call__(self, ctx, bus) -> None:
        ctx.set(bus.reg_b_done, ctx.get(bus.reg_b_wait))
        ctx.set(bus.reg_r_done, ctx.get(bus.reg_r_wait))
        ctx.set(bus.reg_rdata, self.value(self.addr))
        ctx.set(bus.reg_b_err, self.addr in self.error_at)
        ctx.set(bus.reg_r_err, self.addr in self.error_at)
        if ctx.get(bus.reg_read):
            self.addr = ctx.get(bus.reg_addr)
            self.reads.append(self.addr)
        if ctx.get(bus.reg_write):
            self.addr = ctx.get(bus.reg_addr)
            self.writes.append((self.addr, ctx.get(bus.reg_wdata)))


class _Memory:
    """Answers the engine's memory requests: a bytearray at offset 0 of the memory window, bursts served a beat a
    cycle; records each burst (write or read, address, beats) and each written beat (data, strobes, last)."""

    def __init__(self, data: bytes = bytes(64)):
        self.data = bytearray(data)
        self.bursts: list[tuple[str, int, int]] = []
        self.beats: list[tuple[int, int, int]] = []
        self.reading: list[int] = []

    def __call__(self, ctx, bus) -> None:
        ctx.set(bus.mem_b_done, ctx.get(bus.mem_b_wait))
        ctx.set(bus.mem_wready, 1)
        if ctx.get(bus.mem_stream):
            data, strb = ctx.get(bus.mem_wdata), ctx.get(bus.mem_wstrb)
            self.beats.append((data, strb, ctx.get(bus.mem_wlast)))
        answering = bool(self.reading) and ctx.get(bus.mem_r_wait)
        ctx.set(bus.mem_r_done, answering)
        if answering:
            addr = self.reading.pop(0)
            ctx.set(bus.mem_rdata, int.from_bytes(self.data[addr:addr + 8], "little"))
            ctx.set(bus.mem_rlast, not self.reading)
        for kind in ("write", "read"):
            if ctx.get(getattr(bus, f"mem_{kind}")):
                addr, beats = ctx.get(bus.mem_addr), ctx.get(bus.mem_len) + 1
                self.bursts.append((kind, addr, beats))
                if kind == "read":
                    self.reading = [addr + 8 * i for i in range(beats)]


def _serve_one(engine, buffer: bool, frame: bytes, bus_model) -> dict:
    h = _Harness(engine, buffer)
    result = {}

    async def bench(ctx) -> None:
        result.update(await _serve(ctx, h, frame, bus_model))

    simulate(h, bench)
    return result


# --- dispatcher ---------------------------------------------------------------------------------------------------


def test_dispatch_starts_the_engine_a_command_byte_names() -> None:
    """Idle, each command byte pulses its engine's start and starts the CRC with it; other bytes start nothing;
    while busy nothing starts and the CRC is left alone."""
    dut = FrameDispatch()
    cases = [(FrameCommand.UARTBONE_READ_FIXED, "uartbone"), (FrameCommand.BURST_READ, "burst"),
             (FrameCommand.REG_WRITE, "reg_frame"), (0x55, None)]

    async def bench(ctx) -> None:
        ctx.set(dut.rx.valid, 1)
        for byte, engine in cases:
            ctx.set(dut.rx.byte, byte)
            starts = {name: ctx.get(getattr(dut, name)) for name in ("uartbone", "burst", "reg_frame")}
            assert starts == {name: int(name == engine) for name in starts}, hex(byte)
            assert (ctx.get(dut.idle), ctx.get(dut.crc.start), ctx.get(dut.crc.data)) == (1, 1, byte)
        ctx.set(dut.busy, 1)
        ctx.set(dut.rx.byte, FrameCommand.BURST_WRITE)
        assert (ctx.get(dut.burst), ctx.get(dut.idle), ctx.get(dut.crc.start), ctx.get(dut.crc.data)) == (0, 0, 0, 0)

    simulate(dut, bench, clocked=False)


# --- UARTBone -----------------------------------------------------------------------------------------------------


def test_uartbone_read_answers_each_register_word_big_endian() -> None:
    """A UARTBone read of 3 register words reads 0x100, 0x104, 0x108 one at a time and answers each word
    big-endian; the _FIXED read reads one address three times; an unmapped word answers AXI_ERROR_WORD."""
    regs = _Registers()
    out = _serve_one(UartBoneEngine(), False, frames.uartbone_read_frame(0x100, 3), regs)
    assert regs.reads == [0x100, 0x104, 0x108]
    assert out["sent"] == frames.pack_words([0x1100_0100, 0x1100_0104, 0x1100_0108]) and not out["left"]

    fixed = bytearray(frames.uartbone_read_frame(0x20, 3))
    fixed[0] = FrameCommand.UARTBONE_READ_FIXED
    regs = _Registers()
    _serve_one(UartBoneEngine(), False, bytes(fixed), regs)
    assert regs.reads == [0x20] * 3

    regs = _Registers(error_at={0x10})
    out = _serve_one(UartBoneEngine(), False, frames.uartbone_read_frame(0x10, 1), regs)
    assert out["sent"] == frames.pack_words([AXI_ERROR_WORD]), "an error response answers the error word"
    out = _serve_one(UartBoneEngine(), False, frames.uartbone_read_frame(0x4000_0000, 1), _Registers())
    assert out["sent"] == frames.pack_words([AXI_ERROR_WORD]), "outside both windows answers the error word"


def test_uartbone_write_goes_to_registers_and_memory_lanes() -> None:
    """A UARTBone write of two words to registers writes each once; to memory each word is a one-beat burst at its
    beat address with the word in both halves and only its own lanes strobed."""
    regs = _Registers()
    out = _serve_one(UartBoneEngine(), False, frames.uartbone_write_frame(0x40, [0xA1B2C3D4, 0x01020304]), regs)
    assert regs.writes == [(0x40, 0xA1B2C3D4), (0x44, 0x01020304)] and out["sent"] == b""

    written = []

    def memory(ctx, bus) -> None:
        ctx.set(bus.mem_b_done, ctx.get(bus.mem_b_wait))
        if ctx.get(bus.mem_write):
            written.append((ctx.get(bus.mem_addr), ctx.get(bus.mem_len), ctx.get(bus.mem_beat),
                            ctx.get(bus.mem_wdata), ctx.get(bus.mem_wstrb)))

    _serve_one(UartBoneEngine(), False, frames.uartbone_write_frame(MEM_BASE + 0x18, [0x11223344, 0x55667788]),
               memory)
    assert written == [(0x18, 0, 1, 0x11223344_11223344, 0x0F), (0x18, 0, 1, 0x55667788_55667788, 0xF0)]


# --- burst buffer -------------------------------------------------------------------------------------------------


class _BufferHarness(Elaboratable):
    def __init__(self):
        self.buffer, self.crc = PayloadBuffer(), Crc32()
        self.rx = RX_PORT.create(path=("rx",))
        self.tx = AXIStreamSignature(8).flip().create(path=("tx",))
        self.crc_user = CRC_PORT.flip().create(path=("crc_user",))

    def elaborate(self, platform):
        m = Module()
        m.submodules.buffer, m.submodules.crc = self.buffer, self.crc
        share(m, self.rx, [self.buffer.rx])
        share(m, self.tx, [self.buffer.tx])
        share(m, self.crc, [self.buffer.crc, self.crc_user])
        return m


def test_buffer_receives_at_an_offset_checks_the_crc_and_sends_back() -> None:
    """Five payload bytes received at offset 3 land in lanes 3..7 of word 0; the frame's CRC is checked (a good one
    and a bad one); sending from offset 3 gives the five bytes and their CRC."""
    h = _BufferHarness()
    port = h.buffer.frames
    payload = b"\x10\x20\x30\x40\x50"
    checks = []

    async def feed(ctx, data: bytes) -> None:
        shreg = 0
        for byte in data:
            while not ctx.get(h.rx.listen):
                await ctx.tick()
            ctx.set(h.rx.valid, 1)
            ctx.set(h.rx.byte, byte)
            ctx.set(h.rx.field, (shreg << 8 | byte) & 0xFFFF_FFFF)
            if ctx.get(port.received):
                checks.append(ctx.get(port.crc_ok))
            await ctx.tick()
            shreg = shreg << 8 | byte
        ctx.set(h.rx.valid, 0)

    async def bench(ctx) -> None:
        for crc in (frames.crc_bytes(payload), b"\0\0\0\0"):
            ctx.set(h.crc_user.restart, 1)
            ctx.set(port.receive, 1)
            ctx.set(port.offset, 3)
            ctx.set(port.length, len(payload))
            await ctx.tick()
            for name in ("receive", "offset", "length"):
                ctx.set(getattr(port, name), 0)
            ctx.set(h.crc_user.restart, 0)
            await feed(ctx, payload + crc)
        assert checks == [1, 0]
        ctx.set(port.r_addr, 0)
        await ctx.tick()
        assert ctx.get(port.r_data).to_bytes(8, "little")[3:] == payload

        ctx.set(port.send, 1)
        ctx.set(port.offset, 3)
        ctx.set(port.length, len(payload))
        await ctx.tick()
        ctx.set(port.send, 0)
        ctx.set(h.tx.tready, 1)
        sent = []
        for _ in range(40):
            if ctx.get(h.tx.tvalid):
                sent.append(ctx.get(h.tx.tdata))
            if ctx.get(port.sent):
                break
            await ctx.tick()
        assert bytes(sent) == payload + frames.crc_bytes(payload)

    simulate(h, bench)


# --- burst engine -------------------------------------------------------------------------------------------------


def test_burst_write_is_cut_into_strobed_beats() -> None:
    """An 11-byte write at memory offset 5 is ACKed and written as one 2-beat INCR burst: lanes 5..7, then all 8."""
    mem = _Memory()
    payload = bytes(range(1, 12))
    out = _serve_one(BurstEngine(), True, frames.burst_write_frame(MEM_BASE + 5, payload), mem)
    assert out["sent"] == bytes([FrameStatus.ACK]) and not out["discard"]
    assert mem.bursts == [("write", 0, 2)]
    first = int.from_bytes(bytes(5) + payload[:3], "little")
    assert [(strb, last) for _, strb, last in mem.beats] == [(0xE0, 0), (0xFF, 1)]
    assert mem.beats[0][0] & 0xFFFFFF00_00000000 == first & 0xFFFFFF00_00000000
    assert mem.beats[1][0] == int.from_bytes(payload[3:], "little")


def test_burst_write_with_a_bad_payload_crc_writes_nothing() -> None:
    """A payload whose CRC does not match answers NAK_CRC and writes nothing."""
    mem = _Memory()
    frame = bytearray(frames.burst_write_frame(MEM_BASE, b"abcd"))
    frame[-1] ^= 0x01
    out = _serve_one(BurstEngine(), True, bytes(frame), mem)
    assert out["sent"] == bytes([FrameStatus.NAK_CRC]) and mem.bursts == []


def test_burst_read_answers_status_payload_and_crc() -> None:
    """A 6-byte read at offset 3 reads two beats and answers ACK, the six bytes and their CRC."""
    mem = _Memory(bytes(range(100, 164)))
    out = _serve_one(BurstEngine(), True, frames.burst_read_frame(MEM_BASE + 3, 6), mem)
    data = bytes(mem.data[3:9])
    assert mem.bursts == [("read", 0, 2)]
    assert out["sent"] == bytes([FrameStatus.ACK]) + data + frames.crc_bytes(data)


def test_burst_header_naks() -> None:
    """A header with a bad CRC is refused with NAK_CRC and the line discarded; a read header with a good CRC and a
    range outside the memory window with NAK_RANGE and nothing discarded; neither touches memory."""
    mem = _Memory()
    header = bytearray(frames.burst_read_frame(MEM_BASE, 8))
    header[2] ^= 0x40
    out = _serve_one(BurstEngine(), True, bytes(header), mem)
    assert out["sent"] == bytes([FrameStatus.NAK_CRC]) and out["discard"]
    out = _serve_one(BurstEngine(), True, frames.burst_read_frame(0x1000, 8), mem)
    assert out["sent"] == bytes([FrameStatus.NAK_RANGE]) and not out["discard"]
    assert mem.bursts == []


# --- register frames ----------------------------------------------------------------------------------------------


def test_reg_read_frame_answers_words_and_crc() -> None:
    """A register read of two words at 0x10 reads 0x10 and 0x14 and answers ACK, the words big-endian and their
    CRC; an error response on one answers BUS_ERROR after reading every word."""
    regs = _Registers()
    out = _serve_one(RegFrameEngine(), True, frames.reg_read_frame(0x10, 2), regs)
    words = frames.pack_words([0x1100_0010, 0x1100_0014])
    assert regs.reads == [0x10, 0x14]
    assert out["sent"] == bytes([FrameStatus.ACK]) + words + frames.crc_bytes(words)
    regs = _Registers(error_at={0x10})
    out = _serve_one(RegFrameEngine(), True, frames.reg_read_frame(0x10, 2), regs)
    assert regs.reads == [0x10, 0x14] and out["sent"] == bytes([FrameStatus.BUS_ERROR])


def test_reg_write_frame_writes_once_the_crc_checks() -> None:
    """A register write of three words is written word by word after the CRC and ACKed; with a bad CRC nothing is
    written, NAK_CRC answers and the line is discarded; an unaligned address answers NAK_RANGE at once."""
    regs = _Registers()
    out = _serve_one(RegFrameEngine(), True, frames.reg_write_frame(0x20, [1, 0x22334455, 3]), regs)
    assert regs.writes == [(0x20, 1), (0x24, 0x22334455), (0x28, 3)] and out["sent"] == bytes([FrameStatus.ACK])
    frame = bytearray(frames.reg_write_frame(0x20, [1, 2]))
    frame[-2] ^= 0x10
    regs = _Registers()
    out = _serve_one(RegFrameEngine(), True, bytes(frame), regs)
    assert regs.writes == [] and out["sent"] == bytes([FrameStatus.NAK_CRC]) and out["discard"]
    out = _serve_one(RegFrameEngine(), True, frames.reg_write_frame(0x22, [1]), regs)
    assert regs.writes == [] and out["sent"] == bytes([FrameStatus.NAK_RANGE]) and not out["discard"]


def test_bridge_keeps_its_constructor_checks() -> None:
    """The composed bridge still refuses a clock too slow for its baud rate with the UART's message."""
    with pytest.raises(ValueError, match="^UART bridge clock frequency must be at least 8 times the baud rate"):
        UartBridge(7, 1)
