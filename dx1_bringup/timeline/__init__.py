"""A Perfetto timeline of a run: host calls and transport requests, each tile's TRACE events and PERF counters.

``with record(device, "run.pftrace") as dev: run_gemm(dev, ...)`` writes the trace when the block ends
(:mod:`.record`); :mod:`.writers` writes Perfetto protobuf or Chrome JSON; :mod:`.model` is what a
timeline holds; :mod:`.link` the tracks of collectives over the chip link (a group per chip, a track per link
direction).
"""

from .link import LinkEvent, link_timeline
from .model import Slice, TimelineData, Track
from .record import COUNTERS, HOST, Timeline, record, record_link, tile_group, unit_of
from .writers import FORMATS, add_timeline_arguments, format_for, write

__all__ = ["COUNTERS", "FORMATS", "HOST", "LinkEvent", "Slice", "Timeline", "TimelineData", "Track",
           "add_timeline_arguments", "format_for", "link_timeline", "record", "record_link", "tile_group", "unit_of",
           "write"]
