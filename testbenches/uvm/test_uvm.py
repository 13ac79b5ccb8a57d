"""pyuvm tests of the whole SoC; the main sequence of each test is chosen by a factory override.

* ``RandomTest``: constrained-random GEMM/POSTOP/LOAD/STORE/COPY streams on both queues, SIGNAL/WAIT pairs,
  a few refused commands; every completion and the output memory checked against DeviceModel.
* ``ErrorsMixedTest``: the same with many refused commands of every kind (``ErrorsMixedStreamSeq``).
* ``SyncHeavyTest``: short commands and many cross-queue SIGNAL/WAIT pairs (``SyncHeavyStreamSeq``).
* ``QueueErrorTest``: DOORBELL_RANGE, RING_OVERFLOW and the watchdog's TIMEOUT halt each queue, which resumes
  (``QueueErrorStreamSeq``).
* ``CsrTest``: register suites from the spec: reset values, walking ones, aliasing, shuffled order.
* ``BusErrorTest``: unmapped, misaligned, partial strobes, write to RO, read of WO: SLVERR, and the bus
  keeps serving.

``test_uvm_coverage_goals`` checks that the runs of one seed hit every bin of the coverage goals
(``coverage.COVERAGE_GOALS``) together.
"""

from __future__ import annotations

import time
from pathlib import Path

import cocotb
import pytest
import pyuvm
from cocotb_coverage.coverage import coverage_db
from pyuvm import ConfigDB, uvm_factory, uvm_test

from dx1_bringup.sim import run_cocotb
from dx1_bringup.sim.report import CoverItem, functional_text, merge_functional

from .coverage import COVERAGE_GOALS, missed_goals
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
                         f"{bfm().cycle} cycles")
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
#: The run folder of each (test, seed) that passed in this session.
_PASSED: dict[tuple[str, int], Path] = {}


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
    _run(testcase, seed)


def _run(testcase: str, seed: int) -> Path:
    """Run one pyuvm test on the SoC; its run folder (coverage-<test>.yml there) once it has passed."""
    run_dir = run_cocotb("dx1_soc", "uvm.test_uvm", testcase=testcase, seed=seed, quiet=True)
    _RUN_DIRS.append(run_dir)
    _PASSED[testcase, seed] = run_dir
    return run_dir


def test_uvm_coverage_goals(seed):
    """Every UVM test at this seed (run here if this session has not passed it yet): the merged functional
    coverage hits every bin of ``COVERAGE_GOALS``."""
    runs = [(_PASSED.get((testcase, seed)) or _run(testcase, seed)) / f"coverage-{testcase}.yml"
            for testcase in TESTS]
    out = runs[0].parent.parent / f"uvm-coverage-goals-seed{seed}"
    items = merge_functional(runs, out.with_suffix(".yml"))
    missed = missed_goals(items)
    assert not missed, (f"the UVM tests at seed {seed} missed {len(missed)} of {len(COVERAGE_GOALS)} coverage goals "
                        f"(merged: {out.with_suffix('.yml')}):\n" + "\n".join(missed))


def test_coverage_goals_are_every_coverpoint_and_cross():
    defined = {name for name in coverage_db if name.count(".") >= 2}
    assert set(COVERAGE_GOALS) == defined, (
        f"COVERAGE_GOALS lacks {sorted(defined - set(COVERAGE_GOALS))} and names undefined "
        f"{sorted(set(COVERAGE_GOALS) - defined)}")


def test_missed_goals_names_each_bin_never_hit():
    hit = [CoverItem(name, False, 2, 2, ()) for name in COVERAGE_GOALS]
    assert missed_goals(hit) == []
    short = [CoverItem("dx1.cmd.status", False, 9, 10, ("TIMEOUT",))] + [i for i in hit if i.name != "dx1.cmd.status"]
    assert missed_goals(short) == ["dx1.cmd.status: 9 of 10 bins hit; never hit: TIMEOUT"]
    assert missed_goals(hit[1:]) == [f"{COVERAGE_GOALS[0]}: never sampled"]
