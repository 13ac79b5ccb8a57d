"""Quantisation arithmetic and the graph runtime (IR, liveness planning, whole-stream execution) on the model."""

from __future__ import annotations

import numpy as np
import pytest
from dx1_driver import Device

from dx1_bringup.runtime.graph import Graph, GraphSession, HostOp, Lifetime, Value, View, plan_arena
from dx1_bringup.runtime.quant import quantize, quantize_bias, requant_multiplier
from dx1_bringup.runtime.reference import reference_gemm
from dx1_bringup.spec import POSTOP_MAX_SHIFT
from dx1_bringup.spec import PostOpParams as PostOp


@pytest.mark.parametrize("real", [1.0, 0.5, 0.3333, 1e-3, 7.77e-6, 2.0 ** -30, 123.4, 65535.0])
def test_requant_multiplier_is_the_most_precise_pair(real):
    mult, shift = requant_multiplier(real)
    assert 0 < mult < 1 << 16 and 0 <= shift <= POSTOP_MAX_SHIFT
    assert abs(mult / 2 ** shift - real) <= 2.0 ** -(shift + 1) * 1.0000001
    # A larger shift would overflow the multiplier (or is past the field's limit).
    assert shift == POSTOP_MAX_SHIFT or round(real * 2 ** (shift + 1)) >= 1 << 16


@pytest.mark.parametrize("real, message", [(0.0, "positive finite"), (-1.0, "positive finite"),
                                           (float("nan"), "positive finite"), (70000.0, "too large"),
                                           (2.0 ** -50, "every output would be 0")])
def test_requant_multiplier_refuses_what_the_postop_cannot_express(real, message):
    with pytest.raises(ValueError, match=message):
        requant_multiplier(real)


def test_quantize_rounds_half_away_from_zero_and_saturates():
    assert quantize(np.array([0.5, -0.5, 1.5, -1.5, 2.49, 200.0, -200.0]), 1.0).tolist() == [1, -1, 2, -2, 2, 127, -128]
    assert quantize_bias(np.array([2.5, -2.5]), 0.5).tolist() == [5, -5]
    with pytest.raises(ValueError, match="does not fit in int32"):
        quantize_bias(np.array([1e10]), 1.0)


def test_arena_never_overlaps_values_alive_together():
    rng = np.random.default_rng(3)
    for _ in range(50):
        lts = []
        for i in range(rng.integers(1, 12)):
            first = int(rng.integers(0, 10))
            lts.append(Lifetime(f"v{i}", int(rng.integers(1, 500)), first, first + int(rng.integers(0, 5))))
        plan = plan_arena(lts, 64)
        for a in lts:
            assert plan.offsets[a.name] % 64 == 0 and plan.offsets[a.name] + a.size <= plan.size
            for b in lts:
                if a is not b and a.overlaps(b):
                    a0, b0 = plan.offsets[a.name], plan.offsets[b.name]
                    assert a0 + a.size <= b0 or b0 + b.size <= a0, (a, b, plan)
        assert plan.size <= plan.unshared


def test_arena_shares_memory_between_layers_that_do_not_overlap():
    plan = plan_arena([Lifetime("x", 1000, 0, 1), Lifetime("h", 1000, 1, 2), Lifetime("y", 1000, 2, 3)], 8)
    assert plan.offsets["x"] == plan.offsets["y"] and plan.size == 2000


def _mlp_with_host_op(rng, m=20, k=30, h=40, n=10):
    g = Graph()
    g.add_input(Value("x", m, k, "int8"))
    for name, cols in (("h", h), ("y", n), ("z", n), ("u", n)):
        g.add_value(Value(name, m, cols, "int8"))
    w1 = rng.integers(-128, 128, (h, k), dtype=np.int8)
    b1 = rng.integers(-1000, 1000, h).astype(np.int32)
    w2 = rng.integers(-128, 128, (n, h), dtype=np.int8)
    w3 = rng.integers(-128, 128, (n, n), dtype=np.int8)
    p1, p2 = PostOp(3000, 20, True), PostOp(5000, 19, False)
    g.linear("fc1", "x", "h", w1, b1, p1)
    g.linear("fc2", "h", "y", w2, None, p2)
    g.add(HostOp("negate", ("y",), "z", lambda y: (-y.astype(np.int16)).clip(-128, 127).astype(np.int8)))
    g.linear("fc3", "z", "u", w3, None, p2)
    g.outputs = ["u", "y"]
    x = rng.integers(-128, 128, (m, k), dtype=np.int8)
    y = reference_gemm(reference_gemm(x, w1.T.copy(), b1, p1), w2.T.copy(), None, p2)
    z = (-y.astype(np.int16)).clip(-128, 127).astype(np.int8)
    return g, x, {"y": y, "u": reference_gemm(z, w3.T.copy(), None, p2)}


@pytest.mark.parametrize("tiles", [1, 2])
def test_graph_runs_device_segments_as_whole_streams(tiles):
    g, x, expect = _mlp_with_host_op(np.random.default_rng(tiles))
    with Device.open("model") as dev, GraphSession(dev, g, tiles=tiles) as session:
        assert [s.device for s in session.segments] == [True, False, True]
        assert session.segments[0].uploads == ["x"] and session.segments[0].downloads == ["y"]
        assert g.placement() == [("fc1", "device"), ("fc2", "device"), ("negate", "host"), ("fc3", "device")]
        for _ in range(2):  # weights stay resident: a second pass uploads only the activations
            out, stats = session.run({"x": x})
            assert np.array_equal(out["y"], expect["y"]) and np.array_equal(out["u"], expect["u"])
            assert stats.transfers == 4 and stats.device_segments == 2 and stats.host_ops == 1
        assert "negate" in session.plan_text() and "resident" in session.plan_text()


def test_graph_session_says_what_is_wrong_with_its_inputs():
    g, x, _ = _mlp_with_host_op(np.random.default_rng(0))
    with Device.open("model") as dev, GraphSession(dev, g) as session:
        with pytest.raises(ValueError, match="missing"):
            session.run({})
        with pytest.raises(ValueError, match="must be a int8 array of shape"):
            session.run({"x": x.astype(np.int16)})


def test_graph_validation_and_memory_errors():
    g = Graph()
    g.add_input(Value("x", 4, 8, "int8"))
    g.add_value(Value("y", 4, 9, "int8"))
    g.linear("fc", "x", "y", np.zeros((8, 8), np.int8), None, PostOp(1, 0))
    with pytest.raises(ValueError, match=r"cannot give y \(4x9\)"):
        g.validate()
    big = Graph()
    big.add_input(Value("x", 4096, 512, "int8"))
    big.add_value(Value("y", 4096, 512, "int8"))
    big.linear("fc", "x", "y", np.zeros((512, 512), np.int8), None, PostOp(1, 0))
    with Device.open("model") as dev, pytest.raises(ValueError, match="bytes of device memory"):
        GraphSession(dev, big)
    with pytest.raises(ValueError, match="shift must be"):
        PostOp(1, 48)


def test_back_to_back_barriers_over_four_tiles_neither_deadlock_nor_let_a_tile_run_ahead():
    """Products too small for four tiles leave three with nothing between barriers: with one set of
    semaphores such a tile takes a second unit of another's signal and the others wait for ever."""
    rng = np.random.default_rng(11)
    g = Graph()
    g.add_input(Value("x", 32, 16, "int8"))
    for name in ("a", "b", "c", "d"):
        g.add_value(Value(name, 32, 16, "int8"))
    post = PostOp(*requant_multiplier(1 / 64))
    w = [rng.integers(-20, 20, (16, 16), dtype=np.int8) for _ in range(4)]
    g.linear("l1", "x", "a", w[0], None, post)
    g.linear("l2", View("a", rows=8), View("b", rows=8), w[1], None, post)  # one tile's worth of rows
    g.linear("l3", View("b", rows=8), View("c", rows=8), w[2], None, post)
    g.linear("l4", View("c", rows=8), View("d", rows=8), w[3], None, post)
    g.outputs = ["d"]
    x = rng.integers(-128, 128, (32, 16), dtype=np.int8)
    with Device.open("model:tiles=4") as dev, GraphSession(dev, g, timeout=2.0) as session:
        out, stats = session.run({"x": x})
        assert session.segments[0].barriers == 3
    want = x[:8]
    for wi in w:
        want = reference_gemm(want, wi.T, None, post)
    assert np.array_equal(out["d"][:8], want) and stats.tiles == 4
