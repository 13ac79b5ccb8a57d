"""Simulators shared by the tests that need them: one of each per session.

The first use builds the Verilator model, which takes minutes; later sessions reuse the build.
Every test that uses one opens a fresh, reset device on it.  Without Verilator they are skipped
with the reason.
"""

from __future__ import annotations

import pytest
from dx1_driver import open_transport
from dx1_driver.serial_transport import SerialTransport
from dx1_driver.transport import start_simulator

from dx1_bringup.sim import verilator_missing
from dx1_bringup.sim.board_server import BAUD as BOARD_BAUD


@pytest.fixture(scope="session")
def sim_transport():
    """The SoC RTL behind the sim transport."""
    reason = verilator_missing()
    if reason:
        pytest.skip(reason)
    transport = open_transport("sim")
    yield transport
    transport.close()


@pytest.fixture(scope="session")
def serial_transport():
    """The simulated board (SoC + UART bridge) over the serial transport, as a board on a cable."""
    reason = verilator_missing()
    if reason:
        pytest.skip(reason)
    process, port = start_simulator(uart=True)
    # The simulated line moves about a kilobyte per wall-clock second: generous timeouts.
    transport = SerialTransport(f"socket://127.0.0.1:{port}", baud=BOARD_BAUD, timeout=60.0, quiet=0.3)
    yield transport
    transport.close()
    process.wait(timeout=60)
