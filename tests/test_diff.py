"""dx1 diff (bisection over prefixes), the shrinker, dx1 replay, dx1 bringup --capture and the planted RTL bug."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import asdict
from pathlib import Path

import numpy as np
import pytest
from dx1_driver import Device, register_backend, registry

from dx1_bringup.backends import ModelTransport
from dx1_bringup.cli import main
from dx1_bringup.fuzz.runner import record_stream
from dx1_bringup.replay import Capture, Doorbell, Submit, Upload, Wait, load_capture, record, replay
from dx1_bringup.replay.cli import diff_main
from dx1_bringup.replay.diff import bisect, commands_in_order, prefix_events
from dx1_bringup.replay.shrink import ddmin, shrink, trim_uploads
from dx1_bringup.sim import verilator_missing
from dx1_bringup.sim.mutants import write_mutant
from dx1_bringup.spec import COMMANDS, Opcode, PostOpParams, pack_command, unpack_command

POSTOP_BIAS = 1 << COMMANDS[Opcode.POSTOP].flag_bit("bias")
POSTOP_RELU = 1 << COMMANDS[Opcode.POSTOP].flag_bit("relu")


class PlantedGemmBug(ModelTransport):
    """The golden model, but tile 1 adds 1 to lane 0 of the first row of each GEMM of 8 rows or more."""

    def __init__(self) -> None:
        super().__init__()
        tile = self.model.tiles[1]
        gemm = tile._gemm
        self.first: list[bytes] = []   # every GEMM the bug hit, as its fields (the oracle of the tests)

        def buggy(f: dict[str, int]) -> None:
            gemm(f)
            if f["m"] >= 8:
                tile.acc[f["c_addr"], 0] += 1
                self.first.append(f)

        tile._gemm = buggy


class MirroredRoundingMutant(ModelTransport):
    """The golden model with the RTL mutant ``postop-round`` (``dx1_bringup.sim.mutants``) in Python.

    Tile 1's lane 3 rounds with half of the rounding constant; ``hits`` lists each POSTOP (its fields)
    whose output the mutation changed, in the order tile 1 ran them.
    """

    def __init__(self) -> None:
        super().__init__()
        tile = self.model.tiles[1]
        postop = tile._postop
        self.hits: list[dict[str, int]] = []

        def mutant(f: dict[str, int]) -> None:
            postop(f)
            if not f["shift"]:
                return
            post = PostOpParams.from_command(f)
            src = tile.acc[f["src_addr"]:f["src_addr"] + f["rows"], 3].astype(np.int64)
            bias = int(tile.acc[f["bias_addr"], 3]) if f["flags"] & POSTOP_BIAS else 0
            x = np.clip(src + bias, -(1 << 31), (1 << 31) - 1)
            if post.relu:
                x = np.maximum(x, 0)
            p = x * post.mult
            y = np.clip((p + ((1 << (post.shift - 1)) >> 1) - (p < 0)) >> post.shift, -128, 127).astype(np.int8)
            rows = slice(f["dst_addr"], f["dst_addr"] + f["rows"])
            spm = tile.spm.view(np.int8) if tile.spm.dtype != np.int8 else tile.spm
            if (spm[rows, 3] != y).any():
                self.hits.append(dict(f))
            spm[rows, 3] = y

        tile._postop = mutant


def model() -> Device:
    return Device(ModelTransport())


@pytest.fixture(scope="module")
def stream() -> Capture:
    """1,000 random commands of fuzz seed 1 on both tiles (SIGNAL/WAIT pairs, errors, narrowed windows)."""
    return record_stream(model(), 1000, seed=1)


def first_hit(capture: Capture, transport: MirroredRoundingMutant | PlantedGemmBug) -> dict[str, int]:
    """The first command the planted bug changed, found by running the whole capture on it (the oracle)."""
    replay(capture, Device(transport))
    hits = transport.hits if isinstance(transport, MirroredRoundingMutant) else transport.first
    assert hits, "the planted bug changed nothing in this capture"
    return hits[0]


def named(result, queue: int) -> dict[str, int]:
    assert result.first is not None and result.first.queue == queue, result
    return unpack_command(result.first.command)[1]


def test_prefixes_follow_submission_order_and_release_cut_waits() -> None:
    sig = pack_command(Opcode.SIGNAL, tag=1, sem=2, count=1)
    wait = pack_command(Opcode.WAIT, tag=7, sem=2, count=1)
    fence = pack_command(Opcode.FENCE, tag=8)
    capture = Capture({"tiles": 2, "semaphores": 4}, 6, [
        Upload(0x1000, b"x"), Submit(1, (wait, fence)), Submit(0, (fence, sig)), Doorbell(1), Doorbell(0),
        Wait(1, ()), Wait(0, ())])
    assert [(r.number, r.queue, r.index, r.event) for r in commands_in_order(capture)] == [
        (0, 1, 0, 1), (1, 1, 1, 1), (2, 0, 0, 2), (3, 0, 1, 2)]
    # Cut before queue 0's SIGNAL: queue 1's WAIT would wait forever, so it becomes a FENCE with its tag.
    events = prefix_events(capture, 3, 4)
    assert events[:2] == [Upload(0x1000, b"x"), Submit(1, (pack_command(Opcode.FENCE, tag=7), fence))]
    assert events[2:] == [Submit(0, (fence,)), Doorbell(0), Doorbell(1), Wait(0, None), Wait(1, None)]
    # With the SIGNAL in the prefix the WAIT stays; the recorded waits after the cut are left out.
    assert prefix_events(capture, 4, 4)[1] == Submit(1, (wait, fence))
    assert prefix_events(capture, 0, 4) == [Upload(0x1000, b"x"), Wait(0, None), Wait(1, None)]
    with pytest.raises(ValueError, match="a prefix has 0 to 4 commands"):
        prefix_events(capture, 5, 4)


def test_bisection_names_the_first_gemm_the_planted_bug_changes(stream: Capture) -> None:
    hit = first_hit(stream, PlantedGemmBug())
    result = bisect(stream, [model(), Device(PlantedGemmBug())], ["model", "planted"])
    fields = named(result, 1)
    assert fields["tag"] == hit["tag"] and unpack_command(result.first.command)[0] == Opcode.GEMM
    assert "tile 1 accumulator row" in result.difference
    # About log2(commands) prefixes, each on both devices, plus the whole and the empty prefix.
    assert result.replays <= 2 * (int(np.log2(stream.commands)) + 3)


def test_bisection_names_the_first_postop_the_mirrored_mutant_changes(stream: Capture) -> None:
    hit = first_hit(stream, MirroredRoundingMutant())
    result = bisect(stream, [model(), Device(MirroredRoundingMutant())], ["model", "mirror"])
    assert named(result, 1)["tag"] == hit["tag"] and result.first.command[0] == Opcode.POSTOP
    assert "tile 1 scratchpad row" in result.difference and " byte 3:" in result.difference


def test_agreeing_devices_and_a_difference_before_any_command(stream: Capture) -> None:
    same = bisect(stream, [model(), model()])
    assert same.difference is None and same.first is None and same.replays == 2
    broken = bisect(stream, [model(), Device.open("model:stuck-bit=5")])
    assert broken.before_commands and broken.first is None and broken.replays == 4


def test_ddmin_finds_a_minimal_failing_subset() -> None:
    units = [(e, 0) for e in range(40)]
    tests = []

    def fails(keep):
        tests.append(len(keep))
        return {(7, 0), (31, 0)} <= set(keep)

    kept, count = ddmin(units, fails, 1000)
    assert kept == [(7, 0), (31, 0)] and count == len(tests)
    assert ddmin(units, fails, 3)[1] == 3, "the budget bounds the tests"


def test_shrunk_capture_still_fails_and_replays(stream: Capture, tmp_path: Path) -> None:
    result = bisect(stream, [model(), Device(PlantedGemmBug())], ["model", "planted"])
    prefix = Capture(stream.config, stream.ring_log2, prefix_events(stream, result.first.number + 1, 16))
    shrunk = shrink(prefix, [model(), Device(PlantedGemmBug())], ["model", "planted"])
    assert shrunk.commands_before == result.first.number + 1 and shrunk.commands_after == 1
    path = tmp_path / "shrunk.capture"
    shrunk.capture.save(path)
    again = load_capture(path)
    kept = [c for e in again.events if isinstance(e, Submit) for c in e.commands if c[0] == Opcode.GEMM]
    assert kept == [result.first.command]
    assert replay(again, model()).ok
    bad = replay(again, Device(PlantedGemmBug()))
    assert not bad.ok and "first difference at" in bad.mismatch.message
    with pytest.raises(ValueError, match="do not differ between A and B: nothing to shrink"):
        shrink(prefix, [model(), model()])


@pytest.fixture(scope="module")
def planted_backend() -> Iterator[str]:
    register_backend("test-planted-gemm", lambda _device: PlantedGemmBug(), "test-planted-gemm")
    yield "test-planted-gemm"
    # Gone again, so later tests see only the real device strings (the registry has no public removal).
    registry._backends.pop("test-planted-gemm")


def test_command_lines(stream: Capture, tmp_path: Path, planted_backend: str,
                       capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "stream.capture"
    stream.save(path)
    assert main(["replay", str(path), "--device", "model"]) == 0
    assert main(["replay", str(path), "--device", planted_backend]) == 1
    assert "mismatch on test-planted-gemm at event" in capsys.readouterr().out
    out = tmp_path / "small.capture"
    assert main(["diff", str(path), "--device", "model", "--device", planted_backend, "--shrink", str(out)]) == 1
    text = capsys.readouterr().out
    assert "first command whose effect differs: command " in text and "queue 1 (tile 1)" in text
    assert "    GEMM flags=0x" in text and " tag=" in text and " m=" in text and " c_addr=0x" in text
    assert "    bytes 03 " in text
    assert "prefix replays" in text and f"{stream.commands} commands" in text
    assert "kept 1 commands and 0 uploads" in text
    assert main(["replay", str(out), "--device", planted_backend]) == 1
    assert main(["shrink", str(path), "--device", "model", "--device", "model", "-o", str(tmp_path / "x")]) == 0
    assert "the effects of all" in capsys.readouterr().out


def test_command_lines_refuse_bad_input(stream: Capture, tmp_path: Path,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "stream.capture"
    stream.save(path)
    lines = path.read_bytes().splitlines(keepends=True)
    (tmp_path / "cut.capture").write_bytes(b"".join(lines[:-3]))
    assert main(["diff", str(tmp_path / "cut.capture"), "--device", "model", "--device", "model"]) == 2
    assert "truncated" in capsys.readouterr().err
    (tmp_path / "bad.capture").write_bytes(b"".join(lines).replace(b'"upload"', b'"upl0ad"', 1))
    assert main(["replay", str(tmp_path / "bad.capture")]) == 2
    assert "corrupted" in capsys.readouterr().err
    assert main(["diff", str(path), "--device", "model"]) == 2
    assert "give exactly two devices" in capsys.readouterr().err
    assert main(["diff", str(path), "--device", "model", "--device", "bogus"]) == 2
    assert "unknown device 'bogus'" in capsys.readouterr().err
    assert main(["shrink", str(path), "--device", "model", "--device", "model", "-o", str(tmp_path)]) == 2
    assert f"argument -o/--output: cannot write {tmp_path} (it must be a file" in capsys.readouterr().err
    small = tmp_path / "small.capture"
    Capture({**stream.config, "mem_bytes": 1 << 19}, stream.ring_log2, stream.events[:3]).save(small)
    assert main(["diff", str(small), "--device", "model", "--device", "model"]) == 2
    assert "recorded on another configuration: mem_bytes 524288 in the capture, 1048576" in capsys.readouterr().err
    older = tmp_path / "older.capture"
    older.write_bytes(b"".join(lines).replace(b'"spec_version":', b'"spec_version":1,"x":', 1))
    assert main(["diff", str(older), "--device", "model", "--device", "model"]) == 2
    assert "spec version" in capsys.readouterr().err


def test_bringup_record_writes_a_capture_that_replays(tmp_path: Path) -> None:
    path = tmp_path / "bringup.capture"
    assert main(["bringup", "--capture", str(path), "--report", str(tmp_path / "r.json"), "--seed", "3",
                 "--mem-bytes", "65536"]) == 0
    capture = load_capture(path)
    assert capture.commands > 10 and "dx1 bringup on model (seed 3)" in capture.note
    assert replay(capture, model()).ok
    assert not replay(capture, Device.open("model:stuck-bit=5")).ok
    assert main(["bringup", "--capture", str(tmp_path), "--report", str(tmp_path / "r.json")]) == 2


def rtl_mutant_named(commands: int, seed: int, tmp_path: Path, *, shrunk: bool) -> None:
    """``dx1 diff`` between the model and the ``postop-round`` RTL mutant names the command the mirror says."""
    reason = verilator_missing()
    if reason:
        pytest.skip(reason)
    capture = record_stream(model(), commands, seed=seed)
    hit = first_hit(capture, MirroredRoundingMutant())
    path = tmp_path / "stream.capture"
    capture.save(path)
    out = tmp_path / "shrunk.capture"
    args = ["--shrink", str(out), "--budget", "60"] if shrunk else []
    verilog = write_mutant("postop-round")
    with Device.open(f"sim:verilog={verilog}") as rtl:
        result = bisect(capture, [model(), rtl], ["model", "mutant"])
        assert named(result, 1)["tag"] == hit["tag"] and result.first.command[0] == Opcode.POSTOP
        assert " byte 3:" in result.difference
    if shrunk:
        assert diff_main([str(path), "--device", "model", "--device", f"sim:verilog={verilog}", *args]) == 1
        small = load_capture(out)
        assert small.commands < capture.commands and replay(small, model()).ok
        with Device.open(f"sim:verilog={verilog}") as rtl:
            assert not replay(small, rtl).ok


def rounding_capture() -> Capture:
    """Both tiles load the same accumulators and requantise them (shift 4); only rows 4 to 7 round in lane 3
    with a remainder from 8 to 11, where the ``postop-round`` mutant rounds down instead of up."""
    caps = model().caps
    acc = np.zeros((caps.acc_rows, caps.array), np.int32)
    acc[0:4] = 16 * np.arange(1, 33).reshape(4, 8) + 3      # remainder 3: both round down
    acc[4:8] = 16 * np.arange(1, 33).reshape(4, 8) + 9      # remainder 9: the model rounds up, the mutant down
    load = pack_command(Opcode.LOAD, tag=1, flags={"acc": True}, mem_addr=0x40000, mem_stride=0, local_addr=0,
                        rows=1, cols=caps.acc_rows, local_row_stride=0, local_col_stride=1)

    def postop(tag: int, src: int) -> bytes:
        return pack_command(Opcode.POSTOP, tag=tag, src_addr=src, dst_addr=16 + src, rows=4, mult=1, shift=4)

    events = [Upload(0x40000, acc.tobytes()), Submit(1, (load,)), Submit(0, (load, postop(2, 4))),
              Doorbell(0), Submit(1, (postop(2, 0), postop(3, 4))), Doorbell(1), Wait(0, None), Wait(1, None)]
    return record(events, model(), 6, note="two tiles requantise the same rows; tile 1 command 2 hits the mutant")


@pytest.mark.verilator
@pytest.mark.own_build
@pytest.mark.slow
def test_the_rtl_mutant_is_named(tmp_path: Path) -> None:
    """CI: five commands on two tiles (interleaved in submission order) against the mutant RTL."""
    reason = verilator_missing()
    if reason:
        pytest.skip(reason)
    capture = rounding_capture()
    hit = first_hit(capture, MirroredRoundingMutant())
    assert hit["tag"] == 3
    with Device.open(f"sim:verilog={write_mutant('postop-round')}") as rtl:
        result = bisect(capture, [model(), rtl], ["model", "mutant"])
    assert (result.first.number, result.first.queue, result.first.index) == (4, 1, 2)
    assert named(result, 1)["tag"] == 3 and "tile 1 scratchpad row 20 byte 3" in result.difference


@pytest.mark.verilator
@pytest.mark.slow
def test_the_rtl_mutant_is_named_in_1000_commands_and_shrunk(tmp_path: Path) -> None:
    """1,000 random fuzz commands, then the shrinker against the RTL (minutes); `make diff-demo` runs 10,000."""
    rtl_mutant_named(1000, 1, tmp_path, shrunk=True)


def test_trimmed_uploads_keep_only_what_the_kept_commands_reach() -> None:
    caps = model().caps
    load = pack_command(Opcode.LOAD, tag=1, mem_addr=0x1000, mem_stride=0, local_addr=0, rows=1, cols=2,
                        local_row_stride=0, local_col_stride=1)
    events = [Upload(0, bytes(range(256)) * 64), Upload(0x8000, b"\x01" * 64), Submit(0, (load,)), Doorbell(0),
              Wait(0, None)]
    capture = Capture(asdict(caps), 6, events)
    trimmed, kept = trim_uploads(capture, events, [(0, -1), (1, -1), (2, 0)], caps.semaphores, caps.tiles)
    # The LOAD reads two 8-byte rows at 0x1000: the first upload shrinks to them, the second goes.
    assert trimmed[0] == Upload(0x1000, (bytes(range(256)) * 64)[0x1000:0x1010])
    assert kept == [(0, -1), (1, 0)] and isinstance(trimmed[1], Submit)


def test_the_shrinker_cuts_uploads_to_the_bytes_the_failure_needs() -> None:
    caps = model().caps
    acc = np.zeros((caps.acc_rows, caps.array), np.int32)
    acc[4:8] = 16 * np.arange(1, 33).reshape(4, 8) + 9      # remainder 9: the mutant rounds lane 3 down
    load = pack_command(Opcode.LOAD, tag=1, flags={"acc": True}, mem_addr=0x40000, mem_stride=0, local_addr=0,
                        rows=1, cols=8, local_row_stride=0, local_col_stride=1)
    postop = pack_command(Opcode.POSTOP, tag=2, src_addr=4, dst_addr=20, rows=4, mult=1, shift=4)
    events = [Upload(0x40000, acc.tobytes()), Submit(1, (load, postop)), Doorbell(1), Wait(1, None)]
    capture = record(events, model(), 6, note="tile 1 requantises 4 of 1024 uploaded accumulator rows")
    shrunk = shrink(capture, [model(), Device(MirroredRoundingMutant())], ["model", "mutant"])
    # Both commands stay; of the 32 KiB upload only the 8 accumulator rows the LOAD reads.
    assert (shrunk.commands_after, shrunk.uploads_after, shrunk.upload_bytes) == (2, 1, 8 * 4 * caps.array)
    assert replay(shrunk.capture, model()).ok
    assert not replay(shrunk.capture, Device(MirroredRoundingMutant())).ok
