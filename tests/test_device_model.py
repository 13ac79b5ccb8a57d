"""The whole-device golden model: register space, rings, DMA, semaphores, errors and counters."""

from __future__ import annotations

import numpy as np
import pytest

from dx1_bringup.model import BusError, DeviceModel
from dx1_bringup.perfmodel import COSTS
from dx1_bringup.runtime.reference import reference_gemm
from dx1_bringup.spec import (
    COMMAND_BYTES,
    COMPLETION_BYTES,
    MAGIC,
    SPEC_VERSION,
    BlockType,
    ErrorCode,
    Opcode,
    PostOpParams,
    SocConfig,
    TileConfig,
    pack_command,
    register_map,
    unpack_completion,
)

RING = 0x1000
CQ = 0x2000
DATA = 0x10000
LOG2 = 3
ENTRIES = 1 << LOG2


def rd(dev: DeviceModel, block: str, name: str) -> int:
    return dev.read32(dev.regmap.address(block, name))


def wr(dev: DeviceModel, block: str, name: str, value: int) -> None:
    dev.write32(dev.regmap.address(block, name), value)


def fields(block: str, name: str, **values: int) -> int:
    """A value of register ``name`` of ``block`` with the named fields set, placed by the spec."""
    return register_map().block(block).reg(name).register.pack(**values)


IRQ_BOTH = fields("QUEUE0", "IRQ_STATUS", completion=1, error=1)
IRQ_ERROR = fields("QUEUE0", "IRQ_STATUS", error=1)
IRQ_COMPLETION = fields("QUEUE0", "IRQ_STATUS", completion=1)
HALTED = fields("QUEUE0", "STATUS", halted=1)
ENABLE_AND_RESUME = fields("QUEUE0", "CONTROL", enable=1, resume=1)


def open_queue(dev: DeviceModel, q: int = 0, *, ring: int = RING, cq: int = CQ, enable: bool = True) -> None:
    """Program queue ``q`` with an 8-entry ring and a DMA window over all of device memory."""
    blk = f"QUEUE{q}"
    wr(dev, blk, "RING_BASE", ring)
    wr(dev, blk, "RING_LOG2", LOG2)
    wr(dev, blk, "CQ_BASE", cq)
    wr(dev, blk, "DMA_LIMIT", dev.config.mem_bytes)
    wr(dev, blk, "CONTROL", int(enable))


def submit(dev: DeviceModel, cmds: list[bytes], q: int = 0, *, ring: int = RING) -> None:
    """Write ``cmds`` into the ring from TAIL on and ring the doorbell once."""
    tail = rd(dev, f"QUEUE{q}", "TAIL")
    for cmd in cmds:
        dev.mem_write(ring + COMMAND_BYTES * tail, cmd)
        tail = (tail + 1) % ENTRIES
    wr(dev, f"QUEUE{q}", "DOORBELL", tail)


def completion(dev: DeviceModel, index: int, *, cq: int = CQ) -> dict[str, int]:
    return unpack_completion(dev.mem_read(cq + COMPLETION_BYTES * index, COMPLETION_BYTES))


def nop(tag: int) -> bytes:
    return pack_command(Opcode.NOP, tag=tag)


# -- register space ----------------------------------------------------------------------------------------------


def test_walk_next_finds_every_block():
    dev = DeviceModel()
    found, addr = [], 0
    while True:
        found.append((BlockType(dev.read32(addr)), dev.read32(addr + 4)))
        addr = dev.read32(addr + 8)
        if addr == 0:
            break
    tiles = dev.config.tiles
    assert [t for t, _ in found] == ([BlockType.GLOBAL] + [BlockType.QUEUE] * tiles + [BlockType.PERF] * tiles
                                     + [BlockType.TRACE] * tiles + [BlockType.LINK])
    assert all(version == 0x0001_0000 for _, version in found)


def test_identity_and_caps_follow_the_config():
    cfg = SocConfig(tiles=3, semaphores=4, mem_bytes=1 << 16, mem_banks=2)
    dev = DeviceModel(cfg)
    assert rd(dev, "GLOBAL", "MAGIC") == MAGIC
    assert rd(dev, "GLOBAL", "HW_VERSION") == SPEC_VERSION
    assert rd(dev, "GLOBAL", "CAPS") == fields("GLOBAL", "CAPS", tiles=3, array=cfg.tile.array, mem_banks=2,
                                                     semaphores=4)
    assert rd(dev, "GLOBAL", "SPM_ROWS") == cfg.tile.spm_rows
    assert rd(dev, "GLOBAL", "ACC_ROWS") == cfg.tile.acc_rows
    assert rd(dev, "GLOBAL", "MEM_BYTES") == 1 << 16
    assert rd(dev, "GLOBAL", "FEATURES") == fields("GLOBAL", "FEATURES", postop=1, copy=1, trace=1, vector=1)
    assert len(dev.mem) == 1 << 16 and len(dev.tiles) == 3


def test_a_tile_without_a_vector_unit_says_so_and_refuses_its_commands():
    dev = DeviceModel(SocConfig(tile=TileConfig(vector=False)))
    assert rd(dev, "GLOBAL", "FEATURES") == fields("GLOBAL", "FEATURES", postop=1, copy=1, trace=1, vector=0)
    for cmd in (pack_command(Opcode.VECTOR, rows=1, cols=1), pack_command(Opcode.TABLE),
                pack_command(Opcode.TRANSPOSE, blocks=1)):
        assert dev.tiles[0].execute(cmd) == ErrorCode.BAD_OPCODE


def test_access_errors_say_what_was_wrong():
    dev = DeviceModel()
    with pytest.raises(BusError, match="unmapped") as info:
        dev.read32(dev.regmap.size)
    assert info.value.addr == dev.regmap.size
    with pytest.raises(BusError, match="unmapped"):
        dev.write32(0xFC, 0)  # inside GLOBAL's span, past its last register
    with pytest.raises(BusError, match="misaligned"):
        dev.read32(2)
    with pytest.raises(BusError, match="write to read-only register GLOBAL.MAGIC"):
        wr(dev, "GLOBAL", "MAGIC", 0)
    with pytest.raises(BusError, match="read of write-only register QUEUE1.DOORBELL"):
        rd(dev, "QUEUE1", "DOORBELL")
    with pytest.raises(BusError, match="outside device memory"):
        dev.mem_read(dev.config.mem_bytes - 4, 8)
    with pytest.raises(BusError, match="outside device memory"):
        dev.mem_write(-1, b"\0")
    with pytest.raises(ValueError, match="32 bits"):
        wr(dev, "GLOBAL", "SCRATCH", 1 << 32)


def test_ring_registers_keep_their_fields_and_bad_ring_size_halts():
    """Rings are aligned by the registers' fields; a doorbell with RING_LOG2 outside 1..16 is a queue error."""
    dev = DeviceModel()
    wr(dev, "QUEUE0", "RING_BASE", 0x1017)
    wr(dev, "QUEUE0", "CQ_BASE", 0x1004)
    assert (rd(dev, "QUEUE0", "RING_BASE"), rd(dev, "QUEUE0", "CQ_BASE")) == (0x1000, 0x1000)
    wr(dev, "QUEUE0", "RING_LOG2", 17)
    wr(dev, "QUEUE0", "DOORBELL", 1)
    status, error = rd(dev, "QUEUE0", "STATUS"), rd(dev, "QUEUE0", "ERROR")
    assert status == HALTED and error == fields("QUEUE0", "ERROR", code=ErrorCode.BAD_FIELD, index=1)
    assert rd(dev, "QUEUE0", "TAIL") == 0


def test_rw_keeps_field_bits_and_w1c_clears_written_ones():
    dev = DeviceModel()
    wr(dev, "GLOBAL", "SCRATCH", 0xDEAD_BEEF)
    assert rd(dev, "GLOBAL", "SCRATCH") == 0xDEAD_BEEF
    wr(dev, "GLOBAL", "SEM3", 0x1_2345)
    assert rd(dev, "GLOBAL", "SEM3") == 0x2345
    wr(dev, "QUEUE0", "IRQ_MASK", 0xFFFF_FFFF)
    assert rd(dev, "QUEUE0", "IRQ_MASK") == IRQ_BOTH
    assert rd(dev, "QUEUE0", "RING_LOG2") == 4 and rd(dev, "QUEUE0", "DMA_LIMIT") == 0

    open_queue(dev)
    submit(dev, [nop(1)])
    wr(dev, "QUEUE0", "DOORBELL", ENTRIES)  # a queue error: sets the error bit too
    assert rd(dev, "QUEUE0", "IRQ_STATUS") == IRQ_BOTH
    assert dev.irq_pending()
    wr(dev, "QUEUE0", "IRQ_STATUS", 0)
    assert rd(dev, "QUEUE0", "IRQ_STATUS") == IRQ_BOTH
    wr(dev, "QUEUE0", "IRQ_STATUS", IRQ_COMPLETION)
    assert rd(dev, "QUEUE0", "IRQ_STATUS") == IRQ_ERROR
    wr(dev, "QUEUE0", "IRQ_MASK", IRQ_COMPLETION)
    assert not dev.irq_pending()
    wr(dev, "QUEUE0", "IRQ_MASK", IRQ_BOTH)
    wr(dev, "QUEUE0", "IRQ_STATUS", IRQ_ERROR)
    assert rd(dev, "QUEUE0", "IRQ_STATUS") == 0 and not dev.irq_pending()


def test_cycles_lo_latches_hi():
    dev = DeviceModel()
    dev.cycles = 5 << 32 | 7
    assert rd(dev, "GLOBAL", "CYCLES_LO") == 7
    dev.cycles = 6 << 32
    assert rd(dev, "GLOBAL", "CYCLES_HI") == 5


# -- a whole layer through the ring --------------------------------------------------------------------------


def test_linear_layer_round_trip_with_phase_wrap():
    dev = DeviceModel()
    n = dev.config.tile.array
    m_rows, k = 16, 3 * n
    rng = np.random.default_rng(1)
    a = rng.integers(-128, 128, (m_rows, k), dtype=np.int8)
    b = rng.integers(-128, 128, (k, n), dtype=np.int8)
    bias = rng.integers(-5000, 5000, n, dtype=np.int32)
    mult, shift = 300, 14
    a_mem, b_mem, bias_mem, out_mem = DATA, DATA + 0x1000, DATA + 0x2000, DATA + 0x3000
    dev.mem_write(a_mem, a.tobytes())
    dev.mem_write(b_mem, b.tobytes())
    dev.mem_write(bias_mem, bias.astype("<i4").tobytes())
    a_row, b_row, out_row, bias_acc = 0, 256, 512, 100
    kc = k // n
    open_queue(dev)
    wr(dev, "QUEUE0", "IRQ_MASK", 0b01)
    layer = [
        # Row i of A, chunk c goes to spm row a_row + c*m + i: GEMM's chunk-major activation layout.
        pack_command(Opcode.LOAD, tag=1, mem_addr=a_mem, mem_stride=k, local_addr=a_row, rows=m_rows, cols=kc,
                     local_row_stride=1, local_col_stride=m_rows),
        pack_command(Opcode.LOAD, tag=2, mem_addr=b_mem, local_addr=b_row, rows=1, cols=k, local_col_stride=1),
        pack_command(Opcode.LOAD, tag=3, flags={"acc": True}, mem_addr=bias_mem, local_addr=bias_acc,
                     rows=1, cols=1),
        pack_command(Opcode.GEMM, tag=4, a_addr=a_row, b_addr=b_row, c_addr=0, m=m_rows, k_chunks=kc),
        pack_command(Opcode.POSTOP, tag=5, flags={"relu": True, "bias": True}, src_addr=0, dst_addr=out_row,
                     rows=m_rows, bias_addr=bias_acc, mult=mult, shift=shift),
        pack_command(Opcode.STORE, tag=6, mem_addr=out_mem, mem_stride=n, local_addr=out_row, rows=m_rows,
                     cols=1, local_row_stride=1),
    ]
    submit(dev, layer)
    assert dev.irq_pending()
    assert rd(dev, "QUEUE0", "HEAD") == rd(dev, "QUEUE0", "TAIL") == 6
    got = np.frombuffer(dev.mem_read(out_mem, m_rows * n), dtype=np.int8).reshape(m_rows, n)
    np.testing.assert_array_equal(got, reference_gemm(a, b, bias, PostOpParams(mult, shift, relu=True)))

    stamps = []
    for i in range(6):
        c = completion(dev, i)
        assert (c["tag"], c["status"], c["opcode"], c["phase"]) == (i + 1, ErrorCode.OK, layer[i][0], 1)
        stamps.append(c["timestamp"])
    assert stamps == sorted(stamps) and stamps[-1] == rd(dev, "GLOBAL", "CYCLES_LO")

    submit(dev, [nop(10 + i) for i in range(5)])  # entries 6, 7, then 0, 1, 2 on the second pass
    assert rd(dev, "QUEUE0", "HEAD") == 3
    assert [completion(dev, i)["phase"] for i in range(ENTRIES)] == [0, 0, 0, 1, 1, 1, 1, 1]
    assert [completion(dev, i)["tag"] for i in (6, 7, 0, 1, 2)] == [10, 11, 12, 13, 14]

    assert rd(dev, "PERF0", "MACS_LO") == kc * m_rows * n * n and rd(dev, "PERF0", "MACS_HI") == 0
    assert rd(dev, "PERF0", "BYTES_READ") == a.size + b.size + 4 * n
    assert rd(dev, "PERF0", "BYTES_WRITTEN") == m_rows * n
    # BUSY_COMPUTE counts the rows the array streamed, as the RTL does (no fill or drain).
    assert rd(dev, "PERF0", "BUSY_COMPUTE") == m_rows * kc
    wr(dev, "PERF0", "CONTROL", 1)
    assert rd(dev, "PERF0", "MACS_LO") == rd(dev, "PERF0", "BYTES_READ") == rd(dev, "PERF0", "CYCLES") == 0


def test_acc_store_round_trips_int32_lanes():
    dev = DeviceModel()
    n = dev.config.tile.array
    values = np.arange(-2 * n, 2 * n, dtype=np.int32) * 1_000_003
    dev.mem_write(DATA, values.astype("<i4").tobytes())
    open_queue(dev)
    submit(dev, [
        pack_command(Opcode.LOAD, flags={"acc": True}, mem_addr=DATA, local_addr=7, rows=4, cols=1,
                     mem_stride=4 * n, local_row_stride=2),
        pack_command(Opcode.STORE, flags={"acc": True}, mem_addr=DATA + 0x800, local_addr=7, rows=1, cols=4,
                     local_col_stride=2),
    ])
    np.testing.assert_array_equal(dev.tiles[0].acc[7:15:2].ravel(), values)
    assert dev.mem_read(DATA + 0x800, 16 * n) == values.astype("<i4").tobytes()


def test_moves_where_rows_repeat_keep_the_last_one():
    # A zero local stride loads every outer row into one local row (the last wins); a device-memory stride shorter
    # than a row stores overlapping rows (the later row's bytes win where they overlap).
    dev = DeviceModel()
    n = dev.config.tile.array
    data = np.arange(4 * n, dtype=np.uint8).astype(np.int8)
    dev.mem_write(DATA, data.tobytes())
    open_queue(dev)
    submit(dev, [
        pack_command(Opcode.LOAD, mem_addr=DATA, local_addr=3, rows=4, cols=1, mem_stride=n, local_row_stride=0),
        pack_command(Opcode.LOAD, mem_addr=DATA, local_addr=10, rows=4, cols=1, mem_stride=n, local_row_stride=1),
        pack_command(Opcode.STORE, mem_addr=DATA + 0x800, local_addr=10, rows=2, cols=2, mem_stride=n,
                     local_row_stride=2, local_col_stride=1),
    ])
    assert all(c["status"] == ErrorCode.OK for c in (completion(dev, i) for i in range(3)))
    np.testing.assert_array_equal(dev.tiles[0].spm[3], data[3 * n:4 * n])
    expected = np.concatenate([data[:n], data[2 * n:4 * n]])
    assert dev.mem_read(DATA + 0x800, 3 * n) == expected.tobytes()


def test_copy_moves_bytes_inside_the_window():
    dev = DeviceModel()
    dev.mem_write(DATA, bytes(range(64)))
    open_queue(dev)
    submit(dev, [pack_command(Opcode.COPY, src_addr=DATA, dst_addr=DATA + 8, length=64)])
    assert completion(dev, 0)["status"] == ErrorCode.OK
    assert dev.mem_read(DATA, 72) == bytes(range(8)) + bytes(range(64))


# -- command errors ----------------------------------------------------------------------------------------------

_N = SocConfig().tile.array
_SPM, _ACC = SocConfig().tile.spm_rows, SocConfig().tile.acc_rows
BAD_COMMANDS = [
    ((0x7F | 9 << 16).to_bytes(COMMAND_BYTES, "little"), ErrorCode.BAD_OPCODE),
    (pack_command(Opcode.NOP, tag=9, raw=1 << 100), ErrorCode.RESERVED_BITS),
    (pack_command(Opcode.FENCE, tag=9, raw=1 << 8), ErrorCode.RESERVED_BITS),
    (pack_command(Opcode.LOAD, tag=9, mem_addr=DATA, rows=0, cols=1), ErrorCode.BAD_DIMENSION),
    (pack_command(Opcode.STORE, tag=9, mem_addr=DATA + 4, rows=1, cols=0), ErrorCode.BAD_DIMENSION),
    (pack_command(Opcode.COPY, tag=9, src_addr=DATA, dst_addr=DATA, length=0), ErrorCode.BAD_DIMENSION),
    (pack_command(Opcode.WAIT, tag=9, sem=200, count=0), ErrorCode.BAD_DIMENSION),
    (pack_command(Opcode.GEMM, tag=9, m=0, k_chunks=1), ErrorCode.BAD_DIMENSION),
    (pack_command(Opcode.POSTOP, tag=9, rows=1, shift=48), ErrorCode.BAD_FIELD),
    (pack_command(Opcode.SIGNAL, tag=9, sem=16, count=1), ErrorCode.SEM_RANGE),
    (pack_command(Opcode.WAIT, tag=9, sem=16, count=1), ErrorCode.SEM_RANGE),
    (pack_command(Opcode.LOAD, tag=9, mem_addr=DATA + 4, local_addr=_SPM - 1, rows=2, cols=1,
                  local_row_stride=1), ErrorCode.SPM_RANGE),
    (pack_command(Opcode.LOAD, tag=9, flags={"acc": True}, mem_addr=DATA, local_addr=_ACC - 2, rows=1, cols=2,
                  local_col_stride=2), ErrorCode.ACC_RANGE),
    (pack_command(Opcode.GEMM, tag=9, c_addr=_ACC - 1, m=2, k_chunks=1), ErrorCode.ACC_RANGE),
    (pack_command(Opcode.LOAD, tag=9, mem_addr=DATA + 4, rows=1, cols=1), ErrorCode.MISALIGNED),
    (pack_command(Opcode.STORE, tag=9, mem_addr=DATA, mem_stride=12, rows=2, cols=1), ErrorCode.MISALIGNED),
    (pack_command(Opcode.COPY, tag=9, src_addr=DATA, dst_addr=DATA + 8, length=12), ErrorCode.MISALIGNED),
    (pack_command(Opcode.LOAD, tag=9, mem_addr=0x4_0000 - _N, mem_stride=_N, rows=2, cols=1),
     ErrorCode.DMA_WINDOW),
    (pack_command(Opcode.STORE, tag=9, mem_addr=DATA - 8, rows=1, cols=1), ErrorCode.DMA_WINDOW),
    (pack_command(Opcode.COPY, tag=9, src_addr=DATA, dst_addr=0x4_0000 - 8, length=16), ErrorCode.DMA_WINDOW),
]


@pytest.mark.parametrize(("cmd", "code"), BAD_COMMANDS, ids=[f"{i}-{c.name}" for i, (_, c) in enumerate(BAD_COMMANDS)])
def test_each_error_completes_with_its_code_and_the_queue_goes_on(cmd, code):
    dev = DeviceModel()
    dev.tiles[0].acc[:] = 1
    spm, acc = dev.tiles[0].spm.copy(), dev.tiles[0].acc.copy()
    dev.mem[DATA - 0x100:0x4_0100] = np.random.default_rng(2).bytes(0x4_0100 - (DATA - 0x100))
    mem = bytes(dev.mem)
    open_queue(dev)
    wr(dev, "QUEUE0", "DMA_BASE", DATA)
    wr(dev, "QUEUE0", "DMA_LIMIT", 0x4_0000)
    submit(dev, [cmd, nop(10)])
    first, second = completion(dev, 0), completion(dev, 1)
    assert (first["tag"], first["status"], first["opcode"]) == (9, code, cmd[0])
    assert (second["tag"], second["status"]) == (10, ErrorCode.OK)
    assert rd(dev, "QUEUE0", "STATUS") == 0 and rd(dev, "QUEUE0", "ERROR") == 0
    np.testing.assert_array_equal(dev.tiles[0].spm, spm)
    np.testing.assert_array_equal(dev.tiles[0].acc, acc)
    assert dev.mem[:RING] == mem[:RING] and dev.mem[CQ + 0x100:] == mem[CQ + 0x100:]


def test_dma_outside_the_window_moves_nothing():
    dev = DeviceModel()
    n = dev.config.tile.array
    dev.tiles[0].spm[:4] = 7
    open_queue(dev)
    wr(dev, "QUEUE0", "DMA_BASE", DATA)
    wr(dev, "QUEUE0", "DMA_LIMIT", DATA + 3 * n)
    # Three rows fit, the fourth crosses DMA_LIMIT: the whole STORE is refused.
    submit(dev, [pack_command(Opcode.STORE, mem_addr=DATA, mem_stride=n, rows=4, cols=1, local_row_stride=1)])
    assert completion(dev, 0)["status"] == ErrorCode.DMA_WINDOW
    assert dev.mem_read(DATA, 4 * n) == bytes(4 * n)
    submit(dev, [pack_command(Opcode.STORE, mem_addr=DATA, mem_stride=n, rows=3, cols=1, local_row_stride=1)])
    assert completion(dev, 1)["status"] == ErrorCode.OK
    assert dev.mem_read(DATA, 4 * n) == bytes([7]) * (3 * n) + bytes(n)


def test_reset_window_is_empty():
    dev = DeviceModel()
    open_queue(dev)
    wr(dev, "QUEUE0", "DMA_LIMIT", 0)
    submit(dev, [pack_command(Opcode.LOAD, mem_addr=DATA, rows=1, cols=1)])
    assert completion(dev, 0)["status"] == ErrorCode.DMA_WINDOW


# -- queue errors --------------------------------------------------------------------------------------------


def test_doorbell_range_halts_and_resume_continues():
    dev = DeviceModel()
    open_queue(dev)
    wr(dev, "QUEUE0", "IRQ_MASK", IRQ_ERROR)
    dev.mem_write(RING, nop(1) + nop(2))
    wr(dev, "QUEUE0", "DOORBELL", ENTRIES)
    assert rd(dev, "QUEUE0", "STATUS") == HALTED
    assert rd(dev, "QUEUE0", "ERROR") == fields("QUEUE0", "ERROR", code=ErrorCode.DOORBELL_RANGE, index=ENTRIES)
    assert rd(dev, "QUEUE0", "IRQ_STATUS") == IRQ_ERROR and dev.irq_pending()
    assert rd(dev, "QUEUE0", "TAIL") == 0 and rd(dev, "QUEUE0", "HEAD") == 0
    wr(dev, "QUEUE0", "DOORBELL", 2)  # published while halted: nothing runs yet
    assert rd(dev, "QUEUE0", "HEAD") == 0 and rd(dev, "QUEUE0", "TAIL") == 2
    wr(dev, "QUEUE0", "CONTROL", ENABLE_AND_RESUME)
    assert rd(dev, "QUEUE0", "CONTROL") == fields("QUEUE0", "CONTROL", enable=1) and rd(dev, "QUEUE0", "STATUS") == 0
    assert rd(dev, "QUEUE0", "HEAD") == 2
    assert [completion(dev, i)["tag"] for i in range(2)] == [1, 2]


def test_ring_overflow_halts_and_resume_continues():
    dev = DeviceModel()
    open_queue(dev, enable=False)
    submit(dev, [nop(i) for i in range(5)])
    assert rd(dev, "QUEUE0", "HEAD") == 0 and rd(dev, "QUEUE0", "TAIL") == 5
    wr(dev, "QUEUE0", "DOORBELL", 2)  # 5 pending would become 2: the tail overtook the head
    assert rd(dev, "QUEUE0", "STATUS") == HALTED
    assert rd(dev, "QUEUE0", "ERROR") == fields("QUEUE0", "ERROR", code=ErrorCode.RING_OVERFLOW, index=2)
    assert rd(dev, "QUEUE0", "IRQ_STATUS") == IRQ_ERROR and rd(dev, "QUEUE0", "TAIL") == 5
    wr(dev, "QUEUE0", "CONTROL", ENABLE_AND_RESUME)
    assert rd(dev, "QUEUE0", "HEAD") == 5 and rd(dev, "QUEUE0", "STATUS") == 0
    assert [completion(dev, i)["tag"] for i in range(5)] == list(range(5))


def test_ring_outside_memory_is_a_bus_error():
    dev = DeviceModel()
    open_queue(dev, ring=dev.config.mem_bytes - COMMAND_BYTES)
    wr(dev, "QUEUE0", "DOORBELL", 2)
    assert rd(dev, "QUEUE0", "HEAD") == 1
    assert rd(dev, "QUEUE0", "ERROR") == ErrorCode.BUS_ERROR | 1 << 16
    assert rd(dev, "QUEUE0", "STATUS") == 0b10


# -- semaphores ----------------------------------------------------------------------------------------------


def test_wait_on_queue0_released_by_signal_on_queue1():
    dev = DeviceModel()
    open_queue(dev, 0)
    open_queue(dev, 1, ring=0x3000, cq=0x4000)
    submit(dev, [pack_command(Opcode.WAIT, tag=1, sem=3, count=2), nop(2)], q=0)
    assert rd(dev, "QUEUE0", "STATUS") == 0b01 and rd(dev, "QUEUE0", "HEAD") == 0
    submit(dev, [pack_command(Opcode.SIGNAL, tag=3, sem=3, count=1)], q=1, ring=0x3000)
    assert rd(dev, "QUEUE0", "HEAD") == 0 and rd(dev, "GLOBAL", "SEM3") == 1
    submit(dev, [pack_command(Opcode.SIGNAL, tag=4, sem=3, count=1)], q=1, ring=0x3000)
    assert rd(dev, "QUEUE0", "HEAD") == 2 and rd(dev, "QUEUE0", "STATUS") == 0
    assert rd(dev, "GLOBAL", "SEM3") == 0
    assert [completion(dev, i)["tag"] for i in range(2)] == [1, 2]
    assert completion(dev, 1, cq=0x4000)["timestamp"] <= completion(dev, 0)["timestamp"]


def test_ping_pong_between_queues_in_one_doorbell_each():
    dev = DeviceModel()
    open_queue(dev, 0, enable=False)
    open_queue(dev, 1, ring=0x3000, cq=0x4000)
    # Queue 1 waits first; queue 0 (enabled last) signals, waits for the answer, signals again.
    submit(dev, [pack_command(Opcode.WAIT, sem=0, count=1), pack_command(Opcode.SIGNAL, sem=1, count=1),
                 pack_command(Opcode.WAIT, sem=0, count=1)], q=1, ring=0x3000)
    submit(dev, [pack_command(Opcode.SIGNAL, sem=0, count=1), pack_command(Opcode.WAIT, sem=1, count=1),
                 pack_command(Opcode.SIGNAL, sem=0, count=1)], q=0)
    wr(dev, "QUEUE0", "CONTROL", 1)
    assert rd(dev, "QUEUE0", "HEAD") == 3 and rd(dev, "QUEUE1", "HEAD") == 3
    assert all(rd(dev, f"QUEUE{q}", "STATUS") == 0 for q in range(2))


def test_host_semaphore_write_releases_a_wait_and_signal_wraps():
    dev = DeviceModel()
    open_queue(dev)
    submit(dev, [pack_command(Opcode.WAIT, sem=5, count=3)])
    assert rd(dev, "QUEUE0", "STATUS") == 0b01
    wr(dev, "GLOBAL", "SEM5", 4)
    assert rd(dev, "QUEUE0", "STATUS") == 0 and rd(dev, "GLOBAL", "SEM5") == 1
    wr(dev, "GLOBAL", "SEM5", 0xFFFF)
    submit(dev, [pack_command(Opcode.SIGNAL, sem=5, count=2)])
    assert rd(dev, "GLOBAL", "SEM5") == 1


# -- reset and trace -----------------------------------------------------------------------------------------


def test_reset_clears_queues_counters_and_semaphores_but_not_memory():
    dev = DeviceModel()
    open_queue(dev)
    wr(dev, "GLOBAL", "SCRATCH", 0x55)
    submit(dev, [nop(1), pack_command(Opcode.SIGNAL, sem=2, count=9), pack_command(Opcode.WAIT, sem=4, count=1)])
    dev.mem_write(DATA, b"keep")
    assert rd(dev, "QUEUE0", "STATUS") == 0b01 and dev.cycles > 0
    wr(dev, "GLOBAL", "RESET", 1)
    assert dev.cycles == 0 and rd(dev, "GLOBAL", "SEM2") == 0
    expected = {"RING_BASE": 0, "RING_LOG2": 4, "CQ_BASE": 0, "HEAD": 0, "TAIL": 0, "CONTROL": 0, "STATUS": 0,
                "ERROR": 0, "IRQ_STATUS": 0, "IRQ_MASK": 0, "DMA_BASE": 0, "DMA_LIMIT": 0}
    assert {name: rd(dev, "QUEUE0", name) for name in expected} == expected
    assert rd(dev, "PERF0", "CYCLES") == 0
    assert dev.mem_read(DATA, 4) == b"keep" and rd(dev, "GLOBAL", "SCRATCH") == 0x55
    open_queue(dev)
    submit(dev, [nop(7)])
    assert completion(dev, 0)["tag"] == 7 and completion(dev, 0)["phase"] == 1


def test_trace_records_start_and_end_events():
    dev = DeviceModel()
    open_queue(dev)
    wr(dev, "TRACE0", "CONTROL", 1)
    submit(dev, [nop(5), pack_command(Opcode.SIGNAL, tag=6, sem=99, count=1)])
    assert rd(dev, "TRACE0", "COUNT") == 4
    events = []
    for _ in range(4):
        stamp = rd(dev, "TRACE0", "DATA_LO")
        events.append((stamp, rd(dev, "TRACE0", "DATA_HI")))
    assert rd(dev, "TRACE0", "COUNT") == 0 and rd(dev, "TRACE0", "DATA_HI") == 0
    def event(**values: int) -> int:
        return fields("TRACE0", "DATA_HI", **values)

    signal, sem_range = int(Opcode.SIGNAL), int(ErrorCode.SEM_RANGE)
    # A NOP and a refused command each cost the command processor's sync_cycles (dx1_bringup.perfmodel).
    c = COSTS.sync_cycles
    assert events == [(0, event(tag=5)), (c, event(tag=5, end=1)), (c, event(tag=6, opcode=signal)),
                      (2 * c, event(tag=6, status=sem_range, opcode=signal, end=1))]
    submit(dev, [nop(1)])
    wr(dev, "TRACE0", "CONTROL", fields("TRACE0", "CONTROL", enable=1, clear=1))
    assert rd(dev, "TRACE0", "COUNT") == 0 and rd(dev, "TRACE0", "CONTROL") == 1
