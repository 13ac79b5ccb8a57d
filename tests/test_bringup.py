"""Bring-up: the whole run on every backend, and broken memory stopping it at the right step.

``model`` and the PCIe access layer over the model's BARs run in process.  ``sim``
(the SoC RTL behind the sim transport) and ``serial`` (the simulated board over
its UART, the CI requirement) start their simulators once for the module and are
skipped with the reason where Verilator cannot run.  The simulated runs test a
small memory region: the simulated line moves about a kilobyte per wall-clock second.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys

import numpy as np
import pytest
from dx1_driver import Device, open_transport, regs
from dx1_driver.pcie import PcieTransport

from dx1_bringup.backends import model_pcie_transport
from dx1_bringup.bringup import (
    STEPS,
    _address_diagnosis,
    _bytes_diagnosis,
    run_bringup,
)
from dx1_bringup.cli import main
from dx1_bringup.faults import MemoryFaults
from dx1_bringup.model.bridge import ModelBridge
from dx1_bringup.model.device import BusError, DeviceModel

NAMES = [name for name, _ in STEPS]
#: Wall-clock budget for one queue wait on a simulator.
TIMEOUT = 120.0


def _assert_passed(report) -> None:
    bad = report.failed_step
    assert bad is None, f"step {bad.name} failed: {bad.checks[-1]} ({bad.diagnosis})"
    assert [s.name for s in report.steps] == NAMES
    assert all(s.status == "pass" and s.checks and all(c.ok for c in s.checks) for s in report.steps)


def _assert_stopped_at(report, step: str, diagnosis: str) -> None:
    statuses = [s.status for s in report.steps]
    at = NAMES.index(step)
    assert statuses == ["pass"] * at + ["fail"] + ["not run"] * (len(NAMES) - at - 1)
    failed = report.failed_step
    assert diagnosis in failed.diagnosis, failed.diagnosis
    assert not failed.checks[-1].ok


def test_model_passes():
    report = run_bringup("model", seed=1, quiet=True)
    _assert_passed(report)
    assert report.transport == "ModelTransport" and report.seed == 1
    irq = report.steps[NAMES.index("irq")]
    assert irq.data["interrupt_line"] is True
    perf = report.steps[NAMES.index("perf")].data
    assert len(perf["gemm"]) == 4 and all(g["macs"] > 0 and g["perf"]["MACS"] == g["macs"] for g in perf["gemm"])


def test_model_region_and_output(capsys):
    report = run_bringup("model", seed=5, mem_bytes=4096)
    _assert_passed(report)
    memory = report.steps[NAMES.index("memory")]
    assert memory.data == {"region_bytes": 4096, "seed": 5}
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "dx1 bringup on model (seed 5, memory test over 4096 bytes)"
    assert [line[:33].strip() for line in lines[1:9]] == [f"{i + 1} {title}" for i, (_, title) in enumerate(STEPS)]
    assert all(" PASS " in line and " s  " in line for line in lines[1:9])
    assert lines[9].startswith("dx1 bringup: PASS in ")


def test_pcie_over_model_bars():
    transport = model_pcie_transport()
    try:
        report = run_bringup(transport, seed=2, quiet=True)
    finally:
        transport.close()
    _assert_passed(report)
    assert report.transport == "PcieTransport"
    assert report.steps[NAMES.index("irq")].data["interrupt_line"] is False


def test_open_device_is_reset_and_kept_open():
    with Device.open("model") as dev:
        dev.write_reg(dev.queue_bases[0], regs.Queue.IRQ_MASK, 3)  # not its reset value
        report = run_bringup(dev, seed=3, mem_bytes=1024, quiet=True)
        _assert_passed(report)
        assert not dev.transport.closed


@pytest.mark.parametrize("faults, diagnosis, got", [
    ("stuck-bit=5", "data bit 5 stuck at 1", "first wrote 0x0000000000000001 read 0x0000000000000021"),
    ("stuck-bit=37,stuck-at=0", "data bit 37 stuck at 0", "first wrote 0x0000002000000000 read 0x0000000000000000"),
    ("alias-bit=12", "address bit 12 aliases: 0x00000000 and 0x00001000 reach the same memory",
     "first at 0x00000000: expected 0xa500000000000000 got 0xa500000000001000"),
    ("alias-bit=19", "address bit 19 aliases: 0x00000000 and 0x00080000 reach the same memory", "1 of 18 differ"),
])
def test_broken_memory_stops_at_memory_test(faults, diagnosis, got):
    report = run_bringup(f"model:{faults}", seed=4, mem_bytes=4096, quiet=True)
    _assert_stopped_at(report, "memory", diagnosis)
    assert got in report.failed_step.checks[-1].got


@pytest.mark.parametrize("faults, diagnosis", [(None, None), ("stuck-bit=5", "data bit 5 stuck at 1")])
def test_serial_link_to_the_model(faults, diagnosis):
    """Over the serial transport (which verifies its writes) a bad memory cell is still a memory failure."""
    model = DeviceModel(faults=MemoryFaults.parse(faults) if faults else None)
    bridge = ModelBridge(model, model.config.mem_bytes, (BusError,))
    try:
        with open_transport(f"serial:{bridge.url}@3000000") as transport:
            report = run_bringup(transport, seed=6, mem_bytes=1024, quiet=True)
            assert transport.verify_writes is True, "the memory step restores write verification"
    finally:
        bridge.close()
    if faults is None:
        _assert_passed(report)
        assert report.steps[NAMES.index("irq")].data["interrupt_line"] is False
    else:
        _assert_stopped_at(report, "memory", diagnosis)


def test_faulty_memory_is_seen_by_the_dma():
    """The fault sits in the memory, so a device-side reader (the DMA) sees it as the host does."""
    model = DeviceModel(faults=MemoryFaults(stuck_bit=9))
    model.mem_write(0x100, bytes(8))
    assert model.mem_read(0x100, 8) == bytes([0, 2, 0, 0, 0, 0, 0, 0])
    assert model.mem[0x100:0x108] == bytes(8), "the cells hold what was written; the read path is stuck"


def test_cli_writes_report(tmp_path, capsys):
    path = tmp_path / "sub" / "bringup.json"
    assert main(["bringup", "--device", "model:stuck-bit=5", "--report", str(path), "--seed", "7", "--mem-bytes",
                 "2048"]) == 1
    report = json.loads(path.read_text())
    assert [s["name"] for s in report["steps"]] == NAMES
    assert report["passed"] is False and report["failed_step"] == "memory" and report["seed"] == 7
    assert report["mem_bytes"] == 2048 and report["device"] == "model:stuck-bit=5"
    memory = report["steps"][NAMES.index("memory")]
    assert memory["status"] == "fail" and "data bit 5 stuck at 1" in memory["diagnosis"]
    assert all(s["seconds"] >= 0 and "checks" in s for s in report["steps"])
    out = capsys.readouterr().out
    assert "probably: data bit 5 stuck at 1" in out and f"report: {path}" in out
    assert main(["bringup", "--device", "model", "--report", str(path), "--mem-bytes", "2048"]) == 0
    assert json.loads(path.read_text())["passed"] is True


def test_bringup_runs_as_a_command(tmp_path):
    """``dx1 bringup`` in a process of its own: a failing model exits 1 and writes the report."""
    path = tmp_path / "bringup.json"
    done = subprocess.run([sys.executable, "-m", "dx1_bringup.cli", "bringup", "--device", "model:stuck-bit=5",
                           "--report", str(path), "--seed", "7", "--mem-bytes", "2048"], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 1, done.stderr
    assert "probably: data bit 5 stuck at 1" in done.stdout
    assert json.loads(path.read_text())["failed_step"] == "memory"


def test_region_larger_than_memory():
    report = run_bringup("model", seed=1, mem_bytes=2 << 20, quiet=True)
    _assert_stopped_at(report, "memory", "asked to test 2097152 bytes, but the device has 1048576")


def test_dead_link_stops_at_link():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    report = run_bringup(f"sim://127.0.0.1:{port}", seed=1, quiet=True)
    _assert_stopped_at(report, "link", "check power, the cable or socket, the port name")
    assert "cannot reach the simulator" in report.failed_step.checks[-1].got


def test_not_a_dx1_stops_at_identity(tmp_path):
    """A PCI function whose BARs are plain memory: the link works, identity does not."""
    dev = tmp_path / "0000:03:00.0"
    dev.mkdir()
    reg = bytearray(0x800)
    reg[regs.Global.MEM_BYTES:regs.Global.MEM_BYTES + 4] = (4096).to_bytes(4, "little")
    (dev / "resource0").write_bytes(reg)
    (dev / "resource2").write_bytes(bytes(4096))
    with PcieTransport("0000:03:00.0", sysfs_root=tmp_path) as transport:
        report = run_bringup(transport, seed=1, quiet=True)
    _assert_stopped_at(report, "identity", "the device answers but is not a dx1 of this spec version")
    assert report.failed_step.checks[-1].got == "block 0 ID reads 0x00000000, expected GLOBAL 0x44580001"


@pytest.mark.parametrize("kwargs, message", [
    ({"mem_bytes": 12}, "mem_bytes must be a positive multiple of 8, not 12"),
    ({"mem_bytes": 0}, "mem_bytes must be a positive multiple of 8, not 0"),
    ({"seed": -1}, "seed must be a non-negative integer, not -1"),
    ({"timeout": 0}, "timeout must be positive, not 0"),
])
def test_bad_arguments(kwargs, message):
    with pytest.raises(ValueError) as info:
        run_bringup("model", quiet=True, **kwargs)
    assert str(info.value) == message


@pytest.mark.parametrize("device, message", [
    ("model:stuck-bit=64", "stuck_bit must be a data bit 0 to 63, not 64"),
    ("model:bits=3", "memory or stall or bus fault 'bits=3' is not KEY=VALUE with KEY one of stuck-bit, stuck-at, "
                     "alias-bit, stall, bus-error"),
    ("model:alias-bit=2", "alias_bit must be an address bit of 3 or more (bits 0-2 select a byte lane), not 2"),
    ("model:alias-bit=20", "alias_bit 20 is not an address line of a device memory of 1048576 bytes"),
    ("model:stuck-bit=1,stuck-bit=2", "memory or stall or bus fault 'stuck-bit' is given twice"),
])
def test_bad_fault_devices(device, message):
    with pytest.raises(ValueError) as info:
        open_transport(device)
    assert str(info.value) == f"device {device!r}: {message}"


def test_bytes_diagnosis_names_the_stuck_bit():
    rng = np.random.default_rng(1)
    expected = rng.integers(0, 256, 512, dtype=np.uint8)
    got = expected.copy()
    got[1::8] |= 1 << 5  # data bit 13: byte lane 1, bit 5
    assert _bytes_diagnosis(expected, got).startswith("data bit 13 stuck at 1: check that memory data line "
                                                      "(byte lane 1, bit 5)")
    got = expected.copy()
    got[100] ^= 0xFF
    assert _bytes_diagnosis(expected, got).startswith("1 bytes differ over 8 data bits")


def test_address_diagnosis():
    assert _address_diagnosis(0x100, 0x1100, None, True).startswith(
        "address bit 12 aliases: 0x00000100 and 0x00001100 reach the same memory")
    assert _address_diagnosis(0x1000, 0x2000, {0, 0x1000, 0x2000}, True).startswith(
        "address bits 12, 13 are shorted or decoded wrongly")
    assert _address_diagnosis(0x1000, 0x1234, {0, 0x1000, 0x2000}, True).startswith(
        "the word at 0x00001000 holds neither its own value")


# -- simulated backends ---------------------------------------------------------------------------


def test_sim_passes(sim_transport):
    report = run_bringup(sim_transport, seed=11, mem_bytes=64 * 1024, timeout=TIMEOUT, quiet=True)
    _assert_passed(report)
    assert report.steps[NAMES.index("irq")].data["interrupt_line"] is True


def test_simulated_board_over_serial_passes(serial_transport):
    report = run_bringup(serial_transport, seed=12, mem_bytes=256, timeout=TIMEOUT, quiet=True)
    _assert_passed(report)
    assert report.transport == "SerialTransport"
    assert report.steps[NAMES.index("irq")].data["interrupt_line"] is False
