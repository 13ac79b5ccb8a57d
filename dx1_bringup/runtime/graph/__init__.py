"""The graph runtime: a small IR of quantised operators, memory planning, and whole-stream execution."""

from .ir import COLLECTIVE_KINDS, Collective, Graph, HostOp, QMatmul, Requantize, Value, VectorKernel, View
from .memory import ArenaPlan, Lifetime, plan_arena
from .session import CollectiveRunner, GraphSession, RunStats, Segment

__all__ = ["COLLECTIVE_KINDS", "Collective", "CollectiveRunner", "Graph", "HostOp", "QMatmul", "Requantize", "Value",
           "VectorKernel", "View", "ArenaPlan", "Lifetime", "plan_arena", "GraphSession", "RunStats", "Segment"]
