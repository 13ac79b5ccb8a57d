"""The vector unit's datapath parts, each a fixed-function component with its own unit test.

The vector unit (VECTOR, TABLE and TRANSPOSE commands; ``spec/vector.py``, ``model/vector.py``) is a sequencer
that reads local rows of the scratchpad and accumulator buffer and drives these parts:

- :class:`VectorLanes`: every elementwise vop and LUT, one step (all lanes) a cycle, ``LANES_LATENCY`` cycles
  deep, one multiplier a lane; it holds the lookup table (loaded one entry a cycle) and counts LUT outcomes.
- :class:`RowReducer`: RMAX, RSUM and RSUMSQ over the lanes' terms of an outer row's steps, the statistic on
  every lane ``REDUCE_LATENCY`` cycles after the row's last step.
- :class:`LaneDivider`: RECIP and ISQRT on every lane at once, ``DIVIDER_STEPS`` cycles from start to done.
- :class:`TransposeBuffer`: an ``array`` x ``array`` int8 block in by rows and out by columns, double-buffered.

The arithmetic parts saturate to D's lane type as the model does (int8, or int32 with ``d_acc``).
"""

from .divider import DIVIDER_STEPS, LaneDivider
from .lanes import LANES_LATENCY, VectorLanes
from .reduce import REDUCE_LATENCY, RowReducer
from .transpose import TransposeBuffer

__all__ = ["DIVIDER_STEPS", "LANES_LATENCY", "REDUCE_LATENCY", "LaneDivider", "RowReducer", "TransposeBuffer",
           "VectorLanes"]
