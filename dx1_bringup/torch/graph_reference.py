"""The PyTorch integer reference of a whole graph: every device operator in torch ops, views as slices.

Independent of the tiling compiler and of every DX-1 backend: a :class:`~dx1_bringup.runtime.graph.QMatmul`
is ``requantize(sum_i torch._int_mm(A_i, B_i) + bias)`` (:mod:`.reference`) on tensor slices; host
operators run the same numpy functions the graph runtime runs.  :func:`run_reference` returns every
value, so each device operator's result can be compared with DX-1's bit for bit.
"""

from __future__ import annotations

import numpy as np
import torch

from ..runtime.graph import Graph, HostOp, QMatmul, VectorKernel, View
from .reference import int_matmul, requantize

__all__ = ["run_reference"]


def _slice(env: dict[str, torch.Tensor], graph: Graph, view: View) -> torch.Tensor:
    rows, cols = view.shape(graph)
    return env[view.value][view.row0:view.row0 + rows, view.col0:view.col0 + cols]


def _assign(env: dict[str, torch.Tensor], graph: Graph, view: View, out: torch.Tensor) -> None:
    v = graph.values[view.value]
    if view.value not in env:
        env[view.value] = torch.zeros(v.shape, dtype=torch.int8)
    rows, cols = view.shape(graph)
    env[view.value][view.row0:view.row0 + rows, view.col0:view.col0 + cols] = out


def run_reference(graph: Graph, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Every value of ``graph`` after one pass on the PyTorch integer reference (numpy arrays by name)."""
    graph.validate()
    env: dict[str, torch.Tensor] = {name: torch.from_numpy(np.ascontiguousarray(a)) for name, a in inputs.items()}
    env.update({name: torch.from_numpy(a) for name, a in graph.consts.items()})
    for op in graph.ops:
        if isinstance(op, HostOp):
            env[op.out] = torch.from_numpy(op.fn(*(env[n].numpy() for n in op.inputs)))
            continue
        if isinstance(op, VectorKernel):
            out = torch.from_numpy(op.kernel.reference(_slice(env, graph, op.x).numpy()))
            _assign(env, graph, op.out, out)
            continue
        assert isinstance(op, QMatmul)
        acc = None
        for a, b in op.terms:
            product = int_matmul(_slice(env, graph, a), _slice(env, graph, b))
            acc = product if acc is None else acc + product  # int32 adds wrap, as the accumulators do
        out = requantize(acc, None if op.bias is None else torch.from_numpy(op.bias), op.post.mult, op.post.shift,
                         op.post.relu)
        _assign(env, graph, op.out, out)
    return {name: t.numpy() for name, t in env.items()}
