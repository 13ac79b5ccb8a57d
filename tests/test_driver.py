"""Tests of the dx1_driver package: allocator, transports, discovery and queues on the device model."""

from __future__ import annotations

import random
import socket
import time

import numpy as np
import pytest
from dx1_driver import (
    Allocator,
    Call,
    Capabilities,
    CommandError,
    Device,
    DeviceTimeout,
    DriverError,
    NotADx1Device,
    Observer,
    OutOfDeviceMemory,
    QueueError,
    QueueState,
    Transport,
    TransportError,
    open_transport,
    regs,
)

from dx1_bringup.backends import ModelTransport
from dx1_bringup.spec import SocConfig, TileConfig

#: Seconds a test polls a queue for a completion before it fails (the model completes a NOP at once).
POLL_DEADLINE = 5.0

# -- allocator ------------------------------------------------------------------------------------


def test_allocator_random_against_reference():
    rng = random.Random(1)
    a = Allocator(0x1000, 1 << 16, alignment=16)
    live: dict[int, int] = {}  # address -> requested size
    for _ in range(3000):
        if live and rng.random() < 0.45:
            addr = rng.choice(sorted(live))
            a.free(addr)
            del live[addr]
        else:
            n, align = rng.randint(1, 3000), rng.choice([None, 16, 64, 256])
            try:
                addr = a.alloc(n, align)
            except OutOfDeviceMemory:
                continue
            assert addr % (align or 16) == 0
            assert 0x1000 <= addr and addr + n <= 0x1000 + (1 << 16)
            for other, size in live.items():
                assert addr + n <= other or other + size <= addr, "overlapping allocations"
            live[addr] = n
        assert a.used == sum(-(-n // 16) * 16 for n in live.values())
    for addr in list(live):
        a.free(addr)
    assert a.used == 0 and a.largest_free == 1 << 16


def test_allocator_coalesces_neighbours_in_any_order():
    a = Allocator(0, 4096)
    blocks = [a.alloc(1024) for _ in range(4)]
    assert blocks == [0, 1024, 2048, 3072] and a.largest_free == 0
    a.free(blocks[0])
    a.free(blocks[2])
    assert a.largest_free == 1024
    a.free(blocks[1])  # merges with both neighbours
    assert a.largest_free == 3072
    assert a.alloc(3000) == 0
    a.free(0)
    a.free(blocks[3])
    assert a.largest_free == 4096 and a.alloc(4096) == 0


def test_allocator_alignment_and_padding_reuse():
    a = Allocator(0, 1 << 16, alignment=64)
    assert a.alloc(1) == 0
    big = a.alloc(100, align=4096)
    assert big == 4096
    assert a.alloc(64) == 64  # the padding in front of the aligned block stays free
    assert a.used == 64 + 128 + 64


def test_allocator_errors():
    a = Allocator(0x100, 0x400)
    with pytest.raises(ValueError, match=r"^allocation size must be positive, not 0$"):
        a.alloc(0)
    with pytest.raises(ValueError, match=r"^alignment must be a power of two, not 48$"):
        a.alloc(8, align=48)
    addr = a.alloc(128)
    with pytest.raises(ValueError, match=r"^cannot free 0x140: it is inside the block allocated at 0x100$"):
        a.free(addr + 0x40)
    with pytest.raises(ValueError, match=r"^cannot free 0x0: outside the allocator's range 0x100..0x4ff$"):
        a.free(0)
    a.free(addr)
    with pytest.raises(ValueError, match=r"^cannot free 0x100: not allocated \(double free\?\)$"):
        a.free(addr)
    a.alloc(0x300)
    with pytest.raises(OutOfDeviceMemory, match=r"^cannot allocate 512 bytes aligned to 64: 256 bytes free, "
                                                 r"largest free block 256 bytes$"):
        a.alloc(512)


# -- transports -----------------------------------------------------------------------------------


class FakeTransport(Transport):
    """Registers in a dict and memory in a bytearray, for base-class checks and malformed devices."""

    def __init__(self, registers: dict[int, int] | None = None, reg_bytes: int = 0x400, mem_bytes: int = 4096):
        super().__init__(reg_bytes, mem_bytes)
        self.registers = dict(registers or {})
        self.mem = bytearray(mem_bytes)

    def _read32(self, addr):
        return self.registers.get(addr, 0)

    def _write32(self, addr, value):
        self.registers[addr] = value

    def _read_block(self, addr, n):
        return self.mem[addr:addr + n]

    def _write_block(self, addr, data):
        self.mem[addr:addr + len(data)] = data


def test_transport_range_checks():
    t = FakeTransport()
    t.write32(0x3FC, 0xFFFF_FFFF)
    assert t.read32(0x3FC) == 0xFFFF_FFFF
    with pytest.raises(ValueError, match=r"^register address 0x6 is not 4-byte aligned$"):
        t.read32(6)
    with pytest.raises(ValueError, match=r"^register address 0x400 is outside the register space 0x0..0x3ff$"):
        t.write32(0x400, 0)
    with pytest.raises(ValueError, match=r"^register value must fit in 32 bits unsigned, not 4294967296$"):
        t.write32(0, 1 << 32)
    with pytest.raises(ValueError, match=r"^register address 0x400 is outside the register space"):
        t.read_u32s(0x3F8, 3)
    with pytest.raises(ValueError, match=r"^memory range 0xfff\+2 bytes is outside device memory 0x0..0xfff$"):
        t.write_block(0xFFF, b"ab")
    with pytest.raises(ValueError, match=r"^memory access length must not be negative, not -1$"):
        t.read_block(0, -1)
    t.write_block(0xFFE, b"ab")
    assert t.read_block(0xFFE, 2) == b"ab" and t.read_block(0, 0) == b""
    assert t.wait_irq(0) is False


def test_transport_context_manager_closes():
    with FakeTransport() as t:
        t.read32(0)
    assert t.closed
    with pytest.raises(TransportError, match=r"^FakeTransport is closed$"):
        t.read32(0)


@pytest.mark.parametrize("device, message", [
    ("sim://localhost", "device 'sim://localhost': expected sim://HOST:PORT, for example sim://127.0.0.1:5555"),
    ("sim://:4000", "device 'sim://:4000': expected sim://HOST:PORT, for example sim://127.0.0.1:5555"),
    ("serial:/dev/ttyUSB0@fast", "device 'serial:/dev/ttyUSB0@fast': expected serial:URL or serial:URL@BAUD, "
                                 "for example serial:/dev/ttyUSB0@115200 or serial:socket://127.0.0.1:5555"),
    ("pcie:01:00", "device 'pcie:01:00': PCI address '01:00' is not [DOMAIN:]BUS:DEVICE.FUNCTION, "
                   "for example 0000:01:00.0"),
    ("xyz", "unknown device 'xyz'; expected one of model, model:[tiles=T,banks=B,mem_mib=M,]FAULTS, "
            "model:chips=N[,tiles=T,...], sim, "
            "sim:tiles=T,banks=B,mem_mib=M, sim:verilog=PATH, sim:[...,]stall=UNIT[+UNIT...], "
            "sim:chips=N[,tiles=T,...], sim://HOST:PORT, serial:URL, pcie:BDF"),
])
def test_open_transport_errors(device, message):
    with pytest.raises(ValueError) as info:
        open_transport(device)
    assert str(info.value) == message


def test_sim_transport_nobody_listening():
    """A sim:// address where no simulator listens is a TransportError that names the address."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # bound but not listening: connections are refused
        with pytest.raises(TransportError, match=rf"^cannot reach the simulator at 127.0.0.1:{port}: "):
            open_transport(f"sim://127.0.0.1:{port}")


def test_model_transport_bus_error_becomes_transport_error():
    with open_transport("model") as t:
        assert isinstance(t, ModelTransport)
        with pytest.raises(TransportError, match=r"^model bus error on register write at 0x0"):
            t.write32(0, 1)  # GLOBAL ID is read only


# -- discovery ------------------------------------------------------------------------------------


def _fake_device(**overrides: int) -> FakeTransport:
    """A register space with only a GLOBAL block, for identification failures."""
    g = regs.Global
    values = {g.ID: regs.BlockType.GLOBAL, g.VERSION: 0x10000, g.NEXT: 0, g.MAGIC: regs.MAGIC,
              g.HW_VERSION: regs.SPEC_VERSION, g.CAPS: 0, g.MEM_BYTES: 4096}
    values.update({getattr(g, k): v for k, v in overrides.items()})
    return FakeTransport(values)


def test_discovery_on_model():
    with Device.open("model") as d:
        kinds = [b.type.name for b in d.blocks]
        assert kinds == ["GLOBAL", "QUEUE", "QUEUE", "PERF", "PERF", "TRACE", "TRACE", "LINK"]
        assert [b.base for b in d.blocks] == list(regs.BLOCK_BASES.values())
        c = d.caps
        assert (c.tiles, c.array, c.mem_banks, c.semaphores, c.spm_rows, c.acc_rows, c.mem_bytes) == (
            2, 8, 4, 16, 4096, 1024, 1 << 20)
        assert c.hw_version == regs.SPEC_VERSION


def test_capabilities_follow_config():
    config = SocConfig(tiles=3, mem_bytes=1 << 16, mem_banks=16)
    with Device(ModelTransport(config)) as d:
        assert (d.caps.tiles, d.caps.mem_bytes, d.caps.mem_banks) == (3, 1 << 16, 16)
        assert len(d.queue_bases) == 3 and d.caps.vector
    with Device(ModelTransport(SocConfig(tile=TileConfig(vector=False)))) as d:
        assert not d.caps.vector


def test_wrong_magic_and_version():
    with pytest.raises(NotADx1Device, match=r'^GLOBAL MAGIC reads 0x12345678, expected 0x44583131 \("DX11"\)$'):
        Device(_fake_device(MAGIC=0x12345678))
    with pytest.raises(NotADx1Device, match=r"^GLOBAL HW_VERSION reads 2.0, but this driver supports spec 1.4"):
        Device(_fake_device(HW_VERSION=0x20000))
    with pytest.raises(NotADx1Device, match=r"^block 0 ID reads 0x00000000, expected GLOBAL 0x44580001$"):
        Device(FakeTransport())


def test_every_tile_needs_its_blocks():
    with pytest.raises(DriverError, match=r"^CAPS reports 1 tiles but the register space has 0 QUEUE blocks "
                                          r"\(expected one a tile\)$"):
        Device(_fake_device(CAPS=regs.set_field(0, regs.Global.CAPS_TILES, 1)))


def test_block_chain_loop_and_escape():
    t = _fake_device(NEXT=0x100)
    t.registers.update({0x100: regs.BlockType.QUEUE, 0x108: 0x100})
    with pytest.raises(DriverError, match=r"^register block chain loops: block at 0x100 points back to 0x100$"):
        Device(t)
    t = _fake_device(NEXT=0x1000)
    with pytest.raises(DriverError, match=r"^register block chain is broken: block at 0x0 has NEXT 0x1000"):
        Device(t)


# -- memory ---------------------------------------------------------------------------------------


@pytest.fixture
def dev():
    with Device.open("model") as d:
        yield d


@pytest.mark.parametrize("size", [1, 3, 7, 8, 9, 4095])
@pytest.mark.parametrize("addr", [0, 1, 5, 0x3333])
def test_memory_round_trip(dev, size, addr):
    data = bytes(random.Random(size * 7 + addr).randrange(256) for _ in range(size))
    dev.write_mem(addr, data)
    assert dev.read_mem(addr, size) == data
    assert dev.read_mem(addr + size, 1) == b"\0"  # nothing written past the end


def test_memory_arrays(dev):
    a = np.arange(-50, 50, dtype=np.int32).reshape(10, 10)
    dev.write_mem(0x101, a.T)  # non-contiguous and odd address
    assert np.array_equal(dev.read_array(0x101, (10, 10), np.int32), a.T)
    assert dev.read_mem(0x101, 4) == (-50).to_bytes(4, "little", signed=True)


# -- queues ---------------------------------------------------------------------------------------


def _requant(x: np.ndarray, mult: int, shift: int) -> np.ndarray:
    x = np.clip(x.astype(np.int64), -(1 << 31), (1 << 31) - 1)
    x = np.maximum(x, 0)
    p = x * mult
    p = (p + (1 << (shift - 1)) - (p < 0)) >> shift
    return np.clip(p, -128, 127).astype(np.int8)


def _move(op, *, tag, mem_addr, local_addr, rows, row_bytes, acc=False):
    """A LOAD or STORE of ``rows`` consecutive local rows from or to contiguous device memory."""
    return op(tag=tag, mem_addr=mem_addr, mem_stride=row_bytes, local_addr=local_addr, rows=rows, cols=1,
              local_row_stride=1, local_col_stride=0, acc=acc)


def test_gemm_postop_end_to_end(dev):
    n, m, kc = dev.caps.array, 16, 3
    rng = np.random.default_rng(5)
    a = rng.integers(-128, 128, (m, kc * n), dtype=np.int8)
    b = rng.integers(-128, 128, (kc * n, n), dtype=np.int8)
    bias = rng.integers(-5000, 5000, n, dtype=np.int32)
    mult, shift = 77, 12
    # Chunk k of A is rows a_addr + k*m .. + m - 1 of the scratchpad.
    a_rows = a.reshape(m, kc, n).transpose(1, 0, 2)
    a_dev, b_dev, bias_dev = dev.alloc(a.size), dev.alloc(b.size), dev.alloc(4 * n)
    out_dev, acc_dev = dev.alloc(m * n), dev.alloc(4 * m * n)
    dev.write_mem(a_dev, a_rows)
    dev.write_mem(b_dev, b)
    dev.write_mem(bias_dev, bias)
    a_spm, b_spm, y_spm, bias_acc = 0, 1024, 2048, 512
    q = dev.queue(0)
    tags = q.submit([
        _move(regs.load, tag=1, mem_addr=a_dev, local_addr=a_spm, rows=kc * m, row_bytes=n),
        _move(regs.load, tag=2, mem_addr=b_dev, local_addr=b_spm, rows=kc * n, row_bytes=n),
        _move(regs.load, tag=3, mem_addr=bias_dev, local_addr=bias_acc, rows=1, row_bytes=4 * n, acc=True),
        regs.gemm(tag=4, a_addr=a_spm, b_addr=b_spm, c_addr=0, m=m, k_chunks=kc),
        regs.postop(tag=5, src_addr=0, dst_addr=y_spm, rows=m, bias_addr=bias_acc, mult=mult, shift=shift,
                    relu=True, bias=True),
        _move(regs.store, tag=6, mem_addr=out_dev, local_addr=y_spm, rows=m, row_bytes=n),
        _move(regs.store, tag=7, mem_addr=acc_dev, local_addr=0, rows=m, row_bytes=4 * n, acc=True),
    ])
    done = q.wait(tags)
    assert [c.tag for c in done] == [1, 2, 3, 4, 5, 6, 7] and all(c.ok for c in done)
    c_ref = a.astype(np.int64) @ b.astype(np.int64)
    assert np.array_equal(dev.read_array(acc_dev, (m, n), np.int32), c_ref)
    assert np.array_equal(dev.read_array(out_dev, (m, n), np.int8), _requant(c_ref + bias, mult, shift))


def test_error_completion_then_next_command_works(dev):
    q = dev.queue(1)
    q.submit([regs.nop(tag=10), regs.gemm(tag=11, a_addr=0, b_addr=0, c_addr=0, m=0, k_chunks=1),
              regs.nop(tag=12)])
    with pytest.raises(CommandError, match=r"^command tag 11 \(GEMM\) failed with BAD_DIMENSION \(0x03\): "
                                           r"A count \(rows, chunks, bytes\) is zero\.$") as info:
        q.wait(3)
    assert info.value.code == regs.ErrorCode.BAD_DIMENSION
    assert [(c.tag, c.status) for c in info.value.completions] == [(10, 0), (11, 3), (12, 0)]
    assert q.outstanding == 0
    q.submit([regs.nop(tag=13)])
    assert [c.tag for c in q.wait(1)] == [13]
    q.submit([regs.postop(tag=14, src_addr=0, dst_addr=0, rows=1, bias_addr=0, mult=1, shift=48)])
    (c,) = q.wait(check=False)
    assert c.status == regs.ErrorCode.BAD_FIELD


def test_ring_wrap_many_times(dev):
    q = dev.queue(0, ring_log2=2)
    assert q.entries == 4
    expected = []
    for round_ in range(5):
        tags = [(round_ * 100 + i) & 0xFFFF for i in range(11)]  # more than the ring holds
        assert q.submit([regs.nop(tag=t) for t in tags]) == tags
        expected += tags
        if round_ % 2:
            assert [c.tag for c in q.wait()] == expected
            expected = []
    assert [c.tag for c in q.wait()] == expected
    assert q.outstanding == 0


def test_full_ring_keeps_completions_for_wait(dev):
    q = dev.queue(0, ring_log2=1)  # one usable slot: every submit after the first collects
    bad = regs.gemm(tag=2, a_addr=0, b_addr=0, c_addr=0, m=1, k_chunks=0)
    q.submit([regs.nop(tag=1), bad, regs.nop(tag=3)])
    with pytest.raises(CommandError) as info:
        q.wait(3)
    assert [c.tag for c in info.value.completions] == [1, 2, 3]


def test_wait_by_tags_leaves_others(dev):
    q = dev.queue(0)
    q.submit([regs.nop(tag=t) for t in (1, 2, 3, 2)])
    assert [(c.tag, c.index) for c in q.wait([2, 3])] == [(2, 1), (3, 2)]
    assert [(c.tag, c.index) for c in q.wait([2])] == [(2, 3)]
    assert [c.tag for c in q.wait()] == [1]
    with pytest.raises(ValueError, match=r"^tag 9 is not outstanding on queue 0"):
        q.wait([9])
    with pytest.raises(ValueError, match=r"^cannot wait for 1 completions: 0 outstanding$"):
        q.wait(1)


def test_both_tiles(dev):
    q0, q1 = dev.queue(0), dev.queue(1)
    assert dev.queue(0) is q0 and q0.ring != q1.ring
    dev.write_mem(0x8000, bytes(range(64)))
    for t, q in enumerate((q0, q1)):
        q.submit([regs.copy(tag=t, src_addr=0x8000, dst_addr=0x9000 + 0x100 * t, length=64)])
    assert q1.wait()[0].tag == 1 and q0.wait()[0].tag == 0
    assert dev.read_mem(0x9000, 64) == dev.read_mem(0x9100, 64) == bytes(range(64))


def test_timeout_then_enable(dev):
    q = dev.queue(0)
    control = q.base + regs.Queue.CONTROL
    dev.transport.write32(control, 0)  # a disabled queue fetches nothing
    q.submit([regs.nop(tag=5)])
    with pytest.raises(DeviceTimeout, match=r"^queue 0: no completion for ring index 0 \(tag 5, opcode 0x00\) "
                                            r"within 0.05 s; HEAD=0, TAIL=1"):
        q.wait(1, timeout=0.05)
    assert q.outstanding == 1  # nothing was lost
    dev.transport.write32(control, 1)
    assert [c.tag for c in q.wait(1)] == [5]


def test_queue_error_and_resume(dev):
    q = dev.queue(0, ring_log2=2)
    dev.transport.write32(q.base + regs.Queue.DOORBELL, 7)  # past the ring
    q.submit([regs.nop(tag=1)])
    with pytest.raises(QueueError, match=r"^queue 0 halted at ring index 7 with DOORBELL_RANGE") as info:
        q.wait(1, timeout=0.05)
    assert (info.value.code, info.value.index) == (regs.ErrorCode.DOORBELL_RANGE, 7)
    q.resume()
    assert [c.tag for c in q.wait(1)] == [1]


def test_mismatched_completion_is_detected(dev):
    q = dev.queue(0)
    dev.transport.write32(q.base + regs.Queue.CONTROL, 0)
    # A completion the device never wrote for this command: right phase, wrong tag.
    dev.write_mem(q.cq, (1 << 63 | 99).to_bytes(8, "little"))
    q.submit([regs.nop(tag=1)])
    with pytest.raises(DriverError, match=r"^queue 0: completion at ring index 0 has tag 99 opcode 0x00, but the "
                                          r"command there has tag 1 opcode 0x00"):
        q.wait(1)


def test_reset_releases_queues(dev):
    q = dev.queue(0)
    used = dev.allocator.used
    dev.reset()
    assert dev.allocator.used < used
    with pytest.raises(DriverError, match=r"^queue 0 was reset; get a new one from Device.queue$"):
        q.submit([regs.nop(tag=1)])
    q = dev.queue(0)
    q.submit([regs.nop(tag=2)])
    assert q.wait()[0].tag == 2


# -- DMA window, interrupts, PERF and TRACE ------------------------------------------------------------------


def test_dma_window_is_set_read_back_and_enforced(dev):
    q = dev.queue(0)
    assert q.dma_window() == (0, dev.caps.mem_bytes)
    dev.write_mem(0x8000, bytes(range(64)))
    q.set_dma_window(0x8000, 0x8040)
    assert q.dma_window() == (0x8000, 0x8040)
    q.submit([regs.copy(tag=1, src_addr=0x8000, dst_addr=0x8020, length=64)])  # destination leaves the window
    with pytest.raises(CommandError) as info:
        q.wait(1)
    assert info.value.code == regs.ErrorCode.DMA_WINDOW
    assert dev.read_mem(0x8000, 64) == bytes(range(64)), "a refused COPY moved data"
    q.set_dma_window(0x8000, 0x9000)
    q.submit([regs.copy(tag=2, src_addr=0x8000, dst_addr=0x8800, length=64)])
    assert q.wait(1)[0].ok and dev.read_mem(0x8800, 64) == bytes(range(64))


@pytest.mark.parametrize(("base", "limit", "error", "message"), [
    (0x100, 0x80, ValueError, r"^queue 0: DMA window \[0x100, 0x80\) must satisfy 0 <= base <= limit <= 0x100000 "
                              r"\(the device memory\)$"),
    (-8, 0x80, ValueError, r"^queue 0: DMA window \[0x-8, 0x80\) must satisfy"),
    (0, (1 << 20) + 8, ValueError, r"^queue 0: DMA window \[0x0, 0x100008\) must satisfy"),
    (0, 1.5, TypeError, r"^queue 0: DMA window limit must be an integer, not 1.5$"),
])
def test_dma_window_range_checks(dev, base, limit, error, message):
    q = dev.queue(0)
    with pytest.raises(error, match=message):
        q.set_dma_window(base, limit)
    assert q.dma_window() == (0, dev.caps.mem_bytes), "a refused window changed the registers"


def test_irq_status_clear_and_mask(dev):
    q = dev.queue(1)
    q.clear_irq()
    assert q.irq_status() == 0 and q.irq_mask() == q.IRQ_COMPLETION | q.IRQ_ERROR
    q.submit([regs.nop(tag=3)])
    # poll(), not wait(): wait() clears IRQ_STATUS, which is what this test reads.
    deadline = time.monotonic() + POLL_DEADLINE
    while not q.poll():
        assert time.monotonic() < deadline, (
            f"queue 1: the NOP (tag 3) did not complete within {POLL_DEADLINE} s of polling; "
            f"IRQ_STATUS=0x{q.irq_status():x}")
    assert q.irq_status() == q.IRQ_COMPLETION
    q.clear_irq(q.IRQ_COMPLETION)
    assert q.irq_status() == 0
    q.set_irq_mask(q.IRQ_ERROR)
    assert q.irq_mask() == q.IRQ_ERROR
    with pytest.raises(ValueError, match=r"^queue 1: interrupt causes must be a combination of IRQ_COMPLETION "
                                         r"\(0x1\) and IRQ_ERROR \(0x2\), not 4$"):
        q.set_irq_mask(4)
    q.wait(1)


def test_perf_counts_a_gemm_and_clears(dev):
    perf = dev.perf(0)
    perf.clear()
    zero = perf.read()
    assert zero.macs == zero.bytes_read == zero.bytes_written == 0
    q = dev.queue(0)
    q.submit([regs.gemm(tag=1, a_addr=0, b_addr=64, c_addr=0, m=16, k_chunks=2),
              regs.store(tag=2, mem_addr=0x8000, mem_stride=8, local_addr=0, rows=4, cols=1,
                         local_row_stride=1, local_col_stride=0)])
    q.wait()
    after = perf.read()
    assert after.macs == 2 * 16 * 8 * 8 and after.bytes_written == 4 * 8 and after.busy_compute > 0
    assert after.since(zero) == after
    assert after.as_dict()["MACS"] == after.macs and set(after.as_dict()) >= {"CYCLES", "BYTES_READ"}
    assert dev.perf(1).read().macs == 0, "tile 1's counters saw tile 0's work"
    perf.clear()
    assert perf.read().macs == 0


def test_perf_since_wraps_at_the_counter_width():
    from dx1_driver import PerfCounters
    before = PerfCounters(0xFFFF_FFF0, 0, 0, 0, (1 << 64) - 2, 0, 0, 0, 0, 0, 0xFFFF_FFFF, 0, 0)
    after = PerfCounters(0x10, 0, 0, 0, 3, 0, 0, 0, 0, 0, 1, 0, 0)
    delta = after.since(before)
    assert (delta.cycles, delta.macs, delta.table_hits) == (0x20, 5, 2)


def test_trace_drains_decoded_events(dev):
    from dx1_driver import TraceKind
    trace = dev.trace(0)
    trace.start()
    assert trace.enabled and trace.count == 0
    q = dev.queue(0)
    q.submit([regs.nop(tag=21), regs.gemm(tag=22, a_addr=0, b_addr=0, c_addr=0, m=0, k_chunks=1)])
    q.wait(2, check=False)
    events = trace.drain()
    assert [(e.kind, e.tag, e.opcode) for e in events if e.kind is TraceKind.START] == [
        (TraceKind.START, 21, regs.Opcode.NOP), (TraceKind.START, 22, regs.Opcode.GEMM)]
    assert [(e.tag, e.status) for e in events if e.kind is TraceKind.END] == [
        (21, regs.ErrorCode.OK), (22, regs.ErrorCode.BAD_DIMENSION)]
    assert [e.timestamp for e in events] == sorted(e.timestamp for e in events)
    assert trace.count == 0 and trace.drain() == []
    q.submit([regs.nop(tag=23)])
    q.wait(1)
    trace.clear()
    assert trace.enabled and trace.count == 0
    trace.stop()
    q.submit([regs.nop(tag=24)])
    q.wait(1)
    assert not trace.enabled and trace.count == 0


def test_trace_event_decode_uses_the_generated_fields():
    from dx1_driver import TraceEvent, TraceKind
    hi = regs.set_field(regs.set_field(regs.set_field(regs.set_field(
        0, regs.Trace.DATA_HI_TAG, 0xBEEF), regs.Trace.DATA_HI_STATUS, regs.ErrorCode.SPM_RANGE),
        regs.Trace.DATA_HI_OPCODE, 0x7E), regs.Trace.DATA_HI_END, 1)
    assert TraceEvent.decode(1234, hi) == TraceEvent(1234, TraceKind.END, 0xBEEF, 0x7E, regs.ErrorCode.SPM_RANGE)


def test_block_objects_check_the_tile(dev):
    for get in (dev.queue, dev.perf, dev.trace):
        with pytest.raises(ValueError, match=r"^tile must be 0 to 1, not 2$"):
            get(2)
    assert [dev.perf(t).base for t in range(2)] == [b.base for b in dev.blocks if b.type is regs.BlockType.PERF]
    assert [dev.trace(t).base for t in range(2)] == [b.base for b in dev.blocks if b.type is regs.BlockType.TRACE]


def test_semaphores_and_cycles(dev):
    dev.set_semaphore(3, 7)
    assert dev.semaphore(3) == 7
    with pytest.raises(ValueError, match=r"^field value must fit in 16 bits unsigned, not 65536$"):
        dev.set_semaphore(3, 1 << 16)
    before = dev.cycles()
    q = dev.queue(0)
    q.submit([regs.gemm(tag=1, a_addr=0, b_addr=64, c_addr=0, m=16, k_chunks=1)])
    q.wait()
    assert dev.cycles() > before


def test_device_repr_says_what_is_open():
    with Device.open("model:tiles=4") as dev:
        assert repr(dev) == ("<Device 'model:tiles=4': dx1 1.4, 4 tiles (4 usable) of 8x8 with a vector unit, "
                             "1024 KiB device memory, over ModelTransport>")
        dev.fence(2, "a test")
        assert "4 tiles (3 usable)" in repr(dev)
    assert "4 tiles (closed)" in repr(dev)
    assert repr(Device(ModelTransport())).startswith("<Device 'ModelTransport': dx1 1.4, 2 tiles (2 usable)")


def test_help_device_shows_caps_and_its_fields():
    import pydoc

    text = pydoc.render_doc(Device, renderer=pydoc.plaintext)
    assert "caps\n |      What the GLOBAL block reports" in text
    assert "Device.open(\"model\") as dev" in text
    fields = pydoc.render_doc(Capabilities, renderer=pydoc.plaintext)
    for name in ("hw_version", "tiles, array", "mem_banks, mem_bytes", "spm_rows, acc_rows", "postop, copy, trace"):
        assert name in fields
    with Device.open("model") as dev, pytest.raises(AttributeError):
        dev.caps = None


# -- the observer hook ----------------------------------------------------------------------------


class _Log(Observer):
    """Notes every hook call as (hook, name, tile) and keeps the calls."""

    def __init__(self):
        self.heard: list[tuple[str, str, int | None]] = []
        self.calls: list[Call] = []

    def before(self, call: Call) -> None:
        self.heard.append(("before", call.name, call.tile))

    def after(self, call: Call) -> None:
        self.heard.append(("after", call.name, call.tile))
        self.calls.append(call)


def test_observers_hear_each_program_call_once_with_its_arguments_and_result(dev):
    log = _Log()
    dev.observe(log)
    q = dev.queue(1)
    q.set_dma_window(0, 0x8000)
    dev.write_mem(0x100, np.arange(4, dtype=np.uint16))
    assert list(dev.read_array(0x100, 4, "<u2")) == [0, 1, 2, 3]
    q.submit([regs.nop(tag=3), regs.nop(tag=4)])
    dev.wait_any([q], at_least=2)
    done = q.wait(iter([4, 3]))
    assert [name for hook, name, _ in log.heard if hook == "after"] == [
        "set_dma_window", "write_mem", "read_mem", "submit", "wait_any", "wait"]
    assert log.heard[0] == ("before", "set_dma_window", 1) and log.heard[1] == ("after", "set_dma_window", 1)
    window, write, read, submit, wait_any, wait = log.calls
    assert window.args == {"base": 0, "limit": 0x8000}
    assert write.args == {"addr": 0x100, "data": bytes([0, 0, 1, 0, 2, 0, 3, 0])} and write.tile is None
    assert read.args == {"addr": 0x100, "n": 8} and read.result == write.args["data"]
    assert submit.args["commands"] == (regs.nop(tag=3), regs.nop(tag=4)) and submit.result == [3, 4]
    assert wait_any.args == {"queues": (q,), "at_least": 2}
    assert wait.args == {"what": (4, 3), "check": True} and wait.result == done
    assert all(c.error is None and 0 < c.start_ns <= c.end_ns for c in log.calls)
    dev.unobserve(log)
    dev.write_mem(0, b"x")
    assert len(log.calls) == 6 and dev.observers == ()


def test_observers_do_not_hear_the_driver_inside_a_call_nor_themselves(dev):
    """recover() resets the tile and resubmits inside: only the program's own call is heard."""

    class Reentrant(_Log):
        def after(self, call: Call) -> None:
            super().after(call)
            dev.read_mem(0, 8)  # an observer's own call: not heard

    log = Reentrant()
    q = dev.queue(0)
    q.set_enabled(False)
    q.submit([regs.nop(tag=9)])
    dev.observe(log)
    recovery = dev.recover(0)
    assert recovery.replayed == (9,)
    assert log.heard == [("before", "recover", 0), ("after", "recover", 0)]
    assert log.calls[0].result is recovery
    q.set_enabled(True)
    assert [c.tag for c in q.wait()] == [9]
    assert [name for _, name, _ in log.heard[2:]] == ["wait", "wait"]


def test_observers_hear_a_call_that_raises(dev):
    log = _Log()
    dev.observe(log)
    q = dev.queue(0)
    with pytest.raises(ValueError, match="cannot wait for 1 completions: 0 outstanding"):
        q.wait(1)
    assert log.heard == [("before", "wait", 0), ("after", "wait", 0)]
    assert isinstance(log.calls[0].error, ValueError) and log.calls[0].result is None
    with pytest.raises(ValueError, match="command 0 is 3 bytes"):
        q.submit([b"abc"])  # refused before it is a call: nothing to hear
    assert len(log.calls) == 1


def test_observe_takes_observers_once():
    with Device.open("model") as d:
        with pytest.raises(TypeError, match="an observer must be a dx1_driver.Observer, not 'log'"):
            d.observe("log")
        log = _Log()
        d.observe(log)
        with pytest.raises(ValueError, match="observes this device already"):
            d.observe(log)
        d.unobserve(log)
        d.unobserve(log)
        assert d.observers == ()


def test_recover_needs_an_open_queue(dev):
    with pytest.raises(DriverError, match="tile 1 has no open queue to recover"):
        dev.recover(1)
    with pytest.raises(ValueError, match="tile must be 0 to 1, not 2"):
        dev.recover(2)


def test_queue_state_says_what_the_device_fetched(dev):
    q = dev.queue(0)
    assert q.state() == QueueState(halted=False, error=None, fetched=0, aborted=0)
    q.set_enabled(False)
    q.submit([regs.nop(tag=1), regs.nop(tag=2)])
    assert q.state().fetched == 0  # disabled: nothing fetched
    q.set_enabled(True)
    q.wait()
    assert q.state() == QueueState(halted=False, error=None, fetched=0, aborted=0)
