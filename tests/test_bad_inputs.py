"""Bad input, refused clearly: every form of device string and every ``dx1`` argument.

Each case names what was wrong in the message and exits with status 2 (argparse's errors, or the
command's own), before anything is built or started.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from dx1_driver import open_transport

from dx1_bringup.cli import main

#: Device strings no backend opens, and what the message must say.
BAD_DEVICES = [
    ("", "unknown device ''; expected one of model, model:[tiles=T,banks=B,mem_mib=M,]FAULTS, "
         "model:chips=N[,tiles=T,...], sim, "
         "sim:tiles=T,banks=B,mem_mib=M, sim:verilog=PATH, sim:[...,]stall=UNIT[+UNIT...], "
         "sim:chips=N[,tiles=T,...], sim://HOST:PORT, serial:URL, pcie:BDF"),
    ("bogus", "unknown device 'bogus'; expected one of model"),
    ("sim:", "device 'sim:': expected sim, sim:tiles=T,banks=B,mem_mib=M,vector=V (any of them: 1 to 8 tiles, a "
             "power of two of banks from 1 to 16 and of MiB, vector 0 for tiles without a vector unit) or "
             "sim:verilog=PATH with PATH an existing Verilog file of the SoC"),
    ("sim:verilog=/nonexistent.v", "or sim:verilog=PATH with PATH an existing Verilog file of the SoC"),
    ("sim:stall=core2", "device 'sim:stall=core2': cannot stall core2: the device has tiles 0 to 1"),
    ("sim:tiles=4,stall=dma1+dma4", "device 'sim:tiles=4,stall=dma1+dma4': cannot stall dma4: the device has tiles 0 "
                                    "to 3"),
    ("sim:stall=gpu0", "device 'sim:stall=gpu0': stall fault 'stall=gpu0' is not KEY=UNIT[+UNIT...] with KEY one of "
                       "stall"),
    ("sim:stall=dma0,stuck-bit=5", "device 'sim:stall=dma0,stuck-bit=5': stuck-bit=5,stuck-at=1 is a fault of the "
                                   "golden model only (model:stuck-bit=5,stuck-at=1); the simulated SoC injects "
                                   "stall=UNIT[+UNIT...]"),
    ("sim:bus-error=0x1000+0x40", "bus-error=0x1000+0x40 is a fault of the golden model only"),
    ("model:", "device 'model:': memory or stall or bus fault '' is not KEY=VALUE with KEY one of stuck-bit, "
               "stuck-at, alias-bit, stall, bus-error"),
    ("model:foo", "memory or stall or bus fault 'foo' is not KEY=VALUE"),
    ("model:stuck-bit=x", "memory or stall or bus fault 'stuck-bit=x' is not KEY=VALUE"),
    ("model:stuck-bit=99", "device 'model:stuck-bit=99': stuck_bit must be a data bit 0 to 63, not 99"),
    ("model:stuck-at=2", "stuck_value must be 0 or 1, not 2"),
    ("model:alias-bit=2", "alias_bit must be an address bit of 3 or more"),
    ("model:alias-bit=40", "alias_bit 40 is not an address line of a device memory of 1048576 bytes"),
    ("model:stuck-bit=5,stuck-bit=6", "memory or stall or bus fault 'stuck-bit' is given twice"),
    ("sim://", "device 'sim://': expected sim://HOST:PORT, for example sim://127.0.0.1:5555"),
    ("sim://host", "expected sim://HOST:PORT"),
    ("sim://:5555", "expected sim://HOST:PORT"),
    ("sim://127.0.0.1:port", "expected sim://HOST:PORT"),
    ("sim://127.0.0.1:0", "device 'sim://127.0.0.1:0': the port must be 1 to 65535, not 0"),
    ("sim://127.0.0.1:99999", "the port must be 1 to 65535, not 99999"),
    ("serial:", "device 'serial:': expected serial:URL or serial:URL@BAUD"),
    ("serial:loop://@x", "expected serial:URL or serial:URL@BAUD"),
    ("serial:loop://@0", "expected serial:URL or serial:URL@BAUD"),
    ("serial:loop://,timeout=-1", "timeout must be a positive number of seconds, not '-1'"),
    ("serial:loop://,timeout=inf", "timeout must be a positive number of seconds, not 'inf'"),
    ("serial:loop://,retries=x", "retries must be a non-negative integer, not 'x'"),
    ("serial:loop://,regs=foo", "regs must be 'crc' or 'uartbone', not 'foo'"),
    ("serial:loop://,bogus=1", "unknown option 'bogus=1'"),
    ("serial:loop://,retries=1,retries=2", "option 'retries' given twice"),
    ("pcie:", "device 'pcie:': PCI address '' is not [DOMAIN:]BUS:DEVICE.FUNCTION, for example 0000:01:00.0"),
    ("pcie:zz", "PCI address 'zz' is not [DOMAIN:]BUS:DEVICE.FUNCTION"),
    ("pcie:0000:01:00.9", "PCI address '0000:01:00.9' is not"),
    ("pcie:0000:01:20.0", "PCI address '0000:01:20.0' is not"),
]


@pytest.mark.parametrize(("device", "message"), BAD_DEVICES)
def test_bad_device_string_is_refused(device: str, message: str) -> None:
    with pytest.raises(ValueError) as info:
        open_transport(device)
    assert message in str(info.value)


def test_device_must_be_a_string() -> None:
    with pytest.raises(TypeError, match="device must be a device string such as 'sim://127.0.0.1:5555', not 5"):
        open_transport(5)


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    """``dx1 argv`` in this process: its exit status and what it wrote to standard error."""
    try:
        status = main(argv)
    except SystemExit as e:
        status = e.code
    return status, capsys.readouterr().err


@pytest.mark.parametrize(("device", "message"), BAD_DEVICES[::3])
@pytest.mark.parametrize("command", [["gemm", "4", "4", "4"], ["predict", "4", "4", "4"], ["info"], ["bringup"]])
def test_every_command_refuses_a_bad_device(command: list[str], device: str, message: str, tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    extra = ["--report", str(tmp_path / "r.json")] if command == ["bringup"] else []
    status, err = run([*command, "--device", device, *extra], capsys)
    assert status == 2 and message in err, err


def test_unreachable_devices_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    for device, message in (("serial:/dev/nonexistent-dx1", "cannot open serial port '/dev/nonexistent-dx1'"),
                            ("pcie:0000:7f:1f.7", "no PCI device 0000:7f:1f.7")):
        status, err = run(["gemm", "4", "4", "4", "--device", device], capsys)
        assert status == 2 and message in err, err


BAD_ARGUMENTS = [
    ([], "the following arguments are required: COMMAND"),
    (["nonsense"], "argument COMMAND: invalid choice: 'nonsense'"),
    (["gemm", "4", "4"], "the following arguments are required: N"),
    (["gemm", "0", "4", "4"], "argument M: must be at least 1, not 0"),
    (["gemm", "x", "4", "4"], "argument M: must be a whole number, not 'x'"),
    (["gemm", "4", "-2", "4"], "argument K: must be at least 1, not -2"),
    (["gemm", "4", "4", "1.5"], "argument N: must be a whole number, not '1.5'"),
    (["gemm", "4", "4", "1__0"], "argument N: must be a whole number, not '1__0'"),
    (["gemm", "4", "4", "_10"], "argument N: must be a whole number, not '_10'"),
    (["gemm", "4", "4", "4", "--tiles", "0"], "argument --tiles: must be at least 1, not 0"),
    (["gemm", "4", "4", "4", "--tiles", "two"], "argument --tiles: must be a whole number, not 'two'"),
    (["gemm", "4", "4", "4", "--tiles", "3"], "tiles must be an integer from 1 to 2, not 3"),
    (["gemm", "4", "4", "4", "--timeout", "0"], "argument --timeout: must be a number of seconds > 0, not '0'"),
    (["gemm", "4", "4", "4", "--timeout", "soon"], "argument --timeout: must be a number of seconds > 0, not 'soon'"),
    (["gemm", "4", "4", "4", "--seed", "x"], "argument --seed: must be a whole number, not 'x'"),
    (["gemm", "4", "4", "4", "--seed", "-1"], "argument --seed: must be 0 or more, not -1"),
    (["gemm", "4", "4", "4", "--bogus"], "unrecognized arguments: --bogus"),
    (["predict", "4", "4"], "the following arguments are required: N"),
    (["predict", "4", "0", "4"], "argument K: must be at least 1, not 0"),
    (["predict", "4", "4", "4", "--tiles", "3"], "--tiles must be at most 2, not 3"),
    (["predict", "4", "4", "4", "--seed", "-1"], "argument --seed: must be 0 or more, not -1"),
    (["demo", "0"], "argument M: must be at least 1, not 0"),
    (["demo", "--seed", "-3"], "argument --seed: must be 0 or more, not -3"),
    (["sim", "tile", "8", "0"], "argument K: must be at least 1, not 0"),
    (["sim", "tile", "-m", "8"], "unrecognized arguments: -m"),
    (["fuzz", "--devices", "model"], "argument --devices: must name at least two devices separated by commas"),
    (["fuzz", "--devices", "model,foo"], "argument --devices: unknown device 'foo'"),
    (["fuzz", "--batch", "63", "--devices", "model,model"], "argument --batch: "),
    (["bench", "--only", "tile,nope"], "argument --only: expected a comma-separated list of some of tile, soc, "),
    (["bench", "--scaling-tiles", "3"], "argument --scaling-tiles: expected a comma-separated list of some of 1, 2, "),
    (["fpga", "--board", "de10"], "argument --board: must be one of arty_a7, ulx3s, not 'de10'"),
    (["fpga"], "the following arguments are required: --board"),
    (["fpga", "--board", "ulx3s", "--router", "router3"],
     "argument --router: must be one of router1, router2, not 'router3'"),
    (["sim", "report", "--junit", "/nonexistent/junit.xml"], "junit.xml is missing"),
    (["bringup", "--mem-bytes", "3"], "argument --mem-bytes: must be a positive multiple of 8, not 3"),
    (["bringup", "--mem-bytes", "x"], "argument --mem-bytes: must be a number of bytes (decimal or 0x hex), not 'x'"),
    (["bringup", "--timeout", "x"], "argument --timeout: must be a number of seconds > 0, not 'x'"),
    (["bringup", "--timeout", "0"], "argument --timeout: must be a number of seconds > 0, not '0'"),
    (["bringup", "--timeout", "-1"], "argument --timeout: must be a number of seconds > 0, not '-1'"),
    (["bringup", "--seed", "x"], "argument --seed: must be a whole number, not 'x'"),
    (["bringup", "--seed", "-1"], "argument --seed: must be 0 or more, not -1"),
    (["bringup", "--device", "bogus"], "argument --device: unknown device 'bogus'; expected one of model"),
    (["sim"], "the following arguments are required: COMMAND"),
    (["sim", "serve", "--port", "x"], "argument --port: must be a whole number, not 'x'"),
    (["sim", "serve", "--port", "70000"], "argument --port: must be 0 (any free port) to 65535, not 70000"),
    (["sim", "serve", "--port", "-1"], "argument --port: must be 0 (any free port) to 65535, not -1"),
    (["sim", "serve", "--fault-rate", "0.9", "--uart"], "argument --fault-rate: must be a number from 0 to 0.5, "
                                                        "not '0.9'"),
    (["sim", "serve", "--fault-rate", "0.1"], "--fault-rate needs --uart (faults are injected on the serial line)"),
    (["sim", "serve", "--fault-seed", "x"], "argument --fault-seed: must be a whole number, not 'x'"),
    (["sim", "serve", "--uart", "--fault-seed", "-1"], "argument --fault-seed: must be 0 or more, not -1"),
    (["replay", "x.capture", "--timeout", "0"], "argument --timeout: must be a number of seconds > 0, not '0'"),
    (["diff", "x.capture", "--device", "model", "--device", "nope"], "argument --device: unknown device 'nope'"),
    (["shrink", "x.capture", "--device", "model", "--device", "model", "-o", "x", "--budget", "0"],
     "argument --budget: must be at least 1, not 0"),
    (["run", "digits", "--device", "foo"], "argument --device: unknown device 'foo'; expected one of model"),
    (["run", "digits", "--tiles", "0"], "argument --tiles: must be at least 1, not 0"),
    (["bringup", "--mem-bytes", "0x200000"], "--mem-bytes 2097152 is more than the device memory"),
    (["collectives", "--device", "model*0"], "argument --device: must be device strings separated by commas, each "
                                             "optionally *N with N at least 1 (for example model*4 or sim*2,model)"),
    (["collectives", "--device", "nope*2"], "argument --device: unknown device 'nope'; expected one of model"),
    (["collectives", "--device", "model,nope*2"], "(in a group, a comma starts the next rank only before a device "
                                                  "string that a backend opens, so 'model,nope' was read as one "
                                                  "device)"),
    (["collectives", "--device", "model*65"], "argument --device: a group has at most 64 ranks"),
    (["collectives", "--op", "alltoall"], "argument --op: invalid choice: 'alltoall'"),
    (["collectives", "--bytes", "4,-1"], "argument --bytes: expected a comma-separated list of byte counts of 0 or "
                                         "more, not '4,-1'"),
    (["collectives", "--root", "4"], "argument --root: must be a rank of the group, 0 to 3, not 4"),
    (["collectives", "--redop", "avg"], "int32 reduces only by sum, without a scale"),
    (["collectives", "--chunk-bytes", "0"], "argument --chunk-bytes: must be at least 1, not 0"),
    (["collectives", "--timeout", "0"], "argument --timeout: must be a number of seconds > 0, not '0'"),
    (["collectives", "--bytes", "1000000"], "--bytes 1000000 does not fit"),
    (["serve", "--num-blocks", "0"], "argument --num-blocks: must be at least 1 or 'auto', not '0'"),
    (["serve", "--checkpoint", "charlm-512"], "dx1 serve: the weights (107520 B), the kernels' constants (2134272 B) "
                                              "and the step scratch (2039296 B for 512 tokens and 16 sequences) "
                                              "leave 0 B of the device's 1043456 B free"),
    (["lm", "sample", "--checkpoint", "charlm-512"], "dx1 lm sample: the weights (107520 B)"),
    (["lm", "sample", "--checkpoint", "no-such-model"], "the checkpoint no-such-model does not exist"),
    (["bench", "serving", "--serving-num-blocks", "many"], "argument --serving-num-blocks: must be at least 1 or "
                                                           "'auto', not 'many'"),
]


@pytest.mark.parametrize(("argv", "message"), BAD_ARGUMENTS, ids=lambda v: " ".join(v) if isinstance(v, list) else "")
def test_bad_argument_is_refused(argv: list[str], message: str, tmp_path: Path,
                                 capsys: pytest.CaptureFixture[str]) -> None:
    extra = ["--report", str(tmp_path / "r.json")] if argv[:1] == ["bringup"] else []
    status, err = run([*argv, *extra], capsys)
    assert status == 2 and message in err, err


def test_unwritable_output_paths_are_refused_before_starting(tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    status, err = run(["bringup", "--report", str(tmp_path)], capsys)
    assert status == 2 and f"argument --report: cannot write {tmp_path} (it must be a file" in err
    missing = tmp_path / "missing" / "port"
    (tmp_path / "missing").write_text("a file, so no folder can be made here")
    writable = f"cannot write {missing} (it must be a file in an existing writable folder)"
    status, err = run(["bringup", "--report", str(missing)], capsys)
    assert status == 2 and f"argument --report: {writable}" in err
    status, err = run(["gemm", "4", "4", "4", "--capture", str(missing)], capsys)
    assert status == 2 and f"argument --capture: {writable}" in err
    status, err = run(["predict", "4", "4", "4", "--png", str(missing)], capsys)
    assert status == 2 and f"argument --png: {writable}" in err
    status, err = run(["sim", "serve", "--port-file", str(missing)], capsys)
    assert status == 2 and f"argument --port-file: {writable}" in err
    status, err = run(["diff", "x.capture", "--device", "model", "--device", "model", "--shrink", str(tmp_path)],
                      capsys)
    assert status == 2 and f"argument --shrink: cannot write {tmp_path} (it must be a file" in err
    assert not missing.exists()


def test_every_command_takes_integers_the_same_way(capsys: pytest.CaptureFixture[str]) -> None:
    """One set of argument types: ``10_000`` is ten thousand for every command, ``1__0`` for none."""
    from dx1_bringup import argtypes as args

    assert args.integer("10_000") == args.positive("10_000") == 10_000
    assert args.seed("0") == 0 and args.seconds("0.5") == 0.5
    assert args.devices("model, model:stuck-bit=5") == ["model", "model:stuck-bit=5"]
    assert args.byte_count(8)("0x100") == 256
    for argv, message in ((["fuzz", "--commands", "1__0"], "argument --commands: must be a whole number, not '1__0'"),
                          (["gemm", "1__0", "4", "4"], "argument M: must be a whole number, not '1__0'"),
                          (["bench", "--serial-sizes", "4,1__0"], "argument --serial-sizes: expected a comma-separated "
                                                                   "list of block sizes, multiples of 4 from 4 to "
                                                                   "1048576, not '4,1__0'"),
                          (["fpga", "--board", "ulx3s", "--baud", "1__0"], "argument --baud: must be a whole number"),
                          (["diff-demo", "--commands", "0"], "argument --commands: must be at least 1, not 0")):
        status, err = run(argv, capsys)
        assert status == 2 and message in err, err


def test_a_gemm_that_cannot_fit_is_refused_before_any_work(capsys: pytest.CaptureFixture[str],
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """No operands, reference or header before the fit check: 100000^3 once ran 64 s into a MemoryError."""
    import dx1_bringup.cli.gemm as gemm

    def made(*args):
        raise AssertionError("the operands were made before the device-memory check")

    monkeypatch.setattr(gemm, "gemm_problem", made)
    for shape, device, need, has in ((("100000",) * 3, "model", 30000400000, 1048576),
                                     (("2000",) * 3, "model:mem_mib=4", 12008000, 4194304)):
        status, err = run(["gemm", *shape, "--device", device], capsys)
        assert status == 2, err
        assert (f"dx1 gemm: a {'x'.join(shape)} GEMM needs {need} bytes of device memory for its padded operands "
                f"(a ") in err and f"the device has {has}" in err
    status, err = run(["predict", "2000", "2000", "2000", "--device", "model"], capsys)
    assert status == 2 and "GEMM needs 12008000 bytes of device memory" in err and "the device has 1048576" in err


def test_predict_refuses_a_gemm_no_device_can_address(capsys: pytest.CaptureFixture[str]) -> None:
    status, err = run(["predict", "100000", "100000", "100000"], capsys)
    assert status == 2
    assert err == ("dx1 predict: a 100000x100000x100000 GEMM needs 30000400000 bytes of device memory for its padded "
                   "operands; LOAD and STORE address device memory in 32 bits (4 GiB), so no DX-1 can hold them\n")


@pytest.mark.parametrize("device, message", [
    ("model:bogus", "device 'model:bogus': memory or stall or bus fault 'bogus' is not KEY=VALUE"),
    ("model:stall=core7", "device 'model:stall=core7': cannot stall core7: the device has tiles 0 to 1"),
    ("sim:stall=dma9", "device 'sim:stall=dma9': cannot stall dma9: the device has tiles 0 to 1"),
    ("serial:loop://,bogus=1", "device 'serial:loop://,bogus=1': unknown option 'bogus=1'"),
])
def test_device_strings_are_checked_before_any_work(device: str, message: str, capsys: pytest.CaptureFixture[str],
                                                    monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No training, no spec printed, no header, no simulator: once ``run digits`` trained 6.7 s before refusing."""
    import dx1_bringup.workloads.digits as digits
    from dx1_bringup import backends

    def work(*args, **kwargs):
        raise AssertionError("work began before the device string was checked")

    monkeypatch.setattr(digits, "train_mlp", work)
    monkeypatch.setattr(backends, "start_simulator", work)
    for command in (["run", "digits"], ["info"], ["gemm", "8", "8", "8"], ["predict", "8", "8", "8"],
                    ["bringup", "--report", str(tmp_path / "r.json")]):
        assert main([*command, "--device", device]) == 2
        out, err = capsys.readouterr()
        assert message in err and out == "", (command, out, err)
    with pytest.raises(ValueError, match=message.split(": ", 1)[1]):
        digits.run_digits([device])


def test_dx1_info_explains_the_spec_and_block_versions(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["info", "--device", "model"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("dx1-mini spec 1.4, magic 0x44583131\n  The spec version (GLOBAL HW_VERSION) covers the "
                          "whole interface")
    assert "every block reads 1.0 under\n  spec 1.4" in out or "every block reads 1.0 under spec 1.4" in out
    assert "    1.1: CAPS.mem_banks" in out and "    1.2: the LOAD/STORE address and stride fields" in out
    assert "  0x0000 GLOBAL    31 registers  version 1.0  next 0x0100" in out


def test_output_paths_follow_one_rule_and_nothing_is_written_unasked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    """Every output file must be named and lie in an existing folder: bringup once made ./build/ by default."""
    monkeypatch.chdir(tmp_path)
    assert main(["bringup", "--mem-bytes", "4096"]) == 0
    assert list(tmp_path.iterdir()) == []
    assert "report:" not in capsys.readouterr().out
    missing = tmp_path / "new" / "r.json"
    for command in (["bringup", "--report"], ["bringup", "--timeline"], ["bringup", "--capture"],
                    ["gemm", "4", "4", "4", "--capture"], ["gemm", "4", "4", "4", "--timeline"],
                    ["predict", "4", "4", "4", "--png"]):
        assert main([*command, str(missing)]) == 2
        assert f"cannot write {missing} (it must be a file in an existing writable folder)" in capsys.readouterr().err
    assert not (tmp_path / "new").exists()


def test_bringup_and_gemm_share_one_default_seed_and_say_where_the_capture_went(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    capture = tmp_path / "gemm.capture"
    assert main(["gemm", "8", "8", "8", "--capture", str(capture)]) == 0
    out = capsys.readouterr().out
    assert "(seed 1)" in out.splitlines()[0]
    assert f"  capture      {capture} (replay it with dx1 replay {capture} --device D)" in out
    assert main(["bringup", "--mem-bytes", "4096"]) == 0
    assert capsys.readouterr().out.startswith("dx1 bringup on model (seed 1,")
