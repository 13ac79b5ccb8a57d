"""The capture file format, replay on any device, and the two-tile reproducer converted to a capture."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest
from dx1_driver import Device, DriverError

from dx1_bringup.backends import ModelTransport
from dx1_bringup.cli import main as dx1
from dx1_bringup.model.device import MemoryFaults
from dx1_bringup.replay import (
    FORMAT_VERSION,
    Capture,
    CaptureError,
    CaptureWriter,
    DmaWindow,
    Doorbell,
    Download,
    Recorder,
    Seen,
    Submit,
    Upload,
    Wait,
    describe_command,
    first_difference,
    load_capture,
    record,
    replay,
)
from dx1_bringup.replay.convert import convert_two_tile, two_tile_events
from dx1_bringup.runtime.gemm_run import run_gemm
from dx1_bringup.runtime.reference import reference_gemm
from dx1_bringup.spec import SPEC_VERSION, Opcode, SocConfig, pack_command

TWO_TILE = Path(__file__).parent / "data" / "two-tile-hang.json"


def model() -> Device:
    return Device(ModelTransport())


def small_events() -> list:
    """A LOAD, a STORE of what it loaded elsewhere, a refused STORE, and the bytes read back."""
    return [
        DmaWindow(0, 0x4000, 0x8000),
        Upload(0x4000, bytes(range(256)) * 2),
        Submit(0, (pack_command(Opcode.LOAD, tag=1, mem_addr=0x4000, rows=1, cols=8, local_col_stride=1),
                   pack_command(Opcode.STORE, tag=2, mem_addr=0x6000, rows=1, cols=8, local_col_stride=1),
                   pack_command(Opcode.STORE, tag=3, mem_addr=0x8000, rows=1, cols=1))),
        Doorbell(0),
        Wait(0, None),
        Download(0x6000, 64, None),
    ]


@pytest.fixture
def recorded() -> Capture:
    return record(small_events(), model(), 6, note="test")


def test_record_fills_completions_and_bytes(recorded: Capture) -> None:
    wait = recorded.events[4]
    assert wait == Wait(0, (Seen(0, 1, Opcode.LOAD, 0), Seen(1, 2, Opcode.STORE, 0), Seen(2, 3, Opcode.STORE, 7)))
    assert recorded.events[5].data == bytes(range(64))
    assert recorded.config["tiles"] == 2 and recorded.commands == 3


def test_save_load_round_trip_and_replay(tmp_path: Path, recorded: Capture) -> None:
    path = tmp_path / "small.capture"
    recorded.save(path)
    header = json.loads(path.read_text().splitlines()[0])
    assert header["format"] == "dx1-capture" and header["format_version"] == FORMAT_VERSION
    assert header["spec_version"] == SPEC_VERSION and header["config"] == recorded.config
    loaded = load_capture(path)
    assert loaded.events == recorded.events and loaded.ring_log2 == 6 and loaded.note == "test"
    result = replay(loaded, model())
    assert result.ok and result.events == 6 and result.commands == 3


def test_writer_streams_events(tmp_path: Path, recorded: Capture) -> None:
    path = tmp_path / "streamed.capture"
    with CaptureWriter(path, [recorded.config], 6) as writer:
        writer.write_all(recorded.events[:3])
        # Before the trailer the capture is refused as truncated: a crashed run is recognisable.
        writer._file.flush()
        with pytest.raises(CaptureError, match="truncated: it ends after 3 event lines without the trailer"):
            load_capture(path)
    assert load_capture(path).events == recorded.events[:3]


def _saved(tmp_path: Path, capture: Capture) -> tuple[Path, list[bytes]]:
    path = tmp_path / "c.capture"
    capture.save(path)
    return path, path.read_bytes().splitlines(keepends=True)


def test_truncated_capture_is_refused(tmp_path: Path, recorded: Capture) -> None:
    path, lines = _saved(tmp_path, recorded)
    path.write_bytes(b"".join(lines[:-2]))
    with pytest.raises(CaptureError, match="truncated"):
        load_capture(path)
    path.write_bytes(b"".join(lines)[:-5])   # cut inside the trailer
    with pytest.raises(CaptureError, match="truncated"):
        load_capture(path)
    path.write_bytes(b"".join(lines[:3] + lines[-1:]))   # events missing, trailer kept
    with pytest.raises(CaptureError, match="the trailer counts 6 events, the file holds 2"):
        load_capture(path)


def test_corrupted_capture_is_refused(tmp_path: Path, recorded: Capture) -> None:
    path, lines = _saved(tmp_path, recorded)
    data = bytearray(b"".join(lines))
    at = data.index(b'"data":"') + 10
    data[at] = ord("f") if data[at] != ord("f") else ord("e")   # one hex digit of the upload
    path.write_bytes(bytes(data))
    with pytest.raises(CaptureError, match="corrupted: the SHA-256 of its contents is"):
        load_capture(path)
    path.write_bytes(b"not json\n")
    with pytest.raises(CaptureError, match="not a dx1-capture capture"):
        load_capture(path)


def _with_header(tmp_path: Path, recorded: Capture, **changes) -> Path:
    path, lines = _saved(tmp_path, recorded)
    header = json.loads(lines[0])
    header.update(changes)
    path.write_bytes(b"".join([(json.dumps(header) + "\n").encode(), *lines[1:]]))
    return path


def test_other_spec_or_format_version_is_refused(tmp_path: Path, recorded: Capture) -> None:
    ours = rf"{SPEC_VERSION >> 16}\.{SPEC_VERSION & 0xFFFF}"
    refused = rf"recorded with spec version 2\.0, but this framework implements spec {ours}"
    with pytest.raises(CaptureError, match=refused):
        load_capture(_with_header(tmp_path, recorded, spec_version=0x0002_0000))
    with pytest.raises(CaptureError, match="capture format version 99, but this reader reads versions 1, 2"):
        load_capture(_with_header(tmp_path, recorded, format_version=99))


def test_other_configuration_is_refused(recorded: Capture) -> None:
    small = Device(ModelTransport(SocConfig(tiles=1, mem_bytes=1 << 16)))
    with pytest.raises(CaptureError, match=r"another configuration: mem_bytes 1048576 in the capture, 65536 on this "
                                           r"device; tiles 2 in the capture, 1 on this device"):
        replay(recorded, small)


def test_replay_names_the_command_of_a_wrong_completion(recorded: Capture) -> None:
    wait = recorded.events[4]
    wrong = Wait(0, (*wait.completions[:2], dataclasses.replace(wait.completions[2], status=0)))
    result = replay(dataclasses.replace(recorded, events=[*recorded.events[:4], wrong, recorded.events[5]]), model())
    assert not result.ok and result.mismatch.event == 4 and result.mismatch.kind == "wait"
    assert result.mismatch.command == recorded.events[2].commands[2]
    assert str(result.mismatch) == (
        "event 4 (wait): queue 0 completion 2 (status 0 expected, 7 seen) of command STORE flags=0x0 tag=3 "
        "mem_addr=0x8000 mem_stride=0x0 local_addr=0x0 rows=1 cols=1 local_row_stride=0x0 local_col_stride=0x0")


def test_replay_names_the_first_differing_byte(recorded: Capture) -> None:
    download = recorded.events[5]
    data = bytearray(download.data)
    data[0x21] ^= 0x10
    changed = dataclasses.replace(download, data=bytes(data))
    result = replay(dataclasses.replace(recorded, events=[*recorded.events[:5], changed]), model())
    assert str(result.mismatch) == ("event 5 (download): download of 64 bytes at 0x6000: first difference at 0x6021 "
                                    "(offset 33): expected 31 22 23 24 25 26 27 28, got 21 22 23 24 25 26 27 28 "
                                    "(1 of 64 bytes differ)")


def test_replay_reports_a_completion_that_never_comes(recorded: Capture) -> None:
    wait = recorded.events[4]
    more = Wait(0, (*wait.completions, Seen(3, 4, Opcode.NOP, 0)))
    events = [*recorded.events[:4], more]
    with pytest.raises(ValueError, match="cannot wait for 4 completions: 3 outstanding"):
        replay(dataclasses.replace(recorded, events=events), model())


def test_replay_command_line_exit_status(tmp_path: Path, recorded: Capture,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    path, lines = _saved(tmp_path, recorded)
    assert dx1(["replay", str(path), "--device", "model"]) == 0
    assert "every completion and downloaded byte agrees" in capsys.readouterr().out
    assert dx1(["replay", str(path), "--device", "model:stuck-bit=0"]) == 1
    assert "mismatch on model:stuck-bit=0 at event" in capsys.readouterr().out
    assert dx1(["replay", str(path), "--device", "bogus"]) == 2
    assert "unknown device 'bogus'" in capsys.readouterr().err
    path.write_bytes(b"".join(lines[:-1]))
    assert dx1(["replay", str(path)]) == 2
    assert "truncated" in capsys.readouterr().err


def test_describe_command_decodes_every_field() -> None:
    assert describe_command(pack_command(Opcode.GEMM, tag=7, flags={"accumulate": True}, a_addr=1, b_addr=2,
                                         c_addr=3, m=4, k_chunks=5)) == (
        "GEMM flags=0x1 tag=7 a_addr=0x1 b_addr=0x2 c_addr=0x3 m=4 k_chunks=5")
    assert describe_command(pack_command(Opcode.NOP, tag=1, raw=1 << 200)) == (
        "NOP flags=0x0 tag=1 reserved_bits=0x100000000000000000000000000000000000000000000000000")
    assert describe_command(bytes([0x5A]) + bytes(31)) == "opcode 0x5a (undefined) flags=0x0 tag=0"
    assert first_difference(b"abc", b"abc") == "no difference"


def test_recorder_captures_a_gemm_that_replays(tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    a = rng.integers(-128, 128, (37, 29), dtype=np.int8)
    b = rng.integers(-128, 128, (29, 19), dtype=np.int8)
    path = tmp_path / "gemm.capture"
    dev = model()
    with dev, Recorder(dev, path, note="a 37x29x19 GEMM"):
        c, _stats = run_gemm(dev, a, b)
    assert np.array_equal(c, reference_gemm(a, b))
    capture = load_capture(path)
    kinds = {e.kind for e in capture.events}
    assert kinds == {"upload", "submit", "doorbell", "wait", "download"} and capture.note == "a 37x29x19 GEMM"
    assert replay(capture, model()).ok
    broken = replay(capture, Device(ModelTransport(faults=MemoryFaults(stuck_bit=3))))
    assert not broken.ok


def test_recorder_records_windows_and_waits_by_tag(tmp_path: Path) -> None:
    path = tmp_path / "tags.capture"
    dev = model()
    with dev, Recorder(dev, path):
        q = dev.queue(1)
        q.set_dma_window(0x4000, 0x8000)
        q.submit([pack_command(Opcode.NOP, tag=t) for t in (5, 6, 5, 7)])
        assert [c.index for c in q.wait(iter([7, 5]))] == [0, 3]
        assert [c.tag for c in q.wait(check=False)] == [6, 5]
        dev.write_mem(0x4000, np.arange(4, dtype=np.uint16))
        assert dev.read_mem(0x4000, 8) == np.arange(4, dtype="<u2").tobytes()
    capture = load_capture(path)
    assert capture.events[0] == DmaWindow(1, 0x4000, 0x8000)
    assert capture.events[3] == Wait(1, (Seen(0, 5, 0, 0), Seen(3, 7, 0, 0)), by_tag=True)
    assert replay(capture, model()).ok


def test_recorder_stops_at_close_and_skips_refused_calls(tmp_path: Path) -> None:
    """Only calls that took effect are captured, and nothing after close: the capture replays."""
    path = tmp_path / "close.capture"
    dev = model()
    with dev:
        with Recorder(dev, path) as rec:
            q = dev.queue(0)
            with pytest.raises(ValueError, match="outside device memory"):
                dev.write_mem(dev.caps.mem_bytes - 4, bytes(8))
            q.submit([pack_command(Opcode.NOP, tag=1)])
            with pytest.raises(ValueError, match="cannot wait for 2 completions"):
                q.wait(2)
            assert [c.tag for c in q.wait()] == [1]
        assert dev.observers == ()
        dev.write_mem(0, bytes(8))
        rec.close()
    capture = load_capture(path)
    assert [e.kind for e in capture.events] == ["submit", "doorbell", "wait"]
    assert replay(capture, model()).ok


def test_recorder_needs_a_device_with_nothing_allocated(tmp_path: Path) -> None:
    dev = model()
    dev.alloc(64)
    with pytest.raises(DriverError, match="needs devices with nothing allocated yet.*chip 0 .* has 64 bytes"):
        Recorder(dev, tmp_path / "x.capture")


def test_two_tile_stream_converts_as_its_script_runs_it(tmp_path: Path) -> None:
    events = two_tile_events(TWO_TILE)
    kinds = [e.kind for e in events]
    assert kinds == (["dma_window", "upload"] * 2 + (["submit", "doorbell"] * 2 + ["wait"] * 2) * 2
                     + ["download"] * 2)
    assert events[0] == DmaWindow(0, 8192, 8192 + 262144)
    assert sum(len(e.commands) for e in events if isinstance(e, Submit)) == 88
    other = tmp_path / "other.json"
    other.write_text('{"tiles": [{"tile": 0, "batches": []}]}')
    with pytest.raises(ValueError, match="not a two-tile stream .* missing 'region_base'"):
        two_tile_events(other)

def test_two_tile_capture_replays_on_the_model(tmp_path: Path) -> None:
    capture = convert_two_tile(TWO_TILE, model())
    waits = [e for e in capture.events if isinstance(e, Wait)]
    assert [len(w.completions) for w in waits] == [24, 24, 20, 20]
    path = tmp_path / "two-tile.capture"
    capture.save(path)
    result = replay(load_capture(path), model())
    assert result.ok and result.commands == 88


@pytest.mark.verilator
def test_two_tile_capture_replays_on_the_rtl(sim_transport) -> None:
    """The stream that deadlocked the SoC (COPY write bursts, issue #12) completes as the model does."""
    capture = convert_two_tile(TWO_TILE, model())
    result = replay(capture, Device(sim_transport), timeout=120)
    assert result.ok, str(result.mismatch)
