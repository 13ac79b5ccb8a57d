"""Units that make no progress: the stall fault, the same on the golden model and the simulated SoC.

The units and their bits are the spec's (:mod:`dx1_bringup.spec.stall`).  In a
fault string ``stall=dma0`` stalls tile 0's DMA; several units are joined with
``+``: ``stall=dma0+core1``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from ..spec import STALL_UNITS, parse_stall_unit
from .base import FaultKey, parse_faults

__all__ = ["UnitStalls"]


def _units(text: str) -> frozenset[tuple[str, int]]:
    return frozenset(parse_stall_unit(item) for item in text.split("+"))


@dataclass(frozen=True)
class UnitStalls:
    """Units that make no progress (see ``dx1_bringup.model.device``, "Watchdog and per-tile reset").

    Parameters
    ----------
    units:
        ``(unit, tile)`` pairs, ``unit`` one of ``STALL_UNITS`` (``"dma"``, ``"core"``).
    """

    units: frozenset[tuple[str, int]] = frozenset()

    #: Kind name in fault-string messages.
    NAME: ClassVar[str] = "stall"
    #: Fault-string keys (see :func:`~dx1_bringup.faults.parse_faults`).
    KEYS: ClassVar[dict[str, FaultKey]] = {"stall": FaultKey(("units",), _units, "UNIT[+UNIT...]")}

    def __post_init__(self) -> None:
        for item in self.units:
            if not (isinstance(item, tuple) and len(item) == 2 and item[0] in STALL_UNITS
                    and isinstance(item[1], int) and not isinstance(item[1], bool) and item[1] >= 0):
                raise ValueError(f"a stalled unit must be (unit, tile) with unit one of {', '.join(STALL_UNITS)} "
                                 f"and tile >= 0, not {item!r}")

    @classmethod
    def parse(cls, text: str) -> UnitStalls:
        """Stalls from a fault string such as ``"stall=dma0"`` or ``"stall=dma0+core1"``.

        Raises
        ------
        ValueError
            Not ``stall=`` with unit names each followed by a tile index.
        """
        return parse_faults(text, (cls,))[cls]

    def __str__(self) -> str:
        return "stall=" + "+".join(f"{unit}{tile}" for unit, tile in sorted(self.units))
