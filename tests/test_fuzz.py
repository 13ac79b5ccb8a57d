"""The differential fuzzer: its streams, a planted bug it must find and reproduce, and the CI slice on the RTL."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from dx1_driver import Device

from dx1_bringup.backends import ModelTransport
from dx1_bringup.cli import main as dx1
from dx1_bringup.fuzz.generate import StreamParams, batch_events, written_ranges
from dx1_bringup.fuzz.layout import LAYOUT
from dx1_bringup.fuzz.runner import fuzz, layout_for
from dx1_bringup.replay import Submit, load_capture, replay
from dx1_bringup.spec import CHECK_ORDER, SocConfig, pack_command
from dx1_bringup.spec import Opcode as Op


def model() -> Device:
    return Device(ModelTransport())


def test_model_against_model_agrees_and_covers_every_opcode_and_error(tmp_path: Path) -> None:
    report = fuzz([model(), model()], ["model", "model"], commands=3000, seed=5, segment_commands=1000,
                  repro_dir=tmp_path)
    assert report.ok and report.commands >= 3000 and report.segments == 3
    assert set(report.coverage) >= {op.name for op in Op} | {"undefined"}
    statuses = {status for by_status in report.coverage.values() for status in by_status}
    assert statuses == {"OK", *(code.name for code in CHECK_ORDER)}
    assert not list(tmp_path.iterdir()), "no reproducer when the devices agree"


def test_streams_are_seeded() -> None:
    lay = layout_for(model().caps)

    def commands(seed: int) -> list[bytes]:
        events = batch_events(lay, np.random.default_rng(seed), StreamParams(length=30), [0, 0x8000])
        return [c for e in events if isinstance(e, Submit) for c in e.commands]

    assert commands(1) == commands(1) != commands(2)


def test_written_ranges_cover_stores_and_copies() -> None:
    cmds = [pack_command(Op.STORE, mem_addr=0x1000, mem_stride=0x100, rows=3, cols=2),
            pack_command(Op.STORE, flags={"acc": True}, mem_addr=0x1200, rows=1, cols=1),
            pack_command(Op.COPY, src_addr=0, dst_addr=0x8000, length=64),
            pack_command(Op.LOAD, mem_addr=0x9000, rows=1, cols=1)]
    # STORE 1 ends at 0x1210 (two 8-byte rows after 0x1200), STORE 2 at 0x1220: merged; the LOAD writes nothing.
    assert written_ranges(LAYOUT, cmds) == [(0x1000, 0x1220), (0x8000, 0x8040)]


class PlantedGemmBug(ModelTransport):
    """The golden model with a planted bug: tile 1 adds 1 to lane 0 of the first row of each GEMM of 8 rows or more."""

    def __init__(self) -> None:
        super().__init__()
        tile = self.model.tiles[1]
        gemm = tile._gemm

        def buggy(f: dict[str, int]) -> None:
            gemm(f)
            if f["m"] >= 8:
                tile.acc[f["c_addr"], 0] += 1

        tile._gemm = buggy


def test_a_planted_bug_is_found_and_its_reproducer_replays(tmp_path: Path) -> None:
    report = fuzz([model(), Device(PlantedGemmBug())], ["model", "planted"], commands=20000, seed=2,
                  repro_dir=tmp_path)
    assert not report.ok and report.commands < 20000
    assert "download of" in report.mismatch and "first difference at 0x" in report.mismatch
    assert report.replay_command == f"dx1 replay {report.repro} --device planted"
    capture = load_capture(report.repro)
    assert replay(capture, model()).ok
    again = replay(capture, Device(PlantedGemmBug()))
    assert not again.ok and str(again.mismatch) in report.mismatch


class LostDoorbells(ModelTransport):
    """The golden model, deaf to queue 1's doorbell after its first ``after`` rings: queue 1 stops completing."""

    def __init__(self, after: int) -> None:
        super().__init__()
        block = self.model.regmap.block("QUEUE1")
        self.doorbell = block.base + block.reg("DOORBELL").offset
        self.left = after

    def _write32(self, addr: int, value: int) -> None:
        if addr == self.doorbell:
            if not self.left:
                return
            self.left -= 1
        super()._write32(addr, value)


def test_a_device_that_stops_completing_is_reported_and_reproduced(tmp_path: Path) -> None:
    report = fuzz([model(), Device(LostDoorbells(5))], ["model", "deaf"], commands=2000, seed=4, timeout=0.2,
                  repro_dir=tmp_path)
    # Queue 0 stops at a WAIT for a SIGNAL that queue 1 never runs.
    assert not report.ok and "DeviceTimeout: queue 0: no completion for ring index" in report.mismatch
    assert "opcode 0x07) within 0.2 s" in report.mismatch
    assert "the oldest command without its completion is WAIT" in report.mismatch
    again = replay(load_capture(report.repro), Device(LostDoorbells(5)), timeout=0.2)
    assert not again.ok and again.mismatch.message.startswith("DeviceTimeout: queue 0: no completion")
    assert again.mismatch.command[0] == Op.WAIT
    assert replay(load_capture(report.repro), model()).ok


def test_differing_configurations_are_refused() -> None:
    small = Device(ModelTransport(SocConfig(mem_bytes=1 << 19)))
    with pytest.raises(ValueError, match="differs in configuration from the reference model"):
        fuzz([model(), small], ["model", "small"], commands=10, seed=1)
    with pytest.raises(ValueError, match="the fuzzer drives two tiles at once; this device has 1"):
        layout_for(Device(ModelTransport(SocConfig(tiles=1))).caps)


def test_command_line_writes_the_report(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "fuzz.json"
    assert dx1(["fuzz", "--devices", "model,model", "--commands", "500", "--seed", "3", "--out", str(out)]) == 0
    report = json.loads(out.read_text())
    assert report["ok"] and report["commands"] >= 500 and report["commands_per_second"] > 0
    assert "0 mismatches" in capsys.readouterr().out


def test_command_line_reproducer_on_a_fault(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert dx1(["fuzz", "--devices", "model,model:stuck-bit=5", "--commands", "500", "--out", str(tmp_path / "f.json"),
                "--repro-dir", str(tmp_path)]) == 1
    out = capsys.readouterr().out
    assert "replay it: dx1 replay" in out and "--device model:stuck-bit=5" in out


@pytest.mark.verilator
def test_ci_slice_model_against_rtl(sim_transport, tmp_path: Path) -> None:
    """A few hundred commands on the model and the SoC RTL, in small batches (see docs/architecture.md)."""
    report = fuzz([model(), Device(sim_transport)], ["model", "sim"], commands=300, seed=1,
                  params=StreamParams(length=4), repro_dir=tmp_path, timeout=120)
    assert report.ok, f"{report.mismatch}; {report.replay_command}"


def test_tiles_without_a_vector_unit_get_no_legal_vector_commands(tmp_path: Path) -> None:
    devices = [Device.open("model:vector=0"), Device.open("model:vector=0")]
    report = fuzz(devices, ["model:vector=0"] * 2, commands=1500, seed=3, repro_dir=tmp_path)
    assert report.ok
    for opcode in ("VECTOR", "TABLE", "TRANSPOSE"):
        assert set(report.coverage.get(opcode, {})) <= {"BAD_OPCODE"}
    with_unit = fuzz([model(), model()], ["model", "model"], commands=1500, seed=3, repro_dir=tmp_path)
    assert with_unit.coverage["VECTOR"]["OK"] > 100


def test_a_lookup_table_left_by_earlier_work_does_not_leak_into_a_segment(tmp_path: Path) -> None:
    """A reset keeps the vector unit's lookup table: each segment loads its own, so a device that ran other work
    first agrees with a fresh one (the CI slice once failed on a simulator a conformance test had used)."""
    used = model()
    n = used.caps.array
    used.write_mem(0x1000, np.arange(-128, 128, dtype=np.int8).repeat(n * 2)[: 129 * n].tobytes())
    for tile in range(used.caps.tiles):
        q = used.queue(tile)
        q.submit([pack_command(Op.LOAD, mem_addr=0x1000, mem_stride=n, rows=129, cols=1, local_row_stride=1),
                  pack_command(Op.TABLE, src_addr=0)])
        q.wait(2)
    used.reset()
    report = fuzz([model(), used], ["model", "model (used)"], commands=1500, seed=3, repro_dir=tmp_path)
    assert report.ok, report.mismatch
