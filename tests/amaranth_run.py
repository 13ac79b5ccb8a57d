"""Running a gateware part on Amaranth's simulator, for the unit tests of ``tests/test_gateware*.py``."""

from __future__ import annotations

from amaranth.sim import Simulator


def simulate(dut, bench, *, clocked: bool = True) -> None:
    """Run the async testbench ``bench`` against ``dut``, on a 1 MHz clock unless ``clocked`` is False
    (a purely combinational part)."""
    sim = Simulator(dut)
    if clocked:
        sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()
