"""Tensor and pipeline parallelism together: 2 stages, each a TP = 2 group (a board of two chips, over its link),
bit for bit one chip's output; the bubble as for a plain pipeline; bad layouts and a failing stage refused."""

from __future__ import annotations

import numpy as np
import pytest

from dx1_bringup.collectives import DeviceGroup
from dx1_bringup.parallel.hybrid import TensorPipeline
from dx1_bringup.parallel.pipeline import PipelineParallel, bubble_formula
from dx1_bringup.parallel.problems import stack
from dx1_bringup.parallel.tensor import shard_block
from dx1_bringup.workloads.encoder import BlockSize

SIZE = BlockSize(16, 32, 2, 64)


def _stages(layers, tp: int, parts: list[list[int]]):
    return [[[shard_block(layers[i].quant, SIZE, tp, r) for r in range(tp)] for i in part] for part in parts]


@pytest.mark.parametrize(("schedule", "board"), [("1f1b", "model:chips=2"), ("gpipe", "model*2")])
def test_two_stages_of_two_chips_equal_one_chip(schedule, board):
    layers = stack("encoder", SIZE, 2)
    rng = np.random.default_rng(5)
    xs = [rng.standard_normal((SIZE.seq, SIZE.model)).astype(np.float32) for _ in range(4)]
    with DeviceGroup.open("model") as g, PipelineParallel(g, [[p.quant.graph for p in layers]]) as one:
        want, _ = one.run(xs)
    groups = [DeviceGroup.open(board), DeviceGroup.open(board)]
    try:
        assert groups[0].has_link == (board == "model:chips=2")
        with TensorPipeline(groups, _stages(layers, 2, [[0], [1]]), schedule=schedule) as run:
            got, stats = run.run(xs)
    finally:
        for g in groups:
            g.close()
    assert len(got) == 4 and all(np.array_equal(a, b) for a, b in zip(got, want, strict=True))
    assert stats.cycles.shape == (2, 4) and (stats.cycles > 0).all()
    assert abs(stats.timeline.bubble - bubble_formula(2, 4)) < 0.05
    assert 1 <= stats.peak_in_flight <= (2 if schedule == "1f1b" else 4)


def test_bad_layouts_are_refused():
    layers = stack("encoder", SIZE, 1)
    with DeviceGroup.open("model*2") as g:
        with pytest.raises(ValueError, match="1 stages for 2 groups: one non-empty stage a group"):
            TensorPipeline([g, g], _stages(layers, 2, [[0]]))
        with pytest.raises(ValueError, match="stage 0: every layer needs a graph for each of its group's 2 ranks"):
            TensorPipeline([g], [[[layers[0].quant.graph]]])
        with pytest.raises(ValueError, match="the schedule must be one of gpipe, 1f1b, not 'zb'"):
            TensorPipeline([g], _stages(layers, 2, [[0]]), schedule="zb")


def test_a_failing_stage_ends_the_run_with_its_error():
    layers = stack("encoder", SIZE, 2)
    rng = np.random.default_rng(5)
    xs = [rng.standard_normal((SIZE.seq, SIZE.model)).astype(np.float32) for _ in range(3)]
    groups = [DeviceGroup.open("model*2"), DeviceGroup.open("model*2")]
    try:
        with TensorPipeline(groups, _stages(layers, 2, [[0], [1]]), timeout=5.0) as run:
            bad = [xs[0], xs[1][:, :8], xs[2]]  # micro-batch 1 has the wrong shape: stage 0 refuses it
            with pytest.raises(ValueError, match=r"input 'x' must be a float32 array of shape \(16, 32\), not float32 "
                                                 r"\(16, 8\)"):
                run.run(bad)
    finally:
        for g in groups:
            g.close()
