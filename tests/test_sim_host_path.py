"""The simulation's two host memory paths, the AXI4 bus and the backdoor into the memory array, agree.

Each runs on the cocotb server (the bare SoC on cocotb's clock); the backdoor also on the clocked top
(its clock in Verilator) and on the native server (:mod:`dx1_bringup.sim.native`, the default of ``sim``),
which ``make bench`` measures beside them.

``dx1 sim serve`` serves host memory blocks through the backdoor by default (no bus cycles); the bus
path is what hardware has.  Both must hold the same bytes for any alignment and size, and feed the
device alike: the DMA reads what either wrote and either reads what the DMA wrote.
"""

from __future__ import annotations

import numpy as np
import pytest
from dx1_driver import Device

from dx1_bringup.runtime.gemm_run import run_gemm
from dx1_bringup.runtime.reference import reference_gemm
from dx1_bringup.sim import verilator_missing
from dx1_bringup.sim.backdoor import HOST_PATHS
from dx1_bringup.sim.launch import PrivateSimTransport, start_simulator

pytestmark = pytest.mark.verilator


@pytest.fixture(scope="module", params=[(path, "cocotb", "cocotb") for path in HOST_PATHS]
                + [("backdoor", "verilator", "cocotb"), ("backdoor", "cocotb", "native")],
                ids=lambda p: f"{p[0]}-{p[1]}" if p[2] == "cocotb" else f"{p[0]}-{p[2]}")
def device(request):
    reason = verilator_missing()
    if reason:
        pytest.skip(reason)
    host_path, clock, server = request.param
    process, port = start_simulator(host_path=host_path, clock=clock, server=server)
    dev = Device(PrivateSimTransport(process, port))
    yield dev
    dev.close()


def test_blocks_round_trip_at_any_alignment(device):
    rng = np.random.default_rng(7)
    base = device.caps.mem_bytes - 0x4000
    image = bytearray(rng.integers(0, 256, 0x4000, dtype=np.uint8).tobytes())
    device.write_mem(base, image)
    for _ in range(40):
        addr = int(rng.integers(0, 0x3F00))
        n = int(rng.integers(1, 0x100))
        data = rng.integers(0, 256, n, dtype=np.uint8).tobytes()
        device.write_mem(base + addr, data)
        image[addr:addr + n] = data
        lo = int(rng.integers(0, 0x3F00))
        hi = lo + int(rng.integers(1, 0x100))
        assert device.read_mem(base + lo, hi - lo) == bytes(image[lo:hi])
    assert device.read_mem(base, len(image)) == bytes(image)


def test_the_device_sees_what_the_host_path_wrote(device):
    rng = np.random.default_rng(3)
    a = rng.integers(-128, 128, (40, 56), dtype=np.int8)
    b = rng.integers(-128, 128, (56, 24), dtype=np.int8)
    c, stats = run_gemm(device, a, b, timeout=30)
    np.testing.assert_array_equal(c, reference_gemm(a, b))
    assert sum(stats.commands.values()) > 0


def test_a_block_written_right_after_a_register_access_lands(device):
    # A register access ends on a clock edge; the clocked top once lost a backdoor write made there.
    base = device.caps.mem_bytes - 0x100
    for value in (1, 0x80, 0xFFFF_0000_0000_0001):
        device.transport.read32(0)
        device.write_mem(base, value.to_bytes(8, "little"))
        assert device.read_mem(base, 8) == value.to_bytes(8, "little")
