"""A Perfetto timeline of a run: host calls and transport requests, each tile's TRACE events and PERF counters.

``with record(device, "run.pftrace") as dev: run_gemm(dev, ...)`` writes the trace when the block ends
(:mod:`.record`); :mod:`.writers` writes Perfetto protobuf or Chrome JSON; :mod:`.model` is what a
timeline holds.
"""

from .model import Slice, TimelineData, Track
from .record import COUNTERS, HOST, Timeline, TimelineDevice, record, record_link, tile_group, unit_of
from .writers import FORMATS, add_timeline_arguments, format_for, write

__all__ = ["COUNTERS", "FORMATS", "HOST", "Slice", "Timeline", "TimelineData", "TimelineDevice", "Track",
           "add_timeline_arguments", "format_for", "record", "record_link", "tile_group", "unit_of", "write"]
