"""pyuvm tests of the whole SoC; the main sequence of each test is chosen by a factory override.

* ``RandomTest``: constrained-random GEMM/POSTOP/LOAD/STORE/COPY streams on both queues, SIGNAL/WAIT pairs,
  a few refused commands; every completion and the output memory checked against DeviceModel.
* ``ErrorsMixedTest``: the same with many refused commands of every kind (``ErrorsMixedStreamSeq``).
* ``SyncHeavyTest``: short commands and many cross-queue SIGNAL/WAIT pairs (``SyncHeavyStreamSeq``).
* ``QueueErrorTest``: DOORBELL_RANGE and RING_OVERFLOW halt each queue, which resumes (``QueueErrorStreamSeq``).
* ``CsrTest``: register suites from the spec: reset values, walking ones, aliasing, shuffled order.
* ``BusErrorTest``: unmapped, misaligned, partial strobes, write to RO, read of WO: SLVERR, and the bus
  keeps serving.
"""

from __future__ import annotations

import time
from pathlib import Path

import cocotb
import pytest
import pyuvm
from pyuvm import ConfigDB, uvm_factory, uvm_test

from dx1_bringup.sim import run_cocotb
from dx1_bringup.sim.report import functional_text, merge_functional

from .env import LAYOUT, Dx1Env, SocBfm, bfm
from .sequences import (
    BusErrorSeq,
    CsrSuiteSeq,
    ErrorsMixedStreamSeq,
    QueueErrorStreamSeq,
    StreamSeq,
    SyncHeavyStreamSeq,
)

TIMEOUT_US = 5_000_000  # simulated; far more than any run needs


class Dx1BaseTest(uvm_test):
    """Builds the environment and runs ``StreamSeq`` (or what the factory substitutes for it)."""

    def build_phase(self):
        ConfigDB().set(None, "*", "LAYOUT", LAYOUT)
        ConfigDB().set(None, "*", "BFM", SocBfm(cocotb.top))
        ConfigDB().set(None, "*", "TEST_NAME", type(self).__name__)
        self.env = Dx1Env("env", self)

    def end_of_elaboration_phase(self):
        ConfigDB().set(None, "*", "REG_SEQR", self.env.reg_agent.seqr)
        ConfigDB().set(None, "*", "CMD_SEQR", self.env.cmd_agent.seqr)
        ConfigDB().set(None, "*", "COMPLETIONS", self.env.cmd_agent.completions)
        ConfigDB().set(None, "*", "CMD_TAIL", lambda: list(self.env.cmd_agent.driver.tail))

    async def run_phase(self):
        self.raise_objection()
        start = time.monotonic()
        await bfm().reset()
        main = StreamSeq.create("main")
        seqr = self.env.cmd_agent.seqr if main.target == "cmd" else self.env.reg_agent.seqr
        self.logger.info(f"main sequence: {type(main).__name__}")
        await main.start(seqr)
        if getattr(main, "check_memory", False):
            await self.env.scoreboard.check_memory()
        self.logger.info(f"{type(main).__name__} done in {time.monotonic() - start:.1f} s wall, "
                         f"{cocotb.utils.get_sim_time('ns') // 10} cycles")
        self.drop_objection()


@pyuvm.test(timeout_time=TIMEOUT_US, timeout_unit="us")
class RandomTest(Dx1BaseTest):
    pass


@pyuvm.test(timeout_time=TIMEOUT_US, timeout_unit="us")
class ErrorsMixedTest(Dx1BaseTest):
    def build_phase(self):
        uvm_factory().set_type_override_by_type(StreamSeq, ErrorsMixedStreamSeq)
        super().build_phase()


@pyuvm.test(timeout_time=TIMEOUT_US, timeout_unit="us")
class SyncHeavyTest(Dx1BaseTest):
    def build_phase(self):
        uvm_factory().set_type_override_by_type(StreamSeq, SyncHeavyStreamSeq)
        super().build_phase()


@pyuvm.test(timeout_time=TIMEOUT_US, timeout_unit="us")
class QueueErrorTest(Dx1BaseTest):
    def build_phase(self):
        uvm_factory().set_type_override_by_type(StreamSeq, QueueErrorStreamSeq)
        super().build_phase()


@pyuvm.test(timeout_time=TIMEOUT_US, timeout_unit="us")
class CsrTest(Dx1BaseTest):
    def build_phase(self):
        uvm_factory().set_type_override_by_type(StreamSeq, CsrSuiteSeq)
        super().build_phase()


@pyuvm.test(timeout_time=TIMEOUT_US, timeout_unit="us")
class BusErrorTest(Dx1BaseTest):
    def build_phase(self):
        uvm_factory().set_type_override_by_type(StreamSeq, BusErrorSeq)
        super().build_phase()


TESTS = ["RandomTest", "ErrorsMixedTest", "SyncHeavyTest", "QueueErrorTest", "CsrTest", "BusErrorTest"]
_RUN_DIRS: list[Path] = []


@pytest.fixture(scope="module", autouse=True)
def merged_coverage():
    """After the module's runs: every run's coverage merged into one report beside the run folders."""
    start = time.time()
    yield
    if not _RUN_DIRS:
        return
    # Every run of this session, from every xdist worker (each worker merges what has finished so far).
    files = [f for f in _RUN_DIRS[0].parent.glob("test_uvm-*/coverage-*.yml") if f.stat().st_mtime >= start]
    out = _RUN_DIRS[0].parent / "uvm-coverage-merged"
    items = merge_functional(files, out.with_suffix(".yml"))
    out.with_suffix(".txt").write_text(functional_text(items, len(files)))


@pytest.mark.parametrize("testcase", TESTS)
def test_uvm(testcase, seed):
    _RUN_DIRS.append(run_cocotb("dx1_soc", "uvm.test_uvm", testcase=testcase, seed=seed, quiet=True))
