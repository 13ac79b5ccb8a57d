"""The PCIe transport's access layer: BARs served by the golden model, and regular files mapped like sysfs."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
from dx1_driver import Device, TransportError, open_transport, regs
from dx1_driver.pcie import MmapBar, PcieTransport, parse_bdf

from dx1_bringup.backends import ModelBar, model_pcie_transport
from dx1_bringup.model.device import BusError, DeviceModel
from dx1_bringup.runtime.gemm_run import run_gemm
from dx1_bringup.runtime.reference import reference_gemm

GLOBAL = regs.BLOCK_BASES["GLOBAL"]


@pytest.mark.parametrize("bdf, normal", [("0000:01:00.0", "0000:01:00.0"), ("01:00.0", "0000:01:00.0"),
                                         ("0001:AF:1f.7", "0001:af:1f.7")])
def test_parse_bdf(bdf, normal):
    assert parse_bdf(bdf) == normal


@pytest.mark.parametrize("bdf", ["", "01:00", "0000:01:00.8", "0000:01:20.0", "000:01:00.0", "0000:01:00.0 "])
def test_parse_bdf_errors(bdf):
    with pytest.raises(ValueError) as info:
        parse_bdf(bdf)
    assert str(info.value) == f"PCI address {bdf!r} is not [DOMAIN:]BUS:DEVICE.FUNCTION, for example 0000:01:00.0"


def test_missing_device():
    if Path("/sys/bus/pci/devices/0000:01:00.0").exists():
        pytest.skip("this machine has a PCI device at 0000:01:00.0")
    with pytest.raises(TransportError) as info:
        open_transport("pcie:0000:01:00.0")
    assert str(info.value) == "no PCI device 0000:01:00.0 (/sys/bus/pci/devices/0000:01:00.0 does not exist)"


def _fake_sysfs(root: Path, mem_bytes: int = 4096, bar2: int = 4096, bars: tuple[int, ...] = (0, 2)) -> Path:
    """A directory laid out like /sys/bus/pci/devices/0000:03:00.0 with regular files as BARs."""
    dev = root / "0000:03:00.0"
    dev.mkdir()
    if 0 in bars:
        reg = bytearray(0x800)
        reg[regs.Global.MEM_BYTES:regs.Global.MEM_BYTES + 4] = mem_bytes.to_bytes(4, "little")
        (dev / "resource0").write_bytes(reg)
    if 2 in bars:
        (dev / "resource2").write_bytes(bytes(bar2))
    return dev


def test_missing_bar(tmp_path):
    dev = _fake_sysfs(tmp_path, bars=(0,))
    with pytest.raises(TransportError) as info:
        PcieTransport("03:00.0", sysfs_root=tmp_path)
    assert str(info.value) == f"PCI device 0000:03:00.0 has no BAR2 ({dev / 'resource2'} does not exist)"


def test_bar2_smaller_than_device_memory(tmp_path):
    _fake_sysfs(tmp_path, mem_bytes=8192, bar2=4096)
    with pytest.raises(TransportError, match=r"^PCI device 0000:03:00.0: MEM_BYTES is 8192 but BAR2 has only "
                                             r"4096 bytes$"):
        PcieTransport("0000:03:00.0", sysfs_root=tmp_path)


def test_mmap_bars_from_files(tmp_path):
    """The mmap path itself: register words and memory blocks land in the mapped files."""
    dev = _fake_sysfs(tmp_path)
    with PcieTransport("0000:03:00.0", sysfs_root=tmp_path) as t:
        assert (t.reg_bytes, t.mem_bytes) == (0x800, 4096)
        t.write32(GLOBAL + regs.Global.SCRATCH, 0xDEAD_BEEF)
        assert t.read32(GLOBAL + regs.Global.SCRATCH) == 0xDEAD_BEEF
        t.write_block(4093, b"abc")
        t.write_block(1, b"xyz")
        assert t.read_block(0, 5) == b"\0xyz\0" and t.read_block(4093, 3) == b"abc"
    reg = (dev / "resource0").read_bytes()
    assert reg[regs.Global.SCRATCH:regs.Global.SCRATCH + 4] == (0xDEAD_BEEF).to_bytes(4, "little")
    assert (dev / "resource2").read_bytes()[4093:] == b"abc"


def test_unreadable_bar(tmp_path):
    if os.geteuid() == 0:
        pytest.skip("root can open any file")
    dev = _fake_sysfs(tmp_path)
    (dev / "resource0").chmod(0o400)
    with pytest.raises(TransportError, match=r"^cannot open .*resource0: Permission denied \(mapping a BAR needs "
                                             r"root, or bind the device to vfio-pci\)$"):
        MmapBar(dev / "resource0")


# -- model-served BARs --------------------------------------------------------------------------------


@pytest.fixture
def bars():
    model = DeviceModel()
    return model, ModelBar(model, "registers", (BusError,)), ModelBar(model, "memory", (BusError,))


@pytest.mark.parametrize("offset", [1, 2, 3, 0x2A])
def test_unaligned_register_access_never_reaches_the_bar(bars, offset):
    _, bar0, _ = bars
    with pytest.raises(ValueError, match=rf"^BAR offset 0x{offset:x} is not 4-byte aligned$"):
        bar0.read32(offset)
    with pytest.raises(ValueError, match="not 4-byte aligned"):
        bar0.write32(offset, 1)
    with pytest.raises(ValueError, match="outside the BAR"):
        bar0.read32(bar0.size)
    assert bar0.accesses == []


def test_register_bar_takes_only_words(bars):
    _, bar0, _ = bars
    with pytest.raises(ValueError, match="only 32-bit accesses"):
        bar0.read(0, 8)
    assert bar0.accesses == []


def test_bus_error_becomes_transport_error(bars):
    _, bar0, _ = bars
    with pytest.raises(TransportError, match=r"^bus error on write32 at BAR offset 0x0: write to read-only"):
        bar0.write32(0, 1)


def test_transport_checks_before_the_bar():
    t = model_pcie_transport()
    with pytest.raises(ValueError, match="not 4-byte aligned"):
        t.read32(GLOBAL + 2)
    assert t.bar0.accesses[-1] == ("read32", regs.Global.MEM_BYTES, 4)  # only the read at open
    t.close()


def test_write_then_read_is_seen_and_reads_flush():
    with model_pcie_transport() as t:
        t.write32(GLOBAL + regs.Global.SCRATCH, 0x0BAD_F00D)
        assert t.read32(GLOBAL + regs.Global.SCRATCH) == 0x0BAD_F00D
        t.write_block(10, b"data")
        assert t.read_block(10, 4) == b"data"
        t.wait_irq(0)
        assert t.bar0.accesses[-1] == ("read32", regs.Global.ID, 4), "waiting must flush posted writes first"
        t.flush()
        assert t.bar0.accesses[-1] == ("read32", regs.Global.ID, 4)


def test_device_and_gemm():
    with Device(model_pcie_transport()) as dev:
        assert [b.base for b in dev.blocks] == list(regs.BLOCK_BASES.values())
        assert dev.caps.mem_bytes == 1 << 20
        rng = np.random.default_rng(2)
        a = rng.integers(-128, 128, (40, 56), dtype=np.int8)
        b = rng.integers(-128, 128, (56, 24), dtype=np.int8)
        out, _ = run_gemm(dev, a, b, tiles=2)
        np.testing.assert_array_equal(out, reference_gemm(a, b))
