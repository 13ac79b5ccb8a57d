"""The docs cannot drift from the tree: every repository path and module they name exists.

The README, fpga/README.md and docs/*.md name files in backticks (``dx1_bringup/argtypes.py``,
``gateware/command.py``), in links (``[fpga/README.md](fpga/README.md)``) and as dotted modules
(``dx1_bringup.perfmodel``, ``dx1_driver.perf``).  A path with a folder in it must be the end of a file's or
folder's path in the repository (``gateware/command.py`` is ``dx1_bringup/gateware/command.py``); a bare
``name.py`` must be some module's file name; a dotted name must import, down to its last attribute.
What a command writes (``build/...``), placeholders (``<board>``, ``*``) and device strings are not paths.
"""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest
from dx1_driver.registry import ENTRY_POINT_GROUP

ROOT = Path(__file__).resolve().parents[1]
DOCS = sorted([ROOT / "README.md", ROOT / "fpga" / "README.md", *(ROOT / "docs").glob("*.md")])
#: Folders that are not the repository's own files: outputs, environments, caches.
SKIP = {".git", ".venv", "build", "__pycache__", ".pytest_cache", ".ruff_cache", ".hypothesis"}
#: A path's last part has one of these suffixes, or the path ends with a slash (a folder).
SUFFIXES = (".py", ".md", ".v", ".vlt", ".h", ".json", ".png", ".toml", ".yml", ".yaml", ".txt")
_SPAN = re.compile(r"`([^`\n]+)`|\]\(([^)\s]+)\)")
_WORD = re.compile(r"[\w.\-/]+")
_MODULE = re.compile(r"dx1_(?:bringup|driver)(?:\.\w+)*")


def _tree() -> set[str]:
    """Every file and folder of the repository, as paths relative to its root with ``/``."""
    found = set()
    for path in ROOT.rglob("*"):
        rel = path.relative_to(ROOT)
        if SKIP.isdisjoint(rel.parts) and not rel.parts[0].endswith(".egg-info"):
            found.add(rel.as_posix())
    return found


TREE = _tree()
NAMES = {p.rsplit("/", 1)[-1] for p in TREE}


def named(text: str) -> tuple[set[str], set[str]]:
    """The repository paths and the dotted module names that ``text`` (Markdown) names."""
    paths, modules = set(), set()
    for code, link in _SPAN.findall(text):
        if link:
            if "://" not in link and not link.startswith("#"):
                paths.add(link.split("#")[0])
            continue
        for word in code.split():
            word = word.strip(",;()")
            if _MODULE.fullmatch(word):
                modules.add(word)
            elif (_WORD.fullmatch(word) and not word.startswith(("build/", ".venv/", "/", "-"))
                  and (word.endswith("/") or word.endswith(SUFFIXES)) and ("/" in word or word.endswith(".py"))):
                paths.add(word)
    return paths, modules


def exists(path: str) -> bool:
    """Whether ``path`` is a file or folder of the repository, or the end of one's path."""
    path = path.rstrip("/")
    if "/" not in path:
        return path in NAMES
    return path in TREE or any(p.endswith("/" + path) for p in TREE)


def imports(name: str) -> bool:
    """Whether the dotted ``name`` is a module, or an attribute reached from the longest module prefix."""
    parts = name.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        try:
            for attr in parts[cut:]:
                obj = getattr(obj, attr)
        except AttributeError:
            return False
        return True
    return False


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_path_a_doc_names_exists(doc: Path) -> None:
    paths, modules = named(doc.read_text())
    assert sorted(p for p in paths if not exists(p)) == []
    # The driver's entry-point group of backends is spelt like a module; it is the one such name.
    assert sorted(m for m in modules - {ENTRY_POINT_GROUP} if not imports(m)) == []


def test_the_check_finds_what_is_gone() -> None:
    """A stale file name, path or module is found; outputs, placeholders and device strings are left alone."""
    assert len(named((ROOT / "docs" / "architecture.md").read_text())[0]) > 100
    text = ("`serial_link.py`, `dx1_bringup/perf/costs.py`, `gateware/memory.py`, [x](fpga/README.md), "
            "`dx1_bringup.perf`, `dx1_bringup.perfmodel.COSTS`, `dx1_driver.Nothing`, `build/sim/summary.md`, "
            "`rtl/*.v`, `sim:verilog=PATH`, `dx1 gemm M K N --timeline t.pftrace`, `build/fpga/<board>/`")
    paths, modules = named(text)
    assert paths == {"serial_link.py", "dx1_bringup/perf/costs.py", "gateware/memory.py", "fpga/README.md"}
    assert [p for p in sorted(paths) if not exists(p)] == ["dx1_bringup/perf/costs.py", "serial_link.py"]
    assert modules == {"dx1_bringup.perf", "dx1_bringup.perfmodel.COSTS", "dx1_driver.Nothing"}
    assert [m for m in sorted(modules) if not imports(m)] == ["dx1_bringup.perf", "dx1_driver.Nothing"]
