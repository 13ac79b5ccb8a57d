"""The import rule: which part of the code may import which (docs/architecture.md, "Layers").

Every module of ``dx1_bringup`` and ``dx1_driver`` belongs to one part, named by the longest
prefix in :data:`PARTS`; an import (at the top of a module, inside a function, or under
``if TYPE_CHECKING:``) of another part must be one that part's rule allows.  A new package needs a
row here and in the docs' table.  ``python tests/test_layers.py`` prints the table.

Also checked here: no module imports another in a cycle (``TYPE_CHECKING`` imports count: a cycle
hidden from the interpreter is still one for the reader), the contract's value types are defined in
the spec and imported from it, and nothing but the ``dx1`` entry point imports the command line.
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
#: Code outside the packages whose imports of them are checked too (the contract and cli rules).
OTHER_CODE = ("tests", "testbenches", "fpga")

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
    "argtypes": (("dx1_bringup.argtypes",), frozenset({"driver"})),
    "runtime": (("dx1_bringup.runtime",), frozenset({"spec", "model", "driver", "perfmodel"})),
    "sim": (("dx1_bringup.sim",), frozenset({"spec", "gateware", "faults", "perfmodel", "model", "driver", "runtime",
                                             "argtypes"})),
    "backends": (("dx1_bringup.backends",), frozenset({"spec", "faults", "model", "driver", "sim"})),
    "replay": (("dx1_bringup.replay",), frozenset({"spec", "driver", "argtypes"})),
    "timeline": (("dx1_bringup.timeline",), frozenset({"driver", "argtypes"})),
    "fuzz": (("dx1_bringup.fuzz",), frozenset({"spec", "model", "driver", "sim", "replay", "argtypes"})),
    "bringup": (("dx1_bringup.bringup",), frozenset({"spec", "faults", "model", "driver", "runtime", "timeline",
                                                    "replay", "argtypes"})),
    "generate": (("dx1_bringup.generate",), frozenset({"spec", "gen", "gateware"})),
    "collectives": (("dx1_bringup.collectives",), frozenset({"spec", "perfmodel", "model", "driver", "runtime",
                                                             "timeline", "replay", "argtypes"})),
    "parallel": (("dx1_bringup.parallel",), frozenset({"spec", "perfmodel", "model", "driver", "runtime", "argtypes",
                                                       "collectives", "torch", "workloads", "timeline"})),
    "bench": (("dx1_bringup.bench", "dx1_bringup.bench_collectives", "dx1_bringup.bench_scaling",
               "dx1_bringup.bench_simspeed", "dx1_bringup.bench_vector", "dx1_bringup.bench_parallel",
               "dx1_bringup.bench_link", "dx1_bringup.bench_boardspeed"),
              frozenset({"spec", "gateware", "perfmodel", "model", "driver", "runtime", "sim", "argtypes", "serving",
                         "workloads", "collectives", "parallel"})),
    "cli": (("dx1_bringup.cli",), frozenset({"spec", "gateware", "fpga", "model", "driver", "runtime", "sim",
                                             "bringup", "replay", "timeline", "workloads", "fuzz", "bench",
                                             "generate", "argtypes", "serving", "collectives", "parallel"})),
    "torch": (("dx1_bringup.torch",), frozenset({"spec", "model", "driver", "runtime"})),
    "workloads": (("dx1_bringup.workloads",), frozenset({"spec", "model", "driver", "runtime", "torch", "argtypes"})),
    "serving": (("dx1_bringup.serving",), frozenset({"spec", "model", "driver", "runtime", "argtypes"})),
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
PACKAGE_NAMES = frozenset(name for name, path in MODULES.items() if path.name == "__init__.py")


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


def _module_graph(prefix: str, *, run_time: bool = False) -> dict[str, set[str]]:
    """Module -> the modules of the packages it imports, for the modules under ``prefix``.

    A package's own ``__init__`` re-exporting its modules is not an edge back from them: ``from . import
    x`` in a module names ``x``, and the package is left out of the targets.
    """
    return {name: {t for _, t in imported(name, path, run_time=run_time) if t not in PACKAGE_NAMES}
            for name, path in MODULES.items() if name == prefix or name.startswith(prefix + ".")}


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    try:
        list(TopologicalSorter(graph).static_order())
    except CycleError as e:
        return e.args[1]
    return None


def test_driver_modules_import_without_a_cycle():
    """Each transport imports only the base; the registry the transports; the device sits on top of the rest.

    Imports for annotations only (``if TYPE_CHECKING:``) count: a cycle through one is still a cycle.
    """
    graph = _module_graph("dx1_driver")
    assert _cycle(graph) is None, f"the driver's modules import each other in a cycle: {_cycle(graph)}"
    assert {"dx1_driver.transport", "dx1_driver.errors"} >= graph["dx1_driver.pcie"] - {"dx1_driver.regs"}
    assert graph["dx1_driver.sim_transport"] - {"dx1_driver.regs", "dx1_driver.link"} == {
        "dx1_driver.transport", "dx1_driver.errors"}
    users_of_device = [name for name, targets in graph.items()
                       if "dx1_driver.device" in targets and name != "dx1_driver"]
    assert users_of_device == [], "only the package imports the device module"


def test_framework_modules_import_without_a_cycle():
    """The same for every module of the framework, ``TYPE_CHECKING`` imports included."""
    graph = _module_graph("dx1_bringup")
    assert _cycle(graph) is None, f"modules import each other in a cycle: {_cycle(graph)}"


def test_a_cycle_through_type_checking_is_found(tmp_path):
    """The walk sees an import under ``if TYPE_CHECKING:`` and the cycle check counts it."""
    back = tmp_path / "back.py"
    back.write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .device import Device\n")
    edges = {t for _, t in imported("dx1_driver.back", back)}
    assert edges == {"dx1_driver.device"}
    assert {t for _, t in imported("dx1_driver.back", back, run_time=True)} == set()
    graph = _module_graph("dx1_driver") | {"dx1_driver.back": edges}
    graph["dx1_driver.device"] = graph["dx1_driver.device"] | {"dx1_driver.back"}
    assert _cycle(graph) is not None


def _code_files() -> Iterator[tuple[str, Path]]:
    """Every module of the packages, and every Python file of :data:`OTHER_CODE`, by dotted name."""
    yield from MODULES.items()
    for folder in OTHER_CODE:
        for path in sorted((ROOT / folder).rglob("*.py")):
            yield ".".join(path.relative_to(ROOT).with_suffix("").parts), path


#: The spec's classes: the contract's types (commands, registers, configurations, the post-op's parameters).
CONTRACT_TYPES = frozenset(
    node.name for name, path in MODULES.items() if part_of(name) == "spec"
    for node in ast.parse(path.read_text()).body if isinstance(node, ast.ClassDef) and not node.name.startswith("_"))


def test_contract_types_are_defined_in_the_spec_and_imported_from_it():
    """A value type that crosses layers (``PostOpParams``, ``TileConfig``, ...) has one home: the spec.

    No other module of the framework defines a class of the same name, and every import of one names a
    spec module (or the driver's ``regs``, generated from the spec, for the driver's copies of the enums).
    """
    assert {"PostOpParams", "TileConfig", "SocConfig", "Opcode", "Field"} <= CONTRACT_TYPES
    broken = []
    for name, path in _code_files():
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef) and node.name in CONTRACT_TYPES and name.startswith("dx1_bringup.") \
                    and part_of(name) != "spec":
                broken.append(f"{path.relative_to(ROOT)}:{node.lineno}: defines {node.name}, a type of the spec")
        for line, target, names in _imported_names(name, path):
            if names & CONTRACT_TYPES and part_of(target) not in ("spec", "driver", None):
                broken.append(f"{path.relative_to(ROOT)}:{line}: imports {', '.join(sorted(names & CONTRACT_TYPES))} "
                              f"from {target}, not from the spec")
    assert broken == []


def _imported_names(name: str, path: Path) -> Iterator[tuple[int, str, set[str]]]:
    """``(line, module, names)`` of each ``from module import names`` of the packages in ``path``."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([node.module] if node.module else []))
            if base.split(".")[0] in PACKAGES:
                yield node.lineno, base, {alias.name for alias in node.names}


#: What code outside the packages may take from the command line: its entry point and its parser (to test them).
CLI_ENTRY = frozenset({"main", "build_parser"})


def test_nothing_but_the_entry_point_imports_the_command_line():
    """No module of the packages imports the ``cli`` part; tests take only its entry point from it.

    Helpers the commands share (``gemm_problem``, argument types) live below it, where everyone can reach them.
    """
    broken = []
    for name, path in _code_files():
        inside = name in MODULES
        if inside and part_of(name) == "cli":
            continue
        for line, target in imported(name, path) if inside else []:
            if part_of(target) == "cli":
                broken.append(f"{path.relative_to(ROOT)}:{line}: imports {target}")
        for line, target, names in [] if inside else _imported_names(name, path):
            if part_of(target) == "cli" and (target != "dx1_bringup.cli" or names - CLI_ENTRY):
                broken.append(f"{path.relative_to(ROOT)}:{line}: imports {', '.join(sorted(names))} from {target}")
    assert broken == []


def test_rounding_up_is_written_once():
    """``align_up``/``ceil_div`` (spec/sizes.py; the driver's own in allocator.py) are the only ``-(-a // b)``."""
    homes = {ROOT / "dx1_bringup" / "spec" / "sizes.py", ROOT / "drivers" / "dx1_driver" / "allocator.py"}
    written = [f"{path.relative_to(ROOT)}:{i}" for name, path in MODULES.items() if path not in homes
               and part_of(name) != "gateware"
               for i, line in enumerate(path.read_text().splitlines(), 1) if "-(-" in line or "+ align - 1" in line]
    assert written == []


def test_lazy_and_relative_imports_are_seen(tmp_path):
    """The walk finds an import inside a function and resolves relative ones."""
    path = MODULES["dx1_bringup.sim.launch"]
    assert {(16, "dx1_driver"), (17, "dx1_driver.sim_transport")} <= set(imported("dx1_bringup.sim.launch", path))
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


def layer_table() -> str:
    """The table of parts as docs/architecture.md shows it (``python tests/test_layers.py`` prints it)."""
    rows = ["| part | modules | may import |", "| --- | --- | --- |"]
    for part, (prefixes, allowed) in PARTS.items():
        mods = ", ".join(f"`{p}`" for p in prefixes)
        rule = ", ".join(f"`{a}`" for a in sorted(allowed, key=list(PARTS).index)) if allowed else "nothing"
        rows.append(f"| `{part}` | {mods} | {rule} |")
    return "\n".join(rows)


if __name__ == "__main__":
    print(layer_table())
