"""The queue watchdog, the per-tile reset and the driver's recovery, alike on the model and the SoC RTL.

Units are stalled on purpose through :func:`dx1_bringup.backends.set_stalls`: the model's unit-stall
fault, or the simulator's test-only ``stall_units`` input.  Every test starts and ends with no stall.
"""

from __future__ import annotations

import time

import numpy as np
import pytest
from dx1_driver import (
    Device,
    DeviceTimeout,
    QueueError,
    ReplayRefused,
    TileFenced,
    open_transport,
    regs,
    replay_safe,
)

from dx1_bringup.backends import ModelTransport, open_model, set_stalls
from dx1_bringup.bringup import run_bringup
from dx1_bringup.faults import UnitStalls
from dx1_bringup.runtime.gemm_run import run_gemm
from dx1_bringup.runtime.reference import reference_gemm

#: Cycles without progress before the watchdog aborts a command.
WATCHDOG = 500
#: Wall-clock budget of one wait on the simulator.
TIMEOUT = 60.0
ROWS = 32


@pytest.fixture(params=["model", "sim"])
def device(request):
    transport = open_transport("model") if request.param == "model" else request.getfixturevalue("sim_transport")
    dev = Device(transport)
    yield dev
    set_stalls(dev.transport, ())
    dev.reset()
    if request.param == "model":
        dev.close()


def _row(dev: Device) -> int:
    return dev.caps.array


def load(dev: Device, tag: int, mem: int, local: int = 0) -> bytes:
    return regs.load(tag=tag, mem_addr=mem, mem_stride=_row(dev), local_addr=local, rows=ROWS, cols=1,
                     local_row_stride=1, local_col_stride=0)


def store(dev: Device, tag: int, mem: int, local: int = 0) -> bytes:
    return regs.store(tag=tag, mem_addr=mem, mem_stride=_row(dev), local_addr=local, rows=ROWS, cols=1,
                      local_row_stride=1, local_col_stride=0)


def _region(dev: Device, rng: np.random.Generator, size: int) -> tuple[int, bytes]:
    addr = dev.alloc(size)
    data = rng.integers(0, 256, size, dtype=np.uint8).tobytes()
    dev.write_mem(addr, data)
    return addr, data


def test_watchdog_times_out_a_stalled_dma_and_the_queue_goes_on(device):
    rng = np.random.default_rng(1)
    src, data = _region(device, rng, ROWS * _row(device))
    dst, guard = _region(device, rng, 2 * ROWS * _row(device))
    q = device.queue(0)
    q.set_watchdog(WATCHDOG)
    assert q.watchdog() == WATCHDOG
    set_stalls(device.transport, [("dma", 0)])
    start = time.monotonic()
    q.submit([load(device, 1, src), regs.fence(tag=2)])
    with pytest.raises(QueueError) as info:
        q.wait(timeout=TIMEOUT)
    detect = time.monotonic() - start
    assert info.value.code == regs.ErrorCode.TIMEOUT and info.value.index == 0, str(info.value)
    print(f"stalled DMA -> QueueError(TIMEOUT) in {detect * 1e3:.1f} ms")
    set_stalls(device.transport, ())
    recovery = q.recover(timeout=TIMEOUT)
    assert recovery.error == (regs.ErrorCode.TIMEOUT, 0)
    assert recovery.replayed == (1, 2)
    q.submit([store(device, 3, dst)])
    done = q.wait(timeout=TIMEOUT)
    assert [(c.tag, c.status) for c in done] == [(1, 0), (2, 0), (3, 0)], "each command completes once, OK"
    after = device.read_mem(dst, len(guard))
    assert after[:len(data)] == data, "the LOAD run again did not bring the data"
    assert after[len(data):] == guard[len(data):], "bytes past the STORE's footprint changed"


def test_tile_reset_spares_the_other_tile(device):
    rng = np.random.default_rng(2)
    src, data = _region(device, rng, ROWS * _row(device))
    dst, _ = _region(device, rng, ROWS * _row(device))
    q0, q1 = device.queue(0), device.queue(1)
    set_stalls(device.transport, [("core", 0)])
    q0.submit([regs.gemm(tag=10, a_addr=0, b_addr=0, c_addr=0, m=8, k_chunks=1)])
    q1.submit([load(device, 20, src), store(device, 21, dst)])
    assert [(c.tag, c.status) for c in q1.wait(timeout=TIMEOUT)] == [(20, 0), (21, 0)]
    with pytest.raises(DeviceTimeout):
        q0.wait(timeout=0.5)
    lost = q0.reset_tile()
    assert [tag for tag, _, _ in lost] == [10]
    assert (device.read_reg(q0.base, regs.Queue.HEAD), device.read_reg(q0.base, regs.Queue.TAIL)) == (0, 0)
    assert device.read_mem(dst, len(data)) == data, "tile 1's STORE lost data in tile 0's reset"
    set_stalls(device.transport, ())
    q0.submit([regs.nop(tag=11)])
    assert [(c.tag, c.status) for c in q0.wait(timeout=TIMEOUT)] == [(11, 0)]
    q1.submit([regs.nop(tag=22)])
    assert [(c.tag, c.status) for c in q1.wait(timeout=TIMEOUT)] == [(22, 0)]


@pytest.mark.parametrize("watchdog", [0, WATCHDOG], ids=["no-watchdog", "watchdog"])
def test_recovery_completes_each_command_once(device, watchdog):
    rng = np.random.default_rng(3)
    src, data = _region(device, rng, ROWS * _row(device))
    dst, guard = _region(device, rng, 3 * ROWS * _row(device))
    q = device.queue(0)
    q.set_watchdog(watchdog)
    set_stalls(device.transport, [("dma", 0)])
    out = dst + ROWS * _row(device)
    q.submit([load(device, 1, src), store(device, 2, out), regs.nop(tag=3)])
    with pytest.raises(QueueError if watchdog else DeviceTimeout):
        q.wait(timeout=TIMEOUT if watchdog else 0.5)
    # Without a watchdog the released LOAD may finish before the reset: then nothing is lost, and
    # recovery resubmits only what has no completion; either way each command completes once.
    set_stalls(device.transport, ())
    q.recover(timeout=TIMEOUT)
    done = q.wait(timeout=TIMEOUT)
    assert sorted(c.tag for c in done) == [1, 2, 3] and all(c.ok for c in done), done
    assert q.outstanding == 0
    after = device.read_mem(dst, len(guard))
    size = len(data)
    assert after[size:2 * size] == data, "the recovered STORE wrote the wrong bytes"
    assert after[:size] + after[2 * size:] == guard[:size] + guard[2 * size:], "bytes outside the STORE changed"


def test_recovery_refuses_to_replay_an_accumulating_gemm(device):
    q = device.queue(0)
    set_stalls(device.transport, [("core", 0)])
    acc = regs.gemm(tag=5, a_addr=0, b_addr=0, c_addr=0, m=8, k_chunks=1, accumulate=True)
    assert not replay_safe(acc) and replay_safe(regs.gemm(tag=6, a_addr=0, b_addr=0, c_addr=0, m=8, k_chunks=1))
    q.submit([acc])
    with pytest.raises(DeviceTimeout):
        q.wait(timeout=0.5)
    # Recovered while the core is still stuck: its GEMM may have accumulated part of its rows.
    with pytest.raises(ReplayRefused, match="tag 5 \\(GEMM\\)") as info:
        q.recover(timeout=TIMEOUT)
    assert [tag for tag, _, _ in info.value.lost] == [5]
    set_stalls(device.transport, ())
    q.submit([regs.nop(tag=7)])
    assert [c.tag for c in q.wait(timeout=TIMEOUT)] == [7], "the queue is not usable after the refused replay"


def test_fenced_tile_gets_no_work(device):
    device.fence(1, "failed its self-test (test)")
    assert device.usable_tiles == [0]
    with pytest.raises(TileFenced, match="tile 1 is fenced off"):
        device.queue(1)
    rng = np.random.default_rng(4)
    a = rng.integers(-128, 128, (40, 24), dtype=np.int8)
    b = rng.integers(-128, 128, (24, 24), dtype=np.int8)
    out, stats = run_gemm(device, a, b, timeout=TIMEOUT)
    np.testing.assert_array_equal(out, reference_gemm(a, b))
    assert stats.tile_ids == [0]
    assert device.perf(1).read().macs == 0


def test_a_tile_that_keeps_timing_out_is_fenced(device):
    device.fence_after = 2
    q = device.queue(1)
    q.set_watchdog(WATCHDOG)
    set_stalls(device.transport, [("dma", 1)])
    src = device.alloc(ROWS * _row(device))
    q.submit([load(device, 1, src)])
    with pytest.raises(QueueError):
        q.wait(timeout=TIMEOUT)
    q.recover(timeout=TIMEOUT)
    with pytest.raises(QueueError):
        q.wait(timeout=TIMEOUT)
    with pytest.raises(TileFenced):
        q.recover(timeout=TIMEOUT)
    assert device.usable_tiles == [0]


def test_model_stall_fault_strings():
    transport = open_model("model:stall=dma0+core1")
    assert isinstance(transport, ModelTransport)
    assert transport.model.stalled == {("dma", 0), ("core", 1)}
    assert str(UnitStalls.parse("stall=dma0+core1")) == "stall=core1+dma0"
    for bad in ("model:stall=dma", "model:stall=gpu0", "model:stall=dma7"):
        with pytest.raises(ValueError, match="stall"):
            open_model(bad)


def test_a_tile_that_fails_its_self_test_is_fenced():
    transport = ModelTransport()
    transport.model.tiles[1]._gemm = lambda fields: None  # tile 1's array computes nothing
    with Device(transport) as dev:
        report = run_bringup(dev, seed=5, mem_bytes=4096, quiet=True)
        assert report.failed_step.name == "gemm", report.failed_step
        assert list(dev.fenced) == [1] and "self-test" in dev.fenced[1]
        rng = np.random.default_rng(5)
        a = rng.integers(-128, 128, (20, 16), dtype=np.int8)
        b = rng.integers(-128, 128, (16, 16), dtype=np.int8)
        out, stats = run_gemm(dev, a, b)
        np.testing.assert_array_equal(out, reference_gemm(a, b))
        assert stats.tile_ids == [0]


def test_runtime_moves_work_off_a_tile_that_keeps_timing_out(device):
    """Tile 1's DMA is stuck for good: the runtime recovers it until it is fenced, then finishes on tile 0."""
    device.queue(1).set_watchdog(WATCHDOG)
    set_stalls(device.transport, [("dma", 1)])
    rng = np.random.default_rng(6)
    a = rng.integers(-128, 128, (96, 40), dtype=np.int8)
    b = rng.integers(-128, 128, (40, 24), dtype=np.int8)
    out, stats = run_gemm(device, a, b, timeout=TIMEOUT)
    np.testing.assert_array_equal(out, reference_gemm(a, b))
    assert list(device.fenced) == [1] and device.strikes[1] == device.fence_after
    assert stats.tile_ids == [0]


def test_gemm_stats_count_the_commands_a_recovery_resubmits(device):
    """Tile 0's DMA stalls until its first recovery: the run's commands include what was resubmitted."""
    rng = np.random.default_rng(7)
    a = rng.integers(-128, 128, (40, 24), dtype=np.int8)
    b = rng.integers(-128, 128, (24, 24), dtype=np.int8)
    _out, clean = run_gemm(device, a, b, tiles=1, timeout=TIMEOUT)
    assert clean.resubmitted == {0: 0}
    q = device.queue(0)
    q.set_watchdog(WATCHDOG)
    set_stalls(device.transport, [("dma", 0)])
    recover = q.recover
    replayed = []

    def recover_unstalled(**kwargs):
        set_stalls(device.transport, ())  # the fault goes away: the resubmitted commands run
        r = recover(**kwargs)
        replayed.append(len(r.replayed))
        return r

    q.recover = recover_unstalled
    out, stats = run_gemm(device, a, b, tiles=1, timeout=TIMEOUT)
    np.testing.assert_array_equal(out, reference_gemm(a, b))
    assert len(replayed) == 1 and replayed[0] > 0
    assert stats.resubmitted == {0: replayed[0]}
    assert stats.commands == {0: clean.commands[0] + replayed[0]}
