"""What every cocotb testbench here starts from: the clock, the reset, the cycle count and random pauses.

Every generated module has a ``clk`` input and a synchronous, active-high ``rst``.  A testbench class
derives from :class:`Harness` (or holds one) and adds its bus models; :func:`set_pauses` gives the
cocotbext channels random idle cycles and back-pressure from the test's seeded generator, and
:func:`seed_note` names the seed in failure messages.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from typing import Protocol

from cocotb.clock import Clock
from cocotb.triggers import ClockCycles
from cocotb.utils import get_sim_steps, get_sim_time

__all__ = ["CLOCK_NS", "RESET_HIGH", "RESET_LOW", "Harness", "pauses", "seed_note", "set_pauses"]

#: The clock period of every testbench but the UART bridge's (nanoseconds): 100 MHz.
CLOCK_NS = 10
#: Cycles the reset is held high, then cycles of quiet after it before the test drives anything.
RESET_HIGH, RESET_LOW = 4, 2


class _Random(Protocol):
    def random(self) -> float: ...


def pauses(rng: _Random, probability: float) -> Iterator[bool]:
    """An endless pause generator (cocotbext's ``set_pause_generator``): each cycle paused with ``probability``.

    ``rng`` is a seeded ``numpy.random.Generator`` or ``random.Random``; each cycle draws one number from it.
    """
    while True:
        yield bool(rng.random() < probability)


def set_pauses(channels: Iterable, rng: _Random, probability: float) -> None:
    """Give every one of ``channels`` (cocotbext sources, sinks, AXI channels) its own pauses from ``rng``."""
    for channel in channels:
        channel.set_pause_generator(pauses(rng, probability))


def seed_note() -> str:
    """The run's seed, for failure messages: rerun with ``--seed-base`` set to it."""
    return f"seed {os.environ.get('COCOTB_RANDOM_SEED', '?')}"


class Harness:
    """The clock, the reset and the cycle count of a cocotb ``dut`` with ``clk`` and ``rst`` ports.

    Parameters
    ----------
    dut:
        The cocotb handle of the top level.
    clock_ns:
        The clock period in nanoseconds.
    start_clock:
        Start cocotb's clock on ``dut.clk`` now.  Off when something else drives the clock (a top
        level whose clock runs in Verilator) or when the testbench starts it later (:meth:`start_clock`).
    """

    def __init__(self, dut, *, clock_ns: int = CLOCK_NS, start_clock: bool = True):
        self.dut = dut
        self.clock_ns = clock_ns
        self._clock: Clock | None = None
        self._clock_period = get_sim_steps(clock_ns, "ns")
        self._clock_step = 0  # simulator steps at the clock's first rising edge
        if start_clock:
            self.start_clock()

    def start_clock(self) -> None:
        """Start cocotb's clock on ``dut.clk`` (once: a second call does nothing)."""
        if self._clock is None:
            self._clock = Clock(self.dut.clk, self.clock_ns, unit="ns")
            self._clock.start()
            self._clock_step = get_sim_time(unit="step")

    async def reset(self, high: int = RESET_HIGH, low: int = RESET_LOW) -> None:
        """Hold ``rst`` high for ``high`` cycles, then low for ``low`` cycles before returning."""
        self.dut.rst.value = 1
        await ClockCycles(self.dut.clk, high)
        self.dut.rst.value = 0
        await ClockCycles(self.dut.clk, low)

    @property
    def cycle(self) -> int:
        """Whole clock cycles since this harness started the clock (since the simulation started when something
        else drives it): the same number after a rising edge and after the falling edge that follows.

        Counted from the clock's start, not from time 0: a test that runs after another in the same
        simulator starts its clock whenever the one before ended, not on a multiple of the period.
        """
        return (get_sim_time(unit="step") - self._clock_step) // self._clock_period
