"""Tensor parallelism, Megatron-LM style: column- and row-parallel quantised linears, and a block split over chips.

A column-parallel linear (:func:`column_parallel`) gives each of ``tp`` ranks a block of the weights' output
columns (and of the bias): its part of the output, no communication.  A row-parallel linear
(:func:`row_parallel`) gives each rank a block of the weights' input rows, so each rank's product is a partial
sum of the whole one; the ranks keep it as int32 accumulators (a GEMM without its POSTOP), all-reduce them, and
only then requantise (bias, ReLU, rounding and saturation: the POSTOP, :class:`~..runtime.graph.Requantize`).
int32 addition modulo 2**32 is associative, so the summed accumulators are the whole product's, and the result
equals one chip's bit for bit.  A residual term of the row-parallel GEMM (``x (c I)``) is split the same way:
each rank adds its block of ``x``'s columns times its block of the identity's rows, so the ranks share it evenly.

:func:`shard_block` splits the encoder and decoder blocks (:mod:`dx1_bringup.workloads.encoder`) this way:
per rank ``heads / tp`` attention heads (their columns of the Q and V projections, their rows of ``W_k``,
their scores, softmax and ``P V``), the output projection row-parallel, the MLP's first layer
column-parallel and its second row-parallel: two all-reduces a block, as in Megatron-LM.  The layer norms,
the transpose and the (de)quantisation run on every rank (replicated, as Megatron-LM does), or, sequence-parallel
(Korthikanti et al., "Reducing Activation Recomputation in Large Transformer Models", 2022), the layer norms and the
row-parallel layers' POSTOPs each on the rank's block of the sequence, with reduce-scatters and all-gathers.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from ..runtime.graph import Collective, Graph, HostOp, QMatmul, Requantize, Value, VectorKernel, View
from ..runtime.kernels import Softmax
from ..workloads.encoder import BlockSize, EncoderQuant

__all__ = ["check_degree", "column_parallel", "row_parallel", "shard_block", "shard_mlp", "split"]


def check_degree(tp: int, what: str, parts: int, name: str) -> None:
    """Refuse a tensor-parallel degree that does not divide ``parts`` (``name`` of ``what``) into whole blocks."""
    if isinstance(tp, bool) or not isinstance(tp, int) or tp < 1:
        raise ValueError(f"the tensor-parallel degree must be a positive integer, not {tp!r}")
    if parts % tp:
        raise ValueError(f"tensor parallelism {tp} must divide {what}'s {parts} {name}")


def split(total: int, tp: int, rank: int) -> tuple[int, int]:
    """``(first, count)`` of rank ``rank``'s equal block of ``total``."""
    width = total // tp
    return rank * width, width


def _copy_value(dst: Graph, src: Graph, name: str, rows: int | None = None, cols: int | None = None,
                dtype: str | None = None) -> None:
    v = src.values[name]
    dst.add_value(Value(name, v.rows if rows is None else rows, v.cols if cols is None else cols,
                        v.dtype if dtype is None else dtype, v.scale))


def column_parallel(g: Graph, name: str, x: View, out: View, weight_t: np.ndarray, bias: np.ndarray | None,
                    op: QMatmul, tp: int, rank: int) -> None:
    """Rank ``rank``'s block of output columns of ``out = requant(x @ weight_t + bias)`` (``weight_t`` is K x N).

    ``out`` is the rank's own value, ``N / tp`` columns wide; the POSTOP (``op.post``) is the whole layer's.
    """
    c0, w = split(weight_t.shape[1], tp, rank)
    g.add_const(f"{name}.weight", np.ascontiguousarray(weight_t[:, c0:c0 + w]))
    g.add(QMatmul(name, ((x, View(f"{name}.weight")),), out, None if bias is None else bias[c0:c0 + w].copy(),
                  op.post))


def row_parallel(g: Graph, name: str, x: View, out: str, weight_t: np.ndarray, op: QMatmul, tp: int, rank: int,
                 residual: tuple[View, View] | None = None, sequence_parallel: bool = False) -> None:
    """Rank ``rank``'s part of value ``out = requant(x @ weight_t + residual + bias)``, the int32 sums all-reduced.

    ``x`` is the rank's own block of the input's columns (``K / tp``); ``weight_t`` (K x N) is the whole
    layer's, of which the rank takes its block of rows.  ``residual`` (``(r, c I)``: a whole value of N
    columns and the name of an identity constant times ``c``, already in ``g``) is split as the product is:
    the rank adds its block of ``r``'s columns times its block of the identity's rows.  Adds the int32 value
    ``{out}.acc`` to ``g``.  With ``sequence_parallel`` the sums are reduce-scattered instead and the rank
    requantises only its block of rows of ``out`` (Megatron-LM's sequence parallelism: the caller gathers).
    """
    r0, k = split(weight_t.shape[0], tp, rank)
    acc = f"{out}.acc"
    rows, cols = g.values[out].shape
    g.add_value(Value(acc, rows, cols, "int32"))
    g.add_const(f"{name}.weight", np.ascontiguousarray(weight_t[r0:r0 + k]))
    terms: tuple[tuple[View, View], ...] = ((x, View(f"{name}.weight")),)
    if residual is not None:
        (res, identity), (n0, n) = residual, split(cols, tp, rank)
        terms += ((View(res.value, col0=n0, cols=n), View(identity.value, row0=n0, rows=n)),)
    g.add(QMatmul(f"{name}.partial", terms, View(acc), None, None))
    if not sequence_parallel:
        g.add(Collective(f"{name}.all_reduce", "all_reduce", acc))
        g.add(Requantize(name, View(acc), View(out), op.bias, op.post))
        return
    s0, sn = split(rows, tp, rank)
    g.add(Collective(f"{name}.reduce_scatter", "reduce_scatter", acc))
    g.add(Requantize(name, View(acc, row0=s0, rows=sn), View(out, row0=s0, rows=sn), op.bias, op.post))


def shard_block(quant: EncoderQuant, size: BlockSize, tp: int, rank: int, *, sequence_parallel: bool = True) -> Graph:
    """Rank ``rank`` of ``tp``'s graph of the quantised block (:func:`~..workloads.encoder.quantize_encoder`).

    Its input and output are the whole block's (``x`` and ``out``, on every rank); run it with a collective
    runner over the ``tp`` ranks (:class:`~.tensor_run.TensorParallel`).  With ``sequence_parallel`` (the
    default) what Megatron-LM's plain tensor parallelism runs on every rank is split by rows instead: each
    rank runs both layer norms and both POSTOPs after the row-parallel products on its block of the
    sequence, the products' sums are reduce-scattered rather than all-reduced, and the normalised
    activations, the residual stream and the output are all-gathered.

    Raises
    ------
    ValueError
        ``tp`` does not divide the heads, the MLP width or (sequence-parallel) the sequence, or ``rank`` is not
        one of ``0 .. tp - 1``.
    """
    check_degree(tp, "the block", size.heads, "attention heads")
    check_degree(tp, "the block", size.ffn, "MLP columns")
    if sequence_parallel:
        check_degree(tp, "the block", size.seq, "sequence rows")
    if not 0 <= rank < tp:
        raise ValueError(f"rank must be from 0 to {tp - 1}, not {rank!r}")
    src, ops = quant.graph, {op.name: op for op in quant.graph.ops}
    seq, d, dh = size.seq, size.model, size.head
    hp = size.heads // tp
    c0, w = split(d, tp, rank)
    f0, fw = split(size.ffn, tp, rank)
    g = Graph()
    g.add_input(src.values["x"])
    for name in ("xq", "h", "hT", "x1", "h2", "y"):
        _copy_value(g, src, name)
    _copy_value(g, src, "q", cols=w)
    _copy_value(g, src, "kT", rows=w)
    _copy_value(g, src, "v", cols=w)
    _copy_value(g, src, "scores", cols=hp * seq)
    _copy_value(g, src, "p", cols=hp * seq)
    _copy_value(g, src, "o", cols=w)
    gelu = "fpre" in src.values
    for name in (("fpre", "f") if gelu else ("f",)):
        _copy_value(g, src, name, cols=fw)
    _copy_value(g, src, "out")
    for name in ("residual1.identity", "residual2.identity"):
        g.add_const(name, src.consts[name])

    def same(name: str) -> None:
        op = ops[name]
        assert isinstance(op, (HostOp, VectorKernel))
        g.add(op)

    s0, sn = split(seq, tp, rank)

    def norm(name: str, x: str, out: str) -> None:
        op = ops[name]
        assert isinstance(op, VectorKernel)
        if not sequence_parallel:
            g.add(op)
            return
        g.kernel(name, View(x, row0=s0, rows=sn), View(out, row0=s0, rows=sn), op.kernel)

    def gather(value: str) -> None:
        if sequence_parallel:
            g.add(Collective(f"{value}.all_gather", "all_gather", value))

    same("quantize")
    norm("layer_norm1", "xq", "h")
    gather("h")
    same("transpose")
    for proj, out in (("q_proj", "q"), ("v_proj", "v")):
        op = ops[proj]
        column_parallel(g, proj, View("h"), View(out), src.consts[f"{proj}.weight"], op.bias, op, tp, rank)
    g.add_const("k_proj.weight", np.ascontiguousarray(src.consts["k_proj.weight"][c0:c0 + w]))
    g.add(QMatmul("k_proj", ((View("k_proj.weight"), View("hT")),), View("kT"), None, ops["k_proj"].post))
    for j in range(hp):
        i = rank * hp + j
        g.add(QMatmul(f"scores{i}", ((View("q", col0=j * dh, cols=dh), View("kT", row0=j * dh, rows=dh)),),
                      View("scores", col0=j * seq, cols=seq), None, ops[f"scores{i}"].post))
    softmax = ops["softmax"]
    assert isinstance(softmax, VectorKernel) and isinstance(softmax.kernel, Softmax)
    g.kernel("softmax", "scores", "p", dataclasses.replace(softmax.kernel, groups=hp))
    for j in range(hp):
        i = rank * hp + j
        g.add(QMatmul(f"attend{i}", ((View("p", col0=j * seq, cols=seq), View("v", col0=j * dh, cols=dh)),),
                      View("o", col0=j * dh, cols=dh), None, ops[f"attend{i}"].post))
    row_parallel(g, "out_proj", View("o"), "x1", src.consts["out_proj.weight"], ops["out_proj"], tp, rank,
                 residual=(View("xq"), View("residual1.identity")), sequence_parallel=sequence_parallel)
    norm("layer_norm2", "x1", "h2")
    gather("h2")
    gather("x1")
    ffn1 = ops["ffn1"]
    column_parallel(g, "ffn1", View("h2"), View("fpre" if gelu else "f"), src.consts["ffn1.weight"], ffn1.bias,
                    ffn1, tp, rank)
    if gelu:
        same("gelu")
    row_parallel(g, "ffn2", View("f"), "y", src.consts["ffn2.weight"], ops["ffn2"], tp, rank,
                 residual=(View("x1"), View("residual2.identity")), sequence_parallel=sequence_parallel)
    gather("y")
    same("dequantize")
    g.outputs = list(src.outputs)
    g.validate()
    return g


def shard_mlp(graph: Graph, tp: int, rank: int) -> Graph:
    """Rank ``rank`` of ``tp``'s graph of a two-layer MLP: ``quantize``, ``fc1`` (column-parallel), ``fc2``
    (row-parallel), ``dequantize``, the operators and values :func:`~.problems.mlp_problem` names.

    Raises
    ------
    ValueError
        ``tp`` does not divide the hidden width, or the graph is not such an MLP.
    """
    ops = {op.name: op for op in graph.ops}
    if [op.name for op in graph.ops] != ["quantize", "fc1", "fc2", "dequantize"]:
        raise ValueError(f"an MLP to shard has the operators quantize, fc1, fc2, dequantize, not "
                         f"{', '.join(op.name for op in graph.ops)}")
    hidden = graph.values["hidden"].cols
    check_degree(tp, "the MLP", hidden, "hidden columns")
    if not 0 <= rank < tp:
        raise ValueError(f"rank must be from 0 to {tp - 1}, not {rank!r}")
    g = Graph()
    g.add_input(graph.values["x"])
    _copy_value(g, graph, "xq")
    _copy_value(g, graph, "hidden", cols=hidden // tp)
    _copy_value(g, graph, "y")
    _copy_value(g, graph, "out")
    g.add(ops["quantize"])
    fc1, fc2 = ops["fc1"], ops["fc2"]
    column_parallel(g, "fc1", View("xq"), View("hidden"), graph.consts["fc1.weight"], fc1.bias, fc1, tp, rank)
    row_parallel(g, "fc2", View("hidden"), "y", graph.consts["fc2.weight"], fc2, tp, rank)
    g.add(ops["dequantize"])
    g.outputs = list(graph.outputs)
    g.validate()
    return g
