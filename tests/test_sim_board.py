"""``sim:chips=2``: a board of two chips in a ring (two instances of one Verilator model of a chip in one server),
against the golden model's ``model:chips=2``: the link's SEND sequence byte for byte (counters, CRC faults, a port
forced down, a cut wire), the differential link fuzzer, the collectives over the link with every result checked,
and a SEND longer than its queue's watchdog budget (link frames are progress).

The board's build (a chip's generated Verilog and the native server: minutes the first time) is made once, by the
module's fixture; each test then starts a fresh board of its own (a fraction of a second).
"""

from __future__ import annotations

import numpy as np
import pytest
from dx1_driver import Device, regs
from link_script import script

from dx1_bringup.backends import ModelTransport, open_sim_board
from dx1_bringup.cli import main
from dx1_bringup.collectives import DeviceGroup, segment
from dx1_bringup.collectives.faults import fault_table
from dx1_bringup.model.board import ModelBoard
from dx1_bringup.sim import verilator_missing
from dx1_bringup.sim.configs import chip_verilog, ring_config
from dx1_bringup.sim.native import CHIP_MODULE, build
from dx1_bringup.spec import PORT_NEXT, LinkOp, SocConfig

pytestmark = [pytest.mark.verilator, pytest.mark.own_build, pytest.mark.slow, pytest.mark.xdist_group("sim_board")]

CONFIG = ring_config(SocConfig())
DEVICE = "sim:chips=2"


@pytest.fixture(scope="module")
def built() -> None:
    reason = verilator_missing()
    if reason:
        pytest.skip(reason)
    build(CHIP_MODULE, chip_verilog(SocConfig()))


def _chips(transports) -> list[Device]:
    return [Device(t, ring_log2=4) for t in transports]


def test_the_send_sequence_and_its_faults_agree_with_the_golden_model(built) -> None:
    model = ModelBoard(2, CONFIG)
    model_devs = _chips(ModelTransport(model=dev) for dev in model.devices)

    def model_cut(dev: Device, port: int) -> None:
        # The model has no wires: its stand-in for a cut one is that end held down (CONTROL is not compared then).
        model.devices[dev.caps.rank].link.force_down[port] = True

    transports = open_sim_board(DEVICE)
    rtl_devs = _chips(transports)
    try:
        assert [(d.caps.rank, d.caps.chips, d.caps.link_ports) for d in rtl_devs] == [(0, 2, 2), (1, 2, 2)]
        expected = script(model_devs, CONFIG, model_cut, full=True)
        got = script(rtl_devs, CONFIG, lambda dev, port: transports[dev.caps.rank].cut(port), full=True)
    finally:
        for d in rtl_devs + model_devs:
            d.close()
    for step, (e, g) in enumerate(zip(expected, got, strict=True)):
        assert g == e, f"step {step}: RTL {g!r} but the model {e!r}"
    statuses = [s for s in got if isinstance(s, int)]
    assert {int(regs.ErrorCode.LINK_CRC), int(regs.ErrorCode.LINK_DOWN), 0} <= set(statuses)


def test_the_link_fuzzer_finds_the_board_equal_to_the_model(built, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["fuzz-link", "--commands", "200", "--seed", "3", "--boards", f"model:chips=2;{DEVICE}"]) == 0
    assert "the boards agree" in capsys.readouterr().out


def test_a_board_on_threads_runs_the_cycles_of_one_thread(built, capsys: pytest.CaptureFixture[str]) -> None:
    """sim:chips=4 with its chips ticked on 2 and on 3 threads: the link fuzzer finds each equal to one thread's board
    (every chip's received bytes, semaphores and link counters after each batch)."""
    assert main(["fuzz-link", "--commands", "120", "--seed", "5", "--boards",
                 "sim:chips=4;sim:chips=4,threads=2"]) == 0
    assert main(["fuzz-link", "--commands", "60", "--seed", "6", "--boards",
                 "sim:chips=4,threads=3;sim:chips=4"]) == 0
    assert capsys.readouterr().out.count("the boards agree") == 2


def test_collectives_over_the_link_are_exact(built) -> None:
    with DeviceGroup.open(DEVICE, timeout=60) as g:
        assert g.has_link and g.size == 2
        n, count = 2, 3001
        rng = np.random.default_rng(7)
        ins = [rng.integers(-2**31, 2**31, count, dtype=np.int64).astype(np.int32) for _ in range(n)]
        expect = np.sum(np.stack(ins).astype(np.int64), axis=0).astype(np.uint32).astype(np.int32)
        b, out = g.alloc(count), g.alloc(count)
        g.write(b, ins)
        g.all_reduce(b, out)
        assert all(np.array_equal(x, expect) for x in g.read(out))
        parts = g.alloc(0, shapes=[segment(count, n, r)[1] - segment(count, n, r)[0] for r in range(n)])
        g.reduce_scatter(b, parts)
        assert all(np.array_equal(p, expect[slice(*segment(count, n, r))]) for r, p in enumerate(g.read(parts)))
        g.write(parts, [ins[r][slice(*segment(count, n, r))] for r in range(n)])
        g.all_gather(parts, out)
        gathered = np.concatenate([ins[r][slice(*segment(count, n, r))] for r in range(n)])
        assert all(np.array_equal(x, gathered) for x in g.read(out))


def test_the_cost_model_predicts_the_boards_collectives_within_ten_percent(built) -> None:
    """The link collectives' cost model (perfmodel/collectives.py: the spec's SEND timing, the RTL's launch and
    token costs) against the Verilator board's cycles, small sizes and large, as `dx1 collectives` measures.

    The board's chips share one clock, which runs on while a rank's host is late to ring its doorbell: on a
    loaded host a small collective's cycles can hold some hundreds of cycles of that skew.  The device's own
    cost is the least of a few runs, so each size's best of three is held to the model."""
    from dx1_bringup.collectives.perf import measure

    with DeviceGroup.open(DEVICE, timeout=120) as g:
        for op in ("all_reduce", "all_gather", "reduce_scatter"):
            runs = [measure(g, op, [1024, 65536], iters=1, warmup=1)[0] for _ in range(3)]
            for size, rows in zip((1024, 65536), zip(*runs, strict=True), strict=True):
                assert all(row.out_of_place.wrong == 0 for row in rows)
                best = min((row.out_of_place for row in rows), key=lambda r: r.cycles)
                assert abs(best.error_percent) < 10.0, (op, size, [row.out_of_place.cycles for row in rows],
                                                        best.predicted)


@pytest.mark.parametrize("board", ["model", "sim"])
def test_a_send_longer_than_the_watchdog_budget_completes(built, board: str) -> None:
    """QUEUE0.WATCHDOG of 200 cycles, a 64 KiB SEND of some 8000 cycles: the frames moving on the link are
    progress, so it completes OK (the gateware once counted only the tile's own units and aborted it)."""
    transports = open_sim_board(DEVICE) if board == "sim" else [
        ModelTransport(model=dev) for dev in ModelBoard(2, CONFIG).devices]
    a, b = devs = _chips(transports)
    try:
        length = 1 << 16
        data = np.random.default_rng(1).integers(0, 256, length, dtype=np.uint8).tobytes()
        a.write_mem(0x10000, data)
        b.write_reg(b.link_base, regs.Link.WINDOW_LIMIT, CONFIG.mem_bytes)
        q = a.queue(0)
        q.set_watchdog(200)
        q.submit([regs.send(tag=1, port=PORT_NEXT, op=LinkOp.WRITE, src_addr=0x10000, dst_addr=0x40000,
                            length=length, sem=0, count=1)], timeout=60)
        (done,) = q.wait(check=False, timeout=60)
        assert regs.ErrorCode(done.status) == regs.ErrorCode.OK
        assert b.read_mem(0x40000, length) == data and b.semaphore(0) == 1
    finally:
        for d in devs:
            d.close()


def test_a_frozen_board_fails_every_rank_within_the_deadline_and_a_cut_wire_with_link_down(built) -> None:
    rows = {(r.fault, r.rank): r for r in fault_table([DEVICE], timeout=2.0, faults=("frozen simulator", "cut link"))}
    for rank in (0, 1):
        frozen, cut = rows["frozen simulator", rank], rows["cut link", rank]
        assert frozen.outcome.startswith("RankFailed about rank ") and frozen.seconds < 6.0, frozen
        assert cut.outcome.endswith(": LINK_DOWN") and cut.seconds < 2.0, cut


def test_a_model_board_capture_replays_on_the_verilator_board(built, tmp_path) -> None:
    """Link collectives recorded on model:chips=2 replay on sim:chips=2: every completion and byte agrees."""
    from dx1_bringup.replay import Recorder, load_capture, replay

    path = tmp_path / "board.capture"
    with DeviceGroup.open("model:chips=2") as group:
        with Recorder(group.devs, path):
            rng = np.random.default_rng(5)
            for size in (1, 1001, 9000):
                bufs = group.alloc(size)
                group.write(bufs, [rng.integers(-99, 99, size, dtype=np.int32) for _ in range(2)])
                group.all_reduce(bufs, chunk_bytes=4096)
                group.read(bufs)
                group.free(bufs)
    capture = load_capture(path)
    chips = Device.open_board(DEVICE)
    try:
        result = replay(capture, chips, timeout=30)
    finally:
        for chip in chips:
            chip.close()
    assert result.ok, result.mismatch
    assert result.commands == capture.commands > 0


def test_a_fuzz_capture_with_mended_links_replays_on_the_verilator_board(built, tmp_path) -> None:
    """`dx1 fuzz-link`'s session on model:chips=2, ports forced down and mended between batches, replays on
    sim:chips=2.  The replay sends right after a mend, while the RTL port's handshake is still under way: its SEND
    completed LINK_DOWN there (the model's ports come up at once) until the sender waited `up_wait_cycles`."""
    from dx1_bringup.replay import RegWrite, load_capture, replay

    path = tmp_path / "fuzz.capture"
    assert main(["fuzz-link", "--commands", "400", "--boards", "model:chips=2;model:chips=2",
                 "--capture", str(path)]) == 0
    capture = load_capture(path)
    chips = Device.open_board(DEVICE)
    try:
        control = {chips[0].link_base + regs.Link.CONTROL + 4 * port for port in (0, 1)}
        writes = [e.value for e in capture.events if isinstance(e, RegWrite) and e.addr in control]
        assert 1 << regs.Link.CONTROL_FORCE_DOWN[0] in writes and 0 in writes
        result = replay(capture, chips, timeout=30)
    finally:
        for chip in chips:
            chip.close()
    assert result.ok, result.mismatch
    assert result.commands == capture.commands == 400


def test_the_boardspeed_bench_runs_each_board_idle_for_its_cycles(built) -> None:
    """`dx1 bench --only boardspeed`: every chip of one SoC and of boards of 2 and 4 chips runs the idle cycles."""
    from dx1_bringup.bench_boardspeed import boardspeed_bench

    report = boardspeed_bench(rounds=1, cycles=20_000)
    assert {label: run["chips"] for label, run in report["best"].items()} == {
        "sim": 1, "sim:chips=2": 2, "sim:chips=4": 4, "sim:chips=4,threads=2": 4}
    assert all(run["cycles"] == 20_000 for run in report["best"].values())
