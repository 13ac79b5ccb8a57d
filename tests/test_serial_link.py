"""The serial transport end to end against the Python UART bridge serving the golden model, clean and faulty."""

from __future__ import annotations

import socket
import struct
import zlib

import numpy as np
import pytest
from dx1_driver import Device, DriverError, TransportError, frames, open_transport, regs
from dx1_driver.link import AXI_ERROR_WORD, BRIDGE_RX_FIFO, MEM_BASE, REG_BYTES, FrameCommand, FrameStatus
from dx1_driver.serial_device import DEFAULT_TIMEOUT, REG_FRAMINGS, SerialDeviceString, parse_serial_device
from dx1_driver.serial_transport import MAX_POSTED_WRITES, SerialTransport

from dx1_bringup.backends import loopback_model_transport
from dx1_bringup.faults import LineFaults
from dx1_bringup.model.bridge import ModelBridge
from dx1_bringup.model.device import BusError, DeviceModel
from dx1_bringup.runtime.gemm_run import run_gemm
from dx1_bringup.runtime.reference import reference_gemm
from dx1_bringup.spec import PostOpParams

GLOBAL = regs.BLOCK_BASES["GLOBAL"]


@pytest.fixture
def link():
    t = loopback_model_transport()
    yield t
    t.close()


def _gemm_operands(seed: int, m: int, k: int, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return (rng.integers(-128, 128, (m, k), dtype=np.int8), rng.integers(-128, 128, (k, n), dtype=np.int8),
            rng.integers(-1000, 1000, n, dtype=np.int32))


# -- framing ----------------------------------------------------------------------------------------


def test_burst_header_layout():
    h = frames.burst_header(FrameCommand.BURST_READ, 0x8000_1234, 4096)
    assert h[:9] == bytes([FrameCommand.BURST_READ, 0x80, 0x00, 0x12, 0x34, 0x00, 0x00, 0x10, 0x00])
    assert h[9:] == zlib.crc32(h[:9]).to_bytes(4, "big") and len(h) == 13


@pytest.mark.parametrize("spec, url, baud", [
    ("serial:/dev/ttyUSB0", "/dev/ttyUSB0", 3_000_000),
    ("serial:/dev/ttyUSB0@115200", "/dev/ttyUSB0", 115200),
    ("serial:socket://127.0.0.1:5555@3000000", "socket://127.0.0.1:5555", 3_000_000),
    ("serial:rfc2217://host:4000", "rfc2217://host:4000", 3_000_000),
])
def test_parse_serial_device_url_and_baud(spec, url, baud):
    parsed = parse_serial_device(spec)
    assert (parsed.url, parsed.baud) == (url, baud)


@pytest.mark.parametrize("spec", ["serial:", "serial:@9600", "serial:/dev/ttyUSB0@0", "serial:/dev/ttyUSB0@",
                                  "serial:,timeout=5", "serial:/dev/ttyUSB0@x,timeout=5"])
def test_parse_serial_device_url_errors(spec):
    with pytest.raises(ValueError) as info:
        parse_serial_device(spec)
    assert str(info.value) == (f"device {spec!r}: expected serial:URL or serial:URL@BAUD, for example "
                               f"serial:/dev/ttyUSB0@115200 or serial:socket://127.0.0.1:5555")


@pytest.mark.parametrize("spec, expected", [
    ("serial:/dev/ttyUSB0", SerialDeviceString("/dev/ttyUSB0", 3_000_000, 1.0, 5, "crc")),
    ("serial:/dev/ttyUSB0,regs=uartbone", SerialDeviceString("/dev/ttyUSB0", 3_000_000, 1.0, 5, "uartbone")),
    ("serial:/dev/ttyUSB0@9600,regs=crc,retries=1", SerialDeviceString("/dev/ttyUSB0", 9600, 1.0, 1, "crc")),
    ("serial:socket://127.0.0.1:5555@6250000,timeout=60",
     SerialDeviceString("socket://127.0.0.1:5555", 6_250_000, 60.0)),
    ("serial:/dev/ttyUSB0,retries=0,timeout=0.5", SerialDeviceString("/dev/ttyUSB0", 3_000_000, 0.5, 0)),
    ("serial:rfc2217://host:4000@115200,retries=12", SerialDeviceString("rfc2217://host:4000", 115200, 1.0, 12)),
])
def test_parse_serial_device_options(spec, expected):
    assert parse_serial_device(spec) == expected


@pytest.mark.parametrize("spec, message", [
    ("serial:/dev/ttyUSB0,timeout=0", "timeout must be a positive number of seconds, not '0'"),
    ("serial:/dev/ttyUSB0,timeout=-1", "timeout must be a positive number of seconds, not '-1'"),
    ("serial:/dev/ttyUSB0,timeout=inf", "timeout must be a positive number of seconds, not 'inf'"),
    ("serial:/dev/ttyUSB0,timeout=soon", "timeout must be a positive number of seconds, not 'soon'"),
    ("serial:/dev/ttyUSB0,retries=1.5", "retries must be a non-negative integer, not '1.5'"),
    ("serial:/dev/ttyUSB0,retries=-1", "retries must be a non-negative integer, not '-1'"),
    ("serial:/dev/ttyUSB0,timeout=1,timeout=2", "option 'timeout' given twice"),
    ("serial:/dev/ttyUSB0,baud=9600", "unknown option 'baud=9600'; expected serial:URL[@BAUD][,timeout=SECONDS]"
                                      "[,retries=N][,regs=crc|uartbone], for example serial:/dev/ttyUSB0@115200 or "
                                      "serial:socket://127.0.0.1:5555@6250000,timeout=60"),
    ("serial:/dev/ttyUSB0,regs=litex", "regs must be 'crc' or 'uartbone', not 'litex'"),
    ("serial:/dev/ttyUSB0,regs=crc,regs=crc", "option 'regs' given twice"),
    ("serial:/dev/ttyUSB0,timeout", "unknown option 'timeout'; expected serial:URL[@BAUD]"),
])
def test_parse_serial_device_option_errors(spec, message):
    with pytest.raises(ValueError) as info:
        parse_serial_device(spec)
    assert str(info.value).startswith(f"device {spec!r}: {message}")


def test_timeout_must_be_positive():
    with pytest.raises(ValueError, match=r"^timeout must be a positive number of seconds, not 0$"):
        SerialTransport("loop://", timeout=0)


def test_register_framing_must_be_known():
    with pytest.raises(ValueError, match=r"^regs must be 'crc' or 'uartbone', not 'wishbone'$"):
        SerialTransport("loop://", regs="wishbone")


def test_open_transport_dispatches_serial_urls():
    model = DeviceModel()
    bridge = ModelBridge(model, model.config.mem_bytes, (BusError,))
    try:
        with open_transport(f"serial:{bridge.url}@115200") as t:
            assert isinstance(t, SerialTransport) and t.mem_bytes == model.config.mem_bytes
            assert t.read32(GLOBAL + regs.Global.MAGIC) == regs.MAGIC
            assert (t.timeout, t.retries, t.regs) == (DEFAULT_TIMEOUT, 5, "crc")
        with open_transport(f"serial:{bridge.url}@115200,timeout=7.5,retries=2,regs=uartbone") as t:
            assert (t.timeout, t.retries, t.regs) == (7.5, 2, "uartbone")
            assert t.read32(GLOBAL + regs.Global.MAGIC) == regs.MAGIC
    finally:
        bridge.close()


def test_unreachable_port_is_a_transport_error():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # bound, not listening
        with pytest.raises(TransportError, match=rf"^cannot open serial port 'socket://127.0.0.1:{port}': "):
            open_transport(f"serial:socket://127.0.0.1:{port}")


# -- registers ---------------------------------------------------------------------------------------


def test_register_read_write(link):
    link.write32(GLOBAL + regs.Global.SCRATCH, 0x1234_5678)
    assert link.read32(GLOBAL + regs.Global.SCRATCH) == 0x1234_5678
    assert link.bridge.target.read32(GLOBAL + regs.Global.SCRATCH) == 0x1234_5678
    # A refused access is an AXI error: a CRC register frame reports it, and the transport raises once the
    # bridge has said so twice in a row.
    resets = link.stats.resyncs
    with pytest.raises(TransportError, match=r"^serial link to '.*': register read at 0x34: the bridge answered "
                                             r"a bus error, twice in a row$"):
        link.read32(GLOBAL + regs.Global.RESET)
    link.write32(GLOBAL + regs.Global.ID, 5)
    with pytest.raises(TransportError, match=r"^serial link to '.*': register write at 0x0: the bridge answered "
                                             r"a bus error, twice in a row \(found by the register read at 0x28\)$"):
        link.read32(GLOBAL + regs.Global.SCRATCH)
    assert link.stats.resyncs > resets
    # the link goes on
    assert link.read32(GLOBAL + regs.Global.ID) == regs.BlockType.GLOBAL
    link.write32(GLOBAL + regs.Global.SCRATCH, 9)
    assert link.read32(GLOBAL + regs.Global.SCRATCH) == 9


def test_uartbone_register_read_write():
    with loopback_model_transport(regs="uartbone") as link:
        link.write32(GLOBAL + regs.Global.SCRATCH, 0x1234_5678)
        assert link.read32(GLOBAL + regs.Global.SCRATCH) == 0x1234_5678
        # A refused access is an AXI error: the read answers all ones and the write is lost, without a word.
        assert link.read32(GLOBAL + regs.Global.RESET) == AXI_ERROR_WORD
        link.write32(GLOBAL + regs.Global.ID, 5)
        assert link.read32(GLOBAL + regs.Global.ID) == regs.BlockType.GLOBAL
        assert link.stats.round_trips == 2 + 3, "MEM_BYTES is read twice at open, then one frame per read"
        assert link.stats.write_flushes == 0


def test_register_writes_are_confirmed_by_the_next_exchange(link):
    """CRC register writes go out at once; their statuses come back ahead of the next answer, in one round trip."""
    q = regs.BLOCK_BASES["QUEUE0"]
    before = link.stats.round_trips
    for i in range(5):
        link.write32(q + regs.Queue.IRQ_MASK, i & 3)
        link.write32(GLOBAL + regs.Global.SCRATCH, i)
    assert link.stats.round_trips == before, "writes do not wait"
    assert link.read_u32s(GLOBAL + regs.Global.SCRATCH, 1) == [4]
    assert link.stats.round_trips == before + 1 and link.stats.write_flushes == 0
    # more than MAX_POSTED_WRITES writes in a row: one round trip collects the statuses
    for i in range(MAX_POSTED_WRITES + 1):
        link.write32(GLOBAL + regs.Global.SCRATCH, 100 + i)
    assert link.stats.write_flushes == 1 and link.stats.round_trips == before + 2
    # a memory access collects them too
    link.write32(GLOBAL + regs.Global.SCRATCH, 7)
    assert link.read_block(0, 4) == link.bridge.target.mem_read(0, 4)
    assert link.stats.round_trips == before + 3 and link.stats.write_flushes == 1
    link.write32(GLOBAL + regs.Global.SCRATCH, 8)
    link.flush()
    assert link.stats.write_flushes == 2
    link.flush()
    assert link.stats.write_flushes == 2, "nothing to flush"
    assert link.bridge.target.read32(GLOBAL + regs.Global.SCRATCH) == 8


def test_a_write_that_fails_is_reported_by_close():
    t = loopback_model_transport()
    t.write32(GLOBAL + regs.Global.VERSION, 1)  # read-only: a bus error
    with pytest.raises(TransportError, match=r"register write at 0x4: the bridge answered a bus error"):
        t.close()
    assert t.closed


def test_model_bridge_answers_register_frames_as_the_gateware_does():
    """The Python bridge answers as the RTL does (testbenches/bridge checks the same cases on the gateware)."""
    model = DeviceModel()
    bridge = ModelBridge(model, model.config.mem_bytes, (BusError,), idle_timeout=0.02)
    scratch = GLOBAL + regs.Global.SCRATCH
    try:
        with socket.create_connection(("127.0.0.1", bridge.port)) as s:
            s.settimeout(1)

            def exchange(frame: bytes, n: int) -> bytes:
                s.sendall(frame)
                got = b""
                while len(got) < n:
                    got += s.recv(n - len(got))
                return got

            ack, nak_crc, nak_range, bus = (bytes([v]) for v in (FrameStatus.ACK, FrameStatus.NAK_CRC,
                                                                 FrameStatus.NAK_RANGE, FrameStatus.BUS_ERROR))
            assert exchange(frames.reg_write_frame(scratch, [0xCAFE]), 1) == ack
            assert model.read32(scratch) == 0xCAFE
            answer = exchange(frames.reg_read_frame(GLOBAL, 3), 1 + 12 + 4)
            words = [model.read32(GLOBAL + 4 * i) for i in range(3)]
            assert answer == ack + struct.pack(">3I", *words) + struct.pack(">I", zlib.crc32(answer[1:13]))
            # SCRATCH + 4 is CYCLES_LO, read-only: every word is tried, the refused one is not written
            assert exchange(frames.reg_write_frame(scratch, [0xBEEF, 1]), 1) == bus
            assert model.read32(scratch) == 0xBEEF
            assert exchange(frames.reg_read_frame(GLOBAL + regs.Global.RESET, 1), 1) == bus  # write-only
            for addr, n in ((scratch + 2, 1), (REG_BYTES - 4, 2), (scratch, 0), (MEM_BASE, 1)):
                assert exchange(frames.reg_write_frame(addr, list(range(n))), 1) == nak_range, (addr, n)
                assert exchange(frames.reg_read_frame(addr, n), 1) == nak_range, (addr, n)
            assert model.read32(scratch) == 0xBEEF
            # a bad CRC: NAK, and the line is ignored until it goes quiet, so the next frame is dropped
            frame = bytearray(frames.reg_write_frame(scratch, [1]))
            frame[7] ^= 0x10
            assert exchange(bytes(frame) + frames.reg_write_frame(scratch, [2]), 1) == nak_crc
            s.settimeout(0.2)
            with pytest.raises(TimeoutError):
                s.recv(1)
            assert model.read32(scratch) == 0xBEEF
            assert exchange(frames.reg_write_frame(scratch, [3]), 1) == ack and model.read32(scratch) == 3
    finally:
        bridge.close()


def test_read_u32s_is_one_frame_per_255_registers(link):
    model = link.bridge.target
    before = link.round_trips
    values = link.read_u32s(GLOBAL, 13)
    assert link.round_trips - before == 1
    assert values == [model.read32(GLOBAL + 4 * i) for i in range(13)]
    with pytest.raises(ValueError, match="outside the register space"):
        link.read_u32s(REG_BYTES - 8, 3)
    # A register space where every word reads: 300 words are two frames, in either framing.
    for framing in REG_FRAMINGS:
        bridge = ModelBridge(_EveryWordReads(), 4096, (BusError,))
        with SerialTransport(bridge.url, regs=framing, timeout=0.5, quiet=0.05) as t:
            before = t.round_trips
            assert t.read_u32s(0x100, 300) == [_EveryWordReads.value(0x100 + 4 * i) for i in range(300)], framing
            assert t.round_trips - before == 2, framing
        bridge.close()


class _EveryWordReads:
    """A register target that answers every read with a value made from its address."""

    @staticmethod
    def value(addr: int) -> int:
        return addr ^ 0x5A5A_0000

    def read32(self, addr: int) -> int:
        return self.value(addr)

    def write32(self, addr: int, value: int) -> None:
        pass


# -- memory ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("size", [1, 3, 4095, 4096, 4097, 12_345, 40_001])
def test_memory_round_trip(link, size):
    rng = np.random.default_rng(size)
    for offset in (0, 1, 7, 1000):
        data = rng.integers(0, 256, size, dtype=np.uint8).tobytes()
        guard = link.read_block(offset + size, 8)
        link.write_block(offset, data)
        assert link.bridge.target.mem_read(offset, size) == data
        assert link.read_block(offset, size) == data
        assert link.read_block(offset + size, 8) == guard, "a write spilled past its end"
    assert link.retries_done == 0


def test_bulk_transfers_are_windowed_as_the_bridge_allows(link):
    """The bridge takes no byte while it sends an answer and holds 16 meanwhile: one more read header.

    So reads go two bursts a window and verified writes one (the read-back is an answer); plain writes,
    answered by a status byte each, go eight bursts a window.
    """
    data = bytes(range(256)) * 256  # 64 KiB: 16 bursts
    before = link.round_trips
    link.write_block(0, data)
    assert link.round_trips - before == 16, "one verified 4 KiB burst per window"
    before = link.round_trips
    assert link.read_block(0, len(data)) == data
    assert link.round_trips - before == 8, "2 read bursts of 4 KiB per window"
    assert 2 * frames.burst_read_frame(0, 1).__len__() > BRIDGE_RX_FIFO >= len(frames.burst_read_frame(0, 1))
    with loopback_model_transport(verify_writes=False) as t:
        before = t.round_trips
        t.write_block(0, data)
        assert t.round_trips - before == 2, "8 plain write bursts of 4 KiB per window"
        assert t.read_block(0, len(data)) == data


@pytest.mark.parametrize("framing", REG_FRAMINGS)
def test_link_stats_count_the_line(framing):
    crc = framing == "crc"
    with loopback_model_transport(regs=framing) as link:
        stats = link.stats
        # MEM_BYTES is read once at open in a CRC frame, twice (no CRC) in UARTBone frames
        assert stats.round_trips == link.round_trips == (1 if crc else 2)
        sent, received, trips = stats.bytes_sent, stats.bytes_received, stats.round_trips
        link.write32(GLOBAL + regs.Global.SCRATCH, 7)
        assert (stats.posted_writes, stats.bytes_sent - sent) == (1, 14 if crc else 10)
        assert link.read_u32s(GLOBAL, 3)[0] == regs.BlockType.GLOBAL
        # the write's status comes back ahead of the read's status, words and CRC
        assert (stats.round_trips - trips, stats.bytes_sent - sent, stats.bytes_received - received) == (
            (1, 24, 1 + 1 + 12 + 4) if crc else (1, 16, 12))
        sent, received = stats.bytes_sent, stats.bytes_received
        link.write_block(0, bytes(100))
        # header, payload and CRC, then the read-back's header; status, then status, payload and CRC back
        assert stats.bytes_sent - sent == 13 + 100 + 4 + 13
        assert stats.bytes_received - received == 1 + 1 + 100 + 4
        assert (stats.retries, stats.resyncs, stats.write_flushes) == (0, 0, 0)
        assert stats.summary() == (f"{stats.round_trips} round trips (0 for write statuses), 1 posted register "
                                   f"writes, 0 retries, 0 resyncs, {stats.bytes_sent} bytes sent, "
                                   f"{stats.bytes_received} received")


def test_frame_builders_are_the_wire_format():
    assert frames.uartbone_read_frame(0x8000_0010, 3) == bytes([FrameCommand.UARTBONE_READ, 3]) + (
        0x8000_0010 >> 2).to_bytes(4, "big")
    assert frames.uartbone_write_frame(0x40, [0x01020304, 5]) == bytes(
        [FrameCommand.UARTBONE_WRITE, 2, 0, 0, 0, 0x10, 1, 2, 3, 4, 0, 0, 0, 5])
    frame = frames.burst_write_frame(0x8000_0001, b"abc")
    header = frames.burst_header(FrameCommand.BURST_WRITE, 0x8000_0001, 3)
    assert frame == header + b"abc" + struct.pack(">I", zlib.crc32(b"abc"))
    assert frames.burst_read_frame(0x8000_0001, 9) == frames.burst_header(FrameCommand.BURST_READ, 0x8000_0001, 9)


def test_dx1_gemm_prints_the_link_statistics(capsys):
    from dx1_bringup.cli import main

    model = DeviceModel()
    bridge = ModelBridge(model, model.config.mem_bytes, (BusError,))
    try:
        assert main(["gemm", "16", "8", "8", "--device", f"serial:{bridge.url},timeout=5"]) == 0
    finally:
        bridge.close()
    out = capsys.readouterr().out
    link = [line for line in out.splitlines() if line.startswith("  link ")]
    assert len(link) == 1 and " round trips (" in link[0] and " 0 retries, " in link[0], out
    assert int(link[0].split()[1]) > 5, "discovery and the GEMM take several round trips"
    assert "dx1 gemm: PASS" in out


def test_device_and_gemm(link):
    with Device(link) as dev:
        assert [b.type.name for b in dev.blocks] == ["GLOBAL", "QUEUE", "QUEUE", "PERF", "PERF", "TRACE", "TRACE",
                                                     "LINK"]
        a, b, bias = _gemm_operands(1, 33, 40, 17)
        post = PostOpParams(mult=181, shift=17, relu=True)
        out, _ = run_gemm(dev, a, b, bias, post)
        np.testing.assert_array_equal(out, reference_gemm(a, b, bias, post))


# -- faults ------------------------------------------------------------------------------------------


def _inject(t: SerialTransport, rate: float, seed: int, scope: str) -> LineFaults:
    """Turn faults on after a clean open, so that the size read at open is right."""
    faults = LineFaults(rate, rate, rate, seed=seed, scope=scope)
    t.bridge.faults = faults
    return faults


@pytest.mark.parametrize("rate", [1e-4, 1e-3])
def test_memory_never_returns_wrong_data_under_faults(rate):
    """Faults on every byte in both directions: each round trip is right or a TransportError, never wrong."""
    with loopback_model_transport(retries=12) as t:
        faults = _inject(t, rate, seed=7, scope="all")
        rng = np.random.default_rng(3)
        good = errors = 0
        for i in range(4 if rate >= 1e-3 else 8):
            size = int(rng.integers(1, 2000))
            offset = 4096 + int(rng.integers(0, 50_000))  # away from offsets < 64, see the module docstring
            data = rng.integers(0, 256, size, dtype=np.uint8).tobytes()
            try:
                t.write_block(offset, data)
                back = t.read_block(offset, size)
            except TransportError as e:
                assert "failed after 12 retries; last failure: " in str(e)
                errors += 1
                continue
            assert back == data, f"round trip {i} returned wrong data"
            good += 1
        assert faults.flipped + faults.dropped + faults.duplicated > 0
        assert t.retries_done > 0
        assert good > errors, (good, errors)


@pytest.mark.parametrize("rate", [1e-4, 1e-3])
def test_gemms_under_faults_on_the_bulk_traffic(rate):
    """Faults on the CRC-protected traffic (bursts and their answers): every GEMM comes out right."""
    with loopback_model_transport(retries=30) as t:
        faults = _inject(t, rate, seed=11, scope="bursts")
        dev = Device(t)
        for seed in range(4 if rate < 1e-3 else 1):
            a, b, bias = _gemm_operands(seed, 24, 40, 24)
            out, _ = run_gemm(dev, a, b, bias)
            np.testing.assert_array_equal(out, reference_gemm(a, b, bias))
        assert faults.flipped > 0 and t.retries_done > 0


def test_gemms_under_faults_everywhere_come_out_right():
    """At 1e-4 on every byte, register traffic is hit too: CRC register frames retry it, so every GEMM is right."""
    with loopback_model_transport(retries=10) as t:
        dev = Device(t)
        faults = _inject(t, 1e-4, seed=5, scope="all")
        for seed in range(6):
            a, b, bias = _gemm_operands(seed, 16, 24, 16)
            out, _ = run_gemm(dev, a, b, bias)
            np.testing.assert_array_equal(out, reference_gemm(a, b, bias))
        assert faults.flipped + faults.dropped + faults.duplicated > 0 and t.retries_done > 0


def test_uartbone_gemms_under_faults_everywhere_fail_loudly_or_not_at_all():
    """At 1e-4 on every byte, UARTBone register traffic is hit too: a GEMM is right or raises a DriverError."""
    with loopback_model_transport(retries=10, regs="uartbone") as t:
        dev = Device(t)
        _inject(t, 1e-4, seed=5, scope="all")
        outcomes = []
        for seed in range(6):
            a, b, bias = _gemm_operands(seed, 16, 24, 16)
            try:
                out, _ = run_gemm(dev, a, b, bias)
            except DriverError as e:
                outcomes.append(type(e).__name__)
                dev.reset()
                continue
            np.testing.assert_array_equal(out, reference_gemm(a, b, bias))
            outcomes.append("ok")
        assert outcomes.count("ok") >= 4, outcomes


def test_gives_up_with_a_clear_error():
    with loopback_model_transport(retries=2) as t:
        _inject(t, 0.05, seed=1, scope="bursts")
        with pytest.raises(TransportError, match=r"^serial link to 'socket://127\.0\.0\.1:\d+': memory read of "
                                                 r"4096 bytes at 0x0 failed after 2 retries; last failure: burst"):
            t.read_block(0, 4096)
        assert t.retries_done == 2
        t.bridge.faults = LineFaults()
        t.write_block(0, b"still works")
        assert t.read_block(0, 11) == b"still works"


def test_lost_bytes_are_a_timeout_then_a_retry():
    with loopback_model_transport(retries=20) as t:
        t.bridge.faults = LineFaults(drop_rate=0.005, seed=2, scope="bursts")
        data = bytes(range(256)) * 2
        t.write_block(100, data)
        assert t.read_block(100, len(data)) == data
        assert t.bridge.faults.dropped > 0 and t.retries_done > 0


def test_uartbone_register_reads_are_unprotected():
    """The documented limitation: a corrupted UARTBone answer of the right length is returned as it is."""
    with loopback_model_transport(regs="uartbone") as t:
        t.write32(GLOBAL + regs.Global.SCRATCH, 0)
        t.bridge.faults = LineFaults(bit_error_rate=0.01, seed=3, scope="all")
        values = [t.read32(GLOBAL + regs.Global.SCRATCH) for _ in range(100)]
        assert any(v != 0 for v in values)


def test_crc_register_frames_never_return_or_write_wrong_values():
    """The same noisy line with CRC register frames: every read is right, every write lands, after retries."""
    with loopback_model_transport(retries=20) as t:
        model = t.bridge.target
        faults = t.bridge.faults = LineFaults(bit_error_rate=0.003, seed=3, scope="all")
        for i in range(60):
            value = (i * 0x9E37_79B9) & 0xFFFF_FFFF
            t.write32(GLOBAL + regs.Global.SCRATCH, value)
            assert t.read32(GLOBAL + regs.Global.SCRATCH) == value, i
            assert model.read32(GLOBAL + regs.Global.SCRATCH) == value, i
        assert faults.flipped > 0 and t.retries_done > 0
