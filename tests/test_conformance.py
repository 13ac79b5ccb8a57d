"""Driver conformance: one set of tests, run on every backend the machine can reach.

``model`` is the golden model of the whole device, in process.  ``sim`` is the
SoC RTL in Verilator behind the sim transport.  ``serial`` is the simulated
board (SoC + UART bridge) with its UART pins bridged to a socket, reached by
the serial transport exactly as a board on a cable.  One simulator per backend
is started for the session (the first run builds it, which takes minutes) and
every test opens a fresh, reset :class:`~dx1_driver.Device` on it.  A backend
that cannot run here is skipped with the reason.
"""

from __future__ import annotations

import numpy as np
import pytest
from dx1_driver import CommandError, Device, DriverError, QueueError, TraceKind, open_transport, regs
from dx1_driver.serial_transport import SerialTransport

from dx1_bringup.runtime.gemm_run import run_gemm
from dx1_bringup.runtime.reference import reference_gemm
from dx1_bringup.sim import verilator_missing
from dx1_bringup.sim.board_server import CLIENT_OPTIONS
from dx1_bringup.sim.launch import start_simulator
from dx1_bringup.spec import PostOpParams

BACKENDS = ["model", "sim", "serial"]
#: Wall-clock budget for one wait: the simulator runs about 1e5 cycles a second.
TIMEOUT = 120.0


@pytest.fixture(params=BACKENDS)
def device(request):
    if request.param == "model":
        transport = open_transport("model")
    else:
        transport = request.getfixturevalue(f"{request.param}_transport")
    dev = Device(transport)
    yield dev
    if request.param == "model":
        dev.close()


def test_discovery(device):
    caps = device.caps
    assert (caps.tiles, caps.array, caps.semaphores) == (2, 8, 16)
    assert (caps.spm_rows, caps.acc_rows, caps.mem_bytes) == (4096, 1024, 1 << 20)
    names = [b.type.name for b in device.blocks]
    assert names == ["GLOBAL", "QUEUE", "QUEUE", "PERF", "PERF", "TRACE", "TRACE", "LINK"]


@pytest.mark.parametrize("size", [1, 3, 7, 8, 9, 63, pytest.param(4095, marks=pytest.mark.slow_on_serial)])
def test_memory_round_trip(device, size):
    rng = np.random.default_rng(size)
    base = device.alloc(8192)
    for offset in (0, 1, 5, 4096 - 3):
        data = rng.integers(0, 256, size, dtype=np.uint8).tobytes()
        guard = device.read_mem(base + offset + size, 8)
        device.write_mem(base + offset, data)
        assert device.read_mem(base + offset, size) == data
        assert device.read_mem(base + offset + size, 8) == guard, "a write spilled past its end"


@pytest.mark.parametrize("shape", [(1, 1, 1), (5, 7, 3), (8, 8, 8), (9, 17, 23),
                                   pytest.param((64, 64, 64), marks=pytest.mark.slow_on_serial)])
@pytest.mark.parametrize("post", [None, PostOpParams(mult=181, shift=17, relu=True)], ids=["int32", "postop"])
def test_gemm_shapes(device, shape, post):
    m, k, n = shape
    rng = np.random.default_rng(m * 10000 + k * 100 + n)
    a = rng.integers(-128, 128, (m, k), dtype=np.int8)
    b = rng.integers(-128, 128, (k, n), dtype=np.int8)
    bias = rng.integers(-1000, 1000, n, dtype=np.int32)
    out, _ = run_gemm(device, a, b, bias, post, timeout=TIMEOUT)
    np.testing.assert_array_equal(out, reference_gemm(a, b, bias, post))


def test_postop_edges(device):
    """Extreme operands, saturating bias, shifts 0 and 47, multipliers 0 and 65535."""
    a = np.full((9, 16), -128, dtype=np.int8)
    a[1::2] = 127
    b = np.full((16, 9), -128, dtype=np.int8)
    bias = np.array([2**31 - 1, -2**31, 0, 1, -1, 5, -5, 100, -100], dtype=np.int32)
    for post in (PostOpParams(65535, 0), PostOpParams(1, 47), PostOpParams(0, 3, relu=True), PostOpParams(3, 1)):
        out, _ = run_gemm(device, a, b, bias, post, timeout=TIMEOUT)
        np.testing.assert_array_equal(out, reference_gemm(a, b, bias, post))


@pytest.mark.slow_on_serial
def test_both_tiles_concurrently(device):
    rng = np.random.default_rng(7)
    a = rng.integers(-128, 128, (96, 40), dtype=np.int8)
    b = rng.integers(-128, 128, (40, 72), dtype=np.int8)
    out, stats = run_gemm(device, a, b, tiles=2, timeout=TIMEOUT)
    np.testing.assert_array_equal(out, reference_gemm(a, b))
    assert len(stats.commands) == 2 and all(c > 0 for c in stats.commands.values()), "both tiles must get work"


def test_semaphores_across_queues(device):
    """Queue 0 waits for queue 1's SIGNAL; neither completion is lost."""
    q0, q1 = device.queue(0), device.queue(1)
    q0.submit([regs.wait(tag=1, sem=3, count=2), regs.nop(tag=2)])
    q1.submit([regs.signal(tag=7, sem=3, count=1), regs.signal(tag=8, sem=3, count=1)])
    done1 = q1.wait(2, timeout=TIMEOUT)
    done0 = q0.wait(2, timeout=TIMEOUT)
    assert [c.tag for c in done1] == [7, 8] and [c.tag for c in done0] == [1, 2]
    assert device.semaphore(3) == 0


def _bad_commands(dev: Device, base: int) -> list[tuple[bytes, regs.ErrorCode]]:
    spm, acc = dev.caps.spm_rows, dev.caps.acc_rows
    mem = dev.caps.mem_bytes
    return [
        (pack_raw(0x7F), regs.ErrorCode.BAD_OPCODE),
        (pack_raw(int.from_bytes(regs.nop(tag=0), "little") | 1 << 40), regs.ErrorCode.RESERVED_BITS),
        (regs.gemm(tag=0, a_addr=0, b_addr=0, c_addr=0, m=0, k_chunks=1), regs.ErrorCode.BAD_DIMENSION),
        (regs.postop(tag=0, src_addr=0, dst_addr=0, rows=1, bias_addr=0, mult=1, shift=50),
         regs.ErrorCode.BAD_FIELD),
        (regs.gemm(tag=0, a_addr=spm - 2, b_addr=0, c_addr=0, m=4, k_chunks=1), regs.ErrorCode.SPM_RANGE),
        (regs.gemm(tag=0, a_addr=0, b_addr=0, c_addr=acc - 1, m=4, k_chunks=1), regs.ErrorCode.ACC_RANGE),
        (regs.load(tag=0, mem_addr=base + 4, mem_stride=8, local_addr=0, rows=1, cols=1, local_row_stride=0,
                   local_col_stride=0), regs.ErrorCode.MISALIGNED),
        (regs.store(tag=0, mem_addr=mem - 8, mem_stride=8, local_addr=0, rows=2, cols=1, local_row_stride=1,
                    local_col_stride=0), regs.ErrorCode.DMA_WINDOW),
        (regs.signal(tag=0, sem=200, count=1), regs.ErrorCode.SEM_RANGE),
        (regs.copy(tag=0, src_addr=base, dst_addr=base + 64, length=0), regs.ErrorCode.BAD_DIMENSION),
    ]


def pack_raw(word: int) -> bytes:
    return word.to_bytes(regs.COMMAND_BYTES, "little")


@pytest.mark.slow_on_serial
def test_errors_complete_and_the_queue_goes_on(device):
    """Every bad field gives its own error code, nothing is written, and the next GEMM is right."""
    base = device.alloc(4096)
    guard = bytes(range(256)) * 16
    device.write_mem(base, guard)
    rng = np.random.default_rng(3)
    a = rng.integers(-128, 128, (16, 16), dtype=np.int8)
    b = rng.integers(-128, 128, (16, 16), dtype=np.int8)
    q = device.queue(0)
    for cmd, code in _bad_commands(device, base):
        q.submit([cmd])
        with pytest.raises(CommandError) as info:
            q.wait(1, timeout=TIMEOUT)
        assert info.value.code == code, f"expected {code.name}, got {info.value}"
        out, _ = run_gemm(device, a, b, timeout=TIMEOUT)
        np.testing.assert_array_equal(out, reference_gemm(a, b))
    assert device.read_mem(base, len(guard)) == guard, "a refused command changed device memory"


def test_doorbell_past_ring_and_overflow_halt_then_resume(device):
    q = device.queue(1)
    # Doorbells no driver call would ring: written to the discovered QUEUE block directly.
    device.write_reg(q.base, regs.Queue.DOORBELL, q.entries + 3)
    with pytest.raises(QueueError) as info:
        q.check()
    assert info.value.code == regs.ErrorCode.DOORBELL_RANGE
    q.resume()
    q.submit([regs.nop(tag=5)])
    assert [c.tag for c in q.wait(1, timeout=TIMEOUT)] == [5]
    head = device.read_reg(q.base, regs.Queue.HEAD)
    q.set_enabled(False)  # stop fetching so that the ring really fills
    device.write_reg(q.base, regs.Queue.DOORBELL, (head + q.entries - 1) % q.entries)  # fills the ring: legal
    device.write_reg(q.base, regs.Queue.DOORBELL, (head + 1) % q.entries)  # moves the tail past the head
    with pytest.raises(QueueError) as info:
        q.check()
    assert info.value.code == regs.ErrorCode.RING_OVERFLOW


def test_perf_counters_count_the_work(device):
    """The PERF block's MACs equal the padded work, and the DMA byte counters what the plan moved."""
    rng = np.random.default_rng(11)
    a = rng.integers(-128, 128, (24, 20), dtype=np.int8)
    b = rng.integers(-128, 128, (20, 12), dtype=np.int8)
    out, stats = run_gemm(device, a, b, tiles=1, timeout=TIMEOUT)
    np.testing.assert_array_equal(out, reference_gemm(a, b))
    assert stats.macs == 24 * 24 * 16  # K and N padded to 24 and 16
    assert stats.delta(0).bytes_read >= a.size + b.size and stats.delta(0).bytes_written >= out.nbytes
    assert stats.delta(0).cycles > 0 and stats.delta(0).busy_compute > 0


def test_perf_clear_zeroes_the_counters(device):
    perf = device.perf(1)
    q = device.queue(1)
    q.submit([regs.gemm(tag=1, a_addr=0, b_addr=0, c_addr=0, m=8, k_chunks=1)])
    q.wait(1, timeout=TIMEOUT)
    assert perf.read().macs == 8 * 8 * 8
    perf.clear()
    cleared = perf.read()
    assert (cleared.macs, cleared.busy_compute, cleared.bytes_read, cleared.bytes_written) == (0, 0, 0, 0)


def test_dma_window_refuses_moves_outside_it(device):
    """A STORE past DMA_LIMIT and a LOAD below DMA_BASE complete with DMA_WINDOW and move nothing."""
    q = device.queue(0)
    base = device.alloc(4096)
    guard = bytes(range(256)) * 16
    device.write_mem(base, guard)
    q.set_dma_window(base + 1024, base + 2048)
    assert q.dma_window() == (base + 1024, base + 2048)
    moves = [regs.store(tag=1, mem_addr=base + 2048 - 8, mem_stride=8, local_addr=0, rows=2, cols=1,
                        local_row_stride=1, local_col_stride=0),
             regs.load(tag=2, mem_addr=base + 1016, mem_stride=8, local_addr=0, rows=1, cols=1,
                       local_row_stride=0, local_col_stride=0),
             regs.store(tag=3, mem_addr=base + 1024, mem_stride=8, local_addr=0, rows=2, cols=1,
                        local_row_stride=1, local_col_stride=0)]
    q.submit(moves)
    statuses = [c.status for c in q.wait(3, timeout=TIMEOUT, check=False)]
    assert statuses == [regs.ErrorCode.DMA_WINDOW, regs.ErrorCode.DMA_WINDOW, regs.ErrorCode.OK]
    got = device.read_mem(base, len(guard))
    assert got[:1024] == guard[:1024] and got[1040:] == guard[1040:], "a refused move changed device memory"
    q.set_dma_window(0, device.caps.mem_bytes)


def test_trace_records_start_and_end_events(device):
    """With tracing on, every command leaves a start event and an end event carrying its tag and status."""
    trace = device.trace(0)
    trace.start(clear=True)
    q = device.queue(0)
    q.submit([regs.nop(tag=21), regs.gemm(tag=22, a_addr=0, b_addr=0, c_addr=0, m=0, k_chunks=1)])
    q.wait(2, timeout=TIMEOUT, check=False)
    events = trace.drain()
    starts = [(e.tag, e.opcode) for e in events if e.kind is TraceKind.START]
    ends = [(e.tag, e.opcode, e.status) for e in events if e.kind is TraceKind.END]
    assert starts == [(21, regs.Opcode.NOP), (22, regs.Opcode.GEMM)]
    assert ends == [(21, regs.Opcode.NOP, regs.ErrorCode.OK), (22, regs.Opcode.GEMM, regs.ErrorCode.BAD_DIMENSION)]
    stamps = [e.timestamp for e in events]
    assert stamps == sorted(stamps), "events must come out in time order"
    assert trace.count == 0


@pytest.mark.verilator
def test_gemm_over_a_faulty_serial_line():
    """The simulated board with line faults (1e-4 per bit, and per byte dropped or repeated, both directions):
    bursts and CRC register frames are retried until they check, so the GEMM comes out bit for bit on the
    first attempt, after some retries.

    Should a GEMM still fail (a residual risk of the framing, see ``dx1_driver.serial_transport``), it must fail
    loudly (a DriverError); it is then run again after a device reset, so that the failures are reported
    together, and the test fails.
    """
    reason = verilator_missing()
    if reason:
        pytest.skip(reason)
    process, port = start_simulator(uart=True, fault_rate=1e-4, fault_seed=3)
    # Wall-clock timeouts sized for the simulated line, so that a lost byte costs seconds, not minutes.
    transport = SerialTransport(f"socket://127.0.0.1:{port}", retries=30, **CLIENT_OPTIONS)
    try:
        assert transport.regs == "crc"
        device = Device(transport)
        rng = np.random.default_rng(5)
        a = rng.integers(-128, 128, (24, 32), dtype=np.int8)
        b = rng.integers(-128, 128, (32, 16), dtype=np.int8)
        bias = rng.integers(-1000, 1000, 16, dtype=np.int32)
        post = PostOpParams(mult=181, shift=17, relu=True)
        failures = []
        while True:
            try:
                out, _ = run_gemm(device, a, b, bias, post, timeout=TIMEOUT)
                break
            except DriverError as e:
                failures.append(e)
                assert len(failures) < 3, f"three GEMMs failed: {failures}"
                device.reset()
        np.testing.assert_array_equal(out, reference_gemm(a, b, bias, post))
        assert not failures, f"the GEMM needed {len(failures) + 1} attempts: {failures}"
        assert transport.stats.retries > 0, f"no retries: the faults did not reach the line ({transport.stats})"
    finally:
        transport.close()
        process.wait(timeout=60)


def _move_memories(q, base: int, spm_rows: int, acc_rows: int, *, store: bool, tag: int) -> None:
    """LOAD (or STORE) scratchpad rows [0, spm_rows) and accumulator rows [0, acc_rows) from (to) ``base``."""
    n = 8
    move = regs.store if store else regs.load
    q.submit([move(tag=tag, mem_addr=base, mem_stride=n, local_addr=0, rows=spm_rows, cols=1, local_row_stride=1,
                   local_col_stride=0),
              move(tag=tag + 1, mem_addr=base + spm_rows * n, mem_stride=4 * n, local_addr=0, rows=acc_rows, cols=1,
                   local_row_stride=1, local_col_stride=0, acc=True)])
    done = q.wait(2, timeout=TIMEOUT)
    assert [c.status for c in done] == [regs.ErrorCode.OK] * 2


def test_vector_commands_match_the_golden_model(device):
    """Random VECTOR (every vop, flags and overlaps), TABLE and TRANSPOSE commands, good and bad, on tile 0: the
    completions, both memories bit for bit and the LUT counters are the golden tile model's."""
    from dx1_bringup.model.tile import TileModel
    from dx1_bringup.sim.stimulus import random_int8, random_int32
    from dx1_bringup.sim.vector_stimulus import random_vector_stream
    from dx1_bringup.spec import TileConfig

    # The rows the commands touch; a quarter of them over the serial line, which moves a few KiB a second.
    serial = isinstance(device.transport, SerialTransport)
    window = TileConfig(array=8, spm_rows=128 if serial else 512, acc_rows=32 if serial else 128)
    rng = np.random.default_rng(2027)
    model = TileModel(TileConfig())
    model.spm[:window.spm_rows] = random_int8(rng, (window.spm_rows, 8))
    model.acc[:window.acc_rows] = random_int32(rng, (window.acc_rows, 8))
    size = window.spm_rows * 8 + window.acc_rows * 32
    base = device.alloc(size)
    device.write_mem(base, model.spm[:window.spm_rows].tobytes() + model.acc[:window.acc_rows].tobytes())
    q = device.queue(0)
    _move_memories(q, base, window.spm_rows, window.acc_rows, store=False, tag=1000)
    before = device.perf(0).read()
    commands = [c for c in random_vector_stream(rng, window, 120)]
    expected = [int(model.execute(c)) for c in commands]
    for start in range(0, len(commands), 16):
        q.submit(commands[start:start + 16])
        done = q.wait(len(commands[start:start + 16]), timeout=TIMEOUT, check=False)
        assert [c.status for c in done] == expected[start:start + 16]
    after = device.perf(0).read()
    out = device.alloc(size)
    _move_memories(q, out, window.spm_rows, window.acc_rows, store=True, tag=2000)
    raw = device.read_mem(out, size)
    spm = np.frombuffer(raw[:window.spm_rows * 8], dtype=np.int8).reshape(-1, 8)
    acc = np.frombuffer(raw[window.spm_rows * 8:], dtype=np.int32).reshape(-1, 8)
    np.testing.assert_array_equal(spm, model.spm[:window.spm_rows])
    np.testing.assert_array_equal(acc, model.acc[:window.acc_rows])
    unit = model.vector
    assert (after.table_hits - before.table_hits, after.table_underflows - before.table_underflows,
            after.table_overflows - before.table_overflows) == (unit.hits, unit.underflows, unit.overflows)
    assert unit.hits + unit.underflows + unit.overflows > 0, "the stream ran no LUT lanes"
    assert after.busy_vector > before.busy_vector
