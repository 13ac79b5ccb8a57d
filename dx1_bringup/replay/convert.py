"""Older reproducers as captures: the two-tile stream of the RTL deadlock (``two-tile-hang.json``).

That file holds, per tile, a region of device memory (``region_base``, ``region_bytes``), filled with
``numpy.random.default_rng(7 + tile).integers(0, 256, region_bytes, dtype=numpy.uint8)``, and two
batches of hex commands.  Its script sets each queue's DMA window to its region, uploads the regions,
then per batch submits every tile's commands (one doorbell each) before waiting on every tile.
:func:`two_tile_events` turns that into capture events (adding, after the last batch, a download of
each region, so a replay checks the bytes too); :func:`convert_two_tile` runs them on a reference
device to record the completions and bytes seen.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from dx1_driver import Device

from .capture import Capture, DmaWindow, Doorbell, Download, Event, Submit, Upload, Wait
from .replay import record

__all__ = ["two_tile_events", "convert_two_tile"]

#: The ring size the two-tile script ran with (the driver's default).
TWO_TILE_RING_LOG2 = 6


def two_tile_events(path: str | Path) -> list[Event]:
    """The events of a ``two-tile-hang.json`` stream, in the order its script runs them.

    Raises
    ------
    ValueError
        The file does not hold tiles with regions and batches as described in the module docstring.
    """
    data = json.loads(Path(path).read_text())
    try:
        tiles = data["tiles"]
        batches = {len(t["batches"]) for t in tiles}
        if len(batches) != 1:
            raise ValueError(f"every tile must have as many batches, not {sorted(batches)}")
        events: list[Event] = []
        for t in tiles:
            base, size = t["region_base"], t["region_bytes"]
            events.append(DmaWindow(t["tile"], base, base + size))
            init = np.random.default_rng(7 + t["tile"]).integers(0, 256, size, dtype=np.uint8)
            events.append(Upload(base, init.tobytes()))
        for b in range(batches.pop()):
            for t in tiles:
                events.append(Submit(t["tile"], tuple(bytes.fromhex(c) for c in t["batches"][b])))
                events.append(Doorbell(t["tile"]))
            events.extend(Wait(t["tile"], None) for t in tiles)
        events.extend(Download(t["region_base"], t["region_bytes"], None) for t in tiles)
    except (KeyError, TypeError) as e:
        raise ValueError(f"{path}: not a two-tile stream (expected tiles with tile, region_base, region_bytes "
                         f"and batches; missing {e})") from None
    return events


def convert_two_tile(path: str | Path, device: Device) -> Capture:
    """The stream of ``path`` as a capture of what ``device`` (open and reset; the golden model) saw."""
    return record(two_tile_events(path), device, TWO_TILE_RING_LOG2,
                  note=f"converted from {Path(path).name} (two tiles, two batches)")
