"""The native board server (dx1_bringup/sim/native/board_server.cpp) against the cocotb one (board_server.py).

Both serve the simulated board's UART on a loopback socket, the native one shifting the line's bits in C++,
the cocotb one through cocotbext-uart.  Over the serial transport the two must be one board: the same
registers, the same memory, the same GEMM result.  The serial conformance suite runs on the native server
(the default); this compares the two side by side.
"""

from __future__ import annotations

import os
import subprocess

import numpy as np
import pytest
from dx1_driver import Device, regs
from dx1_driver.serial_transport import SerialTransport

from dx1_bringup.runtime.gemm_run import run_gemm
from dx1_bringup.runtime.operands import random_operands
from dx1_bringup.runtime.reference import reference_gemm
from dx1_bringup.sim import verilator_missing
from dx1_bringup.sim.board_server import BAUD
from dx1_bringup.sim.launch import start_simulator
from dx1_bringup.sim.native import build
from dx1_bringup.sim.serve import BOARD_MODULE

pytestmark = [pytest.mark.verilator, pytest.mark.xdist_group("board_native_vs_cocotb")]


def _on_board(server: str, gemm: bool) -> dict:
    process, port = start_simulator(uart=True, server=server)
    transport = SerialTransport(f"socket://127.0.0.1:{port}", baud=BAUD, timeout=60.0, quiet=0.3)
    try:
        transport.write_block(0x2001, bytes(range(77)))
        seen = {"id": transport.read32(regs.Global.ID), "caps": transport.read32(regs.Global.CAPS),
                "block": transport.read_block(0x2000, 80)}
        if gemm:
            a, b = random_operands(np.random.default_rng(5), 16, 24, 16)
            out, _ = run_gemm(Device(transport), a, b, tiles=1, timeout=120)
            seen["gemm"], seen["reference"] = out, reference_gemm(a, b)
        return seen
    finally:
        transport.close()
        process.wait(timeout=60)


def _compare(gemm: bool) -> None:
    if reason := verilator_missing():
        pytest.skip(reason)
    native, cocotb = _on_board("native", gemm), _on_board("cocotb", gemm)
    assert native["block"][1:78] == bytes(range(77))
    for key in ("id", "caps", "block"):
        assert native[key] == cocotb[key], key
    if gemm:
        assert np.array_equal(native["gemm"], native["reference"])
        assert np.array_equal(cocotb["gemm"], native["gemm"])


def test_both_board_servers_show_the_same_registers_and_memory():
    _compare(gemm=False)


@pytest.mark.slow
def test_both_board_servers_compute_the_same_gemm():
    """About two minutes: the cocotb board moves about a kilobyte of the line per wall second."""
    _compare(gemm=True)


def test_the_native_board_server_refuses_a_fault_rate_out_of_range():
    if reason := verilator_missing():
        pytest.skip(reason)
    program = build(BOARD_MODULE)
    result = subprocess.run([str(program), "--once"], env={**os.environ, "DX1_FAULT_RATE": "0.7"},
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert "DX1_FAULT_RATE must be from 0 to 0.5, not 0.7" in result.stderr
