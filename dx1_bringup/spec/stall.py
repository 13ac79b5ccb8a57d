"""The test-only unit-stall port: which bit of the SoC's ``stall_units`` input freezes which unit.

Simulation builds of the SoC have an input ``stall_units`` with one bit per unit and tile; while a bit
is 1 that unit makes no progress (the DMA issues no new bus burst, the tile core takes no command and
hands back no completion).  The golden model's ``stall=`` fault names the same units, so tests of the
watchdog and of recovery run alike on both.  FPGA tops have no such input.
"""

from __future__ import annotations

__all__ = ["STALL_UNITS", "stall_bit", "parse_stall_unit"]

#: The units that can be stalled, in bit order within a tile.
STALL_UNITS = ("dma", "core")


def stall_bit(unit: str, tile: int) -> int:
    """The bit of ``stall_units`` that stalls ``unit`` (one of :data:`STALL_UNITS`) of ``tile``."""
    if unit not in STALL_UNITS:
        raise ValueError(f"stall unit must be one of {', '.join(STALL_UNITS)}, not {unit!r}")
    if isinstance(tile, bool) or not isinstance(tile, int) or tile < 0:
        raise ValueError(f"stall tile must be a tile index >= 0, not {tile!r}")
    return 1 << (len(STALL_UNITS) * tile + STALL_UNITS.index(unit))


def parse_stall_unit(text: str) -> tuple[str, int]:
    """``"dma0"`` -> ``("dma", 0)``: a unit name followed by its tile index."""
    for unit in STALL_UNITS:
        if text.startswith(unit) and text[len(unit):].isdigit():
            return unit, int(text[len(unit):])
    raise ValueError(f"stall unit {text!r} is not a unit name and a tile index, such as "
                     f"{', '.join(u + '0' for u in STALL_UNITS)}")
