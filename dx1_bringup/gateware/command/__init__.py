"""The command processor of one dx1-mini queue (:class:`CommandProcessor`) and its parts, one module each."""

from __future__ import annotations

from .decode import DECODE_STAGES
from .hazards import DMA_SLOTS, TILE_SLOTS
from .processor import CommandProcessor

__all__ = ["CommandProcessor", "DECODE_STAGES", "DMA_SLOTS", "TILE_SLOTS"]
