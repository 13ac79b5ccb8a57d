"""The chip link's differential fuzzer: boards agree with themselves, a broken board is caught, bad input refused."""

from __future__ import annotations

import pytest

from dx1_bringup.cli import main
from dx1_bringup.fuzz.link import link_fuzz, open_board


@pytest.mark.parametrize("chips", [1, 2, 3])
def test_two_model_boards_agree_on_every_outcome_and_fault(chips: int):
    report = link_fuzz((f"model:chips={chips}", f"model:chips={chips}"), commands=300, seed=chips)
    assert report.ok, report.mismatch
    assert report.commands >= 300 and report.outcomes["OK"] > 0
    refused = {"RESERVED_BITS", "BAD_DIMENSION", "BAD_FIELD", "SEM_RANGE", "MISALIGNED", "DMA_WINDOW",
               "REMOTE_WINDOW"}
    assert refused <= set(report.outcomes)
    assert report.outcomes["LINK_DOWN"] + report.outcomes["LINK_CRC"] > 0 and sum(report.faults.values()) > 0


def test_a_board_with_broken_memory_is_caught():
    report = link_fuzz(("model:chips=2", "model:chips=2,stuck-bit=3"), commands=200, seed=5)
    assert not report.ok and ("chip 0" in report.mismatch or "stuck-bit=3 failed" in report.mismatch)


def test_what_is_not_a_board_is_refused(capsys: pytest.CaptureFixture[str]):
    with pytest.raises(ValueError, match="is not a board of chips wired by the link"):
        open_board("model")
    with pytest.raises(ValueError, match="differ: 2 and 3 chips"):
        link_fuzz(("model:chips=2", "model:chips=3"), commands=8)
    assert main(["fuzz-link", "--boards", "model:chips=2"]) == 2
    assert "two device strings separated by ';'" in capsys.readouterr().err
    assert main(["fuzz-link", "--commands", "64", "--boards", "model:chips=2;model:chips=2"]) == 0
    assert "the boards agree" in capsys.readouterr().out


def test_a_fuzz_run_is_a_board_capture_that_replays(tmp_path, capsys: pytest.CaptureFixture[str]):
    """``--capture``: the reference board's session, every chip, with its faults as register writes."""
    from dx1_bringup.replay import RegWrite, load_capture

    path = tmp_path / "fuzz.capture"
    assert main(["fuzz-link", "--commands", "240", "--boards", "model:chips=3;model:chips=3",
                 "--capture", str(path)]) == 0
    assert f"dx1 replay {path} --device model:chips=3" in capsys.readouterr().out
    capture = load_capture(path)
    assert capture.chips == 3 and capture.commands == 240
    assert any(isinstance(e, RegWrite) and e.value for e in capture.events)  # a fault injected
    assert main(["replay", str(path), "--device", "model:chips=3"]) == 0
