"""Data parallelism: replicas behind the scheduler, a stalled replica fenced, every request answered once."""

from __future__ import annotations

import numpy as np
import pytest
from dx1_driver import Device

from dx1_bringup.parallel.data import DataParallel, NoReplicaLeft, Request
from dx1_bringup.parallel.problems import mlp_problem
from dx1_bringup.runtime.graph import GraphSession

STALLED = "model:stall=core0+core1"


def _open(names):
    return [Device.open(n) for n in names]


@pytest.fixture(scope="module")
def mlp():
    graph, _ = mlp_problem(16, 32, 64)
    rng = np.random.default_rng(3)
    xs = [rng.standard_normal((16, 32)).astype(np.float32) for _ in range(10)]
    dev = Device.open("model")
    with GraphSession(dev, graph) as s:
        want = [s.run({"x": x})[0]["out"] for x in xs]
    dev.close()
    return graph, xs, want


def test_balance_and_identity(mlp):
    graph, xs, want = mlp
    devs = _open(["model", "model", "model:tiles=1"])
    try:
        with DataParallel(devs, {"mlp": graph}) as dp:
            cost = [r.cost["mlp"] for r in dp.replicas]
            results, report = dp.serve([Request(i, "mlp", {"x": x}) for i, x in enumerate(xs)])
    finally:
        for d in devs:
            d.close()
    assert cost[0] == cost[1] < cost[2]  # one tile is predicted slower than two
    assert all(np.array_equal(results[i]["out"], want[i]) for i in range(len(xs)))
    assert sum(report.per_replica) == len(xs) and min(report.per_replica) >= 2
    # The two-tile replicas take at least as many as the one-tile one.
    assert report.per_replica[0] >= report.per_replica[2] and report.per_replica[1] >= report.per_replica[2]


def test_stalled_replica_fenced(mlp):
    graph, xs, want = mlp
    devs = _open(["model", STALLED, "model"])
    try:
        with DataParallel(devs, {"mlp": graph}, timeout=0.5, request_timeout=5.0) as dp:
            results, report = dp.serve([Request(i, "mlp", {"x": x}) for i, x in enumerate(xs)])
    finally:
        for d in devs:
            d.close()
    assert list(report.fenced) == [1] and report.moved >= 1
    assert sorted(results) == list(range(len(xs))) and 1 not in report.served_by.values()
    assert report.per_replica[1] == 0 and sum(report.per_replica) == len(xs)  # each exactly once
    assert all(np.array_equal(results[i]["out"], want[i]) for i in range(len(xs)))


def test_every_replica_fenced(mlp):
    graph, xs, _ = mlp
    devs = _open([STALLED])
    try:
        with DataParallel(devs, {"mlp": graph}, timeout=0.3) as dp:
            with pytest.raises(NoReplicaLeft, match=r"every replica is fenced: replica 0 \(model:stall"):
                dp.serve([Request(0, "mlp", {"x": xs[0]})])
    finally:
        devs[0].close()


def test_requests_checked(mlp):
    graph, xs, _ = mlp
    devs = _open(["model"])
    try:
        with DataParallel(devs, {"mlp": graph}) as dp:
            with pytest.raises(ValueError, match=r"requests name models the replicas do not hold: \['gpt'\]"):
                dp.serve([Request(0, "gpt", {"x": xs[0]})])
            with pytest.raises(ValueError, match="every request needs an id of its own"):
                dp.serve([Request(0, "mlp", {"x": xs[0]}), Request(0, "mlp", {"x": xs[1]})])
    finally:
        devs[0].close()
