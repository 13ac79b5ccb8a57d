"""Planted RTL bugs: the generated SoC Verilog with one small, documented textual change.

A mutant is written to its own folder under ``build/`` and served with ``sim:verilog=PATH`` (or
``dx1 sim serve --verilog PATH``), which builds it in a folder beside it; the generated ``rtl/`` and its
build stay as they are.  The mutants exist to show that the debugging tools (``dx1 diff``, the
shrinker) find a bug nobody told them about.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..gateware import rtl_module
from . import BUILD_ROOT

__all__ = ["MUTANT_ROOT", "Mutant", "MUTANTS", "write_mutant"]

#: Where mutants are written by default (``build/mutants/<name>/``, each built in a folder beside it).
MUTANT_ROOT = BUILD_ROOT.parent / "mutants"


@dataclass(frozen=True)
class Mutant:
    """One textual change of ``rtl/dx1_soc.v``: ``old`` becomes ``new`` inside Verilog module ``module``.

    Attributes
    ----------
    name:
        Its name, also the folder it is written to.
    description:
        What the change does to the hardware, in a sentence.
    module:
        The Verilog module (as Amaranth names it) holding the change; ``old`` must occur exactly once in it.
    old, new:
        The text replaced and its replacement.
    """

    name: str
    description: str
    module: str
    old: str
    new: str


MUTANTS = {m.name: m for m in (
    Mutant("postop-round",
           "tile 1's requantiser adds half of its rounding constant in lane 3: with a shift, values whose "
           "remainder is a half to three quarters of 2**shift round down instead of up",
           r"\dx1_soc.core1.postops.postop",
           "assign \\$31  = $signed(p3) + $signed({ 1'h0, half });",
           "assign \\$31  = $signed(p3) + $signed({ 1'h0, half >> 1 });"),
)}


def write_mutant(name: str, root: str | Path = MUTANT_ROOT) -> Path:
    """Write mutant ``name`` of the generated SoC to ``root/name/dx1_soc.v`` and return that path.

    Raises
    ------
    KeyError
        No mutant has this name.
    ValueError
        The generated Verilog does not hold the module, or holds the text to change not exactly once
        there (the generator changed: the mutant needs updating).
    """
    if name not in MUTANTS:
        raise KeyError(f"no mutant {name!r}; expected one of {sorted(MUTANTS)}")
    mutant = MUTANTS[name]
    text = rtl_module("dx1_soc").path.read_text()
    start = text.find(f"module {mutant.module} ")
    end = text.find("\nendmodule", start)
    if start < 0 or end < 0:
        raise ValueError(f"mutant {name}: module {mutant.module} is not in the generated dx1_soc.v")
    body = text[start:end]
    if body.count(mutant.old) != 1:
        raise ValueError(f"mutant {name}: {mutant.old!r} occurs {body.count(mutant.old)} times in module "
                         f"{mutant.module}, expected exactly once")
    path = Path(root) / name / "dx1_soc.v"
    path.parent.mkdir(parents=True, exist_ok=True)
    mutated = text[:start] + body.replace(mutant.old, mutant.new) + text[end:]
    if not path.exists() or path.read_text() != mutated:   # unchanged text keeps Verilator's build
        path.write_text(mutated)
    return path
