"""The graph runtime: a small IR of quantised operators, memory planning, and whole-stream execution."""

from .ir import Graph, HostOp, QMatmul, Value, VectorKernel, View
from .memory import ArenaPlan, Lifetime, plan_arena
from .session import GraphSession, RunStats, Segment

__all__ = ["Graph", "HostOp", "QMatmul", "Value", "VectorKernel", "View", "ArenaPlan", "Lifetime", "plan_arena",
           "GraphSession", "RunStats", "Segment"]
