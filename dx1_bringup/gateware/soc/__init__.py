"""The dx1-mini SoC (:class:`Dx1Soc`) and its SoC-level parts: PERF counters, trace FIFO writer, semaphores."""

from __future__ import annotations

from .top import Dx1Soc

__all__ = ["Dx1Soc"]
