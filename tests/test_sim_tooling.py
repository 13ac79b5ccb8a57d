"""The simulation tooling: build variants (coverage, waveforms), the coverage merge, and the `make sim` summary.

The coverage test builds the smallest module (the 4x4 systolic array) with line, branch and toggle
coverage and VCD waveforms, runs two of its testbench's tests, and checks the merged numbers against the
runs' own files.  The summary tests run pytest on a small test file to get a real JUnit XML.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dx1_bringup.sim import (
    BUILD_ROOT,
    COVERAGE_FILE,
    REPO_ROOT,
    BuildVariant,
    fst_missing,
    run_cocotb,
    tool_path,
    verilator_missing,
)
from dx1_bringup.sim.report import (
    annotate,
    code_coverage,
    functional_text,
    merge_coverage,
    merge_functional,
    point_fields,
    read_coverage,
    read_junit,
    summary,
    tally,
    write_coverage,
)

MODULE = "dx1_systolic_a4"
needs_verilator = pytest.mark.skipif(verilator_missing() is not None, reason=str(verilator_missing()))


def test_build_variants_from_the_environment() -> None:
    assert BuildVariant.from_env({}) == BuildVariant()
    assert BuildVariant().suffix == ""
    assert BuildVariant.from_env({"DX1_SIM_COVERAGE": "0", "DX1_SIM_WAVES": "0"}).suffix == ""
    variant = BuildVariant.from_env({"DX1_SIM_COVERAGE": "1", "DX1_SIM_WAVES": "1"})
    assert (variant.suffix, variant.waves_file) == ("-cov-fst", "dump.fst")
    assert {"--coverage-line", "--coverage-toggle", "--trace-fst"} <= set(variant.build_args())
    variant = BuildVariant.from_env({"DX1_SIM_PUBLIC": "1", "DX1_SIM_WAVES": "vcd"})
    assert (variant.suffix, variant.waves_file) == ("-public-vcd", "dump.vcd")
    assert "--no-public-flat-rw" not in variant.build_args()
    # The default build keeps its flags: no coverage, no tracing.
    assert BuildVariant().build_args() == ["--no-public-flat-rw", "--public-depth", "1"]
    with pytest.raises(ValueError, match=r"DX1_SIM_COVERAGE must be 0 or 1, not 'yes'"):
        BuildVariant.from_env({"DX1_SIM_COVERAGE": "yes"})
    with pytest.raises(ValueError, match=r"DX1_SIM_WAVES must be 0, 1 \(FST\), fst or vcd, not 'ghw'"):
        BuildVariant.from_env({"DX1_SIM_WAVES": "ghw"})


def test_the_environments_own_verilator_comes_first_on_path() -> None:
    """`.venv/bin/dx1` from a shell without the venv on PATH still finds the Verilator of its environment."""
    own = tool_path("")
    if not own:
        pytest.skip("this Python's environment has no Verilator of its own")
    assert (Path(own) / "verilator").exists()
    assert tool_path(os.pathsep.join(["/usr/bin", own, "/bin"])) == os.pathsep.join([own, "/usr/bin", "/bin"])
    probe = "from dx1_bringup.sim import verilator_missing; print(verilator_missing())"
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                            env={**os.environ, "PATH": os.pathsep.join(["/usr/bin", "/bin"])})
    assert (result.returncode, result.stdout) == (0, "None\n"), result.stderr


@pytest.fixture(scope="module")
def coverage_runs() -> list[Path]:
    """Two tests of the systolic testbench on a coverage + VCD build: their run folders.

    Its tests are one xdist group: on two workers each would run the same simulations into the same folders at
    once, one truncating the coverage file that the other reads."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("DX1_SIM_COVERAGE", "1")
        mp.setenv("DX1_SIM_WAVES", "vcd")
        return [run_cocotb(MODULE, "systolic.test_systolic", testcase=case, seed=1, quiet=True,
                           name=f"tooling-{case}") for case in ("single_bank", "extremes")]


@pytest.mark.xdist_group("coverage_build")
@pytest.mark.verilator
@needs_verilator
def test_coverage_build_writes_coverage_and_waves_in_its_own_folder(coverage_runs: list[Path]) -> None:
    build = coverage_runs[0].parent
    assert build == BUILD_ROOT / f"{MODULE}-cov-vcd"
    classes = (build / "Vtop_classes.mk").read_text()
    assert "VM_COVERAGE = 1" in classes and "VM_TRACE_VCD = 1" in classes
    for run in coverage_runs:
        vcd = (run / "dump.vcd").read_text(errors="replace")
        assert "$enddefinitions" in vcd and f"$scope module {MODULE} $end" in vcd
        points = read_coverage(run / COVERAGE_FILE)
        kinds = tally(points)
        for kind in ("line", "branch", "toggle"):
            assert kinds[kind].total > 0 and 0 < kinds[kind].hit <= kinds[kind].total, (run, kind, kinds[kind])
        assert {point_fields(k)["f"] for k in points} == {str(REPO_ROOT / "rtl" / f"{MODULE}.v")}


@pytest.mark.xdist_group("coverage_build")
@pytest.mark.verilator
@needs_verilator
def test_merged_coverage_adds_up_the_runs(coverage_runs: list[Path], tmp_path: Path) -> None:
    runs = [read_coverage(run / COVERAGE_FILE) for run in coverage_runs]
    merged = merge_coverage([run / COVERAGE_FILE for run in coverage_runs])
    # One build, so the same points; each merged count is the sum of the runs' counts.
    assert set(runs[0]) == set(runs[1]) == set(merged)
    assert all(merged[k] == runs[0][k] + runs[1][k] for k in merged)
    assert sum(merged.values()) == sum(runs[0].values()) + sum(runs[1].values())
    # A point is hit in the merge when it is hit in either run.
    either = sum(1 for k in merged if runs[0][k] or runs[1][k])
    assert sum(t.hit for t in tally(merged).values()) == either
    for kind, t in tally(merged).items():
        assert t.hit >= max(tally(r)[kind].hit for r in runs)
    # The merged file reads back as written.
    write_coverage(merged, tmp_path / "merged.dat")
    assert read_coverage(tmp_path / "merged.dat") == merged

    # code_coverage finds the runs of this session under build/sim and writes per module and overall.
    since = min((run / COVERAGE_FILE).stat().st_mtime for run in coverage_runs)
    found = {m.name: m for m in code_coverage(since, out_dir=tmp_path / "cov")}
    assert found[MODULE].runs >= 2 and "all" in found
    assert read_coverage(tmp_path / "cov" / f"{MODULE}.dat").keys() >= merged.keys()
    for kind in ("line", "toggle"):
        assert 0 < found[MODULE].kinds[kind].percent <= 100
    annotated = (tmp_path / "cov" / "annotated" / f"{MODULE}.v").read_text().splitlines()
    source = (REPO_ROOT / "rtl" / f"{MODULE}.v").read_text().splitlines()
    notes = [line for line in annotated if line.startswith("\t// not hit: ")]
    assert len(annotated) == len(source) + len(notes)
    assert any(line[:7].strip().isdigit() and int(line[:7]) > 0 for line in annotated)


@pytest.mark.verilator
@needs_verilator
def test_fst_waves_or_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DX1_SIM_WAVES", "1")
    reason = fst_missing()
    if reason:
        assert "apt-get install -y" in reason and "DX1_SIM_WAVES=vcd" in reason
        with pytest.raises(RuntimeError, match="FST waveforms need"):
            run_cocotb(MODULE, "systolic.test_systolic", testcase="single_bank", seed=1, quiet=True,
                       name="tooling-fst")
        return
    run = run_cocotb(MODULE, "systolic.test_systolic", testcase="single_bank", seed=1, quiet=True,
                     name="tooling-fst")
    assert run.parent == BUILD_ROOT / f"{MODULE}-fst"
    assert (run / "dump.fst").stat().st_size > 1000


SAMPLE_TESTS = '''
import pytest


@pytest.mark.parametrize("case", ["good", "bad"])
def test_bench(case, seed):
    assert case == "good" or seed == 3, f"case {case} failed with seed {seed}"


def test_needs_a_board():
    pytest.skip("no board here")
'''

COVER_SCRIPT = '''
import sys
from cocotb_coverage.coverage import CoverCross, CoverPoint, coverage_db


@CoverPoint("t.op", xf=lambda x: x[0], bins=["a", "b", "c"])
@CoverPoint("t.size", xf=lambda x: x[1], bins=[1, 2])
@CoverCross("t.cross", items=["t.op", "t.size"])
def sample(x):
    pass


for item in sys.argv[2:]:
    op, size = item.split(":")
    sample((op, int(size)))
coverage_db.export_to_yaml(sys.argv[1])
'''


def _pytest(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "DX1_SIM_"))}
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args], cwd=cwd,
                          env=env, capture_output=True, text=True, timeout=120)


def test_summary_from_a_real_junit_file(tmp_path: Path) -> None:
    # A pytest session like `make sim`'s: the project's seed options, one test failing on one seed.
    shutil.copy(REPO_ROOT / "conftest.py", tmp_path / "conftest.py")
    bench = tmp_path / "testbenches" / "demo"
    bench.mkdir(parents=True)
    (bench / "test_demo.py").write_text(SAMPLE_TESTS)
    junit = tmp_path / "build" / "junit.xml"
    started = time.time()
    result = _pytest(tmp_path, "testbenches", "--seeds=2", "--seed-base=3", f"--junitxml={junit}")
    assert result.returncode == 1, result.stdout + result.stderr

    run = read_junit(junit)
    assert (len(run.tests), run.count("passed"), run.count("failed"), run.count("skipped")) == (5, 3, 1, 1)
    assert abs(run.started.timestamp() - started) < 60 and run.wall_s > 0

    # Functional coverage exported by two runs, as the pyuvm tests export theirs.
    for name, samples in (("run-1", ["a:1", "b:2"]), ("run-2", ["a:2"])):
        folder = tmp_path / "build" / "dx1_soc" / name
        folder.mkdir(parents=True)
        subprocess.run([sys.executable, "-c", COVER_SCRIPT, str(folder / "coverage-T.yml"), *samples], check=True)
    # Code coverage of one run: a line hit, a line not hit, a toggle hit, and Amaranth's trigger (left out).
    source = tmp_path / "rtl" / "dx1_demo.v"
    source.parent.mkdir()
    source.write_text("module dx1_demo;\n  reg \\$auto$verilog_backend.cc:1$1 = 0;\n  x = 1;\n  y = 2;\n"
                      "  reg [1:0] z;\nendmodule\n")

    def key(line: int, kind: str, what: str) -> str:
        return f"\x01f\x02{source}\x01l\x02{line}\x01t\x02{kind}\x01o\x02{what}\x01h\x02dx1_demo"

    write_coverage({key(2, "toggle", "trigger:0->1"): 0, key(3, "line", "block"): 4, key(4, "line", "block"): 0,
                    key(5, "toggle", "z[0]:0->1"): 7}, tmp_path / "build" / "dx1_demo-cov" / "run-1" / COVERAGE_FILE)

    text = summary(junit, build_root=tmp_path / "build", root=tmp_path)
    assert "| result | FAIL: 1 of 5 tests failed, 1 skipped |" in text
    assert "| seeds | 3, 4 (2 per randomised test) |" in text
    assert "| demo/test_demo | 5 | 3 | **1** | 1 |" in text
    assert "coverpoints 4 / 5 bins, crosses 3 / 6 bins (2 runs)" in text
    assert "t.op: c" in text
    assert "| dx1_demo | 1 | 50.0% (1/2) | - | 100.0% (1/1) |" in text
    annotated = (tmp_path / "build" / "coverage" / "annotated" / "dx1_demo.v").read_text().splitlines()
    assert annotated[1:6] == ["\t  reg \\$auto$verilog_backend.cc:1$1 = 0;", " 000004\t  x = 1;", "%000000\t  y = 2;",
                              "\t// not hit: line block", " 000007\t  reg [1:0] z;"]

    # The failure's rerun command runs exactly that test, with that seed, from the repository root.
    assert "case bad failed with seed 4" in text
    command = next(line.strip().strip("`") for line in text.splitlines() if "-m pytest" in line)
    assert command.startswith("DX1_SIM_WAVES=1 ") and command.endswith(
        "'testbenches/demo/test_demo.py::test_bench[seed4-bad]' --seed-base=4")
    rerun = subprocess.run(command, shell=True, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert rerun.returncode == 1 and "1 failed in" in rerun.stdout, rerun.stdout + rerun.stderr


def test_functional_merge_keeps_every_bin_hit_in_any_run(tmp_path: Path) -> None:
    files = []
    for name, samples in (("one", ["a:1"]), ("two", ["c:2", "c:1"])):
        files.append(tmp_path / f"coverage-{name}.yml")
        subprocess.run([sys.executable, "-c", COVER_SCRIPT, str(files[-1]), *samples], check=True)
    items = {i.name: i for i in merge_functional(files, tmp_path / "merged.yml")}
    assert set(items) == {"t.op", "t.size", "t.cross"}
    assert (items["t.op"].hit, items["t.op"].size, items["t.op"].missed) == (2, 3, ("b",))
    assert (items["t.cross"].cross, items["t.cross"].hit, items["t.cross"].size) == (True, 3, 6)
    assert functional_text(list(items.values()), 2).startswith("merged functional coverage of 2 runs: 7 / 11 bins")
    with pytest.raises(ValueError, match="no functional coverage files to merge"):
        merge_functional([], tmp_path / "none.yml")


def test_coverage_files_are_checked(tmp_path: Path) -> None:
    bad = tmp_path / "coverage.dat"
    bad.write_text("not coverage\n")
    with pytest.raises(ValueError, match=r"is not a Verilator coverage file: it starts with 'not coverage'"):
        read_coverage(bad)
    bad.write_text("# SystemC::Coverage-3\nC 'x' 1\nC 'y'\n")
    with pytest.raises(ValueError, match=r"coverage.dat:3: not a coverage point"):
        read_coverage(bad)
    with pytest.raises(ValueError, match="no coverage files to merge"):
        merge_coverage([])
    assert annotate({"\x01f\x02/nonexistent.v\x01l\x021\x01t\x02line": 0}, tmp_path / "a") == []


def test_report_command_without_junit_says_so(tmp_path: Path) -> None:
    result = subprocess.run([sys.executable, "-m", "dx1_bringup.cli", "sim", "report", "--junit",
                             str(tmp_path / "none.xml"), "--out", str(tmp_path / "summary.md")], capture_output=True,
                            text=True, cwd=REPO_ROOT)
    assert result.returncode == 2
    assert "none.xml is missing: the regression wrote no JUnit XML" in result.stderr
    assert not (tmp_path / "summary.md").exists()


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="process CPU times come from /proc (Linux)")
def test_the_simspeed_bench_counts_a_servers_children_cpu():
    # The cocotb server is a Python process whose child is the simulator: its CPU must be counted.
    from dx1_bringup.bench_simspeed import process_cpu_seconds

    burn = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.4: pass\ntime.sleep(30)"
    parent = subprocess.Popen([sys.executable, "-c", f"import subprocess, sys; subprocess.run([sys.executable, "
                                                     f"'-c', {burn!r}])"])
    try:
        deadline = time.monotonic() + 30
        while (process_cpu_seconds(parent.pid) or 0) < 0.4:
            assert time.monotonic() < deadline, "the child's 0.4 s of CPU was never counted"
            time.sleep(0.1)
        assert process_cpu_seconds(2 ** 22 + 1) is None  # no such process
    finally:
        for child in Path(f"/proc/{parent.pid}/task/{parent.pid}/children").read_text().split():
            os.kill(int(child), 9)
        parent.kill()
        parent.wait()
