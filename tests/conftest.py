"""Simulators shared by the tests that need them: one of each per session.

The first use builds the Verilator model, which takes minutes; later sessions reuse the build.
Every test that uses one opens a fresh, reset device on it; under pytest-xdist they all run on one worker
(one xdist group per simulator).  Without Verilator they are skipped with the reason.  Every test that
uses one carries the ``verilator`` marker (added at collection), so ``pytest -m "not verilator"`` runs no
simulator.
"""

from __future__ import annotations

import pytest
from dx1_driver import open_transport
from dx1_driver.serial_transport import SerialTransport

from dx1_bringup.sim import verilator_missing
from dx1_bringup.sim.board_server import BAUD as BOARD_BAUD
from dx1_bringup.sim.launch import start_simulator

#: The fixtures below that start a simulator, by the device name that a test's ``device`` parameter gives
#: them (the conformance suite's ``device`` fixture asks for ``f"{name}_transport"``).
SIMULATOR_FIXTURES = {"sim": "sim_transport", "serial": "serial_transport"}


def pytest_collection_modifyitems(config, items):
    """Mark ``verilator`` every test that uses a simulator fixture, directly or through its ``device`` parameter,
    and put it in that fixture's xdist group: under ``pytest -n N --dist loadgroup`` (``make test``) all the
    tests of one simulator run on one worker, which starts it once.  A ``slow_on_serial`` test's ``serial``
    case is also ``slow``: ``make test`` runs the rest of the serial cases, ``pytest -m slow`` those."""
    for item in items:
        params = item.callspec.params if hasattr(item, "callspec") else {}
        used = [fixture for name, fixture in SIMULATOR_FIXTURES.items()
                if fixture in item.fixturenames or params.get("device") == name]
        if used:
            item.add_marker(pytest.mark.verilator)
            item.add_marker(pytest.mark.xdist_group(used[0]))
        if params.get("device") == "serial" and item.get_closest_marker("slow_on_serial"):
            item.add_marker(pytest.mark.slow)


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
    # The simulated line moves a few kilobytes per wall-clock second: generous timeouts.
    transport = SerialTransport(f"socket://127.0.0.1:{port}", baud=BOARD_BAUD, timeout=60.0, quiet=0.3)
    yield transport
    transport.close()
    process.wait(timeout=60)
