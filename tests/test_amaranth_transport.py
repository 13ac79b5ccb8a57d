"""The SoC in Amaranth's simulator behind the driver (dx1_bringup.sim.amaranth_transport)."""

from __future__ import annotations

import numpy as np
import pytest
from dx1_driver import Device, TransportError

from dx1_bringup.runtime.gemm_run import run_gemm
from dx1_bringup.runtime.reference import reference_gemm
from dx1_bringup.sim.amaranth_transport import AmaranthTransport


@pytest.fixture(scope="module")
def device():
    dev = Device(AmaranthTransport())
    yield dev
    dev.close()


def test_a_gemm_is_bit_exact_and_takes_simulated_cycles(device):
    rng = np.random.default_rng(5)
    a = rng.integers(-128, 128, (8, 16), dtype=np.int8)
    b = rng.integers(-128, 128, (16, 8), dtype=np.int8)
    before = device.transport.cycles()
    c, stats = run_gemm(device, a, b, tiles=1, timeout=300)
    np.testing.assert_array_equal(c, reference_gemm(a, b))
    assert device.transport.cycles() - before > stats.cycles > 0


def test_memory_blocks_round_trip_at_any_alignment(device):
    base = device.caps.mem_bytes - 0x2000
    device.write_mem(base, bytes(range(256)) * 4)
    device.write_mem(base + 3, b"\xaa" * 13)
    expected = bytearray(bytes(range(256)) * 4)
    expected[3:16] = b"\xaa" * 13
    assert device.read_mem(base, 1024) == bytes(expected)
    assert device.read_mem(base + 5, 3) == bytes(expected[5:8])


def test_a_register_outside_the_map_is_refused_with_the_bus_error(device):
    with pytest.raises(TransportError, match="read32 at 0xfffc: AXI response"):
        device.transport.read32(0xFFFC)
    assert device.transport.read32(0) == device.transport.read32(0)  # the port still answers
