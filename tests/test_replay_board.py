"""Captures of several chips: a board's (or a group's) session recorded with one event stream, replayed on a
fresh board in the order recorded, refused on the wrong board, and a changed byte found on its chip."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest
from dx1_driver import Device

from dx1_bringup.cli import main
from dx1_bringup.collectives import DeviceGroup
from dx1_bringup.replay import (
    Capture,
    CaptureError,
    Download,
    Recorder,
    RegWrite,
    ReplayResult,
    Upload,
    load_capture,
    replay,
)


def _replay_on(device: str, capture: Capture) -> ReplayResult:
    """``capture`` replayed on a fresh board ``device``, closed again."""
    chips = Device.open_board(device)
    try:
        return replay(capture, chips, timeout=10)
    finally:
        for chip in chips:
            chip.close()


def _collectives(group: DeviceGroup, seed: int = 1) -> None:
    """Link all-reduces of sizes 0, fewer elements than chips, uneven, several chunks; a broadcast and a barrier."""
    rng = np.random.default_rng(seed)
    for size in (0, 1, 1001, 20000):
        bufs = group.alloc(size)
        group.write(bufs, [rng.integers(-1000, 1000, size, dtype=np.int32) for _ in range(group.size)])
        group.all_reduce(bufs, chunk_bytes=4096)
        group.read(bufs)
        group.broadcast(bufs, root=group.size - 1)
        group.read(bufs)
        group.free(bufs)
    group.barrier()


@pytest.fixture(scope="module")
def board_capture(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("board") / "board.capture"
    with DeviceGroup.open("model:chips=4") as group:
        assert group.has_link
        with Recorder(group.devs, path, note="link collectives on model:chips=4"):
            _collectives(group)
    return path


def test_a_board_session_is_one_stream_with_every_chip(board_capture: Path) -> None:
    capture = load_capture(board_capture)
    assert capture.chips == 4 and [c["rank"] for c in capture.configs()] == [0, 1, 2, 3]
    assert {e.chip for e in capture.events} == {0, 1, 2, 3}
    kinds = {e.kind for e in capture.events}
    assert {"submit", "doorbell", "wait", "upload", "download", "reg_write"} <= kinds
    # The link windows the collectives set are register writes of every chip.
    assert {e.chip for e in capture.events if isinstance(e, RegWrite)} == {0, 1, 2, 3}


def test_a_board_capture_replays_on_a_fresh_board(board_capture: Path) -> None:
    capture = load_capture(board_capture)
    result = _replay_on("model:chips=4", capture)
    assert result.ok, result.mismatch
    assert result.events == len(capture.events) and result.commands == capture.commands > 0


def test_dx1_replay_runs_a_board_capture_and_refuses_the_wrong_board(board_capture: Path,
                                                                     capsys: pytest.CaptureFixture) -> None:
    assert main(["replay", str(board_capture), "--device", "model:chips=4"]) == 0
    assert "(4 chips)" in capsys.readouterr().out
    assert main(["replay", str(board_capture), "--device", "model:chips=2"]) == 2
    assert "recorded on 4 chip(s), but 2 device(s)" in capsys.readouterr().err
    # Four separate models have no link: their configuration is not the board's.
    assert main(["replay", str(board_capture), "--device", "model*4"]) == 2
    assert "another configuration" in capsys.readouterr().err
    assert main(["diff", str(board_capture), "--device", "model:chips=4", "--device", "model:chips=4"]) == 2
    assert "diff and shrink bisect one chip's capture" in capsys.readouterr().err


def test_a_changed_byte_is_found_on_its_chip(board_capture: Path, tmp_path: Path) -> None:
    capture = load_capture(board_capture)
    k = max(i for i, e in enumerate(capture.events) if isinstance(e, Download) and e.chip == 2 and e.length)
    event = capture.events[k]
    capture.events[k] = Download(event.addr, event.length, bytes([event.data[0] ^ 1]) + event.data[1:], 2)
    changed = tmp_path / "changed.capture"
    capture.save(changed)
    result = _replay_on("model:chips=4", load_capture(changed))
    assert not result.ok and result.mismatch.event == k
    assert result.mismatch.message.startswith("chip 2: download of")


def test_a_group_of_separate_devices_records_and_replays(tmp_path: Path) -> None:
    path = tmp_path / "group.capture"
    with DeviceGroup.open("model*3") as group:
        assert not group.has_link
        with Recorder(group.devs, path):
            _collectives(group, seed=2)
    capture = load_capture(path)
    assert capture.chips == 3 and {e.chip for e in capture.events} == {0, 1, 2}
    assert main(["replay", str(path), "--device", "model*3"]) == 0


def test_dx1_collectives_writes_a_capture(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    path = tmp_path / "cli.capture"
    assert main(["collectives", "--device", "model:chips=2", "--op", "all", "--bytes", "0,4,4096", "--iters", "1",
                 "--capture", str(path)]) == 0
    assert f"capture of 2 chip(s) written to {path}" in capsys.readouterr().out
    assert main(["replay", str(path), "--device", "model:chips=2"]) == 0


def test_an_event_of_a_chip_the_header_lacks_is_corrupted(board_capture: Path, tmp_path: Path) -> None:
    lines = board_capture.read_bytes().splitlines(keepends=True)
    event = json.loads(lines[1])
    event["chip"] = 7
    body = [lines[0], (json.dumps(event) + "\n").encode(), *lines[2:-1]]
    trailer = {"kind": "end", "events": len(body) - 1, "sha256": hashlib.sha256(b"".join(body)).hexdigest()}
    bad = tmp_path / "bad.capture"
    bad.write_bytes(b"".join([*body, (json.dumps(trailer) + "\n").encode()]))
    with pytest.raises(CaptureError, match="line 2 is not a valid event .*chip 7 is not one of the capture's 4"):
        load_capture(bad)


def test_a_version_1_capture_still_reads(tmp_path: Path) -> None:
    """Version 1 (one chip, no chip fields, no register writes) is read as it was written."""
    path = tmp_path / "one.capture"
    dev = Device.open("model")
    with dev, Recorder(dev, path):
        dev.write_mem(0x1000, bytes(range(64)))
        dev.read_mem(0x1000, 64)
    lines = path.read_bytes().splitlines(keepends=True)
    header = json.loads(lines[0])
    assert header["format_version"] == 2 and "chips" not in header
    assert all("chip" not in json.loads(line) for line in lines[1:])
    header["format_version"] = 1
    body = [(json.dumps(header) + "\n").encode(), *lines[1:-1]]
    trailer = {"kind": "end", "events": len(body) - 1, "sha256": hashlib.sha256(b"".join(body)).hexdigest()}
    path.write_bytes(b"".join([*body, (json.dumps(trailer) + "\n").encode()]))
    capture = load_capture(path)
    assert capture.chips == 1 and [e.kind for e in capture.events] == ["upload", "download"]
    assert replay(capture, Device.open("model")).ok


def test_an_event_the_driver_refuses_fails_the_replay_on_its_chip(board_capture: Path) -> None:
    """An upload past the end of chip 1's memory (a capture edited by hand) is a mismatch, not a stuck replay."""
    capture = load_capture(board_capture)
    k = next(i for i, e in enumerate(capture.events) if isinstance(e, Upload) and e.chip == 1)
    capture.events[k] = Upload(capture.configs()[1]["mem_bytes"] - 4, bytes(8), 1)
    result = _replay_on("model:chips=4", capture)
    assert not result.ok and result.mismatch.event == k
    assert result.mismatch.message.startswith("chip 1: ValueError:") and "outside device memory" in \
        result.mismatch.message
