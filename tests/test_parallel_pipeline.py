"""Pipeline parallelism: stages on golden-model chips, micro-batches, the bubble against (p-1)/(m+p-1)."""

from __future__ import annotations

import numpy as np
import pytest

from dx1_bringup.collectives import DeviceGroup
from dx1_bringup.parallel.pipeline import PipelineParallel, balanced_stages, bubble_formula, replay
from dx1_bringup.parallel.problems import stack
from dx1_bringup.workloads.encoder import BlockSize

SIZE = BlockSize(16, 32, 2, 64)


def test_formula_and_replay():
    assert bubble_formula(4, 8) == pytest.approx(3 / 11)
    even = replay(np.full((4, 8), 100.0), "gpipe")
    assert even.makespan == 1100 and even.bubble == pytest.approx(3 / 11)
    # A slow stage sets the pace: imbalance shows, and the bubble grows past the formula.
    uneven = replay(np.array([[100.0] * 8, [200.0] * 8]), "gpipe")
    assert uneven.imbalance == pytest.approx(1 / 3) and uneven.bubble > bubble_formula(2, 8) + 0.05
    # 1F1B admits micro-batch i only when i - p has left: on balanced stages that costs nothing ...
    assert replay(np.full((4, 8), 100.0), "1f1b").makespan == 1100
    # ... and with a slow last stage it holds stage 0 back.
    late = np.array([[10.0] * 8, [100.0] * 8])
    assert replay(late, "1f1b").start[0, 2] == replay(late, "1f1b").end[1, 0]
    assert replay(late, "gpipe").start[0, 2] == 20


def test_balanced_stages():
    assert balanced_stages([1, 1, 1, 1], 2) == [range(0, 2), range(2, 4)]
    assert balanced_stages([5, 1, 1, 1, 1, 1], 2) == [range(0, 1), range(1, 6)]
    with pytest.raises(ValueError, match="the stages must be from 1 to the 2 layers, not 3"):
        balanced_stages([1, 1], 3)


@pytest.mark.parametrize("schedule", ["gpipe", "1f1b"])
def test_pipeline_on_two_chips(schedule):
    layers = stack("encoder", SIZE, 2)
    rng = np.random.default_rng(5)
    xs = [rng.standard_normal((SIZE.seq, SIZE.model)).astype(np.float32) for _ in range(4)]
    with DeviceGroup.open("model") as g, PipelineParallel(g, [[p.quant.graph for p in layers]]) as one:
        want, _ = one.run(xs)
    with DeviceGroup.open("model*2") as g, PipelineParallel(g, [[layers[0].quant.graph], [layers[1].quant.graph]],
                                                             schedule=schedule) as pp:
        got, stats = pp.run(xs)
    assert len(got) == 4 and all(np.array_equal(a, b) for a, b in zip(got, want, strict=True))
    assert abs(stats.timeline.bubble - bubble_formula(2, 4)) < 0.05
    assert stats.cycles.shape == (2, 4) and (stats.cycles > 0).all()
    assert 1 <= stats.peak_in_flight <= 2


def test_pipeline_refuses():
    layers = stack("encoder", SIZE, 1)
    with DeviceGroup.open("model*2") as g:
        with pytest.raises(ValueError, match="1 stages for a group of 2 ranks"):
            PipelineParallel(g, [[layers[0].quant.graph]])
        with pytest.raises(ValueError, match="the schedule must be one of gpipe, 1f1b, not 'zb'"):
            PipelineParallel(g, [[layers[0].quant.graph]] * 2, schedule="zb")


def test_traces(tmp_path):
    from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import Trace, TrackEvent

    from dx1_bringup.parallel.trace import pipeline_trace, tensor_trace
    from dx1_bringup.timeline import write

    pp = pipeline_trace(replay(np.full((2, 3), 100.0), "gpipe"), ["model", "model"])
    assert pp.slice_count("stage 1: model", "passes") == 3
    assert [s.start_ns for s in pp.lanes("stage 1: model", "passes")[0].slices] == [100, 200, 300]
    tp = tensor_trace([[10, 30], [20, 5]], ["model", "model"])
    # Segment 1 starts on both ranks when the slowest finished segment 0; the faster rank waits.
    assert [s.start_ns for s in tp.lanes("rank 0: model", "device")[0].slices] == [0, 20]
    assert [s.start_ns for s in tp.lanes("rank 1: model", "device")[0].slices] == [0, 20]
    assert [(s.start_ns, s.end_ns) for s in tp.lanes("rank 0: model", "waiting")[0].slices] == [(10, 20)]
    path = tmp_path / "pp.pftrace"
    write(pp, path)
    trace = Trace.FromString(path.read_bytes())
    begins = [p.track_event.name for p in trace.packet
              if p.HasField("track_event") and p.track_event.type == TrackEvent.TYPE_SLICE_BEGIN]
    assert sorted(begins) == sorted([f"micro-batch {i}" for i in range(3)] * 2)
