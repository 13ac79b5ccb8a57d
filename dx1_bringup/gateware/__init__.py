"""dx1-mini gateware in Amaranth, and the list of modules `make rtl` generates from it."""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from pathlib import Path

from amaranth.back import verilog

from ..spec import TileConfig
from .postop import PostOp
from .systolic import SystolicArray
from .tile import TileCore

__all__ = ["SystolicArray", "PostOp", "TileCore", "RtlModule", "RTL_MODULES", "RTL_DIR", "rtl_module"]

RTL_DIR = Path(__file__).resolve().parents[2] / "rtl"


@dataclass(frozen=True)
class RtlModule:
    """A generated Verilog module: its top-level name and how to build its Amaranth source.

    ``component`` is ``"module:Class"`` inside this package, imported only when the module is
    built, so that one component's source being edited never stops the others from building.
    """

    name: str
    doc: str
    component: str
    args: tuple = ()
    kwargs: tuple[tuple[str, object], ...] = ()

    def build(self):
        module, cls = self.component.split(":")
        return getattr(importlib.import_module(f"{__name__}.{module}"), cls)(*self.args, **dict(self.kwargs))

    @property
    def path(self) -> Path:
        return RTL_DIR / f"{self.name}.v"

    def verilog(self) -> str:
        return verilog.convert(self.build(), name=self.name, emit_src=False)


SMALL_TILE = TileConfig(array=4, spm_rows=1024, acc_rows=256)

RTL_MODULES = (
    RtlModule("dx1_systolic_a8", "8x8 systolic array", "systolic:SystolicArray", (8,), (("ctl_width", 8),)),
    RtlModule("dx1_systolic_a4", "4x4 systolic array", "systolic:SystolicArray", (4,), (("ctl_width", 8),)),
    RtlModule("dx1_tile_core_a8", "tile compute core, default sizes", "tile:TileCore", (TileConfig(),)),
    RtlModule("dx1_tile_core_a4", "tile compute core, 4x4 array", "tile:TileCore", (SMALL_TILE,)),
)


def rtl_module(name: str) -> RtlModule:
    for mod in RTL_MODULES:
        if mod.name == name:
            return mod
    raise KeyError(f"no generated RTL module {name!r}; there are {[m.name for m in RTL_MODULES]}")
