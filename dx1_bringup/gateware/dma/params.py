"""The DMA's burst and buffer sizes."""

from __future__ import annotations

from ...spec import BUS_BYTES

__all__ = ["BEAT_BYTES", "MAX_READS", "DATA_DEPTH", "COPY_BURST", "WLEN_DEPTH"]

BEAT_BYTES = BUS_BYTES  # one AXI data beat
MAX_READS = 4           # read bursts in flight
DATA_DEPTH = 32         # beats between the read side and the write side
#: Longest write burst of a COPY.  Its address goes out only once all its beats are in the data FIFO;
#: half the FIFO, so the next burst's data arrives while this one is written.
COPY_BURST = DATA_DEPTH // 2
WLEN_DEPTH = 4          # write bursts whose address is out and whose data is not finished
