"""Shared simulation work: Verilator's run-time objects compiled once, test cases sharing one simulator, and the
xdist groups that keep a shared simulator's tests on one worker."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from dx1_bringup.sim import REPO_ROOT, cocotb_outcomes, objcache, run_cocotb_shared

#: A stand-in compiler: writes its -o target and its .d file, and counts its calls in calls.txt beside it.
FAKE_COMPILER = """
import sys
from pathlib import Path
args = sys.argv[1:]
out = Path(args[args.index("-o") + 1])
out.write_text("object of " + " ".join(a for a in args if a.endswith(".cpp")))
out.with_suffix(".d").write_text(out.name + ": deps")
calls = Path(__file__).with_name("calls.txt")
calls.write_text(str(int(calls.read_text()) + 1 if calls.exists() else 1))
"""


def _compile(tmp_path: Path, folder: str, source: Path, *flags: str) -> int:
    build = tmp_path / folder
    build.mkdir(exist_ok=True)
    out = build / "verilated.o"
    command = [sys.executable, str(tmp_path / "cc.py"), *flags, "-c", "-o", str(out), str(source)]
    return objcache.main(["objcache.py", str(tmp_path / "cache"), str(source.parent), *command])


def test_objcache_compiles_a_runtime_file_once_per_command_line(tmp_path: Path) -> None:
    (tmp_path / "cc.py").write_text(FAKE_COMPILER)
    include = tmp_path / "include"
    include.mkdir()
    source = include / "verilated.cpp"
    source.write_text("int x;")
    calls = tmp_path / "calls.txt"
    assert _compile(tmp_path, "a", source, "-Os") == 0 and calls.read_text() == "1"
    assert _compile(tmp_path, "b", source, "-Os") == 0 and calls.read_text() == "1", "the second folder compiled"
    assert (tmp_path / "b" / "verilated.o").read_text() == (tmp_path / "a" / "verilated.o").read_text()
    assert (tmp_path / "b" / "verilated.d").read_text() == "verilated.o: deps"
    assert _compile(tmp_path, "c", source, "-O2") == 0 and calls.read_text() == "2", "other flags, same object"
    source.write_text("int y;")
    assert _compile(tmp_path, "d", source, "-Os") == 0 and calls.read_text() == "3", "a changed source was reused"


def test_objcache_runs_other_compiles_unchanged(tmp_path: Path) -> None:
    (tmp_path / "cc.py").write_text(FAKE_COMPILER)
    model = tmp_path / "build" / "Vtop__ALL.cpp"
    model.parent.mkdir()
    model.write_text("int model;")
    (tmp_path / "include").mkdir()
    for _ in range(2):
        command = [sys.executable, str(tmp_path / "cc.py"), "-c", "-o", str(model.with_suffix(".o")), str(model)]
        assert objcache.main(["objcache.py", str(tmp_path / "cache"), str(tmp_path / "include"), *command]) == 0
    assert (tmp_path / "calls.txt").read_text() == "2" and not (tmp_path / "cache").exists()
    assert objcache.main(["objcache.py"]) == 2


def test_cocotb_outcomes_reads_each_case(tmp_path: Path) -> None:
    results = tmp_path / "results.xml"
    results.write_text(
        '<testsuites><testsuite name="m" tests="3" failures="1" errors="1">'
        '<testcase name="good"/><testcase name="bad"><failure message="assert 1 == 2"/></testcase>'
        '<testcase name="broken"><error message="boom"/></testcase></testsuite></testsuites>')
    assert cocotb_outcomes(results) == {"good": None, "bad": "assert 1 == 2", "broken": "boom"}


def test_run_cocotb_shared_refuses_a_case_outside_its_batch() -> None:
    with pytest.raises(ValueError, match=r"^test case 'c' must be one of the batch \['a', 'b'\]$"):
        run_cocotb_shared("dx1_regfile", "regfile.test_regfile", "c", batch=["a", "b"], seed=1)


def test_an_xdist_group_runs_on_one_worker(tmp_path: Path) -> None:
    """Under ``-n 2 --dist loadgroup`` (``make test``) the tests of one xdist group share a worker."""
    shutil.copy(REPO_ROOT / "conftest.py", tmp_path / "conftest.py")
    (tmp_path / "test_grouped.py").write_text(
        "import pytest\n\n\n@pytest.mark.xdist_group('one')\n@pytest.mark.parametrize('i', range(8))\n"
        "def test_grouped(i):\n    pass\n")
    result = subprocess.run([sys.executable, "-m", "pytest", "-v", "-p", "no:cacheprovider", "-n", "2", "--dist",
                             "loadgroup", "test_grouped.py"], cwd=tmp_path, capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stdout[-2000:]
    workers = re.findall(r"^\[(gw\d+)\].* PASSED", result.stdout, re.M)
    assert len(workers) == 8 and len(set(workers)) == 1, f"the group ran on {sorted(set(workers))}"
