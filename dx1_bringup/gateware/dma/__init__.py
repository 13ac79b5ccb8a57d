"""The per-tile DMA engine (:class:`Dma`) and its parts, one module each; :class:`DmaTile` is its test top."""

from __future__ import annotations

from .core import Dma
from .dma_tile import DmaTile
from .params import BEAT_BYTES, COPY_BURST, DATA_DEPTH, MAX_READS, WLEN_DEPTH

__all__ = ["Dma", "DmaTile", "BEAT_BYTES", "COPY_BURST", "DATA_DEPTH", "MAX_READS", "WLEN_DEPTH"]
