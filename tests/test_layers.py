"""The import rule: which part of the code may import which (docs/architecture.md, "Layers").

Every module of ``dx1_bringup`` and ``dx1_driver`` belongs to one part, named by the longest
prefix in :data:`PARTS`; an import (at the top of a module or inside a function) of another part
must be one that part's rule allows.  A new package needs a row here and in the docs' table.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from graphlib import CycleError, TopologicalSorter
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = {"dx1_bringup": ROOT / "dx1_bringup", "dx1_driver": ROOT / "drivers" / "dx1_driver"}

#: Part: (the modules it holds, by prefix; the other parts it may import).
PARTS: dict[str, tuple[tuple[str, ...], frozenset[str]]] = {
    "spec": (("dx1_bringup.spec",), frozenset()),
    "gen": (("dx1_bringup.gen",), frozenset({"spec"})),
    "gateware": (("dx1_bringup.gateware",), frozenset({"spec"})),
    "fpga": (("dx1_bringup.fpga",), frozenset({"spec", "gateware"})),
    "faults": (("dx1_bringup.faults",), frozenset({"spec"})),
    "perfmodel": (("dx1_bringup.perfmodel",), frozenset({"spec"})),
    "model": (("dx1_bringup.model",), frozenset({"spec", "faults", "perfmodel"})),
    "driver": (("dx1_driver",), frozenset()),
    "args": (("dx1_bringup.cli.args",), frozenset({"driver"})),
    "runtime": (("dx1_bringup.runtime",), frozenset({"spec", "model", "driver", "perfmodel"})),
    "sim": (("dx1_bringup.sim",), frozenset({"spec", "gateware", "faults", "model", "driver", "runtime", "args"})),
    "backends": (("dx1_bringup.backends",), frozenset({"spec", "faults", "model", "driver", "sim"})),
    "replay": (("dx1_bringup.replay",), frozenset({"spec", "driver", "args"})),
    "timeline": (("dx1_bringup.timeline",), frozenset({"driver", "args"})),
    "fuzz": (("dx1_bringup.fuzz",), frozenset({"spec", "model", "driver", "sim", "replay", "args"})),
    "bringup": (("dx1_bringup.bringup",), frozenset({"spec", "faults", "model", "driver", "runtime", "timeline",
                                                    "replay", "args"})),
    "generate": (("dx1_bringup.generate",), frozenset({"spec", "gen", "gateware"})),
    "operands": (("dx1_bringup.cli.operands",), frozenset({"model", "runtime"})),
    "bench": (("dx1_bringup.bench", "dx1_bringup.bench_scaling", "dx1_bringup.bench_simspeed"),
              frozenset({"spec", "gateware", "model", "driver", "runtime", "sim", "args", "operands", "serving"})),
    "cli": (("dx1_bringup.cli",), frozenset({"spec", "gateware", "fpga", "model", "driver", "runtime", "sim",
                                             "bringup", "replay", "timeline", "workloads", "fuzz", "bench",
                                             "generate", "args", "operands", "serving"})),
    "torch": (("dx1_bringup.torch",), frozenset({"spec", "model", "driver", "runtime"})),
    "workloads": (("dx1_bringup.workloads",), frozenset({"spec", "model", "driver", "runtime", "torch", "args"})),
    "serving": (("dx1_bringup.serving",), frozenset({"spec", "model", "driver", "runtime", "args"})),
    "package": (("dx1_bringup",), frozenset()),
}


def modules() -> dict[str, Path]:
    """Every module of both packages, by dotted name."""
    found = {}
    for package, root in PACKAGES.items():
        for path in sorted(root.rglob("*.py")):
            parts = [package, *path.relative_to(root).with_suffix("").parts]
            found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


MODULES = modules()


def _type_checking_only(tree: ast.Module) -> set[ast.AST]:
    """The import nodes under ``if TYPE_CHECKING:``: annotations only, never run."""
    nodes: set[ast.AST] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            for child in node.body:
                nodes.update(ast.walk(child))
    return nodes


def imported(name: str, path: Path, *, run_time: bool = False) -> Iterator[tuple[int, str]]:
    """The modules of the two packages that ``name`` (at ``path``) imports, with the line of each import.

    ``from P import X`` counts as importing ``P.X`` when that is a module, else ``P``.  With ``run_time``,
    imports under ``if TYPE_CHECKING:`` are left out (they name types for annotations and never execute).
    """
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    tree = ast.parse(path.read_text(), str(path))
    skip = _type_checking_only(tree) if run_time else set()
    for node in ast.walk(tree):
        if node in skip:
            continue
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([node.module] if node.module else []))
            targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in MODULES else base for alias in node.names]
        else:
            continue
        for target in dict.fromkeys(targets):
            if target.split(".")[0] in PACKAGES:
                yield node.lineno, target


def part_of(name: str) -> str | None:
    """The part a dotted module name belongs to (longest matching prefix), or None."""
    best = None
    for part, (prefixes, _) in PARTS.items():
        for prefix in prefixes:
            if (name == prefix or name.startswith(prefix + ".")) and (best is None or len(prefix) > len(best[1])):
                best = (part, prefix)
    return best[0] if best else None


def test_every_module_belongs_to_a_part():
    assert len(MODULES) > 40
    assert [name for name in MODULES if part_of(name) is None] == []


def test_the_rules_have_no_cycle():
    """Imports only point down: the rules form a partial order."""
    graph = {part: allowed for part, (_, allowed) in PARTS.items()}
    assert all(allowed <= graph.keys() for allowed in graph.values())
    try:
        list(TopologicalSorter(graph).static_order())
    except CycleError as e:
        pytest.fail(f"the layer rules have a cycle: {e.args[1]}")


def test_imports_follow_the_rules():
    broken = []
    for name, path in MODULES.items():
        part = part_of(name)
        allowed = PARTS[part][1]
        for line, target in imported(name, path):
            other = part_of(target)
            if other != part and other not in allowed:
                broken.append(f"{path.relative_to(ROOT)}:{line}: {part} imports {target} ({other})")
    assert broken == []


def test_driver_modules_import_without_a_cycle():
    """Each transport imports only the base; the registry imports the transports (lazily or not).

    Imports for annotations only (``if TYPE_CHECKING:``) do not count: they never run.
    """
    graph = {name: {t for _, t in imported(name, path, run_time=True) if t != "dx1_driver"}
             for name, path in MODULES.items() if name.startswith("dx1_driver.")}
    try:
        list(TopologicalSorter(graph).static_order())
    except CycleError as e:
        pytest.fail(f"the driver's modules import each other in a cycle: {e.args[1]}")
    assert {"dx1_driver.transport", "dx1_driver.errors"} >= graph["dx1_driver.pcie"] - {"dx1_driver.regs"}


def test_lazy_and_relative_imports_are_seen(tmp_path):
    """The walk finds an import inside a function and resolves relative ones."""
    path = MODULES["dx1_bringup.sim.launch"]
    assert (11, "dx1_driver") in set(imported("dx1_bringup.sim.launch", path))
    fake = tmp_path / "fake.py"
    fake.write_text("def f():\n    from ..model.device import DeviceModel\n    from . import launch\n")
    assert list(imported("dx1_bringup.sim.fake", fake)) == [(2, "dx1_bringup.model.device"),
                                                            (3, "dx1_bringup.sim.launch")]


def test_the_docs_show_these_rules():
    """docs/architecture.md's table of parts is this one."""
    text = (ROOT / "docs" / "architecture.md").read_text()
    section = text[text.index("\n## Layers"):]
    section = section[:section.index("\n## ", 1)]
    rows = re.findall(r"^\| `(\w+)` \| ([^|]+) \| ([^|]+) \|$", section, re.MULTILINE)
    documented = {part: (tuple(re.findall(r"`([\w.]+)`", mods)),
                         frozenset(re.findall(r"`(\w+)`", allowed)) if allowed.strip() != "nothing" else frozenset())
                  for part, mods, allowed in rows}
    assert documented == PARTS
