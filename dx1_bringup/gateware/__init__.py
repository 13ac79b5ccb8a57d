"""dx1-mini gateware in Amaranth, and the list of modules `make rtl` generates from it."""

from __future__ import annotations

import importlib
import re
from dataclasses import dataclass
from pathlib import Path

from amaranth.back import verilog

from ..spec import SocConfig, TileConfig
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
        return compact_zero_init(verilog.convert(self.build(), name=self.name, emit_src=False))


_ZERO_INIT = re.compile(
    r"^(?P<indent>[ \t]+)(?P<mem>\\?\S+?) ?\[0\] = (?P<width>\d+)'h0+;\n"
    r"(?:(?P=indent)(?P=mem) ?\[\d+\] = (?P=width)'h0+;\n)*", re.MULTILINE)


def compact_zero_init(text: str) -> str:
    """Replace Amaranth's one-line-per-word zero initialisation of a memory by a loop.

    A 1 MiB device memory is 131072 such lines, which Verilator turns into one
    enormous C++ function.  The loop sets the same words to the same zeros.
    """
    def loop(match: re.Match) -> str:
        count = match.group(0).count("\n")
        indices = [int(i) for i in re.findall(r"\[(\d+)\] =", match.group(0))]
        if indices != list(range(count)) or count < 16:
            return match.group(0)
        mem = match.group("mem")
        gap = " " if mem.startswith("\\") else ""
        return (f"{match.group('indent')}for (int i = 0; i < {count}; i = i + 1) "
                f"{mem}{gap}[i] = {match.group('width')}'h0;\n")
    return _ZERO_INIT.sub(loop, text)


SMALL_TILE = TileConfig(array=4, spm_rows=1024, acc_rows=256)

RTL_MODULES = (
    RtlModule("dx1_systolic_a8", "8x8 systolic array", "systolic:SystolicArray", (8,), (("ctl_width", 8),)),
    RtlModule("dx1_systolic_a4", "4x4 systolic array", "systolic:SystolicArray", (4,), (("ctl_width", 8),)),
    RtlModule("dx1_tile_core_a8", "tile compute core, default sizes", "tile:TileCore", (TileConfig(),)),
    RtlModule("dx1_tile_core_a4", "tile compute core, 4x4 array", "tile:TileCore", (SMALL_TILE,)),
    RtlModule("dx1_dma_tile", "DMA with a tile core, for DMA tests", "dma:DmaTile", (TileConfig(),)),
    RtlModule("dx1_regfile", "register file of the default SoC", "regfile:RegisterFile", (SocConfig(),)),
    RtlModule("dx1_axi_memory", "device memory, 64 KiB, 3 AXI4 ports", "memory:AxiMemory", (),
              (("size", 65536), ("ports", 3))),
    RtlModule("dx1_axi_memory_b4", "device memory, 64 KiB in 4 banks, 3 AXI4 ports", "memory:AxiMemory", (),
              (("size", 65536), ("ports", 3), ("banks", 4))),
    RtlModule("dx1_soc", "the whole SoC, default configuration, with the test-only stall port", "soc:Dx1Soc",
              (SocConfig(),), (("stall_port", True),)),
    RtlModule("dx1_board", "the simulated board: SoC + UART bridge, 50 MHz, 6.25 Mbaud", "board:Dx1Board",
              (SocConfig(),), (("clk_freq", 50_000_000), ("baud", 6_250_000))),
    RtlModule("dx1_uart_bridge", "UART bridge with its AXI masters, for bridge tests", "bridge:UartBridge", (),
              (("clk_freq", 50_000_000), ("baud", 3_000_000))),
)


def rtl_module(name: str) -> RtlModule:
    for mod in RTL_MODULES:
        if mod.name == name:
            return mod
    raise KeyError(f"no generated RTL module {name!r}; there are {[m.name for m in RTL_MODULES]}")
