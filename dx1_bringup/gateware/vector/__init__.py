"""The vector unit's datapath parts: the lanes (elementwise vops and the lookup table)."""

from .lanes import LANES_LATENCY, VectorLanes

__all__ = ["LANES_LATENCY", "VectorLanes"]
