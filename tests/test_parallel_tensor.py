"""Tensor parallelism: the MLP, encoder and decoder blocks split over 1, 2 and 4 golden-model chips.

Every degree must give the one-chip graph's output bit for bit (and so the PyTorch int reference's): the
row-parallel layers all-reduce (or reduce-scatter) int32 accumulators before the POSTOP.
"""

from __future__ import annotations

import numpy as np
import pytest
from dx1_driver import Device

from dx1_bringup.collectives import DeviceGroup
from dx1_bringup.parallel.problems import block, mlp_problem
from dx1_bringup.parallel.tensor import shard_block, shard_mlp
from dx1_bringup.parallel.tensor_run import TensorParallel
from dx1_bringup.runtime.graph import Collective, Graph, GraphSession, QMatmul, Value, View
from dx1_bringup.torch.graph_reference import run_reference
from dx1_bringup.workloads.encoder import BlockSize

#: Four heads, so that TP = 4 has a head a chip.
SIZE = BlockSize(16, 32, 4, 64)


def _one_chip(graph: Graph, x: np.ndarray) -> np.ndarray:
    dev = Device.open("model")
    try:
        with GraphSession(dev, graph) as session:
            out, _ = session.run({"x": x})
    finally:
        dev.close()
    return out["out"]


def _parallel(graphs: list[Graph], x: np.ndarray):
    with DeviceGroup.open(f"model*{len(graphs)}") as group, TensorParallel(group, graphs) as run:
        return run.run({"x": x})


def test_mlp_tp_bit_identical():
    graph, x = mlp_problem(16, 32, 64)
    want = _one_chip(graph, x)
    assert np.array_equal(want, run_reference(graph, {"x": x})["out"])
    cycles = {}
    for tp in (1, 2, 4):
        outs, stats = _parallel([shard_mlp(graph, tp, r) for r in range(tp)], x)
        assert all(np.array_equal(o["out"], want) for o in outs), f"TP={tp}"
        assert stats.collectives == 1  # one all-reduce for the two layers
        cycles[tp] = stats.cycles
    assert cycles[1] > cycles[2] > cycles[4]


@pytest.mark.parametrize("kind", ["encoder", "decoder"])
@pytest.mark.parametrize("sequence_parallel", [False, True])
def test_block_tp_bit_identical(kind, sequence_parallel):
    p = block(kind, SIZE)
    want = _one_chip(p.quant.graph, p.x)
    assert np.array_equal(want, run_reference(p.quant.graph, {"x": p.x})["out"])
    for tp in (1, 2, 4):
        graphs = [shard_block(p.quant, p.size, tp, r, sequence_parallel=sequence_parallel) for r in range(tp)]
        outs, stats = _parallel(graphs, p.x)
        assert all(np.array_equal(o["out"], want) for o in outs), f"{kind} TP={tp}"
        # Megatron-LM: one all-reduce per attention block and one per MLP block; sequence-parallel, two
        # reduce-scatters and four all-gathers (h, h2, x1, y).
        kinds = [op.kind for op in graphs[0].ops if isinstance(op, Collective)]
        assert kinds == (["all_gather", "reduce_scatter", "all_gather", "all_gather", "reduce_scatter",
                          "all_gather"] if sequence_parallel else ["all_reduce", "all_reduce"])
        assert stats.collectives == len(kinds)
        assert stats.imbalance < 0.01


def test_heads_per_chip():
    p = block("encoder", SIZE)
    g = shard_block(p.quant, p.size, 2, 1)
    assert [op.name for op in g.ops if op.name.startswith("scores")] == ["scores2", "scores3"]
    assert g.values["q"].cols == 16 and g.values["kT"].rows == 16 and g.values["f"].cols == 32


def test_degree_errors():
    p = block("encoder", SIZE)
    with pytest.raises(ValueError, match="tensor parallelism 3 must divide the block's 4 attention heads"):
        shard_block(p.quant, p.size, 3, 0)
    with pytest.raises(ValueError, match="rank must be from 0 to 1, not 2"):
        shard_block(p.quant, p.size, 2, 2)
    graph, _ = mlp_problem(16, 32, 24)
    with pytest.raises(ValueError, match="tensor parallelism 5 must divide the MLP.s 24 hidden columns"):
        shard_mlp(graph, 5, 0)


def test_collective_needs_a_runner():
    g = Graph()
    g.add_input(Value("x", 8, 8, "int8"))
    g.add_const("w", np.eye(8, dtype=np.int8))
    g.add_value(Value("acc", 8, 8, "int32"))
    g.add(QMatmul("partial", ((View("x"), View("w")),), View("acc"), None, None))
    g.add(Collective("sum", "all_reduce", "acc"))
    g.outputs = ["acc"]
    dev = Device.open("model")
    try:
        with pytest.raises(ValueError, match="the graph has collectives; the session needs a collective runner"):
            GraphSession(dev, g)
    finally:
        dev.close()
    with pytest.raises(ValueError, match="a collective is one of all_reduce, reduce_scatter, all_gather, not 'bcast'"):
        Collective("x", "bcast", "a")


@pytest.mark.parametrize("tp", [2, 4])
def test_block_tp_over_the_chip_link(tp):
    """On a board of chips (model:chips=N) the collectives run over the link; their cycles count."""
    p = block("encoder", SIZE)
    want = _one_chip(p.quant.graph, p.x)
    graphs = [shard_block(p.quant, p.size, tp, r) for r in range(tp)]
    with DeviceGroup.open(f"model:chips={tp}") as group, TensorParallel(group, graphs) as run:
        outs, stats = run.run({"x": p.x})
    assert all(np.array_equal(o["out"], want) for o in outs)
    assert stats.collective_cycles > 0 and stats.cycles > sum(
        max(s.segment_cycles[i] for s in stats.per_rank) for i in range(len(stats.per_rank[0].segment_cycles)))
    _, host_staged = _parallel(graphs, p.x)
    assert host_staged.collective_cycles == 0
