"""The models the parallel runs split: the encoder and decoder blocks at a chosen size, and a two-layer MLP.

Each is quantised once, for one chip (its TP = 1 graph); the tensor-parallel graphs are cut from that one
(:mod:`.tensor`), so every degree runs the same integers.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..runtime.graph import Graph, HostOp, Value
from ..runtime.quant import quantize, quantize_bias, requant_multiplier, symmetric_scale
from ..spec import PostOpParams
from ..workloads.decoder import DECODER
from ..workloads.encoder import ENCODER, BlockKind, BlockSize, EncoderQuant, block_problem

__all__ = ["KINDS", "BlockProblem", "block", "stack", "mlp_problem"]

#: The blocks by name.
KINDS: dict[str, BlockKind] = {"encoder": ENCODER, "decoder": DECODER}


@dataclass
class BlockProblem:
    """A quantised block, its size and kind, and a seeded input."""

    kind: BlockKind
    size: BlockSize
    quant: EncoderQuant
    x: np.ndarray


def block(kind: str, size: BlockSize, seed: int = 1) -> BlockProblem:
    """The seeded ``kind`` block (``encoder`` or ``decoder``) at ``size``, quantised, with an input."""
    if kind not in KINDS:
        raise ValueError(f"the block must be one of {', '.join(KINDS)}, not {kind!r}")
    _, quant, x = block_problem(KINDS[kind], seed, size)
    return BlockProblem(KINDS[kind], size, quant, x)


def stack(kind: str, size: BlockSize, layers: int, seed: int = 1) -> list[BlockProblem]:
    """``layers`` blocks of ``kind`` at ``size``, layer ``i`` seeded ``seed + i`` (each its own weights and scales).

    Each maps a float ``x`` to a float ``out`` of the same shape, so the layers chain; the input to feed the
    first is layer 0's ``x``.
    """
    if isinstance(layers, bool) or not isinstance(layers, int) or layers < 1:
        raise ValueError(f"a stack needs a positive number of layers, not {layers!r}")
    return [block(kind, size, seed + i) for i in range(layers)]


def mlp_problem(rows: int, width: int, hidden: int, seed: int = 1) -> tuple[Graph, np.ndarray]:
    """``y = fc2(relu(fc1(x)))``, quantised per tensor on seeded data: its graph and an input (``rows x width``).

    The operators are ``quantize``, ``fc1``, ``fc2`` and ``dequantize`` over the values ``x``, ``xq``,
    ``hidden``, ``y`` and ``out``, as :func:`~.tensor.shard_mlp` expects.
    """
    rng = np.random.default_rng(seed)
    w1 = rng.standard_normal((hidden, width)) / np.sqrt(width)
    b1 = rng.uniform(-0.1, 0.1, hidden)
    w2 = rng.standard_normal((width, hidden)) / np.sqrt(hidden)
    b2 = rng.uniform(-0.1, 0.1, width)
    x = rng.standard_normal((rows, width)).astype(np.float32)
    h = np.maximum(x @ w1.T + b1, 0)
    y = h @ w2.T + b2
    s_x, s_h, s_y, s_w1, s_w2 = (symmetric_scale(a) for a in (x, h, y, w1, w2))
    g = Graph()
    g.add_input(Value("x", rows, width, "float32", s_x))
    g.add_value(Value("xq", rows, width, "int8", s_x))
    g.add_value(Value("hidden", rows, hidden, "int8", s_h))
    g.add_value(Value("y", rows, width, "int8", s_y))
    g.add_value(Value("out", rows, width, "float32"))
    g.add(HostOp("quantize", ("x",), "xq", lambda a: quantize(a, s_x)))
    g.linear("fc1", "xq", "hidden", quantize(w1, s_w1), quantize_bias(b1, s_x * s_w1),
             PostOpParams(*requant_multiplier(s_x * s_w1 / s_h), True))
    g.linear("fc2", "hidden", "y", quantize(w2, s_w2), quantize_bias(b2, s_h * s_w2),
             PostOpParams(*requant_multiplier(s_h * s_w2 / s_y), False))
    g.add(HostOp("dequantize", ("y",), "out", lambda a: (a.astype(np.float64) * s_y).astype(np.float32)))
    g.outputs = ["out"]
    return g, x
