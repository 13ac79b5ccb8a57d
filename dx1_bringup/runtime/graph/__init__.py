"""The graph runtime: a small IR of quantised operators, memory planning, and whole-stream execution."""

from .ir import AllReduce, Graph, HostOp, QMatmul, Requantize, Value, VectorKernel, View
from .memory import ArenaPlan, Lifetime, plan_arena
from .session import Collective, GraphSession, RunStats, Segment

__all__ = ["AllReduce", "Collective", "Graph", "HostOp", "QMatmul", "Requantize", "Value", "VectorKernel", "View",
           "ArenaPlan", "Lifetime", "plan_arena", "GraphSession", "RunStats", "Segment"]
